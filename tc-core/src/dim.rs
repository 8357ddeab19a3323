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
//!
//! Every coefficient is an `i64` and every operation is *checked*: the
//! `checked_*` methods return [`DimError::Overflow`] instead of wrapping (a
//! wrapped coefficient would make the checker prove facts about a different
//! dim than the one the user wrote), and a division by the constant 0 is
//! [`DimError::DivByZero`]. The front end and the checker use only the checked
//! methods. The `std::ops` impls are conveniences for tests and for code that
//! rebuilds an already-normalised dim; they panic on overflow, never wrap.

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

/// Why a dim operation has no normalised result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DimError {
    /// A coefficient or constant of the result does not fit in an i64.
    #[error("dim arithmetic overflows i64 in `{0}`")]
    Overflow(String),
    /// Division or remainder by the constant 0.
    #[error("division by zero in a dim: `{0}`")]
    DivByZero(String),
}

impl DimError {
    /// The diagnostic code the checker and the macro report this error with.
    pub fn code(&self) -> &'static str {
        match self {
            DimError::Overflow(_) => crate::diag::codes::DIM_OVERFLOW,
            DimError::DivByZero(_) => crate::diag::codes::DIV_BY_ZERO,
        }
    }

    /// The rule the error breaks, as diagnostics name it.
    pub fn rule(&self) -> &'static str {
        match self {
            DimError::Overflow(_) => "dim arithmetic (Section 1 §2)",
            DimError::DivByZero(_) => "dim divisor (Section 2 §13)",
        }
    }

    /// Why it is an error, for the diagnostic's note.
    pub fn why(&self) -> &'static str {
        match self {
            DimError::Overflow(_) => "dims are exact integers: a coefficient or constant that does not fit in an i64 is not a size (Section 1 §2)",
            DimError::DivByZero(_) => "Section 2 §13 requires every dim divisor to be at least 1",
        }
    }
}

