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

use std::collections::HashMap;
use std::fmt::Write;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, Scalar, UnaryOp, Value};
use tc_core::{Dtype, Sigma};
use tc_runtime::cast;
use tc_runtime::elem::Elem;

use crate::plan::{Step, Structure, VKind, ValInfo};
use crate::rt::{dtype_code, unary_code};
use crate::{Error, JitOptions};

/// A shape quantity a generic kernel reads at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QKey {
    /// Dim `axis` of value `v`.
    Dim(u32, usize),
    /// The start of the slice that defines value `v`.
    SliceStart(u32),
}

impl QKey {
    /// Its value under a plan.
    pub fn value(&self, vals: &[ValInfo], func: &Function, sigma: &Sigma) -> i64 {
        match self {
            QKey::Dim(v, a) => vals[*v as usize].shape[*a] as i64,
            QKey::SliceStart(v) => {
                let np = func.sig.params.len();
                match &func.body[*v as usize - np].op {
                    Op::Slice { start, .. } => start.eval(sigma).unwrap_or(0),
                    _ => 0,
                }
            }
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
    vals: &[ValInfo],
    out: Value,
    shape: &KernelShape,
) -> (usize, usize) {
    let o = &vals[out.0 as usize];
    match shape {
        KernelShape::Flat => (o.numel(), 1),
        KernelShape::Nested => {
            let r = o.shape.len();
            if r == 0 {
                (1, 1)
            } else {
                (o.shape[..r - 1].iter().product(), o.shape[r - 1])
            }
        }
        KernelShape::Rows => {
            let r = o.shape.len();
            let last = o.shape.get(r.wrapping_sub(1)).copied().unwrap_or(1);
            (o.shape[..r.saturating_sub(1)].iter().product(), last)
        }
        KernelShape::Reduce => {
            let np = func.sig.params.len();
            let x = match &func.body[out.0 as usize - np].op {
                Op::Reduce { x, .. } | Op::ArgReduce { x, .. } => *x,
                _ => out,
            };
            let n_in = vals[x.0 as usize].numel();
            let n_out = o.numel();
            (n_out, if n_out == 0 { 0 } else { n_in / n_out.max(1) })
        }
        KernelShape::Cols { block } => {
            let np = func.sig.params.len();
            let x = match &func.body[out.0 as usize - np].op {
                Op::Reduce { x, .. } => *x,
                _ => out,
            };
            let n_out = o.numel();
            let d = o.shape.last().copied().unwrap_or(1);
            if n_out == 0 || d == 0 {
                return (0, 0);
            }
            let count = vals[x.0 as usize].numel() / n_out;
            let block = (*block).max(1);
            ((n_out / d) * d.div_ceil(block), count * d.min(block))
        }
    }
}

#[derive(Clone, Debug)]
struct Idx {
    dims: Option<Vec<String>>,
    lin: Option<String>,
}

fn is_lit(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

fn cty(dt: Dtype) -> &'static str {
    match dt {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F8E4M3 | Dtype::F8E5M2 => "float",
        Dtype::I64 => "i64",
        Dtype::I32 => "i32",
        Dtype::I16 => "i16",
        Dtype::I8 | Dtype::I4 => "i8",
        Dtype::Bool => "i1",
    }
}

fn sty(dt: Dtype) -> &'static str {
    match dt {
        Dtype::F32 => "float",
        Dtype::F16 | Dtype::BF16 => "i16",
        Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::I8 | Dtype::I4 | Dtype::Bool => "i8",
        Dtype::I64 => "i64",
        Dtype::I32 => "i32",
        Dtype::I16 => "i16",
    }
}

struct Gen<'a> {
    func: &'a Function,
    vals: &'a [ValInfo],
    st: &'a Structure,
    sigma: &'a Sigma,
    generic: bool,
    opts: JitOptions,
    np: usize,
    qkeys: Vec<QKey>,
    globals: String,
    tables: Vec<Dtype>,
    // per function
    pre: String,
    body: String,
    n: usize,
    pmemo: HashMap<String, String>,
    memo: HashMap<String, String>,
    bufs: HashMap<u32, String>,
    lbl: usize,
    root: Option<u32>,
    /// Row groups: `(x, m)` — the reduction over `x` also stores each
    /// element of `x` into member `m`'s row, and `m` then reads `x` from
    /// there instead of recomputing it (softmax's `exp` once, not twice).
    stash: Option<(u32, Value)>,
    /// While `m`'s row runs: `x` is read from `m`'s buffer.
    stashed: Option<(u32, Value)>,
}

impl<'a> Gen<'a> {
    fn t(&mut self) -> String {
        self.n += 1;
        format!("%t{}", self.n)
    }

    fn e(&mut self, line: String) {
        self.body.push_str("  ");
        self.body.push_str(&line);
        self.body.push('\n');
    }

    /// Emit `op` in the body and return its result.
    fn ins(&mut self, rhs: String) -> String {
        let t = self.t();
        self.e(format!("{t} = {rhs}"));
        t
    }

    /// Emit in the entry block, memoized.
    fn pins(&mut self, rhs: String) -> String {
        if let Some(t) = self.pmemo.get(&rhs) {
            return t.clone();
        }
        let t = self.t();
        let _ = writeln!(self.pre, "  {t} = {rhs}");
        self.pmemo.insert(rhs, t.clone());
        t
    }

    // ---- shape quantities ---------------------------------------------

    fn q(&mut self, k: QKey) -> String {
        if !self.generic {
            return k.value(self.vals, self.func, self.sigma).to_string();
        }
        let slot = match self.qkeys.iter().position(|x| *x == k) {
            Some(s) => s,
            None => {
                self.qkeys.push(k);
                self.qkeys.len() - 1
            }
        };
        let p = self.pins(format!("getelementptr inbounds i64, i64* %shp, i64 {slot}"));
        self.pins(format!("load i64, i64* {p}, align 8"))
    }

    fn dim(&mut self, v: Value, a: usize) -> String {
        self.q(QKey::Dim(v.0, a))
    }

