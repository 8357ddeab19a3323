//! Property tests (proptest):
//!
//! (a) subtyping is reflexive and transitive on random refinement sets over
//!     `B`, `S`, and its verdict agrees with brute force on a bounded box;
//! (b) for random Presburger predicates over 2–3 variables (small linear
//!     combinations, `/` and `%` by small constants, comparisons, ∧ ∨ ¬), Z3's
//!     verdicts on validity, implication and satisfiability agree with brute
//!     force over dims in `lo..=8` (lo = 1 by default, 0 when the variables
//!     are declared `allow_zero`), and every counterexample is exactly the
//!     lexicographically least failing assignment of the goal's variables;
//! (c) dim normalisation preserves values: `eval(a ∘ b) = eval(a) ∘ eval(b)`,
//!     `/` and `%` agree with `i64::div_euclid` / `rem_euclid`, substitution
//!     commutes with evaluation, and the ring laws hold structurally.
//!
//! Γ always carries `v <= 8` for every variable, so "valid over the integers"
//! and "valid on the box" coincide and the comparison is exact.

use proptest::prelude::*;

use tc_core::solver::{self, Entailment, Satisfiability};
use tc_core::subtype::{subtype, SubtypeError};
use tc_core::{CmpOp, Ctx, Dim, Dtype, Pred, Sigma, TensorType, Type};

const HI: i64 = 8;
const NAMES: [&str; 3] = ["A", "B", "C"];

// ------------------------------------------------------------------ helpers

fn bounded_ctx(vars: &[&str], allow_zero: bool) -> Ctx {
    let mut g = Ctx::new();
    for v in vars {
        if allow_zero {
            g.declare_allow_zero(v);
        } else {
            g.declare(v);
        }
        g.assume(Pred::le(*v, HI));
    }
    g
}

/// Every σ of the box `lo..=HI` over `vars`, in lexicographic order of `vars`.
fn boxes(vars: &[&str], lo: i64) -> Vec<Sigma> {
    let mut out = vec![Sigma::new()];
    for v in vars {
        let mut next = Vec::new();
        for s in &out {
            for x in lo..=HI {
                let mut s2 = s.clone();
                s2.insert(v.to_string(), x);
                next.push(s2);
            }
        }
        out = next;
    }
    out
}

fn holds(p: &Pred, s: &Sigma) -> bool {
    p.eval(s)
        .expect("constant divisors only: evaluation cannot fail")
}

const OPS: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Le,
    CmpOp::Lt,
    CmpOp::Ge,
    CmpOp::Gt,
];

/// `Σ cᵢ·vᵢ + k`, optionally plus `m · ((Σ dᵢ·vᵢ + j) / q)` or `% q`.
fn lin(n: usize) -> impl Strategy<Value = Dim> {
    (
        prop::collection::vec(-3i64..=3, n),
        -6i64..=6,
        prop::option::of((
            prop::collection::vec(-2i64..=2, n),
            -3i64..=3,
            2i64..=4,
            any::<bool>(),
            prop_oneof![Just(-1i64), Just(1), Just(2)],
        )),
    )
        .prop_map(move |(cs, k, extra)| {
            let mut d = Dim::c(k);
            for (i, c) in cs.iter().enumerate() {
                d = d + Dim::var(NAMES[i]) * *c;
            }
            if let Some((ds, j, q, is_div, m)) = extra {
                let mut inner = Dim::c(j);
                for (i, c) in ds.iter().enumerate() {
                    inner = inner + Dim::var(NAMES[i]) * *c;
                }
                let t = if is_div {
                    inner.div(&Dim::c(q))
                } else {
                    inner.rem(&Dim::c(q))
                };
                d = d + t * m;
            }
            d
        })
}

fn atom(n: usize) -> impl Strategy<Value = Pred> {
    (lin(n), 0usize..6, lin(n)).prop_map(|(a, op, b)| Pred::cmp(a, OPS[op], b))
}

fn presburger(n: usize) -> impl Strategy<Value = Pred> {
    atom(n).prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..=3).prop_map(Pred::and),
            prop::collection::vec(inner.clone(), 2..=3).prop_map(Pred::or),
            inner.prop_map(Pred::not),
        ]
    })
}

/// The expected verdict of `Γ ⊨ goal` by enumeration: `None` when valid, else
/// the lexicographically least failing assignment of the goal's variables (in
/// declaration order), with the other variables existentially quantified.
fn brute_entails(
    vars: &[&str],
    lo: i64,
    assumptions: &[Pred],
    goal: &Pred,
) -> Option<Vec<(String, i64)>> {
    let shown: Vec<&str> = vars
        .iter()
        .copied()
        .filter(|v| goal.vars().contains(*v))
        .collect();
    let mut best: Option<Vec<i64>> = None;
    for s in boxes(vars, lo) {
        if assumptions.iter().all(|a| holds(a, &s)) && !holds(goal, &s) {
            let key: Vec<i64> = shown.iter().map(|v| s[*v]).collect();
            if !matches!(&best, Some(b) if *b <= key) {
                best = Some(key);
            }
        }
    }
    best.map(|b| shown.iter().map(|v| v.to_string()).zip(b).collect())
}

