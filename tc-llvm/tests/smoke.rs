use crate::util;
use tc_core::ir::{BinaryOp, Op, UnaryOp};
use tc_core::Dtype;
use tc_llvm::JitOptions;
use util::*;

#[test]
fn fused_relu_fma() {
    let mut b = builder("f");
    let x = b.param("a", tt(Dtype::F32, &["N"]));
    let y = b.param("b", tt(Dtype::F32, &["N"]));
    let z = b.param("c", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let m = b.op(Op::Binary(BinaryOp::Mul, x, y));
    let s = b.op(Op::Binary(BinaryOp::Add, m, z));
    let r = b.op(Op::Unary(UnaryOp::Relu, s));
    let f = b.finish(r);
    let mut rng = Rng(7);
    let args: Vec<_> = (0..3)
        .map(|_| random(&mut rng, Dtype::F32, &[1000], true).into())
        .collect();
    let want = interp(&f, &args).unwrap();
    let got = jit(&f, &args, JitOptions::default());
    assert_bits("relu(a*b+c)", &got, &want, false);
}
