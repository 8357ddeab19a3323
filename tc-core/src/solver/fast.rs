//! Obligations answered before Z3 (issue #48): most of a typical function's
//! queries are bounds (`S - K + 1 ≥ 1` under `S ≥ K`) and satisfiability of
//! signatures whose every variable is only bounded below, and a Z3 context
//! and solver cost far more than such a query. Both answers here are proofs,
//! never guesses, and a pure function of the query, so verdicts stay a
//! function of the program:
//!
//! * [`valid`]: `Γ ⊨ g` by interval reasoning. Every monomial (a variable,
//!   `x / y`, `x % y`, a product) gets the bounds Γ states for it or that
//!   follow from its form; the goal `g ≥ 0` holds when the least value of
//!   `g`, or of `g − f` for one inequality fact `f ≥ 0`, over those boxes is
//!   non-negative (`g = f + r` with `f, r ≥ 0`). Each bound holds in every
//!   model of Γ, so a non-negative minimum holds in every model.
//! * [`witness`]: `Sat(Γ)` by exhibiting one σ (each variable at its lower
//!   bound, equated variables together) under which every fact evaluates to
//!   true with the run-time semantics ([`Pred::eval`], Euclidean `/` and `%`
//!   by positive divisors, as Z3 and the quotient encoding read them).
//!
//! Anything else (`false` from either) goes to Z3, which decides it.

use std::collections::BTreeMap;

use crate::dim::{Atom, Dim, Sigma};
use crate::pred::{CmpOp, Pred};

/// Lower and upper bounds of one monomial (`None`: unbounded that way).
#[derive(Clone, Copy, Default)]
struct Bounds {
    lo: Option<i128>,
    hi: Option<i128>,
}

/// The facts as inequalities `d ≥ 0`, and the box of every monomial that a
/// fact bounds on its own.
struct Facts {
    ineqs: Vec<Dim>,
    boxes: BTreeMap<Vec<Atom>, Bounds>,
    /// The `(x, y)` of every fact `x % y == 0`.
    divisible: Vec<(Dim, Dim)>,
}

fn ineqs_of(p: &Pred) -> Vec<Dim> {
    let Pred::Cmp(a, op, b) = p else {
        return Vec::new();
    };
    let (Ok(d), Ok(n)) = (a.checked_sub(b), b.checked_sub(a)) else {
        return Vec::new();
    };
    let one = Dim::c(1);
    let out = match op {
        CmpOp::Ge => vec![Ok(d)],
        CmpOp::Gt => vec![d.checked_sub(&one)],
        CmpOp::Le => vec![Ok(n)],
        CmpOp::Lt => vec![n.checked_sub(&one)],
        CmpOp::Eq => vec![Ok(d), Ok(n)],
        CmpOp::Ne => vec![],
    };
    out.into_iter().filter_map(Result::ok).collect()
}

impl Facts {
    fn new(facts: &[Pred]) -> Facts {
        let mut ineqs = Vec::new();
        let mut boxes: BTreeMap<Vec<Atom>, Bounds> = BTreeMap::new();
        let mut divisible = Vec::new();
        for f in facts {
            if let Pred::Cmp(a, CmpOp::Eq, b) = f {
                let zero_mod = |m: &Dim, z: &Dim| match (single_atom(m), z.as_const()) {
                    (Some(Atom::Mod(x, y)), Some(0)) => Some(((**x).clone(), (**y).clone())),
                    _ => None,
                };
                if let Some(xy) = zero_mod(a, b).or_else(|| zero_mod(b, a)) {
                    divisible.push(xy);
                }
            }
            for d in ineqs_of(f) {
                // `c·m + k ≥ 0` bounds the monomial m on its own.
                let mut k: i128 = 0;
                let mut mono: Option<(&[Atom], i128)> = None;
                let mut several = false;
                for (m, c) in d.terms() {
                    if m.is_empty() {
                        k = c as i128;
                    } else if mono.is_some() {
                        several = true;
                    } else {
                        mono = Some((m, c as i128));
                    }
                }
                match mono {
                    Some((m, c)) if !several => {
                        let b = boxes.entry(m.to_vec()).or_default();
                        if c > 0 {
                            // m ≥ ⌈−k / c⌉
                            let lo = (-k).div_euclid(c) + i128::from((-k).rem_euclid(c) != 0);
                            b.lo = Some(b.lo.map_or(lo, |x| x.max(lo)));
                        } else {
                            // m ≤ ⌊k / −c⌋
                            let hi = k.div_euclid(-c);
                            b.hi = Some(b.hi.map_or(hi, |x| x.min(hi)));
                        }
                    }
                    _ => ineqs.push(d),
                }
            }
        }
        Facts {
            ineqs,
            boxes,
            divisible,
        }
    }

