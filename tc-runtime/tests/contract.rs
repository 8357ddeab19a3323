//! The runtime contract (Section 2 §14, §16, §17): every failure is a typed
//! error naming the parameter, the axis, expected and actual, and σ.

use crate::support;

use support::*;
use tc_core::concrete::RuleError;
use tc_core::ir::{BinaryOp, Function, Op};
use tc_core::{Dim, Dtype, Pred, Sigma};
use tc_runtime::contract::{bind, bind_args, format_sigma, Arg};
use tc_runtime::{Elem, Error, Tensor};

fn z(dt: Dtype, shape: &[usize]) -> Arg {
    Tensor::zeros(dt, shape).into()
}

/// `fn f[B, S](x: Tensor[f32; B, S], y: Tensor[f32; B, S]) -> …`
fn two_bs() -> Function {
    let mut b = FnBuilder::new("f");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
    let y = b.tensor("y", Dtype::F32, ds(&["B", "S"]));
    let r = b.op(Op::Binary(BinaryOp::Add, x, y));
    b.ret(r, tt(Dtype::F32, ds(&["B", "S"])))
}

fn sigma(pairs: &[(&str, i64)]) -> Sigma {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn binds_sigma() {
    let f = two_bs();
    assert_eq!(
        bind(&f.sig, &[z(Dtype::F32, &[2, 5]), z(Dtype::F32, &[2, 5])]),
        Ok(sigma(&[("B", 2), ("S", 5)]))
    );
    assert_eq!(
        format_sigma(&f.sig, &sigma(&[("B", 2), ("S", 5)])),
        "B = 2, S = 5"
    );
    assert_eq!(format_sigma(&f.sig, &Sigma::new()), "∅");
}

#[test]
fn arity() {
    let f = two_bs();
    assert_eq!(
        bind(&f.sig, &[z(Dtype::F32, &[2, 5])]),
        Err(Error::Arity {
            func: "f".into(),
            expected: 2,
            found: 1
        })
    );
}

#[test]
fn kind_dtype_rank() {
    let f = two_bs();
    assert_eq!(
        bind(&f.sig, &[z(Dtype::F32, &[2, 5]), 1.0f32.into()]),
        Err(Error::Kind {
            param: "y".into(),
            expected: "tensor".into(),
            found: "scalar".into()
        })
    );
    assert_eq!(
        bind(&f.sig, &[z(Dtype::F32, &[2, 5]), z(Dtype::BF16, &[2, 5])]),
        Err(Error::Dtype {
            param: "y".into(),
            expected: Dtype::F32,
            found: Dtype::BF16
        })
    );
    assert_eq!(
        bind(&f.sig, &[z(Dtype::F32, &[2, 5, 1]), z(Dtype::F32, &[2, 5])]),
        Err(Error::Rank {
            param: "x".into(),
            expected: 2,
            found: 3,
            shape: vec![2, 5, 1]
        })
    );
}

#[test]
fn wrong_dim_names_param_axis_expected_found_and_sigma() {
    let f = two_bs();
    let e = bind(&f.sig, &[z(Dtype::F32, &[2, 5]), z(Dtype::F32, &[2, 4])]).unwrap_err();
    assert_eq!(
        e,
        Error::Dim {
            param: "y".into(),
            axis: 1,
            dim: "S".into(),
            expected: 5,
            found: 4,
            sigma: "B = 2, S = 5".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "parameter `y`, dimension 1 (`S`): expected 5, found 4 (σ = B = 2, S = 5)"
    );
    // A constant dim.
    let mut b = FnBuilder::new("c");
    let x = b.tensor("x", Dtype::I8, ds(&["N", "3"]));
    let g = b.ret_any(x);
    assert_eq!(
        bind(&g.sig, &[z(Dtype::I8, &[4, 2])]),
        Err(Error::Dim {
            param: "x".into(),
            axis: 1,
            dim: "3".into(),
            expected: 3,
            found: 2,
            sigma: "N = 4".into()
        })
    );
}

#[test]
fn module_constants_are_pre_bound() {
    let mut b = FnBuilder::new("k");
    b.konst("HIDDEN", 4);
    let x = b.tensor("x", Dtype::F32, ds(&["B", "HIDDEN"]));
    let g = b.ret_any(x);
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[3, 4])]),
        Ok(sigma(&[("B", 3), ("HIDDEN", 4)]))
    );
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[3, 5])]),
        Err(Error::Dim {
            param: "x".into(),
            axis: 1,
            dim: "HIDDEN".into(),
            expected: 4,
            found: 5,
            sigma: "B = 3".into()
        })
    );
}

