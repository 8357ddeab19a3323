//! Symbolic dimension expressions (Section 1 §2 `e`), normalised on construction.
//!
//! A [`Dim`] is a polynomial with integer coefficients over *atoms*: shape
//! variables and the quotients/remainders `a / b`, `a % b`. Every operation
//! returns a normalised value (constants folded, like terms collected, terms in
//! a canonical order), so two dims that are syntactically equal after
//! normalisation are equal as values and the checker can short-circuit before
//! calling Z3 (Section 2 §2). Products of two non-constant dims are
//! representable (reshape volumes, axioms: Section 2 §10, §14) but are not
//! Presburger; [`Dim::is_linear`] tells the checker where they are allowed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::{Add, Mul, Neg, Sub};

/// A concrete shape substitution σ: variable name → value (Section 4 §2.2).
pub type Sigma = BTreeMap<String, i64>;

/// An indivisible factor of a monomial.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    /// A shape variable or module constant, by name.
    Var(String),
    /// Floor (Euclidean) division `a / b` that normalisation could not fold.
    Div(Box<Dim>, Box<Dim>),
    /// Euclidean remainder `a % b` that normalisation could not fold.
    Mod(Box<Dim>, Box<Dim>),
}

/// A sorted product of atoms; the empty monomial is the constant 1.
type Monomial = Vec<Atom>;

/// A normalised symbolic dimension expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dim {
    /// Monomial → non-zero coefficient.
    terms: BTreeMap<Monomial, i64>,
}

/// Why a dim could not be evaluated under σ.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A variable of the expression has no value in σ.
    #[error("shape variable `{0}` is not bound")]
    Unbound(String),
    /// A division or remainder by a value that is not positive.
    #[error("division of `{dividend}` by `{divisor}` = {value}, which is not positive")]
    BadDivisor {
        /// The dividend expression.
        dividend: String,
        /// The divisor expression.
        divisor: String,
        /// The divisor's value under σ.
        value: i64,
    },
    /// The value does not fit in an i64.
    #[error("arithmetic overflow while evaluating `{0}`")]
    Overflow(String),
}

impl Dim {
    /// The constant `n`.
    pub fn c(n: i64) -> Dim {
        let mut terms = BTreeMap::new();
        if n != 0 {
            terms.insert(Vec::new(), n);
        }
        Dim { terms }
    }

    /// The shape variable `name`.
    pub fn var(name: impl Into<String>) -> Dim {
        Dim::atom(Atom::Var(name.into()))
    }

    fn atom(a: Atom) -> Dim {
        let mut terms = BTreeMap::new();
        terms.insert(vec![a], 1);
        Dim { terms }
    }

    /// `Some(n)` when the expression is the constant `n`.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// `Some(name)` when the expression is exactly one variable.
    pub fn as_var(&self) -> Option<&str> {
        if self.terms.len() != 1 {
            return None;
        }
        match self.terms.iter().next() {
            Some((m, 1)) if m.len() == 1 => match &m[0] {
                Atom::Var(v) => Some(v),
                _ => None,
            },
            _ => None,
        }
    }

    /// True when no monomial has degree above 1 and every quotient/remainder
    /// divides by a constant, recursively: the Presburger fragment.
    pub fn is_linear(&self) -> bool {
        self.terms.keys().all(|m| {
            m.len() <= 1
                && m.iter().all(|a| match a {
                    Atom::Var(_) => true,
                    Atom::Div(x, y) | Atom::Mod(x, y) => x.is_linear() && y.as_const().is_some(),
                })
        })
    }

    /// Divisions/remainders whose divisor is not a constant, innermost first
    /// (Section 2 §13 elaborates each to a fresh variable).
    pub fn variable_divisions(&self) -> Vec<Atom> {
        let mut out = Vec::new();
        self.collect_var_divs(&mut out);
        out
    }

    fn collect_var_divs(&self, out: &mut Vec<Atom>) {
        for m in self.terms.keys() {
            for a in m {
                if let Atom::Div(x, y) | Atom::Mod(x, y) = a {
                    x.collect_var_divs(out);
                    y.collect_var_divs(out);
                    if y.as_const().is_none() && !out.contains(a) {
                        out.push(a.clone());
                    }
                }
            }
        }
    }

