//! Reshape (Section 2 §10): equal volumes, proven by polynomial identity
//! first (extended by exact quotients, Section 2 §13, by a variable or a
//! constant), then by Z3, else an error naming both volumes with a help
//! that says which fact could make them equal.

use std::collections::BTreeMap;

use crate::diag::{codes, Diagnostic};
use crate::dim::{Atom, Dim, DimError};
use crate::ir::Inst;
use crate::pred::Pred;
use crate::solver::{self, Entailment, Satisfiability};
use crate::types::{checked_volume, shape_string, TensorType, Type};

use super::diags::unknown_diag;
use super::{Checker, R_RESHAPE};

impl Checker<'_> {
    pub(super) fn reshape(
        &mut self,
        shape: &[Dim],
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_RESHAPE)?;
        let mut ok = true;
        for (i, d) in shape.iter().enumerate() {
            ok &= self.dim_formed(d, inst.attr_span(i));
        }
        if !ok {
            return None;
        }
        // Module constants are known values: substitute them so that
        // `B * S * HIDDEN` and `B * S * HEADS * HEAD_DIM` compare as polynomials.
        let consts = self.const_map();
        let vspan = inst.attr_span(shape.len());
        let v1 = checked_volume(&t.shape).and_then(|v| v.checked_subst(&consts));
        let v1 = self.dim_op(v1, inst.arg_span(0))?;
        let v2 = checked_volume(shape).and_then(|v| v.checked_subst(&consts));
        let v2 = self.dim_op(v2, vspan)?;
        // §10 step 1: equal polynomials over the shape atoms prove it; step 2: Z3
        // with Γ's non-linear facts; step 3: an error naming both volumes.
        if v1 != v2
            && !self.volumes_match_modulo_division(&v1, &v2)
            && !self.volumes_match_modulo_const_division(&v1, &v2)
        {
            let goal = Pred::eq(v1.clone(), v2.clone());
            match solver::entails(&self.ctx, &goal) {
                Entailment::Valid => {}
                Entailment::Invalid(cex) => {
                    self.err(
                        Diagnostic::new(
                            codes::RESHAPE_VOLUME,
                            R_RESHAPE,
                            inst.attr_span(shape.len()),
                            format!("cannot prove the volumes equal: expected `{v1}` (the volume of {}), found `{v2}` (the volume of {})", shape_string(&t.shape), shape_string(shape)),
                        )
                        .with_cex(Some(cex))
                        .help(self.volume_help(&v1, &v2)),
                    );
                    return None;
                }
                Entailment::Unknown => {
                    self.err(unknown_diag(R_RESHAPE, inst.attr_span(shape.len()), &goal));
                    return None;
                }
            }
        }
        Some(Type::Tensor(TensorType {
            shape: shape.to_vec(),
            ..t
        }))
    }

    /// Help for volumes `v1` (operand) and `v2` (target) that differ: an
    /// axiom or `requires` can only help when `v1 == v2` can hold at all
    /// (`768 ≠ 384` cannot be fixed by an axiom: change the shape).
    fn volume_help(&self, v1: &Dim, v2: &Dim) -> String {
        if let (Some(a), Some(b)) = (v1.as_const(), v2.as_const()) {
            return format!(
                "the volumes are the constants {a} and {b}, and no `requires` or axiom can make constants equal: change the target shape so that its dims multiply to {a}"
            );
        }
        let eq = Pred::eq(v1.clone(), v2.clone());
        if matches!(
            solver::satisfiable(&self.ctx, std::slice::from_ref(&eq)),
            Satisfiability::Unsat
        ) {
            return format!(
                "`{v1} == {v2}` holds for no sizes the signature admits, so no `requires` or axiom can fix it: change the target shape so that its volume is `{v1}`"
            );
        }
        // A quotient that is not known exact rounds down (Section 2 §13):
        // its divisibility is the fact to state, not the volumes' equality.
        let mut inexact: Vec<String> = Vec::new();
        for atom in v1.divisions().into_iter().chain(v2.divisions()) {
            let Atom::Div(x, y) = &atom else { continue };
            let Ok(r) = x.checked_rem(y) else { continue };
            let fact = Pred::eq(r, 0);
            let known = self.ctx.facts.contains(&fact)
                || matches!(solver::entails(&self.ctx, &fact), Entailment::Valid);
            if !known && !inexact.contains(&fact.to_string()) {
                inexact.push(fact.to_string());
            }
        }
        if !inexact.is_empty() {
            return format!(
                "`/` in a dim rounds down: if the division is exact by design, add `requires({})`; otherwise change the target shape",
                inexact.join(", ")
            );
        }
        let linear = [v1, v2]
            .iter()
            .all(|d| d.terms().all(|(m, _)| m.len() <= 1));
        if linear {
            format!("if the volumes are equal by design, add `requires({eq})`; otherwise change the target shape")
        } else {
            format!("if the volumes are equal by design, state it as an axiom, `axiom({eq})` (re-checked at every call); otherwise change the target shape")
        }
    }

    /// §10 step 1 extended by §13: with `x % y == 0` in Γ, `(x / y) * y` is `x`.
    /// Rewrites such products in both volumes and compares the polynomials.
    fn volumes_match_modulo_division(&self, v1: &Dim, v2: &Dim) -> bool {
        let Ok(diff) = v1.checked_sub(v2) else {
            return false;
        };
        let mut map = BTreeMap::new();
        let mut divs = diff.variable_divisions();
        for d in v1
            .variable_divisions()
            .into_iter()
            .chain(v2.variable_divisions())
        {
            if !divs.contains(&d) {
                divs.push(d);
            }
        }
        for atom in &divs {
            if let Atom::Div(x, y) = atom {
                let Ok(r) = x.checked_rem(y) else { continue };
                let fact = Pred::eq(r, 0);
                if self.ctx.facts.contains(&fact) || self.ctx.axioms.contains(&fact) {
                    if let Some(v) = y.as_var() {
                        map.insert(atom.clone(), (v.to_string(), (**x).clone()));
                    }
                }
            }
        }
        if map.is_empty() {
            return false;
        }
        // Substitute y := x / q for each justified quotient q = x / y by treating
        // q·y as x: expand each monomial, cancelling a y against a q.
        let rewrite = |d: &Dim| -> Result<Dim, DimError> {
            let mut out = Dim::c(0);
            for (m, c) in d.terms() {
                let mut atoms: Vec<Atom> = m.to_vec();
                let mut extra = Dim::c(1);
                loop {
                    let hit = atoms.iter().position(|a| {
                        map.get(a)
                            .is_some_and(|(y, _)| atoms.contains(&Atom::Var(y.clone())))
                    });
                    let Some(qi) = hit else { break };
                    let q = atoms.remove(qi);
                    let (y, x) = &map[&q];
                    if let Some(yi) = atoms.iter().position(|a| *a == Atom::Var(y.clone())) {
                        atoms.remove(yi);
                    }
                    extra = extra.checked_mul(x)?;
                }
                let mut term = extra.checked_scale(c)?;
                for a in atoms {
                    term = term.checked_mul(&atom_dim(a)?)?;
                }
                out = out.checked_add(&term)?;
            }
            Ok(out)
        };
        matches!((rewrite(v1), rewrite(v2)), (Ok(a), Ok(b)) if a == b)
    }

    /// §10 step 1 extended to constant divisors (§13): when Γ proves
    /// `x % k == 0`, the quotient `q = x / k` satisfies `k·q = x`, so after
    /// scaling both volumes by `k^p` (p the highest power of q) every
    /// monomial `c·q^j·m` becomes `(c·k^p / k^j)·x^j·m`. Equal polynomials then
    /// prove the volumes equal (scaling by `k^p ≠ 0` is injective); this keeps
    /// `[E, 2, E / 2]` from `[E, E]` out of non-linear Z3 queries.
    fn volumes_match_modulo_const_division(&mut self, v1: &Dim, v2: &Dim) -> bool {
        let mut atoms: Vec<(Atom, Dim, i64)> = Vec::new();
        for d in [v1, v2] {
            for (m, _) in d.terms() {
                for a in m {
                    if let Atom::Div(x, y) = a {
                        if let Some(k) = y.as_const().filter(|k| *k >= 2) {
                            if !atoms.iter().any(|(b, ..)| b == a) {
                                atoms.push((a.clone(), (**x).clone(), k));
                            }
                        }
                    }
                }
            }
        }
        let (mut a, mut b) = (v1.clone(), v2.clone());
        let mut changed = false;
        for (q, x, k) in atoms {
            let Ok(r) = x.checked_rem(&Dim::c(k)) else {
                continue;
            };
            if !matches!(
                solver::entails(&self.ctx, &Pred::eq(r, 0)),
                Entailment::Valid
            ) {
                continue;
            }
            match (
                cancel_quotient(&a, &q, &x, k),
                cancel_quotient(&b, &q, &x, k),
            ) {
                (Ok(na), Ok(nb)) => {
                    let p = power_of(&a, &q).max(power_of(&b, &q));
                    let (pa, pb) = (power_of(&a, &q), power_of(&b, &q));
                    // Bring both sides to the same scale k^p.
                    let sa = k
                        .checked_pow((p - pa) as u32)
                        .and_then(|s| na.checked_scale(s).ok());
                    let sb = k
                        .checked_pow((p - pb) as u32)
                        .and_then(|s| nb.checked_scale(s).ok());
                    let (Some(sa), Some(sb)) = (sa, sb) else {
                        return false;
                    };
                    a = sa;
                    b = sb;
                    changed = true;
                }
                _ => return false,
            }
        }
        changed && a == b
    }
}