    /// Bounds of a monomial: Γ's own, narrowed by what its form implies.
    fn bounds(&self, m: &[Atom], depth: u32) -> Bounds {
        let stated = self.boxes.get(m).copied().unwrap_or_default();
        if depth > 8 {
            return stated;
        }
        let derived = match m {
            [] => Bounds {
                lo: Some(1),
                hi: Some(1),
            },
            [Atom::Var(_)] => Bounds::default(),
            [Atom::Mod(_, y)] => self.mod_bounds(y, depth),
            [Atom::Div(x, y)] => self.div_bounds(x, y, depth),
            atoms => {
                // A product of factors known non-negative lies between the
                // products of their bounds.
                let bs: Vec<Bounds> = atoms
                    .iter()
                    .map(|a| self.bounds(std::slice::from_ref(a), depth + 1))
                    .collect();
                if bs.iter().all(|b| b.lo.is_some_and(|l| l >= 0)) {
                    let prod = |f: fn(&Bounds) -> Option<i128>| {
                        bs.iter()
                            .try_fold(1i128, |acc, b| f(b).and_then(|v| acc.checked_mul(v)))
                    };
                    Bounds {
                        lo: prod(|b| b.lo),
                        hi: prod(|b| b.hi),
                    }
                } else {
                    Bounds::default()
                }
            }
        };
        Bounds {
            lo: max_opt(stated.lo, derived.lo),
            hi: min_opt(stated.hi, derived.hi),
        }
    }

    /// The divisor's least value when it is at least 1 (Euclidean semantics
    /// apply), else `None`.
    fn positive_divisor(&self, y: &Dim, depth: u32) -> Option<i128> {
        self.min(y, depth + 1).filter(|&l| l >= 1)
    }

    fn mod_bounds(&self, y: &Dim, depth: u32) -> Bounds {
        if self.positive_divisor(y, depth).is_none() {
            return Bounds::default();
        }
        // 0 ≤ x % y ≤ y − 1
        Bounds {
            lo: Some(0),
            hi: self.max(y, depth + 1).map(|h| h - 1),
        }
    }

    fn div_bounds(&self, x: &Dim, y: &Dim, depth: u32) -> Bounds {
        let Some(ylo) = self.positive_divisor(y, depth) else {
            return Bounds::default();
        };
        let Some(xlo) = self.min(x, depth + 1).filter(|&l| l >= 0) else {
            return Bounds::default();
        };
        // x ≥ 0, y ≥ 1: x / y ≥ ⌊xlo / yhi⌋ (0 without an upper bound on
        // y); and y divides x with x ≥ 1 makes the quotient at least 1.
        let mut lo = match y.as_const() {
            Some(_) => xlo.div_euclid(ylo),
            None => self.max(y, depth + 1).map_or(0, |yhi| xlo.div_euclid(yhi)),
        };
        if xlo >= 1 && self.divisible.iter().any(|(a, b)| a == x && b == y) {
            lo = lo.max(1);
        }
        let hi = self.max(x, depth + 1).map(|xhi| xhi.div_euclid(ylo));
        Bounds { lo: Some(lo), hi }
    }

    /// The least value of `d` over the boxes.
    fn min(&self, d: &Dim, depth: u32) -> Option<i128> {
        d.terms().try_fold(0i128, |acc, (m, c)| {
            let b = self.bounds(m, depth);
            let c = c as i128;
            let v = if c > 0 { b.lo? } else { b.hi? };
            acc.checked_add(c.checked_mul(v)?)
        })
    }

