//! Dim arguments (`heads: Dim![H]`, Section 1 §6 site 1) through the runtime
//! contract: a size binds its variable like one tensor dim; every size,
//! kind and σ clash is a typed error, never a panic or a wrapped dim.

use proptest::prelude::*;
use tc_core::build::FnBuilder;
use tc_core::ir::{Function, Op, UnaryOp};
use tc_core::{Dim, Dtype, Pred, Type};
use tc_runtime::contract::{bind, Arg};
use tc_runtime::exec;
use tc_runtime::{Error, Tensor};

/// `fn f[N, H](x: Tensor[f32; N, H], heads: Dim[H]) -> Tensor[f32; N, H]`,
/// with `requires H >= 0` when `zero_ok`.
fn per_head(zero_ok: bool) -> Function {
    let mut b = FnBuilder::new("per_head");
    let x = b.param(
        "x",
        Type::tensor(Dtype::F32, vec![Dim::var("N"), Dim::var("H")]),
    );
    b.param("heads", Type::Dim(Dim::var("H")));
    if zero_ok {
        b.requires(Pred::ge(Dim::var("H"), 0));
    }
    b.returns(Type::tensor(Dtype::F32, vec![Dim::var("N"), Dim::var("H")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    b.finish(y)
}

fn x(n: usize, h: usize) -> Arg {
    Tensor::zeros(Dtype::F32, &[n, h]).into()
}

#[test]
fn kinds_are_checked() {
    let f = per_head(false);
    let kind = |args: &[Arg]| match bind(&f.sig, args) {
        Err(Error::Kind {
            param,
            expected,
            found,
        }) => format!("{param}: {expected} / {found}"),
        other => panic!("{other:?}"),
    };
    assert_eq!(kind(&[Arg::Dim(2), Arg::Dim(2)]), "x: tensor / dim");
    assert_eq!(kind(&[x(1, 2), x(1, 2)]), "heads: dim / tensor");
    assert_eq!(kind(&[x(1, 2), Arg::from(2i64)]), "heads: dim / scalar");
}

#[test]
fn the_interpreter_runs_with_a_dim_argument() {
    let f = per_head(false);
    let y = exec::call(&f, &[x(2, 3), Arg::Dim(3)], &|_| None).unwrap();
    assert_eq!(y.shape(), &[2, 3]);
    let e = exec::call(&f, &[x(2, 3), Arg::Dim(4)], &|_| None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimArg {
                expected: 3,
                found: 4,
                ..
            }
        ),
        "{e}"
    );
}

proptest! {
    /// For every size: bound exactly when the tensor agrees and the size is
    /// in `1..=i64::MAX` (or `0..` with the opt-in); otherwise the typed
    /// error that says which rule, never a panic.
    #[test]
    fn every_size_binds_or_is_a_typed_error(
        n in prop_oneof![0usize..6, Just(usize::MAX), Just(i64::MAX as usize), Just(i64::MAX as usize + 1), any::<usize>()],
        h in 0usize..4,
        zero_ok in any::<bool>(),
    ) {
        let f = per_head(zero_ok);
        // The tensor binds H first; the dim argument is compared with it.
        let r = bind(&f.sig, &[x(1, h), Arg::Dim(n)]);
        let min = usize::from(!zero_ok);
        match r {
            Ok(s) => {
                prop_assert!(h >= min && n == h);
                prop_assert_eq!(s.get("H").copied(), Some(h as i64));
            }
            Err(Error::ZeroDim { .. }) => prop_assert!(h < min),
            Err(Error::DimArg { expected, found, .. }) => {
                prop_assert!(h >= min && n != h);
                prop_assert_eq!((expected, found), (h as i64, n));
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
        // A dim parameter alone: the size itself is range-checked.
        let mut b = FnBuilder::new("alone");
        b.param("n", Type::Dim(Dim::var("N")));
        if zero_ok {
            b.requires(Pred::ge(Dim::var("N"), 0));
        }
        b.returns(Type::tensor(Dtype::F32, vec![Dim::var("N")]));
        let fill = b.op(Op::Fill(Dtype::F32, vec![Dim::var("N")], tc_core::ir::Scalar::Float(0.0)));
        let g = b.finish(fill);
        match bind(&g.sig, &[Arg::Dim(n)]) {
            Ok(s) => {
                prop_assert!(n >= min && n <= i64::MAX as usize);
                prop_assert_eq!(s.get("N").copied(), Some(n as i64));
            }
            Err(Error::DimArgRange { min: m, max, found, .. }) => {
                prop_assert!(n < min || n > i64::MAX as usize);
                prop_assert_eq!((m, max, found), (min as i64, i64::MAX, n));
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}