    fn pmul(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_mul(y).to_string(),
            (Some(1), _) => b.to_string(),
            (_, Some(1)) => a.to_string(),
            _ => self.pins(format!("mul i64 {a}, {b}")),
        }
    }

    fn padd(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_add(y).to_string(),
            (Some(0), _) => b.to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.pins(format!("add i64 {a}, {b}")),
        }
    }

    fn bmul(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_mul(y).to_string(),
            (Some(0), _) | (_, Some(0)) => "0".into(),
            (Some(1), _) => b.to_string(),
            (_, Some(1)) => a.to_string(),
            _ => self.ins(format!("mul nsw i64 {a}, {b}")),
        }
    }

    fn badd(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_add(y).to_string(),
            (Some(0), _) => b.to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.ins(format!("add nsw i64 {a}, {b}")),
        }
    }

    fn bsub(&mut self, a: &str, b: &str) -> String {
        match (is_lit(a), is_lit(b)) {
            (Some(x), Some(y)) => x.wrapping_sub(y).to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.ins(format!("sub nsw i64 {a}, {b}")),
        }
    }

    fn stride(&mut self, v: Value, i: usize) -> String {
        let r = self.vals[v.0 as usize].shape.len();
        let mut s = "1".to_string();
        for j in (i + 1..r).rev() {
            let d = self.dim(v, j);
            s = self.pmul(&s, &d);
        }
        s
    }

    /// Row-major multi-index of `lin` in the shape of `v`.
    fn unravel(&mut self, v: Value, lin: &str) -> Vec<String> {
        let r = self.vals[v.0 as usize].shape.len();
        let mut out = vec![String::new(); r];
        let mut rest = lin.to_string();
        for i in (0..r).rev() {
            let d = self.dim(v, i);
            if i == 0 {
                out[i] = rest.clone();
                break;
            }
            if is_lit(&d) == Some(1) {
                out[i] = "0".into();
                continue;
            }
            out[i] = self.ins(format!("urem i64 {rest}, {d}"));
            rest = self.ins(format!("udiv i64 {rest}, {d}"));
        }
        out
    }

    fn ravel(&mut self, v: Value, dims: &[String]) -> String {
        let mut acc = "0".to_string();
        for (i, d) in dims.iter().enumerate() {
            let s = self.stride(v, i);
            let m = self.bmul(d, &s);
            acc = self.badd(&acc, &m);
        }
        acc
    }

    fn dims_of(&mut self, v: Value, idx: &Idx) -> Vec<String> {
        match &idx.dims {
            Some(d) => d.clone(),
            None => {
                let lin = idx.lin.clone().unwrap_or_else(|| "0".into());
                self.unravel(v, &lin)
            }
        }
    }

    // ---- constants ------------------------------------------------------

    fn fc(&mut self, x: f32) -> String {
        self.pins(format!("bitcast i32 {} to float", x.to_bits() as i32))
    }

    fn elem_const(&mut self, e: Elem, dt: Dtype) -> String {
        match e {
            Elem::F(x) => self.fc(x),
            Elem::I(i) => {
                let w = cast::wrap_int(i, dt);
                w.to_string()
            }
            Elem::B(b) => if b { "true" } else { "false" }.to_string(),
        }
    }

    fn scalar(&mut self, s: &Scalar, dt: Dtype) -> String {
        match s {
            Scalar::Float(x) => self.elem_const(cast::convert(Elem::F(*x as f32), dt), dt),
            Scalar::Int(i) => self.elem_const(cast::convert(Elem::I(*i), dt), dt),
            Scalar::Bool(b) => self.elem_const(cast::convert(Elem::B(*b), dt), dt),
            Scalar::Param(p) => {
                let slot = self
                    .st
                    .slots
                    .iter()
                    .position(|x| *x == (*p, dt))
                    .unwrap_or(0);
                let a = self.pins(format!("getelementptr inbounds i64, i64* %sc, i64 {slot}"));
                let raw = self.pins(format!("load i64, i64* {a}, align 8"));
                match cty(dt) {
                    "float" => {
                        let b = self.pins(format!("trunc i64 {raw} to i32"));
                        self.pins(format!("bitcast i32 {b} to float"))
                    }
                    "i64" => raw,
                    ty => self.pins(format!("trunc i64 {raw} to {ty}")),
                }
            }
        }
    }

    // ---- loads and stores -------------------------------------------------

    fn f8_table(&mut self, dt: Dtype) -> String {
        let name = format!("@tab_{}", dt.name());
        if !self.tables.contains(&dt) {
            self.tables.push(dt);
            let items: Vec<String> = (0..256u16)
                .map(|b| {
                    format!(
                        "i32 {}",
                        cast::decode_bits(b, dt).unwrap_or(f32::NAN).to_bits() as i32
                    )
                })
                .collect();
            let _ = writeln!(
                self.globals,
                "{name} = private unnamed_addr constant [256 x i32] [{}], align 64",
                items.join(", ")
            );
        }
        name
    }

    fn bf16_decode(&mut self, b16: &str) -> String {
        let w = self.ins(format!("zext i16 {b16} to i32"));
        let m = self.ins(format!("and i32 {w}, 32767"));
        let nan = self.ins(format!("icmp ugt i32 {m}, 32640"));
        let q = self.ins(format!("or i32 {w}, 64"));
        let s = self.ins(format!("select i1 {nan}, i32 {q}, i32 {w}"));
        let sh = self.ins(format!("shl i32 {s}, 16"));
        self.ins(format!("bitcast i32 {sh} to float"))
    }

    fn bf16_encode(&mut self, x: &str) -> String {
        let b = self.ins(format!("bitcast float {x} to i32"));
        let isnan = self.ins(format!("fcmp uno float {x}, {x}"));
        let hi = self.ins(format!("lshr i32 {b}, 16"));
        let nanr = self.ins(format!("or i32 {hi}, 64"));
        let lsb = self.ins(format!("and i32 {hi}, 1"));
        let r0 = self.ins(format!("add i32 {b}, 32767"));
        let r1 = self.ins(format!("add i32 {r0}, {lsb}"));
        let r = self.ins(format!("lshr i32 {r1}, 16"));
        let s = self.ins(format!("select i1 {isnan}, i32 {nanr}, i32 {r}"));
        self.ins(format!("trunc i32 {s} to i16"))
    }

    /// Encode a computed f32 into the storage bits of `dt` (Section 2 §5).
    fn encode(&mut self, dt: Dtype, x: &str) -> String {
        match dt {
            Dtype::F16 => {
                let h = self.ins(format!("fptrunc float {x} to half"));
                self.ins(format!("bitcast half {h} to i16"))
            }
            Dtype::BF16 => self.bf16_encode(x),
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let c = dtype_code(dt);
                let r = self.ins(format!("call i16 @tc_encode(i32 {c}, float {x})"));
                self.ins(format!("trunc i16 {r} to i8"))
            }
            _ => x.to_string(),
        }
    }

    /// Decode storage bits of `dt` into f32.
    fn decode(&mut self, dt: Dtype, raw: &str) -> String {
        match dt {
            Dtype::F16 => {
                let h = self.ins(format!("bitcast i16 {raw} to half"));
                let x = self.ins(format!("fpext half {h} to float"));
                // Decoding quiets a signalling NaN (cast.rs decode rule).
                // Spelled out: LLVM folds `fptrunc(fpext h)` back into `h`.
                self.quiet(&x)
            }
            Dtype::BF16 => self.bf16_decode(raw),
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let tab = self.f8_table(dt);
                let z = self.ins(format!("zext i8 {raw} to i64"));
                let p = self.ins(format!(
                    "getelementptr inbounds [256 x i32], [256 x i32]* {tab}, i64 0, i64 {z}"
                ));
                let b = self.ins(format!("load i32, i32* {p}, align 4"));
                self.ins(format!("bitcast i32 {b} to float"))
            }
            _ => raw.to_string(),
        }
    }

    /// `round_to(x, dt)`: the value of the nearest `dt` (Section 2 §3, §5).
    fn round(&mut self, dt: Dtype, x: &str) -> String {
        match dt {
            Dtype::F32 => x.to_string(),
            Dtype::F16 => {
                let h = self.ins(format!("fptrunc float {x} to half"));
                self.ins(format!("fpext half {h} to float"))
            }
            Dtype::BF16 => {
                let b = self.bf16_encode(x);
                self.bf16_decode(&b)
            }
            Dtype::F8E4M3 | Dtype::F8E5M2 => {
                let c = dtype_code(dt);
                self.ins(format!("call float @tc_round_to(i32 {c}, float {x})"))
            }
            Dtype::I4 => {
                let s = self.ins(format!("shl i8 {x}, 4"));
                self.ins(format!("ashr i8 {s}, 4"))
            }
            _ => x.to_string(),
        }
    }

    fn buf(&mut self, v: Value) -> String {
        if let Some(b) = self.bufs.get(&v.0) {
            return b.clone();
        }
        panic!("no buffer for {v}");
    }

    fn load(&mut self, v: Value, off: &str) -> String {
        let dt = self.vals[v.0 as usize].dtype;
        let p = self.buf(v);
        let st = sty(dt);
        if dt == Dtype::I4 {
            let bi = self.ins(format!("lshr i64 {off}, 1"));
            let a = self.ins(format!("getelementptr inbounds i8, i8* {p}, i64 {bi}"));
            let byte = self.ins(format!("load i8, i8* {a}, align 1"));
            let odd = self.ins(format!("and i64 {off}, 1"));
            let sh64 = self.ins(format!("shl i64 {odd}, 2"));
            let sh = self.ins(format!("trunc i64 {sh64} to i8"));
            let r = self.ins(format!("lshr i8 {byte}, {sh}"));
            let l = self.ins(format!("shl i8 {r}, 4"));
            return self.ins(format!("ashr i8 {l}, 4"));
        }
        let a = self.ins(format!("getelementptr inbounds {st}, {st}* {p}, i64 {off}"));
        let raw = self.ins(format!("load {st}, {st}* {a}"));
        match dt {
            Dtype::Bool => self.ins(format!("icmp ne i8 {raw}, 0")),
            d if d.is_float() => self.decode(d, &raw),
            _ => raw,
        }
    }

    fn store(&mut self, v: Value, off: &str, x: &str) {
        let dt = self.vals[v.0 as usize].dtype;
        let p = self.buf(v);
        let st = sty(dt);
        if dt == Dtype::I4 {
            let bi = self.ins(format!("lshr i64 {off}, 1"));
            let a = self.ins(format!("getelementptr inbounds i8, i8* {p}, i64 {bi}"));
            let byte = self.ins(format!("load i8, i8* {a}, align 1"));
            let odd = self.ins(format!("and i64 {off}, 1"));
            let sh64 = self.ins(format!("shl i64 {odd}, 2"));
            let sh = self.ins(format!("trunc i64 {sh64} to i8"));
            let nib = self.ins(format!("and i8 {x}, 15"));
            let nibs = self.ins(format!("shl i8 {nib}, {sh}"));
            let mask = self.ins(format!("shl i8 15, {sh}"));
            let keep = self.ins(format!("xor i8 {mask}, -1"));
            let kept = self.ins(format!("and i8 {byte}, {keep}"));
            let nb = self.ins(format!("or i8 {kept}, {nibs}"));
            self.e(format!("store i8 {nb}, i8* {a}, align 1"));
            return;
        }
        let val = match dt {
            Dtype::Bool => self.ins(format!("zext i1 {x} to i8")),
            d if d.is_float() => self.encode(d, x),
            _ => x.to_string(),
        };
        let a = self.ins(format!("getelementptr inbounds {st}, {st}* {p}, i64 {off}"));
        self.e(format!("store {st} {val}, {st}* {a}"));
    }

    // ---- NaN rules (Section 2 §3; the same rules as `tc_runtime::cast`) ----

    /// `x` with the quiet bit set when it is a NaN (`cast::quiet`). Integer
    /// bit operations: LLVM treats `x · 1` or `fptrunc(fpext x)` as `x` and
    /// would otherwise pass a signalling NaN through.
    fn quiet(&mut self, x: &str) -> String {
        let n = self.ins(format!("fcmp uno float {x}, {x}"));
        let q = self.quieted(x);
        self.ins(format!("select i1 {n}, float {q}, float {x}"))
    }

    /// `x` with the quiet bit set, unconditionally (only selected for NaNs).
    fn quieted(&mut self, x: &str) -> String {
        let b = self.ins(format!("bitcast float {x} to i32"));
        let o = self.ins(format!("or i32 {b}, {}", cast::QUIET_BIT));
        self.ins(format!("bitcast i32 {o} to float"))
    }

    /// `cast::nan_result(r, operands)`: `r` unless it is a NaN, else the
    /// first NaN operand quieted, else the canonical NaN.
    fn nan_result(&mut self, r: &str, operands: &[&str]) -> String {
        let t = self.first_nan(operands);
        let rn = self.ins(format!("fcmp uno float {r}, {r}"));
        self.ins(format!("select i1 {rn}, float {t}, float {r}"))
    }

    /// The first NaN of `operands` quieted, or the canonical NaN.
    fn first_nan(&mut self, operands: &[&str]) -> String {
        let mut t = self.fc(cast::CANONICAL_NAN);
        for x in operands.iter().rev() {
            let n = self.ins(format!("fcmp uno float {x}, {x}"));
            let q = self.quieted(x);
            t = self.ins(format!("select i1 {n}, float {q}, float {t}"));
        }
        t
    }

    /// IEEE 754-2019 `maximum`/`minimum` (`cast::maximum`/`minimum`): a NaN
    /// operand wins (the first, quieted); −0 < +0. Compares and selects
    /// (they vectorize; `llvm.maximum` has no fast x86 lowering in LLVM 14):
    /// on equal operands the bitwise and (max) / or (min) of the two picks
    /// +0 / −0 from a ±0 pair and is the identity otherwise.
    fn extremum(&mut self, max: bool, a: &str, b: &str) -> String {
        let (win, lose) = if max { ("ogt", "olt") } else { ("olt", "ogt") };
        let ca = self.ins(format!("fcmp {win} float {a}, {b}"));
        let cb = self.ins(format!("fcmp {lose} float {a}, {b}"));
        let ai = self.ins(format!("bitcast float {a} to i32"));
        let bi = self.ins(format!("bitcast float {b} to i32"));
        let tie = if max { "and" } else { "or" };
        let ti = self.ins(format!("{tie} i32 {ai}, {bi}"));
        let tf = self.ins(format!("bitcast i32 {ti} to float"));
        let m1 = self.ins(format!("select i1 {cb}, float {b}, float {tf}"));
        let m = self.ins(format!("select i1 {ca}, float {a}, float {m1}"));
        let u = self.ins(format!("fcmp uno float {a}, {b}"));
        let t = self.first_nan(&[a, b]);
        self.ins(format!("select i1 {u}, float {t}, float {m}"))
    }

    // ---- element expressions ---------------------------------------------

    fn fop(&mut self, op: &str, a: &str, b: &str) -> String {
        self.ins(format!("{op} float {a}, {b}"))
    }

    fn fcall1(&mut self, name: &str, x: &str) -> String {
        self.ins(format!("call float @llvm.{name}.f32(float {x})"))
    }

    fn horner(&mut self, x: &str, cs: &[f32]) -> String {
        let mut acc = self.fc(cs[0]);
        // Fused multiply-adds (the fast transcendentals only): one rounding
        // per step, half the instructions.
        for &c in &cs[1..] {
            let cc = self.fc(c);
            acc = self.ins(format!(
                "call float @llvm.fma.f32(float {acc}, float {x}, float {cc})"
            ));
        }
        acc
    }

    /// Fast f32 `exp` (Cephes `expf`: Cody–Waite reduction, degree-5
    /// polynomial). Error bound: relative ≤ 2 ulp (≤ 2.4e-7) for normal
    /// results (x in [-87.3, 88.72]); for subnormal results (x in
    /// [-103.97, -87.3]) the scaling by 2ⁿ is split into two exact factors
    /// so the result is rounded once onto the subnormal grid: absolute error
    /// ≤ 2⁻¹⁴⁸ there (the interpreter's `exp(-100)` is a subnormal too, not
    /// 0). Exactly 0 below -104 (the true value is under half the smallest
    /// subnormal), +∞ above 88.72, ±∞ and NaN as the interpreter.
    fn fast_exp(&mut self, x: &str) -> String {
        let hi = self.fc(88.722_83);
        let lo = self.fc(-104.0);
        let xc0 = self.fcall2("minnum", x, &hi);
        let xc = self.fcall2("maxnum", &xc0, &lo);
        let log2e = self.fc(std::f32::consts::LOG2_E);
        let t = self.fop("fmul", &xc, &log2e);
        let n = self.fcall1("rint", &t);
        let c1 = self.fc(0.693_359_4);
        let c2 = self.fc(-2.121_944_4e-4);
        let a = self.fop("fmul", &n, &c1);
        let r0 = self.fop("fsub", &xc, &a);
        let b = self.fop("fmul", &n, &c2);
        let r = self.fop("fsub", &r0, &b);
        let p = self.horner(
            &r,
            &[
                1.987_569_1e-4,
                1.398_2e-3,
                8.333_452e-3,
                4.166_579_6e-2,
                1.666_666_5e-1,
                5e-1,
            ],
        );
        let r2 = self.fop("fmul", &r, &r);
        let pr2 = self.fop("fmul", &p, &r2);
        let s0 = self.fop("fadd", &pr2, &r);
        let one = self.fc(1.0);
        let s = self.fop("fadd", &s0, &one);
        // 2^n (n in [-150, 128]) as two normal factors 2^n1 · 2^n2,
        // n1 = ⌊n/2⌋: neither overflows the exponent field, the first
        // product is exact and the second rounds once (onto the subnormal
        // grid when the result is subnormal).
        let ni = self.ins(format!("fptosi float {n} to i32"));
        let n1 = self.ins(format!("ashr i32 {ni}, 1"));
        let n2 = self.ins(format!("sub i32 {ni}, {n1}"));
        let mut y1 = s;
        for k in [n1, n2] {
            let e = self.ins(format!("add i32 {k}, 127"));
            let eb = self.ins(format!("shl i32 {e}, 23"));
            let sc = self.ins(format!("bitcast i32 {eb} to float"));
            y1 = self.fop("fmul", &y1, &sc);
        }
        let under = self.ins(format!("fcmp olt float {x}, {lo}"));
        let zero = self.fc(0.0);
        let y2 = self.ins(format!("select i1 {under}, float {zero}, float {y1}"));
        let over = self.ins(format!("fcmp ogt float {x}, {hi}"));
        let inf = self.fc(f32::INFINITY);
        let y3 = self.ins(format!("select i1 {over}, float {inf}, float {y2}"));
        let nan = self.ins(format!("fcmp uno float {x}, {x}"));
        self.ins(format!("select i1 {nan}, float {x}, float {y3}"))
    }

    fn fcall2(&mut self, name: &str, a: &str, b: &str) -> String {
        self.ins(format!("call float @llvm.{name}.f32(float {a}, float {b})"))
    }

    /// Fast f32 `ln` (Cephes `logf`). Error bound: ≤ 2 ulp relative plus
    /// 1e-7 absolute near x = 1 (where ln x crosses 0), subnormal x
    /// included (scaled by 2²³ first); x < 0 → NaN, ±0 → −∞, +∞ → +∞.
    fn fast_log(&mut self, x: &str) -> String {
        // Subnormals: scale by 2^23 first.
        let tiny = self.fc(f32::MIN_POSITIVE);
        let is_sub = self.ins(format!("fcmp olt float {x}, {tiny}"));
        let big = self.fc(8_388_608.0);
        let xs = self.fop("fmul", x, &big);
        let xv = self.ins(format!("select i1 {is_sub}, float {xs}, float {x}"));
        let eadj = self.ins(format!("select i1 {is_sub}, i32 -23, i32 0"));
        let b = self.ins(format!("bitcast float {xv} to i32"));
        let eb = self.ins(format!("lshr i32 {b}, 23"));
        let e0 = self.ins(format!("sub i32 {eb}, 126"));
        let e1 = self.ins(format!("add i32 {e0}, {eadj}"));
        let mb0 = self.ins(format!("and i32 {b}, 8388607"));
        let mb = self.ins(format!("or i32 {mb0}, 1056964608"));
        let m = self.ins(format!("bitcast i32 {mb} to float"));
        let sqrthf = self.fc(std::f32::consts::FRAC_1_SQRT_2);
        let lt = self.ins(format!("fcmp olt float {m}, {sqrthf}"));
        let one = self.fc(1.0);
        let m2 = self.fop("fadd", &m, &m);
        let xa = self.fop("fsub", &m2, &one);
        let xb = self.fop("fsub", &m, &one);
        let f = self.ins(format!("select i1 {lt}, float {xa}, float {xb}"));
        let edec = self.ins(format!("sub i32 {e1}, 1"));
        let ei = self.ins(format!("select i1 {lt}, i32 {edec}, i32 {e1}"));
        let e = self.ins(format!("sitofp i32 {ei} to float"));
        let z = self.fop("fmul", &f, &f);
        let p = self.horner(
            &f,
            &[
                7.037_683_6e-2,
                -1.151_461e-1,
                1.167_699_9e-1,
                -1.242_014_1e-1,
                1.424_932_3e-1,
                -1.666_805_8e-1,
                2.000_071_4e-1,
                -2.499_999_4e-1,
                3.333_333e-1,
            ],
        );
        let pf = self.fop("fmul", &p, &f);
        let y0 = self.fop("fmul", &pf, &z);
        let c1 = self.fc(-2.121_944_4e-4);
        let ec1 = self.fop("fmul", &e, &c1);
        let y1 = self.fop("fadd", &y0, &ec1);
        let half = self.fc(-0.5);
        let hz = self.fop("fmul", &z, &half);
        let y2 = self.fop("fadd", &y1, &hz);
        let r0 = self.fop("fadd", &f, &y2);
        let c2 = self.fc(0.693_359_4);
        let ec2 = self.fop("fmul", &e, &c2);
        let r = self.fop("fadd", &r0, &ec2);
        let zero = self.fc(0.0);
        let iszero = self.ins(format!("fcmp oeq float {x}, {zero}"));
        let ninf = self.fc(f32::NEG_INFINITY);
        let r1 = self.ins(format!("select i1 {iszero}, float {ninf}, float {r}"));
        let inf = self.fc(f32::INFINITY);
        let isinf = self.ins(format!("fcmp oeq float {x}, {inf}"));
        let r2 = self.ins(format!("select i1 {isinf}, float {inf}, float {r1}"));
        let bad = self.ins(format!("fcmp ult float {x}, {zero}"));
        let nan = self.fc(f32::NAN);
        let isnan = self.ins(format!("fcmp uno float {x}, {x}"));
        let r3 = self.ins(format!("select i1 {bad}, float {nan}, float {r2}"));
        self.ins(format!("select i1 {isnan}, float {x}, float {r3}"))
    }

    /// Fast f32 `tanh` (Cephes `tanhf`: odd polynomial below 0.625,
    /// `1 − 2/(e^{2|x|}+1)` above). Error bound: relative ≤ 2 ulp below
    /// 0.625 (subnormals: tanh x = x exactly), absolute ≤ 3e-7 above (the
    /// [`Self::fast_exp`] error through `2/(e+1)`); ±1 at ±∞, NaN kept.
    fn fast_tanh(&mut self, x: &str) -> String {
        let ax = self.fcall1("fabs", x);
        let z = self.fop("fmul", x, x);
        let p = self.horner(
            &z,
            &[
                -5.704_988_7e-3,
                2.063_909e-2,
                -5.373_971_6e-2,
                1.333_144_2e-1,
                -3.333_328e-1,
            ],
        );
        let pz = self.fop("fmul", &p, &z);
        let pzx = self.fop("fmul", &pz, x);
        let small = self.fop("fadd", &pzx, x);
        let two = self.fc(2.0);
        let a2 = self.fop("fmul", &ax, &two);
        let ex = self.fast_exp(&a2);
        let one = self.fc(1.0);
        let d = self.fop("fadd", &ex, &one);
        let q = self.fop("fdiv", &two, &d);
        let l = self.fop("fsub", &one, &q);
        let large = self.fcall2("copysign", &l, x);
        let c = self.fc(0.625);
        let is_small = self.ins(format!("fcmp olt float {ax}, {c}"));
        self.ins(format!(
            "select i1 {is_small}, float {small}, float {large}"
        ))
    }

    /// Fast f32 `erf`: the rational approximation on [-4, 4] used by Eigen
    /// (`generic_fast_erf_float`); error bound ≤ 2 ulp plus 1e-7 absolute
    /// (within [`crate::TOLERANCE`]; the dense sweep in the differential
    /// tests checks it). Exactly ±1 for |x| ≥ 4, where the true value
    /// rounds to ±1 in f32 (1 − erf 4 ≈ 1.5e-8 < 2⁻²⁵), ±∞ included; NaN kept.
    fn fast_erf(&mut self, x: &str) -> String {
        let hi = self.fc(4.0);
        let lo = self.fc(-4.0);
        let a0 = self.fcall2("minnum", x, &hi);
        let xc = self.fcall2("maxnum", &a0, &lo);
        let x2 = self.fop("fmul", &xc, &xc);
        let p = self.horner(
            &x2,
            &[
                -2.726_142_3e-10,
                2.770_681_4e-8,
                -2.101_024e-6,
                -5.692_506_4e-5,
                -7.349_906_3e-4,
                -2.954_6e-3,
                -1.609_603_3e-2,
            ],
        );
        let px = self.fop("fmul", &p, &xc);
        let q = self.horner(
            &x2,
            &[
                -1.456_607_2e-5,
                -2.133_740_6e-4,
                -1.682_827e-3,
                -7.373_329_2e-3,
                -1.426_474e-2,
            ],
        );
        let r = self.fop("fdiv", &px, &q);
        let ax = self.fcall1("fabs", x);
        let sat = self.ins(format!("fcmp oge float {ax}, {hi}"));
        let one = self.fc(1.0);
        let pm1 = self.fcall2("copysign", &one, x);
        let r = self.ins(format!("select i1 {sat}, float {pm1}, float {r}"));
        let nan = self.ins(format!("fcmp uno float {x}, {x}"));
        self.ins(format!("select i1 {nan}, float {x}, float {r}"))
    }

    fn unary(&mut self, op: UnaryOp, dt: Dtype, x: &str) -> String {
        use UnaryOp as U;
        if dt.is_bool() {
            return self.ins(format!("xor i1 {x}, true"));
        }
        if dt.is_int() {
            let ty = cty(dt);
            let r = match op {
                U::Neg => self.ins(format!("sub {ty} 0, {x}")),
                U::Abs => {
                    let n = self.ins(format!("sub {ty} 0, {x}"));
                    let c = self.ins(format!("icmp slt {ty} {x}, 0"));
                    self.ins(format!("select i1 {c}, {ty} {n}, {ty} {x}"))
                }
                _ => {
                    let c = self.ins(format!("icmp sgt {ty} {x}, 0"));
                    self.ins(format!("select i1 {c}, {ty} {x}, {ty} 0"))
                }
            };
            return self.round(dt, &r);
        }
        let fast = self.opts.fast_math && dt == Dtype::F32;
        let r = match op {
            // Sign operations: the NaN keeps its payload, takes the op's
            // sign and is quieted (Section 2 §3).
            U::Neg | U::Abs => {
                let r = if op == U::Neg {
                    self.ins(format!("fneg float {x}"))
                } else {
                    self.fcall1("fabs", x)
                };
                let q = self.quiet(&r);
                return self.round(dt, &q);
            }
            // relu x = maximum(x, +0) (Section 2 §3): relu(−0) = +0.
            U::Relu => {
                let zero = self.fc(0.0);
                let r = self.extremum(true, x, &zero);
                return self.round(dt, &r);
            }
            U::Sqrt => self.fcall1("sqrt", x),
            U::Recip => {
                let one = self.fc(1.0);
                self.fop("fdiv", &one, x)
            }
            U::Floor => self.fcall1("floor", x),
            U::Ceil => self.fcall1("ceil", x),
            U::Round => self.fcall1("rint", x),
            U::Rsqrt => {
                // Exactly the interpreter's `1.0 / (x as f64).sqrt()` rounded to f32.
                let d = self.ins(format!("fpext float {x} to double"));
                let s = self.ins(format!("call double @llvm.sqrt.f64(double {d})"));
                let q = self.ins(format!("fdiv double 1.0, {s}"));
                self.ins(format!("fptrunc double {q} to float"))
            }
            U::Exp if fast => self.fast_exp(x),
            U::Log if fast => self.fast_log(x),
            U::Tanh if fast => self.fast_tanh(x),
            // With e = e^{−|x|} ∈ [0, 1] (never overflows): 1/(1 + e) for
            // x ≥ 0, e/(1 + e) for x < 0. Error bound: relative ≤ 3 ulp
            // (3.6e-7) where the result is normal; in the far left tail
            // (x < −87.3) the result is e itself, subnormal, within 2⁻¹⁴⁸;
            // exactly 0 at −∞ (and below −104), 1 at +∞.
            U::Sigmoid if fast => {
                let ax = self.fcall1("fabs", x);
                let n = self.ins(format!("fneg float {ax}"));
                let e = self.fast_exp(&n);
                let one = self.fc(1.0);
                let d = self.fop("fadd", &one, &e);
                let zero = self.fc(0.0);
                let neg = self.ins(format!("fcmp olt float {x}, {zero}"));
                let num = self.ins(format!("select i1 {neg}, float {e}, float {one}"));
                self.fop("fdiv", &num, &d)
            }
            U::Erf if fast => self.fast_erf(x),
            // x·½·(1 + erf(x/√2)) with fast_erf. Error bound: relative ≤ 4
            // ulp (4.8e-7) plus absolute 1e-6 (erf's absolute error times
            // ½|x|, |x| ≤ 5.5, where 1 + erf cancels); −0 below −5.5 (the
            // true value is above −1.1e-7 there), NaN at −∞ (∞ · 0, as the
            // interpreter's formula gives).
            U::Gelu if fast => {
                let k = self.fc(std::f32::consts::FRAC_1_SQRT_2);
                let xs = self.fop("fmul", x, &k);
                let e = self.fast_erf(&xs);
                let one = self.fc(1.0);
                let s = self.fop("fadd", &one, &e);
                let half = self.fc(0.5);
                let hx = self.fop("fmul", x, &half);
                let g = self.fop("fmul", &hx, &s);
                // Far left tail: 1 + erf cancels; gelu(x) < 1e-7 in magnitude there.
                let lim = self.fc(-5.5);
                let tail = self.ins(format!("fcmp olt float {x}, {lim}"));
                let zero = self.fc(0.0);
                let z = self.fop("fmul", x, &zero);
                self.ins(format!("select i1 {tail}, float {z}, float {g}"))
            }
            _ => {
                let c = unary_code(op);
                self.ins(format!("call float @tc_unary_exact(i32 {c}, float {x})"))
            }
        };
        let r = self.nan_result(&r, &[x]);
        self.round(dt, &r)
    }

    fn binary(&mut self, op: BinaryOp, dt: Dtype, a: &str, b: &str) -> String {
        use BinaryOp as B;
        let ty = cty(dt);
        if dt.is_bool() {
            return match op {
                B::And => self.ins(format!("and i1 {a}, {b}")),
                B::Or => self.ins(format!("or i1 {a}, {b}")),
                B::Xor => self.ins(format!("xor i1 {a}, {b}")),
                B::Eq => self.ins(format!("icmp eq i1 {a}, {b}")),
                B::Ne => self.ins(format!("icmp ne i1 {a}, {b}")),
                B::Lt => self.ins(format!("icmp ult i1 {a}, {b}")),
                B::Le => self.ins(format!("icmp ule i1 {a}, {b}")),
                B::Gt => self.ins(format!("icmp ugt i1 {a}, {b}")),
                _ => self.ins(format!("icmp uge i1 {a}, {b}")),
            };
        }
        if dt.is_int() {
            let r = match op {
                B::Add => self.ins(format!("add {ty} {a}, {b}")),
                B::Sub => self.ins(format!("sub {ty} {a}, {b}")),
                B::Mul => self.ins(format!("mul {ty} {a}, {b}")),
                B::Div | B::Rem => {
                    // ÷0 = 0; MIN ÷ −1 wraps (Section 2 §3); no UB divisor reaches sdiv.
                    let z = self.ins(format!("icmp eq {ty} {b}, 0"));
                    let m1 = self.ins(format!("icmp eq {ty} {b}, -1"));
                    let bad = self.ins(format!("or i1 {z}, {m1}"));
                    let safe = self.ins(format!("select i1 {bad}, {ty} 1, {ty} {b}"));
                    if op == B::Div {
                        let q = self.ins(format!("sdiv {ty} {a}, {safe}"));
                        let n = self.ins(format!("sub {ty} 0, {a}"));
                        let q1 = self.ins(format!("select i1 {m1}, {ty} {n}, {ty} {q}"));
                        self.ins(format!("select i1 {z}, {ty} 0, {ty} {q1}"))
                    } else {
                        let r = self.ins(format!("srem {ty} {a}, {safe}"));
                        self.ins(format!("select i1 {bad}, {ty} 0, {ty} {r}"))
                    }
                }
                B::Max => {
                    let c = self.ins(format!("icmp sgt {ty} {a}, {b}"));
                    self.ins(format!("select i1 {c}, {ty} {a}, {ty} {b}"))
                }
                B::Min => {
                    let c = self.ins(format!("icmp slt {ty} {a}, {b}"));
                    self.ins(format!("select i1 {c}, {ty} {a}, {ty} {b}"))
                }
                B::Eq => return self.ins(format!("icmp eq {ty} {a}, {b}")),
                B::Ne => return self.ins(format!("icmp ne {ty} {a}, {b}")),
                B::Lt => return self.ins(format!("icmp slt {ty} {a}, {b}")),
                B::Le => return self.ins(format!("icmp sle {ty} {a}, {b}")),
                B::Gt => return self.ins(format!("icmp sgt {ty} {a}, {b}")),
                B::Ge => return self.ins(format!("icmp sge {ty} {a}, {b}")),
                _ => return "0".into(),
            };
            return self.round(dt, &r);
        }
        let r = match op {
            B::Add => self.fop("fadd", a, b),
            B::Sub => self.fop("fsub", a, b),
            B::Mul => self.fop("fmul", a, b),
            B::Div => self.fop("fdiv", a, b),
            B::Max | B::Min => {
                let m = self.extremum(op == B::Max, a, b);
                return self.round(dt, &m);
            }
            B::Pow => self.ins(format!("call float @tc_pow_exact(float {a}, float {b})")),
            B::Eq => return self.ins(format!("fcmp oeq float {a}, {b}")),
            B::Ne => return self.ins(format!("fcmp une float {a}, {b}")),
            B::Lt => return self.ins(format!("fcmp olt float {a}, {b}")),
            B::Le => return self.ins(format!("fcmp ole float {a}, {b}")),
            B::Gt => return self.ins(format!("fcmp ogt float {a}, {b}")),
            B::Ge => return self.ins(format!("fcmp oge float {a}, {b}")),
            _ => return self.fc(0.0),
        };
        let r = self.nan_result(&r, &[a, b]);
        self.round(dt, &r)
    }

    /// `cast[to]` on a computed element of dtype `from` (Section 2 §5).
    fn cast(&mut self, from: Dtype, to: Dtype, x: &str) -> String {
        if from.is_float() && to.is_float() {
            // `cast_value`: a NaN operand is quieted (Section 2 §3), also
            // for a same-dtype cast.
            let q = self.quiet(x);
            return self.round(to, &q);
        }
        if from == to {
            return x.to_string();
        }
        let (ft, tt) = (cty(from), cty(to));
        if from.is_float() {
            if to.is_bool() {
                let z = self.fc(0.0);
                return self.ins(format!("fcmp une float {x}, {z}"));
            }
            // Truncate toward zero, saturate, NaN → 0 (Rust `as`).
            let r = self.ins(format!("call {tt} @llvm.fptosi.sat.{tt}.f32(float {x})"));
            if to == Dtype::I4 {
                let lo = self.ins(format!("icmp slt i8 {r}, -8"));
                let r1 = self.ins(format!("select i1 {lo}, i8 -8, i8 {r}"));
                let hi = self.ins(format!("icmp sgt i8 {r1}, 7"));
                return self.ins(format!("select i1 {hi}, i8 7, i8 {r1}"));
            }
            return r;
        }
        if from.is_bool() {
            if to.is_float() {
                return self.ins(format!("uitofp i1 {x} to float"));
            }
            return self.ins(format!("zext i1 {x} to {tt}"));
        }
        // From an int.
        if to.is_bool() {
            return self.ins(format!("icmp ne {ft} {x}, 0"));
        }
        if to.is_float() {
            if to == Dtype::F32 {
                return self.ins(format!("sitofp {ft} {x} to float"));
            }
            if matches!(from, Dtype::I8 | Dtype::I4 | Dtype::I16) {
                // Exact in f32, so one rounding into the narrow dtype.
                let f = self.ins(format!("sitofp {ft} {x} to float"));
                return self.round(to, &f);
            }
            let w = if ft == "i64" {
                x.to_string()
            } else {
                self.ins(format!("sext {ft} {x} to i64"))
            };
            let c = dtype_code(to);
            return self.ins(format!("call float @tc_int_to_float(i32 {c}, i64 {w})"));
        }
        // int → int: sign-extend or keep the low bits.
        let bits = |t: &str| t[1..].parse::<u32>().unwrap_or(64);
        let r = if bits(ft) < bits(tt) {
            self.ins(format!("sext {ft} {x} to {tt}"))
        } else if bits(ft) > bits(tt) {
            self.ins(format!("trunc {ft} {x} to {tt}"))
        } else {
            x.to_string()
        };
        if to == Dtype::I4 {
            return self.round(Dtype::I4, &r);
        }
        r
    }

    /// The element of `v` at `idx`, in its computation type.
    fn val(&mut self, v: Value, idx: &Idx) -> String {
        let key = format!("{}|{:?}|{:?}", v.0, idx.dims, idx.lin);
        if let Some(r) = self.memo.get(&key) {
            return r.clone();
        }
        let r = self.val_uncached(v, idx);
        self.memo.insert(key, r.clone());
        r
    }

    fn val_uncached(&mut self, v: Value, idx: &Idx) -> String {
        let i = v.0 as usize;
        if let Some((x, m)) = self.stashed {
            if x == v.0 {
                // Same shape as `m`: the same linear index.
                let off = match &idx.lin {
                    Some(l) => l.clone(),
                    None => {
                        let d = idx.dims.clone().unwrap_or_default();
                        self.ravel(m, &d)
                    }
                };
                return self.load(m, &off);
            }
        }
        if i < self.np || (self.st.mat[i] && self.root != Some(v.0)) {
            let off = match &idx.lin {
                Some(l) => l.clone(),
                None => {
                    let d = idx.dims.clone().unwrap_or_default();
                    self.ravel(v, &d)
                }
            };
            return self.load(v, &off);
        }
        let func = self.func;
        let op = &func.body[i - self.np].op;
        let dt = self.vals[i].dtype;
        match op {
            Op::Unary(u, x) => {
                let a = self.val(*x, idx);
                self.unary(*u, dt, &a)
            }
            Op::Cast(to, x) => {
                let from = self.vals[x.0 as usize].dtype;
                let a = self.val(*x, idx);
                self.cast(from, *to, &a)
            }
            Op::Binary(o, a, b) => {
                let odt = self.vals[a.0 as usize].dtype;
                let x = self.val(*a, idx);
                let y = self.val(*b, idx);
                self.binary(*o, odt, &x, &y)
            }
            Op::ScalarBinary {
                op,
                x,
                s,
                scalar_left,
            } => {
                let odt = self.vals[x.0 as usize].dtype;
                let a = self.val(*x, idx);
                let c = self.scalar(s, odt);
                if *scalar_left {
                    self.binary(*op, odt, &c, &a)
                } else {
                    self.binary(*op, odt, &a, &c)
                }
            }
            Op::Select(c, a, b) => {
                let cv = self.val(*c, idx);
                let x = self.val(*a, idx);
                let y = self.val(*b, idx);
                let ty = cty(dt);
                self.ins(format!("select i1 {cv}, {ty} {x}, {ty} {y}"))
            }
            Op::Fill(fdt, _, s) => self.scalar(s, *fdt),
            Op::Iota(idt, _, axis) => {
                let d = self.dims_of(v, idx);
                let k = d[*axis].clone();
                let kv = if is_lit(&k).is_some() {
                    k
                } else {
                    self.ins(format!("add i64 {k}, 0"))
                };
                self.cast(Dtype::I64, *idt, &kv)
            }
            Op::Reshape(_, x) => {
                let lin = match &idx.lin {
                    Some(l) => l.clone(),
                    None => {
                        let d = idx.dims.clone().unwrap_or_default();
                        self.ravel(v, &d)
                    }
                };
                self.val(
                    *x,
                    &Idx {
                        dims: None,
                        lin: Some(lin),
                    },
                )
            }
            Op::Transpose(perm, x) => {
                let d = self.dims_of(v, idx);
                let mut src = vec![String::new(); perm.len()];
                for (j, &p) in perm.iter().enumerate() {
                    src[p] = d[j].clone();
                }
                self.val(
                    *x,
                    &Idx {
                        dims: Some(src),
                        lin: None,
                    },
                )
            }
            Op::Broadcast(_, x) => {
                let d = self.dims_of(v, idx);
                let n = self.vals[x.0 as usize].shape.len();
                let m = d.len();
                let mut src = Vec::with_capacity(n);
                for k in 0..n {
                    let sd = self.dim(*x, k);
                    let s = match is_lit(&sd) {
                        Some(1) => "0".to_string(),
                        Some(_) => d[m - n + k].clone(),
                        None => {
                            let one = self.pins(format!("icmp eq i64 {sd}, 1"));
                            self.ins(format!("select i1 {one}, i64 0, i64 {}", d[m - n + k]))
                        }
                    };
                    src.push(s);
                }
                self.val(
                    *x,
                    &Idx {
                        dims: Some(src),
                        lin: None,
                    },
                )
            }
            Op::Slice { axis, x, .. } => {
                let mut d = self.dims_of(v, idx);
                let s = self.q(QKey::SliceStart(v.0));
                d[*axis] = self.badd(&d[*axis], &s);
                self.val(
                    *x,
                    &Idx {
                        dims: Some(d),
                        lin: None,
                    },
                )
            }
            Op::Concat(axis, xs) => self.concat(v, *axis, xs, idx),
            Op::Matmul(..)
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Call(..)
            | Op::Dim(_) => {
                // Always materialized (a dim value is read by calls only,
                // `ir::verify_structure`); unreachable by construction.
                self.load(v, "0")
            }
        }
    }

    /// Element `idx` of `v = concat(axis, xs)` (§5.10). An operand whose
    /// concat dim is 0 is never read: its buffer may be empty (issue 10
    /// item 5: clamping into `[0, dk − 1]` read index −1). With every dim a
    /// literal (σ-specialised), empty operands are dropped at generation
    /// time and the rest stay branch-free (each read clamped into its
    /// operand, one selected: the loop vectorizes). With run-time dims
    /// (the shape-generic kernel) each operand is read in its own branch,
    /// only when the index falls inside it.
    fn concat(&mut self, v: Value, axis: usize, xs: &[Value], idx: &Idx) -> String {
        let d = self.dims_of(v, idx);
        let dks: Vec<String> = xs.iter().map(|x| self.dim(*x, axis)).collect();
        if dks.iter().any(|dk| is_lit(dk).is_none()) {
            return self.concat_branches(v, axis, xs, &dks, &d);
        }
        let dt = self.vals[v.0 as usize].dtype;
        let ty = cty(dt);
        let j = d[axis].clone();
        let mut off = "0".to_string();
        let mut parts = Vec::new();
        for (x, dk) in xs.iter().zip(&dks) {
            if is_lit(dk) == Some(0) {
                continue;
            }
            let local = self.bsub(&j, &off);
            // Clamp into [0, dk − 1] (dk ≥ 1 here): every non-empty operand
            // is read, only one is selected.
            let neg = self.ins(format!("icmp slt i64 {local}, 0"));
            let l0 = self.ins(format!("select i1 {neg}, i64 0, i64 {local}"));
            let last = self.padd(dk, "-1");
            let big = self.ins(format!("icmp sgt i64 {l0}, {last}"));
            let l1 = self.ins(format!("select i1 {big}, i64 {last}, i64 {l0}"));
            let mut sd = d.clone();
            sd[axis] = l1;
            let e = self.val(
                *x,
                &Idx {
                    dims: Some(sd),
                    lin: None,
                },
            );
            let end = self.padd(&off, dk);
            parts.push((e, end.clone()));
            off = end;
        }
        let Some((last, _)) = parts.last().cloned() else {
            // Every operand empty: so is the output, nothing runs this.
            return self.zero_of(dt);
        };
        let mut acc = last;
        for (e, end) in parts.iter().rev().skip(1) {
            let c = self.ins(format!("icmp slt i64 {j}, {end}"));
            acc = self.ins(format!("select i1 {c}, {ty} {e}, {ty} {acc}"));
        }
        acc
    }

    /// [`Self::concat`] with run-time dims: a chain of branches, operand k
    /// computed only when `off_k ≤ j < off_k + dk`, merged by a phi. Values
    /// computed inside a branch do not dominate the code after it, so the
    /// memo is restored after each branch.
    fn concat_branches(
        &mut self,
        v: Value,
        axis: usize,
        xs: &[Value],
        dks: &[String],
        d: &[String],
    ) -> String {
        let dt = self.vals[v.0 as usize].dtype;
        let ty = cty(dt);
        let j = d[axis].clone();
        let l = self.label();
        let saved = self.memo.clone();
        let mut off = "0".to_string();
        let mut incoming = Vec::new();
        for (k, (x, dk)) in xs.iter().zip(dks).enumerate() {
            let end = self.padd(&off, dk);
            let inside = self.ins(format!("icmp slt i64 {j}, {end}"));
            self.e(format!(
                "br i1 {inside}, label %Cb{l}.{k}, label %Cn{l}.{k}"
            ));
            let _ = writeln!(self.body, "Cb{l}.{k}:");
            let local = self.bsub(&j, &off);
            let mut sd = d.to_vec();
            sd[axis] = local;
            let e = self.val(
                *x,
                &Idx {
                    dims: Some(sd),
                    lin: None,
                },
            );
            self.e(format!("br label %Ce{l}.{k}"));
            let _ = writeln!(self.body, "Ce{l}.{k}:");
            self.e(format!("br label %Cm{l}"));
            incoming.push(format!("[ {e}, %Ce{l}.{k} ]"));
            self.memo = saved.clone();
            let _ = writeln!(self.body, "Cn{l}.{k}:");
            off = end;
        }
        // Past every operand: unreachable for an index inside the output.
        let z = self.zero_of(dt);
        self.e(format!("br label %Cm{l}"));
        incoming.push(format!("[ {z}, %Cn{l}.{} ]", xs.len() - 1));
        let _ = writeln!(self.body, "Cm{l}:");
        self.ins(format!("phi {ty} {}", incoming.join(", ")))
    }

    /// The zero of `dt`'s computation type, as an operand.
    fn zero_of(&mut self, dt: Dtype) -> String {
        match cty(dt) {
            "float" => self.fc(0.0),
            "i1" => "false".into(),
            _ => "0".into(),
        }
    }

    // ---- loops -----------------------------------------------------------

    fn label(&mut self) -> usize {
        self.lbl += 1;
        self.lbl
    }

    /// Open `for iv in lo..hi`; returns (iv, loop id).
    fn loop_begin(&mut self, lo: &str, hi: &str) -> (String, usize) {
        let l = self.label();
        let _ = writeln!(self.pre, "  %iv{l}.addr = alloca i64, align 8");
        self.e(format!("store i64 {lo}, i64* %iv{l}.addr, align 8"));
        self.e(format!("br label %L{l}.h"));
        let _ = writeln!(self.body, "L{l}.h:");
        self.e(format!("%iv{l} = load i64, i64* %iv{l}.addr, align 8"));
        self.e(format!("%c{l} = icmp slt i64 %iv{l}, {hi}"));
        self.e(format!("br i1 %c{l}, label %L{l}.b, label %L{l}.e"));
        let _ = writeln!(self.body, "L{l}.b:");
        self.memo.clear();
        (format!("%iv{l}"), l)
    }

    fn loop_end(&mut self, l: usize) {
        self.e(format!("%iv{l}.n = add nuw nsw i64 %iv{l}, 1"));
        self.e(format!("store i64 %iv{l}.n, i64* %iv{l}.addr, align 8"));
        self.e(format!("br label %L{l}.h"));
        let _ = writeln!(self.body, "L{l}.e:");
        self.memo.clear();
    }

    // ---- kernels -----------------------------------------------------------

    fn is_flat(&self, v: Value, root: bool) -> bool {
        let i = v.0 as usize;
        if i < self.np || (self.st.mat[i] && !root) {
            return true;
        }
        let op = &self.func.body[i - self.np].op;
        match op {
            Op::Broadcast(..)
            | Op::Transpose(..)
            | Op::Slice { .. }
            | Op::Concat(..)
            | Op::Iota(..) => false,
            Op::Reduce { .. } | Op::ArgReduce { .. } => false,
            _ => op.operands().iter().all(|o| self.is_flat(*o, false)),
        }
    }

    fn kernel(&mut self, id: usize, out: Value, inputs: &[Value]) -> KernelShape {
        let all: Vec<Value> = std::iter::once(out).chain(inputs.iter().copied()).collect();
        let params = self.setup(&all, 1);
        let _ = writeln!(self.body, "b0:");
        let np = self.np;
        let func = self.func;
        let op = &func.body[out.0 as usize - np].op;
        let shape = match op {
            Op::Reduce {
                op: rop,
                axes,
                keepdims,
                x,
            } => {
                if let Some(block) = self.col_block(axes, *x) {
                    self.reduce_cols(out, *rop, axes, *keepdims, *x, block);
                    KernelShape::Cols { block }
                } else {
                    self.reduce_body(out, *rop, axes, *keepdims, *x);
                    KernelShape::Reduce
                }
            }
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                x,
            } => {
                self.argreduce_body(out, *max, *axis, *keepdims, *x);
                KernelShape::Reduce
            }
            _ => {
                if self.is_flat(out, true) {
                    let (o, l) = self.loop_begin("%start", "%end");
                    let idx = Idx {
                        dims: None,
                        lin: Some(o.clone()),
                    };
                    let x = self.val_root(out, &idx);
                    self.store(out, &o, &x);
                    self.loop_end(l);
                    KernelShape::Flat
                } else {
                    let (o, l) = self.loop_begin("%start", "%end");
                    self.nested_row(out, &o);
                    self.loop_end(l);
                    KernelShape::Nested
                }
            }
        };
        self.e("ret void".into());
        self.finish_fn(id, &params);
        shape
    }

    /// Row `o` of a nested elementwise kernel writing `out`: the inner loop
    /// over its last axis.
    fn nested_row(&mut self, out: Value, o: &str) {
        let r = self.vals[out.0 as usize].shape.len();
        if r == 0 {
            let idx = Idx {
                dims: Some(vec![]),
                lin: Some("0".into()),
            };
            let x = self.val_root(out, &idx);
            self.store(out, "0", &x);
            return;
        }
        // Unravel the outer index over dims[0..r-1].
        let mut dims = vec![String::new(); r];
        let mut rest = o.to_string();
        for k in (0..r - 1).rev() {
            let d = self.dim(out, k);
            if k == 0 {
                dims[k] = rest.clone();
            } else {
                dims[k] = self.ins(format!("urem i64 {rest}, {d}"));
                rest = self.ins(format!("udiv i64 {rest}, {d}"));
            }
        }
        let inner = self.dim(out, r - 1);
        let base = self.bmul(o, &inner);
        let (j, l2) = self.loop_begin("0", &inner);
        dims[r - 1] = j.clone();
        let lin = self.badd(&base, &j);
        let idx = Idx {
            dims: Some(dims),
            lin: Some(lin.clone()),
        };
        let x = self.val_root(out, &idx);
        self.store(out, &lin, &x);
        self.loop_end(l2);
    }

    /// A row group ([`Step::Group`]): one loop over rows; per row, every
    /// member's row in order (reductions first write their row, later
    /// members read it while the row's inputs are still in L1).
    fn group_kernel(&mut self, id: usize, members: &[Value], inputs: &[Value]) -> KernelShape {
        let all: Vec<Value> = members.iter().chain(inputs.iter()).copied().collect();
        let params = self.setup(&all, members.len());
        let _ = writeln!(self.body, "b0:");
        let (o, l) = self.loop_begin("%start", "%end");
        let np = self.np;
        let func = self.func;
        let stashes = self.group_stashes(members);
        for &m in members {
            self.memo.clear();
            match &func.body[m.0 as usize - np].op {
                Op::Reduce {
                    op: rop,
                    axes,
                    keepdims,
                    x,
                } => {
                    self.stash = stashes.iter().find(|(r, _, _)| *r == m).map(|s| (s.1, s.2));
                    self.reduce_row(m, *rop, axes, *keepdims, *x, &o);
                    self.stash = None;
                }
                _ => {
                    self.stashed = stashes.iter().find(|s| s.2 == m).map(|s| (s.1, s.2));
                    self.nested_row(m, &o);
                    self.stashed = None;
                }
            }
        }
        self.loop_end(l);
        self.e("ret void".into());
        self.finish_fn(id, &params);
        KernelShape::Rows
    }

    /// `(reduction member, x, later member)` triples of a row group where
    /// the reduction's operand `x` (computed, F32, reduced over its last
    /// axis only) is used elementwise — at the same index — by a later
    /// non-reduction member of the same shape: the reduction pass stores
    /// `x` into that member's row and the member reads it back (values are
    /// identical, so results are bit-identical to recomputing).
    fn group_stashes(&self, members: &[Value]) -> Vec<(Value, u32, Value)> {
        let np = self.np;
        let mut out: Vec<(Value, u32, Value)> = Vec::new();
        for (i, &r) in members.iter().enumerate() {
            let Op::Reduce { axes, x, .. } = &self.func.body[r.0 as usize - np].op else {
                continue;
            };
            let xi = x.0 as usize;
            let xs = &self.vals[xi].shape;
            if xi < np
                || self.st.mat[xi]
                || self.vals[xi].dtype != Dtype::F32
                || xs.is_empty()
                || axes.as_slice() != [xs.len() - 1]
            {
                continue;
            }
            for &m in &members[i + 1..] {
                let mi = m.0 as usize;
                if matches!(self.func.body[mi - np].op, Op::Reduce { .. })
                    || self.vals[mi].shape != *xs
                    || self.vals[mi].dtype != Dtype::F32
                    || out.iter().any(|s| s.2 == m)
                {
                    continue;
                }
                if self.elementwise_use(m, x.0, true) == Some(true) {
                    out.push((r, x.0, m));
                    break;
                }
            }
        }
        out
    }

    /// Whether computing `v` (unmaterialized ops below it) reads `x`:
    /// `Some(true)` only through elementwise ops (same index), `Some(false)`
    /// not at all, `None` also through an index-changing op.
    fn elementwise_use(&self, v: Value, x: u32, root: bool) -> Option<bool> {
        if v.0 == x {
            return Some(true);
        }
        let i = v.0 as usize;
        if i < self.np || (self.st.mat[i] && !root) {
            return Some(false);
        }
        let op = &self.func.body[i - self.np].op;
        let elementwise = matches!(
            op,
            Op::Unary(..)
                | Op::Binary(..)
                | Op::Cast(..)
                | Op::Select(..)
                | Op::ScalarBinary { .. }
        );
        let mut any = false;
        for a in op.operands() {
            match self.elementwise_use(a, x, false) {
                None => return None,
                Some(true) if !elementwise => return None,
                Some(u) => any |= u,
            }
        }
        Some(any)
    }

    /// Reset the per-function state and bind the buffer parameters (the
    /// first `writable` are written).
    fn setup(&mut self, all: &[Value], writable: usize) -> Vec<String> {
        self.pre.clear();
        self.body.clear();
        self.pmemo.clear();
        self.memo.clear();
        self.bufs.clear();
        let mut params = Vec::new();
        for (k, v) in all.iter().enumerate() {
            let st = sty(self.vals[v.0 as usize].dtype);
            if k < writable {
                params.push(format!("i8* noalias nocapture %a{k}"));
            } else {
                params.push(format!("i8* noalias nocapture readonly %a{k}"));
            }
            let p = if st == "i8" {
                format!("%a{k}")
            } else {
                let t = self.t();
                let _ = writeln!(self.pre, "  {t} = bitcast i8* %a{k} to {st}*");
                t
            };
            self.bufs.insert(v.0, p);
        }
        params
    }

    /// The root value computed (not loaded) even though it is materialized.
    fn val_root(&mut self, v: Value, idx: &Idx) -> String {
        self.root = Some(v.0);
        let r = self.val(v, idx);
        self.root = None;
        r
    }

    fn out_to_in(
        &mut self,
        out: Value,
        x: Value,
        red: &[usize],
        keepdims: bool,
        o: &str,
    ) -> Vec<String> {
        let od = self.unravel(out, o);
        let r = self.vals[x.0 as usize].shape.len();
        let mut src = vec![String::new(); r];
        let mut j = 0;
        for (a, s) in src.iter_mut().enumerate() {
            if red.contains(&a) {
                if keepdims {
                    j += 1;
                }
                continue;
            }
            *s = od[j].clone();
            j += 1;
        }
        src
    }

    fn reduce_body(&mut self, out: Value, rop: ReduceOp, axes: &[usize], keepdims: bool, x: Value) {
        let (o, l) = self.loop_begin("%start", "%end");
        self.reduce_row(out, rop, axes, keepdims, x, &o);
        self.loop_end(l);
    }

    /// The column block of a reduction that keeps its operand's last axis
    /// ([`KernelShape::Cols`]), or `None` for the one-element-at-a-time
    /// form ([`KernelShape::Reduce`]: the last axis is reduced, or it has
    /// one element in a σ-specialised kernel, where the reduced axes are
    /// then contiguous). The shape-generic kernel takes the column form
    /// too, with [`COL_BLOCK`] (its dims are run-time values).
    fn col_block(&self, axes: &[usize], x: Value) -> Option<usize> {
        let xs = &self.vals[x.0 as usize].shape;
        let r = xs.len();
        if r < 2 || axes.is_empty() || axes.contains(&(r - 1)) {
            return None;
        }
        if self.generic {
            return Some(COL_BLOCK);
        }
        let d = xs[r - 1];
        if d == 1 {
            return None;
        }
        if d == 0 {
            return Some(COL_BLOCK);
        }
        // Blocks of equal width (a multiple of 16 columns), so no tile is a
        // short tail. Threads split tiles (output rows × blocks), so a
        // single-row reduction of ≤ COL_BLOCK columns runs on one thread:
        // narrower blocks for more tiles were measured slower, on one
        // thread and on two (each row of `x` is then read in several
        // strided passes, and the fold is memory-bound either way).
        let nb = d.div_ceil(COL_BLOCK);
        if nb <= 1 {
            return Some(d);
        }
        Some((d.div_ceil(nb).div_ceil(16) * 16).min(d))
    }

    /// A reduction that keeps the last axis of its operand `x` (e.g. a sum
    /// over axis 0 of `[R, C]`, or over axis 1 of `[A, B, C]`), in the
    /// column form ([`KernelShape::Cols`]): per tile (an output row `o` and
    /// columns `jlo..jlo+n` of it, `n ≤ block`)
    ///
    /// ```text
    /// acc[0..n] = identity
    /// for each reduced index r (the axes in order, as the interpreter):
    ///     for j in 0..n:  acc[j] = acc[j] op f(x[o…, r…, jlo + j])
    /// out[o, jlo + j] = finish(acc[j])  (mean's division, rounding into the dtype)
    /// ```
    ///
    /// The inner loop walks the contiguous last axis of `x` and of the
    /// output: it vectorizes (one vector lane per output element), where
    /// the element-at-a-time form walks `x` with a stride. The fused
    /// producer `f` is computed inside the inner loop, as in every
    /// reduction kernel. `acc` is a stack row in the computation type
    /// (narrow floats accumulate in f32 and are rounded once at the end,
    /// ints wrap in their width, Bool in a byte), so the output buffer
    /// never holds a partial result.
    ///
    /// Order (Section 4 §5.5, §6): each output element is still folded
    /// sequentially over the reduced indices, in the row-major order of
    /// `axes` — the interpreter's order, and the element-at-a-time form's
    /// in deterministic mode — so results are bit-identical to both and
    /// deterministic mode stays deterministic. Vectorizing across output
    /// elements reassociates nothing, so this form needs no `reassoc` flag
    /// and is sequential in every mode (outside deterministic mode the
    /// element-at-a-time form may reassociate a float fold, which §6
    /// allows; this one does not). Threads split tiles, never a fold: the
    /// result does not depend on the thread count or the block width.
    fn reduce_cols(
        &mut self,
        out: Value,
        rop: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        x: Value,
        block: usize,
    ) {
        let dt = self.vals[x.0 as usize].dtype;
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { "i32" } else { cty(dt) };
        // Accumulator row in memory: Bool as bytes (an `i1` array does not vectorize).
        let mty = if ty == "i1" { "i8" } else { ty };
        let nan_tracked = dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min);
        let a = self.label();
        let arr = format!("[{block} x {mty}]");
        let _ = writeln!(self.pre, "  %acc{a} = alloca {arr}, align 64");
        let narr = format!("[{block} x i8]");
        if nan_tracked {
            let _ = writeln!(self.pre, "  %nan{a} = alloca {narr}, align 64");
        }
        let ro = self.vals[out.0 as usize].shape.len();
        let rx = self.vals[x.0 as usize].shape.len();
        let d = self.dim(out, ro - 1);
        let bl = block.to_string();
        // Blocks per output row.
        let nb = match is_lit(&d) {
            Some(dv) => (dv.max(0) as usize).div_ceil(block.max(1)).to_string(),
            None => {
                let t = self.pins(format!("add i64 {d}, {}", block - 1));
                self.pins(format!("udiv i64 {t}, {bl}"))
            }
        };
        let (t, lt) = self.loop_begin("%start", "%end");
        let (o, jlo) = if is_lit(&nb) == Some(1) {
            (t.clone(), "0".to_string())
        } else {
            let o = self.ins(format!("udiv i64 {t}, {nb}"));
            let b = self.ins(format!("urem i64 {t}, {nb}"));
            let jlo = self.bmul(&b, &bl);
            (o, jlo)
        };
        // Columns in this tile.
        let n = match (is_lit(&d), is_lit(&nb)) {
            (Some(dv), Some(1)) => dv.to_string(),
            (Some(dv), Some(nbv)) if dv == nbv * block as i64 => bl.clone(),
            _ => {
                let rem = self.bsub(&d, &jlo);
                let c = self.ins(format!("icmp slt i64 {rem}, {bl}"));
                self.ins(format!("select i1 {c}, i64 {rem}, i64 {bl}"))
            }
        };
        // Output row `o` over every output dim but the last; the operand's
        // kept axes from it.
        let mut od = vec![String::new(); ro];
        let mut rest = o.clone();
        for k in (0..ro - 1).rev() {
            let dk = self.dim(out, k);
            if k == 0 {
                od[k] = rest.clone();
            } else if is_lit(&dk) == Some(1) {
                od[k] = "0".into();
            } else {
                od[k] = self.ins(format!("urem i64 {rest}, {dk}"));
                rest = self.ins(format!("udiv i64 {rest}, {dk}"));
            }
        }
        let mut src = vec![String::new(); rx];
        let mut k = 0;
        for (ax, s) in src.iter_mut().enumerate() {
            if axes.contains(&ax) {
                if keepdims {
                    k += 1;
                }
                continue;
            }
            *s = od[k].clone();
            k += 1;
        }
        let elem = |g: &mut Self, base: &str, ty: &str, j: &str| -> String {
            g.ins(format!(
                "getelementptr inbounds [{block} x {ty}], [{block} x {ty}]* {base}{a}, i64 0, i64 {j}"
            ))
        };
        // acc[0..n] = identity.
        let init = self.reduce_init(rop, dt, keyed);
        let init = if mty != ty {
            if init == "true" { "1" } else { "0" }.to_string()
        } else {
            init
        };
        let (j, lj) = self.loop_begin("0", &n);
        let p = elem(self, "%acc", mty, &j);
        self.e(format!("store {mty} {init}, {mty}* {p}"));
        if nan_tracked {
            let q = elem(self, "%nan", "i8", &j);
            self.e(format!("store i8 0, i8* {q}"));
        }
        self.loop_end(lj);
        // The reduced axes, then the columns.
        let mut ls = Vec::new();
        for &ax in axes {
            let dax = self.dim(x, ax);
            let (iv, li) = self.loop_begin("0", &dax);
            src[ax] = iv;
            ls.push(li);
        }
        let (j, lj) = self.loop_begin("0", &n);
        src[rx - 1] = self.badd(&jlo, &j);
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        let p = elem(self, "%acc", mty, &j);
        let raw = self.ins(format!("load {mty}, {mty}* {p}"));
        let acc = if mty != ty {
            self.ins(format!("trunc {mty} {raw} to {ty}"))
        } else {
            raw
        };
        // Sequential per output element in every mode: no reassociation flags.
        let (nacc, isn) = self.reduce_combine(rop, dt, keyed, &acc, &e, "");
        if let Some(isn) = isn {
            let q = elem(self, "%nan", "i8", &j);
            let old = self.ins(format!("load i8, i8* {q}"));
            let z = self.ins(format!("zext i1 {isn} to i8"));
            let nn = self.ins(format!("or i8 {old}, {z}"));
            self.e(format!("store i8 {nn}, i8* {q}"));
        }
        let nacc = if mty != ty {
            self.ins(format!("zext {ty} {nacc} to {mty}"))
        } else {
            nacc
        };
        self.e(format!("store {mty} {nacc}, {mty}* {p}"));
        self.loop_end(lj);
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        // out[o, jlo + j] = finish(acc[j]).
        let row = self.bmul(&o, &d);
        let base = self.badd(&row, &jlo);
        let (j, lj) = self.loop_begin("0", &n);
        let p = elem(self, "%acc", mty, &j);
        let raw = self.ins(format!("load {mty}, {mty}* {p}"));
        let res = if mty != ty {
            self.ins(format!("trunc {mty} {raw} to {ty}"))
        } else {
            raw
        };
        let nan = if nan_tracked {
            let q = elem(self, "%nan", "i8", &j);
            let f = self.ins(format!("load i8, i8* {q}"));
            Some(self.ins(format!("icmp ne i8 {f}, 0")))
        } else {
            None
        };
        let res = self.reduce_finish(rop, dt, keyed, &res, nan.as_deref(), x, axes);
        let off = self.badd(&base, &j);
        self.store(out, &off, &res);
        self.loop_end(lj);
        self.loop_end(lt);
    }

    /// Output element `o` of a reduction.
    fn reduce_row(
        &mut self,
        out: Value,
        rop: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        x: Value,
        o: &str,
    ) {
        let dt = self.vals[x.0 as usize].dtype;
        let ty = cty(dt);
        let o = o.to_string();
        let mut src = self.out_to_in(out, x, axes, keepdims, &o);
        let a = self.label();
        let keyed = self.reduce_keyed(rop, dt);
        let ty = if keyed { "i32" } else { ty };
        let _ = writeln!(self.pre, "  %acc{a} = alloca {ty}, align 8");
        let _ = writeln!(self.pre, "  %nan{a} = alloca i1, align 1");
        let init = self.reduce_init(rop, dt, keyed);
        self.e(format!("store {ty} {init}, {ty}* %acc{a}"));
        self.e(format!("store i1 false, i1* %nan{a}"));
        let mut ls = Vec::new();
        for &ax in axes {
            let d = self.dim(x, ax);
            let (iv, li) = self.loop_begin("0", &d);
            src[ax] = iv;
            ls.push(li);
        }
        let e = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        if let Some((sx, m)) = self.stash {
            if sx == x.0 {
                let off = self.ravel(m, &src);
                self.store(m, &off, &e);
            }
        }
        let acc = self.ins(format!("load {ty}, {ty}* %acc{a}"));
        // Deterministic mode: the interpreter's sequential order (no reassociation).
        let ra = if self.opts.deterministic {
            ""
        } else {
            "reassoc "
        };
        let (nacc, isn) = self.reduce_combine(rop, dt, keyed, &acc, &e, ra);
        if let Some(isn) = isn {
            let old = self.ins(format!("load i1, i1* %nan{a}"));
            let nn = self.ins(format!("or i1 {old}, {isn}"));
            self.e(format!("store i1 {nn}, i1* %nan{a}"));
        }
        self.e(format!("store {ty} {nacc}, {ty}* %acc{a}"));
        for li in ls.into_iter().rev() {
            self.loop_end(li);
        }
        let res = self.ins(format!("load {ty}, {ty}* %acc{a}"));
        let nan = if dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min) {
            Some(self.ins(format!("load i1, i1* %nan{a}")))
        } else {
            None
        };
        let res = self.reduce_finish(rop, dt, keyed, &res, nan.as_deref(), x, axes);
        self.store(out, &o, &res);
    }

    /// Float max/min, in every mode: an integer max/min over
    /// order-preserving keys of the bits. On non-NaN values that is exactly
    /// IEEE 754-2019 `maximum`/`minimum` (the key order has −0 < +0,
    /// Section 2 §3), it is associative and commutative, so any fold order
    /// (vectorized, sequential, per thread) gives the same bits, and it
    /// vectorizes without fast-math flags. NaN is tracked separately and
    /// becomes the canonical NaN at the end, as in the interpreter.
    fn reduce_keyed(&self, rop: ReduceOp, dt: Dtype) -> bool {
        dt.is_float() && matches!(rop, ReduceOp::Max | ReduceOp::Min)
    }

    /// The identity of `rop` at `dt`, in the accumulator type (`i32` keys
    /// when `keyed`).
    fn reduce_init(&mut self, rop: ReduceOp, dt: Dtype, keyed: bool) -> String {
        match (rop, dt.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => self.fc(0.0),
            (ReduceOp::Prod, true) => self.fc(1.0),
            (ReduceOp::Max, true) if keyed => float_key(f32::NEG_INFINITY).to_string(),
            (ReduceOp::Min, true) if keyed => float_key(f32::INFINITY).to_string(),
            (ReduceOp::Max, true) => self.fc(f32::NEG_INFINITY),
            (ReduceOp::Min, true) => self.fc(f32::INFINITY),
            (ReduceOp::Sum, false) => "0".into(),
            (ReduceOp::Prod, false) => "1".into(),
            (ReduceOp::Max, false) => int_min(dt).to_string(),
            (ReduceOp::Min, false) => int_max(dt).to_string(),
            (ReduceOp::Any, _) => "false".into(),
            (ReduceOp::All, _) => "true".into(),
            (ReduceOp::Mean, false) => "0".into(),
        }
    }

    /// One step `acc op e` of a reduction over elements of dtype `dt`
    /// (`ra`: fast-math flags of the float add/mul). Returns the new
    /// accumulator and, for float max/min, the `i1` "e is NaN" that the
    /// caller ORs into its NaN flag.
    fn reduce_combine(
        &mut self,
        rop: ReduceOp,
        dt: Dtype,
        keyed: bool,
        acc: &str,
        e: &str,
        ra: &str,
    ) -> (String, Option<String>) {
        let ty = cty(dt);
        match (rop, dt.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => {
                (self.ins(format!("fadd {ra}float {acc}, {e}")), None)
            }
            (ReduceOp::Prod, true) => (self.ins(format!("fmul {ra}float {acc}, {e}")), None),
            (ReduceOp::Max | ReduceOp::Min, true) if keyed => {
                let b = self.ins(format!("bitcast float {e} to i32"));
                let sgn = self.ins(format!("ashr i32 {b}, 31"));
                let msk = self.ins(format!("and i32 {sgn}, 2147483647"));
                let key = self.ins(format!("xor i32 {b}, {msk}"));
                let cmp = if rop == ReduceOp::Max { "sgt" } else { "slt" };
                let c = self.ins(format!("icmp {cmp} i32 {key}, {acc}"));
                let m = self.ins(format!("select i1 {c}, i32 {key}, i32 {acc}"));
                let isn = self.ins(format!("fcmp uno float {e}, {e}"));
                (m, Some(isn))
            }
            (ReduceOp::Max | ReduceOp::Min, true) => {
                // Not reached (float max/min are keyed); kept total.
                let m = self.extremum(rop == ReduceOp::Max, acc, e);
                let isn = self.ins(format!("fcmp uno float {e}, {e}"));
                (m, Some(isn))
            }
            (ReduceOp::Sum | ReduceOp::Mean, false) => {
                (self.ins(format!("add {ty} {acc}, {e}")), None)
            }
            (ReduceOp::Prod, false) => (self.ins(format!("mul {ty} {acc}, {e}")), None),
            (ReduceOp::Max, false) => {
                let c = self.ins(format!("icmp sgt {ty} {e}, {acc}"));
                (
                    self.ins(format!("select i1 {c}, {ty} {e}, {ty} {acc}")),
                    None,
                )
            }
            (ReduceOp::Min, false) => {
                let c = self.ins(format!("icmp slt {ty} {e}, {acc}"));
                (
                    self.ins(format!("select i1 {c}, {ty} {e}, {ty} {acc}")),
                    None,
                )
            }
            (ReduceOp::Any, _) => (self.ins(format!("or i1 {acc}, {e}")), None),
            (ReduceOp::All, _) => (self.ins(format!("and i1 {acc}, {e}")), None),
        }
    }

    /// The result of a reduction from its final accumulator `res` (and,
    /// for float max/min, the `i1` NaN flag): keys decoded, NaN restored,
    /// mean's division by the count of reduced elements, rounding into `dt`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_finish(
        &mut self,
        rop: ReduceOp,
        dt: Dtype,
        keyed: bool,
        res: &str,
        nan: Option<&str>,
        x: Value,
        axes: &[usize],
    ) -> String {
        let mut res = res.to_string();
        if keyed {
            // The key map is an involution: key(key(b)) = b.
            let sgn = self.ins(format!("ashr i32 {res}, 31"));
            let msk = self.ins(format!("and i32 {sgn}, 2147483647"));
            let b = self.ins(format!("xor i32 {res}, {msk}"));
            res = self.ins(format!("bitcast i32 {b} to float"));
        }
        if dt.is_float() {
            if let Some(nn) = nan {
                let nanc = self.fc(f32::NAN);
                res = self.ins(format!("select i1 {nn}, float {nanc}, float {res}"));
            }
            if rop == ReduceOp::Mean {
                let mut cnt = "1".to_string();
                for &ax in axes {
                    let d = self.dim(x, ax);
                    cnt = self.pmul(&cnt, &d);
                }
                let c = self.ins(format!("sitofp i64 {cnt} to float"));
                res = self.fop("fdiv", &res, &c);
            }
            // A reduction's NaN is the canonical one, whichever element
            // (or fold order) produced it (Section 2 §3, as the interpreter).
            let canon = self.fc(cast::CANONICAL_NAN);
            let isn = self.ins(format!("fcmp uno float {res}, {res}"));
            res = self.ins(format!("select i1 {isn}, float {canon}, float {res}"));
            res = self.round(dt, &res);
        } else if dt == Dtype::I4 {
            res = self.round(dt, &res);
        }
        res
    }

    fn argreduce_body(&mut self, out: Value, max: bool, axis: usize, keepdims: bool, x: Value) {
        let dt = self.vals[x.0 as usize].dtype;
        let ty = cty(dt);
        let (o, l) = self.loop_begin("%start", "%end");
        let mut src = self.out_to_in(out, x, &[axis], keepdims, &o);
        let a = self.label();
        let _ = writeln!(self.pre, "  %bv{a} = alloca {ty}, align 8");
        let _ = writeln!(self.pre, "  %bi{a} = alloca i64, align 8");
        src[axis] = "0".into();
        let first = self.val(
            x,
            &Idx {
                dims: Some(src.clone()),
                lin: None,
            },
        );
        self.e(format!("store {ty} {first}, {ty}* %bv{a}"));
        self.e(format!("store i64 0, i64* %bi{a}"));
        let d = self.dim(x, axis);
        let (iv, li) = self.loop_begin("1", &d);
        src[axis] = iv.clone();
        let e = self.val(
            x,
            &Idx {
                dims: Some(src),
                lin: None,
            },
        );
        let bv = self.ins(format!("load {ty}, {ty}* %bv{a}"));
        // Ties keep the first index; NaN beats every number (first NaN wins).
        let better = if dt.is_float() {
            let bnan = self.ins(format!("fcmp uno float {bv}, {bv}"));
            let enan = self.ins(format!("fcmp uno float {e}, {e}"));
            let cmp = if max { "ogt" } else { "olt" };
            let c = self.ins(format!("fcmp {cmp} float {e}, {bv}"));
            let c1 = self.ins(format!("or i1 {enan}, {c}"));
            self.ins(format!("select i1 {bnan}, i1 false, i1 {c1}"))
        } else if dt.is_bool() {
            let cmp = if max { "ugt" } else { "ult" };
            self.ins(format!("icmp {cmp} i1 {e}, {bv}"))
        } else {
            let cmp = if max { "sgt" } else { "slt" };
            self.ins(format!("icmp {cmp} {ty} {e}, {bv}"))
        };
        let nbv = self.ins(format!("select i1 {better}, {ty} {e}, {ty} {bv}"));
        self.e(format!("store {ty} {nbv}, {ty}* %bv{a}"));
        let bi = self.ins(format!("load i64, i64* %bi{a}"));
        let nbi = self.ins(format!("select i1 {better}, i64 {iv}, i64 {bi}"));
        self.e(format!("store i64 {nbi}, i64* %bi{a}"));
        self.loop_end(li);
        let r = self.ins(format!("load i64, i64* %bi{a}"));
        self.store(out, &o, &r);
        self.loop_end(l);
    }

    fn finish_fn(&mut self, id: usize, params: &[String]) {
        let mut f = String::new();
        let _ = writeln!(
            f,
            "define internal void @k{id}_body({}, i64* noalias nocapture readonly %shp, i64* noalias nocapture readonly %sc, i64 %start, i64 %end) #2 {{",
            params.join(", ")
        );
        f.push_str("entry:\n");
        f.push_str(&self.pre);
        f.push_str("  br label %b0\n");
        f.push_str(&self.body);
        f.push_str("}\n\n");
        let _ = writeln!(
            f,
            "define void @k{id}(i8** nocapture readonly %bufs, i64* %shp, i64* %sc, i64 %start, i64 %end) #0 {{"
        );
        let mut args = Vec::new();
        for k in 0..params.len() {
            let _ = writeln!(
                f,
                "  %pa{k} = getelementptr inbounds i8*, i8** %bufs, i64 {k}"
            );
            let _ = writeln!(f, "  %p{k} = load i8*, i8** %pa{k}, align 8");
            args.push(format!("i8* %p{k}"));
        }
        let _ = writeln!(
            f,
            "  call void @k{id}_body({}, i64* %shp, i64* %sc, i64 %start, i64 %end)\n  ret void\n}}\n",
            args.join(", ")
        );
        self.globals.push_str(&f);
    }
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
    vals: &[ValInfo],
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
        np: func.sig.params.len(),
        qkeys: Vec::new(),
        globals: String::new(),
        tables: Vec::new(),
        pre: String::new(),
        body: String::new(),
        n: 0,
        pmemo: HashMap::new(),
        memo: HashMap::new(),
        bufs: HashMap::new(),
        lbl: 0,
        root: None,
        stash: None,
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
            if matches!(vals[out.0 as usize].kind, VKind::Inst(_)) {
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
