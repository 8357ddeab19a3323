//! Top-k (docs/syntax.md §8a, beyond Section 2 in its style): a numeric
//! operand, a valid axis, and a count `k` proven within the axis
//! (`0 ≤ k ≤ dᵢ`, and `k ≥ 1` unless its variables opted into empty dims,
//! Section 2 §16) with a counterexample otherwise.

use crate::diag::codes;
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::ir::Inst;
use crate::pred::CmpOp;
use crate::types::{TensorType, Type};

use super::diags::class_diag;
use super::{Checker, R_TOPK};

impl Checker<'_> {
    /// `topk[k, axis] x` (values) or `topk.indices[k, axis] x` (I64).
    pub(super) fn topk(
        &mut self,
        (k, axis, indices): (&Dim, usize, bool),
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_TOPK)?;
        if !t.dtype.is_numeric() {
            self.err(class_diag(R_TOPK, inst.span, "topk", "numeric", t.dtype));
            return None;
        }
        self.axes_ok(&[axis], t.rank(), inst, R_TOPK)?;
        let k_span = inst.attr_span(1);
        if !self.dim_wf(k, k_span) || !self.linear_or_error(k, k_span) {
            return None;
        }
        let d = t.shape[axis].clone();
        let zero_ok = self
            .ctx
            .vars
            .iter()
            .any(|v| v.allow_zero && k.vars().contains(&v.name));
        let least = Dim::c(if zero_ok { 0 } else { 1 });
        let checks = [
            ((k, &least), format!("k `{k}` may be smaller than {least}")),
            (
                (&d, k),
                format!("k `{k}` may exceed the dimension `{d}` of axis {axis}"),
            ),
        ];
        for ((hi, lo), msg) in checks {
            if !self.prove_cmp(hi, CmpOp::Ge, lo, codes::TOPK, R_TOPK, k_span, || msg) {
                return None;
            }
        }
        let mut shape = t.shape.clone();
        shape[axis] = k.clone();
        let dtype = if indices { Dtype::I64 } else { t.dtype };
        Some(Type::Tensor(TensorType {
            dtype,
            shape,
            refs: t.refs,
        }))
    }
}
