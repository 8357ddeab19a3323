//! Inlining calls of small tensor fns into their caller, for one σ.
//!
//! A call is a fusion barrier: its arguments and its result are buffers
//! (`plan`), so `gelu(linear(h, w, b))` writes the biased product, reads it
//! back for the GELU and writes again, and `softmax(scores · s + mask)`
//! writes the masked scores before the softmax reads them; each call also
//! binds its contract and looks up its kernels. A σ-specialised compilation
//! therefore splices small callees into the caller's body, so the planner
//! fuses across the old boundary (the bias into the GELU, the mask into the
//! softmax's row group, a residual into the layer norm).
//!
//! The rewrite keeps the call's meaning (Section 4 §17: a call evaluates
//! the callee's body with its parameters bound to the arguments):
//! - the callee's contract is checked first, on the arguments' planned
//!   dtypes and shapes (`contract::bind_shapes`: kinds, dtypes, ranks,
//!   dims, refinements, `requires`, axioms); a call whose contract fails, or
//!   cannot be decided, is not inlined and fails at run time exactly as
//!   before;
//! - every dim of the callee (shapes, slice bounds, padding, dim values) is
//!   replaced by its value under the callee's σ (extended by its own dim
//!   bindings), so no callee name can capture or be captured by a caller's;
//! - the callee's scalar parameters become the caller's scalar parameters
//!   passed to them (a call's scalar argument is always one, of the same
//!   dtype: otherwise the call is kept);
//! - the spliced value must have the shape and dtype the call's result was
//!   planned with, and the new body must pass the IR verifier and plan
//!   under σ; otherwise the original function is compiled.
//!
//! Callees with an op whose failure is data-dependent (`gather`'s ids) or
//! that run on the host (`topk`, convolution, pooling) are kept as calls,
//! so their run-time errors keep naming the callee. Shape-generic
//! compilations never inline: their structure must not depend on σ.

use tc_core::ir::{DimBinding, Function, Inst, Op, Scalar, Signature, Value, ValueDef, ValueMap};
use tc_core::{Dim, Sigma, Type};
use tc_runtime::contract::{bind_shapes, ArgShape};

use crate::plan::{self, VKind, ValInfo};

/// Largest callee body (after its own inlining) spliced into a caller.
pub const CALLEE_MAX: usize = 96;
/// Largest caller body inlining may produce.
pub const BODY_MAX: usize = 768;
/// Calls nested deeper than this inside a callee stay calls.
pub const DEPTH_MAX: usize = 4;

/// A function with callees spliced in.
#[derive(Clone, Debug)]
pub struct Inlined {
    /// The new body (the caller's signature).
    pub func: Function,
    /// The deepest call level spliced in (1: the caller's own calls): the
    /// calls the body no longer makes, which a caller running `depth`
    /// deep would have made down to `depth + levels` (Section 4 §17's
    /// depth limit; `cache` runs the interpreter where that passes it).
    pub levels: usize,
    /// Each callee spliced in (at any level), as the resolver gave it: a
    /// run with a resolver that gives another function for a name is
    /// refused (`exec::CompiledFn::run_nested`).
    pub callees: Vec<(String, Function)>,
    /// [`plan::shapes`] of `func` under σ, computed to verify it (the
    /// compilation plans with these instead of planning again).
    pub planned: (ValueMap<ValInfo>, Sigma),
}

/// `func` with its small callees spliced in for σ, or `None` when no call
/// was inlined (compile `func` itself).
pub fn inline_calls<'f>(
    func: &Function,
    sigma: &Sigma,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
) -> Option<Inlined> {
    inline_at(func, sigma, resolve, 0)
}

fn inline_at<'f>(
    func: &Function,
    sigma: &Sigma,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
    depth: usize,
) -> Option<Inlined> {
    if !func.body.iter().any(|i| matches!(i.op, Op::Call(..))) {
        return None;
    }
    let (vals, _) = plan::shapes(func, sigma, resolve).ok()?;
    let mut sp = Splicer::new(func);
    let (mut levels, mut callees) = (0, Vec::new());
    for (ii, inst) in func.body.iter().enumerate() {
        sp.pos.push(sp.body.len());
        if let Op::Call(name, args) = &inst.op {
            let result = &vals[func.inst_value(ii)];
            if let Some(callee) = prepare(name, args, result, &vals, resolve, depth) {
                if sp.splice(inst, args, &callee) {
                    levels = levels.max(callee.levels);
                    callees.extend(callee.callees);
                    continue;
                }
            }
        }
        if !sp.copy(inst) {
            return None;
        }
    }
    let out = sp.finish(func)?;
    if levels == 0 || out.body.len() > BODY_MAX {
        return None;
    }
    // The rewrite is checked, not trusted: the verifier, and the same plan
    // (every value's shape, the declared return) under σ.
    tc_core::ir::verify(&out).ok()?;
    let (new_vals, sigma_ext) = plan::shapes(&out, sigma, resolve).ok()?;
    let (old, new) = (&vals[func.ret], &new_vals[out.ret]);
    callees.sort_by(|a, b| a.0.cmp(&b.0));
    callees.dedup_by(|a, b| a.0 == b.0);
    if old.dtype != new.dtype || old.shape != new.shape {
        return None;
    }
    Some(Inlined {
        func: out,
        levels,
        callees,
        planned: (new_vals, sigma_ext),
    })
}

