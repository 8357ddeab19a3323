//! Checked dim algebra and the dim well-formedness obligations (issue 10
//! items 7, 9; issue 11 items 1, 5, 7):
//!
//! (a) property: every checked operation (`+ - * neg scale`) agrees with exact
//!     i128 arithmetic on each coefficient, or reports overflow exactly when
//!     some coefficient leaves i64; it never wraps. Quotients and
//!     substitution agree with evaluation wherever they succeed;
//! (b) the checker: overflow is E0106, a constant-0 divisor E0107, a divisor
//!     that may be below 1 (or a negative constant) E0108 with its
//!     counterexample, in signatures, `requires` and body shapes;
//! (c) module-constant products are linear; constant divisors in reshape.

use std::collections::BTreeMap;

use proptest::prelude::*;

use tc_core::build::FnBuilder;
use tc_core::check::{cex_string, check_function};
use tc_core::diag::codes;
use tc_core::dim::{Atom, DimError};
use tc_core::ir::{Op, Scalar, Signatures, Value};
use tc_core::{Diagnostic, Dim, Dtype, Pred, Sigma, Type};

// ---------------------------------------------------------- (a) properties

/// Coefficients biased towards the i64 boundaries, where wrapping would hide.
fn coeff() -> impl Strategy<Value = i64> {
    prop_oneof![
        -4i64..=4,
        Just(i64::MAX),
        Just(i64::MIN),
        Just(i64::MAX / 2 + 1),
        Just(1i64 << 62),
        Just(-(1i64 << 62)),
        Just(1i64 << 32),
        any::<i64>(),
    ]
}

/// `c0 + c1·A + c2·B + c3·A·B` together with its exact coefficient map.
fn poly() -> impl Strategy<Value = [i64; 4]> {
    [coeff(), coeff(), coeff(), coeff()]
}

fn build(c: &[i64; 4]) -> Dim {
    let (a, b) = (Dim::var("A"), Dim::var("B"));
    let ab = a.checked_mul(&b).unwrap();
    let parts = [
        Dim::c(c[0]),
        a.checked_scale(c[1]).unwrap(),
        b.checked_scale(c[2]).unwrap(),
        ab.checked_scale(c[3]).unwrap(),
    ];
    parts
        .iter()
        .fold(Dim::c(0), |acc, p| acc.checked_add(p).unwrap())
}

