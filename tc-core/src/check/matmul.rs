//! Matmul (Section 2 §7): rank at least 2, one numeric dtype, batch dims
//! matched one to one and equal contraction dims.

use crate::diag::{codes, Diagnostic};
use crate::ir::Inst;
use crate::subtype::{dims_equal, DimEq};
use crate::types::{shape_string, TensorType, Type};

use super::diags::{class_diag, unknown_diag};
use super::{Checker, R_MATMUL};

impl Checker<'_> {
    pub(super) fn matmul(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let a = self.tensor_arg(&operands[0], inst, 0, R_MATMUL)?;
        let b = self.tensor_arg(&operands[1], inst, 1, R_MATMUL)?;
        for (i, t) in [&a, &b].into_iter().enumerate() {
            if t.rank() < 2 {
                self.err(Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_MATMUL,
                    inst.arg_span(i),
                    format!(
                        "expected rank at least 2, found rank {} ({})",
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
        }
        self.same_dtype(
            (&a, inst.arg_span(0), "the left operand"),
            (&b, inst.arg_span(1), "the right operand"),
            inst,
            R_MATMUL,
        )?;
        if !a.dtype.is_numeric() {
            self.err(class_diag(
                R_MATMUL, inst.span, "matmul", "numeric", a.dtype,
            ));
            return None;
        }
        if a.rank() != b.rank() {
            self.err(
                Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_MATMUL,
                    inst.arg_span(1),
                    format!(
                        "expected rank {} (the left operand is {}), found rank {} ({})",
                        a.rank(),
                        shape_string(&a.shape),
                        b.rank(),
                        shape_string(&b.shape)
                    ),
                )
                .help("batch dims are matched one to one; use `broadcast` to add them"),
            );
            return None;
        }
        let n = a.rank();
        for i in 0..n - 2 {
            match dims_equal(&self.ctx, &a.shape[i], &b.shape[i]) {
                Ok(()) => {}
                Err(DimEq::Differs(cex)) => {
                    self.err(
                        Diagnostic::new(
                            codes::SHAPE_MISMATCH,
                            R_MATMUL,
                            inst.arg_span(1),
                            format!(
                                "batch dimension {i}: expected `{}`, found `{}`",
                                a.shape[i], b.shape[i]
                            ),
                        )
                        .with_cex(Some(cex)),
                    );
                    return None;
                }
                Err(DimEq::Unknown(goal)) => {
                    self.err(unknown_diag(R_MATMUL, inst.arg_span(1), &goal));
                    return None;
                }
            }
        }
        let (k, k2) = (&a.shape[n - 1], &b.shape[n - 2]);
        match dims_equal(&self.ctx, k, k2) {
            Ok(()) => {}
            Err(DimEq::Differs(cex)) => {
                self.err(
                    Diagnostic::new(
                        codes::CONTRACTION,
                        R_MATMUL,
                        inst.arg_span(1),
                        format!(
                            "contraction dimension mismatch: expected `{k}` (last dim of the left operand), found `{k2}` (dim {} of the right operand)",
                            n - 2
                        ),
                    )
                    .with_cex(Some(cex)),
                );
                return None;
            }
            Err(DimEq::Unknown(goal)) => {
                self.err(unknown_diag(R_MATMUL, inst.arg_span(1), &goal));
                return None;
            }
        }
        let mut shape = a.shape[..n - 1].to_vec();
        shape.push(b.shape[n - 1].clone());
        let mut refs = a.refs.clone();
        refs.extend(b.refs.iter().filter(|p| !a.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: a.dtype,
            shape,
            refs,
        }))
    }
}
