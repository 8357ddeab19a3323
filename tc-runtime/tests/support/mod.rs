//! Shared helpers for the tc-runtime integration tests: a tiny builder of IR
//! functions and tensor constructors.
#![allow(dead_code)]

use tc_core::ctx::ShapeVar;
use tc_core::diag::SpanId;
use tc_core::ir::{
    DimBinding, Function, Inst, Op, Param, Scalar, Signature, Spanned, Value, ValueDef,
};
use tc_core::{Dim, Dtype, Pred, TensorType, Type};
use tc_runtime::contract::Arg;
use tc_runtime::interp::{no_calls, Interpreter, Outcome};
use tc_runtime::{Elem, Result, Tensor};

/// `"S"` → variable, `"3"` → constant.
pub fn d(s: &str) -> Dim {
    match s.parse::<i64>() {
        Ok(n) => Dim::c(n),
        Err(_) => Dim::var(s),
    }
}

/// A list of simple dims.
pub fn ds(s: &[&str]) -> Vec<Dim> {
    s.iter().map(|x| d(x)).collect()
}

/// Constant dims from a concrete shape.
pub fn cs(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&n| Dim::c(n as i64)).collect()
}

/// An unrefined tensor type.
pub fn tt(dt: Dtype, dims: Vec<Dim>) -> Type {
    Type::Tensor(TensorType::new(dt, dims))
}

/// Builds a `Function` instruction by instruction.
pub struct FnBuilder {
    sig: Signature,
    body: Vec<Inst>,
    binds: Vec<DimBinding>,
}

impl FnBuilder {
    pub fn new(name: &str) -> FnBuilder {
        FnBuilder {
            sig: Signature {
                name: name.to_string(),
                vars: vec![],
                consts: vec![],
                params: vec![],
                requires: vec![],
                axioms: vec![],
                ret: Type::Unit,
                ret_span: SpanId(0),
                ret_dim_spans: vec![],
                span: SpanId(0),
            },
            body: vec![],
            binds: vec![],
        }
    }

    fn declare(&mut self, name: &str, allow_zero: bool) {
        if self.sig.consts.iter().any(|(c, _)| c == name) {
            return;
        }
        match self.sig.vars.iter_mut().find(|v| v.name == name) {
            Some(v) => v.allow_zero |= allow_zero,
            None => self.sig.vars.push(ShapeVar {
                name: name.to_string(),
                allow_zero,
                fresh: false,
            }),
        }
    }

    /// Declare a shape variable (fixes the σ display order).
    pub fn var(&mut self, name: &str) -> &mut Self {
        self.declare(name, false);
        self
    }

    /// Declare a shape variable admitting 0.
    pub fn var0(&mut self, name: &str) -> &mut Self {
        self.declare(name, true);
        self
    }

    pub fn konst(&mut self, name: &str, v: i64) -> &mut Self {
        self.sig.consts.push((name.to_string(), v));
        self
    }

    pub fn requires(&mut self, p: Pred) -> &mut Self {
        self.sig.requires.push(Spanned {
            node: p,
            span: SpanId(0),
        });
        self
    }

    pub fn axiom(&mut self, p: Pred) -> &mut Self {
        self.sig.axioms.push(Spanned {
            node: p,
            span: SpanId(0),
        });
        self
    }

    pub fn param_ty(&mut self, name: &str, ty: Type) -> Value {
        if let Type::Tensor(t) = &ty {
            for dim in &t.shape {
                for v in dim.vars() {
                    self.declare(&v, false);
                }
            }
        }
        let v = self.sig.param_value(self.sig.params.len());
        self.sig.params.push(Param {
            name: name.to_string(),
            ty,
            span: SpanId(0),
            dim_spans: vec![],
            ref_spans: vec![],
        });
        v
    }

    /// A tensor parameter.
    pub fn tensor(&mut self, name: &str, dt: Dtype, dims: Vec<Dim>) -> Value {
        self.param_ty(name, tt(dt, dims))
    }

    /// A tensor parameter with refinements.
    pub fn tensor_refs(&mut self, name: &str, dt: Dtype, dims: Vec<Dim>, refs: Vec<Pred>) -> Value {
        self.param_ty(
            name,
            Type::Tensor(TensorType::new(dt, dims).with_refs(refs)),
        )
    }

    /// A scalar parameter.
    pub fn scalar(&mut self, name: &str, dt: Dtype) -> Value {
        self.param_ty(name, Type::Scalar(dt))
    }

    fn next(&self) -> Value {
        self.sig.inst_value(self.body.len())
    }

    /// The operand reading parameter `v` as a scalar.
    pub fn scalar_param(&self, v: Value) -> Scalar {
        match self.sig.value_def(v) {
            ValueDef::Param(i) => Scalar::Param(i),
            ValueDef::Inst(_) => panic!("{v} is not a parameter"),
        }
    }

    /// Append `v = op`.
    pub fn op(&mut self, op: Op) -> Value {
        let v = self.next();
        self.body.push(Inst::new(v, op, SpanId(0)));
        v
    }

    /// Append `v: ty = op`.
    pub fn annot(&mut self, op: Op, ty: Type) -> Value {
        let v = self.op(op);
        self.body.last_mut().unwrap().annot = Some(ty);
        v
    }

