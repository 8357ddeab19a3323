//! The top-k kernel (`codegen/topk.rs`): a heap selection per lane, bit
//! for bit with the interpreter's stable sort (`denote::topk`) in every JIT
//! mode, σ-specialised and shape-generic; and ops with their own loop form
//! never computed as a row group's elementwise member.
use crate::util;

use tc_core::ir::{Function, Op, PoolKind, ReduceOp, Window};
use tc_core::{Dim, Dtype, Pred, Type};
use tc_llvm::plan::Step;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::Tensor;
use util::*;

/// `topk(x, K, axis)` of a rank-`shape.len()` `x`, `K` bound by a
/// parameter `w: [K]` (so σ fixes it like any dim) and proved `≤` the axis.
fn topk_fn(dt: Dtype, rank: usize, axis: usize, indices: bool) -> Function {
    let names = ["A", "B", "C"];
    let mut b = builder("topk");
    let x = b.param("x", tt(dt, &names[..rank]));
    let _w = b.param("w", tt(Dtype::F32, &["K"]));
    b.requires(Pred::ge(Dim::var(names[axis]), Dim::var("K")));
    b.requires(Pred::ge(Dim::var("K"), Dim::c(0)));
    let mut out: Vec<Dim> = names[..rank].iter().map(|n| Dim::var(*n)).collect();
    out[axis] = Dim::var("K");
    b.returns(Type::tensor(if indices { Dtype::I64 } else { dt }, out));
    let t = b.op(Op::TopK {
        k: Dim::var("K"),
        axis,
        indices,
        x,
    });
    b.finish(t)
}

/// Bit patterns with many ties: ±0, ±1, 2, ±inf where the dtype has them,
/// and NaNs of several payloads and signs, signalling ones included.
fn alphabet(dt: Dtype) -> Vec<u32> {
    match dt {
        Dtype::F32 => vec![
            0,
            0x8000_0000,
            0x3f80_0000,
            0xbf80_0000,
            0x4000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0x7fc0_0001,
            0xffc0_0002,
            0x7f80_0001,
        ],
        Dtype::F16 => vec![
            0, 0x8000, 0x3c00, 0xbc00, 0x4000, 0x7c00, 0xfc00, 0x7e00, 0x7e01, 0xfe02, 0x7c01,
        ],
        Dtype::BF16 => vec![
            0, 0x8000, 0x3f80, 0xbf80, 0x4000, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0x7f81,
        ],
        Dtype::F8E4M3 => vec![0, 0x80, 0x38, 0xb8, 0x40, 0x7e, 0x7f, 0xff],
        Dtype::F8E5M2 => vec![0, 0x80, 0x3c, 0xbc, 0x40, 0x7c, 0xfc, 0x7e, 0x7d, 0x7f],
        _ => unreachable!("a float dtype"),
    }
}

/// A tensor whose elements are drawn from a few values (ties everywhere).
fn tie_heavy(rng: &mut Rng, dt: Dtype, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    if dt.is_float() {
        let al = alphabet(dt);
        let width = dt.bits() as usize / 8;
        let mut bytes = Vec::with_capacity(n * width);
        for _ in 0..n {
            let v = al[(rng.next() % al.len() as u64) as usize];
            bytes.extend_from_slice(&v.to_le_bytes()[..width]);
        }
        return Tensor::from_raw(dt, shape, bytes).unwrap();
    }
    let (lo, hi) = dt.int_range().unwrap();
    let al = [lo, hi, -2, -1, 0, 1, 2];
    let elems: Vec<Elem> = (0..n)
        .map(|_| Elem::I(al[(rng.next() % al.len() as u64) as usize]))
        .collect();
    Tensor::from_elems(dt, shape, &elems).unwrap()
}

fn args(x: Tensor, k: usize) -> Vec<Arg> {
    vec![x.into(), Tensor::zeros(Dtype::F32, &[k]).into()]
}