fn check_entailment(vars: &[&str], allow_zero: bool, assumptions: &[Pred], goal: &Pred) {
    let lo = if allow_zero { 0 } else { 1 };
    let g = bounded_ctx(vars, allow_zero);
    let got = solver::entails_with(&g, assumptions, goal);
    let want = brute_entails(vars, lo, assumptions, goal);
    match (&got, want) {
        (Entailment::Valid, None) => {}
        (Entailment::Invalid(cex), Some(w)) => {
            assert_eq!(cex.0, w, "counterexample of {goal} under {assumptions:?}")
        }
        (got, want) => panic!(
            "Z3 says {got:?}, brute force says {want:?} for `{goal}` under {assumptions:?} (lo = {lo})"
        ),
    }
}

// ---------------------------------------------------- (b) Presburger vs brute

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn validity_agrees_with_brute_force_2vars(p in presburger(2)) {
        check_entailment(&NAMES[..2], false, &[], &p);
    }

    #[test]
    fn validity_agrees_with_brute_force_3vars(p in presburger(3)) {
        check_entailment(&NAMES[..3], false, &[], &p);
    }

    #[test]
    fn validity_agrees_with_brute_force_allow_zero(p in presburger(3)) {
        check_entailment(&NAMES[..3], true, &[], &p);
    }

    #[test]
    fn implication_agrees_with_brute_force(p in presburger(2), q in presburger(2), z in any::<bool>()) {
        check_entailment(&NAMES[..2], z, std::slice::from_ref(&p), &q);
    }

    #[test]
    fn satisfiability_agrees_with_brute_force(p in presburger(3), z in any::<bool>()) {
        let vars = &NAMES[..3];
        let lo = if z { 0 } else { 1 };
        let g = bounded_ctx(vars, z);
        let got = solver::satisfiable(&g, std::slice::from_ref(&p));
        let want = boxes(vars, lo).iter().any(|s| holds(&p, s));
        prop_assert_eq!(
            got,
            if want { Satisfiability::Sat } else { Satisfiability::Unsat },
            "Sat({}) with lo = {}", p, lo
        );
    }
}

// -------------------------------------------- (a) subtyping: refl and trans

/// Linear refinements over B, S: `a·B + b·S + k op 0`, from a small pool so
/// that implications between random sets are common.
fn refinement() -> impl Strategy<Value = Pred> {
    (-1i64..=1, -1i64..=1, -6i64..=6, 0usize..6).prop_map(|(a, b, k, op)| {
        let lhs = Dim::var("B") * a + Dim::var("S") * b + k;
        Pred::cmp(lhs, OPS[op], Dim::c(0))
    })
}

fn refset() -> impl Strategy<Value = Vec<Pred>> {
    prop::collection::vec(refinement(), 0..=3)
}

fn tensor(refs: &[Pred]) -> Type {
    Type::Tensor(
        TensorType::new(Dtype::F32, vec![Dim::var("B"), Dim::var("S")]).with_refs(refs.to_vec()),
    )
}

fn bs_ctx() -> Ctx {
    bounded_ctx(&["B", "S"], false)
}

/// `R₁ ⊨ R₂` on the box.
fn brute_implies(r1: &[Pred], r2: &[Pred]) -> bool {
    boxes(&["B", "S"], 1)
        .iter()
        .all(|s| !r1.iter().all(|p| holds(p, s)) || r2.iter().all(|p| holds(p, s)))
}