/// The monomial key of a term, as the sorted variable names.
fn key(m: &[Atom]) -> Vec<String> {
    m.iter()
        .map(|a| match a {
            Atom::Var(v) => v.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn coeffs(d: &Dim) -> BTreeMap<Vec<String>, i128> {
    d.terms().map(|(m, c)| (key(m), c as i128)).collect()
}

/// The exact (i128) expectation: `Ok(coefficients)` when all fit in i64.
fn expect_exact(exact: BTreeMap<Vec<String>, i128>) -> Option<BTreeMap<Vec<String>, i128>> {
    let exact: BTreeMap<_, _> = exact.into_iter().filter(|(_, c)| *c != 0).collect();
    exact
        .values()
        .all(|c| i64::try_from(*c).is_ok())
        .then_some(exact)
}

fn agrees(
    got: Result<Dim, DimError>,
    exact: BTreeMap<Vec<String>, i128>,
) -> Result<(), TestCaseError> {
    match (got, expect_exact(exact)) {
        (Ok(d), Some(e)) => prop_assert_eq!(coeffs(&d), e),
        (Err(DimError::Overflow(_)), None) => {}
        (got, e) => prop_assert!(false, "got {:?}, exact {:?}", got, e),
    }
    Ok(())
}

fn combine(a: &Dim, b: &Dim, f: impl Fn(i128, i128) -> i128) -> BTreeMap<Vec<String>, i128> {
    let (ca, cb) = (coeffs(a), coeffs(b));
    let mut out = BTreeMap::new();
    for k in ca.keys().chain(cb.keys()) {
        let x = ca.get(k).copied().unwrap_or(0);
        let y = cb.get(k).copied().unwrap_or(0);
        out.insert(k.clone(), f(x, y));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn add_sub_are_exact_or_overflow(x in poly(), y in poly()) {
        let (a, b) = (build(&x), build(&y));
        agrees(a.checked_add(&b), combine(&a, &b, |p, q| p + q))?;
        agrees(a.checked_sub(&b), combine(&a, &b, |p, q| p - q))?;
    }

    #[test]
    fn neg_and_scale_are_exact_or_overflow(x in poly(), k in coeff()) {
        let a = build(&x);
        agrees(a.checked_neg(), coeffs(&a).into_iter().map(|(m, c)| (m, -c)).collect())?;
        agrees(a.checked_scale(k), coeffs(&a).into_iter().map(|(m, c)| (m, c * k as i128)).collect())?;
    }

    #[test]
    fn mul_is_exact_or_overflow(x in poly(), y in poly()) {
        let (a, b) = (build(&x), build(&y));
        let mut exact: BTreeMap<Vec<String>, i128> = BTreeMap::new();
        for (m1, c1) in coeffs(&a) {
            for (m2, c2) in coeffs(&b) {
                let mut m: Vec<String> = m1.iter().chain(&m2).cloned().collect();
                m.sort();
                // The oracle skips the (astronomically out-of-range) sums
                // that leave i128 itself.
                let e = exact.entry(m).or_insert(0);
                let Some(sum) = e.checked_add(c1 * c2) else { return Ok(()) };
                *e = sum;
            }
        }
        agrees(a.checked_mul(&b), exact)?;
    }

    /// Where a quotient or remainder by a positive constant normalises, its
    /// value is Euclidean division of the value (no silent wrap inside).
    #[test]
    fn div_rem_by_constant_evaluate_exactly(x in poly(), k in 1i64..=9, a in 0i64..=5, b in 0i64..=5) {
        let d = build(&x);
        let s: Sigma = [("A".to_string(), a), ("B".to_string(), b)].into_iter().collect();
        if let Ok(v) = d.eval(&s) {
            if let Ok(q) = d.checked_div(&Dim::c(k)) {
                if let Ok(qv) = q.eval(&s) {
                    prop_assert_eq!(qv, v.div_euclid(k));
                }
            }
            if let Ok(r) = d.checked_rem(&Dim::c(k)) {
                prop_assert_eq!(r.eval(&s).unwrap(), v.rem_euclid(k));
            }
        }
    }

    /// Substitution either fails with overflow or commutes with evaluation.
    #[test]
    fn subst_commutes_with_eval(x in poly(), y in poly(), b in 0i64..=4) {
        let (d, e) = (build(&x), build(&y));
        let map: BTreeMap<String, Dim> = [("A".to_string(), e.clone())].into_iter().collect();
        let s: Sigma = [("B".to_string(), b)].into_iter().collect();
        if let (Ok(sub), Ok(ev)) = (d.checked_subst(&map), e.eval(&s)) {
            let mut s2 = s.clone();
            s2.insert("A".into(), ev);
            if let (Ok(l), Ok(r)) = (sub.eval(&s), d.eval(&s2)) {
                prop_assert_eq!(l, r);
            }
        }
    }
}

#[test]
fn the_issue_reproducer_overflows_instead_of_wrapping() {
    // `N * 4611686018427387904 * 4 + 1` used to normalise to `1`.
    let n = Dim::var("N").checked_scale(4611686018427387904).unwrap();
    let e = n.checked_mul(&Dim::c(4)).unwrap_err();
    assert!(matches!(e, DimError::Overflow(_)), "{e}");
    assert_eq!(e.code(), codes::DIM_OVERFLOW);
    assert!(Dim::c(i64::MIN).checked_neg().is_err());
    assert!(Dim::c(i64::MAX).checked_add(&Dim::c(1)).is_err());
}

#[test]
fn division_by_constant_zero_is_its_own_error() {
    let n = Dim::var("N");
    for r in [
        n.checked_div(&Dim::c(0)),
        n.checked_rem(&Dim::c(0)),
        Dim::c(0).checked_div(&Dim::c(0)),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, DimError::DivByZero(_)), "{e}");
        assert_eq!(e.code(), codes::DIV_BY_ZERO);
    }
}

#[test]
#[should_panic(expected = "overflows i64")]
fn operator_impls_panic_rather_than_wrap() {
    let _ = Dim::var("N") * Dim::c(i64::MAX) * Dim::c(2);
}

// ---------------------------------------------------------- (b) the checker

fn fb() -> FnBuilder {
    FnBuilder::new("f")
}

fn f32t(dims: Vec<Dim>) -> Type {
    Type::tensor(Dtype::F32, dims)
}

fn v(s: &str) -> Dim {
    Dim::var(s)
}

fn errors(mut b: FnBuilder, y: Value, ret: Type) -> Vec<Diagnostic> {
    b.returns(ret);
    let f = b.finish(y);
    match check_function(&f, &Signatures::new()) {
        Ok(_) => panic!("expected a rejection of\n{f}"),
        Err(es) => es,
    }
}

fn accepted(mut b: FnBuilder, y: Value, ret: Type) {
    b.returns(ret);
    let f = b.finish(y);
    if let Err(es) = check_function(&f, &Signatures::new()) {
        let all: Vec<String> = es.iter().map(|e| e.to_string()).collect();
        panic!("expected acceptance of\n{f}\n{}", all.join("\n"));
    }
}

/// `d % g` as an atom (G not constant, so it stays symbolic).
fn rem(d: Dim, g: Dim) -> Dim {
    d.checked_rem(&g).unwrap()
}

/// `x: [D]`, `g: [G]` with `G >= 0` opted in.
fn d_and_g() -> (FnBuilder, Value) {
    let mut b = fb();
    let x = b.param("x", f32t(vec![v("D")]));
    b.param("g", f32t(vec![v("G")]));
    b.requires(Pred::ge("G", 0));
    (b, x)
}

#[test]
fn divisor_that_may_be_zero_in_a_fill_shape() {
    let (mut b, _) = d_and_g();
    let shape = vec![rem(v("D"), v("G")).checked_add(&Dim::c(1)).unwrap()];
    let y = b.op(Op::Fill(Dtype::F32, shape.clone(), Scalar::Float(0.0)));
    let es = errors(b, y, f32t(shape));
    assert_eq!(es[0].code, codes::DIVISOR, "{}", es[0]);
    assert!(
        es[0]
            .message
            .contains("the divisor `G` of `D % G` may be smaller than 1"),
        "{}",
        es[0]
    );
    assert_eq!(cex_string(&es[0]), "G = 0");
}

#[test]
fn divisor_that_may_be_zero_in_slice_bounds() {
    let (mut b, x) = d_and_g();
    let y = b.op(Op::Slice {
        axis: 0,
        start: Dim::c(0),
        stop: rem(v("D"), v("G")),
        step: 1,
        x,
    });
    let es = errors(b, y, f32t(vec![v("D")]));
    assert_eq!(es[0].code, codes::DIVISOR, "{}", es[0]);
    assert_eq!(cex_string(&es[0]), "G = 0");
}

#[test]
fn divisor_that_may_be_zero_in_requires() {
    let (mut b, x) = d_and_g();
    b.requires(Pred::eq(rem(v("D"), v("G")), 0));
    let es = errors(b, x, f32t(vec![v("D")]));
    assert_eq!(es[0].code, codes::DIVISOR, "{}", es[0]);
    assert_eq!(cex_string(&es[0]), "G = 0");
}

#[test]
fn divisor_proven_positive_is_accepted() {
    // `G >= 0` opted in, but `requires(G >= 2)` discharges the obligation.
    let (mut b, _) = d_and_g();
    b.requires(Pred::ge("G", 2));
    let shape = vec![rem(v("D"), v("G")).checked_add(&Dim::c(1)).unwrap()];
    let y = b.op(Op::Fill(Dtype::F32, shape.clone(), Scalar::Float(0.0)));
    accepted(b, y, f32t(shape));
}

#[test]
fn negative_constant_divisor_is_rejected() {
    for is_div in [true, false] {
        let mut b = fb();
        b.param("x", f32t(vec![v("D")]));
        let q = if is_div {
            v("D").checked_div(&Dim::c(-2))
        } else {
            v("D").checked_rem(&Dim::c(-2))
        };
        let shape = vec![q.unwrap().checked_add(&Dim::c(3)).unwrap()];
        let y = b.op(Op::Fill(Dtype::F32, shape.clone(), Scalar::Float(0.0)));
        let es = errors(b, y, f32t(shape));
        assert_eq!(es[0].code, codes::DIVISOR, "{}", es[0]);
        assert!(
            es[0].message.contains("is -2, which is negative"),
            "{}",
            es[0]
        );
    }
}

#[test]
fn module_constant_zero_divisor_is_division_by_zero() {
    let mut b = fb();
    b.constant("Z", 0);
    let x = b.param("x", f32t(vec![v("D")]));
    let shape = vec![v("D")
        .checked_div(&v("Z"))
        .unwrap()
        .checked_add(&Dim::c(1))
        .unwrap()];
    let y = b.op(Op::Fill(Dtype::F32, shape.clone(), Scalar::Float(0.0)));
    let _ = x;
    let es = errors(b, y, f32t(shape));
    assert_eq!(es[0].code, codes::DIV_BY_ZERO, "{}", es[0]);
}

#[test]
fn volume_overflow_is_e0106_not_a_wrap() {
    // [2^32 * N, 2^32 * N] has no i64 volume polynomial (coefficient 2^64).
    let mut b = fb();
    let big = v("N").checked_scale(1 << 32).unwrap();
    let _n = b.param("n", f32t(vec![v("N")])); // binds N (Section 2 §17)
    let x = b.param("x", f32t(vec![big.clone(), big.clone()]));
    let y = b.op(Op::Reshape(vec![big.clone(), big.clone()], x));
    let es = errors(b, y, f32t(vec![big.clone(), big]));
    assert_eq!(es[0].code, codes::DIM_OVERFLOW, "{}", es[0]);
}

// ------------------------------------------------- (c) constants, divisors

#[test]
fn module_constant_products_are_linear() {
    // ViT patchify: reshape(x, [B, GRID * GRID, PATCH_DIM]).
    let mut b = fb();
    b.constant("GRID", 14).constant("PATCH_DIM", 768);
    let x = b.param("x", f32t(vec![v("B"), Dim::c(196), v("PATCH_DIM")]));
    let gg = v("GRID").checked_mul(&v("GRID")).unwrap();
    let shape = vec![v("B"), gg, v("PATCH_DIM")];
    let y = b.op(Op::Reshape(shape.clone(), x));
    accepted(b, y, f32t(shape));
}

#[test]
fn product_of_two_variables_is_still_non_linear() {
    let mut b = fb();
    b.constant("GRID", 14);
    let x = b.param("x", f32t(vec![v("B"), v("S")]));
    let shape = vec![v("B").checked_mul(&v("S")).unwrap()];
    let y = b.op(Op::Reshape(shape.clone(), x));
    let es = errors(b, y, f32t(shape));
    assert_eq!(es[0].code, codes::NON_LINEAR, "{}", es[0]);
}

#[test]
fn constant_divisor_in_reshape_uses_divisibility() {
    // Llama RoPE half split: [E, E] → [E, 2, E / 2] under E % 4 == 0.
    let mut b = fb();
    let x = b.param("x", f32t(vec![v("E"), v("E")]));
    b.requires(Pred::eq(v("E").checked_rem(&Dim::c(4)).unwrap(), 0));
    let shape = vec![v("E"), Dim::c(2), v("E").checked_div(&Dim::c(2)).unwrap()];
    let y = b.op(Op::Reshape(shape.clone(), x));
    accepted(b, y, f32t(shape));
}

#[test]
fn constant_divisor_without_divisibility_is_refuted() {
    let mut b = fb();
    let x = b.param("x", f32t(vec![v("E"), v("E")]));
    b.requires(Pred::ge("E", 2));
    let shape = vec![v("E"), Dim::c(2), v("E").checked_div(&Dim::c(2)).unwrap()];
    let y = b.op(Op::Reshape(shape.clone(), x));
    // Without divisibility the rewrite does not apply and the query stays
    // non-linear; whether Z3 refutes it (E = 3) within the budget is the
    // solver's business (issue 11 item 3), but it must never be accepted.
    let es = errors(b, y, f32t(shape));
    assert!(
        [codes::RESHAPE_VOLUME, codes::SOLVER_UNKNOWN].contains(&es[0].code),
        "{}",
        es[0]
    );
}

// ------------------------------------- printed dims read back as themselves

/// `s` read with Rust's precedence (unary minus tightest, then `* / %`,
/// then `+ -`, all left-associative) and the dims' floor division, under
/// `sigma`: how a user (and the macro) reads a dim in a message.
fn read_back(s: &str, sigma: &Sigma) -> Option<i128> {
    let toks: Vec<String> = {
        let mut out = Vec::new();
        let mut cur = String::new();
        for ch in s.chars() {
            if ch.is_alphanumeric() || ch == '_' {
                cur.push(ch);
                continue;
            }
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            if !ch.is_whitespace() {
                out.push(ch.to_string());
            }
        }
        out.extend((!cur.is_empty()).then_some(cur));
        out
    };
    fn expr(t: &[String], i: &mut usize, s: &Sigma) -> Option<i128> {
        let mut v = term(t, i, s)?;
        while let Some(op) = t.get(*i).filter(|o| *o == "+" || *o == "-") {
            let plus = op == "+";
            *i += 1;
            let r = term(t, i, s)?;
            v = if plus { v + r } else { v - r };
        }
        Some(v)
    }
    fn term(t: &[String], i: &mut usize, s: &Sigma) -> Option<i128> {
        let mut v = unary(t, i, s)?;
        while let Some(op) = t.get(*i).filter(|o| ["*", "/", "%"].contains(&o.as_str())) {
            let op = op.clone();
            *i += 1;
            let r = unary(t, i, s)?;
            v = match op.as_str() {
                "*" => v * r,
                "/" if r > 0 => v.div_euclid(r),
                "%" if r > 0 => v.rem_euclid(r),
                _ => return None,
            };
        }
        Some(v)
    }
    fn unary(t: &[String], i: &mut usize, s: &Sigma) -> Option<i128> {
        let tok = t.get(*i)?.clone();
        *i += 1;
        match tok.as_str() {
            "-" => Some(-unary(t, i, s)?),
            "(" => {
                let v = expr(t, i, s)?;
                (t.get(*i)? == ")").then(|| *i += 1)?;
                Some(v)
            }
            n if n.chars().all(|c| c.is_ascii_digit()) => n.parse().ok(),
            name => s.get(name).map(|&v| v as i128),
        }
    }
    let mut i = 0;
    let v = expr(&toks, &mut i, sigma)?;
    (i == toks.len()).then_some(v)
}

/// Small dims with quotients and remainders under coefficients and signs,
/// built through the checked algebra (a failing step ends the dim early).
fn quotient_dim() -> impl Strategy<Value = Dim> {
    let leaf = prop_oneof![
        Just(Dim::var("A")),
        Just(Dim::var("B")),
        (1i64..=5).prop_map(Dim::c),
    ];
    leaf.prop_recursive(3, 24, 2, |inner| {
        (inner.clone(), inner, 0usize..6, -3i64..=3, 2i64..=4).prop_map(|(x, y, op, k, c)| {
            let r = match op {
                0 => x.checked_add(&y),
                1 => x.checked_sub(&y),
                2 => x.checked_scale(k),
                3 => x.checked_div(&Dim::c(c)),
                4 => x.checked_rem(&Dim::c(c)),
                _ => x.checked_div(&Dim::var("B")),
            };
            r.unwrap_or(x.clone())
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// What a message prints is the dim it names: read back with Rust's
    /// precedence, the printed form evaluates to the dim's own value.
    #[test]
    fn a_printed_dim_reads_back_as_itself(d in quotient_dim(), a in 0i64..40, b in 1i64..7) {
        let s: Sigma = [("A".to_string(), a), ("B".to_string(), b)].into_iter().collect();
        let Ok(want) = d.eval(&s).map(i128::from) else { return Ok(()) };
        let printed = d.to_string();
        prop_assert_eq!(read_back(&printed, &s), Some(want), "printed as `{}`", printed);
    }
}

#[test]
fn scaled_and_negated_quotients_print_in_parentheses() {
    let q = (Dim::var("A") + 1).div(&Dim::c(2));
    assert_eq!((2 * q.clone()).to_string(), "2 * ((A + 1) / 2)");
    assert_eq!((Dim::c(0) - q.clone()).to_string(), "-((A + 1) / 2)");
    assert_eq!((Dim::var("S") - q.clone()).to_string(), "S - (A + 1) / 2");
    assert_eq!(q.to_string(), "(A + 1) / 2");
}
