//! The object code of a module is a function of its IR text (and the host)
//! alone: the persistent cache keys entries by the text and the host
//! identity (`tc_llvm::disk::host_identity`), and a compilation on a pool
//! worker reuses that thread's target machine (`jit.rs`), which keeps the
//! host's subtarget between modules. The same text must then give the same
//! bytes on a fresh thread, on a thread that compiled other modules first,
//! and again on the same thread; otherwise a stored entry and a fresh
//! compile of the same text would differ, and so could their results.
use crate::util;

use tc_core::build::FnBuilder;
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, UnaryOp};
use tc_core::{Dim, Dtype};
use tc_llvm::jit::object_code;
use tc_llvm::JitOptions;
use util::*;

/// A row softmax and a residual add: loops with reductions, vectorised
/// and interleaved by the pipeline.
fn softmax_residual() -> Function {
    let mut b = builder("softmax_residual");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    let y = b.param("y", tt(Dtype::F32, &["R", "C"]));
    b.returns(tt(Dtype::F32, &["R", "C"]));
    let reduce = |b: &mut FnBuilder, op, x| {
        b.op(Op::Reduce {
            op,
            axes: vec![1],
            keepdims: true,
            x,
        })
    };
    let m = reduce(&mut b, ReduceOp::Max, x);
    let rc = || vec![Dim::var("R"), Dim::var("C")];
    let m = b.op(Op::Broadcast(rc(), m));
    let d = b.op(Op::Binary(BinaryOp::Sub, x, m));
    let e = b.op(Op::Unary(UnaryOp::Exp, d));
    let s = reduce(&mut b, ReduceOp::Sum, e);
    let s = b.op(Op::Broadcast(rc(), s));
    let p = b.op(Op::Binary(BinaryOp::Div, e, s));
    let t = b.op(Op::Unary(UnaryOp::Tanh, y));
    let r = b.op(Op::Binary(BinaryOp::Add, p, t));
    b.finish(r)
}

fn texts() -> Vec<String> {
    let sigma: tc_core::Sigma = [("R".to_string(), 7), ("C".to_string(), 300)]
        .into_iter()
        .collect();
    let f = softmax_residual();
    let c = tc_llvm::compile(&f, &sigma, JitOptions::default()).unwrap();
    vec![
        c.ir().to_string(),
        tc_llvm::kernels::matmul::ukernel_ir_mr(16, 14),
        tc_llvm::kernels::matmul::ukernel_ir_mr(8, 6),
        tc_llvm::kernels::matmul::ukernel_ir_mr(16, 3),
    ]
}

/// Each text's object code, compiled in `order` on one new thread.
fn on_new_thread(texts: &[String], order: &[usize]) -> Vec<Vec<u8>> {
    let texts = texts.to_vec();
    let order = order.to_vec();
    std::thread::spawn(move || {
        let mut out = vec![Vec::new(); texts.len()];
        for &i in &order {
            out[i] = object_code(&texts[i]).unwrap();
        }
        out
    })
    .join()
    .unwrap()
}

#[test]
fn the_same_text_gives_the_same_bytes_on_any_thread_in_any_order() {
    let texts = texts();
    let n = texts.len();
    // Each text alone on a fresh thread: a fresh target machine.
    let alone: Vec<Vec<u8>> = (0..n)
        .map(|i| on_new_thread(&texts, &[i]).swap_remove(i))
        .collect();
    for (i, o) in alone.iter().enumerate() {
        assert!(!o.is_empty(), "text {i} gave no object code");
    }
    // All on one thread, forwards then backwards and each twice: the
    // thread's target machine has compiled the others first.
    let forwards: Vec<usize> = (0..n).chain(0..n).collect();
    let backwards: Vec<usize> = (0..n).rev().chain((0..n).rev()).collect();
    for order in [forwards, backwards] {
        let got = on_new_thread(&texts, &order);
        for i in 0..n {
            assert!(
                got[i] == alone[i],
                "text {i}: compiled after others ({order:?}) it gave other bytes than alone"
            );
        }
    }
    // And on this (test) thread, interleaved with the others.
    for i in (0..n).rev() {
        assert!(object_code(&texts[i]).unwrap() == alone[i], "text {i} here");
    }
}