fn atom_dim(a: Atom) -> Result<Dim, DimError> {
    match a {
        Atom::Var(v) => Ok(Dim::var(v)),
        Atom::Div(x, y) => x.checked_div(&y),
        Atom::Mod(x, y) => x.checked_rem(&y),
    }
}

/// The highest power of atom `q` in any monomial of `d`.
fn power_of(d: &Dim, q: &Atom) -> usize {
    d.terms()
        .map(|(m, _)| m.iter().filter(|a| *a == q).count())
        .max()
        .unwrap_or(0)
}

/// `k^p · d` with every `q^j` (q = x / k) replaced by `x^j / k^j`, p the
/// highest power of q in `d`: exact, since each coefficient is first scaled
/// by `k^p`. Overflow is an error (the caller then falls back to Z3).
fn cancel_quotient(d: &Dim, q: &Atom, x: &Dim, k: i64) -> Result<Dim, DimError> {
    let p = power_of(d, q) as u32;
    let over = || DimError::Overflow(format!("{d}"));
    let kp = k.checked_pow(p).ok_or_else(over)?;
    let mut out = Dim::c(0);
    for (m, c) in d.terms() {
        let j = m.iter().filter(|a| *a == q).count() as u32;
        let coeff = c.checked_mul(kp).ok_or_else(over)? / k.checked_pow(j).ok_or_else(over)?;
        let mut term = Dim::c(coeff);
        for a in m.iter().filter(|a| *a != q) {
            term = term.checked_mul(&atom_dim(a.clone())?)?;
        }
        for _ in 0..j {
            term = term.checked_mul(x)?;
        }
        out = out.checked_add(&term)?;
    }
    Ok(out)
}