    /// Every variable name occurring in the expression.
    pub fn vars(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.collect_vars(&mut out);
        out
    }

    pub(crate) fn collect_vars(&self, out: &mut BTreeSet<String>) {
        for m in self.terms.keys() {
            for a in m {
                match a {
                    Atom::Var(v) => {
                        out.insert(v.clone());
                    }
                    Atom::Div(x, y) | Atom::Mod(x, y) => {
                        x.collect_vars(out);
                        y.collect_vars(out);
                    }
                }
            }
        }
    }

    /// The (monomial, coefficient) pairs in canonical order.
    pub fn terms(&self) -> impl Iterator<Item = (&[Atom], i64)> {
        self.terms.iter().map(|(m, c)| (m.as_slice(), *c))
    }

    /// Floor division `self / rhs` (Euclidean for a positive divisor, like Z3's `div`).
    pub fn div(&self, rhs: &Dim) -> Dim {
        self.div_mod(rhs).0
    }

    /// Remainder `self % rhs` (Euclidean, in `[0, rhs)` for a positive divisor).
    pub fn rem(&self, rhs: &Dim) -> Dim {
        self.div_mod(rhs).1
    }

    fn div_mod(&self, rhs: &Dim) -> (Dim, Dim) {
        if let Some(k) = rhs.as_const() {
            if k > 0 {
                // self = k·q + r with every coefficient of r in [0, k):
                // floor(self / k) = q + floor(r / k) because q is integer-valued.
                let mut q = Dim::default();
                let mut r = Dim::default();
                for (m, c) in &self.terms {
                    q.add_term(m.clone(), c.div_euclid(k));
                    r.add_term(m.clone(), c.rem_euclid(k));
                }
                if let Some(rc) = r.as_const() {
                    return (q + Dim::c(rc.div_euclid(k)), Dim::c(rc.rem_euclid(k)));
                }
                let rd = Dim::atom(Atom::Div(Box::new(r.clone()), Box::new(rhs.clone())));
                let rm = Dim::atom(Atom::Mod(Box::new(r), Box::new(rhs.clone())));
                return (q + rd, rm);
            }
        }
        if self.terms.is_empty() {
            // 0 / b = 0 and 0 % b = 0 for every admissible (positive) divisor.
            return (Dim::c(0), Dim::c(0));
        }
        (
            Dim::atom(Atom::Div(Box::new(self.clone()), Box::new(rhs.clone()))),
            Dim::atom(Atom::Mod(Box::new(self.clone()), Box::new(rhs.clone()))),
        )
    }

    fn add_term(&mut self, m: Monomial, c: i64) {
        if c == 0 {
            return;
        }
        let e = self.terms.entry(m.clone()).or_insert(0);
        *e = e.wrapping_add(c);
        if *e == 0 {
            // No zero coefficients, so structural equality is value equality.
            self.terms.remove(&m);
        }
    }

    /// Multiply by a constant.
    pub fn scale(&self, k: i64) -> Dim {
        let mut out = Dim::default();
        for (m, c) in &self.terms {
            out.add_term(m.clone(), c.wrapping_mul(k));
        }
        out
    }

    /// Evaluate under a concrete substitution.
    pub fn eval(&self, sigma: &Sigma) -> Result<i64, EvalError> {
        let overflow = || EvalError::Overflow(self.to_string());
        let mut total: i64 = 0;
        for (m, c) in &self.terms {
            let mut v: i64 = *c;
            for a in m {
                let x = eval_atom(a, sigma)?;
                v = v.checked_mul(x).ok_or_else(overflow)?;
            }
            total = total.checked_add(v).ok_or_else(overflow)?;
        }
        Ok(total)
    }

    /// Substitute variables by expressions (capture-free: dims have no binders).
    pub fn subst(&self, map: &BTreeMap<String, Dim>) -> Dim {
        let mut out = Dim::default();
        for (m, c) in &self.terms {
            let mut prod = Dim::c(*c);
            for a in m {
                let ad = match a {
                    Atom::Var(v) => map.get(v).cloned().unwrap_or_else(|| Dim::var(v.clone())),
                    Atom::Div(x, y) => x.subst(map).div(&y.subst(map)),
                    Atom::Mod(x, y) => x.subst(map).rem(&y.subst(map)),
                };
                prod = prod * ad;
            }
            out = out + prod;
        }
        out
    }
}

