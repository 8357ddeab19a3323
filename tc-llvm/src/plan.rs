//! Planning a function under a concrete σ: every value's dtype and shape,
//! which values get a buffer ("materialized") and which are fused into their
//! consumers, and the sequence of steps (kernels, matmuls, calls).
//!
//! Fusion rule (issue 5, "Lowering"): unary, binary, scalar-binary, select,
//! cast, fill, iota and the layout ops (broadcast, transpose, slice, reshape,
//! concat: Section 4 §5.6–§5.10, pure index functions) are *inlinable*. An
//! inlinable value is computed inside each consumer's loop nest as an
//! expression of the output index, with no buffer, when it has one consumer,
//! or when it has several but its fused expression is cheap (cost ≤
//! [`RECOMPUTE_MAX`]): recomputing `exp(x - m)` in the sum pass and in the
//! output pass of a softmax costs less than writing and re-reading it, so a
//! row softmax runs in three passes (max, sum, output) and a layer norm in
//! three (mean, variance, output) with no intermediate buffers. Reductions
//! fuse their producer into the reduction loop. Call arguments and the
//! returned value are materialized (a σ-specialised compilation splices
//! small callees in first, [`crate::inline`], so most calls are gone);
//! matmul operands too, except chains of transposes and broadcasts over a
//! buffer (or a reshape of one), which the matmul packs through strides
//! ([`matmul_view_ok`]: slices too; σ-specialised also reshapes of strided
//! views, [`view`]): a weight broadcast over the batch and attention head
//! splits cost no copy. When such a chain starts at a computed value, that
//! value is materialized instead of the chain's end. A σ-specialised plan
//! also computes an expression of the parameters alone once into a buffer
//! when a broadcast reads each element many times ([`HOIST_FANOUT`]).
//!
//! Row groups ([`group_rows`], σ-specialised compilations): consecutive
//! kernels over the same rows whose reads of each other are row-local run
//! in one loop over rows, so the three passes of a softmax or layer norm
//! touch each row while it is in L1 (one read of the input from memory
//! instead of three).
//!
//! The structure (which values are materialized, the steps) of a
//! shape-generic compilation depends only on the IR, never on σ; that is
//! what lets the shape-generic path ([`crate::codegen`] with dims as
//! runtime arguments) reuse one compiled module for every σ. A
//! σ-specialised compilation also reads a matmul operand in place when its
//! view exists for its own shapes ([`view`]: attention's q, k, v are
//! slices of the fused projection, reshaped into heads and transposed, and
//! are packed straight from it).

use std::collections::BTreeMap;

use tc_core::concrete::{self, Operand, RuleError};
use tc_core::ir::{Function, Op, Value, ValueDef, ValueMap};
use tc_core::{Dim, Dtype, Sigma, Type};
use tc_runtime::Error;

/// Fused expressions costlier than this are materialized when they have more
/// than one consumer.
pub const RECOMPUTE_MAX: u32 = 24;
/// A fused expression tree is cut (materialized) beyond this cost, bounding
/// kernel size.
pub const TREE_MAX: u32 = 200;

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum VKind {
    /// Tensor parameter `i`.
    TensorParam(usize),
    /// Scalar parameter `i`.
    ScalarParam(usize),
    /// A dim value of this size: a dim parameter (`heads: Dim![H]`, Section 1
    /// §6 site 1) or an [`Op::Dim`] call argument. Its size follows from σ
    /// (so from the kernel cache's key); it has no buffer, no kernel reads it
    /// (the verifier admits it only as a call operand), calls pass it on.
    Dim(usize),
    /// Instruction `i` of the body.
    Inst(usize),
}

/// A value's concrete type under σ.
#[derive(Clone, Debug)]
pub struct ValInfo {
    /// Element type.
    pub dtype: Dtype,
    /// Concrete shape.
    pub shape: Vec<usize>,
    /// Origin.
    pub kind: VKind,
}

impl ValInfo {
    /// A value of this dtype and shape, refused with `RuleError::Size` when its
    /// element count is over [`tc_core::size::MAX_ELEMS`] (the interpreter's
    /// cap) or its byte count overflows. Every value of a plan is built
    /// here, once, at plan time: that is what lets [`ValInfo::numel`],
    /// [`ValInfo::bytes`], the kernels' index arithmetic, exec's buffers
    /// and the matmul's packing rely on counts that fit (Section 4's
    /// run-time checks, same limit in both backends).
    pub fn new(dtype: Dtype, shape: Vec<usize>, kind: VKind) -> Result<ValInfo, Error> {
        tc_core::size::shape_bytes(dtype, &shape)?;
        Ok(ValInfo { dtype, shape, kind })
    }

    /// Number of elements (0 when a dim is 0, whatever the others).
    ///
    /// Exact for values built by [`ValInfo::new`] (checked there); for a
    /// hand-built `ValInfo` over the cap it saturates at `usize::MAX`
    /// rather than wrap to a small count.
    pub fn numel(&self) -> usize {
        tc_core::size::numel(&self.shape).unwrap_or(usize::MAX)
    }

    /// Storage bytes (Section 2 §5 layout), exact under the same condition.
    pub fn bytes(&self) -> usize {
        self.dtype.storage_bytes(self.numel())
    }
}

/// One step of a compiled function.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A fused loop nest writing `out` (symbol `k{id}`).
    Kernel {
        /// Kernel number.
        id: usize,
        /// The value written.
        out: Value,
        /// Buffers read, in argument order after the output.
        inputs: Vec<Value>,
    },
    /// Kernels over the same rows fused into one loop over rows (softmax,
    /// layer norm): per row, each member's row in order, so a row's passes
    /// run while it is in L1. Symbol `k{id}`; buffers: the members (written)
    /// then `inputs`.
    Group {
        /// Kernel number.
        id: usize,
        /// The values written, in order (reductions over the last axis with
        /// keepdims, and nested elementwise kernels).
        members: Vec<Value>,
        /// Buffers read that are not members.
        inputs: Vec<Value>,
    },
    /// Matmul of two operands (buffers or strided views of buffers,
    /// [`view`]).
    Matmul {
        /// Result.
        out: Value,
        /// Left operand.
        a: Value,
        /// Right operand.
        b: Value,
    },
    /// A fused attention (§12f) on the host kernel
    /// ([`crate::kernels::attention`]), its four operands buffers or
    /// strided views of buffers, as a matmul's ([`view`]): a KV cache's
    /// first positions are read where they lie.
    Sdpa {
        /// Result.
        out: Value,
    },
    /// A gather (§12a), run on the host: every id is checked against the
    /// table's axis ([`tc_core::concrete::gather_ids`]), then each id's
    /// contiguous block of the table is copied (`memcpy`). A data-dependent
    /// read is the one place a kernel could read out of bounds, so it is not
    /// fused: the check must see the ids before any read.
    Gather {
        /// Result.
        out: Value,
        /// The indexed axis.
        axis: usize,
        /// The table (a buffer).
        table: Value,
        /// The I64 ids (a buffer).
        ids: Value,
    },
    /// An op run on the host: a pooling with window constants past the
    /// checker's limit (hand-built IR) runs the reference denotation
    /// (`tc_runtime::interp::denote`), so both backends agree by
    /// construction; a convolution runs im2col + the f32 GEMM
    /// ([`crate::kernels::conv`]). Its operands are buffers.
    Host {
        /// Result (its instruction names the op).
        out: Value,
    },
    /// A call of another tensor fn (run through [`crate::call`]).
    Call {
        /// Result.
        out: Value,
        /// Callee.
        name: String,
        /// Arguments.
        args: Vec<Value>,
    },
}

