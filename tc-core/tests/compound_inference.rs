//! Inference through invertible compound dims (Section 2 §18, last bullet):
//! formation accepts a variable whose parameter dims determine it (`4 * F`,
//! `F + 2`, `K / 32` with `K % 32 == 0`) and refuses, with the reason, one
//! they do not; a call solves it from the caller's dim with divisibility as
//! an obligation; and the inversion itself round-trips (a property test).

use proptest::prelude::*;

use tc_core::build::FnBuilder;
use tc_core::check::{cex_string, check_function, check_signature};
use tc_core::diag::codes;
use tc_core::invert::{layers, solve_value, InvertError};
use tc_core::ir::{Function, Op, Signatures, UnaryOp};
use tc_core::{Diagnostic, Dim, Dtype, Pred, Sigma, Type};

fn v(s: &str) -> Dim {
    Dim::var(s)
}

fn c(n: i64) -> Dim {
    Dim::c(n)
}

fn f32s(dims: Vec<Dim>) -> Type {
    Type::tensor(Dtype::F32, dims)
}

/// `name(x: [dims]) -> [dims]`, `relu x`, after `extra` (consts, requires).
fn unary_fn(name: &str, dims: Vec<Dim>, extra: impl FnOnce(&mut FnBuilder)) -> Function {
    let mut b = FnBuilder::new(name);
    extra(&mut b);
    let x = b.param("x", f32s(dims.clone()));
    b.returns(f32s(dims));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    b.finish(y)
}

fn formed(f: &Function) {
    let ds = check_signature(&f.sig);
    assert!(ds.is_empty(), "{f}\n{ds:#?}");
}

fn unbound(f: &Function, var: &str, why: &str) {
    let ds = check_signature(&f.sig);
    let d = ds
        .iter()
        .find(|d| d.code == codes::UNBOUND_VAR && d.message.contains(&format!("variable `{var}`")))
        .unwrap_or_else(|| panic!("no E0102 for `{var}`: {ds:#?}\n{f}"));
    assert!(
        d.message.contains(&format!("`{var}`")) && d.message.contains(why),
        "{}",
        d.message
    );
}