fn eval_atom(a: &Atom, sigma: &Sigma) -> Result<i64, EvalError> {
    match a {
        Atom::Var(v) => sigma
            .get(v)
            .copied()
            .ok_or_else(|| EvalError::Unbound(v.clone())),
        Atom::Div(x, y) | Atom::Mod(x, y) => {
            let xv = x.eval(sigma)?;
            let yv = y.eval(sigma)?;
            if yv <= 0 {
                return Err(EvalError::BadDivisor {
                    dividend: x.to_string(),
                    divisor: y.to_string(),
                    value: yv,
                });
            }
            Ok(if matches!(a, Atom::Div(..)) {
                xv.div_euclid(yv)
            } else {
                xv.rem_euclid(yv)
            })
        }
    }
}

impl From<i64> for Dim {
    fn from(n: i64) -> Dim {
        Dim::c(n)
    }
}

impl From<&str> for Dim {
    fn from(v: &str) -> Dim {
        Dim::var(v)
    }
}

impl Add for Dim {
    type Output = Dim;
    fn add(mut self, rhs: Dim) -> Dim {
        for (m, c) in rhs.terms {
            self.add_term(m, c);
        }
        self
    }
}

impl Sub for Dim {
    type Output = Dim;
    fn sub(self, rhs: Dim) -> Dim {
        self + rhs.scale(-1)
    }
}

impl Neg for Dim {
    type Output = Dim;
    fn neg(self) -> Dim {
        self.scale(-1)
    }
}

impl Mul for Dim {
    type Output = Dim;
    fn mul(self, rhs: Dim) -> Dim {
        let mut out = Dim::default();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &rhs.terms {
                let mut m: Monomial = m1.iter().chain(m2.iter()).cloned().collect();
                m.sort();
                out.add_term(m, c1.wrapping_mul(*c2));
            }
        }
        out
    }
}

impl Add<i64> for Dim {
    type Output = Dim;
    fn add(self, rhs: i64) -> Dim {
        self + Dim::c(rhs)
    }
}

impl Sub<i64> for Dim {
    type Output = Dim;
    fn sub(self, rhs: i64) -> Dim {
        self - Dim::c(rhs)
    }
}

impl Mul<i64> for Dim {
    type Output = Dim;
    fn mul(self, rhs: i64) -> Dim {
        self.scale(rhs)
    }
}

impl Mul<Dim> for i64 {
    type Output = Dim;
    fn mul(self, rhs: Dim) -> Dim {
        rhs.scale(self)
    }
}

impl<'a> Add<&'a Dim> for &'a Dim {
    type Output = Dim;
    fn add(self, rhs: &Dim) -> Dim {
        self.clone() + rhs.clone()
    }
}

impl<'a> Sub<&'a Dim> for &'a Dim {
    type Output = Dim;
    fn sub(self, rhs: &Dim) -> Dim {
        self.clone() - rhs.clone()
    }
}

impl<'a> Mul<&'a Dim> for &'a Dim {
    type Output = Dim;
    fn mul(self, rhs: &Dim) -> Dim {
        self.clone() * rhs.clone()
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Var(v) => f.write_str(v),
            Atom::Div(x, y) => write!(f, "{} / {}", paren(x), paren(y)),
            Atom::Mod(x, y) => write!(f, "{} % {}", paren(x), paren(y)),
        }
    }
}

fn paren(d: &Dim) -> String {
    if d.as_const().is_some() || d.as_var().is_some() {
        d.to_string()
    } else {
        format!("({d})")
    }
}

