//! Rotary position embedding (docs/syntax.md §12e; Section 2 §18 admits
//! RoPE as a core op): the tables share the rotated tensor's dtype and
//! leading shape, their last dim is half the rotated axis (`Γ ⊨ D = 2·H`,
//! which makes `D` even), and the result keeps `x`'s type.

use crate::diag::{codes, Diagnostic};
use crate::dim::Dim;
use crate::ir::{Inst, RopeLayout};
use crate::pred::CmpOp;
use crate::types::{shape_string, Type};

use super::diags::class_diag;
use super::{Checker, R_ROPE};

impl Checker<'_> {
    /// `rope[layout] x, cos, sin`.
    pub(super) fn rope(
        &mut self,
        layout: RopeLayout,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let x = self.tensor_arg(&operands[0], inst, 0, R_ROPE)?;
        let cos = self.tensor_arg(&operands[1], inst, 1, R_ROPE)?;
        let sin = self.tensor_arg(&operands[2], inst, 2, R_ROPE)?;
        if !x.dtype.is_float() {
            self.err(class_diag(
                R_ROPE,
                inst.arg_span(0),
                layout.name(),
                "float",
                x.dtype,
            ));
            return None;
        }
        if x.rank() == 0 {
            self.err(Diagnostic::new(
                codes::RANK_MISMATCH,
                R_ROPE,
                inst.arg_span(0),
                format!(
                    "expected rank at least 1 (the rotated axis is the last), found rank 0 ({})",
                    shape_string(&x.shape)
                ),
            ));
            return None;
        }
        let last = x.rank() - 1;
        for (i, t, what) in [(1, &cos, "the cosine table"), (2, &sin, "the sine table")] {
            let rotated = (&x, inst.arg_span(0), "the rotated tensor");
            self.same_dtype(rotated, (t, inst.arg_span(i), what), inst, R_ROPE)?;
        }
        self.same_shape(
            &x,
            &cos,
            inst.arg_span(1),
            R_ROPE,
            codes::SHAPE_MISMATCH,
            "the rotated tensor",
            Some(last),
        )?;
        self.same_shape(
            &cos,
            &sin,
            inst.arg_span(2),
            R_ROPE,
            codes::SHAPE_MISMATCH,
            "the cosine table",
            None,
        )?;
        let (d, h) = (&x.shape[last], &cos.shape[last]);
        let twice = self.dim_op(h.checked_mul(&Dim::c(2)), inst.arg_span(1))?;
        let msg = || {
            format!("the rotated axis `{d}` may not be twice the tables' last dim `{h}` (one angle per pair)")
        };
        if !self.prove_cmp(
            d,
            CmpOp::Eq,
            &twice,
            codes::ROPE,
            R_ROPE,
            inst.arg_span(1),
            msg,
        ) {
            return None;
        }
        Some(Type::Tensor(x))
    }
}
