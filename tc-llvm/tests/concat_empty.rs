//! `concat` with empty operands (issue 10, item 5): an operand whose concat
//! dim is 0 (legal under an opted-in `>= 0`, Section 2 §16) must never be
//! read. Every position (first, middle, last), several and all operands
//! empty, every JIT mode including the shape-generic kernel, and the packed
//! I4 layout; results bit-identical to the interpreter.
mod util;

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
    // Concat-axis sizes: one empty operand in each position, two, all.
    let cases: [[usize; 3]; 8] = [
        [0, 3, 2],
        [3, 0, 2],
        [3, 2, 0],
        [0, 0, 5],
        [0, 5, 0],
        [5, 0, 0],
        [0, 0, 0],
        [1, 1, 1],
    ];
    for dt in [Dtype::F32, Dtype::I4, Dtype::F16, Dtype::Bool, Dtype::I64] {
        for axis in [1, 0] {
            for fused in [false, true] {
                let f = concat_fn(dt, axis, fused);
                for ks in cases {
                    for a in [3usize, 0] {
                        let args: Vec<Arg> = ks
                            .iter()
                            .map(|&k| {
                                let s = if axis == 1 { [a, k] } else { [k, a] };
                                random(&mut rng, dt, &s, true).into()
                            })
                            .collect();
                        let want = interp(&f, &args).unwrap();
                        for (name, cfg) in modes() {
                            let j = Jit::new(cfg);
                            let got = j.call(&f, &args, &|_| None).unwrap_or_else(|e| {
                                panic!("{name}: concat {dt} axis {axis} {ks:?} a={a}: {e}")
                            });
                            assert_eq!(j.stats().fallbacks, 0, "{:?}", j.last_fallback());
                            if cfg.specialize_after > 1 {
                                assert_eq!(j.stats().generic_runs, 1, "{name}: not generic");
                            }
                            assert_bits(
                                &format!(
                                    "concat {dt} axis {axis} fused={fused} {ks:?} a={a} ({name})"
                                ),
                                &got,
                                &want,
                                false,
                            );
                        }
                    }
                }
            }
        }
    }
}