    /// The greatest value of `d` over the boxes.
    fn max(&self, d: &Dim, depth: u32) -> Option<i128> {
        d.terms().try_fold(0i128, |acc, (m, c)| {
            let b = self.bounds(m, depth);
            let c = c as i128;
            let v = if c > 0 { b.hi? } else { b.lo? };
            acc.checked_add(c.checked_mul(v)?)
        })
    }

    /// `d ≥ 0` in every model: over the boxes, or as one fact plus a
    /// remainder that is non-negative over the boxes.
    fn non_negative(&self, d: &Dim) -> bool {
        if self.min(d, 0).is_some_and(|v| v >= 0) {
            return true;
        }
        self.ineqs.iter().any(|f| {
            d.checked_sub(f)
                .ok()
                .and_then(|r| self.min(&r, 0))
                .is_some_and(|v| v >= 0)
        })
    }

    fn proves(&self, goal: &Pred) -> bool {
        match goal {
            Pred::True => true,
            Pred::False | Pred::Not(_) => false,
            Pred::And(ps) => ps.iter().all(|p| self.proves(p)),
            Pred::Or(ps) => ps.iter().any(|p| self.proves(p)),
            Pred::Cmp(_, CmpOp::Ne, _) => {
                let Pred::Cmp(a, _, b) = goal else {
                    return false;
                };
                self.proves(&Pred::Cmp(a.clone(), CmpOp::Gt, b.clone()))
                    || self.proves(&Pred::Cmp(a.clone(), CmpOp::Lt, b.clone()))
            }
            Pred::Cmp(..) => {
                let ds = ineqs_of(goal);
                !ds.is_empty() && ds.iter().all(|d| self.non_negative(d))
            }
        }
    }
}

fn max_opt(a: Option<i128>, b: Option<i128>) -> Option<i128> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) | (None, x) => x,
    }
}

fn min_opt(a: Option<i128>, b: Option<i128>) -> Option<i128> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}

fn single_atom(d: &Dim) -> Option<&Atom> {
    let mut terms = d.terms();
    match (terms.next(), terms.next()) {
        (Some(([a], 1)), None) => Some(a),
        _ => None,
    }
}

/// Does `facts ⊨ goal` follow by interval reasoning? (`false`: not shown here.)
pub(super) fn valid(facts: &[Pred], goal: &Pred) -> bool {
    Facts::new(facts).proves(goal)
}