/// A callee ready to splice: its body with every dim a constant, the
/// caller's scalar parameter for each of its scalar parameters, the call
/// levels it covers (1 + its own spliced levels) and every function
/// spliced (itself included).
struct Prepared {
    func: Function,
    scalars: Vec<Option<usize>>,
    levels: usize,
    callees: Vec<(String, Function)>,
}

/// The callee of `call(name, args)` prepared for splicing, or `None` when
/// this call stays a call (see the module doc).
fn prepare<'f>(
    name: &str,
    args: &[Value],
    result: &ValInfo,
    vals: &ValueMap<ValInfo>,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
    depth: usize,
) -> Option<Prepared> {
    let g = resolve(name)?;
    let shapes: Vec<ArgShape<'_>> = args
        .iter()
        .map(|v| {
            let x = vals.get(*v)?;
            Some(match x.kind {
                VKind::ScalarParam(_) => ArgShape::Scalar,
                VKind::Dim(n) => ArgShape::Dim(n),
                _ => ArgShape::Tensor(x.dtype, &x.shape),
            })
        })
        .collect::<Option<_>>()?;
    let gsigma = bind_shapes(&g.sig, &shapes).ok()?;
    let nested = if depth < DEPTH_MAX {
        inline_at(g, &gsigma, resolve, depth + 1)
    } else {
        None
    };
    let mut callees = vec![(name.to_string(), g.clone())];
    let (g, levels) = match &nested {
        Some(n) => {
            callees.extend(n.callees.iter().cloned());
            (&n.func, 1 + n.levels)
        }
        None => (g, 1),
    };
    // Only call-free bodies: a call left inside a spliced body would run
    // one level shallower than its place in the call chain.
    if g.body.len() > CALLEE_MAX
        || matches!(g.sig.value_def(g.ret), ValueDef::Param(_))
        || g.body.iter().any(|i| matches!(i.op, Op::Call(..)))
    {
        return None;
    }
    let (gvals, gsigma) = plan::shapes(g, &gsigma, resolve).ok()?;
    let r = gvals.get(g.ret)?;
    if r.dtype != result.dtype || r.shape != result.shape {
        return None;
    }
    let scalars = scalar_map(g, args, vals)?;
    let constant = |d: &Dim| d.eval(&gsigma).ok().map(Dim::c);
    let mut body = Vec::with_capacity(g.body.len());
    for inst in &g.body {
        let op = rewrite(&inst.op, &|v| v, &constant, &|s| Some(*s), HostOps::Refuse)?;
        body.push(Inst { op, ..inst.clone() });
    }
    let func = Function {
        body,
        dim_bindings: Vec::new(),
        ..g.clone()
    };
    Some(Prepared {
        func,
        scalars,
        levels,
        callees,
    })
}

/// For each callee parameter: the caller's scalar parameter passed to it
/// (same dtype), `None` for a tensor or dim; `None` overall when a scalar
/// argument is anything else.
fn scalar_map(
    g: &Function,
    args: &[Value],
    vals: &ValueMap<ValInfo>,
) -> Option<Vec<Option<usize>>> {
    g.sig
        .params
        .iter()
        .zip(args)
        .map(|(p, v)| {
            let x = vals.get(*v)?;
            match (&p.ty, &x.kind) {
                (Type::Scalar(dt), VKind::ScalarParam(i)) => (x.dtype == *dt).then_some(Some(*i)),
                (Type::Scalar(_), _) => None,
                _ => Some(None),
            }
        })
        .collect()
}

/// Builds the new body: caller instructions copied, callee bodies spliced,
/// every value renumbered.
struct Splicer<'a> {
    /// The caller's signature, which the new body has too.
    sig: &'a Signature,
    body: Vec<Inst>,
    /// Old caller value → new value.
    map: ValueMap<Value>,
    /// Old caller instruction index → its (first) new index.
    pos: Vec<usize>,
}