/// The σ-independent structure of a function: which values are
/// materialized and the steps.
#[derive(Clone, Debug)]
pub struct Structure {
    /// Per value: has a buffer.
    pub mat: ValueMap<bool>,
    /// Per materialized value: the cost of computing one of its elements
    /// from its kernel's buffers (`own_cost` units summed over its fused
    /// expression; 1 for a value no kernel computes). What a kernel's
    /// split across threads weighs its elements by ([`split_weight`]).
    pub cost: ValueMap<u32>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Scalar slots `(param, dtype)` read by kernels.
    pub slots: Vec<(usize, Dtype)>,
}

fn op_err(op: &str, message: String) -> Error {
    Error::op(op, message)
}

/// `what` is formatted only for an error (this runs per dim per call).
fn eval(d: &Dim, sigma: &Sigma, what: impl std::fmt::Display) -> Result<usize, Error> {
    let v = d.eval(sigma).map_err(|source| {
        Error::Rule(RuleError::Eval {
            context: what.to_string(),
            source,
        })
    })?;
    if v < 0 {
        return Err(Error::Rule(RuleError::NegativeDim {
            context: what.to_string(),
            dim: d.to_string(),
            value: v,
        }));
    }
    Ok(v as usize)
}

/// A value as an operand of the concrete rule: a tensor (a scalar parameter
/// is not one).
fn operand(vals: &ValueMap<ValInfo>, v: Value) -> Result<Operand<'_>, RuleError> {
    let x = vals
        .get(v)
        .ok_or_else(|| RuleError::Malformed(format!("{v} is not defined")))?;
    if let VKind::ScalarParam(_) | VKind::Dim(_) = x.kind {
        return Err(RuleError::Malformed(format!(
            "{v} is a scalar or dim where a tensor is needed"
        )));
    }
    Ok(Operand {
        dtype: x.dtype,
        shape: &x.shape,
    })
}

/// The parameters' values under σ: a tensor's shape, a scalar, a dim's size.
fn param_vals(func: &Function, sigma: &Sigma) -> Result<ValueMap<ValInfo>, Error> {
    let mut vals = ValueMap::with_capacity(func.num_values());
    for (i, p) in func.sig.params.iter().enumerate() {
        let what = format_args!("parameter `{}`", p.name);
        let v = match &p.ty {
            Type::Tensor(t) => {
                let shape = t
                    .shape
                    .iter()
                    .map(|d| eval(d, sigma, what))
                    .collect::<Result<Vec<_>, _>>()?;
                ValInfo::new(t.dtype, shape, VKind::TensorParam(i))?
            }
            Type::Scalar(dt) => ValInfo::new(*dt, vec![], VKind::ScalarParam(i))?,
            Type::Dim(d) => ValInfo::new(Dtype::I64, vec![], VKind::Dim(eval(d, sigma, what)?))?,
            _ => {
                return Err(Error::malformed(format!(
                    "parameter `{}` is neither a tensor nor a scalar",
                    p.name
                )))
            }
        };
        vals.push(v);
    }
    Ok(vals)
}

/// A call's result under the callee's signature, its variables bound from
/// the arguments' planned shapes and dim sizes (the result the callee
/// actually returns is checked against this at run time:
/// `Error::CallResult`).
fn call_shape<'f>(
    name: &str,
    xs: &[Value],
    vals: &ValueMap<ValInfo>,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
) -> Result<(Dtype, Vec<usize>), Error> {
    let callee = resolve(name).ok_or_else(|| Error::UnknownFunction(name.to_string()))?;
    let mut cs: Sigma = callee.sig.consts.iter().cloned().collect();
    for (p, v) in callee.sig.params.iter().zip(xs) {
        let Some(x) = vals.get(*v) else {
            continue;
        };
        match (&p.ty, &x.kind) {
            // A dim argument binds like one tensor dim.
            (Type::Dim(d), VKind::Dim(n)) => {
                if let Some(var) = d.as_var() {
                    cs.entry(var.to_string()).or_insert(*n as i64);
                }
            }
            (Type::Tensor(t), _) => {
                for (d, &n) in t.shape.iter().zip(&x.shape) {
                    if let Some(var) = d.as_var() {
                        cs.entry(var.to_string()).or_insert(n as i64);
                    }
                }
            }
            _ => {}
        }
    }
    match &callee.sig.ret {
        Type::Tensor(t) => Ok((
            t.dtype,
            t.shape
                .iter()
                .map(|d| eval(d, &cs, "call"))
                .collect::<Result<_, _>>()?,
        )),
        Type::Scalar(dt) => Ok((*dt, vec![])),
        _ => Err(Error::malformed(format!("`{name}` returns no tensor"))),
    }
}