/// Is there an obvious σ satisfying every fact? (`false`: not shown here.)
pub(super) fn witness(facts: &[Pred]) -> bool {
    let f = Facts::new(facts);
    let mut vars = std::collections::BTreeSet::new();
    for p in facts {
        vars.extend(p.vars());
    }
    let mut sigma = Sigma::new();
    for v in &vars {
        let b = f
            .boxes
            .get(&vec![Atom::Var(v.clone())])
            .copied()
            .unwrap_or_default();
        let val = match (b.lo, b.hi) {
            (Some(l), Some(h)) if l > h => return false,
            (Some(l), _) => l.max(1).min(b.hi.unwrap_or(i128::MAX)),
            (None, Some(h)) => h.min(1),
            (None, None) => 1,
        };
        let Ok(val) = i64::try_from(val) else {
            return false;
        };
        sigma.insert(v.clone(), val);
    }
    // Equated variables take the larger value, until nothing changes.
    for _ in 0..vars.len() {
        let mut changed = false;
        for p in facts {
            if let Pred::Cmp(a, CmpOp::Eq, b) = p {
                let vals = (a.as_var(), b.as_var());
                let vals = vals
                    .0
                    .zip(vals.1)
                    .and_then(|(x, y)| Some((x, y, *sigma.get(x)?, *sigma.get(y)?)));
                if let Some((x, y, vx, vy)) = vals {
                    if vx != vy {
                        let m = vx.max(vy);
                        sigma.insert(x.to_string(), m);
                        sigma.insert(y.to_string(), m);
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    facts.iter().all(|p| p.eval(&sigma) == Ok(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Dim {
        Dim::var(s)
    }

    #[test]
    fn bounds_and_one_fact() {
        let facts = [
            Pred::ge("B", 1),
            Pred::ge("K", 1),
            Pred::ge("S", 1),
            Pred::ge("S", "K"),
        ];
        assert!(valid(&facts, &Pred::ge(v("S") - v("K") + 1, 1)));
        assert!(valid(&facts, &Pred::ge("S", v("K") - 1)));
        assert!(valid(&facts, &Pred::ge(v("K") - 1, 0)));
        assert!(valid(&facts, &Pred::ge(v("B") * v("S"), 1)));
        // Not consequences: left to Z3, which finds the counterexample.
        assert!(!valid(&facts, &Pred::ge("K", "S")));
        assert!(!valid(&facts, &Pred::ge("S", 2)));
        assert!(!valid(&facts, &Pred::eq("S", "K")));
    }

    #[test]
    fn divisions() {
        let d = v("D");
        let h = v("H");
        let mut facts = vec![Pred::ge("D", 1), Pred::ge("H", 1)];
        assert!(valid(&facts, &Pred::ge(d.div(&h), 0)));
        assert!(!valid(&facts, &Pred::ge(d.div(&h), 1)));
        facts.push(Pred::eq(d.rem(&h), 0));
        assert!(valid(&facts, &Pred::ge(d.div(&h), 1)));
        assert!(valid(&facts, &Pred::lt(d.rem(&Dim::c(4)), 4)));
        assert!(!valid(&[], &Pred::ge(d.div(&h), 0)));
    }

    use proptest::prelude::*;

    /// A random linear dim over A, B, C (and one `A / k` or `A % k` atom).
    fn dim() -> impl Strategy<Value = Dim> {
        (-3i64..4, -3i64..4, -3i64..4, -8i64..9, 0usize..3, 1i64..5).prop_map(
            |(a, b, c, k, atom, m)| {
                let extra = match atom {
                    0 => Dim::c(0),
                    1 => v("A").div(&Dim::c(m)),
                    _ => v("B").rem(&Dim::c(m)),
                };
                v("A").scale(a) + v("B").scale(b) + v("C").scale(c) + Dim::c(k) + extra
            },
        )
    }

    fn pred() -> impl Strategy<Value = Pred> {
        (dim(), 0usize..4).prop_map(|(d, op)| match op {
            0 => Pred::ge(d, 0),
            1 => Pred::gt(d, 0),
            2 => Pred::eq(d, 0),
            _ => Pred::le(d, 0),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// What this module proves, Z3 never refutes: a goal shown valid
        /// has no counterexample, a fact set with a witness is not unsat.
        #[test]
        fn never_contradicts_z3(facts in proptest::collection::vec(pred(), 0..4), goal in pred()) {
            let mut g = crate::ctx::Ctx::new();
            g.declare("A").declare("B").declare("C");
            for f in &facts {
                g.assume(f.clone());
            }
            let all = g.all_facts();
            super::super::set_fast_path_enabled(false);
            if valid(&all, &goal) {
                let z3 = super::super::entails(&g, &goal);
                prop_assert!(!matches!(z3, super::super::Entailment::Invalid(_)), "{all:?} ⊨ {goal}: {z3:?}");
            }
            if witness(&all) {
                let z3 = super::super::satisfiable(&g, &[]);
                prop_assert!(z3 != super::super::Satisfiability::Unsat, "{all:?}");
            }
        }
    }

    #[test]
    fn witnesses() {
        assert!(witness(&[
            Pred::ge("B", 1),
            Pred::ge("S", "K"),
            Pred::ge("K", 1)
        ]));
        assert!(witness(&[
            Pred::ge("D", 32),
            Pred::ge("H", 1),
            Pred::eq(v("D").rem(&v("H")), 0),
            Pred::eq("E", "D"),
        ]));
        // Unsatisfiable, or not found by the one candidate: Z3 decides.
        assert!(!witness(&[Pred::ge("B", 1), Pred::eq("B", 0)]));
        assert!(!witness(&[
            Pred::ge("A", 1),
            Pred::eq(v("A").rem(&Dim::c(4)), 0)
        ]));
    }
}