/// `a op b` as text, for error messages about the operation that failed.
fn op_text(a: &Dim, op: &str, b: &Dim) -> String {
    format!("{} {op} {}", paren(a), paren(b))
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

    /// The single term `c · m` (`m` a monomial as [`Dim::terms`] yields it,
    /// already sorted), so a dim can be split into its terms and rebuilt.
    pub fn term(m: &[Atom], c: i64) -> Dim {
        let mut terms = BTreeMap::new();
        if c != 0 {
            terms.insert(m.to_vec(), c);
        }
        Dim { terms }
    }

    /// Floor division `self / rhs`; panics where [`Dim::checked_div`] errs.
    pub fn div(&self, rhs: &Dim) -> Dim {
        self.checked_div(rhs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Remainder `self % rhs`; panics where [`Dim::checked_rem`] errs.
    pub fn rem(&self, rhs: &Dim) -> Dim {
        self.checked_rem(rhs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Floor division `self / rhs` (Euclidean for a positive divisor, like
    /// Z3's `div`). A divisor that is a non-positive constant other than 0, or
    /// not a constant, stays an atom: whether it is at least 1 is the
    /// checker's obligation (Section 2 §13), not normalisation's.
    pub fn checked_div(&self, rhs: &Dim) -> Result<Dim, DimError> {
        Ok(self.div_mod(rhs, "/")?.0)
    }

    /// Remainder `self % rhs` (Euclidean, in `[0, rhs)` for a positive divisor).
    pub fn checked_rem(&self, rhs: &Dim) -> Result<Dim, DimError> {
        Ok(self.div_mod(rhs, "%")?.1)
    }

    fn div_mod(&self, rhs: &Dim, op: &str) -> Result<(Dim, Dim), DimError> {
        match rhs.as_const() {
            Some(0) => return Err(DimError::DivByZero(op_text(self, op, rhs))),
            Some(k) if k > 0 => return self.div_mod_const(k, rhs),
            _ => {}
        }
        if self.terms.is_empty() {
            // 0 / b = 0 and 0 % b = 0 for every admissible (positive) divisor.
            return Ok((Dim::c(0), Dim::c(0)));
        }
        Ok((
            Dim::atom(Atom::Div(Box::new(self.clone()), Box::new(rhs.clone()))),
            Dim::atom(Atom::Mod(Box::new(self.clone()), Box::new(rhs.clone()))),
        ))
    }

    /// `self = k·q + r` with every coefficient of `r` in `[0, k)`:
    /// `floor(self / k) = q + floor(r / k)` because `q` is integer-valued.
    /// No step can overflow: quotients and remainders of coefficients are
    /// no larger in magnitude than the coefficients themselves.
    fn div_mod_const(&self, k: i64, rhs: &Dim) -> Result<(Dim, Dim), DimError> {
        let mut q = Dim::default();
        let mut r = Dim::default();
        for (m, c) in &self.terms {
            q.add_term(m.clone(), c.div_euclid(k))
                .map_err(|_| self.overflow_in("/", rhs))?;
            r.add_term(m.clone(), c.rem_euclid(k))
                .map_err(|_| self.overflow_in("%", rhs))?;
        }
        if let Some(rc) = r.as_const() {
            let q = q
                .checked_add(&Dim::c(rc.div_euclid(k)))
                .map_err(|_| self.overflow_in("/", rhs))?;
            return Ok((q, Dim::c(rc.rem_euclid(k))));
        }
        let rd = Dim::atom(Atom::Div(Box::new(r.clone()), Box::new(rhs.clone())));
        let rm = Dim::atom(Atom::Mod(Box::new(r), Box::new(rhs.clone())));
        let q = q.checked_add(&rd).map_err(|_| self.overflow_in("/", rhs))?;
        Ok((q, rm))
    }

    fn overflow_in(&self, op: &str, rhs: &Dim) -> DimError {
        DimError::Overflow(op_text(self, op, rhs))
    }

    /// Adds `c·m`; `Err(())` when the coefficient leaves i64 (the caller
    /// names the operation).
    fn add_term(&mut self, m: Monomial, c: i64) -> Result<(), ()> {
        if c == 0 {
            return Ok(());
        }
        let e = self.terms.entry(m.clone()).or_insert(0);
        *e = e.checked_add(c).ok_or(())?;
        if *e == 0 {
            // No zero coefficients, so structural equality is value equality.
            self.terms.remove(&m);
        }
        Ok(())
    }

    /// `self + rhs`, or [`DimError::Overflow`].
    pub fn checked_add(&self, rhs: &Dim) -> Result<Dim, DimError> {
        let mut out = self.clone();
        for (m, c) in &rhs.terms {
            out.add_term(m.clone(), *c)
                .map_err(|_| self.overflow_in("+", rhs))?;
        }
        Ok(out)
    }

    /// `self - rhs`, or [`DimError::Overflow`] (coefficient by coefficient,
    /// so `x - i64::MIN·A` errs only when the difference itself leaves i64).
    pub fn checked_sub(&self, rhs: &Dim) -> Result<Dim, DimError> {
        let mut out = self.clone();
        for (m, c) in &rhs.terms {
            let e = out.terms.entry(m.clone()).or_insert(0);
            *e = e
                .checked_sub(*c)
                .ok_or_else(|| self.overflow_in("-", rhs))?;
            if *e == 0 {
                out.terms.remove(m);
            }
        }
        Ok(out)
    }

    /// `-self`, or [`DimError::Overflow`] (a coefficient `i64::MIN`).
    pub fn checked_neg(&self) -> Result<Dim, DimError> {
        self.checked_scale(-1)
            .map_err(|_| DimError::Overflow(format!("-{}", paren(self))))
    }

    /// `k · self`, or [`DimError::Overflow`].
    pub fn checked_scale(&self, k: i64) -> Result<Dim, DimError> {
        let mut out = Dim::default();
        for (m, c) in &self.terms {
            let p = c.checked_mul(k);
            p.and_then(|p| out.add_term(m.clone(), p).ok())
                .ok_or_else(|| self.overflow_in("*", &Dim::c(k)))?;
        }
        Ok(out)
    }

    /// `self · rhs`, or [`DimError::Overflow`] exactly when a coefficient of
    /// the product does not fit in an i64: coefficients accumulate in i128,
    /// so partial sums that cancel (`(A + B)·(A - B)`) do not err spuriously.
    pub fn checked_mul(&self, rhs: &Dim) -> Result<Dim, DimError> {
        let over = || self.overflow_in("*", rhs);
        let mut acc: BTreeMap<Monomial, Wide> = BTreeMap::new();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &rhs.terms {
                let mut m: Monomial = m1.iter().chain(m2.iter()).cloned().collect();
                m.sort();
                // |c1·c2| ≤ 2^126 fits an i128; their sum may not, hence Wide.
                let e = acc.entry(m).or_default();
                e.add(*c1 as i128 * *c2 as i128).ok_or_else(over)?;
            }
        }
        let mut terms = BTreeMap::new();
        for (m, c) in acc {
            match c.to_i64().ok_or_else(over)? {
                0 => {}
                c => {
                    terms.insert(m, c);
                }
            }
        }
        Ok(Dim { terms })
    }

    /// Multiply by a constant; panics where [`Dim::checked_scale`] errs.
    pub fn scale(&self, k: i64) -> Dim {
        self.checked_scale(k).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every quotient or remainder atom (`x / y`, `x % y`) in the
    /// expression, outermost first, each once: the divisions whose divisor
    /// must be at least 1 (Section 2 §13), whatever the divisor.
    pub fn divisions(&self) -> Vec<Atom> {
        let mut out = Vec::new();
        self.collect_divisions(&mut out);
        out
    }

    fn collect_divisions(&self, out: &mut Vec<Atom>) {
        for m in self.terms.keys() {
            for a in m {
                if let Atom::Div(x, y) | Atom::Mod(x, y) = a {
                    if !out.contains(a) {
                        out.push(a.clone());
                    }
                    x.collect_divisions(out);
                    y.collect_divisions(out);
                }
            }
        }
    }

    /// Evaluate under a concrete substitution: the exact integer value
    /// (Section 1 §2: dims are exact integers), an [`EvalError::Overflow`]
    /// only when that value leaves i64. Intermediate values are i128: a
    /// normal form may hold a sum above i64 whose quotient fits, such as
    /// `(N + 9223372036854775806) / 9223372036854775807`, the ⌈N / k⌉ of
    /// a strided slice with a huge step (`div_mod_const` keeps the
    /// remainder's constant in `[0, k)`), which is 1 for every N ≥ 1.
    pub fn eval(&self, sigma: &Sigma) -> Result<i64, EvalError> {
        let v = self.eval_wide(sigma)?;
        i64::try_from(v).map_err(|_| EvalError::Overflow(self.to_string()))
    }

    fn eval_wide(&self, sigma: &Sigma) -> Result<i128, EvalError> {
        let overflow = || EvalError::Overflow(self.to_string());
        let mut total: i128 = 0;
        for (m, c) in &self.terms {
            let mut v = i128::from(*c);
            for a in m {
                let x = eval_atom(a, sigma)?;
                v = v.checked_mul(x).ok_or_else(overflow)?;
            }
            total = total.checked_add(v).ok_or_else(overflow)?;
        }
        Ok(total)
    }

    /// Substitute variables by expressions (capture-free: dims have no
    /// binders); panics where [`Dim::checked_subst`] errs.
    pub fn subst(&self, map: &BTreeMap<String, Dim>) -> Dim {
        self.checked_subst(map).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Substitute variables by expressions and renormalise, or the first
    /// overflow (or division by a divisor that became the constant 0).
    pub fn checked_subst(&self, map: &BTreeMap<String, Dim>) -> Result<Dim, DimError> {
        let mut out = Dim::default();
        for (m, c) in &self.terms {
            let mut prod = Dim::c(*c);
            for a in m {
                let ad = match a {
                    Atom::Var(v) => map.get(v).cloned().unwrap_or_else(|| Dim::var(v.clone())),
                    Atom::Div(x, y) => x.checked_subst(map)?.checked_div(&y.checked_subst(map)?)?,
                    Atom::Mod(x, y) => x.checked_subst(map)?.checked_rem(&y.checked_subst(map)?)?,
                };
                prod = prod.checked_mul(&ad)?;
            }
            out = out.checked_add(&prod)?;
        }
        Ok(out)
    }
}

/// An exact accumulator for sums of i128 products: `hi·2^64 + lo`, with the
/// low 64 bits of each addend summed apart from the high ones, so partial
/// sums that leave i128 and later cancel are still exact (Dim products must
/// err exactly when a final coefficient leaves i64, never spuriously).
#[derive(Clone, Copy, Default)]
struct Wide {
    hi: i128,
    lo: i128,
}

impl Wide {
    const MASK: i128 = (1 << 64) - 1;

    /// `None` only after ~2^63 addends, which no dim has.
    fn add(&mut self, p: i128) -> Option<()> {
        self.hi = self.hi.checked_add(p >> 64)?;
        self.lo = self.lo.checked_add(p & Self::MASK)?;
        Some(())
    }

    fn to_i64(self) -> Option<i64> {
        let hi = self.hi.checked_add(self.lo >> 64)?;
        let lo = self.lo & Self::MASK;
        // value = hi·2^64 + lo with 0 ≤ lo < 2^64: an i64 iff hi is 0 or -1
        // and the value lands in range.
        let v = match hi {
            0 => lo,
            -1 => lo - (1 << 64),
            _ => return None,
        };
        i64::try_from(v).ok()
    }
}

fn eval_atom(a: &Atom, sigma: &Sigma) -> Result<i128, EvalError> {
    match a {
        Atom::Var(v) => sigma
            .get(v)
            .map(|&x| i128::from(x))
            .ok_or_else(|| EvalError::Unbound(v.clone())),
        Atom::Div(x, y) | Atom::Mod(x, y) => {
            let xv = x.eval_wide(sigma)?;
            let yv = y.eval_wide(sigma)?;
            if yv <= 0 {
                return Err(EvalError::BadDivisor {
                    dividend: x.to_string(),
                    divisor: y.to_string(),
                    value: i64::try_from(yv).unwrap_or(i64::MIN),
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

// The operator impls panic on overflow (never wrap). They serve tests and
// generated code that rebuilds a dim the checker already normalised (whose
// coefficients therefore fit); the checker and the macro's parser call the
// `checked_*` methods instead, so user input never reaches these panics.

impl Add for Dim {
    type Output = Dim;
    fn add(self, rhs: Dim) -> Dim {
        self.checked_add(&rhs).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Sub for Dim {
    type Output = Dim;
    fn sub(self, rhs: Dim) -> Dim {
        self.checked_sub(&rhs).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Neg for Dim {
    type Output = Dim;
    fn neg(self) -> Dim {
        self.checked_neg().unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Mul for Dim {
    type Output = Dim;
    fn mul(self, rhs: Dim) -> Dim {
        self.checked_mul(&rhs).unwrap_or_else(|e| panic!("{e}"))
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
            // A lone quotient or remainder under a factor or a leading
            // minus is parenthesised: `2 * (A + 1) / 2` and `-(A + 1) / 2`
            // read as other dims (`*`, `/` and `%` associate left, unary
            // minus binds tightest, and division floors).
            let lone_op = matches!(m.as_slice(), [Atom::Div(..) | Atom::Mod(..)]);
            let body = if m.is_empty() {
                mag.to_string()
            } else if lone_op && (mag != 1 || (i == 0 && c < 0)) {
                let factor = if mag == 1 {
                    String::new()
                } else {
                    format!("{mag} * ")
                };
                format!("{factor}({})", monomial_string(m))
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
        // Exact through an intermediate past i64: ⌈Big / 2⌉ and ⌈D / MAX⌉.
        let half = (v("Big") + 1).div(&Dim::c(2));
        assert_eq!(half.eval(&s), Ok(1 << 62));
        let one = (v("D") + (i64::MAX - 1)).div(&Dim::c(i64::MAX));
        assert_eq!(one.eval(&s), Ok(1));
        assert_eq!((v("Big") + 1 - v("D")).eval(&s), Ok(i64::MAX - 767));
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
