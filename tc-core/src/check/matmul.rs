//! Matmul (Section 2 §7): rank at least 2, one numeric dtype, batch dims
//! matched one to one and equal contraction dims.

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::ir::Inst;
use crate::pred::{CmpOp, Pred};
use crate::subtype::{dims_equal, DimEq};
use crate::types::{shape_string, TensorType, Type};

use super::diags::{class_diag, unknown_diag};
use super::{Checker, R_MATMUL, R_MATMUL_I32, R_QMATMUL, R_QUANT};

impl Checker<'_> {
    /// §7b `matmul_i32 a b`: §7's rule over two I8 operands, the result
    /// I32 (`matmul (cast[i32] a) (cast[i32] b)`).
    pub(super) fn matmul_i32(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        for i in 0..2 {
            let t = self.tensor_arg(&operands[i], inst, i, R_MATMUL_I32)?;
            if t.dtype != Dtype::I8 {
                self.err(
                    Diagnostic::new(
                        codes::DTYPE_CLASS,
                        R_MATMUL_I32,
                        inst.arg_span(i),
                        format!("`matmul_i32` expects an i8 tensor, found dtype {}", t.dtype),
                    )
                    .help("quantize the operand to i8 first (`cast::<i8>(round(x / scale))`), or use `matmul`"),
                );
                return None;
            }
        }
        match self.matmul(inst, operands)? {
            Type::Tensor(t) => Some(Type::Tensor(TensorType {
                dtype: Dtype::I32,
                ..t
            })),
            other => Some(other),
        }
    }

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
        self.contraction(k, k2, inst, R_MATMUL, || {
            format!(
                "contraction dimension mismatch: expected `{k}` (last dim of the left operand), found `{k2}` (dim {} of the right operand)",
                n - 2
            )
        })?;
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

impl Checker<'_> {
    /// §18 `qmatmul x w`: `x : Tensor[F32, p ++ [M, K]]`, `w` a quantized
    /// `[N, K']` with `Γ ⊨ K = K'`; the result `Tensor[F32, p ++ [M, N]]`.
    /// `w`'s whole blocks along `K'` were proven where its type was formed.
    pub(super) fn qmatmul(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let x = self.tensor_arg(&operands[0], inst, 0, R_QMATMUL)?;
        let w = self.tensor_arg_q(&operands[1], inst, 1, R_QMATMUL)?;
        if x.dtype != Dtype::F32 {
            self.err(class_diag(
                R_QMATMUL,
                inst.arg_span(0),
                "qmatmul",
                "f32",
                x.dtype,
            ));
            return None;
        }
        if !w.dtype.is_quantized() {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_CLASS,
                    R_QMATMUL,
                    inst.arg_span(1),
                    format!("expected a block-quantized weight, found dtype {}", w.dtype),
                )
                .help("for an unquantized weight `[N, K]` write `matmul(x, transpose(w, [1, 0]))`"),
            );
            return None;
        }
        for (i, t, want) in [(0, &x, "at least 2"), (1, &w, "exactly 2")] {
            let bad = if i == 0 { t.rank() < 2 } else { t.rank() != 2 };
            if bad {
                self.err(Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_QMATMUL,
                    inst.arg_span(i),
                    format!(
                        "expected rank {want}, found rank {} ({})",
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
        }
        let (k, k2) = (&x.shape[x.rank() - 1], &w.shape[1]);
        self.contraction(k, k2, inst, R_QMATMUL, || {
            format!(
                "contraction dimension mismatch: expected `{k}` (last dim of x), found `{k2}` (dim 1 of the weight [N, K])"
            )
        })?;
        let mut shape = x.shape[..x.rank() - 1].to_vec();
        shape.push(w.shape[0].clone());
        let mut refs = x.refs.clone();
        refs.extend(w.refs.iter().filter(|p| !x.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: Dtype::F32,
            shape,
            refs,
        }))
    }

    /// The contraction obligation `Γ ⊨ k = k'` of a product (E0301 at the
    /// right operand, with the counterexample).
    fn contraction(
        &mut self,
        k: &Dim,
        k2: &Dim,
        inst: &Inst,
        rule: &'static str,
        msg: impl FnOnce() -> String,
    ) -> Option<()> {
        match dims_equal(&self.ctx, k, k2) {
            Ok(()) => Some(()),
            Err(DimEq::Differs(cex)) => {
                self.err(
                    Diagnostic::new(codes::CONTRACTION, rule, inst.arg_span(1), msg())
                        .with_cex(Some(cex)),
                );
                None
            }
            Err(DimEq::Unknown(goal)) => {
                self.err(unknown_diag(rule, inst.arg_span(1), &goal));
                None
            }
        }
    }

    /// §18 formation: `Tensor[Q, s ++ [K]]` needs `Γ ⊨ K mod b(Q) = 0`,
    /// proven with a counterexample for K when it fails.
    pub(super) fn quantized_formed(&mut self, t: &TensorType, span: SpanId) -> bool {
        let Some((block, _)) = t.dtype.block() else {
            return true;
        };
        let Some(k) = t.shape.last() else {
            self.err(Diagnostic::new(
                codes::QUANT_BLOCK,
                R_QUANT,
                span,
                format!(
                    "a {} tensor has rank at least 1: its blocks run along the last axis",
                    t.dtype
                ),
            ));
            return false;
        };
        let goal = Pred::cmp(k.rem(&Dim::c(block as i64)), CmpOp::Eq, Dim::c(0));
        let ok = self.prove(&goal, codes::QUANT_BLOCK, R_QUANT, span, || {
            format!(
                "the last dim `{k}` of a {} tensor may not be a multiple of its block of {block}",
                t.dtype
            )
        });
        if !ok {
            if let Some(last) = self.diags.last_mut() {
                if last.code == codes::QUANT_BLOCK {
                    last.help = Some(format!(
                        "add `requires({k} % {block} == 0)`, or give the dim as a multiple of {block}"
                    ));
                }
            }
        }
        ok
    }
}