    /// `let name = dim(of, axis)` before the next instruction.
    pub fn dim(&mut self, name: &str, of: Value, axis: usize) -> &mut Self {
        self.binds.push(DimBinding {
            name: name.to_string(),
            of,
            axis,
            before: self.body.len(),
            span: SpanId(0),
        });
        self
    }

    /// Finish with a return type.
    pub fn ret(mut self, v: Value, ty: Type) -> Function {
        self.sig.ret = ty;
        Function {
            sig: self.sig,
            body: self.body,
            dim_bindings: self.binds,
            ret: v,
            ret_span: SpanId(0),
        }
    }

    /// Finish without a declared return type (the return check is skipped).
    pub fn ret_any(self, v: Value) -> Function {
        self.ret(v, Type::Unit)
    }
}

/// Run with the heap invariant checked after every step.
pub fn run(f: &Function, args: Vec<Arg>) -> Result<Tensor> {
    Interpreter::checked().run(f, &args, &no_calls)
}

/// Run, returning the whole outcome.
pub fn run_outcome(f: &Function, args: Vec<Arg>) -> Result<Outcome> {
    Interpreter::checked().run_outcome(f, &args, &no_calls)
}

/// Run `name` from a set of functions that call each other.
pub fn run_in(fns: &[Function], name: &str, args: Vec<Arg>) -> Result<Tensor> {
    let f = fns.iter().find(|f| f.sig.name == name).expect("function");
    Interpreter::checked().run(f, &args, &|n: &str| fns.iter().find(|f| f.sig.name == n))
}

/// One op on one tensor (constant-dim parameter), result returned.
pub fn apply1(x: &Tensor, op: impl FnOnce(Value) -> Op) -> Result<Tensor> {
    let mut b = FnBuilder::new("f");
    let v = b.tensor("x", x.dtype(), cs(x.shape()));
    let r = b.op(op(v));
    run(&b.ret_any(r), vec![x.into()])
}

/// One op on two tensors.
pub fn apply2(x: &Tensor, y: &Tensor, op: impl FnOnce(Value, Value) -> Op) -> Result<Tensor> {
    let mut b = FnBuilder::new("f");
    let v = b.tensor("x", x.dtype(), cs(x.shape()));
    let w = b.tensor("y", y.dtype(), cs(y.shape()));
    let r = b.op(op(v, w));
    run(&b.ret_any(r), vec![x.into(), y.into()])
}

/// One op on three tensors.
pub fn apply3(
    x: &Tensor,
    y: &Tensor,
    z: &Tensor,
    op: impl FnOnce(Value, Value, Value) -> Op,
) -> Result<Tensor> {
    let mut b = FnBuilder::new("f");
    let u = b.tensor("x", x.dtype(), cs(x.shape()));
    let v = b.tensor("y", y.dtype(), cs(y.shape()));
    let w = b.tensor("z", z.dtype(), cs(z.shape()));
    let r = b.op(op(u, v, w));
    run(&b.ret_any(r), vec![x.into(), y.into(), z.into()])
}

/// A float tensor of dtype `dt` (values rounded into `dt` on construction).
pub fn ft(dt: Dtype, shape: &[usize], v: &[f32]) -> Tensor {
    let e: Vec<Elem> = v.iter().map(|&x| Elem::F(x)).collect();
    Tensor::from_elems(dt, shape, &e).unwrap()
}

/// An int tensor of dtype `dt`.
pub fn it(dt: Dtype, shape: &[usize], v: &[i64]) -> Tensor {
    let e: Vec<Elem> = v.iter().map(|&x| Elem::I(x)).collect();
    Tensor::from_elems(dt, shape, &e).unwrap()
}

/// A bool tensor.
pub fn bt(shape: &[usize], v: &[bool]) -> Tensor {
    let e: Vec<Elem> = v.iter().map(|&x| Elem::B(x)).collect();
    Tensor::from_elems(Dtype::Bool, shape, &e).unwrap()
}

pub fn fv(t: &Tensor) -> Vec<f32> {
    t.to_elems()
        .into_iter()
        .map(|e| e.as_f32().expect("float"))
        .collect()
}

pub fn iv(t: &Tensor) -> Vec<i64> {
    t.to_elems()
        .into_iter()
        .map(|e| e.as_i64().expect("int"))
        .collect()
}

pub fn bv(t: &Tensor) -> Vec<bool> {
    t.to_elems()
        .into_iter()
        .map(|e| e.as_bool().expect("bool"))
        .collect()
}

/// Bit-level equality of two tensors (dtype, shape, every element).
pub fn same(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && a.to_elems()
            .iter()
            .zip(b.to_elems())
            .all(|(x, y)| x.bit_eq(y))
}

/// Element `k` of a small counting sequence, as a value of `dt`.
pub fn sample(dt: Dtype, k: usize) -> Elem {
    match dt {
        Dtype::Bool => Elem::B(k % 3 == 1),
        d if d.is_int() => {
            let (lo, hi) = d.int_range().unwrap();
            Elem::I(((k as i64 * 7 + 3) % 15 - 7).clamp(lo, hi))
        }
        _ => Elem::F(((k as f32) * 0.75 - 3.0).clamp(-8.0, 8.0)),
    }
}

/// A tensor of `dt` and `shape` filled with [`sample`].
pub fn sample_tensor(dt: Dtype, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let e: Vec<Elem> = (0..n).map(|k| sample(dt, k)).collect();
    Tensor::from_elems(dt, shape, &e).unwrap()
}