fn monomial_string(m: &[Atom]) -> String {
    m.iter()
        .map(|a| match a {
            Atom::Var(v) => v.clone(),
            other if m.len() > 1 => format!("({other})"),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" * ")
}

impl fmt::Display for Dim {
    /// Prints positive terms first (canonical order), then negative ones, then
    /// the constant, so `S - K + 1` reads the way users write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        let mut ordered: Vec<(&Monomial, i64)> = Vec::new();
        ordered.extend(
            self.terms
                .iter()
                .filter(|(m, c)| !m.is_empty() && **c > 0)
                .map(|(m, c)| (m, *c)),
        );
        ordered.extend(
            self.terms
                .iter()
                .filter(|(m, c)| !m.is_empty() && **c < 0)
                .map(|(m, c)| (m, *c)),
        );
        ordered.extend(
            self.terms
                .iter()
                .filter(|(m, _)| m.is_empty())
                .map(|(m, c)| (m, *c)),
        );
        for (i, (m, c)) in ordered.into_iter().enumerate() {
            let mag = c.unsigned_abs();
            let body = if m.is_empty() {
                mag.to_string()
            } else if mag == 1 {
                monomial_string(m)
            } else {
                format!("{mag} * {}", monomial_string(m))
            };
            match (i, c < 0) {
                (0, false) => write!(f, "{body}")?,
                (0, true) => write!(f, "-{body}")?,
                (_, false) => write!(f, " + {body}")?,
                (_, true) => write!(f, " - {body}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Dim {
        Dim::var(s)
    }

    #[test]
    fn normalises_on_construction() {
        assert_eq!(v("S") - v("K") + 1, v("S") + 1 - v("K"));
        assert_eq!((v("S") - v("K") + 1).to_string(), "S - K + 1");
        assert_eq!(v("D") + v("D"), 2 * v("D"));
        assert_eq!((v("D") - v("D")).as_const(), Some(0));
        assert_eq!(Dim::c(7).div(&Dim::c(2)).as_const(), Some(3));
        assert_eq!(Dim::c(-7).rem(&Dim::c(2)).as_const(), Some(1));
        assert_eq!((v("D") * 4 + 8).div(&Dim::c(4)), v("D") + 2);
        assert_eq!((v("D") * 4 + 8).rem(&Dim::c(4)).as_const(), Some(0));
        assert_eq!((v("D") * 2 + 1).div(&Dim::c(2)), v("D"));
        assert_eq!(v("D").div(&Dim::c(1)), v("D"));
        assert_eq!(v("D").rem(&Dim::c(1)).as_const(), Some(0));
        assert_eq!(v("B") * v("S"), v("S") * v("B"));
    }

    #[test]
    fn linear_fragment() {
        assert!((v("S") - v("K") + 1).is_linear());
        assert!(v("D").div(&Dim::c(8)).is_linear());
        assert!(!v("D").div(&v("H")).is_linear());
        assert!(!(v("B") * v("S")).is_linear());
        assert_eq!(v("D").div(&v("H")).variable_divisions().len(), 1);
    }

    #[test]
    fn eval_and_errors() {
        let mut s = Sigma::new();
        s.insert("D".into(), 768);
        s.insert("H".into(), 12);
        assert_eq!(v("D").div(&v("H")).eval(&s), Ok(64));
        assert_eq!((v("D") * v("H") - 1).eval(&s), Ok(768 * 12 - 1));
        assert!(matches!(v("X").eval(&s), Err(EvalError::Unbound(_))));
        s.insert("Z".into(), 0);
        assert!(matches!(
            v("D").rem(&v("Z")).eval(&s),
            Err(EvalError::BadDivisor { .. })
        ));
        s.insert("Big".into(), i64::MAX);
        assert!(matches!(
            (v("Big") * 2).eval(&s),
            Err(EvalError::Overflow(_))
        ));
    }

    #[test]
    fn display() {
        assert_eq!(v("D").div(&v("H")).to_string(), "D / H");
        assert_eq!((v("B") * v("S") * 2).to_string(), "2 * B * S");
        assert_eq!((Dim::c(0) - v("K")).to_string(), "-K");
        assert_eq!((v("A") + v("B")).div(&Dim::c(3)).to_string(), "(A + B) / 3");
    }

    #[test]
    fn subst() {
        let mut m = BTreeMap::new();
        m.insert("K".to_string(), Dim::c(3));
        assert_eq!((v("S") - v("K") + 1).subst(&m), v("S") - 2);
    }
}
