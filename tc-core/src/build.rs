//! A small builder for IR functions, for tests, benches and hand-written IR.
//!
//! Every instruction gets fresh span ids for itself, its operands and its
//! attributes, so tests can assert *which* token a diagnostic points at.

use crate::ctx::ShapeVar;
use crate::diag::SpanId;
use crate::dim::Dim;
use crate::ir::{
    DimBinding, Function, Inst, Op, Param, Scalar, Signature, Spanned, Value, ValueDef,
};
use crate::pred::Pred;
use crate::types::Type;

/// Builds a [`Function`] step by step.
#[derive(Clone, Debug)]
pub struct FnBuilder {
    func: Function,
    next_span: u32,
}

impl FnBuilder {
    /// Start a function called `name`; its name span is `SpanId(0)`.
    pub fn new(name: &str) -> FnBuilder {
        FnBuilder {
            func: Function {
                sig: Signature {
                    name: name.to_string(),
                    vars: Vec::new(),
                    consts: Vec::new(),
                    params: Vec::new(),
                    requires: Vec::new(),
                    axioms: Vec::new(),
                    ret: Type::Unit,
                    ret_span: SpanId(0),
                    ret_dim_spans: Vec::new(),
                    span: SpanId(0),
                },
                body: Vec::new(),
                dim_bindings: Vec::new(),
                ret: Value::from_u32(0),
                ret_span: SpanId(0),
            },
            next_span: 1,
        }
    }

    /// A fresh span id.
    pub fn span(&mut self) -> SpanId {
        let s = SpanId(self.next_span);
        self.next_span += 1;
        s
    }

    fn declare_vars_of(&mut self, t: &Type) {
        // A tensor's dims and a dim parameter's dim (`Type::param_dims`).
        for d in t.param_dims() {
            for v in d.vars() {
                self.declare(&v);
            }
        }
    }

    /// Declare a shape variable (otherwise variables are bound in order of first appearance).
    pub fn declare(&mut self, name: &str) -> &mut Self {
        let is_const = self.func.sig.consts.iter().any(|(n, _)| n == name);
        if !is_const && !self.func.sig.vars.iter().any(|v| v.name == name) {
            self.func.sig.vars.push(ShapeVar {
                name: name.to_string(),
                allow_zero: false,
                fresh: false,
            });
        }
        self
    }

    /// A module constant visible to the signature and body.
    pub fn constant(&mut self, name: &str, value: i64) -> &mut Self {
        self.func.sig.consts.push((name.to_string(), value));
        self
    }

    /// Add a parameter; returns its value id.
    pub fn param(&mut self, name: &str, ty: Type) -> Value {
        self.declare_vars_of(&ty);
        let span = self.span();
        let (nd, nr) = match &ty {
            Type::Tensor(t) => (t.shape.len(), t.refs.len()),
            Type::Dim(_) => (1, 0),
            _ => (0, 0),
        };
        let dim_spans = (0..nd).map(|_| self.span()).collect();
        let ref_spans = (0..nr).map(|_| self.span()).collect();
        let v = self.func.param_value(self.func.sig.params.len());
        assert!(
            self.func.body.is_empty(),
            "parameters come before instructions"
        );
        self.func.sig.params.push(Param {
            name: name.to_string(),
            ty,
            span,
            dim_spans,
            ref_spans,
        });
        v
    }

    /// Add a `requires` predicate; returns its span.
    pub fn requires(&mut self, p: Pred) -> SpanId {
        let span = self.span();
        self.func.sig.requires.push(Spanned { node: p, span });
        span
    }

    /// Add an axiom; returns its span.
    pub fn axiom(&mut self, p: Pred) -> SpanId {
        let span = self.span();
        self.func.sig.axioms.push(Spanned { node: p, span });
        span
    }

    /// Set the return type; returns its span.
    pub fn returns(&mut self, ty: Type) -> SpanId {
        self.declare_vars_of(&ty);
        let span = self.span();
        let nd = ty.as_tensor().map(|t| t.shape.len()).unwrap_or(0);
        self.func.sig.ret_dim_spans = (0..nd).map(|_| self.span()).collect();
        self.func.sig.ret = ty;
        self.func.sig.ret_span = span;
        span
    }

    /// Append an instruction; returns its value.
    pub fn op(&mut self, op: Op) -> Value {
        self.push(op, None)
    }

    /// Append an instruction with a `let` annotation (a check boundary).
    pub fn op_annot(&mut self, op: Op, annot: Type) -> Value {
        self.push(op, Some(annot))
    }

    fn push(&mut self, op: Op, annot: Option<Type>) -> Value {
        let result = self.func.next_value();
        let span = self.span();
        let n_args = op.operands().len().max(1) + 1;
        let arg_spans = (0..n_args).map(|_| self.span()).collect();
        let attr_spans = (0..8).map(|_| self.span()).collect();
        let annot_span = self.span();
        self.func.body.push(Inst {
            result,
            op,
            annot,
            span,
            arg_spans,
            attr_spans,
            annot_span,
        });
        result
    }

    /// `let name = dim(of, axis)` before the next instruction.
    pub fn dim(&mut self, name: &str, of: Value, axis: usize) -> Dim {
        let span = self.span();
        self.func.dim_bindings.push(DimBinding {
            name: name.to_string(),
            of,
            axis,
            before: self.func.body.len(),
            span,
        });
        Dim::var(name)
    }

    /// The instruction that defines `v`, for span assertions.
    pub fn inst(&self, v: Value) -> Option<&Inst> {
        self.func.body.iter().find(|i| i.result == v)
    }

    /// The operand reading parameter `v` as a scalar (a [`Scalar::Param`]
    /// names the parameter by its position, not its value).
    ///
    /// # Panics
    /// When `v` is not a parameter.
    pub fn scalar_param(&self, v: Value) -> Scalar {
        match self.func.sig.value_def(v) {
            ValueDef::Param(i) => Scalar::Param(i),
            ValueDef::Inst(_) => panic!("{v} is not a parameter"),
        }
    }

    /// The signature built so far.
    pub fn sig(&self) -> &Signature {
        &self.func.sig
    }

    /// Finish with the returned value.
    pub fn finish(mut self, ret: Value) -> Function {
        self.func.ret = ret;
        self.func.ret_span = SpanId(self.next_span);
        self.func
    }
}
