//! A function's kernel module compiled as parts on parallel threads
//! (`tc_llvm::jit::split_module`, `JitModule::compile_split`): every
//! kernel lands whole in exactly one self-contained part, the cut is a
//! function of the text alone, text of another shape stays whole, and the
//! parts linked together run the function as the interpreter does.
use crate::util;

use tc_core::ir::{BinaryOp, Function, Op, UnaryOp};
use tc_core::Dtype;
use tc_llvm::jit::{split_module, MAX_PARTS, PART_BYTES};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

/// Eight kernels a matmul keeps apart (`tanh(exp(x) · x + x)` per input,
/// each a matmul operand), enough IR for several parts.
fn many_kernels() -> Function {
    let mut b = builder("many");
    let xs: Vec<_> = (0..8)
        .map(|i| b.param(&format!("x{i}"), tt(Dtype::F32, &["R", "C"])))
        .collect();
    b.returns(tt(Dtype::F32, &["R", "R"]));
    let mut acc = None;
    for x in xs {
        let e = b.op(Op::Unary(UnaryOp::Exp, x));
        let ex = b.op(Op::Binary(BinaryOp::Mul, e, x));
        let s = b.op(Op::Binary(BinaryOp::Add, ex, x));
        let t = b.op(Op::Unary(UnaryOp::Tanh, s));
        let xt = b.op(Op::Transpose(vec![1, 0], x));
        let m = b.op(Op::Matmul(t, xt));
        acc = Some(match acc {
            None => m,
            Some(a) => b.op(Op::Binary(BinaryOp::Add, a, m)),
        });
    }
    b.finish(acc.expect("eight terms"))
}

fn sigma() -> tc_core::Sigma {
    [("R".to_string(), 9), ("C".to_string(), 37)]
        .into_iter()
        .collect()
}

#[test]
fn kernels_land_whole_in_exactly_one_part() {
    let f = many_kernels();
    let c = tc_llvm::compile(&f, &sigma(), JitOptions::default()).unwrap();
    let ir = c.ir();
    let parts = split_module(ir);
    let want = (ir.len() / PART_BYTES)
        .clamp(1, MAX_PARTS)
        .min(c.kernel_count());
    assert_eq!(
        parts.len(),
        want,
        "{} bytes, {} kernels",
        ir.len(),
        c.kernel_count()
    );
    assert!(
        parts.len() >= 2,
        "a module this size is cut: {} bytes",
        ir.len()
    );
    for k in 0..c.kernel_count() {
        for sym in [format!("@k{k}("), format!("@k{k}_body(")] {
            let defs = parts
                .iter()
                .filter(|p| {
                    p.contains(&format!("define void {sym}"))
                        || p.contains(&format!("define internal void {sym}"))
                })
                .count();
            assert_eq!(defs, 1, "{sym} defined once across the parts");
        }
    }
    for p in &parts {
        // Self-contained: the declarations and attribute groups repeat.
        assert!(
            p.contains("declare ") && p.contains("\nattributes #0"),
            "{p}"
        );
        tc_llvm::jit::object_code(p).expect("each part compiles alone");
    }
    // A function of the text alone.
    assert_eq!(split_module(ir), parts);
}

#[test]
fn text_of_another_shape_stays_whole() {
    for text in [
        "define void @helper() {\nret void\n}\nattributes #0 = { nounwind }\n",
        "declare void @f()\n",
        "",
    ] {
        assert_eq!(split_module(text), vec![text.to_string()]);
    }
}

#[test]
fn the_parts_linked_together_match_the_interpreter() {
    let f = many_kernels();
    let mut rng = Rng(12);
    let args: Vec<Arg> = (0..8)
        .map(|_| random(&mut rng, Dtype::F32, &[9, 37], false).into())
        .collect();
    let want = interp(&f, &args).unwrap();
    let c = tc_llvm::compile(&f, &sigma(), JitOptions::default()).unwrap();
    assert!(split_module(c.ir()).len() >= 2);
    // Products: within their tolerance (|tanh| ≤ 1, |x| ≤ 4, K = 37).
    assert_close("split", &c.run(&args).unwrap(), &want, 1e-5, 1e-4);
}
