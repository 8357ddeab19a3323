//! Dim and predicate formation, the check every dim the checker sees passes
//! through: names bound, Presburger (Section 1 §3–§4), divisors at least 1
//! and divisions by a variable exact (Section 2 §13), and the least admitted
//! size (Section 2 §16). Also the dim helpers the op rules share.

use std::collections::BTreeMap;

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::{Atom, Dim, DimError};
use crate::pred::{CmpOp, Pred};

use super::diags::dim_error_diag;
use super::{Checker, R_DIM, R_DIVISOR, R_DIVVAR, R_FORM};

impl Checker<'_> {
    /// `found` must equal `want` under Γ: otherwise `code` at `span` under
    /// `rule`, saying `what` with both dims and the counterexample (or the
    /// solver's `unknown`). The shape obligations of the op rules that
    /// match dims one by one (sdpa, dq_matmul) go through here.
    pub(super) fn dims_agree(
        &mut self,
        (want, found): (&Dim, &Dim),
        span: SpanId,
        (code, rule): (&'static str, &'static str),
        what: &str,
    ) -> Option<()> {
        match crate::subtype::dims_equal(&self.ctx, want, found) {
            Ok(()) => Some(()),
            Err(crate::subtype::DimEq::Differs(cex)) => {
                self.err(
                    Diagnostic::new(
                        code,
                        rule,
                        span,
                        format!("{what}: expected `{want}`, found `{found}`"),
                    )
                    .with_cex(Some(cex)),
                );
                None
            }
            Err(crate::subtype::DimEq::Unknown(goal)) => {
                self.err(super::diags::unknown_diag(rule, span, &goal));
                None
            }
        }
    }

    /// Names bound, divisors at least 1, Presburger unless an axiom.
    pub(super) fn pred_formed(&mut self, p: &Pred, span: SpanId, is_axiom: bool) {
        for d in p.dims() {
            if self.dim_wf(d, span) && !is_axiom {
                self.linear_or_error(d, span);
            }
        }
    }

    /// The check every dim the checker sees passes through, wherever it
    /// occurs (signature types, refinements, `requires`, axioms, op shapes,
    /// slice bounds, `let` annotations): its names are bound and every `/`
    /// and `%` in it divides by something provably at least 1 under Γ
    /// (Section 2 §13). Z3's `div`/`mod` are total, so without this the
    /// solver would prove obligations about `D % 0` that no σ can meet.
    pub(super) fn dim_wf(&mut self, d: &Dim, span: SpanId) -> bool {
        if !self.names_bound(d, span) {
            return false;
        }
        for atom in d.divisions() {
            if let Atom::Div(_, y) | Atom::Mod(_, y) = &atom {
                if !self.divisor_ok(&atom, y, span) {
                    return false;
                }
            }
        }
        true
    }

    /// The obligation `y ≥ 1` of one quotient or remainder `x / y`, `x % y`.
    fn divisor_ok(&mut self, shown: &Atom, y: &Dim, span: SpanId) -> bool {
        // A module constant divisor is a known value (`D / HEADS`, HEADS = 0).
        let known = y
            .checked_subst(&self.const_map())
            .ok()
            .and_then(|d| d.as_const());
        match known {
            Some(k) if k >= 1 => return true,
            Some(0) => {
                self.err(
                    Diagnostic::new(
                        codes::DIV_BY_ZERO,
                        R_DIVISOR,
                        span,
                        format!("division by zero in a dim: `{shown}`"),
                    )
                    .note(format!(
                        "`{y}` is 0; Section 2 §13 requires every dim divisor to be at least 1"
                    )),
                );
                return false;
            }
            Some(k) => {
                self.err(
                    Diagnostic::new(
                        codes::DIVISOR,
                        R_DIVISOR,
                        span,
                        if y.as_const().is_some() {
                            format!("the divisor of `{shown}` is {k}, which is negative; a dim divisor must be at least 1")
                        } else {
                            format!("the divisor `{y}` of `{shown}` is {k}, which is negative; a dim divisor must be at least 1")
                        },
                    )
                    .help("divide by a positive constant or a shape variable known to be at least 1"),
                );
                return false;
            }
            None => {}
        }
        if let Some(v) = y.as_var() {
            if self
                .ctx
                .vars
                .iter()
                .any(|cv| cv.name == v && !cv.allow_zero)
            {
                // Γ's default `v ≥ 1` (Section 2 §16) discharges it.
                return true;
            }
        }
        // In the signature, prove it under Γ minus the dividing facts.
        let saved = self.divisor_ctx.take();
        let body_ctx = saved.clone().map(|c| std::mem::replace(&mut self.ctx, c));
        let ok = self.prove_cmp(
            y,
            CmpOp::Ge,
            &Dim::c(1),
            codes::DIVISOR,
            R_DIVISOR,
            span,
            || format!("the divisor `{y}` of `{shown}` may be smaller than 1"),
        );
        if let Some(c) = body_ctx {
            self.ctx = c;
        }
        self.divisor_ctx = saved;
        if !ok {
            if let Some(last) = self.diags.last_mut() {
                if last.code == codes::DIVISOR {
                    last.help = Some(format!(
                        "add `requires({y} >= 1)`: a dim divisor must be at least 1 (Section 2 §13)"
                    ));
                }
            }
        }
        ok
    }

    /// Prove `a op b`. When the comparison folds to `false` (its sides differ
    /// by a constant) the solver still gets the unfolded comparison, so the
    /// error carries a concrete counterexample over the variables the user
    /// wrote (`stop S + 1 > S`: fails when S = 1) instead of none.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prove_cmp(
        &mut self,
        a: &Dim,
        op: CmpOp,
        b: &Dim,
        code: &'static str,
        rule: &'static str,
        span: SpanId,
        msg: impl FnOnce() -> String,
    ) -> bool {
        let goal = Pred::cmp(a.clone(), op, b.clone());
        let goal = if goal == Pred::False {
            Pred::Cmp(a.clone(), op, b.clone())
        } else {
            goal
        };
        self.prove(&goal, code, rule, span, msg)
    }

    /// A checked dim operation: its value, or an E0106/E0107 error at `span`.
    pub(super) fn dim_op(&mut self, r: Result<Dim, DimError>, span: SpanId) -> Option<Dim> {
        match r {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(dim_error_diag(&e, span));
                None
            }
        }
    }

    /// Module constants as dims: their values are known, so a product with a
    /// constant factor is linear (`GRID * GRID * C` with `GRID = 14`).
    pub(super) fn const_map(&self) -> BTreeMap<String, Dim> {
        self.ctx
            .consts
            .iter()
            .map(|(n, v)| (n.clone(), Dim::c(*v)))
            .collect()
    }

    pub(super) fn names_bound(&mut self, d: &Dim, span: SpanId) -> bool {
        let unbound = self.ctx.unbound_in(d);
        if unbound.is_empty() {
            return true;
        }
        self.err(
            Diagnostic::new(
                codes::UNBOUND_VAR,
                R_FORM,
                span,
                format!("shape variable `{}` is not bound here", unbound[0]),
            )
            .help("shape variables are bound by the signature's tensor types, by `let n = dim(&x, axis)`, or by a module constant"),
        );
        false
    }

    /// Products of variables are outside Presburger (Section 1 §3); quotients
    /// by a variable are admitted through Section 2 §13.
    pub(super) fn linear_or_error(&mut self, d: &Dim, span: SpanId) -> bool {
        let consts = self.const_map();
        let Some(d) = self.dim_op(d.checked_subst(&consts), span) else {
            return false;
        };
        for (m, _) in d.terms() {
            if m.len() > 1 {
                let prod: Vec<String> = m.iter().map(|a| a.to_string()).collect();
                self.err(
                    Diagnostic::new(
                        codes::NON_LINEAR,
                        R_FORM,
                        span,
                        format!("`{}` multiplies shape variables, which is outside Presburger arithmetic", prod.join(" * ")),
                    )
                    .help(format!(
                        "introduce a variable for the product and state it as an axiom, e.g. `axiom(P == {})`",
                        prod.join(" * ")
                    )),
                );
                return false;
            }
        }
        true
    }

    /// A dim in a type or op attribute: bound, Presburger, quotients by a
    /// variable exact (§13), and at least the least admitted size (§16).
    pub(super) fn dim_formed(&mut self, d: &Dim, span: SpanId) -> bool {
        if !self.dim_wf(d, span) || !self.linear_or_error(d, span) {
            return false;
        }
        for atom in d.variable_divisions() {
            if let Atom::Div(x, y) = &atom {
                let Some(r) = self.dim_op(x.checked_rem(y), span) else {
                    return false;
                };
                let goal = Pred::eq(r, 0);
                let ok = self.prove(&goal, codes::DIV_BY_VAR, R_DIVVAR, span, || {
                    format!("`{atom}` divides by a shape variable, but `{goal}` is not implied")
                });
                if !ok {
                    if let Some(last) = self.diags.last_mut() {
                        last.help = Some(format!(
                            "add `requires({goal})` or the refinement `where {goal}`"
                        ));
                    }
                    return false;
                }
            }
        }
        if d.as_var().is_some() {
            // Variables carry their own default (α ≥ 1 or the opt-in α ≥ 0).
            return true;
        }
        let least = self.least_size(d);
        if let Some(c) = d.as_const() {
            if c < least {
                self.err(
                    Diagnostic::new(codes::BAD_DIM, R_DIM, span, format!("dimension `{c}` is not a valid size here; expected at least {least}"))
                        .note("a zero-sized dim is admitted only through a shape variable opted into `>= 0`"),
                );
                return false;
            }
            return true;
        }
        let goal = Pred::ge(d.clone(), least);
        self.prove_cmp(
            d,
            CmpOp::Ge,
            &Dim::c(least),
            codes::BAD_DIM,
            R_DIM,
            span,
            || format!("dimension `{d}` may be smaller than {least}: `{goal}` is not implied"),
        )
    }

    /// 0 when some variable of `d` is opted into `≥ 0`, else 1 (Section 2 §16).
    pub(super) fn least_size(&self, d: &Dim) -> i64 {
        let vs = d.vars();
        if self
            .ctx
            .vars
            .iter()
            .any(|v| v.allow_zero && vs.contains(&v.name))
        {
            0
        } else {
            1
        }
    }
}
