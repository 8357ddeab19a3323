//! Algebraic properties of the Section 4 denotations, and the well-typed heap
//! invariant (§3.3) after every step of random programs.

use crate::support;

use proptest::prelude::*;
use support::*;
use tc_core::ir::{BinaryOp, Op, ReduceOp, Scalar, UnaryOp, Value};
use tc_core::{Dim, Dtype};
use tc_runtime::contract::{bind, Arg};
use tc_runtime::interp::{no_calls, Interpreter};
use tc_runtime::{Elem, Tensor};

fn cfg() -> ProptestConfig {
    ProptestConfig {
        // Miri (scripts/miri.sh) interprets every step: a few programs each.
        cases: if cfg!(miri) { 4 } else { 64 },
        ..ProptestConfig::default()
    }
}

/// A value of `dt` from a random integer (floats: multiples of ½ in [−8, 8]).
fn elem(dt: Dtype, v: i64) -> Elem {
    match dt {
        Dtype::Bool => Elem::B(v & 1 == 1),
        d if d.is_int() => {
            let (lo, hi) = d.int_range().unwrap();
            Elem::I(if d == Dtype::I64 {
                v
            } else {
                lo + v.rem_euclid(hi - lo + 1)
            })
        }
        _ => Elem::F((v.rem_euclid(33) - 16) as f32 * 0.5),
    }
}

/// A random tensor: dtype, shape (rank 1–4, dims 1–4) and values.
fn tensor_strategy(dtypes: Vec<Dtype>) -> impl Strategy<Value = Tensor> {
    (
        prop::sample::select(dtypes),
        prop::collection::vec(1usize..5, 1..5),
    )
        .prop_flat_map(|(dt, shape)| {
            let n: usize = shape.iter().product();
            prop::collection::vec(any::<i64>(), n).prop_map(move |vs| {
                let e: Vec<Elem> = vs.iter().map(|&v| elem(dt, v)).collect();
                Tensor::from_elems(dt, &shape, &e).unwrap()
            })
        })
}