/// Every axis of a rank-3 value (the middle one strided), k from 0 to the
/// axis, both forms, σ-specialised and shape-generic; on a large input
/// (split across threads) every JIT mode: bit for bit with the interpreter,
/// and one kernel step (no host sort).
#[test]
fn topk_is_a_heap_kernel_in_every_mode() {
    let mut rng = Rng(31);
    let generic = generic_jit();
    let exact = jit_with(EXACT);
    for dt in [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
        Dtype::I64,
        Dtype::I8,
        Dtype::I4,
    ] {
        for axis in 0..3 {
            for indices in [false, true] {
                let f = topk_fn(dt, 3, axis, indices);
                let shape = [3usize, 5, 4];
                let d = shape[axis];
                for k in [0, 1, d] {
                    let a = args(tie_heavy(&mut rng, dt, &shape), k);
                    let want = interp(&f, &a).unwrap();
                    let what = format!("topk k={k} axis {axis} at {dt} indices={indices}");
                    let got = exact.call(&f, &a, &|_| None).unwrap();
                    assert_bits(&what, &got, &want, false);
                    let g = generic.call(&f, &a, &|_| None).unwrap();
                    assert_bits(&format!("{what} (generic)"), &g, &want, false);
                }
                if matches!(dt, Dtype::F32 | Dtype::F16 | Dtype::I4) {
                    let shape = [64usize, 64, 65]; // ≥ `exec::PAR_MIN_WORK` elements: split
                    let k = shape[axis] / 2;
                    let a = args(tie_heavy(&mut rng, dt, &shape), k);
                    let want = interp(&f, &a).unwrap();
                    let what =
                        format!("topk k={k} axis {axis} of {shape:?} at {dt} indices={indices}");
                    for opts in [EXACT, DET, JitOptions::default()] {
                        assert_bits(&what, &jit(&f, &a, opts), &want, false);
                    }
                }
                let sigma: tc_core::Sigma = [("A", 3), ("B", 5), ("C", 4), ("K", 2)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                let compiled = tc_llvm::exec::compile(&f, &sigma, EXACT).unwrap();
                assert!(
                    compiled
                        .steps()
                        .iter()
                        .all(|s| matches!(s, Step::Kernel { .. })),
                    "a top-k is a kernel: {:?}",
                    compiled.steps()
                );
            }
        }
    }
    for j in [&generic, &exact] {
        assert_eq!(j.stats().fallbacks, 0, "{:?}", j.last_fallback());
    }
    assert!(generic.stats().generic_runs > 0, "{:?}", generic.stats());
}

/// Every lane of length ≤ 6 over {−0, +0, 1, two NaNs} (all 5^d of them,
/// as the rows of one input) and every k: the heap's selection and order
/// equal the stable sort's, ties and NaN payloads included.
#[test]
fn topk_heap_matches_the_stable_sort_on_every_small_lane() {
    let al: [u32; 5] = [0x8000_0000, 0, 0x3f80_0000, 0x7fc0_0001, 0xffc0_0002];
    let generic = generic_jit();
    for indices in [false, true] {
        let f = topk_fn(Dtype::F32, 2, 1, indices);
        for d in 1..=6usize {
            let rows = 5usize.pow(d as u32);
            let mut bytes = Vec::with_capacity(rows * d * 4);
            for r in 0..rows {
                let mut code = r;
                for _ in 0..d {
                    bytes.extend_from_slice(&al[code % 5].to_le_bytes());
                    code /= 5;
                }
            }
            let x = Tensor::from_raw(Dtype::F32, &[rows, d], bytes).unwrap();
            for k in 0..=d {
                let a = args(x.clone(), k);
                let want = interp(&f, &a).unwrap();
                let got = generic.call(&f, &a, &|_| None).unwrap();
                assert_bits(
                    &format!("lanes of {d}, k = {k}, indices={indices}"),
                    &got,
                    &want,
                    false,
                );
            }
        }
    }
    assert_eq!(
        generic.stats().fallbacks,
        0,
        "{:?}",
        generic.last_fallback()
    );
}

/// A reduction with keepdims over the last axis starts a row group; an op
/// with its own loop form over the same rows (cumsum, pooling, top-k) reads
/// only parameters, so it looked row-local and joined the group, whose
/// members are computed as elementwise rows: the op's value was a load of
/// its own unwritten output. Each must stay its own kernel.
#[test]
fn ops_with_their_own_loop_never_join_a_row_group() {
    let mut rng = Rng(32);
    let own: [(&str, fn(tc_core::ir::Value) -> Op); 3] = [
        ("cumsum", |y| Op::CumSum { axis: 2, x: y }),
        ("top-k", |y| Op::TopK {
            k: Dim::var("C"),
            axis: 2,
            indices: false,
            x: y,
        }),
        ("max_pool", |y| Op::Pool {
            kind: PoolKind::Max,
            kernel: vec![1],
            window: Window {
                stride: vec![1],
                padding: vec![0],
                dilation: vec![1],
            },
            x: y,
        }),
    ];
    for (name, make) in own {
        let mut b = builder("group");
        let x = b.param("x", tt(Dtype::F32, &["A", "B", "C"]));
        let y = b.param("y", tt(Dtype::F32, &["A", "B", "C"]));
        b.returns(tt(Dtype::F32, &["A", "B", "C"]));
        let m = b.op(Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![2],
            keepdims: true,
            x,
        });
        let c = b.op(make(y));
        let mb = b.op(Op::Broadcast(
            vec![Dim::var("A"), Dim::var("B"), Dim::var("C")],
            m,
        ));
        let r = b.op(Op::Binary(tc_core::ir::BinaryOp::Add, c, mb));
        let f = b.finish(r);
        let a: Vec<Arg> = vec![
            random(&mut rng, Dtype::F32, &[3, 4, 16], false).into(),
            random(&mut rng, Dtype::F32, &[3, 4, 16], false).into(),
        ];
        let want = interp(&f, &a).unwrap();
        for opts in [EXACT, DET] {
            assert_bits(name, &jit(&f, &a, opts), &want, false);
        }
    }
}

