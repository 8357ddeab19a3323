//! Refinement predicates (Section 1 §2 `Pred`), normalised on construction.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::dim::{Dim, DimError, EvalError, Sigma};

/// A comparison operator.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `≠`
    Ne,
    /// `≤`
    Le,
    /// `<`
    Lt,
    /// `≥`
    Ge,
    /// `>`
    Gt,
}

impl CmpOp {
    /// The Rust-syntax spelling used in diagnostics (`==`, `!=`, `<=`, …).
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Le => "<=",
            CmpOp::Lt => "<",
            CmpOp::Ge => ">=",
            CmpOp::Gt => ">",
        }
    }

    /// Apply to two concrete values.
    pub fn holds(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Le => a <= b,
            CmpOp::Lt => a < b,
            CmpOp::Ge => a >= b,
            CmpOp::Gt => a > b,
        }
    }

    /// The operator of `¬(a op b)`.
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Ge => CmpOp::Lt,
            CmpOp::Gt => CmpOp::Le,
        }
    }
}

/// A quantifier-free Presburger predicate over dims.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Pred {
    /// Always holds.
    True,
    /// Never holds.
    False,
    /// `lhs op rhs`.
    Cmp(Dim, CmpOp, Dim),
    /// Conjunction (flattened, at least two operands).
    And(Vec<Pred>),
    /// Disjunction (flattened, at least two operands).
    Or(Vec<Pred>),
    /// Negation of a non-atomic predicate (negated comparisons flip the operator).
    Not(Box<Pred>),
}

impl Pred {
    /// `a op b`, folded to `True`/`False` when `a - b` is constant. When
    /// `a - b` overflows i64 the comparison stays unfolded: the solver works
    /// over unbounded integers, so nothing is lost but the shortcut.
    pub fn cmp(a: Dim, op: CmpOp, b: Dim) -> Pred {
        if let Some(d) = a.checked_sub(&b).ok().and_then(|d| d.as_const()) {
            return if op.holds(d, 0) {
                Pred::True
            } else {
                Pred::False
            };
        }
        Pred::Cmp(a, op, b)
    }

    /// `a = b`
    pub fn eq(a: impl Into<Dim>, b: impl Into<Dim>) -> Pred {
        Pred::cmp(a.into(), CmpOp::Eq, b.into())
    }
    /// `a ≠ b`
    pub fn ne(a: impl Into<Dim>, b: impl Into<Dim>) -> Pred {
        Pred::cmp(a.into(), CmpOp::Ne, b.into())
    }
    /// `a ≤ b`
    pub fn le(a: impl Into<Dim>, b: impl Into<Dim>) -> Pred {
        Pred::cmp(a.into(), CmpOp::Le, b.into())
    }
    /// `a < b`
    pub fn lt(a: impl Into<Dim>, b: impl Into<Dim>) -> Pred {
        Pred::cmp(a.into(), CmpOp::Lt, b.into())
    }
    /// `a ≥ b`
    pub fn ge(a: impl Into<Dim>, b: impl Into<Dim>) -> Pred {
        Pred::cmp(a.into(), CmpOp::Ge, b.into())
    }
    /// `a > b`
    pub fn gt(a: impl Into<Dim>, b: impl Into<Dim>) -> Pred {
        Pred::cmp(a.into(), CmpOp::Gt, b.into())
    }

    /// Conjunction, flattened, with `True` dropped and `False` absorbing.
    pub fn and(ps: impl IntoIterator<Item = Pred>) -> Pred {
        let mut out = Vec::new();
        for p in ps {
            match p {
                Pred::True => {}
                Pred::False => return Pred::False,
                Pred::And(qs) => out.extend(qs),
                q => out.push(q),
            }
        }
        out.dedup();
        match out.len() {
            0 => Pred::True,
            1 => out.pop().unwrap_or(Pred::True),
            _ => Pred::And(out),
        }
    }

    /// Disjunction, flattened, with `False` dropped and `True` absorbing.
    pub fn or(ps: impl IntoIterator<Item = Pred>) -> Pred {
        let mut out = Vec::new();
        for p in ps {
            match p {
                Pred::False => {}
                Pred::True => return Pred::True,
                Pred::Or(qs) => out.extend(qs),
                q => out.push(q),
            }
        }
        out.dedup();
        match out.len() {
            0 => Pred::False,
            1 => out.pop().unwrap_or(Pred::False),
            _ => Pred::Or(out),
        }
    }

    /// Negation; comparisons flip their operator, double negation cancels.
    #[allow(clippy::should_implement_trait)]
    pub fn not(p: Pred) -> Pred {
        match p {
            Pred::True => Pred::False,
            Pred::False => Pred::True,
            Pred::Cmp(a, op, b) => Pred::Cmp(a, op.negate(), b),
            Pred::Not(q) => *q,
            q => Pred::Not(Box::new(q)),
        }
    }

