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

/// What a `#[tensor_fn]` expansion passes (`IntoArgs`): each parameter
/// converted as `Arg::from` would, a `usize` as a dim, in parameter order
/// through nested tuples.
#[test]
fn expansion_arguments_convert_in_order() {
    use tc_runtime::contract::into_args;
    use tc_runtime::elem::Elem;
    let t = Tensor::zeros(Dtype::F32, &[2, 3]);
    let describe = |args: Vec<Arg>| -> Vec<String> {
        args.iter()
            .map(|a| match a {
                Arg::Tensor(t) => format!("t{:?}", t.shape()),
                Arg::Scalar(Elem::F(x)) => format!("f{x}"),
                Arg::Scalar(Elem::I(x)) => format!("i{x}"),
                Arg::Scalar(Elem::B(x)) => format!("b{x}"),
                Arg::Dim(n) => format!("d{n}"),
            })
            .collect()
    };
    let flat = into_args((t.clone(), &t, 1.5f32, -7i64, -8i32, -9i16, -10i8, true));
    assert_eq!(
        describe(flat),
        ["t[2, 3]", "t[2, 3]", "f1.5", "i-7", "i-8", "i-9", "i-10", "btrue"]
    );
    let nested = into_args(((4usize, (), Arg::Dim(5)), (6usize,), 7usize));
    assert_eq!(describe(nested), ["d4", "d5", "d6", "d7"]);
    assert_eq!(into_args(()).len(), 0);
}
