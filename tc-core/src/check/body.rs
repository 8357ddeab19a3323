//! The body walk of the bidirectional checker (Section 3 §7): each
//! instruction synthesises its type through its op's rule, annotated lets and
//! the return are check boundaries, `let n = dim(&x, axis)` binds a shape
//! variable (Section 1 §6). Also the operand checks every rule starts with
//! (a tensor operand; a scalar of the tensor's dtype, Section 2 §4, §6).

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::ir::{check_axes, Function, Inst, Op, Scalar, ValueMap};
use crate::pred::Pred;
use crate::subtype::subtype;
use crate::types::{TensorType, Type};

use super::diags::{class_diag, sub_diag};
use super::{Checker, R_BINARY, R_BIND, R_CAST, R_LITERAL, R_UNARY};

impl Checker<'_> {
    pub(super) fn check_body(&mut self, func: &Function) -> ValueMap<Option<Type>> {
        self.ret = Some(func.sig.ret.clone());
        let mut types: ValueMap<Option<Type>> =
            func.sig.params.iter().map(|p| Some(p.ty.clone())).collect();
        for (i, inst) in func.body.iter().enumerate() {
            for b in func.dim_bindings.iter().filter(|b| b.before == i) {
                self.bind_dim(b, &types);
            }
            let synth = self.synth(func, inst, &types);
            let ty = match (synth, &inst.annot) {
                (Some(t), Some(annot)) => {
                    // Check boundary (Section 3 §7): the annotation is checked by
                    // subsumption and becomes the value's type.
                    let before = self.diags.len();
                    if self.annot_formed(annot, inst.annot_span) {
                        self.check_sub(
                            &t,
                            annot,
                            inst.annot_span,
                            "the annotated type of this `let`",
                        );
                    }
                    // A failed boundary poisons the value: one error, no cascade.
                    (self.diags.len() == before).then(|| annot.clone())
                }
                (t, _) => t,
            };
            types.push(ty);
        }
        for b in func
            .dim_bindings
            .iter()
            .filter(|b| b.before >= func.body.len())
        {
            self.bind_dim(b, &types);
        }
        if let Some(Some(t)) = types.get(func.ret) {
            let t = t.clone();
            self.check_sub(&t, &func.sig.ret, func.ret_span, "the declared return type");
        }
        types
    }

    fn annot_formed(&mut self, t: &Type, span: SpanId) -> bool {
        match t {
            Type::Tensor(tt) => {
                let mut ok = true;
                for d in &tt.shape {
                    ok &= self.dim_formed(d, span);
                }
                for r in &tt.refs {
                    ok &= self.names_bound_pred(r, span);
                }
                ok
            }
            _ => true,
        }
    }

    fn names_bound_pred(&mut self, p: &Pred, span: SpanId) -> bool {
        p.dims().into_iter().all(|d| self.dim_wf(d, span))
    }

    fn check_sub(&mut self, found: &Type, expected: &Type, span: SpanId, what: &str) {
        if let Err(e) = subtype(&self.ctx, found, expected) {
            self.err(sub_diag(&e, span, what, found, expected));
        }
    }

    fn bind_dim(&mut self, b: &crate::ir::DimBinding, types: &ValueMap<Option<Type>>) {
        let Some(Some(t)) = types.get(b.of) else {
            return;
        };
        let Type::Tensor(t) = t else {
            self.err(Diagnostic::new(
                codes::KIND_MISMATCH,
                R_BIND,
                b.span,
                format!("`dim` needs a tensor, found a {}", t.kind_name()),
            ));
            return;
        };
        let Some(d) = t.shape.get(b.axis) else {
            self.err(Diagnostic::new(
                codes::AXIS,
                R_BIND,
                b.span,
                format!(
                    "axis {} is out of range for a tensor of rank {}",
                    b.axis,
                    t.rank()
                ),
            ));
            return;
        };
        if self.ctx.is_bound(&b.name) {
            self.err(Diagnostic::new(
                codes::UNBOUND_VAR,
                R_BIND,
                b.span,
                format!(
                    "`{}` is already a shape variable or constant; pick a fresh name",
                    b.name
                ),
            ));
            return;
        }
        let d = d.clone();
        let least = self.least_size(&d);
        if least == 0 {
            self.ctx.declare_allow_zero(&b.name);
        } else {
            self.ctx.declare(&b.name);
        }
        self.ctx.assume(Pred::eq(Dim::var(b.name.clone()), d));
    }

    /// Synthesise the type of one instruction (Section 3 §7: internal nodes synthesise).
    fn synth(
        &mut self,
        func: &Function,
        inst: &Inst,
        types: &ValueMap<Option<Type>>,
    ) -> Option<Type> {
        // Poisoned operands: their error was already reported.
        let mut operands = Vec::new();
        for v in inst.op.operands() {
            operands.push(types.get(v)?.clone()?);
        }
        match &inst.op {
            Op::Unary(op, _) => {
                let t = self.tensor_arg(&operands[0], inst, 0, R_UNARY)?;
                if !op.admits(t.dtype) {
                    self.err(class_diag(
                        R_UNARY,
                        inst.span,
                        op.name(),
                        op.class_name(),
                        t.dtype,
                    ));
                    return None;
                }
                Some(Type::Tensor(t))
            }
            Op::Cast(dt, _) => self.cast(*dt, inst, &operands),
            Op::Binary(op, _, _) => self.binary(*op, inst, &operands),
            Op::ScalarBinary { op, s, .. } => {
                let t = self.tensor_arg(&operands[0], inst, 0, R_BINARY)?;
                if !op.admits(t.dtype) {
                    self.err(class_diag(
                        R_BINARY,
                        inst.span,
                        op.name(),
                        op.class_name(),
                        t.dtype,
                    ));
                    return None;
                }
                self.scalar_matches(func, s, t.dtype, inst.arg_span(1))?;
                Some(Type::Tensor(TensorType {
                    dtype: op.result_dtype(t.dtype),
                    ..t
                }))
            }
            Op::Select(..) => self.select(inst, &operands),
            Op::Matmul(..) => self.matmul(inst, &operands),
            Op::MatmulI32(..) => self.matmul_i32(inst, &operands),
            Op::DqMatmul { .. } => self.dq_matmul(inst, &operands),
            Op::QMatmul(..) => self.qmatmul(inst, &operands),
            Op::Reduce {
                op, axes, keepdims, ..
            } => self.reduce_op(*op, axes, *keepdims, inst, &operands),
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                ..
            } => self.arg_reduce_op(*max, *axis, *keepdims, inst, &operands),
            Op::Transpose(perm, _) => self.transpose(perm, inst, &operands),
            Op::Reshape(shape, _) => self.reshape(shape, inst, &operands),
            Op::Broadcast(shape, _) => self.broadcast(shape, inst, &operands),
            Op::Slice {
                axis,
                start,
                stop,
                step,
                ..
            } => self.slice(*axis, (start, stop, *step), inst, &operands),
            Op::Concat(axis, _) => self.concat(*axis, inst, &operands),
            Op::Gather { axis, .. } => self.gather(*axis, inst, &operands),
            Op::TopK {
                k, axis, indices, ..
            } => self.topk((k, *axis, *indices), inst, &operands),
            Op::CumSum { axis, .. } => self.cumsum_op(*axis, inst, &operands),
            Op::Pad {
                axis,
                before,
                after,
                value,
                ..
            } => self.pad(func, (*axis, before, after, value), inst, &operands),
            Op::Rope { layout, .. } => self.rope(*layout, inst, &operands),
            Op::Sdpa { .. } => self.sdpa(inst, &operands),
            Op::Conv { window, groups, .. } => self.conv((window, *groups), inst, &operands),
            Op::Pool {
                kind,
                kernel,
                window,
                ..
            } => self.pool((*kind, kernel, window), inst, &operands),
            Op::Fill(dt, shape, s) => {
                let ok = self.shape_formed(shape, inst);
                self.scalar_matches(func, s, *dt, inst.arg_span(0))?;
                ok.then(|| Type::tensor(*dt, shape.clone()))
            }
            Op::Iota(dt, shape, axis) => {
                let ok = self.shape_formed(shape, inst);
                if !dt.is_numeric() {
                    self.err(class_diag(R_LITERAL, inst.span, "iota", "numeric", *dt));
                    return None;
                }
                if let Err(e) = check_axes(&[*axis], shape.len()) {
                    let span = inst.attr_span(shape.len());
                    self.err(Diagnostic::new(codes::AXIS, R_LITERAL, span, e.to_string()));
                    return None;
                }
                ok.then(|| Type::tensor(*dt, shape.clone()))
            }
            Op::Call(name, _) => self.call(name, inst, &operands),
            // A call's dim argument: formed like any dim in a body.
            Op::Dim(d) => self
                .dim_formed(d, inst.arg_span(0))
                .then(|| Type::Dim(d.clone())),
        }
    }

    /// Every dim of a creation op's shape formed (each reported at its
    /// attribute).
    fn shape_formed(&mut self, shape: &[Dim], inst: &Inst) -> bool {
        let mut ok = true;
        for (i, d) in shape.iter().enumerate() {
            ok &= self.dim_formed(d, inst.attr_span(i));
        }
        ok
    }

    /// Section 2 §5 cast; from a quantized format only to a float (its
    /// dequantization, §18), and never into one.
    fn cast(&mut self, dt: Dtype, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let t = self.tensor_arg_q(&operands[0], inst, 0, R_CAST)?;
        if dt.is_quantized() || (t.dtype.is_quantized() && !dt.is_float()) {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_CLASS,
                    R_CAST,
                    inst.span,
                    format!("cannot cast {} to {dt}", t.dtype),
                )
                .help("a quantized tensor dequantizes to a float (`dequantize(w)` is F32); nothing casts into a quantized format"),
            );
            return None;
        }
        Some(Type::Tensor(TensorType { dtype: dt, ..t }))
    }

    pub(super) fn tensor_arg(
        &mut self,
        t: &Type,
        inst: &Inst,
        i: usize,
        rule: &'static str,
    ) -> Option<TensorType> {
        let t = self.tensor_arg_q(t, inst, i, rule)?;
        if t.dtype.is_quantized() && !inst.op.admits_quantized() {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_CLASS,
                    rule,
                    inst.arg_span(i),
                    format!(
                        "expected a tensor of elements, found the block-quantized {} (Section 2 §18)",
                        t.dtype
                    ),
                )
                .help("a quantized tensor is read only through `dequantize(w)`, `qmatmul(x, w)` and `gather`"),
            );
            return None;
        }
        Some(t)
    }

    /// [`Self::tensor_arg`] for the ops that admit a quantized operand
    /// ([`crate::ir::Op::admits_quantized`]).
    pub(super) fn tensor_arg_q(
        &mut self,
        t: &Type,
        inst: &Inst,
        i: usize,
        rule: &'static str,
    ) -> Option<TensorType> {
        match t {
            Type::Tensor(t) => Some(t.clone()),
            other => {
                self.err(Diagnostic::new(
                    codes::KIND_MISMATCH,
                    rule,
                    inst.arg_span(i),
                    format!("expected a tensor, found a {} ({other})", other.kind_name()),
                ));
                None
            }
        }
    }

    /// Literal class or scalar parameter dtype must match (no promotion, Section 3 §9).
    pub(super) fn scalar_matches(
        &mut self,
        func: &Function,
        s: &Scalar,
        dt: Dtype,
        span: SpanId,
    ) -> Option<()> {
        let found: String = match s {
            Scalar::Float(_) if dt.is_float() => return Some(()),
            Scalar::Int(_) if dt.is_int() => return Some(()),
            Scalar::Bool(_) if dt.is_bool() => return Some(()),
            Scalar::Float(x) => format!("the float literal `{x:?}`"),
            Scalar::Int(x) => format!("the integer literal `{x}`"),
            Scalar::Bool(x) => format!("the bool literal `{x}`"),
            Scalar::Param(i) => match func.sig.params.get(*i).map(|p| &p.ty) {
                Some(Type::Scalar(sd)) if *sd == dt => return Some(()),
                Some(t) => format!("`{}: {t}`", func.sig.params[*i].name),
                None => format!("parameter {i}"),
            },
        };
        self.err(
            Diagnostic::new(
                codes::DTYPE_MISMATCH,
                R_LITERAL,
                span,
                format!(
                    "expected a scalar of dtype {dt} (class {}), found {found}",
                    dt.class()
                ),
            )
            .help(scalar_help(func, s, dt)),
        );
        None
    }
}

/// How to make scalar `s` meet a tensor of dtype `dt`: the literal in the
/// tensor's class, or the parameter declared with the tensor's dtype.
fn scalar_help(func: &Function, s: &Scalar, dt: Dtype) -> String {
    let rule = "scalars take the tensor's dtype exactly: no implicit promotion (Section 3 §9)";
    match s {
        Scalar::Int(x) if dt.is_float() => format!("write the literal as a float, `{x}.0`: {rule}"),
        Scalar::Param(i) => match func.sig.params.get(*i) {
            Some(p) => format!("declare `{}: {dt}`: {rule}", p.name),
            None => rule.to_string(),
        },
        _ => rule.to_string(),
    }
}