#[test]
fn formation_accepts_invertible_dims() {
    let k = || v("K").div(&c(32));
    formed(&unary_fn("a", vec![v("D"), v("F") * 4], |_| {}));
    formed(&unary_fn("b", vec![v("F") + 2], |_| {}));
    formed(&unary_fn("c", vec![v("F") - 1], |b| {
        b.requires(Pred::ge(v("F"), 2));
    }));
    let exact = || Pred::eq(v("K").rem(&c(32)), 0);
    formed(&unary_fn("d", vec![v("N"), k()], |b| {
        b.requires(exact());
    }));
    formed(&unary_fn("e", vec![v("N"), k() * 34 + 2], |b| {
        b.requires(exact());
    }));
    // Mixtral's fused expert weights with the expert count a module constant.
    formed(&unary_fn("f", vec![v("D"), v("N_EXPERTS") * v("F")], |b| {
        b.constant("N_EXPERTS", 8);
    }));
    // A dim parameter binds the same way.
    let mut b = FnBuilder::new("g");
    let x = b.param("x", f32s(vec![v("N")]));
    b.param("width", Type::Dim(v("F") * 8));
    b.returns(f32s(vec![v("N")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, x));
    formed(&b.finish(y));
    // `G` bound through `G + 1` first, then `F` through `F + G`.
    let mut b = FnBuilder::new("h");
    b.param("x", f32s(vec![v("G") + 1]));
    let y0 = b.param("y", f32s(vec![v("F") + v("G")]));
    b.returns(f32s(vec![v("F") + v("G")]));
    let y = b.op(Op::Unary(UnaryOp::Relu, y0));
    formed(&b.finish(y));
}

#[test]
fn formation_refuses_non_invertible_dims_with_the_reason() {
    unbound(
        &unary_fn("a", vec![v("N") + v("F").rem(&c(2))], |_| {}),
        "F",
        "remainder",
    );
    unbound(
        &unary_fn("b", vec![v("F") * v("F")], |_| {}),
        "F",
        "multiplies",
    );
    unbound(
        &unary_fn("c", vec![v("E") * v("F")], |_| {}),
        "F",
        "multiplies",
    );
    unbound(
        &unary_fn("d", vec![v("D"), v("D").div(&v("F"))], |b| {
            b.requires(Pred::eq(v("D").rem(&v("F")), 0));
        }),
        "F",
        "divides by",
    );
    // Floor division without exactness: `K` is one of 32 values.
    unbound(
        &unary_fn("e", vec![v("K").div(&c(32))], |_| {}),
        "K",
        "only up to a remainder",
    );
}

/// Callee `experts(x: [D, 4 * F]) -> [D, 4 * F]`, `blocks(x: [K / 32]) ->
/// [K / 32]` with `K % 32 == 0`, `shifted(x: [F + 2]) -> [F + 2]`.
fn callees() -> Signatures {
    let mut sigs = Signatures::new();
    let f = unary_fn("experts", vec![v("D"), v("F") * 4], |_| {});
    sigs.insert("experts".into(), f.sig);
    let f = unary_fn("blocks", vec![v("K").div(&c(32))], |b| {
        b.requires(Pred::eq(v("K").rem(&c(32)), 0));
    });
    sigs.insert("blocks".into(), f.sig);
    let f = unary_fn("shifted", vec![v("F") + 2], |_| {});
    sigs.insert("shifted".into(), f.sig);
    sigs
}

/// A caller of `callee` with one parameter of `dims`, declared to return
/// `ret`: the call's result must check against it (Section 3 §3.3).
fn caller(
    callee: &str,
    dims: Vec<Dim>,
    ret: Vec<Dim>,
    extra: impl FnOnce(&mut FnBuilder),
) -> Result<(), Vec<Diagnostic>> {
    let mut b = FnBuilder::new("caller");
    extra(&mut b);
    let x = b.param("w", f32s(dims));
    b.returns(f32s(ret));
    let y = b.op(Op::Call(callee.into(), vec![x]));
    check_function(&b.finish(y), &callees()).map(|_| ())
}

#[test]
fn calls_solve_the_variable() {
    // θ = {F: 2 · E}: the result `[D, 4 * F]` is `[D, 8 * E]`.
    let mixtral = vec![v("D"), v("E") * 8];
    caller("experts", mixtral.clone(), mixtral, |_| {}).unwrap();
    // θ = {F: N / 4}, exact by `requires`.
    let ok = caller("experts", vec![v("D"), v("N")], vec![v("D"), v("N")], |b| {
        b.requires(Pred::eq(v("N").rem(&c(4)), 0));
    });
    ok.unwrap();
    caller("experts", vec![c(3), c(32)], vec![c(3), c(32)], |_| {}).unwrap();
    // θ = {K: 32 · B}.
    caller("blocks", vec![v("B")], vec![v("B")], |_| {}).unwrap();
    // θ = {F: M - 2}, at least 1 by `requires`.
    let ok = caller("shifted", vec![v("M")], vec![v("M")], |b| {
        b.requires(Pred::ge(v("M"), 3));
    });
    ok.unwrap();
}

#[test]
fn calls_refuse_a_dim_not_provably_a_multiple() {
    let es = caller(
        "experts",
        vec![v("D"), v("N")],
        vec![v("D"), v("N")],
        |_| {},
    )
    .unwrap_err();
    assert_eq!(es.len(), 1, "{es:#?}");
    assert_eq!(es[0].code, codes::CALL);
    assert!(
        es[0].message.contains("binding `F` from the dim `N`"),
        "{}",
        es[0].message
    );
    assert!(es[0].message.contains("multiple of 4"), "{}", es[0].message);
    assert_eq!(cex_string(&es[0]), "N = 1");
    let es = caller("experts", vec![c(3), c(30)], vec![c(3), c(30)], |_| {}).unwrap_err();
    assert_eq!(es[0].code, codes::CALL);
    assert!(
        es[0].message.contains("`30` to be a multiple of 4"),
        "{}",
        es[0].message
    );
    // The range: `F = M - 2` must be at least 1.
    let es = caller("shifted", vec![v("M")], vec![v("M")], |_| {}).unwrap_err();
    assert_eq!(es[0].code, codes::CALL);
    assert!(es[0].message.contains("F >= 1"), "{}", es[0].message);
    assert_eq!(cex_string(&es[0]), "M = 1");
}

// ------------------------------------------------------------ the property

/// One step of a composition applied to the variable.
#[derive(Clone, Copy, Debug)]
enum Step {
    Scale(i64),
    Shift(i64),
    Quot(i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop_oneof![-5i64..=-1, 1i64..=7].prop_map(Step::Scale),
        (-20i64..=20).prop_map(Step::Shift),
        (2i64..=8).prop_map(Step::Quot),
    ]
}

fn compose(steps: &[Step]) -> Dim {
    steps.iter().fold(v("F"), |d, s| match *s {
        Step::Scale(k) => d.scale(k),
        Step::Shift(k) => d + k,
        Step::Quot(k) => d.div(&c(k)),
    })
}

fn at(d: &Dim, alpha: i64) -> i64 {
    let mut s = Sigma::new();
    s.insert("F".into(), alpha);
    d.eval(&s).unwrap()
}

proptest! {
    /// Without quotients every composition is affine and invertible: the
    /// inversion of `f(α)` is `α`, and a size gives a value exactly when it
    /// lies in the image (`(n - b) % a == 0` for `f = a·F + b`).
    #[test]
    fn affine_compositions_invert_exactly(
        steps in prop::collection::vec(step(), 1..6),
        alpha in 1i64..10_000,
        n in -100_000i64..100_000,
    ) {
        let steps: Vec<Step> = steps.into_iter().filter(|s| !matches!(s, Step::Quot(_))).collect();
        let d = compose(&steps);
        prop_assume!(d.vars().contains("F"));
        prop_assert!(layers(&d, "F", &|_| false).is_ok(), "{d}");
        prop_assert_eq!(solve_value(&d, "F", at(&d, alpha), &Sigma::new()), Ok(alpha));
        let (a, b) = (at(&d, 1) - at(&d, 0), at(&d, 0));
        match solve_value(&d, "F", n, &Sigma::new()) {
            Ok(x) => prop_assert_eq!(at(&d, x), n),
            Err(InvertError::NotMultiple { .. }) => prop_assert!((n - b) % a != 0, "{d} at {n}"),
            Err(e) => prop_assert!(false, "{d} at {n}: {e}"),
        }
    }

    /// With quotients: when the dim is accepted as invertible and every
    /// quotient divides exactly at `α` (the fact formation asks the
    /// signature for), the inversion of `f(α)` is `α`. Otherwise it may
    /// pick a representative or refuse, but never a value that maps
    /// elsewhere.
    #[test]
    fn accepted_compositions_round_trip(
        steps in prop::collection::vec(step(), 1..6),
        alpha in 1i64..10_000,
    ) {
        let d = compose(&steps);
        let Ok(ls) = layers(&d, "F", &|_| false) else { return Ok(()) };
        let n = at(&d, alpha);
        let back = solve_value(&d, "F", n, &Sigma::new());
        let exact = ls.iter().filter_map(|l| l.quotient.as_ref()).all(|(x, k)| at(x, alpha).rem_euclid(*k) == 0);
        match back {
            Ok(x) if exact => prop_assert_eq!(x, alpha, "{}", d),
            Ok(x) => prop_assert_eq!(at(&d, x), n, "{} at {}", d, n),
            Err(InvertError::NotMultiple { .. }) if !exact => {}
            Err(e) => prop_assert!(false, "{d} at {n} (α = {alpha}): {e}"),
        }
    }
}
