//! Matmul operands read in place (`tc_llvm::plan::view`): random chains of
//! layout ops (transpose, slice with steps, broadcast, reshapes that merge
//! or split axes) over a buffer, checked two ways.
//! 1. Addresses: the view's address of every element against the
//!    interpreter's value of the chain over a tensor that holds its own flat
//!    indices (Section 4 §5.6–§5.10 are pure index maps), and the view lies
//!    inside its buffer.
//! 2. The chain as either operand of a matmul, σ-specialised JIT and
//!    shape-generic JIT against the interpreter; the specialised plan copies
//!    the operand exactly when no view exists.
use crate::util;

use proptest::prelude::*;
use tc_core::ir::{Function, Op, Value, ValueMap};
use tc_core::{Dim, Dtype, Sigma};
use tc_llvm::plan;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;
use util::*;

/// One layout step, its parameters read modulo what the shape allows.
type Step = (u8, usize, usize, usize);

fn lits(shape: &[usize]) -> Vec<String> {
    shape.iter().map(|d| d.to_string()).collect()
}

fn ty(shape: &[usize]) -> tc_core::Type {
    let s = lits(shape);
    tt(
        Dtype::F32,
        &s.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

fn dims(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::c(d as i64)).collect()
}

/// Apply `step` to `x` of `shape`: the new value and shape, or `None` when
/// the step does not apply (rank or size limits).
fn apply(
    b: &mut tc_core::build::FnBuilder,
    x: Value,
    shape: &[usize],
    (k, p, q, r): Step,
) -> Option<(Value, Vec<usize>)> {
    let rank = shape.len();
    let mut s = shape.to_vec();
    let op = match k % 5 {
        0 => {
            // A permutation from a Lehmer code.
            let mut left: Vec<usize> = (0..rank).collect();
            let mut code = p * 131 + q;
            let perm: Vec<usize> = (0..rank)
                .map(|i| {
                    let j = code % (rank - i);
                    code /= rank - i;
                    left.remove(j)
                })
                .collect();
            s = perm.iter().map(|&j| shape[j]).collect();
            Op::Transpose(perm, x)
        }
        1 => {
            let axis = p % rank;
            let d = shape[axis];
            let start = q % (d + 1);
            let stop = start + r % (d - start + 1);
            let step = 1 + r % 3;
            s[axis] = (stop - start).div_ceil(step);
            Op::Slice {
                axis,
                start: Dim::c(start as i64),
                stop: Dim::c(stop as i64),
                step,
                x,
            }
        }
        2 if rank < 5 && q % 2 == 0 => {
            s.insert(0, 1 + r % 3);
            Op::Broadcast(dims(&s), x)
        }
        2 => {
            let axis = shape.iter().position(|&d| d == 1)?;
            s[axis] = 1 + r % 4;
            Op::Broadcast(dims(&s), x)
        }
        3 if rank >= 2 => {
            let axis = p % (rank - 1);
            let d = s.remove(axis + 1);
            s[axis] *= d;
            Op::Reshape(dims(&s), x)
        }
        _ if rank < 5 => {
            let axis = p % rank;
            let d = shape[axis];
            let f = (2..=d)
                .find(|f| d % f == 0 && (q % 2 == 0 || *f == d))
                .unwrap_or(1);
            s[axis] = d / f;
            s.insert(axis, f);
            Op::Reshape(dims(&s), x)
        }
        _ => return None,
    };
    Some((b.op(op), s))
}

/// `f(x: base) -> chain(x)`, or `None` if a step did not apply.
fn chain(base: &[usize], steps: &[Step]) -> Option<(Function, Vec<usize>)> {
    let mut b = builder("view_chain");
    let mut v = b.param("x", ty(base));
    let mut shape = base.to_vec();
    for &st in steps {
        (v, shape) = apply(&mut b, v, &shape, st)?;
    }
    b.returns(ty(&shape));
    Some((b.finish(v), shape))
}

fn flat_indices(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| i as f32).collect()).unwrap()
}

/// Every multi-index of `shape`, row-major.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &d in shape {
        out = out
            .into_iter()
            .flat_map(|p| {
                (0..d).map(move |i| {
                    let mut p = p.clone();
                    p.push(i);
                    p
                })
            })
            .collect();
    }
    out
}

