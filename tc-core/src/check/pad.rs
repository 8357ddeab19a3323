//! Constant padding (docs/syntax.md §12b, beyond Section 2 in its style):
//! `before` and `after` proven ≥ 0 (with a counterexample otherwise), a fill
//! value of the operand's dtype class, and the axis `before + d + after`.

use crate::diag::codes;
use crate::dim::Dim;
use crate::ir::{Function, Inst, Scalar};
use crate::pred::CmpOp;
use crate::types::Type;

use super::{Checker, R_PAD};

impl Checker<'_> {
    /// `pad[axis, before, after, value] x`.
    pub(super) fn pad(
        &mut self,
        func: &Function,
        (axis, before, after, value): (usize, &Dim, &Dim, &Scalar),
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_PAD)?;
        self.axes_ok(&[axis], t.rank(), inst, R_PAD)?;
        let zero = Dim::c(0);
        for (i, (d, what)) in [(before, "before"), (after, "after")]
            .into_iter()
            .enumerate()
        {
            let span = inst.attr_span(1 + i);
            if !self.dim_wf(d, span) || !self.linear_or_error(d, span) {
                return None;
            }
            let msg = || format!("the padding {what} `{d}` may be negative");
            if !self.prove_cmp(d, CmpOp::Ge, &zero, codes::SLICE_BOUNDS, R_PAD, span, msg) {
                return None;
            }
        }
        self.scalar_matches(func, value, t.dtype, inst.arg_span(1))?;
        let grown = self.dim_op(t.shape[axis].checked_add(before), inst.attr_span(1))?;
        let total = self.dim_op(grown.checked_add(after), inst.attr_span(2))?;
        let mut shape = t.shape.clone();
        shape[axis] = total;
        Some(Type::Tensor(crate::types::TensorType { shape, ..t }))
    }
}
