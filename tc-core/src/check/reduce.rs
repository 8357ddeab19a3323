//! Reduce and argmax/argmin (Section 2 §8, with the keepdims variant):
//! admissible dtype, valid distinct axes, and a provably non-empty axis for
//! the reductions that have no value on an empty one (Section 2 §16).

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::ir::{check_axes, Inst, ReduceOp};
use crate::pred::Pred;
use crate::types::{TensorType, Type};

use super::diags::class_diag;
use super::{Checker, R_ARG, R_CUMSUM, R_REDUCE};

impl Checker<'_> {
    /// §8 reduce: an admissible dtype, valid distinct axes, and a non-empty
    /// reduced set for max/min/mean.
    pub(super) fn reduce_op(
        &mut self,
        op: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_REDUCE)?;
        if !op.admits(t.dtype) {
            self.err(class_diag(
                R_REDUCE,
                inst.span,
                op.name(),
                op.class_name(),
                t.dtype,
            ));
            return None;
        }
        self.axes_ok(axes, t.rank(), inst, R_REDUCE)?;
        if op.needs_nonempty() {
            for &a in axes {
                let at = inst.attr_span(0);
                self.nonempty_axis(&t.shape[a], a, at, R_REDUCE, op.name())?;
            }
        }
        Some(Type::Tensor(reduced(&t, axes, keepdims, t.dtype)))
    }

    /// argmax / argmin: a numeric operand, a valid non-empty axis; I64.
    pub(super) fn arg_reduce_op(
        &mut self,
        max: bool,
        axis: usize,
        keepdims: bool,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_ARG)?;
        let name = if max { "argmax" } else { "argmin" };
        if !t.dtype.is_numeric() {
            self.err(class_diag(R_ARG, inst.span, name, "numeric", t.dtype));
            return None;
        }
        self.axes_ok(&[axis], t.rank(), inst, R_ARG)?;
        self.nonempty_axis(&t.shape[axis], axis, inst.attr_span(0), R_ARG, name)?;
        Some(Type::Tensor(reduced(&t, &[axis], keepdims, Dtype::I64)))
    }

    /// §8b cumsum: a numeric operand and a valid axis; the type is the
    /// operand's (an empty axis is an empty result, nothing to prove).
    pub(super) fn cumsum_op(
        &mut self,
        axis: usize,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_CUMSUM)?;
        if !t.dtype.is_numeric() {
            self.err(class_diag(
                R_CUMSUM, inst.span, "cumsum", "numeric", t.dtype,
            ));
            return None;
        }
        self.axes_ok(&[axis], t.rank(), inst, R_CUMSUM)?;
        Some(Type::Tensor(t))
    }

    pub(super) fn axes_ok(
        &mut self,
        axes: &[usize],
        rank: usize,
        inst: &Inst,
        rule: &'static str,
    ) -> Option<()> {
        match check_axes(axes, rank) {
            Ok(()) => Some(()),
            Err(e) => {
                self.err(Diagnostic::new(
                    codes::AXIS,
                    rule,
                    inst.attr_span(0),
                    e.to_string(),
                ));
                None
            }
        }
    }

    pub(super) fn nonempty_axis(
        &mut self,
        d: &Dim,
        axis: usize,
        span: SpanId,
        rule: &'static str,
        op: &str,
    ) -> Option<()> {
        let goal = Pred::ge(d.clone(), 1);
        self.prove(&goal, codes::EMPTY_REDUCTION, rule, span, || {
            format!("`{op}` over axis {axis} needs a non-empty axis, but `{d}` may be 0")
        })
        .then_some(())
        .or_else(|| {
            // `max`, `min`, `argmax`, `argmin` and `mean` have no value on an
            // empty axis, and `sum` computes something else: the fix is
            // the fact that the axis is non-empty, stated where Γ gets it.
            let help = self.nonempty_help(d);
            if let Some(last) = self.diags.last_mut() {
                if last.code == codes::EMPTY_REDUCTION {
                    last.help = Some(help);
                }
            }
            None
        })
    }

    /// How to make the axis `d` provably non-empty: a variable opted into
    /// `>= 0` loses the opt-in or gains `requires(V >= 1)`; a compound dim
    /// gets `requires(d >= 1)` over the signature's variables.
    fn nonempty_help(&self, d: &Dim) -> String {
        let opted = d.as_var().filter(|v| {
            self.ctx
                .vars
                .iter()
                .any(|cv| cv.name == *v && cv.allow_zero)
        });
        match opted {
            Some(v) => format!(
                "`{v}` is opted into 0 (`{v} >= 0`): add `requires({v} >= 1)`, or drop the opt-in so that the default `{v} >= 1` holds"
            ),
            None => format!("add `requires({d} >= 1)` so that the axis is never empty"),
        }
    }
}

fn reduced(t: &TensorType, axes: &[usize], keepdims: bool, dtype: Dtype) -> TensorType {
    let shape = crate::types::reduced_shape(&t.shape, axes, keepdims);
    TensorType {
        dtype,
        shape,
        refs: t.refs.clone(),
    }
}
