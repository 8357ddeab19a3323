//! Lowering planned kernels to LLVM IR text.
//!
//! Each [`Step::Kernel`] becomes a loop nest over its output whose body is the
//! fused expression tree of the output element (Section 4 §5: every
//! denotation is an index function, so fusing is substituting index
//! functions): elementwise ops compute on loaded elements, layout ops
//! (transpose §5.6, reshape §5.7, broadcast §5.8, slice §5.9, concat §5.10)
//! only rewrite the index. A reduction kernel (§5.5) runs its fused producer
//! inside the reduction loop: over the last axis, one output element at a
//! time (the reduction loop walks contiguous memory); when the last axis is
//! kept (a sum over axis 0, or over a middle axis), in the column form
//! ([`KernelShape::Cols`]): per output row, the reduced axes outside and the
//! kept last axis as the inner, vectorized loop, accumulating into a row of
//! accumulators. Both fold each output element in the interpreter's
//! sequential order over the reduced indices.
//!
//! Element computation types: every float dtype computes in `float` (narrow
//! floats are widened on load and rounded back after each op, Section 2 §3),
//! ints in their own width (I4 in `i8`, re-wrapped to [-8, 7] after each op),
//! Bool in `i1`. Storage follows Section 2 §5.
//!
//! Shape quantities are either literals (a σ-specialised kernel: LLVM folds
//! all index arithmetic, the inner loop has a constant trip count) or loads
//! from a runtime `i64` array (the shape-generic kernel, one per function,
//! serving every σ: see [`QKey`]).
//!
//! The emitter is one `Gen` over several files, one concern each: `shape`
//! (index arithmetic), `dtype` (constants, loads, stores, encodings),
//! `math` (NaN rules, fast approximations), `elementwise` (per-element
//! expressions and fusion), `kernels` (loops and kernel functions),
//! `reduce` (reductions), `pool`, `scan` (cumsum) and `topk` (per-lane
//! heap selection), over `crate::llvm_ir`, the typed instruction builder (a
//! value carries its LLVM type; every instruction checks its operands).
//! This file holds the state and [`gen_module`].

use std::collections::HashMap;
use std::fmt::Write;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, RopeLayout, Scalar, UnaryOp, Value, ValueMap};
use tc_core::{Dtype, Sigma};
use tc_runtime::cast;
use tc_runtime::elem::Elem;

use crate::llvm_ir::{Block, Builder, Ty, V};
use crate::options::{Error, JitOptions};
use crate::plan::{Step, Structure, VKind, ValInfo};
use crate::rt::{dtype_code, unary_code};

mod dtype;
mod elementwise;
mod kernels;
mod math;
mod pool;
mod reduce;
mod scan;
mod shape;
mod topk;

use shape::Q;

/// A shape quantity a generic kernel reads at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QKey {
    /// Dim `axis` of value `v`.
    Dim(Value, usize),
    /// The start of the slice that defines value `v`.
    SliceStart(Value),
    /// The leading padding of the pad that defines value `v`.
    PadBefore(Value),
}

impl QKey {
    /// Its value under a plan.
    pub fn value(&self, vals: &ValueMap<ValInfo>, func: &Function, sigma: &Sigma) -> i64 {
        match self {
            QKey::Dim(v, a) => vals[*v].shape[*a] as i64,
            QKey::SliceStart(v) | QKey::PadBefore(v) => match func.inst(*v).map(|i| &i.op) {
                Some(Op::Slice { start, .. }) => start.eval(sigma).unwrap_or(0),
                Some(Op::Pad { before, .. }) => before.eval(sigma).unwrap_or(0),
                _ => 0,
            },
        }
    }
}