fn check_addresses(base: &[usize], steps: &[Step]) {
    let Some((f, shape)) = chain(base, steps) else {
        return;
    };
    let x = flat_indices(base);
    let want: Vec<f32> = interp(&f, &[x.into()]).unwrap().to_vec().unwrap();
    let (vals, sigma) = plan::shapes(&f, &Sigma::new(), &|_| None).unwrap();
    let mat = ValueMap::filled(&f, false);
    let has_reshape = f.body.iter().any(|i| matches!(i.op, Op::Reshape(..)));
    let Some(v) = plan::view(&f, &vals, &mat, &sigma, f.ret, false) else {
        assert!(has_reshape, "only a reshape can lack a view: {f}");
        return;
    };
    assert_eq!(v.base, f.param_value(0));
    assert!(
        v.fits(&shape, base.iter().product()),
        "{v:?} of {shape:?} over {base:?}"
    );
    for (idx, w) in indices(&shape).iter().zip(&want) {
        let at = idx
            .iter()
            .zip(&v.strides)
            .fold(v.offset as isize, |a, (&i, &s)| a + i as isize * s);
        assert_eq!(at as f32, *w, "element {idx:?} of {f} read through {v:?}");
    }
}

/// The chain as the left (or right) operand of a matmul with a random
/// matrix of the matching batch: JIT (specialised, generic) vs interpreter.
fn check_matmul(base: &[usize], steps: &[Step], right: bool, seed: u64) {
    let Some((g, shape)) = chain(base, steps) else {
        return;
    };
    let r = shape.len();
    if r < 2 {
        return;
    }
    let mut other = shape.clone();
    if right {
        other[r - 1] = shape[r - 2];
        other[r - 2] = 3;
    } else {
        other[r - 2] = shape[r - 1];
        other[r - 1] = 3;
    }
    let mut b = builder("view_matmul");
    let x = b.param("x", ty(base));
    let y = b.param("y", ty(&other));
    let mut v = x;
    let mut s = base.to_vec();
    for &st in steps {
        (v, s) = apply(&mut b, v, &s, st).unwrap();
    }
    let (l, rr) = if right { (y, v) } else { (v, y) };
    let mut out = shape.clone();
    out[r - 2] = if right { 3 } else { shape[r - 2] };
    out[r - 1] = if right { shape[r - 1] } else { 3 };
    b.returns(ty(&out));
    let mm = b.op(Op::Matmul(l, rr));
    let f = b.finish(mm);
    let mut rng = Rng(seed);
    let args: Vec<Arg> = vec![
        random(&mut rng, Dtype::F32, base, false).into(),
        random(&mut rng, Dtype::F32, &other, false).into(),
    ];
    let want = interp(&f, &args).unwrap();
    let k = if right { shape[r - 2] } else { shape[r - 1] };
    let tol = 2.0 * (k as f32 + 2.0) * 16.0 * k as f32 / 16_777_216.0 + 1e-5;
    let c = tc_llvm::compile(&f, &Sigma::new(), JitOptions::default()).unwrap();
    let got = c.run(&args).expect("specialised run");
    assert_close(&format!("{g}"), &got, &want, 0.0, tol);
    // The specialised plan copies the chain exactly when it is no view.
    let (vals, sigma) = plan::shapes(&g, &Sigma::new(), &|_| None).unwrap();
    let mat = ValueMap::filled(&g, false);
    let in_place = plan::view(&g, &vals, &mat, &sigma, g.ret, true).is_some();
    assert_eq!(
        c.kernel_count() == 0,
        in_place,
        "{g}: steps {:?}",
        c.steps()
    );
    let gen = generic_jit()
        .call(&f, &args, &|_| None)
        .expect("generic run");
    assert_close(&format!("{g} (generic)"), &gen, &want, 0.0, tol);
}

fn base_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..7, 1..5)
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0u8..5, 0usize..64, 0usize..64, 0usize..64), 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn views_address_what_the_interpreter_reads(base in base_shape(), steps in steps()) {
        check_addresses(&base, &steps);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn views_as_matmul_operands_match_the_interpreter(
        base in base_shape(),
        steps in steps(),
        right in any::<bool>(),
        seed in any::<u64>(),
    ) {
        check_matmul(&base, &steps, right, seed);
    }
}