/// The planned return value against the declared return type under σ
/// (the interpreter's check).
fn check_return(func: &Function, vals: &ValueMap<ValInfo>, sigma: &Sigma) -> Result<(), Error> {
    let ret = vals
        .get(func.ret)
        .ok_or_else(|| Error::malformed("return"))?;
    if let VKind::ScalarParam(_) | VKind::Dim(_) = ret.kind {
        return Err(Error::malformed("a scalar or dim parameter is returned"));
    }
    if let Type::Tensor(t) = &func.sig.ret {
        // A declared dim that cannot be evaluated is a typed error naming
        // it (as in the interpreter), not a shape mismatch.
        if t.shape.len() == ret.shape.len() {
            for (axis, d) in t.shape.iter().enumerate() {
                match d.eval(sigma) {
                    Ok(_) | Err(tc_core::dim::EvalError::Unbound(_)) => {}
                    Err(source) => {
                        return Err(Error::Rule(RuleError::Eval {
                            context: format!(
                                "return of `{}`, dimension {axis} (`{d}`, σ = {})",
                                func.sig.name,
                                tc_runtime::contract::format_sigma(&func.sig, sigma)
                            ),
                            source,
                        }))
                    }
                }
            }
        }
        let ok = t.dtype == ret.dtype
            && t.shape.len() == ret.shape.len()
            && t.shape
                .iter()
                .zip(&ret.shape)
                .all(|(d, &n)| match d.eval(sigma) {
                    Ok(v) => v >= 0 && v as usize == n,
                    Err(tc_core::dim::EvalError::Unbound(_)) => true,
                    Err(_) => false,
                });
        if !ok {
            return Err(op_err(
                &format!("return of `{}`", func.sig.name),
                format!(
                    "declared {}, produced {} {:?}",
                    func.sig.ret, ret.dtype, ret.shape
                ),
            ));
        }
    }
    Ok(())
}

/// Concrete dtypes and shapes of every value under σ (extended by the local
/// dim bindings): the shared concrete rule ([`tc_core::concrete`]) per op,
/// the callee's signature per call; also the extended σ.
pub fn shapes<'f>(
    func: &Function,
    sigma: &Sigma,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
) -> Result<(ValueMap<ValInfo>, Sigma), Error> {
    let mut sigma = sigma.clone();
    let mut vals = param_vals(func, &sigma)?;
    for (ii, inst) in func.body.iter().enumerate() {
        for b in func.dim_bindings.iter().filter(|b| b.before == ii) {
            let n = vals
                .get(b.of)
                .and_then(|v| v.shape.get(b.axis))
                .ok_or_else(|| Error::malformed(format!("dim binding `{}`", b.name)))?;
            sigma.insert(b.name.clone(), *n as i64);
        }
        if let Op::Dim(d) = &inst.op {
            let n = eval(d, &sigma, format_args!("dim argument `{d}`"))?;
            vals.push(ValInfo::new(Dtype::I64, vec![], VKind::Dim(n))?);
            continue;
        }
        let (dtype, shape) = match &inst.op {
            Op::Call(name, xs) => call_shape(name, xs, &vals, resolve)?,
            // Every other op: the concrete rule the interpreter uses too.
            op => concrete::infer(op, &|v| operand(&vals, v), &sigma)?,
        };
        vals.push(ValInfo::new(dtype, shape, VKind::Inst(ii))?);
    }
    for b in func
        .dim_bindings
        .iter()
        .filter(|b| b.before >= func.body.len())
    {
        if let Some(n) = vals.get(b.of).and_then(|v| v.shape.get(b.axis)) {
            sigma.insert(b.name.clone(), *n as i64);
        }
    }
    check_return(func, &vals, &sigma)?;
    Ok((vals, sigma))
}

/// A pooling whose window constants exceed what the checker admits
/// (hand-built IR): its kernel's index arithmetic assumes them below 2³¹,
/// so it runs the denotation on the host instead. Decided from the IR
/// alone, like the rest of the structure.
fn host_pool(op: &Op) -> bool {
    let Op::Pool { kernel, window, .. } = op else {
        return false;
    };
    let max = tc_core::check::WINDOW_CONST_MAX;
    [kernel, &window.stride, &window.padding, &window.dilation]
        .iter()
        .any(|v| v.iter().any(|&c| c > max))
}

/// Section 2 §18: an op that reads a block-quantized operand (`qmatmul`,
/// `dequantize`) is a host step on the fused quantized kernels: no loop nest
/// reads block bytes as elements. Decided on the planned dtypes, so a
/// quantized value that comes out of a call is seen too.
pub fn reads_quantized(op: &Op, dtype_of: &dyn Fn(Value) -> Dtype) -> bool {
    match op {
        Op::QMatmul(..) => true,
        Op::Cast(_, x) => dtype_of(*x).is_quantized(),
        _ => false,
    }
}

/// Is this op computed inside its consumers' loops?
pub fn inlinable(op: &Op) -> bool {
    !matches!(
        op,
        Op::Matmul(..)
            | Op::MatmulI32(..)
            | Op::DqMatmul { .. }
            | Op::QMatmul(..)
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Gather { .. }
            | Op::TopK { .. }
            | Op::CumSum { .. }
            | Op::Conv { .. }
            | Op::Pool { .. }
            | Op::Sdpa { .. }
            | Op::Call(..)
            | Op::Dim(_)
    )
}

/// The cost of one op in a fused expression (transcendentals weigh more).
fn own_cost(op: &Op) -> u32 {
    use tc_core::ir::UnaryOp as U;
    match op {
        Op::Unary(u, _) => match u {
            U::Neg | U::Abs | U::Relu | U::Not | U::Floor | U::Ceil | U::Round => 1,
            U::Sqrt | U::Recip | U::Rsqrt => 3,
            _ => 10,
        },
        Op::Binary(..) | Op::ScalarBinary { .. } | Op::Select(..) | Op::Cast(..) => 1,
        Op::Concat(_, xs) => xs.len() as u32,
        Op::Reshape(..) | Op::Pad { .. } => 2,
        // Four products, a sum and a select.
        Op::Rope { .. } => 6,
        _ => 0,
    }
}

/// The cost of the operand reads an op makes beyond one per operand: a
/// fused rope computes its rotated operand at both coordinates of each
/// pair.
fn rereads(op: &Op, mat: &ValueMap<bool>, cost: &ValueMap<u32>) -> u32 {
    match op {
        Op::Rope { x, .. } if !mat[*x] => cost[*x],
        _ => 0,
    }
}

/// Per value: how many instructions read it, whether host code reads it
/// from a buffer (a call's argument, a gather's operand: it must be
/// materialized), and whether a matmul or an sdpa reads it.
struct Uses {
    consumers: ValueMap<u32>,
    forced: ValueMap<bool>,
    mm_use: ValueMap<bool>,
    sdpa_use: ValueMap<bool>,
}

