//! Large flat kernels (outputs ≥ `STREAM_MIN`) run tile by tile into an L1
//! scratch tile and stream it to the output; their storage comes from the
//! `tc_runtime::pool` when a call of the same size dropped it. Both must be
//! invisible: results bit-identical to the interpreter (integer, bool and
//! cast chains) on 1 and 2 threads, and across repeated calls that reuse
//! pooled (stale) buffers.
mod util;

use tc_core::ir::{BinaryOp, Function, Op, UnaryOp};
use tc_core::Dtype;
use tc_llvm::exec::STREAM_MIN;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

/// `cast<f32>(x_i8) * y_f16 + cast<f32>(z_i32 - x32)` then `select(m, ·, -·)`:
/// inputs of four element sizes, so every input's tile offset differs.
fn mixed() -> Function {
    let mut b = builder("mixed");
    let x = b.param("x", tt(Dtype::I8, &["N"]));
    let y = b.param("y", tt(Dtype::F16, &["N"]));
    let z = b.param("z", tt(Dtype::I32, &["N"]));
    let m = b.param("m", tt(Dtype::Bool, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let xf = b.op(Op::Cast(Dtype::F32, x));
    let yf = b.op(Op::Cast(Dtype::F32, y));
    let x32 = b.op(Op::Cast(Dtype::I32, x));
    let d = b.op(Op::Binary(BinaryOp::Sub, z, x32));
    let df = b.op(Op::Cast(Dtype::F32, d));
    let p = b.op(Op::Binary(BinaryOp::Mul, xf, yf));
    let s = b.op(Op::Binary(BinaryOp::Add, p, df));
    let n = b.op(Op::Unary(UnaryOp::Neg, s));
    let r = b.op(Op::Select(m, s, n));
    b.finish(r)
}

/// An integer chain with an i64 output (8-byte elements: the largest tile).
fn int_chain() -> Function {
    let mut b = builder("ints");
    let x = b.param("x", tt(Dtype::I16, &["N"]));
    let y = b.param("y", tt(Dtype::I64, &["N"]));
    b.returns(tt(Dtype::I64, &["N"]));
    let x64 = b.op(Op::Cast(Dtype::I64, x));
    let p = b.op(Op::Binary(BinaryOp::Mul, x64, y));
    let q = b.op(Op::Binary(BinaryOp::Add, p, x64));
    b.finish(q)
}

fn check(f: &Function, dts: &[Dtype], n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let args: Vec<Arg> = dts
        .iter()
        .map(|dt| random(&mut rng, *dt, &[n], false).into())
        .collect();
    let want = interp(f, &args).unwrap();
    for threads in [1, 0] {
        let j = jit_with(JitOptions {
            threads,
            ..Default::default()
        });
        // Three calls: the second and third get the first's (dropped) output
        // buffer back from the pool, with stale contents.
        for call in 0..3 {
            let got = j.call(f, &args, &|_| None).unwrap();
            assert_eq!(j.stats().fallbacks, 0);
            assert_bits(
                &format!("{} n={n} threads={threads} call {call}", f.sig.name),
                &got,
                &want,
                false,
            );
        }
    }
}

#[test]
fn streamed_mixed_dtypes_bit_identical() {
    // Just over the threshold at 4 bytes per output element, and a length
    // that is not a multiple of the tile or of 64.
    let n = STREAM_MIN / 4 + 4096 * 3 + 37;
    check(
        &mixed(),
        &[Dtype::I8, Dtype::F16, Dtype::I32, Dtype::Bool],
        n,
        11,
    );
}

#[test]
fn streamed_i64_output_bit_identical() {
    let n = STREAM_MIN / 8 + 1001;
    check(&int_chain(), &[Dtype::I16, Dtype::I64], n, 12);
}

#[test]
fn below_threshold_unchanged() {
    check(
        &mixed(),
        &[Dtype::I8, Dtype::F16, Dtype::I32, Dtype::Bool],
        10_007,
        13,
    );
}

#[test]
fn pooled_outputs_are_reused() {
    let f = int_chain();
    let n = STREAM_MIN / 8;
    let mut rng = Rng(14);
    let args: Vec<Arg> = [Dtype::I16, Dtype::I64]
        .iter()
        .map(|dt| random(&mut rng, *dt, &[n], false).into())
        .collect();
    let j = jit_with(JitOptions::default());
    let first = j.call(&f, &args, &|_| None).unwrap();
    let want = first.clone();
    drop(first);
    // `want` still shares the first buffer, so it is not pooled yet; drop a
    // second result and the third call can take it.
    let before = tc_runtime::pool::stats();
    let second = j.call(&f, &args, &|_| None).unwrap();
    assert_eq!(second, want);
    let addr = second.bytes().as_ptr() as usize;
    drop(second);
    let third = j.call(&f, &args, &|_| None).unwrap();
    assert_eq!(third, want);
    assert_eq!(
        third.bytes().as_ptr() as usize,
        addr,
        "the third call writes into the second's dropped buffer"
    );
    let after = tc_runtime::pool::stats();
    assert!(
        after.hits > before.hits,
        "a dropped output of the same size is reused: {before:?} → {after:?}"
    );
}