/// GPT-2's head split: q, k, v are slices of the fused projection, reshaped
/// into heads and transposed; the specialised plan reads all three in place
/// (no kernel), and the result matches the interpreter.
#[test]
fn fused_projection_head_splits_are_read_in_place() {
    let (bn, sn, h, d) = (2, 5, 3, 4);
    let e = h * d;
    let mut b = builder("qkv_heads");
    let qkv = b.param("qkv", ty(&[bn, sn, 3 * e]));
    b.returns(ty(&[bn, h, sn, d]));
    let part = |b: &mut tc_core::build::FnBuilder, i: usize, perm: Vec<usize>| {
        let s = b.op(Op::Slice {
            axis: 2,
            start: Dim::c((i * e) as i64),
            stop: Dim::c(((i + 1) * e) as i64),
            step: 1,
            x: qkv,
        });
        let r = b.op(Op::Reshape(dims(&[bn, sn, h, d]), s));
        b.op(Op::Transpose(perm, r))
    };
    let q = part(&mut b, 0, vec![0, 2, 1, 3]);
    let k = part(&mut b, 1, vec![0, 2, 3, 1]);
    let v = part(&mut b, 2, vec![0, 2, 1, 3]);
    let s = b.op(Op::Matmul(q, k));
    let o = b.op(Op::Matmul(s, v));
    let f = b.finish(o);
    let args: Vec<Arg> = vec![random(&mut Rng(11), Dtype::F32, &[bn, sn, 3 * e], false).into()];
    let c = tc_llvm::compile(&f, &Sigma::new(), JitOptions::default()).unwrap();
    assert_eq!(c.kernel_count(), 0, "steps: {:?}", c.steps());
    let want = interp(&f, &args).unwrap();
    assert_close("qkv heads", &c.run(&args).unwrap(), &want, 1e-5, 1e-4);
}

/// A chain with a reshape that merges a sliced axis with its neighbour has
/// no view; it is copied, and the product is still right.
#[test]
fn a_merge_across_a_slice_is_copied() {
    check_addresses(&[4, 6], &[(1, 1, 1, 4), (3, 0, 0, 0)]);
    check_matmul(&[4, 6, 2], &[(1, 1, 1, 4), (3, 0, 0, 0)], false, 3);
    let (f, _) = chain(&[4, 6], &[(1, 1, 1, 4), (3, 0, 0, 0)]).unwrap();
    let (vals, sigma) = plan::shapes(&f, &Sigma::new(), &|_| None).unwrap();
    let mat = ValueMap::filled(&f, false);
    assert!(
        plan::view(&f, &vals, &mat, &sigma, f.ret, false).is_none(),
        "{f}"
    );
}

/// A decoder's attention reads the first T positions of its key cache
/// `[B, KV, C, HD]` as `transpose(slice(kc, 2, 0, T))`: the shape-generic
/// plan (the one a decoder runs, its T new every step) reads that slice in
/// place too, so no step copies the keys (a copy cost more than the
/// product itself), and the product matches the interpreter at several T.
#[test]
fn a_generic_plan_reads_a_sliced_cache_in_place() {
    use tc_core::Type;
    let mut b = builder("scores");
    let q = b.param("q", tt(Dtype::F32, &["1", "3", "2", "8"]));
    let kc = b.param("kc", tt(Dtype::F32, &["1", "3", "C", "8"]));
    b.param("t", Type::Dim(Dim::var("T")));
    b.requires(tc_core::Pred::le(Dim::var("T"), Dim::var("C")));
    b.returns(tt(Dtype::F32, &["1", "3", "2", "T"]));
    let k = b.op(Op::Slice {
        axis: 2,
        start: Dim::c(0),
        stop: Dim::var("T"),
        step: 1,
        x: kc,
    });
    let kt = b.op(Op::Transpose(vec![0, 1, 3, 2], k));
    let s = b.op(Op::Matmul(q, kt));
    let f = b.finish(s);
    let mut rng = Rng(5);
    let qa: Arg = random(&mut rng, Dtype::F32, &[1, 3, 2, 8], false).into();
    let ka: Arg = random(&mut rng, Dtype::F32, &[1, 3, 10, 8], false).into();
    let sigma: Sigma = [("C".to_string(), 10), ("T".to_string(), 7)]
        .into_iter()
        .collect();
    let c = tc_llvm::compile_with(&f, &sigma, &|_| None, JitOptions::default(), true).unwrap();
    assert_eq!(c.kernel_count(), 0, "steps: {:?}", c.steps());
    let jit = generic_jit();
    for t in [1usize, 7, 10] {
        let args = vec![qa.clone(), ka.clone(), Arg::Dim(t)];
        let want = interp(&f, &args).unwrap();
        let got = jit.call(&f, &args, &|_| None).expect("generic run");
        assert_close(&format!("T = {t}"), &got, &want, 0.0, 1e-5);
    }
}
