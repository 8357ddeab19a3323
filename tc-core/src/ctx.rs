//! Γ: the typing context (Section 1 §4, Section 2 §14–§16).

use std::collections::BTreeSet;

use crate::dim::Dim;
use crate::pred::{CmpOp, Pred};

/// A shape variable in scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ShapeVar {
    /// Its name as the user wrote it.
    pub name: String,
    /// Opted into `α ≥ 0` (Section 2 §16); otherwise the default `α ≥ 1` holds.
    pub allow_zero: bool,
    /// Fresh variables (Section 2 §13) are never shown in counterexamples.
    pub fresh: bool,
}

/// Γ: shape variables, module constants, active predicates and axioms.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ctx {
    /// Shape variables in declaration order (this order is the counterexample order).
    pub vars: Vec<ShapeVar>,
    /// Module constants `const HIDDEN = 768` (Section 1 §6 binding site 3).
    pub consts: Vec<(String, i64)>,
    /// Active predicates: `requires`, refinements of tensors in scope, derived facts.
    pub facts: Vec<Pred>,
    /// Axioms assumed without proof (Section 2 §14).
    pub axioms: Vec<Pred>,
}

impl Ctx {
    /// An empty context.
    pub fn new() -> Ctx {
        Ctx::default()
    }

    /// Bind a shape variable with the default `α ≥ 1`, unless already bound.
    pub fn declare(&mut self, name: &str) -> &mut Self {
        if !self.is_bound(name) {
            self.vars.push(ShapeVar {
                name: name.to_string(),
                allow_zero: false,
                fresh: false,
            });
        }
        self
    }

    /// Bind a shape variable that admits 0 (`α ≥ 0`, Section 2 §16).
    pub fn declare_allow_zero(&mut self, name: &str) -> &mut Self {
        self.declare(name);
        if let Some(v) = self.vars.iter_mut().find(|v| v.name == name) {
            v.allow_zero = true;
        }
        self
    }

    /// Bind a fresh variable (hidden from counterexamples), returning its name.
    pub fn fresh(&mut self, hint: &str) -> String {
        let name = format!("{hint}#{}", self.vars.iter().filter(|v| v.fresh).count());
        self.vars.push(ShapeVar {
            name: name.clone(),
            allow_zero: false,
            fresh: true,
        });
        name
    }

    /// Bind a module constant.
    pub fn constant(&mut self, name: &str, value: i64) -> &mut Self {
        self.consts.retain(|(n, _)| n != name);
        self.consts.push((name.to_string(), value));
        self
    }

    /// Add an active predicate.
    pub fn assume(&mut self, p: Pred) -> &mut Self {
        match p {
            Pred::True => {}
            Pred::And(ps) => ps.into_iter().for_each(|q| {
                self.assume(q);
            }),
            q => {
                if !self.facts.contains(&q) {
                    self.facts.push(q)
                }
            }
        }
        self
    }

    /// Add an axiom (assumed, never proven; re-checked at run time).
    pub fn axiom(&mut self, p: Pred) -> &mut Self {
        if !self.axioms.contains(&p) {
            self.axioms.push(p);
        }
        self
    }

    /// Is `name` a bound shape variable or constant?
    pub fn is_bound(&self, name: &str) -> bool {
        self.vars.iter().any(|v| v.name == name) || self.consts.iter().any(|(n, _)| n == name)
    }

    /// The value of a module constant.
    pub fn const_value(&self, name: &str) -> Option<i64> {
        self.consts.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// Names used by `d` that Γ does not bind.
    pub fn unbound_in(&self, d: &Dim) -> Vec<String> {
        d.vars().into_iter().filter(|v| !self.is_bound(v)).collect()
    }

    /// The implicit lower bounds of Section 2 §16: `α ≥ 1`, or `α ≥ 0` when opted in.
    pub fn default_facts(&self) -> Vec<Pred> {
        self.vars
            .iter()
            .map(|v| Pred::ge(Dim::var(v.name.clone()), if v.allow_zero { 0 } else { 1 }))
            .collect()
    }

    /// Everything the solver may assume: defaults, constants, facts and axioms.
    pub fn all_facts(&self) -> Vec<Pred> {
        let mut out = self.default_facts();
        out.extend(
            self.consts
                .iter()
                .map(|(n, v)| Pred::eq(Dim::var(n.clone()), *v)),
        );
        out.extend(self.facts.iter().cloned());
        out.extend(self.axioms.iter().cloned());
        out
    }

    /// User-visible variable names in declaration order (counterexample order).
    pub fn visible_vars(&self) -> Vec<String> {
        self.vars
            .iter()
            .filter(|v| !v.fresh)
            .map(|v| v.name.clone())
            .collect()
    }
}

/// Section 2 §16: which variables a refinement set opts into `α ≥ 0`.
///
/// The spec says "`α ≥ 0` (or any fact admitting 0)". We take the explicit
/// reading: an atomic lower bound on the bare variable against a constant that
/// admits 0 (`B >= 0`, `0 <= B`, `B > -1`, `-1 < B`). A congruence such as
/// `D % 8 == 0` also admits 0, but treating it as an opt-in would silently make
/// `max` over `D` ill-typed, which no user writing a divisibility fact expects.
pub fn zero_opt_ins(refs: &[Pred]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in refs {
        let atoms: Vec<&Pred> = match p {
            Pred::And(ps) => ps.iter().collect(),
            q => vec![q],
        };
        for a in atoms {
            if let Pred::Cmp(l, op, r) = a {
                let (var, op, k) = match (l.as_var(), r.as_const(), r.as_var(), l.as_const()) {
                    (Some(v), Some(k), _, _) => (v, *op, k),
                    (_, _, Some(v), Some(k)) => (v, flip(*op), k),
                    _ => continue,
                };
                let admits_zero_as_bound = match op {
                    CmpOp::Ge => k <= 0,
                    CmpOp::Gt => k < 0,
                    _ => false,
                };
                if admits_zero_as_bound {
                    out.insert(var.to_string());
                }
            }
        }
    }
    out
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Ge => CmpOp::Le,
        CmpOp::Gt => CmpOp::Lt,
        o => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_opt_in() {
        let refs = vec![
            Pred::ge("B", 0),
            Pred::eq(Dim::var("D").rem(&Dim::c(8)), 0),
            Pred::lt(-1, "S"),
        ];
        let z = zero_opt_ins(&refs);
        assert!(z.contains("B") && z.contains("S") && !z.contains("D"));
        let mut g = Ctx::new();
        g.declare("B").declare_allow_zero("S");
        assert_eq!(g.default_facts(), vec![Pred::ge("B", 1), Pred::ge("S", 0)]);
        let f = g.fresh("q");
        assert_eq!(g.visible_vars(), vec!["B".to_string(), "S".to_string()]);
        assert!(g.is_bound(&f));
    }
}
