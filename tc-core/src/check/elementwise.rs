//! Elementwise binary ops and select (Section 2 §6), with the two checks
//! they share with matmul and concat: operands of one dtype (no promotion,
//! Section 3 §9) and dimension-wise equal shapes (Section 2 §2, §11).

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::ir::{BinaryOp, Inst};
use crate::subtype::{dims_equal, DimEq};
use crate::types::{shape_string, TensorType, Type};

use super::diags::{cast_help, class_diag, unknown_diag};
use super::{Checker, R_BINARY, R_SELECT};

impl Checker<'_> {
    /// Two operands must share a dtype (no promotion, Section 3 §9). The
    /// error sits at the operand to cast, and its help casts it toward the
    /// dtype the context expects ([`Self::wanted_dtype`]), else toward `a`'s:
    /// with `a: bf16`, `b: f32` in a fn returning f32, cast `a`, not `b`.
    pub(super) fn same_dtype(
        &mut self,
        a: (&TensorType, SpanId, &str),
        b: (&TensorType, SpanId, &str),
        inst: &Inst,
        rule: &'static str,
    ) -> Option<()> {
        if a.0.dtype == b.0.dtype {
            return Some(());
        }
        let wanted = self.wanted_dtype(inst);
        let (to, from) = if wanted == Some(b.0.dtype) {
            (b, a)
        } else {
            (a, b)
        };
        let why = match wanted {
            Some(w) if w == to.0.dtype && inst.annot.is_some() => ", as the `let` annotation says",
            Some(w) if w == to.0.dtype => ", the fn's declared return dtype",
            _ => "",
        };
        self.err(
            Diagnostic::new(
                codes::DTYPE_MISMATCH,
                rule,
                from.1,
                format!(
                    "expected dtype {} ({}'s{why}), found {} ({})",
                    to.0.dtype, to.2, from.0.dtype, from.2
                ),
            )
            .help(cast_help(
                from.0.dtype,
                to.0.dtype,
                &format!("{} operand", from.0.dtype),
            )),
        );
        None
    }

    /// The dtype the value of `inst` is expected to have: its `let`
    /// annotation's, else the fn's declared return dtype (Section 3 §7:
    /// checking is bidirectional; these are the boundaries it flows to).
    fn wanted_dtype(&self, inst: &Inst) -> Option<Dtype> {
        match (&inst.annot, &self.ret) {
            (Some(Type::Tensor(t)), _) => Some(t.dtype),
            (_, Some(Type::Tensor(t))) => Some(t.dtype),
            _ => None,
        }
    }

    /// Dimension-wise `≡` with a rank check; `first` names the reference operand.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn same_shape(
        &mut self,
        a: &TensorType,
        b: &TensorType,
        span: SpanId,
        rule: &'static str,
        code: &'static str,
        first: &str,
        skip_axis: Option<usize>,
    ) -> Option<()> {
        if a.rank() != b.rank() {
            self.err(
                Diagnostic::new(
                    codes::RANK_MISMATCH,
                    rule,
                    span,
                    format!("expected rank {} ({first} is {}), found rank {} ({})", a.rank(), shape_string(&a.shape), b.rank(), shape_string(&b.shape)),
                )
                .help("no implicit broadcasting (Section 2 §11): use `broadcast(x, [..])` or `reshape`"),
            );
            return None;
        }
        for (axis, (da, db)) in a.shape.iter().zip(&b.shape).enumerate() {
            if Some(axis) == skip_axis {
                continue;
            }
            match dims_equal(&self.ctx, da, db) {
                Ok(()) => {}
                Err(DimEq::Differs(cex)) => {
                    let mut d = Diagnostic::new(
                        code,
                        rule,
                        span,
                        format!("dimension {axis}: expected `{da}` ({first}), found `{db}`"),
                    )
                    .with_cex(Some(cex));
                    if code == codes::SHAPE_MISMATCH {
                        d = d.help(self.dim_mismatch_help(da, db));
                    }
                    self.err(d);
                    return None;
                }
                Err(DimEq::Unknown(goal)) => {
                    self.err(unknown_diag(rule, span, &goal));
                    return None;
                }
            }
        }
        Some(())
    }

    /// Broadcasting is the fix only when one side may be 1; two different
    /// constants (`768` vs `384`) mean one of the shapes is wrong.
    fn dim_mismatch_help(&self, da: &Dim, db: &Dim) -> String {
        let consts = self.const_map();
        let value = |d: &Dim| d.checked_subst(&consts).ok().and_then(|d| d.as_const());
        match (value(da), value(db)) {
            (Some(a), Some(b)) if a != 1 && b != 1 => format!(
                "the dims are the constants {a} and {b}, which differ: change one of the shapes (`broadcast` only stretches a dim of size 1)"
            ),
            _ => "shapes must be provably equal: no implicit broadcasting (Section 2 §11); use `broadcast` explicitly".to_string(),
        }
    }

    pub(super) fn binary(&mut self, op: BinaryOp, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let a = self.tensor_arg(&operands[0], inst, 0, R_BINARY)?;
        let b = self.tensor_arg(&operands[1], inst, 1, R_BINARY)?;
        self.same_dtype(
            (&a, inst.arg_span(0), "the left operand"),
            (&b, inst.arg_span(1), "the right operand"),
            inst,
            R_BINARY,
        )?;
        if !op.admits(a.dtype) {
            self.err(class_diag(
                R_BINARY,
                inst.span,
                op.name(),
                op.class_name(),
                a.dtype,
            ));
            return None;
        }
        self.same_shape(
            &a,
            &b,
            inst.arg_span(1),
            R_BINARY,
            codes::SHAPE_MISMATCH,
            "the left operand",
            None,
        )?;
        let mut refs = a.refs.clone();
        refs.extend(b.refs.iter().filter(|p| !a.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: op.result_dtype(a.dtype),
            shape: a.shape,
            refs,
        }))
    }

    pub(super) fn select(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let c = self.tensor_arg(&operands[0], inst, 0, R_SELECT)?;
        let a = self.tensor_arg(&operands[1], inst, 1, R_SELECT)?;
        let b = self.tensor_arg(&operands[2], inst, 2, R_SELECT)?;
        if c.dtype != Dtype::Bool {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_MISMATCH,
                    R_SELECT,
                    inst.arg_span(0),
                    format!("expected a bool condition, found dtype {}", c.dtype),
                )
                .help("compare to get a bool tensor, e.g. `gt(x, 0.0)`"),
            );
            return None;
        }
        self.same_dtype(
            (&a, inst.arg_span(1), "the `then` branch"),
            (&b, inst.arg_span(2), "the `else` branch"),
            inst,
            R_SELECT,
        )?;
        self.same_shape(
            &a,
            &c,
            inst.arg_span(0),
            R_SELECT,
            codes::SHAPE_MISMATCH,
            "the `then` branch",
            None,
        )?;
        self.same_shape(
            &a,
            &b,
            inst.arg_span(2),
            R_SELECT,
            codes::SHAPE_MISMATCH,
            "the `then` branch",
            None,
        )?;
        let mut refs = a.refs.clone();
        for p in b.refs.iter().chain(&c.refs) {
            if !refs.contains(p) {
                refs.push(p.clone());
            }
        }
        Some(Type::Tensor(TensorType { refs, ..a }))
    }
}