#[test]
fn compound_dims_are_checked_after_every_bare_variable() {
    // x: [S - K + 1] comes before the parameters that bind S and K.
    let mut b = FnBuilder::new("conv");
    b.var("S").var("K");
    let x = b.tensor("x", Dtype::F32, vec![d("S") - d("K") + 1]);
    let _s = b.tensor("s", Dtype::F32, ds(&["S"]));
    let _k = b.tensor("k", Dtype::F32, ds(&["K"]));
    let g = b.ret_any(x);
    let args = |n| {
        vec![
            z(Dtype::F32, &[n]),
            z(Dtype::F32, &[5]),
            z(Dtype::F32, &[3]),
        ]
    };
    assert_eq!(bind(&g.sig, &args(3)), Ok(sigma(&[("K", 3), ("S", 5)])));
    assert_eq!(
        bind(&g.sig, &args(4)),
        Err(Error::Dim {
            param: "x".into(),
            axis: 0,
            dim: "S - K + 1".into(),
            expected: 3,
            found: 4,
            sigma: "S = 5, K = 3".into()
        })
    );
    // Negative: S − K with K > S.
    let mut b = FnBuilder::new("neg");
    b.var("S").var("K");
    let _s = b.tensor("s", Dtype::F32, ds(&["S"]));
    let _k = b.tensor("k", Dtype::F32, ds(&["K"]));
    let y = b.tensor("y", Dtype::F32, vec![d("S") - d("K")]);
    let g = b.ret_any(y);
    assert_eq!(
        bind(
            &g.sig,
            &[
                z(Dtype::F32, &[2]),
                z(Dtype::F32, &[3]),
                z(Dtype::F32, &[0])
            ]
        ),
        Err(Error::Rule(RuleError::NegativeDim {
            context: "parameter `y`, dimension 0 (`S - K`)".into(),
            dim: "S - K".into(),
            value: -1
        }))
    );
    // A variable that only occurs inside a compound dim is bound from it
    // when the dim determines it (Section 2 §18)...
    let mut b = FnBuilder::new("inv");
    let y = b.tensor("y", Dtype::F32, vec![d("N") * 2]);
    let g = b.ret_any(y);
    assert_eq!(bind(&g.sig, &[z(Dtype::F32, &[4])]), Ok(sigma(&[("N", 2)])));
    // ...and cannot be bound from one that does not (`N % 2`).
    let mut b = FnBuilder::new("unb");
    let y = b.tensor("y", Dtype::F32, vec![d("N") + d("N").rem(&Dim::c(2))]);
    let g = b.ret_any(y);
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[4])]),
        Err(Error::Rule(RuleError::Eval {
            context: "parameter `y`, dimension 0 (`N + N % 2`)".into(),
            source: tc_core::dim::EvalError::Unbound("N".into())
        }))
    );
    // Division by a variable (Section 2 §13) evaluates under σ.
    let mut b = FnBuilder::new("heads");
    b.var("D").var("H");
    let _x = b.tensor("x", Dtype::F32, ds(&["D"]));
    let _h = b.tensor("h", Dtype::F32, ds(&["H"]));
    let q = b.tensor("q", Dtype::F32, vec![d("D").div(&d("H"))]);
    let g = b.ret_any(q);
    assert!(bind(
        &g.sig,
        &[
            z(Dtype::F32, &[8]),
            z(Dtype::F32, &[2]),
            z(Dtype::F32, &[4])
        ]
    )
    .is_ok());
    assert!(matches!(
        bind(
            &g.sig,
            &[
                z(Dtype::F32, &[8]),
                z(Dtype::F32, &[2]),
                z(Dtype::F32, &[3])
            ]
        ),
        Err(Error::Dim {
            expected: 4,
            found: 3,
            ..
        })
    ));
}

#[test]
fn refinements_requires_and_axioms_are_evaluated() {
    let mut b = FnBuilder::new("g");
    let x = b.tensor_refs(
        "x",
        Dtype::F32,
        ds(&["D"]),
        vec![Pred::eq(d("D").rem(&Dim::c(8)), 0)],
    );
    let _p = b.tensor("p", Dtype::F32, ds(&["P", "X", "Y"]));
    b.requires(Pred::ge("D", 16));
    b.axiom(Pred::eq(d("P"), d("X") * d("Y")));
    let g = b.ret_any(x);
    let p = |pp, xx, yy| z(Dtype::F32, &[pp, xx, yy]);
    assert!(bind(&g.sig, &[z(Dtype::F32, &[16]), p(6, 2, 3)]).is_ok());
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[12]), p(6, 2, 3)]),
        Err(Error::Predicate {
            kind: "refinement of parameter `x`".into(),
            pred: "D % 8 == 0".into(),
            sigma: "D = 12, P = 6, X = 2, Y = 3".into()
        })
    );
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[8]), p(6, 2, 3)]),
        Err(Error::Predicate {
            kind: "requires".into(),
            pred: "D >= 16".into(),
            sigma: "D = 8, P = 6, X = 2, Y = 3".into()
        })
    );
    // A false axiom never reaches a kernel (Section 2 §14).
    let e = bind(&g.sig, &[z(Dtype::F32, &[16]), p(7, 2, 3)]).unwrap_err();
    assert!(
        matches!(&e, Error::Predicate { kind, sigma, .. } if kind == "axiom" && sigma == "D = 16, P = 7, X = 2, Y = 3"),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("axiom `"), "{e}");
    // The interpreter runs the contract first.
    let r = run(&g, vec![z(Dtype::F32, &[16]), p(7, 2, 3)]);
    assert!(matches!(r, Err(Error::Predicate { .. })));
}