    /// Evaluate under a concrete σ.
    pub fn eval(&self, sigma: &Sigma) -> Result<bool, EvalError> {
        Ok(match self {
            Pred::True => true,
            Pred::False => false,
            Pred::Cmp(a, op, b) => op.holds(a.eval(sigma)?, b.eval(sigma)?),
            Pred::And(ps) => {
                for p in ps {
                    if !p.eval(sigma)? {
                        return Ok(false);
                    }
                }
                true
            }
            Pred::Or(ps) => {
                for p in ps {
                    if p.eval(sigma)? {
                        return Ok(true);
                    }
                }
                false
            }
            Pred::Not(p) => !p.eval(sigma)?,
        })
    }

    /// Every variable name occurring in the predicate.
    pub fn vars(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.collect_vars(&mut out);
        out
    }

    pub(crate) fn collect_vars(&self, out: &mut BTreeSet<String>) {
        match self {
            Pred::True | Pred::False => {}
            Pred::Cmp(a, _, b) => {
                a.collect_vars(out);
                b.collect_vars(out);
            }
            Pred::And(ps) | Pred::Or(ps) => ps.iter().for_each(|p| p.collect_vars(out)),
            Pred::Not(p) => p.collect_vars(out),
        }
    }

    /// Every dim expression occurring in the predicate.
    pub fn dims(&self) -> Vec<&Dim> {
        match self {
            Pred::True | Pred::False => vec![],
            Pred::Cmp(a, _, b) => vec![a, b],
            Pred::And(ps) | Pred::Or(ps) => ps.iter().flat_map(|p| p.dims()).collect(),
            Pred::Not(p) => p.dims(),
        }
    }

    /// Substitute variables by expressions, renormalising; panics where
    /// [`Pred::checked_subst`] errs.
    pub fn subst(&self, map: &BTreeMap<String, Dim>) -> Pred {
        self.checked_subst(map).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Substitute variables by expressions, renormalising, or the first dim
    /// that overflows.
    pub fn checked_subst(&self, map: &BTreeMap<String, Dim>) -> Result<Pred, DimError> {
        let all = |ps: &[Pred]| -> Result<Vec<Pred>, DimError> {
            ps.iter().map(|p| p.checked_subst(map)).collect()
        };
        Ok(match self {
            Pred::True => Pred::True,
            Pred::False => Pred::False,
            Pred::Cmp(a, op, b) => Pred::cmp(a.checked_subst(map)?, *op, b.checked_subst(map)?),
            Pred::And(ps) => Pred::and(all(ps)?),
            Pred::Or(ps) => Pred::or(all(ps)?),
            Pred::Not(p) => Pred::not(p.checked_subst(map)?),
        })
    }
}

impl fmt::Display for Pred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pred::True => f.write_str("true"),
            Pred::False => f.write_str("false"),
            Pred::Cmp(a, op, b) => write!(f, "{a} {} {b}", op.symbol()),
            Pred::And(ps) => join(f, ps, " && "),
            Pred::Or(ps) => join(f, ps, " || "),
            Pred::Not(p) => write!(f, "!({p})"),
        }
    }
}

fn join(f: &mut fmt::Formatter<'_>, ps: &[Pred], sep: &str) -> fmt::Result {
    for (i, p) in ps.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        match p {
            Pred::And(_) | Pred::Or(_) => write!(f, "({p})")?,
            _ => write!(f, "{p}")?,
        }
    }
    Ok(())
}

/// Print a refinement set as `p₁, p₂, …` (empty → `true`).
pub fn refset_string(r: &[Pred]) -> String {
    if r.is_empty() {
        "true".to_string()
    } else {
        r.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_and_display() {
        assert_eq!(Pred::eq(Dim::c(3), Dim::c(3)), Pred::True);
        assert_eq!(Pred::lt(Dim::c(3), Dim::c(3)), Pred::False);
        assert_eq!(Pred::eq("D", "D"), Pred::True);
        let p = Pred::eq(Dim::var("D").rem(&Dim::var("H")), 0);
        assert_eq!(p.to_string(), "D % H == 0");
        assert_eq!(Pred::not(Pred::ge("B", 16)).to_string(), "B < 16");
        let q = Pred::and([
            Pred::ge("B", 1),
            Pred::True,
            Pred::or([Pred::eq("S", 2), Pred::eq("S", 4)]),
        ]);
        assert_eq!(q.to_string(), "B >= 1 && (S == 2 || S == 4)");
        assert_eq!(Pred::and([Pred::ge("B", 1), Pred::False]), Pred::False);
    }

    #[test]
    fn eval() {
        let mut s = Sigma::new();
        s.insert("B".into(), 3);
        assert_eq!(Pred::ge("B", 16).eval(&s), Ok(false));
        assert_eq!(
            Pred::not(Pred::and([Pred::ge("B", 16), Pred::True])).eval(&s),
            Ok(true)
        );
        assert!(Pred::ge("X", 1).eval(&s).is_err());
    }
}
