//! `concat` with empty operands (issue 10, item 5): an operand whose concat
//! dim is 0 (legal under an opted-in `>= 0`, Section 2 §16) must never be
//! read. Every position (first, middle, last), several and all operands
//! empty, every JIT mode including the shape-generic kernel, and the packed
//! I4 layout; results bit-identical to the interpreter.
use crate::util;

use tc_core::ir::{Function, Op, UnaryOp};
use tc_core::{Dim, Dtype, Pred, Type};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use util::*;

fn modes() -> Vec<(&'static str, CacheConfig)> {
    let cfg = |options: JitOptions, specialize_after: u32| CacheConfig {
        capacity: 8,
        specialize_after,
        options,
    };
    let d = JitOptions::default();
    vec![
        ("default", cfg(d, 1)),
        (
            "deterministic",
            cfg(
                JitOptions {
                    deterministic: true,
                    ..d
                },
                1,
            ),
        ),
        (
            "exact",
            cfg(
                JitOptions {
                    fast_math: false,
                    ..d
                },
                1,
            ),
        ),
        ("threads1", cfg(JitOptions { threads: 1, ..d }, 1)),
        ("generic", cfg(d, 2)),
    ]
}

/// `concat(axis, [x0, x1, x2])` of `[A, Bk]` (axis 1) or `[Bk, A]` (axis
/// 0) operands, every dim allowed to be 0. With `fused`, each operand is
/// `neg(xk)` (ints/floats) so the concat reads through an elementwise op
/// instead of a plain load.
fn concat_fn(dt: Dtype, axis: usize, fused: bool) -> Function {
    let mut b = builder("cat");
    let names = ["B0", "B1", "B2"];
    let shape = |n: &str| {
        if axis == 1 {
            vec![Dim::var("A"), Dim::var(n)]
        } else {
            vec![Dim::var(n), Dim::var("A")]
        }
    };
    let params: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(k, n)| b.param(&format!("x{k}"), Type::tensor(dt, shape(n))))
        .collect();
    for n in names.iter().chain(&["A"]) {
        b.requires(Pred::ge(Dim::var(*n), Dim::c(0)));
    }
    let xs: Vec<_> = params
        .into_iter()
        .map(|x| {
            if fused && UnaryOp::Neg.admits(dt) {
                b.op(Op::Unary(UnaryOp::Neg, x))
            } else {
                x
            }
        })
        .collect();
    let total = Dim::var("B0") + Dim::var("B1") + Dim::var("B2");
    let out = if axis == 1 {
        vec![Dim::var("A"), total]
    } else {
        vec![total, Dim::var("A")]
    };
    b.returns(Type::tensor(dt, out));
    let r = b.op(Op::Concat(axis, xs));
    b.finish(r)
}

#[test]
fn concat_with_empty_operands_every_mode() {
    let mut rng = Rng(0xCA7);
    // Concat-axis sizes: one empty operand in each position, two, all; the
    // other dim 3, or 0 (an empty output).
    let cases: [([usize; 3], usize); 9] = [
        ([0, 3, 2], 3),
        ([3, 0, 2], 3),
        ([3, 2, 0], 3),
        ([0, 0, 5], 3),
        ([0, 5, 0], 3),
        ([5, 0, 0], 3),
        ([0, 0, 0], 3),
        ([1, 1, 1], 3),
        ([0, 3, 2], 0),
    ];
    // Plain loads of each dtype's layout (I4 packed, Bool bytes) and reads
    // through a fused elementwise op.
    let combos = [
        (Dtype::F32, 1, false),
        (Dtype::F32, 0, false),
        (Dtype::F32, 1, true),
        (Dtype::F32, 0, true),
        (Dtype::I4, 1, false),
        (Dtype::I4, 0, true),
        (Dtype::F16, 1, true),
        (Dtype::Bool, 1, false),
        (Dtype::I64, 0, false),
    ];
    for (dt, axis, fused) in combos {
        let f = concat_fn(dt, axis, fused);
        // One cache per mode for every σ: the generic mode runs its one
        // shape-generic kernel at the first call of each σ.
        let jits: Vec<(&str, Jit)> = modes().into_iter().map(|(n, c)| (n, Jit::new(c))).collect();
        for (ks, a) in cases {
            let args: Vec<Arg> = ks
                .iter()
                .map(|&k| {
                    let s = if axis == 1 { [a, k] } else { [k, a] };
                    random(&mut rng, dt, &s, true).into()
                })
                .collect();
            let want = interp(&f, &args).unwrap();
            for (name, j) in &jits {
                let what = format!("concat {dt} axis {axis} fused={fused} {ks:?} a={a} ({name})");
                let runs = j.stats().generic_runs;
                let got = j
                    .call(&f, &args, &|_| None)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(j.stats().fallbacks, 0, "{:?}", j.last_fallback());
                if j.config().specialize_after > 1 {
                    assert_eq!(j.stats().generic_runs, runs + 1, "{what}: not generic");
                }
                assert_bits(&what, &got, &want, false);
            }
        }
    }
}