#[test]
fn zero_dims_need_an_opt_in() {
    let mut b = FnBuilder::new("z");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
    let g = b.ret_any(x);
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[2, 0])]),
        Err(Error::ZeroDim {
            param: "x".into(),
            axis: 1,
            var: "S".into(),
            sigma: "B = 2".into()
        })
    );
    // Opt in via the signature's variable …
    let mut b = FnBuilder::new("z0");
    b.var("B").var0("S");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
    let g = b.ret_any(x);
    assert_eq!(
        bind(&g.sig, &[z(Dtype::F32, &[2, 0])]),
        Ok(sigma(&[("B", 2), ("S", 0)]))
    );
    // … or by a refinement `S >= 0` (Section 2 §16).
    let mut b = FnBuilder::new("z1");
    let x = b.tensor_refs("x", Dtype::F32, ds(&["B", "S"]), vec![Pred::ge("S", 0)]);
    let g = b.ret_any(x);
    assert!(bind(&g.sig, &[z(Dtype::F32, &[2, 0])]).is_ok());
    // A literal 0 dim is what it is.
    let mut b = FnBuilder::new("z2");
    let x = b.tensor("x", Dtype::F32, ds(&["0"]));
    let g = b.ret_any(x);
    assert!(bind(&g.sig, &[z(Dtype::F32, &[0])]).is_ok());
    // And the interpreter runs on empty tensors once admitted.
    let mut b = FnBuilder::new("sum0");
    b.var("B").var0("S");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
    let r = b.op(Op::Reduce {
        op: tc_core::ir::ReduceOp::Sum,
        axes: vec![1],
        keepdims: false,
        x,
    });
    let g = b.ret(r, tt(Dtype::F32, ds(&["B"])));
    assert_eq!(
        fv(&run(&g, vec![z(Dtype::F32, &[3, 0])]).unwrap()),
        vec![0.0; 3]
    );
}

#[test]
fn scalar_parameters() {
    let mut b = FnBuilder::new("s");
    let _n = b.scalar("n", Dtype::I8);
    let _a = b.scalar("alpha", Dtype::BF16);
    let _m = b.scalar("mask", Dtype::Bool);
    let g = b.ret_any(tc_core::ir::Value::from_u32(0));
    let ok = bind_args(&g.sig, &[5i64.into(), 0.1f32.into(), true.into()]).unwrap();
    assert_eq!(ok.scalars[0], Some((Elem::I(5), Dtype::I8)));
    // The f32 0.1 is rounded into bf16.
    assert_eq!(
        ok.scalars[1],
        Some((
            Elem::F(tc_runtime::cast::round_to(0.1, Dtype::BF16)),
            Dtype::BF16
        ))
    );
    assert_eq!(
        bind(&g.sig, &[300i64.into(), 0.1f32.into(), true.into()]),
        Err(Error::ScalarValue {
            param: "n".into(),
            dtype: Dtype::I8,
            value: "300".into()
        })
    );
    assert_eq!(
        bind(&g.sig, &[5i64.into(), 1i64.into(), true.into()]),
        Err(Error::Dtype {
            param: "alpha".into(),
            expected: Dtype::BF16,
            found: Dtype::I64
        })
    );
    assert_eq!(
        bind(&g.sig, &[5i64.into(), 0.5f32.into(), z(Dtype::Bool, &[])]),
        Err(Error::Kind {
            param: "mask".into(),
            expected: "scalar".into(),
            found: "tensor".into()
        })
    );
}

#[test]
fn errors_come_in_parameter_order() {
    // Both parameters are wrong: the first one is reported.
    let f = two_bs();
    let e = bind(&f.sig, &[z(Dtype::I32, &[2, 5]), z(Dtype::F32, &[2])]).unwrap_err();
    assert!(matches!(e, Error::Dtype { ref param, .. } if param == "x"));
}