/// What the runtime must know about a kernel to split and call it.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelShape {
    /// One loop over all output elements (no layout ops in the tree).
    Flat,
    /// Outer loop over all output dims but the last, inner loop over the last.
    Nested,
    /// Outer loop over output elements, inner loops over the reduced axes.
    Reduce,
    /// A row group: outer loop over the rows shared by its members.
    Rows,
    /// A reduction that keeps its operand's last axis (e.g. a sum over
    /// axis 0): the outer loop runs over tiles (an output row — every
    /// output dim but the last — and a block of at most `block` ≤
    /// [`COL_BLOCK`] columns of it); per tile, the reduced axes run outside
    /// an inner loop over the block's columns.
    Cols {
        /// Columns per tile.
        block: usize,
    },
    /// A cumsum along `axis`: the outer loop runs over its lanes, the
    /// inner loop along one lane in order.
    Scan {
        /// The scanned axis.
        axis: usize,
    },
    /// A top-k along `axis` (`codegen/topk.rs`): the outer loop runs over
    /// its lanes, each selected by a heap of indices in one pass over the
    /// operand's lane.
    Select {
        /// The selected axis.
        axis: usize,
        /// The values form: the kernel takes one more buffer, an `i64`
        /// scratch row per lane laid out like the output (the heap), after
        /// its inputs.
        scratch: bool,
    },
}

/// The widest column block of a [`KernelShape::Cols`] reduction: its
/// accumulator row (at most 8 KB, on the stack) stays in L1.
pub const COL_BLOCK: usize = 1024;

/// A generated module.
#[derive(Clone, Debug)]
pub struct ModuleCode {
    /// The IR text.
    pub ir: String,
    /// Exported kernel entry points `k{id}`.
    pub exports: Vec<String>,
    /// Per kernel id: its loop structure.
    pub shapes: Vec<KernelShape>,
    /// Generic modules: the shape slots, in `%shp` order.
    pub qkeys: Vec<QKey>,
}

/// The outer loop extent and the work per outer iteration of a kernel.
pub fn extent(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    out: Value,
    shape: &KernelShape,
) -> (usize, usize) {
    let o = &vals[out];
    match shape {
        KernelShape::Flat => (o.numel(), 1),
        KernelShape::Nested => {
            let r = o.shape.len();
            if r == 0 {
                (1, 1)
            } else {
                (tc_core::size::extent(&o.shape[..r - 1]), o.shape[r - 1])
            }
        }
        KernelShape::Rows => {
            let r = o.shape.len();
            let last = o.shape.get(r.wrapping_sub(1)).copied().unwrap_or(1);
            (tc_core::size::extent(&o.shape[..r.saturating_sub(1)]), last)
        }
        KernelShape::Reduce => {
            let x = match func.inst(out).map(|i| &i.op) {
                Some(Op::Reduce { x, .. } | Op::ArgReduce { x, .. }) => *x,
                // Its work per output element is the window's taps.
                Some(Op::Pool { kernel, .. }) => {
                    return (
                        o.numel(),
                        kernel.iter().fold(1, |a: usize, &k| a.saturating_mul(k)),
                    )
                }
                _ => out,
            };
            let n_in = vals[x].numel();
            let n_out = o.numel();
            (n_out, if n_out == 0 { 0 } else { n_in / n_out.max(1) })
        }
        KernelShape::Scan { axis } => {
            let d = o.shape.get(*axis).copied().unwrap_or(1);
            let lanes = o
                .shape
                .iter()
                .enumerate()
                .filter(|(i, _)| i != axis)
                .fold(1, |a: usize, (_, &s)| a.saturating_mul(s));
            (lanes, d)
        }
        KernelShape::Select { axis, .. } => {
            let x = match func.inst(out).map(|i| &i.op) {
                Some(Op::TopK { x, .. }) => *x,
                _ => out,
            };
            let d = vals[x].shape.get(*axis).copied().unwrap_or(1);
            let lanes = o
                .shape
                .iter()
                .enumerate()
                .filter(|(i, _)| i != axis)
                .fold(1, |a: usize, (_, &s)| a.saturating_mul(s));
            (lanes, d)
        }
        KernelShape::Cols { block } => {
            let x = match func.inst(out).map(|i| &i.op) {
                Some(Op::Reduce { x, .. }) => *x,
                _ => out,
            };
            let n_out = o.numel();
            let d = o.shape.last().copied().unwrap_or(1);
            if n_out == 0 || d == 0 {
                return (0, 0);
            }
            let count = vals[x].numel() / n_out;
            let block = (*block).max(1);
            ((n_out / d) * d.div_ceil(block), count * d.min(block))
        }
    }
}