fn sub(r1: &[Pred], r2: &[Pred]) -> Result<(), SubtypeError> {
    subtype(&bs_ctx(), &tensor(r1), &tensor(r2))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn subtyping_is_reflexive(r in refset()) {
        prop_assert_eq!(sub(&r, &r), Ok(()));
        // Not only syntactically: reordered and duplicated sets are equivalent.
        let mut rev = r.clone();
        rev.reverse();
        let mut dup = r.clone();
        dup.extend(r.iter().cloned());
        prop_assert_eq!(sub(&r, &rev), Ok(()));
        prop_assert_eq!(sub(&rev, &r), Ok(()));
        prop_assert_eq!(sub(&dup, &r), Ok(()));
        prop_assert_eq!(sub(&r, &dup), Ok(()));
    }

    #[test]
    fn subtyping_is_transitive(r1 in refset(), r2 in refset(), r3 in refset()) {
        let s12 = sub(&r1, &r2).is_ok();
        let s23 = sub(&r2, &r3).is_ok();
        let s13 = sub(&r1, &r3).is_ok();
        if s12 && s23 {
            prop_assert!(s13, "{:?} <: {:?} <: {:?} but not {:?} <: {:?}", r1, r2, r3, r1, r3);
        }
    }

    #[test]
    fn subtyping_is_transitive_on_chains(r2 in refset(), extra in refset(), keep in prop::collection::vec(any::<bool>(), 3), slack in 0i64..=3) {
        // R₁ = R₂ ∪ extra (stronger); R₃ = some of R₂, each weakened by `slack`.
        let mut r1 = r2.clone();
        r1.extend(extra);
        let r3: Vec<Pred> = r2
            .iter()
            .zip(keep.iter().cycle())
            .filter(|(_, k)| **k)
            .map(|(p, _)| match p {
                Pred::Cmp(l, CmpOp::Ge, r) => Pred::cmp(l.clone() + slack, CmpOp::Ge, r.clone()),
                Pred::Cmp(l, CmpOp::Le, r) => Pred::cmp(l.clone() - slack, CmpOp::Le, r.clone()),
                q => q.clone(),
            })
            .collect();
        prop_assert_eq!(sub(&r1, &r2), Ok(()));
        prop_assert_eq!(sub(&r2, &r3), Ok(()));
        prop_assert_eq!(sub(&r1, &r3), Ok(()));
    }

    #[test]
    fn subtyping_verdict_agrees_with_brute_force(r1 in refset(), r2 in refset()) {
        let got = sub(&r1, &r2);
        prop_assert_eq!(got.is_ok(), brute_implies(&r1, &r2), "{:?} <: {:?}: {:?}", r1, r2, got);
        if let Err(SubtypeError::Refinement { pred, cex }) = &got {
            // The witness satisfies R₁ and the box, and breaks `pred`, for some
            // value of the variables it does not mention.
            let witnessed = boxes(&["B", "S"], 1).iter().any(|s| {
                cex.0.iter().all(|(n, v)| s[n] == *v)
                    && r1.iter().all(|p| holds(p, s))
                    && !holds(pred, s)
            });
            prop_assert!(witnessed, "{} does not witness the failure of {}", cex, pred);
        }
    }
}

#[test]
fn counterexamples_do_not_depend_on_query_history() {
    // Same facts, different declaration order: the minimisation order differs,
    // so the cache must not hand one context the other's counterexample.
    let mut g1 = Ctx::new();
    g1.declare("B").declare("S");
    let mut g2 = Ctx::new();
    g2.declare("S").declare("B");
    let goal = Pred::eq("B", "S");
    solver::reset();
    let a = solver::entails(&g1, &goal);
    let b = solver::entails(&g2, &goal);
    match (a, b) {
        (Entailment::Invalid(a), Entailment::Invalid(b)) => {
            assert_eq!(a.to_string(), "B = 1, S = 2");
            assert_eq!(b.to_string(), "S = 1, B = 2");
        }
        other => panic!("{other:?}"),
    }
    // And the cache still answers a repeat of the same query.
    let before = solver::stats();
    let _ = solver::entails(&g2, &goal);
    assert_eq!(solver::stats().cache_hits, before.cache_hits + 1);
}

// --------------------------------------------------- (c) dim normalisation

/// A dim expression tree, evaluated independently of `Dim`'s normal form.
#[derive(Clone, Debug)]
enum E {
    Var(usize),
    Const(i64),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    Scale(i64, Box<E>),
    DivC(Box<E>, i64),
    RemC(Box<E>, i64),
    /// Division by the variable `C` (positive in σ).
    DivV(Box<E>),
    RemV(Box<E>),
}

fn expr() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![(0usize..3).prop_map(E::Var), (-5i64..=5).prop_map(E::Const)];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Add(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Sub(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mul(Box::new(a), Box::new(b))),
            (-3i64..=3, inner.clone()).prop_map(|(k, a)| E::Scale(k, Box::new(a))),
            (inner.clone(), 1i64..=5).prop_map(|(a, k)| E::DivC(Box::new(a), k)),
            (inner.clone(), 1i64..=5).prop_map(|(a, k)| E::RemC(Box::new(a), k)),
            inner.clone().prop_map(|a| E::DivV(Box::new(a))),
            inner.prop_map(|a| E::RemV(Box::new(a))),
        ]
    })
}

impl E {
    fn dim(&self) -> Dim {
        match self {
            E::Var(i) => Dim::var(NAMES[*i]),
            E::Const(k) => Dim::c(*k),
            E::Add(a, b) => a.dim() + b.dim(),
            E::Sub(a, b) => a.dim() - b.dim(),
            E::Mul(a, b) => a.dim() * b.dim(),
            E::Scale(k, a) => a.dim() * *k,
            E::DivC(a, k) => a.dim().div(&Dim::c(*k)),
            E::RemC(a, k) => a.dim().rem(&Dim::c(*k)),
            E::DivV(a) => a.dim().div(&Dim::var("C")),
            E::RemV(a) => a.dim().rem(&Dim::var("C")),
        }
    }

