//! Inference through invertible compound dims (Section 2 §18, last bullet):
//! "a variable that occurs only as `K / b(Q)` (or `c · α`, `α + k`) is bound
//! at the call from the actual dim when the map is invertible there, the
//! contract checking divisibility and range".
//!
//! A dim is *invertible in* α when, after normalisation, it is
//! `c · t + r` with `c` a non-zero constant, `r` free of α (its other
//! variables already known) and `t` either α itself or a quotient `x / k` by
//! a positive constant whose dividend `x` is again invertible in α. That
//! covers `4 * F`, `F + 2`, `F - 1`, `K / 32`, `(K / 32) * 34 + 2` and any
//! nesting of them. Solving `c · t + r = n` gives `t = (n - r) / c`, which
//! must divide exactly; a quotient layer `x / k = t` then gives `x = k · t`,
//! which is the only solution only when `x % k == 0` is known (the checker
//! requires the signature to imply it: [`Layer::quotient`]).
//!
//! Three users share this module: formation (which variables a signature
//! can bind, `check::signature`), call sites in bodies (θ, symbolically,
//! `check::call`) and the runtime contract (σ, with concrete sizes).

use crate::dim::{Atom, Dim, DimError, EvalError, Sigma};

/// One layer `d = coeff · t + rest` of a dim invertible in a variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// The non-zero constant multiplying `t`.
    pub coeff: i64,
    /// Everything else: free of the variable.
    pub rest: Dim,
    /// `Some((x, k))` when `t` is the quotient `x / k`; `None` when `t` is
    /// the variable itself (the innermost layer).
    pub quotient: Option<(Dim, i64)>,
}

/// Why a dim cannot bind a variable: the reason E0102 names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotInvertible {
    /// The variable does not occur in the dim.
    Absent,
    /// The variable occurs in two terms (`F + F / 2`).
    SeveralTerms,
    /// A term multiplies the variable by a non-constant (`F * F`, `E * F`).
    Product(String),
    /// The variable occurs under `%` (`F % 2`): many values give one size.
    Remainder(String),
    /// The variable occurs in a quotient by a non-constant, or in a divisor.
    VariableDivisor(String),
    /// Another variable of the dim must be known first.
    Needs(String),
}

impl NotInvertible {
    /// Why `dim` cannot bind `var`, for a diagnostic's message.
    pub fn reason(&self, var: &str) -> String {
        match self {
            NotInvertible::Absent => format!("`{var}` does not occur in it"),
            NotInvertible::SeveralTerms => {
                format!("`{var}` occurs in more than one of its terms")
            }
            NotInvertible::Product(m) => {
                format!("`{m}` multiplies `{var}` by something that is not a constant")
            }
            NotInvertible::Remainder(a) => {
                format!("the remainder `{a}` has the same value for many `{var}`")
            }
            NotInvertible::VariableDivisor(a) => {
                format!("`{a}` divides by something that is not a positive constant")
            }
            NotInvertible::Needs(v) => {
                format!("it also involves `{v}`, which nothing binds first")
            }
        }
    }
}

/// Does atom `a` mention `var` anywhere (itself, a dividend, a divisor)?
fn mentions(a: &Atom, var: &str) -> bool {
    match a {
        Atom::Var(v) => v == var,
        Atom::Div(x, y) | Atom::Mod(x, y) => x.vars().contains(var) || y.vars().contains(var),
    }
}

/// The layers of `d` in `var`, outermost first, or why there are none.
/// `known(v)` says whether another variable's value is known here.
pub fn layers(
    d: &Dim,
    var: &str,
    known: &dyn Fn(&str) -> bool,
) -> Result<Vec<Layer>, NotInvertible> {
    let mut out = Vec::new();
    let mut cur = d.clone();
    loop {
        let layer = split(&cur, var, known)?;
        let next = layer.quotient.as_ref().map(|(x, _)| x.clone());
        out.push(layer);
        match next {
            Some(x) => cur = x,
            None => return Ok(out),
        }
    }
}