/// The plan verifier refuses a row group with a member that has its own
/// loop form (the family above), and each step whose op its code does not
/// implement; every plan the planner makes for those programs passes.
#[test]
fn the_plan_verifier_refuses_a_step_in_the_wrong_loop_form() {
    let mut b = builder("verify");
    let x = b.param("x", tt(Dtype::F32, &["A", "B"]));
    b.returns(tt(Dtype::F32, &["A", "B"]));
    let m = b.op(Op::Reduce {
        op: ReduceOp::Max,
        axes: vec![1],
        keepdims: true,
        x,
    });
    let c = b.op(Op::CumSum { axis: 1, x });
    let mb = b.op(Op::Broadcast(vec![Dim::var("A"), Dim::var("B")], m));
    let r = b.op(Op::Binary(tc_core::ir::BinaryOp::Add, c, mb));
    let f = b.finish(r);
    let planned = tc_llvm::plan::structure(&f, &|v| tc_llvm::plan::operand_dtype(&f, v), None);
    tc_llvm::plan::verify(&f, &planned).unwrap();
    let mut bad = planned.clone();
    bad.steps = vec![Step::Group {
        id: 0,
        members: vec![m, c, r],
        inputs: vec![x],
    }];
    let e = tc_llvm::plan::verify(&f, &bad).unwrap_err();
    assert!(e.contains("plan verifier"), "{e}");
    bad.steps = vec![Step::Host { out: c }];
    assert!(tc_llvm::plan::verify(&f, &bad).is_err());
    bad.steps = vec![Step::Matmul { out: r, a: x, b: x }];
    assert!(tc_llvm::plan::verify(&f, &bad).is_err());
}
