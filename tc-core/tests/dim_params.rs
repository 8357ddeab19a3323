//! Dim parameters and dim values in the IR (Section 1 §6 binding site 1):
//! `Type::Dim` parameters bind their variable like a tensor dim, `Op::Dim`
//! carries a dim to a call, both print, and the verifier admits a dim value
//! only as a call operand.

use tc_core::build::FnBuilder;
use tc_core::check::{cex_string, check_function};
use tc_core::diag::codes;
use tc_core::ir::{verify, Op, Signatures, UnaryOp, Value};
use tc_core::{Dim, Dtype, Pred, Type};

fn v(s: &str) -> Dim {
    Dim::var(s)
}

fn f32s(dims: &[&str]) -> Type {
    Type::tensor(Dtype::F32, dims.iter().map(|d| v(d)).collect())
}

/// GPT-2's head split: `split_heads(x: [B, S, D], heads: Dim[H]) -> [B, H, S, D / H]`.
fn split_heads(with_requires: bool) -> tc_core::ir::Function {
    let mut b = FnBuilder::new("split_heads");
    let x = b.param("x", f32s(&["B", "S", "D"]));
    b.param("heads", Type::Dim(v("H")));
    if with_requires {
        b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    }
    let head = v("D").div(&v("H"));
    b.returns(Type::tensor(
        Dtype::F32,
        vec![v("B"), v("H"), v("S"), head.clone()],
    ));
    let r = b.op(Op::Reshape(vec![v("B"), v("S"), v("H"), head], x));
    let t = b.op(Op::Transpose(vec![0, 2, 1, 3], r));
    b.finish(t)
}

#[test]
fn a_dim_parameter_binds_its_variable_and_prints() {
    let f = split_heads(true);
    assert_eq!(
        f.sig
            .vars
            .iter()
            .map(|x| x.name.as_str())
            .collect::<Vec<_>>(),
        ["B", "S", "D", "H"]
    );
    let text = f.to_string();
    assert!(text.contains("heads (v1): Dim[H]"), "{text}");
    let ck = check_function(&f, &Signatures::new()).unwrap();
    assert_eq!(ck.types[f.param_value(1)], Type::Dim(v("H")));
}

#[test]
fn the_dim_parameters_variable_is_in_the_counterexample() {
    let errs = check_function(&split_heads(false), &Signatures::new()).unwrap_err();
    assert!(!errs.is_empty());
    for e in &errs {
        assert_eq!(e.code, codes::DIV_BY_VAR, "{e}");
        assert_eq!(cex_string(e), "D = 1, H = 2", "{e}");
    }
}

fn sigs() -> Signatures {
    let mut s = Signatures::new();
    s.insert("split_heads".into(), split_heads(true).sig);
    s
}

/// A caller of `split_heads` with `dim`: `split_heads(x, dim)`.
fn caller(dim: Dim, requires: Option<Pred>) -> tc_core::ir::Function {
    let mut b = FnBuilder::new("caller");
    let x = b.param("x", f32s(&["B", "S", "D"]));
    b.param("heads", Type::Dim(v("H")));
    if let Some(p) = requires {
        b.requires(p);
    }
    let ret = Type::tensor(
        Dtype::F32,
        vec![v("B"), dim.clone(), v("S"), v("D").div(&dim)],
    );
    b.returns(ret);
    let d = b.op(Op::Dim(dim));
    let y = b.op(Op::Call("split_heads".into(), vec![x, d]));
    b.finish(y)
}

#[test]
fn a_dim_value_is_bound_to_the_callees_variable() {
    let two_h = v("H").scale(2);
    let ok = caller(two_h.clone(), Some(Pred::eq(v("D").rem(&two_h), 0)));
    assert!(ok.to_string().contains("v2 = dim.value 2 * H"), "{ok}");
    check_function(&ok, &sigs()).unwrap();
    let lit = caller(Dim::c(4), Some(Pred::eq(v("D").rem(&Dim::c(4)), 0)));
    check_function(&lit, &sigs()).unwrap();
}

#[test]
fn a_dim_value_where_a_tensor_is_expected_is_malformed() {
    let mut b = FnBuilder::new("bad");
    let x = b.param("x", f32s(&["N"]));
    let n = b.param("n", Type::Dim(v("N")));
    let _ = x;
    b.returns(f32s(&["N"]));
    let y = b.op(Op::Unary(UnaryOp::Relu, n));
    let f = b.finish(y);
    let e = verify(&f).unwrap_err();
    assert_eq!(e.code, codes::MALFORMED_IR);
    assert!(
        e.message.contains("reads the dim value v1"),
        "{}",
        e.message
    );
    // Returning one is malformed too.
    let mut b = FnBuilder::new("ret");
    b.param("n", Type::Dim(v("N")));
    b.returns(f32s(&["N"]));
    let e = verify(&b.finish(Value::from_u32(0))).unwrap_err();
    assert!(
        e.message.contains("return of the dim value v0"),
        "{}",
        e.message
    );
}

#[test]
fn kinds_must_match_at_a_call() {
    // A tensor where `split_heads` takes a dim, and a dim where it takes a tensor.
    let mut b = FnBuilder::new("caller");
    let x = b.param("x", f32s(&["B", "S", "D"]));
    let heads = b.param("heads", Type::Dim(v("H")));
    b.returns(f32s(&["B", "S", "D"]));
    let y = b.op(Op::Call("split_heads".into(), vec![heads, x]));
    let errs = check_function(&b.finish(y), &sigs()).unwrap_err();
    assert_eq!(errs[0].code, codes::KIND_MISMATCH, "{}", errs[0]);
    assert!(
        errs[0]
            .message
            .contains("expected a tensor (`Tensor[f32; B, S, D]`), found a dim (`Dim[H]`)"),
        "{}",
        errs[0]
    );
}