fn uses(func: &Function, dtype_of: &dyn Fn(Value) -> Dtype) -> Uses {
    let mut consumers = ValueMap::filled(func, 0u32);
    let mut forced = ValueMap::filled(func, false);
    let mut mm_use = ValueMap::filled(func, false);
    let mut sdpa_use = ValueMap::filled(func, false);
    for inst in &func.body {
        let mut ops = inst.op.operands();
        ops.dedup();
        let mut seen = Vec::new();
        for v in ops {
            if seen.contains(&v) {
                continue;
            }
            seen.push(v);
            if let Some(c) = consumers.get_mut(v) {
                *c += 1;
            }
            // A call's arguments and a gather's operands are read from
            // buffers by host code.
            if matches!(
                inst.op,
                Op::Call(..)
                    | Op::Gather { .. }
                    | Op::TopK { .. }
                    | Op::Conv { .. }
                    | Op::DqMatmul { .. }
            ) || host_pool(&inst.op)
                || reads_quantized(&inst.op, dtype_of)
            {
                if let Some(f) = forced.get_mut(v) {
                    *f = true;
                }
            }
            let reader = match inst.op {
                Op::Matmul(..) | Op::MatmulI32(..) => Some(&mut mm_use),
                Op::Sdpa { .. } => Some(&mut sdpa_use),
                _ => None,
            };
            if let Some(f) = reader.and_then(|r| r.get_mut(v)) {
                *f = true;
            }
        }
    }
    Uses {
        consumers,
        forced,
        mm_use,
        sdpa_use,
    }
}

/// Decide materialization and form the steps (σ-independent).
///
/// `dtype_of` gives each value's dtype: the planned one (`ValInfo::dtype`)
/// when compiling, so that a call's result has its callee's return dtype
/// (the IR alone cannot know it: see [`operand_dtype`]).
///
/// `concrete`: the shapes and extended σ of a σ-specialised compilation.
/// With them a matmul operand is also read in place when its view exists
/// for those shapes only ([`view`]: a slice, a reshape of a strided view);
/// without (shape-generic), only views that exist for every σ
/// ([`matmul_view_ok`]).
pub fn structure(
    func: &Function,
    dtype_of: &dyn Fn(Value) -> Dtype,
    concrete: Option<(&ValueMap<ValInfo>, &Sigma)>,
) -> Structure {
    let Uses {
        consumers,
        mut forced,
        mm_use,
        sdpa_use,
    } = uses(func, dtype_of);
    force_view_roots(func, &mut forced);
    let fanout = concrete.map(|(vals, _)| broadcast_fanout(func, vals));
    // Per value: its fused expression reads parameters only.
    let mut params_only = ValueMap::filled(func, false);
    let mut mat = ValueMap::filled(func, true);
    let mut cost = ValueMap::filled(func, 1u32);
    let mut kernel_cost = ValueMap::filled(func, 1u32);
    for inst in &func.body {
        let v = inst.result;
        if !inlinable(&inst.op) || reads_quantized(&inst.op, dtype_of) {
            continue;
        }
        let c = own_cost(&inst.op)
            + inst
                .op
                .operands()
                .iter()
                .map(|&o| if mat[o] { 1 } else { cost[o] })
                .sum::<u32>()
            + rereads(&inst.op, &mat, &cost);
        cost[v] = c;
        // A matmul operand that is a chain of transposes/broadcasts (and a
        // reshape of a buffer) over a buffer is read through strides by the
        // packing routines: no copy (a weight broadcast over the batch is
        // never materialized B times).
        let in_place = || {
            matmul_view_ok(func, &mat, v, true, dtype_of)
                || concrete.is_some_and(|(vals, sigma)| {
                    dtype_of(v) == Dtype::F32 && view(func, vals, &mat, sigma, v, true).is_some()
                })
        };
        // An sdpa reads its f32, f16 and bf16 operands through strides
        // alike (`kernels::attention`: a narrow KV cache's slice is read
        // where it lies, widened as read).
        let sdpa_in_place = || {
            view_chain_ok(func, &mat, v, true)
                || concrete
                    .is_some_and(|(vals, sigma)| view(func, vals, &mat, sigma, v, true).is_some())
        };
        let view_forced = (mm_use[v] && !in_place()) || (sdpa_use[v] && !sdpa_in_place());
        // A computed value broadcast many times over (BERT's additive
        // mask, `[B, S]` under `[B, H, S, S]` scores) is computed once
        // into its own small buffer, not once per element of the
        // broadcast.
        // Only expressions of the parameters: a layer norm's `rsqrt(var +
        // eps)` stays in its row group.
        params_only[v] = inst.op.operands().iter().all(|&o| {
            matches!(func.value_def(o), Some(ValueDef::Param(_))) || (!mat[o] && params_only[o])
        });
        let hoisted = c >= HOIST_COST
            && params_only[v]
            && fanout.as_ref().is_some_and(|f| f[v] >= HOIST_FANOUT);
        let keep = v == func.ret
            || forced[v]
            || view_forced
            || hoisted
            || consumers[v] == 0
            || c > TREE_MAX
            || (consumers[v] > 1 && c > RECOMPUTE_MAX);
        mat[v] = keep;
        if keep {
            kernel_cost[v] = c;
            cost[v] = 1;
        }
    }
    let steps = steps_of(func, &mat, dtype_of);
    let slots = slots_of(func, dtype_of);
    Structure {
        mat,
        cost: kernel_cost,
        steps,
        slots,
    }
}

/// `own_cost` units that count as one element for the split thresholds
/// (`exec::PAR_MIN_WORK`). An add of two buffers costs 3, SwiGLU's
/// `g · sigmoid(g) · u` 15 and GELU after a bias 13: a transcendental's
/// element runs about four times as long as a plain one's. But a split
/// just past the threshold pays only where the pool's workers are
/// already spinning: SmolLM2's 16-row SwiGLU (24,576 elements) went from
/// 20 to 13 µs per call inside a decode step's session, while MiniLM's
/// GELU at one sentence of ten tokens (15,360 elements, 12 µs on one
/// thread) took 15–26 µs split in a call's own session. So a unit is
/// twice a plain element's cost: the first splits, the second does not.
const UNIT_COST: u32 = 6;

/// How many elements one element of a kernel computing `v` counts as for
/// its split across threads: its fused expression's cost in
/// `UNIT_COST`s, at least 1 (a plain kernel splits where it did).
pub fn split_weight(st: &Structure, v: Value) -> usize {
    st.cost
        .get(v)
        .map_or(1, |&c| c.div_ceil(UNIT_COST).max(1) as usize)
}

