//! Every shape variable of an accepted signature is bound at every call
//! (Section 2 §17: a call binds the parameters' bare dims, and Section 2
//! §18 the variables of compound dims invertible in them, `2 * V`). A
//! variable that occurs in no parameter dim — only in `requires`, a
//! refinement, an axiom, the return type, or declared through
//! `FnBuilder::declare` — is refused at formation with E0102 on every
//! path into the checker (`check_signature`, `check_function`), instead of
//! being accepted and failing every call with an unbound variable.
//!
//! The property test draws signatures with variables placed at random in
//! every position a variable can occur and checks the class: whenever the
//! checker accepts, each variable of the signature is a bare dim of some
//! parameter or solvable from an invertible one (what the runtime contract
//! binds).

use proptest::prelude::*;

use tc_core::build::FnBuilder;
use tc_core::check::{check_function, check_signature};
use tc_core::diag::codes;
use tc_core::ir::{Function, Op, Signatures, UnaryOp};
use tc_core::{Dim, Dtype, Pred, TensorType, Type};

fn v(s: &str) -> Dim {
    Dim::var(s)
}

fn f32s(dims: Vec<Dim>) -> Type {
    Type::tensor(Dtype::F32, dims)
}

/// `f(x: [N]) -> [N]`, `relu x`, with `extra` applied to the builder
/// before the body.
fn with(extra: impl FnOnce(&mut FnBuilder)) -> Function {
    let mut b = FnBuilder::new("f");
    let x = b.param("x", f32s(vec![v("N")]));
    extra(&mut b);
    b.returns(f32s(vec![v("N")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    b.finish(y)
}

/// Both checker entry points refuse `f` with E0102 naming `var`.
fn refused(f: &Function, var: &str) {
    let sig_diags = check_signature(&f.sig);
    let fn_diags = check_function(f, &Signatures::new())
        .err()
        .unwrap_or_default();
    for (path, ds) in [
        ("check_signature", &sig_diags),
        ("check_function", &fn_diags),
    ] {
        assert!(
            ds.iter()
                .any(|d| d.code == codes::UNBOUND_VAR && d.message.contains(&format!("`{var}`"))),
            "{path} accepted a signature whose `{var}` no call can bind: {ds:?}\n{f}"
        );
    }
}

#[test]
fn a_declared_variable_in_no_dim_is_refused() {
    refused(
        &with(|b| {
            b.declare("Q");
        }),
        "Q",
    );
}

#[test]
fn a_variable_only_in_requires_is_refused() {
    refused(
        &with(|b| {
            b.declare("Q");
            b.requires(Pred::ge(v("Q"), 2));
        }),
        "Q",
    );
}

#[test]
fn a_variable_only_in_an_axiom_is_refused() {
    refused(
        &with(|b| {
            b.declare("P");
            b.axiom(Pred::eq(v("P"), v("N") + v("N")));
        }),
        "P",
    );
}

#[test]
fn a_variable_only_in_a_refinement_is_refused() {
    let mut b = FnBuilder::new("f");
    b.declare("Q");
    let t = TensorType::new(Dtype::F32, vec![v("N")]).with_refs(vec![Pred::ge(v("N"), v("Q"))]);
    let x = b.param("x", Type::Tensor(t));
    b.returns(f32s(vec![v("N")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    refused(&b.finish(y), "Q");
}

#[test]
fn a_variable_only_in_the_return_type_is_refused() {
    // `FnBuilder::returns` declares the return type's variables.
    let mut b = FnBuilder::new("f");
    let x = b.param("x", f32s(vec![v("N")]));
    b.returns(f32s(vec![v("T")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    refused(&b.finish(y), "T");
}

#[test]
fn variables_bound_by_a_parameter_are_accepted() {
    // `M` is bare in `w`, `Q` is a dim parameter: both bound at a call.
    let mut b = FnBuilder::new("f");
    let x = b.param("x", f32s(vec![v("N")]));
    b.param("w", f32s(vec![v("M"), v("N")]));
    b.param("q", Type::Dim(v("Q")));
    b.requires(Pred::ge(v("M"), v("Q")));
    b.axiom(Pred::ge(v("Q"), 1));
    b.returns(f32s(vec![v("N")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    let f = b.finish(y);
    assert_eq!(check_signature(&f.sig), vec![]);
    check_function(&f, &Signatures::new()).expect("accepted");
}

// ---------------------------------------------------------------- the class

/// Where one variable of a drawn signature occurs.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A bare dim of parameter `x` (bound at a call).
    Bare,
    /// A dim parameter `Dim![V]` (bound at a call).
    DimParam,
    /// Inside the compound dim `2 * V` of a parameter (invertible: bound).
    Compound,
    /// Inside the compound dim `N + V % 3` of a parameter (not invertible).
    Remainder,
    /// `requires(V >= 1)`.
    Requires,
    /// A refinement `N >= V` of `x`.
    Refinement,
    /// `axiom(V >= 1)`.
    Axiom,
    /// The return type's second dim.
    Return,
    /// Only `FnBuilder::declare`.
    Declared,
}

fn place() -> impl Strategy<Value = Place> {
    prop_oneof![
        Just(Place::Bare),
        Just(Place::DimParam),
        Just(Place::Compound),
        Just(Place::Remainder),
        Just(Place::Requires),
        Just(Place::Refinement),
        Just(Place::Axiom),
        Just(Place::Return),
        Just(Place::Declared),
    ]
}

/// A signature over `N` (bare in `x`) and `A`, `B`, `C`, each occurring in
/// one or two places of `places`.
fn drawn(places: &[(Place, Option<Place>)]) -> Function {
    let names = ["A", "B", "C"];
    let mut b = FnBuilder::new("f");
    let at = |p: Place| {
        places
            .iter()
            .zip(names)
            .filter(move |((a, o), _)| {
                std::mem::discriminant(a) == std::mem::discriminant(&p)
                    || o.is_some_and(|o| std::mem::discriminant(&o) == std::mem::discriminant(&p))
            })
            .map(|(_, n)| n)
            .collect::<Vec<_>>()
    };
    for n in at(Place::Declared) {
        b.declare(n);
    }
    let mut xdims = vec![v("N")];
    xdims.extend(at(Place::Bare).into_iter().map(v));
    xdims.extend(at(Place::Compound).into_iter().map(|n| v(n) + v(n)));
    xdims.extend(
        at(Place::Remainder)
            .into_iter()
            .map(|n| v("N") + v(n).rem(&Dim::c(3))),
    );
    let refs: Vec<Pred> = at(Place::Refinement)
        .into_iter()
        .map(|n| Pred::ge(v("N"), v(n)))
        .collect();
    let x = b.param(
        "x",
        Type::Tensor(TensorType::new(Dtype::F32, xdims).with_refs(refs)),
    );
    for n in at(Place::DimParam) {
        b.param(&n.to_lowercase(), Type::Dim(v(n)));
    }
    for n in at(Place::Requires) {
        b.requires(Pred::ge(v(n), 1));
    }
    for n in at(Place::Axiom) {
        b.axiom(Pred::ge(v(n), 1));
    }
    let mut ret = vec![v("N")];
    ret.extend(at(Place::Return).into_iter().map(v));
    b.returns(f32s(ret.clone()));
    // A body whose type is the return type: `full` of that shape.
    let _ = x;
    let y = b.op(Op::Fill(Dtype::F32, ret, tc_core::ir::Scalar::Float(0.0)));
    b.finish(y)
}

/// The variables a call binds: the bare dims of the parameters, then
/// (Section 2 §18) the one open variable of a dim invertible in it.
fn bound_at_a_call(f: &Function) -> Vec<String> {
    let dims: Vec<Dim> = f
        .sig
        .params
        .iter()
        .flat_map(|p| p.ty.param_dims().to_vec())
        .collect();
    let mut bound: Vec<String> = dims
        .iter()
        .filter_map(|d| d.as_var().map(str::to_string))
        .collect();
    loop {
        let before = bound.len();
        for d in &dims {
            let open: Vec<String> = d
                .vars()
                .into_iter()
                .filter(|x| !bound.contains(x))
                .collect();
            if let [x] = open.as_slice() {
                if tc_core::invert::layers(d, x, &|y| bound.iter().any(|b| b == y)).is_ok() {
                    bound.push(x.clone());
                }
            }
        }
        if bound.len() == before {
            return bound;
        }
    }
}

/// Every variable the signature names, anywhere.
fn mentioned(f: &Function) -> Vec<String> {
    let mut out: Vec<String> = f.sig.vars.iter().map(|v| v.name.clone()).collect();
    for p in &f.sig.params {
        for d in p.ty.param_dims() {
            out.extend(d.vars());
        }
        if let Type::Tensor(t) = &p.ty {
            for r in &t.refs {
                out.extend(r.vars());
            }
        }
    }
    for r in f.sig.requires.iter().chain(&f.sig.axioms) {
        out.extend(r.node.vars());
    }
    if let Type::Tensor(t) = &f.sig.ret {
        for d in &t.shape {
            out.extend(d.vars());
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn an_accepted_signature_binds_every_variable_at_a_call(
        places in prop::collection::vec((place(), prop::option::of(place())), 3),
    ) {
        let f = drawn(&places);
        let bound = bound_at_a_call(&f);
        let sig_ok = check_signature(&f.sig).is_empty();
        let fn_ok = check_function(&f, &Signatures::new()).is_ok();
        if sig_ok || fn_ok {
            for var in &f.sig.vars {
                prop_assert!(
                    bound.contains(&var.name),
                    "accepted, but no call binds `{}` (check_signature {sig_ok}, check_function {fn_ok}):\n{f}",
                    var.name
                );
            }
        }
        // And the converse: a signature whose variables are all bound
        // parameter dims is not refused for being unbound.
        if mentioned(&f).iter().all(|v| bound.contains(v)) {
            let ds = check_signature(&f.sig);
            prop_assert!(
                ds.iter().all(|d| d.code != codes::UNBOUND_VAR),
                "refused as unbound although every variable is a bare parameter dim: {ds:?}\n{f}"
            );
        }
    }
}

#[test]
fn value_ids_of_drawn_signatures_are_well_formed() {
    // The drawn functions pass the verifier's structure checks, so a
    // refusal above is formation's, not a malformed body's.
    let f = drawn(&[
        (Place::Bare, None),
        (Place::DimParam, None),
        (Place::Bare, None),
    ]);
    assert_eq!(f.ret, f.inst_value(0));
    check_function(&f, &Signatures::new()).expect("accepted");
}
