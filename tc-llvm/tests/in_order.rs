//! Deterministic mode's products (`tc-llvm/src/kernels/matmul/in_order.rs`): a
//! float matmul sums each element's terms in the interpreter's order, so
//! the JIT equals the denotation bit for bit — on contiguous, transposed
//! and batch-broadcast operands, in every float dtype, on one thread and
//! split over rows, with NaN, ±∞, ±0 and overflowing values left in (the
//! default mode's tolerance has to exclude those; this mode does not).

use crate::util;

use tc_core::ir::{Function, Op};
use tc_core::Dtype;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

/// Deterministic mode with and without fast math, on the pool and on one
/// thread.
fn modes() -> [JitOptions; 4] {
    let d = JitOptions {
        deterministic: true,
        ..JitOptions::default()
    };
    [
        d,
        JitOptions { threads: 1, ..d },
        JitOptions {
            fast_math: false,
            ..d
        },
        JitOptions {
            fast_math: false,
            threads: 1,
            ..d
        },
    ]
}

/// `a · b` for `a: [B, M, K]` and `b` of `b_shape` (`[B, K, N]`, or
/// `[N, K]` read transposed, or `[K, N]` broadcast over the batch).
fn product(dt: Dtype, b_form: &str) -> Function {
    let mut f = builder("mm");
    let a = f.param("a", tt(dt, &["B", "M", "K"]));
    let b = match b_form {
        "batched" => f.param("b", tt(dt, &["B", "K", "N"])),
        "transposed" => {
            let w = f.param("w", tt(dt, &["B", "N", "K"]));
            f.op(Op::Transpose(vec![0, 2, 1], w))
        }
        _ => {
            let w = f.param("w", tt(dt, &["K", "N"]));
            let w3 = f.op(Op::Reshape(
                vec![
                    tc_core::Dim::c(1),
                    tc_core::Dim::var("K"),
                    tc_core::Dim::var("N"),
                ],
                w,
            ));
            f.op(Op::Broadcast(
                vec![
                    tc_core::Dim::var("B"),
                    tc_core::Dim::var("K"),
                    tc_core::Dim::var("N"),
                ],
                w3,
            ))
        }
    };
    f.returns(tt(dt, &["B", "M", "N"]));
    let y = f.op(Op::Matmul(a, b));
    f.finish(y)
}

#[test]
fn deterministic_products_are_the_interpreters_bit_for_bit() {
    let mut rng = Rng(0x1_0dde5);
    // The last shape has 2^21 multiply-adds: the rows split over threads.
    for (bt, m, k, n) in [
        (1, 1, 7, 5),
        (2, 3, 33, 17),
        (3, 14, 64, 40),
        (1, 64, 512, 64),
    ] {
        for dt in [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::F8E4M3] {
            for form in ["batched", "transposed", "broadcast"] {
                // Only f32 operands are read through strides (others are
                // materialized first): every form still runs.
                let f = product(dt, form);
                let b_shape = match form {
                    "batched" => vec![bt, k, n],
                    "transposed" => vec![bt, n, k],
                    _ => vec![k, n],
                };
                let args: Vec<Arg> = vec![
                    random(&mut rng, dt, &[bt, m, k], true).into(),
                    random(&mut rng, dt, &b_shape, true).into(),
                ];
                let want = interp(&f, &args).unwrap();
                for o in modes() {
                    let what = format!("{dt} {form} [{bt}, {m}, {k}] × {b_shape:?} {o:?}");
                    assert_bits(&what, &jit(&f, &args, o), &want, false);
                }
            }
        }
    }
}

/// A sum that depends on its order: 1, then 4095 terms of 2^-25, each
/// lost against 1 when added in order (under half an ulp of 1), but worth
/// about 2^-13 when any of them are summed apart first, as the default
/// mode's vector lanes and blocks do. In order it is exactly 1.
#[test]
fn an_order_sensitive_sum_is_the_interpreters() {
    let f = product(Dtype::F32, "batched");
    let k = 4096;
    let a = vec![1f32; k];
    let mut b = vec![2f32.powi(-25); k];
    b[0] = 1.0;
    let args: Vec<Arg> = vec![
        tc_runtime::Tensor::from_vec(&[1, 1, k], a).unwrap().into(),
        tc_runtime::Tensor::from_vec(&[1, k, 1], b).unwrap().into(),
    ];
    let want = interp(&f, &args).unwrap();
    assert_eq!(want.to_vec::<f32>().unwrap(), [1.0]);
    for o in modes() {
        assert_bits(&format!("{o:?}"), &jit(&f, &args, o), &want, false);
    }
}