/// The steps for a materialization: one per materialized value, in body
/// order (kernels numbered as they come).
fn steps_of(func: &Function, mat: &ValueMap<bool>, dtype_of: &dyn Fn(Value) -> Dtype) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut kid = 0;
    for inst in &func.body {
        let out = inst.result;
        if !mat[out] {
            continue;
        }
        match &inst.op {
            Op::Matmul(a, b) | Op::MatmulI32(a, b) => {
                steps.push(Step::Matmul { out, a: *a, b: *b })
            }
            Op::Sdpa { .. } => steps.push(Step::Sdpa { out }),
            Op::Gather { axis, table, ids } => steps.push(Step::Gather {
                out,
                axis: *axis,
                table: *table,
                ids: *ids,
            }),
            Op::Conv { .. } | Op::DqMatmul { .. } => steps.push(Step::Host { out }),
            op if reads_quantized(op, dtype_of) => steps.push(Step::Host { out }),
            op if host_pool(op) => steps.push(Step::Host { out }),
            Op::Call(name, args) => steps.push(Step::Call {
                out,
                name: name.clone(),
                args: args.clone(),
            }),
            // A size, no buffer: the call that takes it reads its `VKind::Dim`.
            Op::Dim(_) => {}
            _ => {
                let mut inputs = Vec::new();
                leaves(func, mat, out, true, &mut inputs);
                steps.push(Step::Kernel {
                    id: kid,
                    out,
                    inputs,
                });
                kid += 1;
            }
        }
    }
    steps
}

/// The scalar slots `(param, dtype)` kernels read.
fn slots_of(func: &Function, dtype_of: &dyn Fn(Value) -> Dtype) -> Vec<(usize, Dtype)> {
    let mut slots = Vec::new();
    for inst in &func.body {
        if !inlinable(&inst.op) && !matches!(inst.op, Op::Reduce { .. } | Op::ArgReduce { .. }) {
            continue;
        }
        for p in inst.op.scalar_params() {
            let dt = match &inst.op {
                Op::Fill(dt, ..) => *dt,
                Op::ScalarBinary { x, .. } | Op::Pad { x, .. } => dtype_of(*x),
                _ => continue,
            };
            if !slots.contains(&(p, dt)) {
                slots.push((p, dt));
            }
        }
    }
    slots
}

/// Fused expressions of the parameters alone at least this costly are
/// computed once into a buffer when a broadcast reads each of their
/// elements [`HOIST_FANOUT`] or more times (σ-specialised plans).
pub const HOIST_COST: u32 = 3;
/// See [`HOIST_COST`].
pub const HOIST_FANOUT: usize = 8;

/// Per value: how many times over a broadcast consuming it (directly or
/// through reshapes and transposes) reads each of its elements (0: none).
fn broadcast_fanout(func: &Function, vals: &ValueMap<ValInfo>) -> ValueMap<usize> {
    let mut fan = ValueMap::filled(func, 0usize);
    for inst in func.body.iter().rev() {
        let v = inst.result;
        match &inst.op {
            Op::Broadcast(_, x) => {
                let n = vals[*x].numel().max(1);
                let f = vals[v].numel() / n;
                fan[*x] = fan[*x].max(f);
            }
            Op::Reshape(_, x) | Op::Transpose(_, x) => {
                fan[*x] = fan[*x].max(fan[v]);
            }
            _ => {}
        }
    }
    fan
}

