//! The layout ops other than reshape: transpose (Section 2 §9), explicit
//! broadcast (Section 2 §11), slice and concat (Section 2 §12).

use crate::diag::{codes, Diagnostic};
use crate::dim::Dim;
use crate::ir::{check_perm, Inst};
use crate::pred::{CmpOp, Pred};
use crate::solver::{self, Entailment};
use crate::subtype::SubtypeError;
use crate::types::{shape_string, TensorType, Type};

use super::diags::{sub_diag, unknown_diag};
use super::{Checker, R_BROADCAST, R_CONCAT, R_SLICE, R_TRANSPOSE};

impl Checker<'_> {
    /// §9: `perm` must be a permutation of the operand's axes
    /// ([`check_perm`], the rule the verifier and interpreter share).
    pub(super) fn transpose(
        &mut self,
        perm: &[usize],
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_TRANSPOSE)?;
        if let Err(e) = check_perm(perm, t.rank()) {
            let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
            if let (true, Some(annot)) = (identity, &inst.annot) {
                // `let y: T = x;` re-views `x` through an identity
                // transpose of T's rank. A rank mismatch is malformed
                // IR (the interpreter refuses it too), but the user's
                // mistake is the annotation: say so at its span.
                let found = Type::Tensor(t.clone());
                let e = SubtypeError::Rank {
                    found: t.rank(),
                    expected: perm.len(),
                };
                let what = "the annotated type of this `let`";
                self.err(sub_diag(&e, inst.annot_span, what, &found, annot));
                return None;
            }
            self.err(Diagnostic::new(
                codes::PERMUTATION,
                R_TRANSPOSE,
                inst.attr_span(0),
                e.to_string(),
            ));
            return None;
        }
        let shape = perm.iter().map(|&p| t.shape[p].clone()).collect();
        Some(Type::Tensor(TensorType { shape, ..t }))
    }

    pub(super) fn broadcast(
        &mut self,
        shape: &[Dim],
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_BROADCAST)?;
        let mut ok = true;
        for (i, d) in shape.iter().enumerate() {
            ok &= self.dim_formed(d, inst.attr_span(i));
        }
        if !ok {
            return None;
        }
        if t.rank() > shape.len() {
            self.err(Diagnostic::new(
                codes::RANK_MISMATCH,
                R_BROADCAST,
                inst.attr_span(shape.len()),
                format!(
                    "expected a target of rank at least {} (the operand is {}), found rank {}",
                    t.rank(),
                    shape_string(&t.shape),
                    shape.len()
                ),
            ));
            return None;
        }
        let off = shape.len() - t.rank();
        for (i, d) in t.shape.iter().enumerate() {
            let target = &shape[off + i];
            if d == target || d.as_const() == Some(1) {
                continue;
            }
            let eq = Pred::eq(d.clone(), target.clone());
            let one = Pred::eq(d.clone(), 1);
            match (
                solver::entails(&self.ctx, &eq),
                solver::entails(&self.ctx, &one),
            ) {
                (Entailment::Valid, _) | (_, Entailment::Valid) => {}
                (Entailment::Unknown, _) | (_, Entailment::Unknown) => {
                    self.err(unknown_diag(R_BROADCAST, inst.attr_span(off + i), &eq));
                    return None;
                }
                (Entailment::Invalid(cex), Entailment::Invalid(_)) => {
                    // Show an assignment that breaks both `d = 1` and `d = d'`
                    // (the eq witness alone may have d = 1, where broadcasting
                    // is fine); when none exists, fall back to the eq witness.
                    let either = Pred::or([eq.clone(), one.clone()]);
                    let cex = match solver::entails(&self.ctx, &either) {
                        Entailment::Invalid(both) => both,
                        _ => cex,
                    };
                    self.err(
                        Diagnostic::new(
                            codes::BROADCAST,
                            R_BROADCAST,
                            inst.attr_span(off + i),
                            format!("cannot broadcast dimension {i} of the operand: expected `1` or `{target}`, found `{d}`"),
                        )
                        .with_cex(Some(cex)),
                    );
                    return None;
                }
            }
        }
        Some(Type::Tensor(TensorType {
            shape: shape.to_vec(),
            ..t
        }))
    }

    /// §12 slice `[start, stop)` along `axis`, every `step`-th index
    /// (docs/syntax.md "Strided slice": the axis becomes
    /// `⌈(stop − start) / step⌉`, normalised `(stop − start + step − 1) /
    /// step`, `stop − start` at step 1).
    pub(super) fn slice(
        &mut self,
        axis: usize,
        (start, stop, step): (&Dim, &Dim, usize),
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_SLICE)?;
        let step = self.slice_step(step, inst)?;
        self.axes_ok(&[axis], t.rank(), inst, R_SLICE)?;
        let (s_span, e_span) = (inst.attr_span(1), inst.attr_span(2));
        for (d, sp) in [(start, s_span), (stop, e_span)] {
            if !self.dim_wf(d, sp) || !self.linear_or_error(d, sp) {
                return None;
            }
        }
        let d = t.shape[axis].clone();
        let zero = Dim::c(0);
        let checks = [
            (
                (start, &zero),
                s_span,
                format!("start `{start}` may be negative"),
            ),
            (
                (stop, start),
                e_span,
                format!("stop `{stop}` may be before start `{start}`"),
            ),
            (
                (&d, stop),
                e_span,
                format!("stop `{stop}` may exceed the dimension `{d}` of axis {axis}"),
            ),
        ];
        for ((hi, lo), span, msg) in checks {
            if !self.prove_cmp(
                hi,
                CmpOp::Ge,
                lo,
                codes::SLICE_BOUNDS,
                R_SLICE,
                span,
                || msg,
            ) {
                return None;
            }
        }
        let len = self.dim_op(stop.checked_sub(start), e_span)?;
        let mut vs = len.vars();
        vs.extend(d.vars());
        let least = if self
            .ctx
            .vars
            .iter()
            .any(|v| v.allow_zero && vs.contains(&v.name))
        {
            0
        } else {
            1
        };
        if least == 1 {
            let one = Dim::c(1);
            if !self.prove_cmp(&len, CmpOp::Ge, &one, codes::SLICE_BOUNDS, R_SLICE, e_span, || {
                format!("the slice `{start}..{stop}` may be empty; its length `{len}` must be at least 1")
            }) {
                return None;
            }
        }
        let mut shape = t.shape.clone();
        // ⌈n / k⌉ for n = stop − start ≥ 0, built as `(n − 1) / k + 1`
        // with the floor division of Section 2 §13 (n = 0: −1 / k + 1 = 0).
        // Building `n + k − 1` first would overflow i64 for a constant n
        // and a huge step (E0106 on a slice that exists); the division's
        // normal form is `(n + k − 1) / k` either way (its remainder's
        // constant in [0, k)), which `Dim::eval` evaluates exactly with
        // wide intermediates, so the dim's value, at most the axis, never
        // overflows at a call (Section 1 §2: dims are exact integers).
        shape[axis] = if step == 1 {
            len
        } else {
            let below = self.dim_op(len.checked_sub(&Dim::c(1)), e_span)?;
            let q = self.dim_op(below.checked_div(&Dim::c(step)), inst.attr_span(3))?;
            self.dim_op(q.checked_add(&Dim::c(1)), inst.attr_span(3))?
        };
        Some(Type::Tensor(TensorType { shape, ..t }))
    }

    /// A slice's step: at least 1 (a literal, so no proof is needed) and a
    /// dim coefficient (within i64).
    fn slice_step(&mut self, step: usize, inst: &Inst) -> Option<i64> {
        match i64::try_from(step) {
            Ok(s) if s >= 1 => Some(s),
            _ => {
                self.err(Diagnostic::new(
                    codes::SLICE_BOUNDS,
                    R_SLICE,
                    inst.attr_span(3),
                    format!("the step must be between 1 and {}, found {step}", i64::MAX),
                ));
                None
            }
        }
    }

    pub(super) fn concat(&mut self, axis: usize, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let mut ts = Vec::new();
        for (i, o) in operands.iter().enumerate() {
            ts.push(self.tensor_arg(o, inst, i, R_CONCAT)?);
        }
        let first = ts[0].clone();
        self.axes_ok(&[axis], first.rank(), inst, R_CONCAT)?;
        let mut total = first.shape[axis].clone();
        let mut refs = first.refs.clone();
        for (i, t) in ts.iter().enumerate().skip(1) {
            let nth = format!("operand {i}");
            self.same_dtype(
                (&first, inst.arg_span(0), "the first operand"),
                (t, inst.arg_span(i), &nth),
                inst,
                R_CONCAT,
            )?;
            if t.rank() != first.rank() {
                self.err(Diagnostic::new(
                    codes::CONCAT,
                    R_CONCAT,
                    inst.arg_span(i),
                    format!(
                        "expected rank {} (the first operand is {}), found rank {} ({})",
                        first.rank(),
                        shape_string(&first.shape),
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
            self.same_shape(
                &first,
                t,
                inst.arg_span(i),
                R_CONCAT,
                codes::CONCAT,
                "the first operand",
                Some(axis),
            )?;
            total = self.dim_op(total.checked_add(&t.shape[axis]), inst.arg_span(i))?;
            refs.extend(t.refs.iter().filter(|p| !first.refs.contains(p)).cloned());
        }
        let mut shape = first.shape.clone();
        shape[axis] = total;
        Some(Type::Tensor(TensorType {
            dtype: first.dtype,
            shape,
            refs,
        }))
    }
}
