use tc_core::build::FnBuilder;
use tc_core::check::check_function;
use tc_core::ir::{Op, Signatures};
use tc_core::{Dim, Dtype, Pred, TensorType, Type};

fn t(dt: Dtype, dims: &[&str]) -> Type {
    Type::tensor(dt, dims.iter().map(|d| Dim::var(*d)).collect())
}

#[test]
fn matmul_contraction_mismatch() {
    let mut b = FnBuilder::new("f");
    let x = b.param("x", t(Dtype::F32, &["B", "M", "K"]));
    let w = b.param("w", t(Dtype::F32, &["B", "K2", "N"]));
    b.returns(t(Dtype::F32, &["B", "M", "N"]));
    let y = b.op(Op::Matmul(x, w));
    let f = b.clone().finish(y);
    let errs = check_function(&f, &Signatures::new()).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    println!("{}", errs[0]);
    assert_eq!(errs[0].code, "E0301");
    assert_eq!(errs[0].span, b.inst(y).unwrap().arg_span(1));
    assert_eq!(
        errs[0].counterexample.as_ref().unwrap().to_string(),
        "K = 1, K2 = 2"
    );
}

#[test]
fn split_heads_reshape() {
    let mut b = FnBuilder::new("split");
    let x = b.param("x", t(Dtype::F32, &["B", "S", "D"]));
    // H is passed as a size: a call binds it (Section 2 §17).
    b.param("heads", Type::Dim(Dim::var("H")));
    b.requires(Pred::eq(Dim::var("D").rem(&Dim::var("H")), 0));
    let dh = Dim::var("D").div(&Dim::var("H"));
    let shape = vec![Dim::var("B"), Dim::var("S"), Dim::var("H"), dh.clone()];
    b.returns(Type::Tensor(TensorType::new(Dtype::F32, shape.clone())));
    let y = b.op(Op::Reshape(shape, x));
    let f = b.finish(y);
    let ok = check_function(&f, &Signatures::new());
    assert!(ok.is_ok(), "{:#?}", ok.err());
    println!("{f}");
}