    /// Reference semantics with plain i64 (None on overflow).
    fn eval(&self, s: &[i64; 3]) -> Option<i64> {
        Some(match self {
            E::Var(i) => s[*i],
            E::Const(k) => *k,
            E::Add(a, b) => a.eval(s)?.checked_add(b.eval(s)?)?,
            E::Sub(a, b) => a.eval(s)?.checked_sub(b.eval(s)?)?,
            E::Mul(a, b) => a.eval(s)?.checked_mul(b.eval(s)?)?,
            E::Scale(k, a) => a.eval(s)?.checked_mul(*k)?,
            E::DivC(a, k) => a.eval(s)?.div_euclid(*k),
            E::RemC(a, k) => a.eval(s)?.rem_euclid(*k),
            E::DivV(a) => a.eval(s)?.div_euclid(s[2]),
            E::RemV(a) => a.eval(s)?.rem_euclid(s[2]),
        })
    }
}

fn sigma_of(s: &[i64; 3]) -> Sigma {
    NAMES
        .iter()
        .map(|n| n.to_string())
        .zip(s.iter().copied())
        .collect()
}

fn sigma() -> impl Strategy<Value = [i64; 3]> {
    // A and B may be negative; C is a divisor, so positive.
    (-12i64..=12, -12i64..=12, 1i64..=7).prop_map(|(a, b, c)| [a, b, c])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn normalisation_preserves_values(e in expr(), s in sigma()) {
        let Some(want) = e.eval(&s) else { return Ok(()) };
        prop_assert_eq!(e.dim().eval(&sigma_of(&s)), Ok(want), "{:?} normalised to {}", e, e.dim());
    }

    #[test]
    fn operations_commute_with_eval(a in expr(), b in expr(), k in -4i64..=4, q in 1i64..=6, s in sigma()) {
        let sg = sigma_of(&s);
        let (da, db) = (a.dim(), b.dim());
        let (Ok(x), Ok(y)) = (da.eval(&sg), db.eval(&sg)) else { return Ok(()) };
        prop_assume!(x.abs() < 1 << 20 && y.abs() < 1 << 20);
        prop_assert_eq!((da.clone() + db.clone()).eval(&sg), Ok(x + y));
        prop_assert_eq!((da.clone() - db.clone()).eval(&sg), Ok(x - y));
        prop_assert_eq!((da.clone() * db.clone()).eval(&sg), Ok(x * y));
        prop_assert_eq!((da.clone() * k).eval(&sg), Ok(x * k));
        prop_assert_eq!(da.div(&Dim::c(q)).eval(&sg), Ok(x.div_euclid(q)));
        prop_assert_eq!(da.rem(&Dim::c(q)).eval(&sg), Ok(x.rem_euclid(q)));
        prop_assert_eq!(da.div(&Dim::var("C")).eval(&sg), Ok(x.div_euclid(s[2])));
        prop_assert_eq!(da.rem(&Dim::var("C")).eval(&sg), Ok(x.rem_euclid(s[2])));
        // q·(a / q) + a % q = a, as values.
        let back = da.div(&Dim::c(q)) * q + da.rem(&Dim::c(q));
        prop_assert_eq!(back.eval(&sg), Ok(x));
    }

    #[test]
    fn ring_laws_hold_structurally(a in expr(), b in expr(), c in expr()) {
        let (a, b, c) = (a.dim(), b.dim(), c.dim());
        prop_assert_eq!(a.clone() + b.clone(), b.clone() + a.clone());
        prop_assert_eq!(a.clone() * b.clone(), b.clone() * a.clone());
        prop_assert_eq!((a.clone() + b.clone()) - b.clone(), a.clone());
        prop_assert_eq!(
            a.clone() * (b.clone() + c.clone()),
            a.clone() * b.clone() + a.clone() * c.clone()
        );
        prop_assert_eq!((a.clone() - a.clone()).as_const(), Some(0));
        // Normalisation is idempotent through substitution by the identity.
        prop_assert_eq!(a.subst(&Default::default()), a);
    }

    #[test]
    fn substitution_commutes_with_eval(e in expr(), s in sigma(), k in -3i64..=3) {
        // A := B + k, then evaluate, vs evaluate with σ(A) = σ(B) + k.
        let mut map = std::collections::BTreeMap::new();
        map.insert("A".to_string(), Dim::var("B") + k);
        let s2 = [s[1] + k, s[1], s[2]];
        let Some(want) = e.eval(&s2) else { return Ok(()) };
        prop_assert_eq!(e.dim().subst(&map).eval(&sigma_of(&s)), Ok(want));
    }
}