impl<'a> Splicer<'a> {
    fn new(func: &'a Function) -> Splicer<'a> {
        Splicer {
            sig: &func.sig,
            body: Vec::new(),
            map: (0..func.sig.params.len())
                .map(|i| func.param_value(i))
                .collect(),
            pos: Vec::new(),
        }
    }

    fn next(&self) -> Value {
        self.sig.inst_value(self.body.len())
    }

    fn val(&self, v: Value) -> Value {
        self.map.get(v).copied().unwrap_or(v)
    }

    /// Copy a caller instruction, its operands renumbered.
    fn copy(&mut self, inst: &Inst) -> bool {
        let map = &self.map;
        let v = |x: Value| map.get(x).copied().unwrap_or(x);
        let Some(op) = rewrite(
            &inst.op,
            &v,
            &|d| Some(d.clone()),
            &|s| Some(*s),
            HostOps::Keep,
        ) else {
            return false;
        };
        let result = self.next();
        self.body.push(Inst {
            result,
            op,
            ..inst.clone()
        });
        self.map.push(result);
        true
    }

    /// Splice `callee` in place of the call `inst(args)`; `false` (nothing
    /// pushed) when an op cannot be carried over.
    fn splice(&mut self, inst: &Inst, args: &[Value], callee: &Prepared) -> bool {
        let g = &callee.func;
        // Callee value → new value: its parameters are the call's arguments.
        let mut gmap: ValueMap<Value> = args.iter().map(|a| self.val(*a)).collect();
        let mut ops = Vec::with_capacity(g.body.len());
        for (k, ginst) in g.body.iter().enumerate() {
            let v = |x: Value| gmap.get(x).copied().unwrap_or(x);
            let s = |s: &Scalar| match s {
                Scalar::Param(j) => callee.scalars.get(*j).copied().flatten().map(Scalar::Param),
                other => Some(*other),
            };
            let Some(op) = rewrite(&ginst.op, &v, &|d| Some(d.clone()), &s, HostOps::Refuse) else {
                return false;
            };
            ops.push((op, ginst));
            gmap.push(self.sig.inst_value(self.body.len() + k));
        }
        for (op, ginst) in ops {
            let result = self.next();
            // Spans name the call: the callee's spans index another
            // function's span table.
            self.body.push(Inst {
                result,
                op,
                annot: None,
                span: inst.span,
                arg_spans: vec![inst.span; ginst.arg_spans.len()],
                attr_spans: vec![inst.span; ginst.attr_spans.len()],
                annot_span: inst.span,
            });
        }
        let ret = gmap.get(g.ret).copied();
        match ret {
            Some(r) => {
                self.map.push(r);
                true
            }
            None => false,
        }
    }

    /// The new function: the caller's signature, the new body, the
    /// caller's dim bindings moved to the new instruction indices.
    fn finish(mut self, func: &Function) -> Option<Function> {
        self.pos.push(self.body.len());
        let dim_bindings = func
            .dim_bindings
            .iter()
            .map(|b| {
                Some(DimBinding {
                    of: *self.map.get(b.of)?,
                    before: *self.pos.get(b.before)?,
                    ..b.clone()
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Function {
            sig: func.sig.clone(),
            ret: *self.map.get(func.ret)?,
            body: self.body,
            dim_bindings,
            ret_span: func.ret_span,
        })
    }
}

/// How [`rewrite`] treats the ops a callee must not contain.
#[derive(Clone, Copy, PartialEq)]
enum HostOps {
    /// Renumber them (a caller's own instructions).
    Keep,
    /// Refuse them (a callee's body: the call stays a call).
    Refuse,
}

/// `op` with its operands, dims and scalars mapped ([`Op::try_map`]);
/// `None` for a dim or scalar that does not map, or a host op under
/// [`HostOps::Refuse`].
fn rewrite(
    op: &Op,
    v: &dyn Fn(Value) -> Value,
    d: &dyn Fn(&Dim) -> Option<Dim>,
    s: &dyn Fn(&Scalar) -> Option<Scalar>,
    host: HostOps,
) -> Option<Op> {
    if host == HostOps::Refuse
        && matches!(
            op,
            Op::Gather { .. } | Op::TopK { .. } | Op::Conv { .. } | Op::Pool { .. }
        )
    {
        return None;
    }
    op.try_map(&mut |x| v(x), &mut |x| d(x), &mut |x| s(x))
}