/// `d = coeff · t + rest` for one layer.
fn split(d: &Dim, var: &str, known: &dyn Fn(&str) -> bool) -> Result<Layer, NotInvertible> {
    let mut hit: Option<(i64, &Atom)> = None;
    let mut rest = Dim::default();
    for (m, c) in d.terms() {
        if !m.iter().any(|a| mentions(a, var)) {
            // Adding a term of `d` back cannot overflow: `rest` is a sub-sum.
            rest = rest
                .checked_add(&Dim::term(m, c))
                .map_err(|_| NotInvertible::SeveralTerms)?;
            continue;
        }
        if hit.is_some() {
            return Err(NotInvertible::SeveralTerms);
        }
        let [a] = m else {
            return Err(NotInvertible::Product(Dim::term(m, 1).to_string()));
        };
        hit = Some((c, a));
    }
    let Some((coeff, atom)) = hit else {
        return Err(NotInvertible::Absent);
    };
    let quotient = match atom {
        Atom::Var(_) => None,
        Atom::Mod(..) => return Err(NotInvertible::Remainder(atom.to_string())),
        Atom::Div(x, y) => match y.as_const() {
            Some(k) if k >= 1 => Some(((**x).clone(), k)),
            _ => return Err(NotInvertible::VariableDivisor(atom.to_string())),
        },
    };
    // Structural reasons first: they are what the user must change.
    if let Some(v) = rest.vars().into_iter().find(|v| !known(v)) {
        return Err(NotInvertible::Needs(v));
    }
    Ok(Layer {
        coeff,
        rest,
        quotient,
    })
}

/// The symbolic solution of `d(var) = n` (a call site's θ, Section 2 §17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solved {
    /// The value of the variable.
    pub value: Dim,
    /// Obligations `(e, c)`: `e` must be a multiple of `c` for `value` to
    /// solve the equation (outermost layer first).
    pub multiples: Vec<(Dim, i64)>,
}

/// Solve `layers(d) = n` for the variable; `subst` maps the known variables
/// of each layer's rest into `n`'s vocabulary (θ at a call site).
pub fn solve(
    layers: &[Layer],
    n: &Dim,
    subst: &std::collections::BTreeMap<String, Dim>,
) -> Result<Solved, DimError> {
    let mut multiples = Vec::new();
    let mut target = n.clone();
    for layer in layers {
        let mut num = target.checked_sub(&layer.rest.checked_subst(subst)?)?;
        let mut c = layer.coeff;
        if c < 0 {
            // `x / c` with c < 0 does not normalise; flip both signs.
            num = num.checked_neg()?;
            c = c
                .checked_neg()
                .ok_or_else(|| DimError::Overflow(format!("-({c})")))?;
        }
        if c > 1 {
            multiples.push((num.clone(), c));
        }
        let t = num.checked_div(&Dim::c(c))?;
        target = match layer.quotient {
            Some((_, k)) => t.checked_scale(k)?,
            None => t,
        };
    }
    Ok(Solved {
        value: target,
        multiples,
    })
}

/// Why a concrete size does not invert (the runtime contract's error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvertError {
    /// The dim does not determine the variable (see [`NotInvertible`]).
    #[error("the dim cannot bind the variable: {0}")]
    NotInvertible(String),
    /// `value` should be a multiple of `of` and is not.
    #[error("{value} is not a multiple of {of}")]
    NotMultiple {
        /// The value to divide (the size less the other terms).
        value: i128,
        /// The constant it must be a multiple of.
        of: i64,
    },
    /// The solution does not fit in an i64.
    #[error("the value it gives does not fit in an i64")]
    Overflow,
    /// A rest term could not be evaluated.
    #[error("{0}")]
    Eval(#[from] EvalError),
}