/// Variable dims `D0, D1, …` for a tensor of rank `r`.
fn var_dims(r: usize) -> Vec<Dim> {
    (0..r).map(|i| Dim::var(format!("D{i}"))).collect()
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn transpose_then_inverse_is_identity(
        (x, perm) in tensor_strategy(Dtype::ALL.to_vec()).prop_flat_map(|x| {
            let r = x.shape().len();
            (Just(x), Just((0..r).collect::<Vec<_>>()).prop_shuffle())
        })
    ) {
        let mut inv = vec![0; perm.len()];
        for (j, &p) in perm.iter().enumerate() {
            inv[p] = j;
        }
        let mut b = FnBuilder::new("tt");
        let v = b.tensor("x", x.dtype(), var_dims(x.shape().len()));
        let t = b.op(Op::Transpose(perm.clone(), v));
        let u = b.op(Op::Transpose(inv, t));
        let f = b.ret(u, tt(x.dtype(), var_dims(x.shape().len())));
        let out = run_outcome(&f, vec![x.clone().into()]).unwrap();
        let mid = &out.heap.get(tc_runtime::Handle(1)).unwrap().data;
        let want: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        prop_assert_eq!(mid.shape(), want.as_slice());
        prop_assert!(same(&out.value, &x));
    }

    #[test]
    fn concat_of_two_slices_is_the_original(
        (x, axis, k) in tensor_strategy(Dtype::ALL.to_vec()).prop_flat_map(|x| {
            let r = x.shape().len();
            (Just(x), 0..r)
        }).prop_flat_map(|(x, axis)| {
            let d = x.shape()[axis];
            (Just(x), Just(axis), 0..=d)
        })
    ) {
        let r = x.shape().len();
        let mut b = FnBuilder::new("cs");
        let v = b.tensor("x", x.dtype(), var_dims(r));
        let lo = b.op(Op::Slice { axis, start: Dim::c(0), stop: Dim::c(k as i64), step: 1, x: v });
        let hi = b.op(Op::Slice { axis, start: Dim::c(k as i64), stop: Dim::var(format!("D{axis}")), step: 1, x: v });
        let c = b.op(Op::Concat(axis, vec![lo, hi]));
        let f = b.ret(c, tt(x.dtype(), var_dims(r)));
        let out = run(&f, vec![x.clone().into()]).unwrap();
        prop_assert!(same(&out, &x));
    }

    #[test]
    fn reshape_round_trip(x in tensor_strategy(Dtype::ALL.to_vec())) {
        let r = x.shape().len();
        let vol = var_dims(r).into_iter().fold(Dim::c(1), |a, d| a * d);
        let mut b = FnBuilder::new("rr");
        let v = b.tensor("x", x.dtype(), var_dims(r));
        let flat = b.op(Op::Reshape(vec![vol.clone()], v));
        let back = b.op(Op::Reshape(var_dims(r), flat));
        let f = b.ret(back, tt(x.dtype(), var_dims(r)));
        let out = run_outcome(&f, vec![x.clone().into()]).unwrap();
        prop_assert_eq!(out.heap.get(tc_runtime::Handle(1)).unwrap().shape.clone(), vec![x.numel()]);
        prop_assert!(same(&out.value, &x));
    }

    #[test]
    fn broadcast_then_sum_equals_scale(
        dt in prop::sample::select(Dtype::ALL.iter().copied().filter(|d| d.is_numeric()).collect::<Vec<_>>()),
        vals in prop::collection::vec(any::<i64>(), 1..6),
        m in 1i64..6,
    ) {
        let n = vals.len();
        let x = Tensor::from_elems(dt, &[n], &vals.iter().map(|&v| elem(dt, v)).collect::<Vec<_>>()).unwrap();
        // all(sum(broadcast[M, N] x, axis 0) == M · x)
        let mut b = FnBuilder::new("bs");
        b.konst("M", m);
        let v = b.tensor("x", dt, ds(&["N"]));
        let bc = b.op(Op::Broadcast(ds(&["M", "N"]), v));
        let s = b.op(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false, x: bc });
        let k = b.op(Op::ScalarBinary { op: BinaryOp::Mul, x: v, s: Scalar::Int(m), scalar_left: true });
        let e = b.op(Op::Binary(BinaryOp::Eq, s, k));
        let all = b.op(Op::Reduce { op: ReduceOp::All, axes: vec![0], keepdims: false, x: e });
        let f = b.ret(all, tt(Dtype::Bool, vec![]));
        let out = run_outcome(&f, vec![x.into()]).unwrap();
        let sum = out.heap.get(tc_runtime::Handle(2)).unwrap().data.clone();
        let scaled = out.heap.get(tc_runtime::Handle(3)).unwrap().data.clone();
        prop_assert!(same(&sum, &scaled), "{:?} vs {:?}", sum.to_elems(), scaled.to_elems());
        prop_assert_eq!(bv(&out.value), vec![true]);
    }

    /// Random well-typed programs: every step allocates exactly one handle
    /// and the heap stays well-typed (§3.3) after each one.
    #[test]
    fn every_step_preserves_the_heap_invariant(
        dt in prop::sample::select(vec![Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::F8E4M3, Dtype::F8E5M2]),
        a in 1usize..4,
        c in 1usize..4,
        ops in prop::collection::vec(0u8..10, 1..12),
        seed in any::<i64>(),
    ) {
        let x = Tensor::from_elems(dt, &[a, c], &(0..a * c).map(|k| elem(dt, seed.wrapping_add(k as i64 * 7))).collect::<Vec<_>>()).unwrap();
        let mut b = FnBuilder::new("rand");
        let mut cur = b.tensor("x", dt, ds(&["A", "C"]));
        let mut shape = vec![a, c];
        let mut cur_dt = dt;
        for code in ops {
            let (next, next_shape) = match code {
                0 => (b.op(Op::Unary(UnaryOp::Neg, cur)), shape.clone()),
                1 => (b.op(Op::Unary(UnaryOp::Tanh, cur)), shape.clone()),
                2 => (b.op(Op::Binary(BinaryOp::Add, cur, cur)), shape.clone()),
                3 => (b.op(Op::Transpose(vec![1, 0], cur)), vec![shape[1], shape[0]]),
                4 => {
                    let ax = shape.iter().position(|&d| d > 1).unwrap_or(0);
                    let mut s = shape.clone();
                    s[ax] = 1;
                    (b.op(Op::Reduce { op: ReduceOp::Sum, axes: vec![ax], keepdims: true, x: cur }), s)
                }
                5 => {
                    let s: Vec<usize> = shape.iter().map(|&d| if d == 1 { 3 } else { d }).collect();
                    (b.op(Op::Broadcast(cs(&s), cur)), s)
                }
                6 => {
                    let to = if cur_dt == Dtype::BF16 { Dtype::F32 } else { Dtype::BF16 };
                    cur_dt = to;
                    (b.op(Op::Cast(to, cur)), shape.clone())
                }
                7 if shape[0] < 8 => (b.op(Op::Concat(0, vec![cur, cur])), vec![shape[0] * 2, shape[1]]),
                8 => (b.op(Op::Slice { axis: 1, start: Dim::c(0), stop: Dim::c(1), step: 1, x: cur }), vec![shape[0], 1]),
                9 => {
                    let t = b.op(Op::Transpose(vec![1, 0], cur));
                    (b.op(Op::Matmul(cur, t)), vec![shape[0], shape[0]])
                }
                _ => (b.op(Op::Reshape(cs(&[shape[0] * shape[1]]), cur)), vec![shape[0] * shape[1]]),
            };
            if next_shape.len() == 1 {
                // Keep rank 2 so every op of the menu stays applicable.
                cur = b.op(Op::Reshape(cs(&[1, next_shape[0]]), next));
                shape = vec![1, next_shape[0]];
            } else {
                cur = next;
                shape = next_shape;
            }
        }
        let f = b.ret(cur, tt(cur_dt, cs(&shape)));
        let args: Vec<Arg> = vec![x.into()];
        let mut m = Interpreter::checked().machine(&f, &args, &no_calls).unwrap();
        let mut handles = m.heap().len();
        prop_assert_eq!(handles, 1);
        while m.step().unwrap() {
            handles += 1;
            prop_assert_eq!(m.heap().len(), handles);
            m.check().unwrap();
        }
        let out = m.finish().unwrap();
        prop_assert_eq!(out.value.shape(), shape.as_slice());
        prop_assert_eq!(out.value.dtype(), cur_dt);
        prop_assert_eq!(out.steps, f.body.len());
    }

    /// Arbitrary (often ill-typed) arguments and attributes: errors, never panics.
    #[test]
    fn contract_and_ops_never_panic(
        x in tensor_strategy(Dtype::ALL.to_vec()),
        y in tensor_strategy(Dtype::ALL.to_vec()),
        axis in 0usize..6,
        perm in prop::collection::vec(0usize..5, 0..5),
        lo in -3i64..6,
        hi in -3i64..6,
        code in 0u8..12,
    ) {
        let mut b = FnBuilder::new("any");
        let v = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
        let w = b.tensor("y", Dtype::F32, vec![Dim::var("S") - Dim::var("B") + 1]);
        let _ = bind(&b.ret_any(v).sig, &[x.clone().into(), y.clone().into()]);
        let _ = w;
        let r = apply2(&x, &y, |p, q| match code {
            0 => Op::Binary(BinaryOp::Div, p, q),
            1 => Op::Matmul(p, q),
            2 => Op::Reduce { op: ReduceOp::Max, axes: vec![axis, lo.rem_euclid(4) as usize], keepdims: hi > 0, x: p },
            3 => Op::ArgReduce { max: hi > 0, axis, keepdims: false, x: p },
            4 => Op::Transpose(perm.clone(), p),
            5 => Op::Reshape(vec![Dim::c(lo), Dim::c(hi)], p),
            6 => Op::Broadcast(vec![Dim::c(hi); axis], p),
            7 => Op::Slice { axis, start: Dim::c(lo), stop: Dim::c(hi), step: 1, x: p },
            8 => Op::Concat(axis, vec![p, q]),
            9 => Op::Select(p, q, q),
            10 => Op::Iota(Dtype::I4, vec![Dim::c(lo)], axis),
            _ => Op::Binary(BinaryOp::Rem, p, Value::from_u32(9)),
        });
        let _ = r;
    }
}