#[derive(Clone, Debug)]
struct Idx {
    dims: Option<Vec<Q>>,
    lin: Option<Q>,
}

struct Gen<'a> {
    func: &'a Function,
    vals: &'a ValueMap<ValInfo>,
    st: &'a Structure,
    sigma: &'a Sigma,
    generic: bool,
    opts: JitOptions,
    qkeys: Vec<QKey>,
    globals: String,
    tables: Vec<Dtype>,
    /// The current kernel function's text.
    b: Builder,
    // per function
    memo: HashMap<String, V>,
    bufs: HashMap<Value, V>,
    lbl: usize,
    root: Option<Value>,
    /// Row groups: `(x, m)` — the reduction over `x` also stores each
    /// element of `x` into member `m`'s row, and `m` then reads `x` from
    /// there instead of recomputing it (softmax's `exp` once, not twice).
    stash: Option<(Value, Value)>,
    /// While the fast version of a shape-generic row is generated: the
    /// flags "this run-time extent is 1" that it assumes false (each such
    /// broadcast axis then read at the output's index, not through a
    /// `select` that makes the loop vectorizer gather every lane).
    assumed: Option<Vec<V>>,
    /// While `m`'s row runs: `x` is read from `m`'s buffer.
    stashed: Option<(Value, Value)>,
}

/// Order-preserving signed-integer key of a float's bits (−0 < +0).
fn float_key(x: f32) -> i32 {
    let b = x.to_bits() as i32;
    b ^ ((b >> 31) & 0x7FFF_FFFF)
}

fn int_min(dt: Dtype) -> i64 {
    match dt {
        Dtype::I4 => -8,
        Dtype::I8 => i8::MIN as i64,
        Dtype::I16 => i16::MIN as i64,
        Dtype::I32 => i32::MIN as i64,
        _ => i64::MIN,
    }
}

fn int_max(dt: Dtype) -> i64 {
    match dt {
        Dtype::I4 => 7,
        Dtype::I8 => i8::MAX as i64,
        Dtype::I16 => i16::MAX as i64,
        Dtype::I32 => i32::MAX as i64,
        _ => i64::MAX,
    }
}

/// Generate the module of every kernel step of a planned function.
pub fn gen_module(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    st: &Structure,
    sigma: &Sigma,
    generic: bool,
    opts: JitOptions,
) -> Result<ModuleCode, Error> {
    let mut g = Gen {
        func,
        vals,
        st,
        sigma,
        generic,
        opts,
        qkeys: Vec::new(),
        globals: String::new(),
        tables: Vec::new(),
        b: Builder::default(),
        memo: HashMap::new(),
        bufs: HashMap::new(),
        lbl: 0,
        root: None,
        stash: None,
        assumed: None,
        stashed: None,
    };
    let mut exports = Vec::new();
    let mut shapes = Vec::new();
    for s in &st.steps {
        if let Step::Group {
            id,
            members,
            inputs,
        } = s
        {
            let sh = g.group_kernel(*id, members, inputs);
            exports.push(format!("k{id}"));
            while shapes.len() <= *id {
                shapes.push(KernelShape::Flat);
            }
            shapes[*id] = sh;
        }
        if let Step::Kernel { id, out, inputs } = s {
            if matches!(vals[*out].kind, VKind::Inst(_)) {
                let sh = g.kernel(*id, *out, inputs);
                exports.push(format!("k{id}"));
                while shapes.len() <= *id {
                    shapes.push(KernelShape::Flat);
                }
                shapes[*id] = sh;
            }
        }
    }
    let mut ir = String::new();
    ir.push_str(crate::rt::DECLS);
    ir.push('\n');
    ir.push_str(&g.globals);
    ir.push_str(&crate::jit::attributes());
    Ok(ModuleCode {
        ir,
        exports,
        shapes,
        qkeys: g.qkeys,
    })
}