/// A matmul operand that is a chain of layout ops over a computed value
/// (`transpose(reshape(x · w + b))`, GPT-2's `slice`s of the fused q, k, v
/// projection) is read in place when that value has a buffer: the value is
/// materialized (one contiguous write) instead of the chain's end (a
/// strided write per head, 4× slower, or one copy per slice). The walk
/// passes through the ops a view admits ([`view`]): transposes,
/// broadcasts, reshapes and slices.
fn force_view_roots(func: &Function, forced: &mut ValueMap<bool>) {
    for inst in &func.body {
        if !matches!(
            inst.op,
            Op::Matmul(..) | Op::MatmulI32(..) | Op::Sdpa { .. }
        ) {
            continue;
        }
        let roots = inst.op.operands();
        for mut x in roots.iter().copied() {
            while let Some(def) = func.inst(x) {
                match &def.op {
                    Op::Transpose(_, y)
                    | Op::Broadcast(_, y)
                    | Op::Reshape(_, y)
                    | Op::Slice { x: y, .. } => x = *y,
                    op => {
                        if inlinable(op) && !roots.contains(&x) {
                            forced[x] = true;
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// The plan verifier: each step computes its op in a loop form that
/// implements that op (`codegen::kernels` for a kernel, `reduce_row` or
/// `nested_row` for a row group's member, host code for the rest). A
/// violation is a planner bug, refused before code generation (the call
/// then runs on the interpreter) instead of compiled into a wrong loop: a
/// cumsum that joined a row group was computed as an elementwise member
/// and read its own unwritten output.
pub fn verify(func: &Function, st: &Structure) -> Result<(), String> {
    let op_of = |v: &Value| func.inst(*v).map(|i| &i.op);
    let own_loop = |op: &Op| {
        matches!(
            op,
            Op::Reduce { .. } | Op::ArgReduce { .. } | Op::CumSum { .. } | Op::TopK { .. }
        ) || (matches!(op, Op::Pool { .. }) && !host_pool(op))
    };
    for step in &st.steps {
        let ok = match step {
            Step::Kernel { out, .. } => op_of(out).is_some_and(|op| inlinable(op) || own_loop(op)),
            Step::Group { members, .. } => members.iter().all(|m| {
                op_of(m).is_some_and(|op| inlinable(op) || matches!(op, Op::Reduce { .. }))
            }),
            Step::Matmul { out, .. } => {
                matches!(op_of(out), Some(Op::Matmul(..) | Op::MatmulI32(..)))
            }
            Step::Sdpa { out } => matches!(op_of(out), Some(Op::Sdpa { .. })),
            Step::Gather { out, .. } => matches!(op_of(out), Some(Op::Gather { .. })),
            Step::Host { out } => op_of(out).is_some_and(|op| {
                matches!(
                    op,
                    Op::Conv { .. } | Op::QMatmul(..) | Op::DqMatmul { .. } | Op::Cast(..)
                ) || host_pool(op)
            }),
            Step::Call { out, .. } => matches!(op_of(out), Some(Op::Call(..))),
        };
        if !ok {
            return Err(format!(
                "plan verifier: the step {step:?} does not implement its op"
            ));
        }
    }
    Ok(())
}

/// Fewest elements per row for a kernel to join a row group.
pub const GROUP_MIN_ROW: usize = 8;

/// Fuse consecutive kernels over the same rows into [`Step::Group`]s (for
/// concrete shapes: a σ-specialised compilation). A kernel writing `out` of
/// shape `P ++ [n]` has rows `P`; a reduction over the last axis with
/// keepdims (shape `P ++ [1]`) too. A kernel joins the running group when
/// its rows equal the group's and every read of an earlier member is
/// *row-local*: through elementwise ops and broadcasts that keep the leading
/// dims, so row `o` of the kernel reads only row `o` of the member, which
/// the group has written earlier in the same iteration. A group needs a
/// reduction and two members; kernel ids are renumbered.
pub fn group_rows(func: &Function, vals: &ValueMap<ValInfo>, st: &mut Structure) {
    let rows_of = |out: Value| -> Option<Vec<usize>> {
        let o = &vals[out];
        let r = o.shape.len();
        // Rank ≥ 2: a rank-1 group would have a single row (no thread split).
        if r < 2 || o.dtype == Dtype::I4 {
            return None;
        }
        let inner = match &func.inst(out)?.op {
            Op::Reduce {
                axes, keepdims, x, ..
            } => {
                let xs = &vals[*x].shape;
                if !*keepdims || axes.as_slice() != [r - 1] || xs.len() != r {
                    return None;
                }
                xs[r - 1]
            }
            // A member's row is computed by `nested_row` (an elementwise
            // tree) or `reduce_row`: an op with its own loop form (argmax,
            // cumsum, pooling, top-k) must stay its own kernel.
            op if !inlinable(op) => return None,
            _ => o.shape[r - 1],
        };
        if inner < GROUP_MIN_ROW {
            return None;
        }
        Some(o.shape[..r - 1].to_vec())
    };
    let mut out: Vec<Step> = Vec::new();
    let mut cur: Vec<(Value, Vec<Value>)> = Vec::new();
    let mut cur_rows: Option<Vec<usize>> = None;
    let flush = |cur: &mut Vec<(Value, Vec<Value>)>, out: &mut Vec<Step>| {
        let has_reduce = cur
            .iter()
            .any(|(v, _)| matches!(func.inst(*v).map(|i| &i.op), Some(Op::Reduce { .. })));
        if cur.len() >= 2 && has_reduce {
            let members: Vec<Value> = cur.iter().map(|(v, _)| *v).collect();
            let mut inputs = Vec::new();
            for (_, ins) in cur.iter() {
                for v in ins {
                    if !members.contains(v) && !inputs.contains(v) {
                        inputs.push(*v);
                    }
                }
            }
            out.push(Step::Group {
                id: 0,
                members,
                inputs,
            });
        } else {
            for (v, ins) in cur.drain(..) {
                out.push(Step::Kernel {
                    id: 0,
                    out: v,
                    inputs: ins,
                });
            }
        }
        cur.clear();
    };
    for step in std::mem::take(&mut st.steps) {
        match step {
            Step::Kernel { out: v, inputs, .. } => {
                let rows = rows_of(v);
                let joins = rows.is_some()
                    && rows == cur_rows
                    && !cur.is_empty()
                    && row_local(
                        func,
                        vals,
                        &st.mat,
                        v,
                        true,
                        true,
                        &cur,
                        rows.as_deref().unwrap_or(&[]),
                    );
                if !joins {
                    flush(&mut cur, &mut out);
                    cur_rows = rows.clone();
                }
                if rows.is_some() {
                    cur.push((v, inputs));
                } else {
                    out.push(Step::Kernel {
                        id: 0,
                        out: v,
                        inputs,
                    });
                    cur_rows = None;
                }
            }
            other => {
                flush(&mut cur, &mut out);
                cur_rows = None;
                out.push(other);
            }
        }
    }
    flush(&mut cur, &mut out);
    let mut kid = 0;
    for s in out.iter_mut() {
        match s {
            Step::Kernel { id, .. } | Step::Group { id, .. } => {
                *id = kid;
                kid += 1;
            }
            _ => {}
        }
    }
    st.steps = out;
}

/// Does the fused expression of `v` (the kernel root when `root`) read the
/// group members in `cur` only at the current row? `keep`: the index of `v`'s
/// element has the row's leading dims.
#[allow(clippy::too_many_arguments)]
fn row_local(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    mat: &ValueMap<bool>,
    v: Value,
    root: bool,
    keep: bool,
    cur: &[(Value, Vec<Value>)],
    rows: &[usize],
) -> bool {
    let Some(inst) = func.inst(v) else {
        return true;
    };
    if mat[v] && !root {
        if cur.iter().any(|(m, _)| *m == v) {
            let s = &vals[v].shape;
            return keep && s.len() == rows.len() + 1 && s[..rows.len()] == *rows;
        }
        return true;
    }
    let op = &inst.op;
    let rec = |x: Value, k: bool| row_local(func, vals, mat, x, false, k, cur, rows);
    match op {
        Op::Unary(_, x) | Op::Cast(_, x) | Op::ScalarBinary { x, .. } => rec(*x, keep),
        Op::Binary(_, a, b) => rec(*a, keep) && rec(*b, keep),
        Op::Select(c, a, b) => rec(*c, keep) && rec(*a, keep) && rec(*b, keep),
        Op::Fill(..) | Op::Iota(..) => true,
        Op::Broadcast(_, x) => {
            let (xs, os) = (&vals[*x].shape, &vals[v].shape);
            let r = os.len();
            let k = keep && xs.len() == r && r >= 1 && xs[..r - 1] == os[..r - 1];
            rec(*x, k)
        }
        // The reduction root reads its producer at (row dims, j).
        Op::Reduce { x, .. } if root => rec(*x, keep),
        _ => op.operands().iter().all(|x| rec(*x, false)),
    }
}

/// How deep [`static_dim`] follows a chain of shape-keeping ops.
const STATIC_DEPTH: usize = 64;

/// Dim `a` of `v` when the IR fixes it for every σ: a dim that the module
/// constants alone decide (`768`, `QKV`, `D / H`) in a parameter's type or
/// in the dims a broadcast, reshape, fill or iota names; a keepdims
/// reduction's reduced axis (1); a slice's axis when the constants decide
/// `stop − start` (`K·D .. K·D + D`); and the same through the ops that
/// keep their operand's shape (elementwise operands have equal shapes,
/// Section 2 §6) or permute it (§9). A shape-generic kernel then indexes
/// with the literal as a σ-specialised one does: a broadcast of a keepdims
/// reduction reads index 0 instead of choosing at run time, and a reshape
/// maps literal groups of dims index to index.
pub fn static_dim(func: &Function, v: Value, a: usize) -> Option<i64> {
    // The module constants a dim may name are fixed for the function (the
    // contract binds them to these values on every call).
    let consts: Sigma = func.sig.consts.iter().cloned().collect();
    static_dim_at(func, &consts, v, a, 0)
}

/// A dim expression's value when the module constants alone decide it.
fn fixed(d: &Dim, consts: &Sigma) -> Option<i64> {
    d.eval(consts).ok()
}

fn static_dim_at(func: &Function, consts: &Sigma, v: Value, a: usize, depth: usize) -> Option<i64> {
    let inst = match func.value_def(v)? {
        ValueDef::Param(i) => {
            return match &func.sig.params[i].ty {
                tc_core::Type::Tensor(t) => fixed(t.shape.get(a)?, consts),
                _ => None,
            }
        }
        ValueDef::Inst(j) => &func.body[j],
    };
    if depth >= STATIC_DEPTH {
        return None;
    }
    let on = |x: &Value, a: usize| static_dim_at(func, consts, *x, a, depth + 1);
    match &inst.op {
        Op::Broadcast(d, _) | Op::Reshape(d, _) | Op::Fill(_, d, _) | Op::Iota(_, d, _) => {
            fixed(d.get(a)?, consts)
        }
        Op::Reduce {
            axes,
            keepdims: true,
            x,
            ..
        } => match axes.contains(&a) {
            true => Some(1),
            false => on(x, a),
        },
        Op::ArgReduce {
            axis,
            keepdims: true,
            x,
            ..
        } => match *axis == a {
            true => Some(1),
            false => on(x, a),
        },
        Op::Transpose(perm, x) => on(x, *perm.get(a)?),
        // §12: ⌈(stop − start) / step⌉ on the axis, the operand's elsewhere.
        Op::Slice {
            axis,
            start,
            stop,
            step,
            x,
        } => match *axis == a {
            true => {
                let n = u64::try_from(fixed(&stop.checked_sub(start).ok()?, consts)?).ok()?;
                i64::try_from(n.div_ceil(u64::try_from(*step).ok()?.max(1))).ok()
            }
            false => on(x, a),
        },
        Op::Unary(_, x) | Op::Cast(_, x) | Op::ScalarBinary { x, .. } => on(x, a),
        Op::Binary(_, x, y) | Op::Select(_, x, y) => on(x, a).or_else(|| on(y, a)),
        _ => None,
    }
}

/// Can value `v` be read by matmul as a strided view of a buffer for every
/// σ (given the materialization decided so far for earlier values)? At
/// F32: chains of transposes, broadcasts and slices, ending at a buffer
/// or at a reshape of one; at a narrow float or I8, a broadcast of a
/// buffer. A slice moves the view's start and scales one
/// stride whatever σ is (a decoder's `slice(cache, 2, 0, T)` of keys is
/// read in place, not copied every step). The shape-generic admission;
/// [`view`] computes the view itself at run time, and admits more for one
/// σ.
pub fn matmul_view_ok(
    func: &Function,
    mat: &ValueMap<bool>,
    v: Value,
    top: bool,
    dtype_of: &dyn Fn(Value) -> Dtype,
) -> bool {
    // Only f32 matmul packs through strides (`matmul::matmul_strided`).
    // A narrow float's or an I8 weight broadcast over the batch (a buffer under
    // leading axes) is read in place too: `matmul_strided` folds the batch
    // into one product against its one copy.
    if top && dtype_of(v) != Dtype::F32 {
        return (dtype_of(v).is_float() || dtype_of(v) == Dtype::I8)
            && matches!(func.inst(v).map(|i| &i.op),
                Some(Op::Broadcast(_, x)) if func.inst(*x).is_none() || mat[*x]);
    }
    view_chain_ok(func, mat, v, top)
}

/// Is `v` (`top`: the operand itself) a buffer, or a chain of transposes,
/// broadcasts and slices over one (with a reshape of a buffer at its
/// root), whatever σ: what a strided read takes in place.
fn view_chain_ok(func: &Function, mat: &ValueMap<bool>, v: Value, top: bool) -> bool {
    let Some(inst) = func.inst(v) else {
        return true;
    };
    if !top && mat[v] {
        return true;
    }
    match &inst.op {
        Op::Transpose(_, x) | Op::Broadcast(_, x) | Op::Slice { x, .. } => {
            view_chain_ok(func, mat, *x, false)
        }
        Op::Reshape(_, x) => func.inst(*x).is_none() || mat[*x],
        _ => false,
    }
}

/// A matmul operand read in place: element `idx` of the operand is element
/// `offset + Σ idx[k]·strides[k]` of the buffer `base`.
#[derive(Clone, Debug, PartialEq)]
pub struct StridedView {
    /// The materialized value read.
    pub base: Value,
    /// Element offset of the operand's first element in `base`.
    pub offset: usize,
    /// Element strides, one per axis of the operand (0: broadcast).
    pub strides: Vec<isize>,
}

impl StridedView {
    /// Does every element this view addresses lie inside `base_numel`
    /// elements? (An empty view addresses none.) Checked, so a view the
    /// planner got wrong is an error, never a read out of bounds.
    pub fn fits(&self, shape: &[usize], base_numel: usize) -> bool {
        if shape.len() != self.strides.len() {
            return false;
        }
        if shape.contains(&0) {
            return true;
        }
        let last = shape
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |acc, (&d, &s)| {
                let s = usize::try_from(s).ok()?;
                acc.checked_add((d - 1).checked_mul(s)?)
            });
        last.is_some_and(|l| l < base_numel)
    }
}

/// How a matmul operand `v` is read in place, when it can be, for the
/// shapes in `vals` and the (extended) σ: buffers are contiguous;
/// transposes permute strides; broadcasts give stride 0 (Section 4 §5.6,
/// §5.9); a slice moves the offset and scales its axis's stride (§5.10); a
/// reshape keeps the elements' order (§5.7), so it is a view exactly when
/// each group of input axes it merges is itself contiguous
/// ([`reshape_strides`]). `top`: `v` is the operand itself, whose own
/// materialization is being decided (so not read from `mat`).
pub fn view(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    mat: &ValueMap<bool>,
    sigma: &Sigma,
    v: Value,
    top: bool,
) -> Option<StridedView> {
    let shape = &vals.get(v)?.shape;
    let def = func.inst(v).filter(|_| top || !mat[v]);
    let Some(def) = def else {
        let strides = crate::kernels::gemm_common::contiguous_strides(shape);
        return Some(StridedView {
            base: v,
            offset: 0,
            strides,
        });
    };
    let inner = |x: &Value| view(func, vals, mat, sigma, *x, false);
    match &def.op {
        Op::Transpose(perm, x) => {
            let sx = inner(x)?;
            let strides = perm
                .iter()
                .map(|&p| sx.strides.get(p).copied())
                .collect::<Option<_>>()?;
            Some(StridedView { strides, ..sx })
        }
        Op::Broadcast(_, x) => {
            let sx = inner(x)?;
            let xs = &vals.get(*x)?.shape;
            let lead = shape.len().checked_sub(xs.len())?;
            let mut strides = vec![0isize; shape.len()];
            for (k, &d) in xs.iter().enumerate() {
                strides[lead + k] = if d == 1 { 0 } else { sx.strides[k] };
            }
            Some(StridedView { strides, ..sx })
        }
        Op::Slice {
            axis,
            start,
            step,
            x,
            ..
        } => {
            let mut sx = inner(x)?;
            let start = isize::try_from(eval(start, sigma, "slice start").ok()?).ok()?;
            let st = *sx.strides.get(*axis)?;
            let moved = usize::try_from(start.checked_mul(st)?).ok()?;
            sx.offset = sx.offset.checked_add(moved)?;
            sx.strides[*axis] = st.checked_mul(isize::try_from(*step).ok()?)?;
            Some(sx)
        }
        Op::Reshape(_, x) => {
            let sx = inner(x)?;
            let strides = reshape_strides(&vals.get(*x)?.shape, &sx.strides, shape)?;
            Some(StridedView { strides, ..sx })
        }
        _ => None,
    }
}

/// Strides that read a view of shape `old` (strides `st`) as shape `new`
/// in row-major order without a copy, when they exist (NumPy's no-copy
/// reshape): axes of size 1 are dropped, then `old` and `new` are cut into
/// runs of equal product; the old axes of a run must be contiguous with
/// one another, and the new axes of the run take their strides from the
/// run's innermost stride outwards. An empty view reads nothing: any
/// strides do.
pub fn reshape_strides(old: &[usize], st: &[isize], new: &[usize]) -> Option<Vec<isize>> {
    if old.contains(&0) || new.contains(&0) {
        return Some(crate::kernels::gemm_common::contiguous_strides(new));
    }
    let o: Vec<(usize, isize)> = old
        .iter()
        .zip(st)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    let mut out = vec![0isize; new.len()];
    let (mut oi, mut ni) = (0, 0);
    while ni < new.len() {
        if new[ni] == 1 {
            ni += 1;
            continue;
        }
        let (n0, o0) = (ni, oi);
        let (mut pn, mut po) = (new[ni], o.get(oi)?.0);
        ni += 1;
        oi += 1;
        while pn != po {
            if pn < po {
                pn = pn.checked_mul(*new.get(ni)?)?;
                ni += 1;
            } else {
                po = po.checked_mul(o.get(oi)?.0)?;
                oi += 1;
            }
        }
        for k in o0..oi - 1 {
            let (d, s) = o[k + 1];
            if o[k].1 != s.checked_mul(isize::try_from(d).ok()?)? {
                return None;
            }
        }
        let mut s = o[oi - 1].1;
        for k in (n0..ni).rev() {
            if new[k] != 1 {
                out[k] = s;
                s = s.checked_mul(isize::try_from(new[k]).ok()?)?;
            }
        }
    }
    (oi == o.len()).then_some(out)
}

/// The dtype of a value, from the IR alone (σ-independent). A call's result
/// is reported as f32 because the IR does not carry the callee's signature:
/// planning uses the planned dtypes instead (see [`structure`]); this is for
/// diagnostics ([`describe`]).
pub fn operand_dtype(func: &Function, v: Value) -> Dtype {
    let j = match func.value_def(v) {
        Some(ValueDef::Param(i)) => {
            return match &func.sig.params[i].ty {
                Type::Tensor(t) => t.dtype,
                Type::Scalar(dt) => *dt,
                _ => Dtype::F32,
            }
        }
        Some(ValueDef::Inst(j)) => j,
        None => panic!("{v} is not a value of `{}`", func.sig.name),
    };
    match &func.body[j].op {
        Op::Unary(_, x)
        | Op::Transpose(_, x)
        | Op::Reshape(_, x)
        | Op::Broadcast(_, x)
        | Op::Slice { x, .. } => operand_dtype(func, *x),
        Op::Reduce { x, .. } => operand_dtype(func, *x),
        Op::Cast(dt, _) | Op::Fill(dt, ..) | Op::Iota(dt, ..) => *dt,
        Op::Binary(o, a, _) => o.result_dtype(operand_dtype(func, *a)),
        Op::ScalarBinary { op, x, .. } => op.result_dtype(operand_dtype(func, *x)),
        Op::Select(_, a, _) | Op::Matmul(a, _) => operand_dtype(func, *a),
        Op::QMatmul(..) | Op::DqMatmul { .. } | Op::Sdpa { .. } => Dtype::F32,
        Op::MatmulI32(..) => Dtype::I32,
        Op::ArgReduce { .. } => Dtype::I64,
        Op::Concat(_, xs) => operand_dtype(func, xs[0]),
        Op::Gather { table, .. } => operand_dtype(func, *table),
        Op::TopK { indices: true, .. } => Dtype::I64,
        Op::TopK { x, .. }
        | Op::CumSum { x, .. }
        | Op::Pad { x, .. }
        | Op::Rope { x, .. }
        | Op::Conv { x, .. }
        | Op::Pool { x, .. } => operand_dtype(func, *x),
        Op::Call(..) => Dtype::F32,
        Op::Dim(_) => Dtype::I64,
    }
}

/// Materialized values read by the fused expression of `v` (the root is
/// expanded even though it is materialized).
fn leaves(func: &Function, mat: &ValueMap<bool>, v: Value, root: bool, out: &mut Vec<Value>) {
    let inst = func.inst(v).filter(|_| root || !mat[v]);
    let Some(inst) = inst else {
        let scalar = func
            .param(v)
            .is_some_and(|p| matches!(p.ty, Type::Scalar(_) | Type::Dim(_)));
        if !scalar && !out.contains(&v) {
            out.push(v);
        }
        return;
    };
    for o in inst.op.operands() {
        leaves(func, mat, o, false, out);
    }
}

/// The consumers count per value, for tests and diagnostics.
pub fn describe(func: &Function) -> BTreeMap<Value, bool> {
    let s = structure(func, &|v| operand_dtype(func, v), None);
    s.mat.iter().map(|(v, m)| (v, *m)).collect()
}