/// Solve `d(var) = n` for a concrete size `n` under σ (every other variable
/// of `d` bound): the runtime contract's inversion, exact in i128, never a
/// panic. The range (`var ≥ 1` or `≥ 0`) is the caller's to check.
pub fn solve_value(d: &Dim, var: &str, n: i64, sigma: &Sigma) -> Result<i64, InvertError> {
    // Known values first, so `N_EXPERTS * F` is `8 * F` here.
    let known: std::collections::BTreeMap<String, Dim> = sigma
        .iter()
        .filter(|(k, _)| k.as_str() != var)
        .map(|(k, v)| (k.clone(), Dim::c(*v)))
        .collect();
    let d = d.checked_subst(&known).map_err(|_| InvertError::Overflow)?;
    let ls = layers(&d, var, &|_| false).map_err(|e| InvertError::NotInvertible(e.reason(var)))?;
    let mut target = i128::from(n);
    for layer in &ls {
        let rest = i128::from(layer.rest.eval(&Sigma::new())?);
        let num = target.checked_sub(rest).ok_or(InvertError::Overflow)?;
        let c = i128::from(layer.coeff);
        if num % c != 0 {
            return Err(InvertError::NotMultiple {
                value: num,
                of: layer.coeff,
            });
        }
        let t = num / c;
        target = match layer.quotient {
            Some((_, k)) => t.checked_mul(i128::from(k)).ok_or(InvertError::Overflow)?,
            None => t,
        };
    }
    i64::try_from(target).map_err(|_| InvertError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Dim {
        Dim::var(s)
    }

    fn none(_: &str) -> bool {
        false
    }

    fn solve_at(d: &Dim, n: i64) -> Result<i64, InvertError> {
        solve_value(d, "F", n, &Sigma::new())
    }

    #[test]
    fn invertible_forms() {
        let k32 = v("F").div(&Dim::c(32));
        for d in [
            v("F") * 4,
            v("F") + 2,
            v("F") - 1,
            Dim::c(10) - v("F"),
            k32.clone(),
            k32.clone() * 34 + 2,
        ] {
            assert!(layers(&d, "F", &none).is_ok(), "{d}");
        }
        assert_eq!(solve_at(&(v("F") * 4), 32), Ok(8));
        assert_eq!(solve_at(&(v("F") + 2), 5), Ok(3));
        assert_eq!(solve_at(&(Dim::c(10) - v("F")), 3), Ok(7));
        assert_eq!(solve_at(&k32, 3), Ok(96));
        assert_eq!(solve_at(&(k32 * 34 + 2), 70), Ok(64));
    }

    #[test]
    fn non_invertible_forms() {
        let cases = [
            (v("F") * v("F"), "multiplies"),
            (v("F") * v("E"), "multiplies"),
            (v("F").rem(&Dim::c(2)), "remainder"),
            (v("F") + v("F").div(&Dim::c(2)), "more than one"),
            (v("D").div(&v("F")), "divides by"),
            (v("F").div(&v("H")), "divides by"),
            (v("F") + v("G"), "nothing binds"),
        ];
        for (d, why) in cases {
            let e = layers(&d, "F", &none).expect_err(&d.to_string());
            assert!(e.reason("F").contains(why), "{d}: {}", e.reason("F"));
        }
        // Known other variables are fine: `F + G` once G is bound.
        assert!(layers(&(v("F") + v("G")), "F", &|x| x == "G").is_ok());
    }

    #[test]
    fn concrete_errors_are_typed() {
        assert_eq!(
            solve_at(&(v("F") * 4), 30),
            Err(InvertError::NotMultiple { value: 30, of: 4 })
        );
        assert_eq!(solve_at(&(v("F") + 2), 1), Ok(-1)); // the range is the caller's
        let big = v("F").div(&Dim::c(1 << 40));
        assert_eq!(solve_at(&big, i64::MAX), Err(InvertError::Overflow));
        let mut s = Sigma::new();
        s.insert("E".into(), 8);
        assert_eq!(solve_value(&(v("E") * v("F")), "F", 64, &s), Ok(8));
    }

    #[test]
    fn symbolic_solution_and_obligations() {
        let ls = layers(&(v("F") * 4 + 2), "F", &none).unwrap();
        let n = v("E") * 8 + 6;
        let s = solve(&ls, &n, &Default::default()).unwrap();
        assert_eq!(s.value, v("E") * 2 + 1);
        assert_eq!(s.multiples, vec![(v("E") * 8 + 4, 4)]);
    }
}
