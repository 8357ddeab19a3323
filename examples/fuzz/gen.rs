//! The soundness fuzzer (issue #10): random well-typed programs built through
//! `tc_core::build::FnBuilder`, checked by `tc_core::check::check_function`,
//! run at a σ satisfying Γ on the Section 4 interpreter and on every JIT
//! mode, and compared.
//!
//! Shared by `tests/fuzz.rs` (a fixed-seed short run) and
//! `examples/fuzz/main.rs` (the long run). Everything is a function of the
//! case seed: `cargo run --release --example fuzz -- --case SEED` prints and
//! reruns one case.
//!
//! Oracle, per accepted program at its σ:
//! (a) no panic; the interpreter returns a value, unless some value's
//!     volume exceeds the element cap (`tc_runtime::interp::MAX_ELEMS`),
//!     where both backends must return a typed error of the same kind;
//! (b) the interpreter's dtype and shape are the checker's synthesised
//!     return type evaluated under σ;
//! (c) every JIT mode equals the interpreter: bit for bit unless a value on
//!     the way to the result comes from an op the crate docs give a
//!     tolerance (float sum/mean outside deterministic mode, float
//!     matmul, the fast F32 transcendentals);
//! (d) the same case in a long-lived cache shared with earlier cases equals
//!     a fresh cache bit for bit, and so does a "twin" of the program (same
//!     `f`, callees with other bodies and return shapes) run after it.
#![allow(dead_code)]

#[path = "bound.rs"]
mod bound;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tc_core::build::FnBuilder;
use tc_core::check::{check_function, Checked};
use tc_core::ir::{
    BinaryOp, Function, Op, PoolKind, ReduceOp, RopeLayout, Scalar, Signatures, UnaryOp, Value,
    ValueDef, ValueMap, Window,
};
use tc_core::{Dim, Dtype, Pred, Sigma, TensorType, Type};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::Tensor;

// ------------------------------------------------------------------ PRNG

/// splitmix64: tiny, seedable, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (mixed, so neighbouring seeds diverge at once).
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng(seed ^ 0x5eed_f022_7c0d_e5e1);
        r.next();
        r
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A uniformly chosen element.
    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

// -------------------------------------------------------------- families

/// The op families the generator draws from (`--ops` / `TC_FUZZ_OPS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// §4 elementwise unary.
    Unary,
    /// §5 cast.
    Cast,
    /// §6 binary on two tensors.
    Binary,
    /// §4/§6 with a scalar literal or scalar parameter.
    ScalarBinary,
    /// §6 select.
    Select,
    /// §7 matmul, batched included.
    Matmul,
    /// §8 reduce.
    Reduce,
    /// §8 argmax/argmin.
    ArgReduce,
    /// §9 transpose.
    Transpose,
    /// §10 reshape.
    Reshape,
    /// §11 broadcast.
    Broadcast,
    /// §12 slice.
    Slice,
    /// §12 concat.
    Concat,
    /// A literal tensor.
    Fill,
    /// An index tensor.
    Iota,
    /// §12a gather, with ids valid by construction (an iota or an argmax
    /// over an axis of the table's size).
    Gather,
    /// §8a top-k values or indices, `k` provably within the axis.
    TopK,
    /// §8b running sum.
    CumSum,
    /// §12b constant padding.
    Pad,
    /// §12c convolution (1-d and 2-d, strides, padding, dilation, groups).
    Conv,
    /// §12d max and average pooling.
    Pool,
    /// §18 `rope_pairs`/`rope_halves` on drawn values (any float dtype,
    /// symbolic dims, the rotated operand fused and read twice).
    Rotary,
    /// §17 call of a generated function.
    Call,
    /// SmolLM2's RMSNorm (`rms_norm` of `tc-serve/src/llama/model.rs`).
    RmsNorm,
    /// RoPE in both layouts (model.rs's `rotate_pairs`, `rotate_halves`).
    Rope,
    /// SiLU and SwiGLU (`g · σ(g) · u`, as the model's `mix`).
    SwiGlu,
    /// Grouped-query attention, KV heads repeated by broadcast.
    Gqa,
    /// Causal attention over a KV cache (the model's `attention`).
    Attention,
    /// A whole decoder layer calling the model's tensor fns.
    Llama,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 29] = [
        Family::Unary,
        Family::Cast,
        Family::Binary,
        Family::ScalarBinary,
        Family::Select,
        Family::Matmul,
        Family::Reduce,
        Family::ArgReduce,
        Family::Transpose,
        Family::Reshape,
        Family::Broadcast,
        Family::Slice,
        Family::Concat,
        Family::Fill,
        Family::Iota,
        Family::Gather,
        Family::TopK,
        Family::CumSum,
        Family::Pad,
        Family::Conv,
        Family::Pool,
        Family::Rotary,
        Family::Call,
        Family::RmsNorm,
        Family::Rope,
        Family::SwiGlu,
        Family::Gqa,
        Family::Attention,
        Family::Llama,
    ];

    /// The name used by `--ops`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Unary => "unary",
            Family::Cast => "cast",
            Family::Binary => "binary",
            Family::ScalarBinary => "scalar",
            Family::Select => "select",
            Family::Matmul => "matmul",
            Family::Reduce => "reduce",
            Family::ArgReduce => "argreduce",
            Family::Transpose => "transpose",
            Family::Reshape => "reshape",
            Family::Broadcast => "broadcast",
            Family::Slice => "slice",
            Family::Concat => "concat",
            Family::Fill => "fill",
            Family::Iota => "iota",
            Family::Gather => "gather",
            Family::TopK => "topk",
            Family::CumSum => "cumsum",
            Family::Pad => "pad",
            Family::Conv => "conv",
            Family::Pool => "pool",
            Family::Rotary => "rotary",
            Family::Call => "call",
            Family::RmsNorm => "rmsnorm",
            Family::Rope => "rope",
            Family::SwiGlu => "swiglu",
            Family::Gqa => "gqa",
            Family::Attention => "attention",
            Family::Llama => "llama",
        }
    }

    /// A family of the SmolLM2 model's operations ([`LLAMA`]): a whole
    /// program of its own, not an op the generator draws step by step.
    pub fn is_llama(self) -> bool {
        LLAMA.contains(&self)
    }

    /// Look up by name.
    pub fn from_name(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Families to draw from (layout fallbacks such as a cast feeding a
    /// binary op are still emitted when an operand of the right type is
    /// missing; `--ops` restricts the *chosen* ops).
    pub families: Vec<Family>,
    /// At most this many drawn ops in the main function.
    pub max_ops: usize,
    /// One case in `huge_one_in` gets a huge dim (0: never).
    pub huge_one_in: usize,
    /// Each case runs one JIT mode, `MODES[seed % 6]`, instead of all six
    /// (every mode is still covered across a run). The long run uses this:
    /// LLVM compilation is ~85% of a case's time and each mode compiles
    /// afresh, so rotating makes a case about five times cheaper.
    pub rotate: bool,
    /// With `rotate`, one case in `all_modes_one_in` (drawn from its seed)
    /// still runs all six modes (0: never).
    pub all_modes_one_in: usize,
    /// Percent of the programs that are not a llama family's that are of
    /// the real-sizes class ([`real_program`]; 0: none).
    pub real_pct: usize,
    /// Dim parameters (`--dim-params`): one callee in three takes a
    /// `Dim![V]` after its tensors, which its callers pass a dim of their
    /// own (an [`Op::Dim`]), and one `f` in three a `Dim![…]` naming one of
    /// its variables (`n: Dim![A]`, `Dim![2 * A]`, compared with the
    /// tensors at the call: what a Rust caller passes as a `usize`). Off by
    /// default, as it changes the programs of pinned seeds
    /// (`tests/fuzz.rs`'s `KNOWN`); the macro fuzzer turns it on.
    pub dim_params: bool,
    /// The int8 products (`--matmul-i32`): one product in six a
    /// `dq_matmul` (docs/syntax.md §7c), one in four of the others a
    /// `matmul_i32` (§7b: I8 operands, I32 sums). Off by default for the
    /// same reason as `dim_params`.
    pub matmul_i32: bool,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            families: Family::ALL.to_vec(),
            max_ops: 7,
            huge_one_in: 12,
            rotate: false,
            all_modes_one_in: 8,
            real_pct: 20,
            dim_params: false,
            matmul_i32: false,
        }
    }
}

impl GenConfig {
    /// Parse a comma-separated family list (`unary,matmul`); `None` or
    /// `all` keeps every family; a leading `-` excludes (`-call,-matmul`).
    pub fn with_ops(mut self, list: Option<&str>) -> Result<GenConfig, String> {
        let Some(list) = list.filter(|l| !l.is_empty() && *l != "all") else {
            return Ok(self);
        };
        let mut keep: Vec<Family> = Vec::new();
        let mut drop: Vec<Family> = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (neg, name) = match item.strip_prefix('-') {
                Some(n) => (true, n),
                None => (false, item),
            };
            let f = Family::from_name(name).ok_or_else(|| {
                let names: Vec<_> = Family::ALL.iter().map(|f| f.name()).collect();
                format!("unknown op family `{name}` (one of {})", names.join(", "))
            })?;
            if neg {
                drop.push(f);
            } else {
                keep.push(f);
            }
        }
        if keep.is_empty() {
            keep = Family::ALL.to_vec();
        }
        keep.retain(|f| !drop.contains(f));
        if keep.is_empty() {
            return Err("--ops leaves no family".into());
        }
        self.families = keep;
        Ok(self)
    }

    /// The defaults overridden by `TC_FUZZ_OPS` (see [`GenConfig::with_ops`]),
    /// `TC_FUZZ_MAX_OPS`, `TC_FUZZ_HUGE` (one case in N gets a huge dim)
    /// and `TC_FUZZ_REAL` (percent of real-sizes programs).
    pub fn from_env() -> Result<GenConfig, String> {
        let num = |k: &str| -> Result<Option<usize>, String> {
            match std::env::var(k) {
                Err(_) => Ok(None),
                Ok(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{k}={v}: not a number")),
            }
        };
        let mut c = GenConfig::default().with_ops(std::env::var("TC_FUZZ_OPS").ok().as_deref())?;
        if let Some(n) = num("TC_FUZZ_MAX_OPS")? {
            c.max_ops = n.max(1);
        }
        if let Some(n) = num("TC_FUZZ_HUGE")? {
            c.huge_one_in = n;
        }
        if let Some(n) = num("TC_FUZZ_REAL")? {
            c.real_pct = n.min(100);
        }
        c.rotate = std::env::var_os("TC_FUZZ_ROTATE").is_some();
        Ok(c)
    }

    fn allows(&self, f: Family) -> bool {
        self.families.contains(&f)
    }

    /// The families drawn op by op (the llama families are whole programs).
    fn op_families(&self) -> Vec<Family> {
        self.families
            .iter()
            .copied()
            .filter(|f| !f.is_llama())
            .collect()
    }
}

// ----------------------------------------------------------------- world

/// The shape variables of one function and the facts relating them.
#[derive(Clone, Debug, Default)]
struct World {
    /// Name and whether it opted into `>= 0`.
    vars: Vec<(String, bool)>,
    /// `D % H == 0`.
    divs: Vec<(String, String)>,
    /// `S >= K + c`.
    orders: Vec<(String, String, i64)>,
}

impl World {
    fn zero(&self, v: &str) -> bool {
        self.vars.iter().any(|(n, z)| n == v && *z)
    }

    /// Can `d` be 0 under Γ? Every dim the generator builds without a
    /// zero-opted variable was proven `>= 1` where it was formed (§16).
    fn may_zero(&self, d: &Dim) -> bool {
        d.as_const() == Some(0) || d.vars().iter().any(|v| self.zero(v))
    }

    fn var_dims(&self) -> Vec<Dim> {
        self.vars.iter().map(|(n, _)| Dim::var(n.clone())).collect()
    }
}

const CONST_DIMS: [i64; 7] = [1, 1, 2, 3, 4, 7, 16];

fn main_world(rng: &mut Rng) -> World {
    let mut w = World::default();
    w.vars.push(("A".into(), rng.one_in(5)));
    if rng.one_in(2) {
        w.vars.push(("B".into(), rng.one_in(4)));
    }
    if rng.one_in(3) {
        w.vars.push(("Z".into(), true));
    }
    if rng.one_in(3) {
        w.vars.push(("D".into(), rng.one_in(4)));
        // A divisor opted into `>= 0` (issue #10 item 9): §13 now makes
        // `D % H` need `H >= 1`, so the checker must refuse these.
        w.vars.push(("H".into(), rng.one_in(8)));
        w.divs.push(("D".into(), "H".into()));
    }
    if rng.one_in(3) {
        let zero = rng.one_in(3);
        w.vars.push(("S".into(), zero));
        w.vars.push(("K".into(), zero && rng.one_in(2)));
        w.orders.push(("S".into(), "K".into(), rng.below(2) as i64));
    }
    w
}

/// A value of the function being generated, with its type as the generator
/// tracks it (the checker synthesises its own; a disagreement is a
/// rejection, counted).
#[derive(Clone, Debug)]
struct Val {
    v: Value,
    dt: Dtype,
    shape: Vec<Dim>,
}

const MAX_RANK: usize = 5;

// ------------------------------------------------------------- callees

/// A generated function other functions may call (§17), with a "twin": the
/// same signature's parameters, another body, a return shape whose last
/// axis is doubled. Callers slice it back, so a caller's IR is the same
/// text for both, which is what a cache keyed on the caller's text alone
/// confuses (issue #10 item 1).
#[derive(Clone, Debug)]
struct Callee {
    func: Function,
    twin: Option<Function>,
    /// Parameter dtypes and shapes (variables of the callee's own world).
    params: Vec<(Dtype, Vec<Dim>)>,
    world: World,
    ret: (Dtype, Vec<Dim>),
    /// A `Dim![V]` parameter after the tensors: its variable. A caller
    /// passes it a dim of its own (an [`Op::Dim`] value).
    dim_param: Option<String>,
}

// ----------------------------------------------------------------- body

struct Body<'a> {
    rng: &'a mut Rng,
    world: &'a World,
    cfg: &'a GenConfig,
    fb: FnBuilder,
    vals: Vec<Val>,
    /// Scalar parameters: index and dtype.
    scalars: Vec<(usize, Dtype)>,
    callees: &'a [Callee],
    /// Draws for the dim arguments of calls, a stream apart from `rng`, so
    /// that a program without them is the one its seed always gave.
    aux: Rng,
}

fn float_literal(rng: &mut Rng, dt: Dtype) -> f64 {
    let max = match dt {
        Dtype::F8E4M3 => 448.0,
        Dtype::F8E5M2 => 57344.0,
        Dtype::F16 => 65504.0,
        _ => 3.0e38,
    };
    match rng.below(8) {
        0 => -0.0,
        1 => 0.0,
        2 => max,
        3 => -max,
        4 => 1.0,
        _ => ((rng.unit() as f64) - 0.5) * 8.0,
    }
}

fn int_literal(rng: &mut Rng, dt: Dtype) -> i64 {
    let (lo, hi) = dt.int_range().unwrap_or((-8, 7));
    match rng.below(6) {
        0 => lo,
        1 => hi,
        2 => 0,
        _ => (rng.below(15) as i64 - 7).clamp(lo, hi),
    }
}

impl<'a> Body<'a> {
    fn push(&mut self, op: Op, dt: Dtype, shape: Vec<Dim>) -> Val {
        let v = self.fb.op(op);
        let val = Val { v, dt, shape };
        self.vals.push(val.clone());
        val
    }

    /// A value satisfying `ok`, biased towards values nothing uses yet and
    /// recent ones, so that programs are chains, not dead branches.
    fn pick_val(&mut self, ok: impl Fn(&Val) -> bool) -> Option<Val> {
        let used: BTreeSet<Value> = self
            .fb
            .clone()
            .finish(Value::from_u32(0))
            .body
            .iter()
            .flat_map(|i| i.op.operands())
            .collect();
        let c: Vec<Val> = self.vals.iter().filter(|v| ok(v)).cloned().collect();
        let fresh: Vec<Val> = c.iter().filter(|v| !used.contains(&v.v)).cloned().collect();
        if !fresh.is_empty() && !self.rng.one_in(4) {
            return Some(if self.rng.one_in(2) {
                fresh[fresh.len() - 1].clone()
            } else {
                self.rng.pick(&fresh)
            });
        }
        if c.is_empty() {
            return None;
        }
        Some(self.rng.pick(&c))
    }

    fn cast_to(&mut self, x: Val, dt: Dtype) -> Val {
        if x.dt == dt {
            return x;
        }
        self.push(Op::Cast(dt, x.v), dt, x.shape.clone())
    }

    /// A value of exactly this dtype and (syntactic) shape: an existing one
    /// (cast if needed) or a literal tensor.
    fn like(&mut self, shape: &[Dim], dt: Dtype) -> Val {
        let same = |v: &Val| v.shape == shape;
        if !self.rng.one_in(6) {
            if let Some(x) = self.pick_val(|v| same(v) && v.dt == dt) {
                return x;
            }
            if let Some(x) = self.pick_val(same) {
                return self.cast_to(x, dt);
            }
        }
        let s = self.scalar_for(dt);
        self.push(Op::Fill(dt, shape.to_vec(), s), dt, shape.to_vec())
    }

    fn scalar_for(&mut self, dt: Dtype) -> Scalar {
        let params: Vec<usize> = self
            .scalars
            .iter()
            .filter(|(_, d)| *d == dt)
            .map(|(i, _)| *i)
            .collect();
        if !params.is_empty() && self.rng.one_in(2) {
            return Scalar::Param(self.rng.pick(&params));
        }
        if dt.is_float() {
            Scalar::Float(float_literal(self.rng, dt))
        } else if dt.is_int() {
            Scalar::Int(int_literal(self.rng, dt))
        } else {
            Scalar::Bool(self.rng.one_in(2))
        }
    }

    /// A dim for a new axis: a variable, a constant, or a dim some value has.
    fn pool_dim(&mut self) -> Dim {
        match self.rng.below(4) {
            0 => Dim::c(self.rng.pick(&CONST_DIMS)),
            1 if !self.vals.is_empty() => {
                let v = self.rng.pick(&self.vals);
                if v.shape.is_empty() {
                    Dim::c(1)
                } else {
                    self.rng.pick(&v.shape)
                }
            }
            _ => self.rng.pick(&self.world.var_dims()),
        }
    }

    fn random_shape(&mut self, min_rank: usize, max_rank: usize) -> Vec<Dim> {
        let r = min_rank + self.rng.below(max_rank - min_rank + 1);
        (0..r).map(|_| self.pool_dim()).collect()
    }

    fn step(&mut self, f: Family) -> Option<Val> {
        match f {
            Family::Unary => self.unary(),
            Family::Cast => {
                let x = self.pick_val(|_| true)?;
                let dt = self.rng.pick(&Dtype::ALL);
                Some(self.push(Op::Cast(dt, x.v), dt, x.shape))
            }
            Family::Binary => self.binary(),
            Family::ScalarBinary => self.scalar_binary(),
            Family::Select => self.select(),
            Family::Matmul => self.matmul(),
            Family::Reduce => self.reduce(),
            Family::ArgReduce => self.arg_reduce(),
            Family::Transpose => self.transpose(),
            Family::Reshape => self.reshape(),
            Family::Broadcast => self.broadcast(),
            Family::Slice => self.slice(),
            Family::Concat => self.concat(),
            Family::Fill => {
                let dt = self.rng.pick(&Dtype::ALL);
                let shape = self.random_shape(0, 3);
                let s = self.scalar_for(dt);
                Some(self.push(Op::Fill(dt, shape.clone(), s), dt, shape))
            }
            Family::Iota => {
                let dt = self.rng.pick(&Dtype::ALL[..10]);
                let shape = self.random_shape(1, 3);
                let axis = self.rng.below(shape.len());
                Some(self.push(Op::Iota(dt, shape.clone(), axis), dt, shape))
            }
            Family::Gather => self.gather(),
            Family::TopK => self.topk(),
            Family::Pad => {
                let x = self.pick_val(|v| !v.shape.is_empty())?;
                let axis = self.rng.below(x.shape.len());
                let widths = [Dim::c(0), Dim::c(1), Dim::c(3), self.pool_dim()];
                let (before, after) = (self.rng.pick(&widths), self.rng.pick(&widths));
                let mut shape = x.shape.clone();
                shape[axis] = before.clone() + x.shape[axis].clone() + after.clone();
                let value = self.scalar_for(x.dt);
                let op = Op::Pad {
                    axis,
                    before,
                    after,
                    value,
                    x: x.v,
                };
                Some(self.push(op, x.dt, shape))
            }
            Family::CumSum => {
                let x = self.pick_val(|v| v.dt.is_numeric() && !v.shape.is_empty())?;
                let axis = self.rng.below(x.shape.len());
                Some(self.push(Op::CumSum { axis, x: x.v }, x.dt, x.shape))
            }
            Family::Conv => self.conv(),
            Family::Pool => self.pool(),
            Family::Rotary => self.rotary(),
            Family::Call => self.call(),
            Family::RmsNorm
            | Family::Rope
            | Family::SwiGlu
            | Family::Gqa
            | Family::Attention
            | Family::Llama => None,
        }
    }

    /// One spatial axis of a window op: `(s + 2p − d·(k − 1) − 1) / st + 1`,
    /// built in the checker's order (`check/window.rs`), so the normal
    /// forms agree.
    fn window_dim(s: &Dim, k: &Dim, (st, p, d): (usize, usize, usize)) -> Option<Dim> {
        let padded = s.checked_add(&Dim::c(2 * p as i64)).ok()?;
        let reach = k
            .checked_scale(d as i64)
            .ok()?
            .checked_sub(&Dim::c(d as i64 - 1))
            .ok()?;
        let q = padded
            .checked_sub(&reach)
            .ok()?
            .checked_div(&Dim::c(st as i64))
            .ok()?;
        q.checked_add(&Dim::c(1)).ok()
    }

    /// A kernel extent, stride, padding and dilation for spatial extent
    /// `s` that fit provably: a constant `s` bounds the dilated kernel; a
    /// variable (≥ 1, or ≥ 0 when opted in) needs padding that covers it.
    fn window_axis(&mut self, s: &Dim, max_pad_half: bool) -> (usize, usize, usize, usize) {
        let k = 1 + self.rng.below(3);
        let st = 1 + self.rng.below(3);
        let d = if max_pad_half {
            1
        } else {
            1 + self.rng.below(2)
        };
        let reach = (d * (k - 1) + 1) as i64;
        let floor = if self.world.may_zero(s) { 0 } else { 1 };
        let have = s.as_const().unwrap_or(floor);
        let need = (reach - have).max(0) as usize;
        let mut p = self.rng.below(3).max(need.div_ceil(2));
        if max_pad_half {
            p = p.min(k / 2);
        }
        (k, st, p, d)
    }

    /// `conv{1,2}d` on a value of rank 3 or 4 (weights from `like`, groups
    /// when the channel count is a constant they divide).
    fn conv(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| v.dt.is_numeric() && (3..=4).contains(&v.shape.len()))?;
        let r = x.shape.len() - 2;
        let c = x.shape[1].clone();
        let groups = match c.as_const() {
            Some(n) if n >= 2 && n % 2 == 0 && self.rng.one_in(3) => 2,
            _ => 1,
        };
        let cg = if groups == 1 {
            c
        } else {
            Dim::c(c.as_const()? / groups as i64)
        };
        let o = if groups == 1 {
            self.pool_dim()
        } else {
            Dim::c(groups as i64 * (1 + self.rng.below(3) as i64))
        };
        let mut wshape = vec![o.clone(), cg];
        let mut window = Window {
            stride: vec![],
            padding: vec![],
            dilation: vec![],
        };
        let mut shape = vec![x.shape[0].clone(), o];
        for a in 0..r {
            let s = x.shape[2 + a].clone();
            let (k, st, p, d) = self.window_axis(&s, false);
            wshape.push(Dim::c(k as i64));
            window.stride.push(st);
            window.padding.push(p);
            window.dilation.push(d);
            shape.push(Self::window_dim(&s, &Dim::c(k as i64), (st, p, d))?);
        }
        let w = self.like(&wshape, x.dt);
        let op = Op::Conv {
            window,
            groups,
            x: x.v,
            w: w.v,
        };
        Some(self.push(op, x.dt, shape))
    }

    /// `max_pool` / `avg_pool` over the last 1 or 2 axes.
    fn pool(&mut self) -> Option<Val> {
        let avg = self.rng.one_in(2);
        let x = self.pick_val(|v| if avg { v.dt.is_float() } else { v.dt.is_numeric() } && !v.shape.is_empty())?;
        let r = if x.shape.len() >= 2 && self.rng.one_in(2) {
            2
        } else {
            1
        };
        let lead = x.shape.len() - r;
        // A max pool needs non-empty spatial axes (docs/syntax.md §12d):
        // the checker refuses one over a dim that may be 0. Given up after
        // the draws above, so that every program the generator produced
        // before this check stays the same program.
        if !avg && x.shape[lead..].iter().any(|d| self.world.may_zero(d)) {
            return None;
        }
        let mut kernel = vec![];
        let mut window = Window {
            stride: vec![],
            padding: vec![],
            dilation: vec![],
        };
        let mut shape = x.shape[..lead].to_vec();
        for a in 0..r {
            let s = x.shape[lead + a].clone();
            let (k, st, p, _) = self.window_axis(&s, true);
            kernel.push(k);
            window.stride.push(st);
            window.padding.push(p);
            window.dilation.push(1);
            shape.push(Self::window_dim(&s, &Dim::c(k as i64), (st, p, 1))?);
        }
        let kind = if avg { PoolKind::Avg } else { PoolKind::Max };
        let op = Op::Pool {
            kind,
            kernel,
            window,
            x: x.v,
        };
        Some(self.push(op, x.dt, shape))
    }

    /// The values computed from a call's result (directly or not).
    fn call_derived(&self) -> BTreeSet<Value> {
        let f = self.fb.clone().finish(Value::from_u32(0));
        let mut out = BTreeSet::new();
        for inst in &f.body {
            let tainted = matches!(inst.op, Op::Call(..))
                || inst.op.operands().iter().any(|o| out.contains(o));
            if tainted {
                out.insert(inst.result);
            }
        }
        out
    }

    /// `topk[k, axis] x` with `k` the whole axis, 1 (a non-empty axis) or a
    /// constant within a constant axis.
    fn topk(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| v.dt.is_numeric() && !v.shape.is_empty())?;
        let axis = self.rng.below(x.shape.len());
        let d = x.shape[axis].clone();
        let mut ks = vec![d.clone()];
        if !self.world.may_zero(&d) {
            ks.push(Dim::c(1));
        }
        if let Some(c) = d.as_const().filter(|&c| c >= 1) {
            ks.push(Dim::c(1 + self.rng.below(c as usize) as i64));
        }
        let k = self.rng.pick(&ks);
        let indices = self.rng.one_in(2);
        let mut shape = x.shape.clone();
        shape[axis] = k.clone();
        let dt = if indices { Dtype::I64 } else { x.dt };
        let op = Op::TopK {
            k,
            axis,
            indices,
            x: x.v,
        };
        Some(self.push(op, dt, shape))
    }

    /// `gather[axis] x, ids` with every id in range by construction: an
    /// iota along an axis of size `dim(x, axis)`, or an argmax over an axis
    /// of that size (an empty axis gives empty ids, which is legal).
    fn gather(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| !v.shape.is_empty() && v.shape.len() < MAX_RANK)?;
        let axis = self.rng.below(x.shape.len());
        let d = x.shape[axis].clone();
        let w = self.world;
        // Not from a call: a twin callee returns a longer axis, and an
        // argmax over it would index past the table in the twin program
        // (seed 21474840234 of the generator with gather alone).
        let from_call = self.call_derived();
        let reducible = |v: &Val| {
            v.dt.is_numeric()
                && !w.may_zero(&d)
                && v.shape.contains(&d)
                && !from_call.contains(&v.v)
        };
        let ids = match self.pick_val(reducible) {
            Some(y) if self.rng.one_in(2) => {
                let a = (0..y.shape.len()).find(|&a| y.shape[a] == d)?;
                let mut shape = y.shape.clone();
                shape.remove(a);
                let op = Op::ArgReduce {
                    max: self.rng.one_in(2),
                    axis: a,
                    keepdims: false,
                    x: y.v,
                };
                self.push(op, Dtype::I64, shape)
            }
            _ => {
                let room = MAX_RANK - x.shape.len();
                let mut shape = self.random_shape(0, room.min(2));
                let k = self.rng.below(shape.len() + 1);
                shape.insert(k, d);
                self.push(Op::Iota(Dtype::I64, shape.clone(), k), Dtype::I64, shape)
            }
        };
        if x.shape.len() + ids.shape.len() > MAX_RANK + 1 {
            return None;
        }
        let shape = [&x.shape[..axis], &ids.shape[..], &x.shape[axis + 1..]].concat();
        let op = Op::Gather {
            axis,
            table: x.v,
            ids: ids.v,
        };
        Some(self.push(op, x.dt, shape))
    }

    fn unary(&mut self) -> Option<Val> {
        let x = self.pick_val(|_| true)?;
        let ops: Vec<UnaryOp> = UnaryOp::ALL
            .into_iter()
            .filter(|o| o.admits(x.dt))
            .collect();
        let op = self.rng.pick(&ops);
        Some(self.push(Op::Unary(op, x.v), x.dt, x.shape))
    }

    fn binary(&mut self) -> Option<Val> {
        let x = self.pick_val(|_| true)?;
        let ops: Vec<BinaryOp> = BinaryOp::ALL
            .into_iter()
            .filter(|o| o.admits(x.dt))
            .collect();
        let op = self.rng.pick(&ops);
        let y = self.like(&x.shape, x.dt);
        let (a, b) = if self.rng.one_in(2) {
            (x.v, y.v)
        } else {
            (y.v, x.v)
        };
        Some(self.push(Op::Binary(op, a, b), op.result_dtype(x.dt), x.shape))
    }

    /// A rope whose rotated operand is `concat([x, y])` along the last
    /// axis (so its `D = 2·H` holds by construction), tables of `x`'s
    /// shape, either layout.
    fn rotary(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| v.dt.is_float() && !v.shape.is_empty())?;
        let last = x.shape.len() - 1;
        let y = self.like(&x.shape, x.dt);
        let (a, b) = if self.rng.one_in(2) {
            (x.v, y.v)
        } else {
            (y.v, x.v)
        };
        let mut shape = x.shape.clone();
        shape[last] = x.shape[last].clone() + x.shape[last].clone();
        let r = self.push(Op::Concat(last, vec![a, b]), x.dt, shape.clone());
        let cos = self.like(&x.shape, x.dt);
        let sin = self.like(&x.shape, x.dt);
        let layout = if self.rng.one_in(2) {
            RopeLayout::Pairs
        } else {
            RopeLayout::Halves
        };
        let op = Op::Rope {
            layout,
            x: r.v,
            cos: cos.v,
            sin: sin.v,
        };
        Some(self.push(op, x.dt, shape))
    }

    fn scalar_binary(&mut self) -> Option<Val> {
        let x = self.pick_val(|_| true)?;
        let ops: Vec<BinaryOp> = BinaryOp::ALL
            .into_iter()
            .filter(|o| o.admits(x.dt))
            .collect();
        let op = self.rng.pick(&ops);
        let s = self.scalar_for(x.dt);
        let scalar_left = self.rng.one_in(2);
        let dt = op.result_dtype(x.dt);
        Some(self.push(
            Op::ScalarBinary {
                op,
                x: x.v,
                s,
                scalar_left,
            },
            dt,
            x.shape,
        ))
    }

    fn select(&mut self) -> Option<Val> {
        let x = self.pick_val(|_| true)?;
        let c = self.like(&x.shape, Dtype::Bool);
        let y = self.like(&x.shape, x.dt);
        Some(self.push(Op::Select(c.v, x.v, y.v), x.dt, x.shape))
    }

    fn matmul(&mut self) -> Option<Val> {
        let mut x = self.pick_val(|v| v.shape.len() >= 2)?;
        if !x.dt.is_numeric() {
            let dt = self.rng.pick(&Dtype::ALL[..10]);
            x = self.cast_to(x, dt);
        }
        let n = x.shape.len();
        let batch = x.shape[..n - 2].to_vec();
        let k = x.shape[n - 1].clone();
        let fits = |v: &Val| v.shape.len() == n && v.shape[..n - 2] == batch[..];
        let y = match self.pick_val(|v| fits(v) && v.shape[n - 2] == k) {
            Some(y) if !self.rng.one_in(4) => y,
            _ => {
                // Some value whose last dim is K, transposed: x itself at worst.
                let w = self
                    .pick_val(|v| fits(v) && v.shape[n - 1] == k)
                    .unwrap_or_else(|| x.clone());
                let mut perm: Vec<usize> = (0..n).collect();
                perm.swap(n - 1, n - 2);
                let mut shape = w.shape.clone();
                shape.swap(n - 1, n - 2);
                self.push(Op::Transpose(perm, w.v), w.dt, shape)
            }
        };
        let mut shape = x.shape[..n - 1].to_vec();
        shape.push(y.shape[n - 1].clone());
        if self.cfg.matmul_i32 && self.rng.one_in(6) {
            // docs/syntax.md §7c: `x`'s channels then `J` outlier ones
            // (a concat, so that `C = K + J` holds by construction), an
            // I8 weight `[K, N]` with its scale and F32 outlier rows.
            let x = self.cast_to(x, Dtype::F32);
            let (j, cols) = (Dim::c(1 + self.rng.below(3) as i64), shape[n - 1].clone());
            let mut xo_shape = x.shape.clone();
            xo_shape[n - 1] = j.clone();
            let xo = self.like(&xo_shape, Dtype::F32);
            let mut cat_shape = x.shape.clone();
            cat_shape[n - 1] = k.clone() + j.clone();
            let xc = self.push(Op::Concat(n - 1, vec![x.v, xo.v]), Dtype::F32, cat_shape);
            let w = self.like(&[k, cols.clone()], Dtype::I8);
            let scale = self.like(std::slice::from_ref(&cols), Dtype::F32);
            let outliers = self.like(&[j, cols], Dtype::F32);
            let op = Op::DqMatmul {
                x: xc.v,
                w: w.v,
                scale: scale.v,
                outliers: outliers.v,
            };
            return Some(self.push(op, Dtype::F32, shape));
        }
        if self.cfg.matmul_i32 && self.rng.one_in(4) {
            // docs/syntax.md §7b: I8 operands (extremes included: casts
            // saturate), exact I32 sums.
            let (x, y) = (self.cast_to(x, Dtype::I8), self.cast_to(y, Dtype::I8));
            return Some(self.push(Op::MatmulI32(x.v, y.v), Dtype::I32, shape));
        }
        let y = self.cast_to(y, x.dt);
        Some(self.push(Op::Matmul(x.v, y.v), x.dt, shape))
    }

    fn reduce(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| !v.shape.is_empty())?;
        let rank = x.shape.len();
        let mut axes: Vec<usize> = (0..rank).collect();
        // A random non-empty subset, in random order.
        for i in (1..rank).rev() {
            axes.swap(i, self.rng.below(i + 1));
        }
        axes.truncate(1 + self.rng.below(rank));
        let ops: Vec<ReduceOp> = ReduceOp::ALL
            .into_iter()
            .filter(|o| o.admits(x.dt))
            .collect();
        let mut op = self.rng.pick(&ops);
        let empty_ok = axes.iter().all(|&a| !self.world.may_zero(&x.shape[a]));
        if op.needs_nonempty() && !empty_ok && !self.rng.one_in(16) {
            op = ReduceOp::Sum;
        }
        let keepdims = self.rng.one_in(2);
        let shape = tc_core::types::reduced_shape(&x.shape, &axes, keepdims);
        let op_ = Op::Reduce {
            op,
            axes,
            keepdims,
            x: x.v,
        };
        Some(self.push(op_, x.dt, shape))
    }

    fn arg_reduce(&mut self) -> Option<Val> {
        let w = self.world;
        let x = self.pick_val(|v| v.dt.is_numeric() && v.shape.iter().any(|d| !w.may_zero(d)))?;
        let axes: Vec<usize> = (0..x.shape.len())
            .filter(|&a| !w.may_zero(&x.shape[a]))
            .collect();
        let axis = self.rng.pick(&axes);
        let keepdims = self.rng.one_in(2);
        let mut shape = x.shape.clone();
        if keepdims {
            shape[axis] = Dim::c(1);
        } else {
            shape.remove(axis);
        }
        let op = Op::ArgReduce {
            max: self.rng.one_in(2),
            axis,
            keepdims,
            x: x.v,
        };
        Some(self.push(op, Dtype::I64, shape))
    }

    fn transpose(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| !v.shape.is_empty())?;
        let n = x.shape.len();
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            perm.swap(i, self.rng.below(i + 1));
        }
        let shape = perm.iter().map(|&p| x.shape[p].clone()).collect();
        Some(self.push(Op::Transpose(perm, x.v), x.dt, shape))
    }
}

impl<'a> Body<'a> {
    fn reshape(&mut self) -> Option<Val> {
        let x = self.pick_val(|_| true)?;
        let mut s = x.shape.clone();
        let n = s.len();
        match self.rng.below(5) {
            0 if n < MAX_RANK => s.insert(self.rng.below(n + 1), Dim::c(1)),
            1 => {
                let ones: Vec<usize> = (0..n).filter(|&i| s[i].as_const() == Some(1)).collect();
                if ones.is_empty() {
                    return None;
                }
                s.remove(self.rng.pick(&ones));
            }
            2 => {
                // Merge two neighbours; a product of two variables is not
                // Presburger, so one of them is a constant.
                let ok: Vec<usize> = (0..n.saturating_sub(1))
                    .filter(|&i| s[i].as_const().is_some() || s[i + 1].as_const().is_some())
                    .collect();
                if ok.is_empty() {
                    return None;
                }
                let i = self.rng.pick(&ok);
                let m = s[i].clone() * s[i + 1].clone();
                s[i] = m;
                s.remove(i + 1);
            }
            3 => self.split(&mut s)?,
            _ => {
                let vars = s.iter().filter(|d| d.as_const().is_none()).count();
                if vars > 1 {
                    return None;
                }
                let vol = s.iter().fold(Dim::c(1), |a, d| a * d.clone());
                s = vec![vol];
            }
        }
        Some(self.push(Op::Reshape(s.clone(), x.v), x.dt, s))
    }

    /// Split one axis in two: `D` into `[H, D / H]` under `D % H == 0`
    /// (§13), or a composite constant into two factors.
    fn split(&mut self, s: &mut Vec<Dim>) -> Option<()> {
        if s.len() >= MAX_RANK {
            return None;
        }
        let mut cands: Vec<(usize, Dim, Dim)> = Vec::new();
        for (i, d) in s.iter().enumerate() {
            for (dv, hv) in &self.world.divs {
                if d.as_var() == Some(dv.as_str()) {
                    let h = Dim::var(hv.clone());
                    cands.push((i, h.clone(), d.div(&h)));
                }
            }
            if let Some(c) = d.as_const() {
                for f in 2..c {
                    if c % f == 0 {
                        cands.push((i, Dim::c(f), Dim::c(c / f)));
                    }
                }
            }
        }
        if cands.is_empty() {
            return None;
        }
        let (i, a, b) = self.rng.pick(&cands);
        let (a, b) = if self.rng.one_in(2) { (a, b) } else { (b, a) };
        s[i] = a;
        s.insert(i + 1, b);
        Some(())
    }

    fn broadcast(&mut self) -> Option<Val> {
        let x = self.pick_val(|_| true)?;
        let mut target: Vec<Dim> = Vec::new();
        for d in &x.shape {
            if d.as_const() == Some(1) && self.rng.one_in(2) {
                target.push(self.pool_dim());
            } else {
                target.push(d.clone());
            }
        }
        let room = MAX_RANK - x.shape.len().min(MAX_RANK);
        let lead = self.rng.below(3).min(room);
        for _ in 0..lead {
            let d = self.pool_dim();
            target.insert(0, d);
        }
        Some(self.push(Op::Broadcast(target.clone(), x.v), x.dt, target))
    }

    fn slice(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| !v.shape.is_empty())?;
        let axis = self.rng.below(x.shape.len());
        let d = x.shape[axis].clone();
        let w = self.world;
        let mut cands: Vec<(Dim, Dim)> = vec![(Dim::c(0), d.clone())];
        if let Some(c) = d.as_const() {
            if c >= 1 {
                let a = self.rng.below(c as usize) as i64;
                let b = a + 1 + self.rng.below((c - a) as usize) as i64;
                cands.push((Dim::c(a), Dim::c(b)));
            }
        } else if !w.may_zero(&d) {
            cands.push((Dim::c(0), Dim::c(1)));
            cands.push((d.clone() - Dim::c(1), d.clone()));
        }
        for (sv, kv, c) in &w.orders {
            if d.as_var() == Some(sv.as_str()) {
                let k = Dim::var(kv.clone());
                cands.push((Dim::c(0), k.clone()));
                if *c >= 1 || w.zero(sv) || w.zero(kv) {
                    cands.push((k, d.clone()));
                }
            }
        }
        let (start, stop) = self.rng.pick(&cands);
        // Mostly plain slices; sometimes strided (⌈len / step⌉ long).
        let step = self.rng.pick(&[1, 1, 1, 2, 3, 7]);
        let mut shape = x.shape.clone();
        let len = stop.clone() - start.clone();
        shape[axis] = if step == 1 {
            len
        } else {
            (len + Dim::c(step as i64 - 1)).div(&Dim::c(step as i64))
        };
        let op = Op::Slice {
            axis,
            start,
            stop,
            step,
            x: x.v,
        };
        Some(self.push(op, x.dt, shape))
    }

    fn concat(&mut self) -> Option<Val> {
        let x = self.pick_val(|v| !v.shape.is_empty())?;
        let rank = x.shape.len();
        let axis = self.rng.below(rank);
        let k = 2 + self.rng.below(3);
        let mut xs = vec![x.v];
        let mut total = x.shape[axis].clone();
        let zeros: Vec<Dim> = self
            .world
            .vars
            .iter()
            .filter(|(_, z)| *z)
            .map(|(n, _)| Dim::var(n.clone()))
            .collect();
        for _ in 1..k {
            let fits = |v: &Val| {
                v.shape.len() == rank && (0..rank).all(|i| i == axis || v.shape[i] == x.shape[i])
            };
            let other = match self.rng.below(3) {
                0 => Some(x.clone()),
                1 => self.pick_val(fits).map(|v| self.cast_to(v, x.dt)),
                _ => None,
            };
            let o = match other {
                Some(o) => o,
                None => {
                    // A literal operand whose concat axis may be empty.
                    let mut s = x.shape.clone();
                    s[axis] = if !zeros.is_empty() && self.rng.one_in(2) {
                        self.rng.pick(&zeros)
                    } else {
                        self.pool_dim()
                    };
                    let sc = self.scalar_for(x.dt);
                    self.push(Op::Fill(x.dt, s.clone(), sc), x.dt, s)
                }
            };
            total = total + o.shape[axis].clone();
            xs.push(o.v);
        }
        let mut shape = x.shape.clone();
        shape[axis] = total;
        Some(self.push(Op::Concat(axis, xs), x.dt, shape))
    }

    fn call(&mut self) -> Option<Val> {
        let callees = self.callees;
        if callees.is_empty() {
            return None;
        }
        let c = &callees[self.rng.below(callees.len())];
        let (dt0, p0) = &c.params[0];
        let (w, cw) = (self.world, &c.world);
        let ok = |v: &Val| {
            v.shape.len() == p0.len()
                && p0
                    .iter()
                    .zip(&v.shape)
                    .all(|(p, d)| cw.may_zero(p) || !w.may_zero(d))
        };
        let x = self.pick_val(ok)?;
        let x = self.cast_to(x, *dt0);
        let theta: BTreeMap<String, Dim> = p0
            .iter()
            .zip(&x.shape)
            .filter_map(|(p, d)| p.as_var().map(|v| (v.to_string(), d.clone())))
            .collect();
        let mut args = vec![x.v];
        for (dt, shape) in &c.params[1..] {
            let target: Vec<Dim> = shape.iter().map(|d| d.subst(&theta)).collect();
            args.push(self.like(&target, *dt).v);
        }
        let mut theta = theta;
        if let Some(v) = &c.dim_param {
            let d = self.dim_arg();
            theta.insert(v.clone(), d.clone());
            // Right before the call: where the macro lowers a dim argument.
            args.push(self.fb.op(Op::Dim(d)));
        }
        let shape: Vec<Dim> = c.ret.1.iter().map(|d| d.subst(&theta)).collect();
        let r = self.push(
            Op::Call(c.func.sig.name.clone(), args),
            c.ret.0,
            shape.clone(),
        );
        if c.twin.is_none() || shape.is_empty() {
            return Some(r);
        }
        // The twin returns its last axis doubled: take the first half, so
        // that this function's text is the same for both. (The last axis:
        // a kernel planned for the original reads the twin's buffer with
        // the wrong row stride, where a prefix of axis 0 would be right
        // by accident.)
        let last = shape.len() - 1;
        let op = Op::Slice {
            axis: last,
            start: Dim::c(0),
            stop: shape[last].clone(),
            step: 1,
            x: r.v,
        };
        Some(self.push(op, r.dt, shape))
    }

    /// A dim argument for a callee's `Dim![V]` (`V ≥ 1`): a constant, or a
    /// variable of this function proven `≥ 1`, maybe scaled or shifted.
    fn dim_arg(&mut self) -> Dim {
        let w = self.world;
        let vars: Vec<Dim> = w
            .vars
            .iter()
            .filter(|(_, z)| !*z)
            .map(|(n, _)| Dim::var(n.clone()))
            .collect();
        let k = 1 + self.aux.below(3) as i64;
        if vars.is_empty() || self.aux.one_in(4) {
            return Dim::c(k);
        }
        let v = self.aux.pick(&vars);
        match self.aux.below(3) {
            0 => v,
            1 => v + Dim::c(k),
            _ => v * Dim::c(k),
        }
    }

    /// Draw `n` ops from the configured families; at least one op lands.
    fn run(&mut self, n: usize, families: &[Family]) {
        let mut done = 0;
        let mut tries = 0;
        while done < n && tries < n * 8 {
            tries += 1;
            let f = if !self.callees.is_empty() && tries == 1 && !self.rng.one_in(3) {
                Family::Call
            } else {
                self.rng.pick(families)
            };
            if self.step(f).is_some() {
                done += 1;
            }
        }
        if done == 0 {
            let x = self.vals.last().cloned().expect("a tensor parameter");
            let dt = self.rng.pick(&Dtype::ALL);
            self.push(Op::Cast(dt, x.v), dt, x.shape);
        }
    }
}

// -------------------------------------------------------------- programs

/// One generated program: callees (resolved by name), the function `f`
/// under test, and the twin callees (same names) when there are any.
#[derive(Clone, Debug)]
pub struct Program {
    /// Callees, in the order they may call each other.
    pub callees: Vec<Function>,
    /// `callees` with every callee that has a twin replaced by it.
    pub twins: Option<Vec<Function>>,
    /// The function under test.
    pub main: Function,
    /// Families of the ops in any function of the program (and its llama
    /// family, for one of those).
    pub used: BTreeSet<Family>,
    world: World,
    /// For a llama family's program: its σs and arguments.
    pub llama: Option<LlamaPlan>,
    /// For a real-sizes program: its σ.
    pub real: Option<RealPlan>,
}

fn body<'a>(
    rng: &'a mut Rng,
    cfg: &'a GenConfig,
    world: &'a World,
    callees: &'a [Callee],
    fb: FnBuilder,
    vals: Vec<Val>,
    scalars: Vec<(usize, Dtype)>,
) -> Body<'a> {
    let aux = Rng(rng.0 ^ 0xd1a5_0f0d_1a55_0001);
    Body {
        aux,
        rng,
        world,
        cfg,
        fb,
        vals,
        scalars,
        callees,
    }
}

fn gen_callee(rng: &mut Rng, cfg: &GenConfig, i: usize, earlier: &[Callee]) -> Callee {
    let mut world = World::default();
    let rank = 1 + rng.below(3);
    for j in 0..rank {
        world.vars.push((format!("U{i}{j}"), rng.one_in(3)));
    }
    let shape: Vec<Dim> = world
        .vars
        .iter()
        .map(|(n, _)| Dim::var(n.clone()))
        .collect();
    // Drawn from a stream of its own: a callee without it is unchanged.
    let mut aux = Rng(rng.0 ^ 0xd1a5_0f0d_1a55_0002);
    let dim_param = (cfg.dim_params && aux.one_in(3)).then(|| format!("V{i}"));
    let mut params = vec![(rng.pick(&Dtype::ALL), shape.clone())];
    if rng.one_in(2) {
        params.push((rng.pick(&Dtype::ALL), shape.clone()));
    }
    let mut fb = FnBuilder::new(&format!("g{i}"));
    let mut vals = Vec::new();
    for (k, (dt, s)) in params.iter().enumerate() {
        let v = fb.param(&format!("p{k}"), Type::tensor(*dt, s.clone()));
        vals.push(Val {
            v,
            dt: *dt,
            shape: s.clone(),
        });
    }
    for (n, z) in &world.vars {
        if *z {
            fb.requires(Pred::ge(Dim::var(n.clone()), 0));
        }
    }
    if let Some(v) = &dim_param {
        fb.param("n", Type::Dim(Dim::var(v.clone())));
        world.vars.push((v.clone(), false));
    }
    let (ret, mut fb) = {
        let mut b = body(rng, cfg, &world, earlier, fb, vals, vec![]);
        let n = 1 + b.rng.below(3);
        b.run(n, &cfg.op_families());
        let ret = b.vals.last().cloned().expect("a value");
        (ret, b.fb)
    };
    // The dim reaches the result: a leading axis of that size.
    let mut ret = ret;
    let lead = (1..MAX_RANK).contains(&ret.shape.len()) && aux.one_in(2);
    if let (Some(v), true) = (&dim_param, lead) {
        let mut shape = ret.shape.clone();
        shape.insert(0, Dim::var(v.clone()));
        let b = fb.op(Op::Broadcast(shape.clone(), ret.v));
        ret = Val { v: b, shape, ..ret };
    }
    let twin = (!ret.shape.is_empty() && !rng.one_in(3)).then(|| twin_of(&fb, &ret));
    let mut fb = fb;
    fb.returns(Type::tensor(ret.dt, ret.shape.clone()));
    Callee {
        func: fb.finish(ret.v),
        twin,
        params,
        world,
        ret: (ret.dt, ret.shape),
        dim_param,
    }
}

/// The twin body: `concat[axis=last](changed(r), r)` where `changed` alters
/// every element, so a stale kernel shows in the caller's first half.
fn twin_of(fb: &FnBuilder, ret: &Val) -> Function {
    let mut fb = fb.clone();
    let changed = if ret.dt.is_bool() {
        fb.op(Op::Unary(UnaryOp::Not, ret.v))
    } else {
        let s = if ret.dt.is_float() {
            Scalar::Float(1.0)
        } else {
            Scalar::Int(1)
        };
        fb.op(Op::ScalarBinary {
            op: BinaryOp::Add,
            x: ret.v,
            s,
            scalar_left: false,
        })
    };
    let last = ret.shape.len() - 1;
    let cat = fb.op(Op::Concat(last, vec![changed, ret.v]));
    let mut shape = ret.shape.clone();
    shape[last] = shape[last].clone() + shape[last].clone();
    fb.returns(Type::tensor(ret.dt, shape));
    fb.finish(cat)
}

/// Tensor parameter shapes of `f`: every variable appears bare in some
/// parameter, so the contract binds it (Section 2 §17).
fn main_shapes(rng: &mut Rng, world: &World) -> Vec<Vec<Dim>> {
    let n = 1 + rng.below(3);
    let mut shapes: Vec<Vec<Dim>> = (0..n)
        .map(|_| {
            let rank = rng.pick(&[0usize, 1, 2, 2, 2, 3, 3, 4]);
            (0..rank)
                .map(|_| {
                    if rng.one_in(4) {
                        Dim::c(rng.pick(&CONST_DIMS))
                    } else {
                        rng.pick(&world.var_dims())
                    }
                })
                .collect()
        })
        .collect();
    for v in world.var_dims() {
        if !shapes.iter().any(|s| s.contains(&v)) {
            shapes.push(vec![v]);
        }
    }
    shapes
}

/// `f`'s signature facts: the opt-ins into `>= 0`, `D % H == 0` and
/// `S >= K + c`, each either a refinement of a parameter that mentions the
/// variable or a `requires` (Section 2 §15: placement is syntax only).
fn main_facts(rng: &mut Rng, world: &World, shapes: &[Vec<Dim>]) -> (Vec<Vec<Pred>>, Vec<Pred>) {
    let mut refs: Vec<Vec<Pred>> = vec![Vec::new(); shapes.len()];
    let mut requires = Vec::new();
    let mut place = |rng: &mut Rng, var: &str, p: Pred| {
        let holder = shapes.iter().position(|s| s.contains(&Dim::var(var)));
        match holder {
            Some(i) if rng.one_in(2) => refs[i].push(p),
            _ => requires.push(p),
        }
    };
    for (n, z) in &world.vars {
        if *z {
            place(rng, n, Pred::ge(Dim::var(n.clone()), 0));
        }
    }
    for (d, h) in &world.divs {
        place(
            rng,
            d,
            Pred::eq(Dim::var(d.clone()).rem(&Dim::var(h.clone())), 0),
        );
    }
    for (s, k, c) in &world.orders {
        place(
            rng,
            s,
            Pred::ge(Dim::var(s.clone()), Dim::var(k.clone()) + Dim::c(*c)),
        );
    }
    (refs, requires)
}

/// `n: Dim![d]` after `f`'s other parameters, one time in three, `d` a
/// variable of `f` (already bound by a tensor, so the call compares) or a
/// multiple of one. Drawn from a stream of its own.
fn main_dim_param(rng: &Rng, world: &World, fb: &mut FnBuilder) {
    let mut aux = Rng(rng.0 ^ 0xd1a5_0f0d_1a55_0003);
    if world.vars.is_empty() || !aux.one_in(3) {
        return;
    }
    let v = Dim::var(aux.pick(&world.vars).0);
    let d = if aux.one_in(3) { v * Dim::c(2) } else { v };
    fb.param("n", Type::Dim(d));
}

/// Generate the program of case `seed`.
pub fn gen_program(seed: u64, cfg: &GenConfig) -> Program {
    if let Some(p) = llama_program(seed, cfg) {
        return p;
    }
    if let Some(p) = real_program(seed, cfg) {
        return p;
    }
    let mut rng = Rng::new(seed);
    let mut callees: Vec<Callee> = Vec::new();
    if cfg.allows(Family::Call) && !rng.one_in(3) {
        for i in 0..1 + rng.below(2) {
            let c = gen_callee(&mut rng, cfg, i, &callees);
            callees.push(c);
        }
    }
    let world = main_world(&mut rng);
    let shapes = main_shapes(&mut rng, &world);
    let (refs, requires) = main_facts(&mut rng, &world, &shapes);
    let mut fb = FnBuilder::new("f");
    let mut vals = Vec::new();
    for (i, (s, r)) in shapes.iter().zip(refs).enumerate() {
        let dt = rng.pick(&Dtype::ALL);
        let ty = Type::Tensor(TensorType::new(dt, s.clone()).with_refs(r));
        let v = fb.param(&format!("x{i}"), ty);
        vals.push(Val {
            v,
            dt,
            shape: s.clone(),
        });
    }
    let mut scalars = Vec::new();
    for k in 0..rng.below(3) {
        let dt = rng.pick(&Dtype::ALL);
        scalars.push((fb.sig().params.len(), dt));
        fb.param(&format!("s{k}"), Type::Scalar(dt));
    }
    if cfg.dim_params {
        main_dim_param(&rng, &world, &mut fb);
    }
    for p in requires {
        fb.requires(p);
    }
    let n_ops = 1 + rng.below(cfg.max_ops.max(1));
    let (ret, fb) = {
        let mut b = body(&mut rng, cfg, &world, &callees, fb, vals, scalars);
        b.run(n_ops, &cfg.op_families());
        let k = b.vals.len();
        let ret = b.vals[k - 1 - b.rng.below(2.min(k - shapes.len()).max(1))].clone();
        (ret, b.fb)
    };
    let mut fb = fb;
    fb.returns(Type::tensor(ret.dt, ret.shape.clone()));
    let main = fb.finish(ret.v);
    let mut used = families_in(&main);
    for c in &callees {
        used.extend(families_in(&c.func));
    }
    let calls_twin = main.body.iter().any(|i| match &i.op {
        Op::Call(n, _) => callees
            .iter()
            .any(|c| &c.func.sig.name == n && c.twin.is_some()),
        _ => false,
    });
    let twins = calls_twin.then(|| {
        callees
            .iter()
            .map(|c| c.twin.clone().unwrap_or_else(|| c.func.clone()))
            .collect()
    });
    Program {
        callees: callees.into_iter().map(|c| c.func).collect(),
        twins,
        main,
        used,
        world,
        llama: None,
        real: None,
    }
}

/// The families of the ops in `f`'s body.
pub fn families_in(f: &Function) -> BTreeSet<Family> {
    f.body
        .iter()
        .map(|i| match &i.op {
            Op::Unary(..) => Family::Unary,
            Op::Cast(..) => Family::Cast,
            Op::Binary(..) => Family::Binary,
            Op::ScalarBinary { .. } => Family::ScalarBinary,
            Op::Select(..) => Family::Select,
            // The generator draws no quantized operand; a hand-made one
            // counts as a matmul.
            Op::Matmul(..) | Op::MatmulI32(..) | Op::DqMatmul { .. } | Op::QMatmul(..) => {
                Family::Matmul
            }
            Op::Reduce { .. } => Family::Reduce,
            Op::ArgReduce { .. } => Family::ArgReduce,
            Op::Transpose(..) => Family::Transpose,
            Op::Reshape(..) => Family::Reshape,
            Op::Broadcast(..) => Family::Broadcast,
            Op::Slice { .. } => Family::Slice,
            Op::Concat(..) => Family::Concat,
            Op::Fill(..) => Family::Fill,
            Op::Iota(..) => Family::Iota,
            Op::Gather { .. } => Family::Gather,
            Op::TopK { .. } => Family::TopK,
            Op::CumSum { .. } => Family::CumSum,
            Op::Pad { .. } => Family::Pad,
            Op::Rope { .. } => Family::Rotary,
            Op::Sdpa { .. } => Family::Attention,
            Op::Conv { .. } => Family::Conv,
            Op::Pool { .. } => Family::Pool,
            // A dim value exists only as a call's argument.
            Op::Call(..) | Op::Dim(_) => Family::Call,
        })
        .collect()
}

// -------------------------------------------------------- llama families

/// One program in `LLAMA_ONE_IN` of the default mix (any mix that allows
/// other families too) is a llama family's.
pub const LLAMA_ONE_IN: usize = 10;

/// The six families of the SmolLM2 model's operations.
pub const LLAMA: [Family; 6] = [
    Family::RmsNorm,
    Family::Rope,
    Family::SwiGlu,
    Family::Gqa,
    Family::Attention,
    Family::Llama,
];

/// What a llama family's program needs besides its text: σ candidates and
/// how to fill its arguments (`prepare`).
#[derive(Clone, Debug)]
pub struct LlamaPlan {
    /// The family.
    pub family: Family,
    /// Candidate σs (the module constants included), largest first, each
    /// with the position of its first row (RoPE's tables, the causal
    /// mask): the first within the budget is used.
    sigmas: Vec<(Sigma, usize)>,
    /// RoPE's base frequency.
    theta: f64,
    /// Magnitude of the activations (weights are scaled by their fan-in).
    scale: f32,
    /// The mask's value where a key is hidden: −1e30 as the model's, or −∞.
    hidden: f32,
}

/// The model's constants for one program: `D = H · HD`, `H = G · KV`,
/// `HALF = HD / 2`, `KVD = KV · HD`, `F` the feed-forward width.
#[derive(Clone, Copy, Debug)]
struct LlamaDims {
    d: i64,
    h: i64,
    kv: i64,
    g: i64,
    hd: i64,
    half: i64,
    kvd: i64,
    f: i64,
}

impl LlamaDims {
    fn draw(rng: &mut Rng) -> LlamaDims {
        let kv = rng.pick(&[1, 2, 3]);
        let g = 1 + rng.below(4) as i64;
        let h = g * kv;
        let hd = rng.pick(&[2, 4, 6, 8, 16, 24, 32, 64, 64, 64]);
        let d = h * hd;
        let f = rng.pick(&[1, 2, 3]) * d + rng.below(3) as i64 * 8;
        LlamaDims {
            d,
            h,
            kv,
            g,
            hd,
            half: hd / 2,
            kvd: kv * hd,
            f,
        }
    }

    fn consts(&self) -> [(&'static str, i64); 8] {
        [
            ("D", self.d),
            ("H", self.h),
            ("KV", self.kv),
            ("G", self.g),
            ("HD", self.hd),
            ("HALF", self.half),
            ("KVD", self.kvd),
            ("F", self.f),
        ]
    }
}

fn var(n: &str) -> Dim {
    Dim::var(n)
}

fn dims(names: &[&str]) -> Vec<Dim> {
    names
        .iter()
        .map(|n| match n.parse::<i64>() {
            Ok(c) => Dim::c(c),
            Err(_) => var(n),
        })
        .collect()
}

fn f32_param(fb: &mut FnBuilder, name: &str, shape: &[&str]) -> Value {
    fb.param(name, Type::tensor(Dtype::F32, dims(shape)))
}

fn new_fn(name: &str, dm: &LlamaDims) -> FnBuilder {
    let mut fb = FnBuilder::new(name);
    for (n, v) in dm.consts() {
        fb.constant(n, v);
    }
    fb
}

fn bin(fb: &mut FnBuilder, op: BinaryOp, a: Value, b: Value) -> Value {
    fb.op(Op::Binary(op, a, b))
}

fn bcast(fb: &mut FnBuilder, shape: &[&str], x: Value) -> Value {
    fb.op(Op::Broadcast(dims(shape), x))
}

fn reshape(fb: &mut FnBuilder, shape: &[&str], x: Value) -> Value {
    fb.op(Op::Reshape(dims(shape), x))
}

fn slice(fb: &mut FnBuilder, axis: usize, start: Dim, stop: Dim, x: Value) -> Value {
    fb.op(Op::Slice {
        axis,
        start,
        stop,
        step: 1,
        x,
    })
}

fn finish(mut fb: FnBuilder, shape: &[&str], ret: Value) -> Function {
    fb.returns(Type::tensor(Dtype::F32, dims(shape)));
    fb.finish(ret)
}

/// `rms_norm` of model.rs, op for op: `x / √(mean(x²) + ε) · w`.
fn llama_rms_norm(dm: &LlamaDims, name: &str) -> Function {
    let mut fb = new_fn(name, dm);
    let x = f32_param(&mut fb, "x", &["B", "S", "D"]);
    let w = f32_param(&mut fb, "w", &["D"]);
    let sq = bin(&mut fb, BinaryOp::Mul, x, x);
    let mean = fb.op(Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![2],
        keepdims: true,
        x: sq,
    });
    let eps = fb.op(Op::ScalarBinary {
        op: BinaryOp::Add,
        x: mean,
        s: Scalar::Float(1e-5),
        scalar_left: false,
    });
    let inv = fb.op(Op::Unary(UnaryOp::Rsqrt, eps));
    let inv = bcast(&mut fb, &["B", "S", "D"], inv);
    let xi = bin(&mut fb, BinaryOp::Mul, x, inv);
    let w = bcast(&mut fb, &["B", "S", "D"], w);
    let r = bin(&mut fb, BinaryOp::Mul, xi, w);
    finish(fb, &["B", "S", "D"], r)
}

/// `rotate_pairs` (adjacent pairs) or `rotate_halves` of model.rs, op for
/// op: the tables broadcast over batch and heads, then the `rope` op.
fn llama_rope(dm: &LlamaDims, name: &str, pairs: bool) -> Function {
    let mut fb = new_fn(name, dm);
    let x = f32_param(&mut fb, "x", &["B", "S", "N", "HD"]);
    let cos = f32_param(&mut fb, "cos", &["S", "HALF"]);
    let sin = f32_param(&mut fb, "sin", &["S", "HALF"]);
    let c = reshape(&mut fb, &["1", "S", "1", "HALF"], cos);
    let c = bcast(&mut fb, &["B", "S", "N", "HALF"], c);
    let s = reshape(&mut fb, &["1", "S", "1", "HALF"], sin);
    let s = bcast(&mut fb, &["B", "S", "N", "HALF"], s);
    let layout = if pairs {
        RopeLayout::Pairs
    } else {
        RopeLayout::Halves
    };
    let r = fb.op(Op::Rope {
        layout,
        x,
        cos: c,
        sin: s,
    });
    finish(fb, &["B", "S", "N", "HD"], r)
}

/// The attention core of model.rs's `attention` from the grouped queries
/// `q5 [B, KV, G, S, HD]`, keys and values `[B, KV, G, T, HD]` (broadcast
/// over the group axis, read in place by the matmul), and a mask `[S, T]`
/// (none: every key visible): the context `[B, S, D]`.
fn attend(
    fb: &mut FnBuilder,
    t: &str,
    q5: Value,
    (k, v): (Value, Value),
    mask: Option<Value>,
    fused: bool,
) -> Value {
    let st = ["B", "KV", "G", "S", t];
    let m = mask.map(|m| {
        let m = reshape(fb, &["1", "1", "1", "S", t], m);
        bcast(fb, &st, m)
    });
    let kt = fb.op(Op::Transpose(vec![0, 1, 2, 4, 3], k));
    if fused {
        // The same attention as one `sdpa` (docs/syntax.md §12f); no mask
        // is a zero one.
        let mask = match m {
            Some(m) => m,
            None => fb.op(Op::Fill(Dtype::F32, dims(&st), Scalar::Float(0.0))),
        };
        let ctx = fb.op(Op::Sdpa {
            q: q5,
            k: kt,
            v,
            mask,
            scale: Scalar::Float(0.125),
        });
        return heads_merged(fb, ctx);
    }
    let qk = fb.op(Op::Matmul(q5, kt));
    let mut scores = fb.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: qk,
        s: Scalar::Float(0.125),
        scalar_left: false,
    });
    if let Some(m) = m {
        scores = bin(fb, BinaryOp::Add, scores, m);
    }
    let max = fb.op(Op::Reduce {
        op: ReduceOp::Max,
        axes: vec![4],
        keepdims: true,
        x: scores,
    });
    let max = bcast(fb, &st, max);
    let z = bin(fb, BinaryOp::Sub, scores, max);
    let e = fb.op(Op::Unary(UnaryOp::Exp, z));
    let sum = fb.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![4],
        keepdims: true,
        x: e,
    });
    let sum = bcast(fb, &st, sum);
    let probs = bin(fb, BinaryOp::Div, e, sum);
    let ctx = fb.op(Op::Matmul(probs, v));
    heads_merged(fb, ctx)
}

/// A context `[B, KV, G, S, HD]` back to `[B, S, D]`.
fn heads_merged(fb: &mut FnBuilder, ctx: Value) -> Value {
    let ctx = reshape(fb, &["B", "H", "S", "HD"], ctx);
    let ctx = fb.op(Op::Transpose(vec![0, 2, 1, 3], ctx));
    reshape(fb, &["B", "S", "D"], ctx)
}

/// `q [B, S, D]` as grouped heads `[B, KV, G, S, HD]`.
fn group_queries(fb: &mut FnBuilder, q: Value) -> Value {
    let q = reshape(fb, &["B", "S", "H", "HD"], q);
    let q = fb.op(Op::Transpose(vec![0, 2, 1, 3], q));
    reshape(fb, &["B", "KV", "G", "S", "HD"], q)
}

/// model.rs's `attention`, op for op: causal grouped-query attention of S
/// new positions over the first T of a KV cache of C positions.
fn llama_attention(dm: &LlamaDims, name: &str, fused: bool) -> Function {
    let mut fb = new_fn(name, dm);
    let q = f32_param(&mut fb, "q", &["B", "S", "D"]);
    let kc = f32_param(&mut fb, "kc", &["B", "KV", "C", "HD"]);
    let vc = f32_param(&mut fb, "vc", &["B", "KV", "C", "HD"]);
    let _t = fb.param("t", Type::Dim(var("T")));
    let mask = f32_param(&mut fb, "mask", &["S", "T"]);
    fb.requires(Pred::le(var("T"), var("C")));
    let q5 = group_queries(&mut fb, q);
    let cached = |fb: &mut FnBuilder, c: Value| {
        let x = slice(fb, 2, Dim::c(0), var("T"), c);
        let x = reshape(fb, &["B", "KV", "1", "T", "HD"], x);
        bcast(fb, &["B", "KV", "G", "T", "HD"], x)
    };
    let k = cached(&mut fb, kc);
    let v = cached(&mut fb, vc);
    let r = attend(&mut fb, "T", q5, (k, v), Some(mask), fused);
    finish(fb, &["B", "S", "D"], r)
}

/// Grouped-query attention of fresh keys and values `[B, S, KVD]` (laid
/// out head-major as model.rs's `keys` and `values` do), KV heads
/// repeated by broadcast; causal (a mask `[S, S]`) or not.
fn llama_gqa(dm: &LlamaDims, name: &str, masked: bool, fused: bool) -> Function {
    let mut fb = new_fn(name, dm);
    let q = f32_param(&mut fb, "q", &["B", "S", "D"]);
    let k = f32_param(&mut fb, "k", &["B", "S", "KVD"]);
    let v = f32_param(&mut fb, "v", &["B", "S", "KVD"]);
    let mask = masked.then(|| f32_param(&mut fb, "mask", &["S", "S"]));
    let heads = |fb: &mut FnBuilder, x: Value| {
        let x = reshape(fb, &["B", "S", "KV", "HD"], x);
        let x = fb.op(Op::Transpose(vec![0, 2, 1, 3], x));
        let x = reshape(fb, &["B", "KV", "1", "S", "HD"], x);
        bcast(fb, &["B", "KV", "G", "S", "HD"], x)
    };
    let q5 = group_queries(&mut fb, q);
    let k = heads(&mut fb, k);
    let v = heads(&mut fb, v);
    let r = attend(&mut fb, "S", q5, (k, v), mask, fused);
    finish(fb, &["B", "S", "D"], r)
}

/// SiLU and SwiGLU as model.rs's `mix` computes them: `g · σ(g)`, times
/// `u` for SwiGLU.
fn llama_swiglu(dm: &LlamaDims, name: &str, glu: bool) -> Function {
    let mut fb = new_fn(name, dm);
    let g = f32_param(&mut fb, "g", &["B", "S", "F"]);
    let u = glu.then(|| f32_param(&mut fb, "u", &["B", "S", "F"]));
    let s = fb.op(Op::Unary(UnaryOp::Sigmoid, g));
    let mut r = bin(&mut fb, BinaryOp::Mul, g, s);
    if let Some(u) = u {
        r = bin(&mut fb, BinaryOp::Mul, r, u);
    }
    finish(fb, &["B", "S", "F"], r)
}

/// One decoder layer in the shape of model.rs's forward pass, in one
/// function calling tensor fns like the model's: `attn_input`, `queries`,
/// `keys` and `values` (f32 weights `[in, out]`, broadcast over the batch,
/// each projection its own product, where the model reads Q4_1 blocks and
/// stacks the query and value projections into one), the new keys and values appended to a cache
/// of P past positions with E spare ones (the model writes them in place),
/// `attention` over the first P + S, and `mix` (its output projection,
/// residuals, norm and SwiGLU feed-forward).
fn llama_layer(dm: &LlamaDims, pairs: bool, fused: bool) -> (Vec<Function>, Function) {
    let rope = if pairs {
        "rotate_pairs"
    } else {
        "rotate_halves"
    };
    let callees = vec![
        llama_rms_norm(dm, "rms_norm"),
        llama_rope(dm, rope, pairs),
        llama_attention(dm, "attention", fused),
    ];
    let mut fb = new_fn("f", dm);
    let x = f32_param(&mut fb, "x", &["B", "S", "D"]);
    let attn_norm = f32_param(&mut fb, "attn_norm", &["D"]);
    let wq = f32_param(&mut fb, "wq", &["D", "D"]);
    let wk = f32_param(&mut fb, "wk", &["D", "KVD"]);
    let wv = f32_param(&mut fb, "wv", &["D", "KVD"]);
    let wo = f32_param(&mut fb, "wo", &["D", "D"]);
    let ffn_norm = f32_param(&mut fb, "ffn_norm", &["D"]);
    let gate = f32_param(&mut fb, "gate", &["D", "F"]);
    let up = f32_param(&mut fb, "up", &["D", "F"]);
    let down = f32_param(&mut fb, "down", &["F", "D"]);
    let cos = f32_param(&mut fb, "cos", &["S", "HALF"]);
    let sin = f32_param(&mut fb, "sin", &["S", "HALF"]);
    let kp = f32_param(&mut fb, "kp", &["B", "KV", "P", "HD"]);
    let vp = f32_param(&mut fb, "vp", &["B", "KV", "P", "HD"]);
    // Binds E, the spare room of the cache.
    fb.param("e", Type::Dim(var("E")));
    let mask = fb.param(
        "mask",
        Type::tensor(Dtype::F32, vec![var("S"), var("P") + var("S")]),
    );
    fb.requires(Pred::ge(var("P"), 0));
    fb.requires(Pred::ge(var("E"), 0));
    let call = |fb: &mut FnBuilder, f: &str, xs: Vec<Value>| fb.op(Op::Call(f.into(), xs));
    let proj = |fb: &mut FnBuilder, x: Value, w: Value, shape: [&str; 3]| {
        let w = bcast(fb, &shape, w);
        fb.op(Op::Matmul(x, w))
    };
    let xn = call(&mut fb, "rms_norm", vec![x, attn_norm]);
    let q = proj(&mut fb, xn, wq, ["B", "D", "D"]);
    let q = reshape(&mut fb, &["B", "S", "H", "HD"], q);
    let q = call(&mut fb, rope, vec![q, cos, sin]);
    let q = reshape(&mut fb, &["B", "S", "D"], q);
    let k = proj(&mut fb, xn, wk, ["B", "D", "KVD"]);
    let k = reshape(&mut fb, &["B", "S", "KV", "HD"], k);
    let k = call(&mut fb, rope, vec![k, cos, sin]);
    let k = fb.op(Op::Transpose(vec![0, 2, 1, 3], k));
    let v = proj(&mut fb, xn, wv, ["B", "D", "KVD"]);
    let v = reshape(&mut fb, &["B", "S", "KV", "HD"], v);
    let v = fb.op(Op::Transpose(vec![0, 2, 1, 3], v));
    let cache = |fb: &mut FnBuilder, past: Value, new: Value| {
        let c = fb.op(Op::Concat(2, vec![past, new]));
        fb.op(Op::Pad {
            axis: 2,
            before: Dim::c(0),
            after: var("E"),
            value: Scalar::Float(0.0),
            x: c,
        })
    };
    let kc = cache(&mut fb, kp, k);
    let vc = cache(&mut fb, vp, v);
    let t = fb.op(Op::Dim(var("P") + var("S")));
    let ctx = call(&mut fb, "attention", vec![q, kc, vc, t, mask]);
    // `mix`.
    let o = proj(&mut fb, ctx, wo, ["B", "D", "D"]);
    let h = bin(&mut fb, BinaryOp::Add, x, o);
    let hn = call(&mut fb, "rms_norm", vec![h, ffn_norm]);
    let g = proj(&mut fb, hn, gate, ["B", "D", "F"]);
    let s = fb.op(Op::Unary(UnaryOp::Sigmoid, g));
    let gs = bin(&mut fb, BinaryOp::Mul, g, s);
    let u = proj(&mut fb, hn, up, ["B", "D", "F"]);
    let gu = bin(&mut fb, BinaryOp::Mul, gs, u);
    let dn = proj(&mut fb, gu, down, ["B", "F", "D"]);
    let r = bin(&mut fb, BinaryOp::Add, h, dn);
    (callees, finish(fb, &["B", "S", "D"], r))
}

/// The llama family program of case `seed`, if it is one: always when
/// `cfg` allows llama families only, one in [`LLAMA_ONE_IN`] when it
/// allows others too (drawn from a stream of its own, so that every other
/// seed generates the program it generated before these families).
fn llama_program(seed: u64, cfg: &GenConfig) -> Option<Program> {
    let allowed: Vec<Family> = LLAMA.into_iter().filter(|f| cfg.allows(*f)).collect();
    if allowed.is_empty() {
        return None;
    }
    let mut rng = Rng::new(seed ^ 0x11a3_a5e9_0c0d_e5e1);
    let only = cfg.families.iter().all(|f| f.is_llama());
    if !only && !rng.one_in(LLAMA_ONE_IN) {
        return None;
    }
    let family = rng.pick(&allowed);
    let mut dm = LlamaDims::draw(&mut rng);
    // A layer's weights are arguments: `[D, D]` and `[D, F]` within the
    // long run's budget.
    while family == Family::Llama && dm.d * dm.d.max(dm.f) > LONG_BUDGET as i64 {
        dm = LlamaDims::draw(&mut rng);
    }
    if family == Family::RmsNorm {
        // Any width, not only a multiple of the head width.
        dm.d = rng.pick(&[1, 2, 3, 5, 8, 16, 63, 64, 96, 127, 192, 256, 384, 576]);
    }
    let pairs = rng.one_in(2);
    // Attention as the composition or as the fused op, alike often.
    let fused = rng.one_in(2);
    let (callees, main) = match family {
        Family::RmsNorm => (vec![], llama_rms_norm(&dm, "f")),
        Family::Rope => (vec![], llama_rope(&dm, "f", pairs)),
        Family::SwiGlu => (vec![], llama_swiglu(&dm, "f", !rng.one_in(3))),
        Family::Gqa => (vec![], llama_gqa(&dm, "f", !rng.one_in(3), fused)),
        Family::Attention => (vec![], llama_attention(&dm, "f", fused)),
        _ => llama_layer(&dm, pairs, fused),
    };
    // Shapes: batch, sequence 1..=40 (1 is a decode step), heads for RoPE,
    // past positions (RoPE's offset, the cache) and spare cache room.
    let b = rng.pick(&[1, 1, 1, 2, 3]);
    let s = if rng.one_in(4) { 1 } else { 1 + rng.below(40) };
    let n = 1 + rng.below(9);
    let p = if rng.one_in(4) { 0 } else { rng.below(41) };
    let e = rng.pick(&[0, 0, 1, 3, 8]);
    let mut sigmas = Vec::new();
    let (mut b, mut s, mut n, mut p, mut e) = (b, s, n, p, e);
    loop {
        let mut sigma: Sigma = dm
            .consts()
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        for (k, v) in [("B", b), ("S", s), ("N", n), ("P", p), ("E", e)] {
            sigma.insert(k.into(), v as i64);
        }
        sigma.insert("T".into(), (p + s) as i64);
        sigma.insert("C".into(), (p + s + e) as i64);
        sigmas.push((sigma, p));
        if (b, s, n, p, e) == (1, 1, 1, 0, 0) {
            break;
        }
        (b, s, n, p, e) = (1.max(b / 2), 1.max(s / 2), 1.max(n / 2), p / 2, e / 2);
    }
    let plan = LlamaPlan {
        family,
        sigmas,
        theta: rng.pick(&[10_000.0, 10_000.0, 100_000.0, 500_000.0]),
        scale: rng.pick(&[
            1e-3, 0.5, 1.0, 1.0, 2.0, 8.0, 100.0, 1e4, 1e10, 1e19, 1e30, 3e38,
        ]),
        hidden: if rng.one_in(4) {
            f32::NEG_INFINITY
        } else {
            -1e30
        },
    };
    let mut used = families_in(&main);
    for c in &callees {
        used.extend(families_in(c));
    }
    used.insert(family);
    Some(Program {
        callees,
        twins: None,
        main,
        used,
        world: World::default(),
        llama: Some(plan),
        real: None,
    })
}

/// Arguments for a llama family's program at σ: activations of the plan's
/// magnitude, weights scaled by their fan-in, RoPE tables of positions
/// `start..start + S` computed as the model computes them (angles in f64,
/// rounded once), the model's causal mask, dims from σ. One tensor in five
/// gets a few special encodings (NaN, ±inf, −0, subnormals).
fn llama_args(
    plan: &LlamaPlan,
    sig: &tc_core::ir::Signature,
    sigma: &Sigma,
    start: usize,
    rng: &mut Rng,
) -> Vec<Arg> {
    let mut args = Vec::new();
    for p in &sig.params {
        let shape = match &p.ty {
            Type::Dim(d) => {
                let n = d.eval(sigma).expect("a dim under σ");
                args.push(Arg::Dim(n as usize));
                continue;
            }
            t => concrete(t, sigma).expect("parameter shape under σ").1,
        };
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match p.name.as_str() {
            "cos" | "sin" => {
                let (rows, half) = (shape[0], shape[1]);
                let mut v = Vec::with_capacity(n);
                for pos in start..start + rows {
                    for i in 0..half {
                        let inv = 1.0 / plan.theta.powf((2 * i) as f64 / (2 * half) as f64);
                        let a = pos as f64 * inv;
                        v.push(if p.name == "cos" { a.cos() } else { a.sin() } as f32);
                    }
                }
                v
            }
            "mask" => {
                // Query i, at position t − s + i, sees keys at positions ≤ it.
                let (s, t) = (shape[0], shape[1]);
                (0..n)
                    .map(|k| {
                        if k % t <= t - s + k / t {
                            0.0
                        } else {
                            plan.hidden
                        }
                    })
                    .collect()
            }
            name => {
                let weight = !matches!(
                    name,
                    "x" | "q" | "k" | "v" | "kc" | "vc" | "kp" | "vp" | "g" | "u"
                );
                let scale = if weight {
                    1.0 / (shape[0] as f32).sqrt()
                } else {
                    plan.scale
                };
                (0..n).map(|_| (rng.unit() * 2.0 - 1.0) * scale).collect()
            }
        };
        let t = Tensor::from_vec(&shape, data).expect("an f32 tensor");
        let t = if n > 0 && rng.one_in(5) && !matches!(p.name.as_str(), "cos" | "sin" | "mask") {
            let mut bytes = t.bytes().to_vec();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(n);
                let pat = rng.pick(special_bits(Dtype::F32));
                bytes[i * 4..i * 4 + 4].copy_from_slice(&pat.to_le_bytes());
            }
            Tensor::from_raw(Dtype::F32, &shape, bytes).expect("valid encodings")
        } else {
            t
        };
        args.push(Arg::Tensor(t));
    }
    args
}

// ------------------------------------------------------------ real sizes

/// Largest value of a real-sizes case, in elements (2^22: 16 MiB of f32).
pub const REAL_BUDGET: usize = 1 << 22;
/// Most multiply-adds of all a real-sizes case's products together: the
/// interpreter (the slow side) computes them one by one.
pub const REAL_MAX_MACS: u128 = 1 << 26;
/// The products' split threshold (`tc_llvm::kernels::matmul::PAR_MIN_MACS`).
pub const PAR_MACS: u128 = 1 << 23;
/// The elementwise split threshold (`tc_llvm::exec::PAR_MIN_WORK`).
pub const PAR_ELEMS: u128 = 1 << 18;

/// A real-sizes program's σ (dims in the hundreds to thousands) and what
/// it was built to reach.
#[derive(Clone, Debug)]
pub struct RealPlan {
    /// `matmul` (a product of a weight parameter) or `elementwise` (a
    /// chain over one large value).
    pub kind: &'static str,
    /// Its σ.
    pub sigma: Sigma,
}

/// The F32 unary ops that are tolerance sources in fast-math mode.
fn fast_unary(u: UnaryOp) -> bool {
    matches!(
        u,
        UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Erf
            | UnaryOp::Gelu
    )
}

/// Chain builder of a real-sizes program: each op's dtype tracked.
struct RealChain<'r> {
    rng: &'r mut Rng,
    fb: FnBuilder,
}

impl RealChain<'_> {
    /// A unary op admitting `dt`; a tolerance source (F32 fast-math) only
    /// where `last` (the value is compared within the bound, not tainted).
    fn unary(&mut self, x: Value, dt: Dtype, last: bool) -> Option<Value> {
        let ops: Vec<UnaryOp> = UnaryOp::ALL
            .into_iter()
            .filter(|o| o.admits(dt) && (last || dt != Dtype::F32 || !fast_unary(*o)))
            .collect();
        if ops.is_empty() {
            return None;
        }
        let op = self.rng.pick(&ops);
        Some(self.fb.op(Op::Unary(op, x)))
    }

    /// One elementwise step on `x` (of `dt`, `shape`): a unary op, a binary
    /// op with `other` (same dtype and shape) or a fill, or a scalar op.
    fn step(
        &mut self,
        x: Value,
        dt: Dtype,
        shape: &[Dim],
        other: Option<Value>,
        last: bool,
    ) -> (Value, Dtype) {
        let bins: Vec<BinaryOp> = BinaryOp::ALL.into_iter().filter(|o| o.admits(dt)).collect();
        match self.rng.below(4) {
            0 | 1 if !bins.is_empty() => {
                let op = self.rng.pick(&bins);
                let y = match other {
                    Some(y) if !self.rng.one_in(4) => y,
                    _ => {
                        let s = real_scalar(self.rng, dt);
                        self.fb.op(Op::Fill(dt, shape.to_vec(), s))
                    }
                };
                let (a, b) = if self.rng.one_in(2) { (x, y) } else { (y, x) };
                (self.fb.op(Op::Binary(op, a, b)), op.result_dtype(dt))
            }
            2 if !bins.is_empty() => {
                let op = self.rng.pick(&bins);
                let s = real_scalar(self.rng, dt);
                let scalar_left = self.rng.one_in(2);
                let v = self.fb.op(Op::ScalarBinary {
                    op,
                    x,
                    s,
                    scalar_left,
                });
                (v, op.result_dtype(dt))
            }
            _ => match self.unary(x, dt, last) {
                Some(v) => (v, dt),
                None => (self.fb.op(Op::Cast(Dtype::F32, x)), Dtype::F32),
            },
        }
    }

    /// A reduction of `x` (of `shape`) over `axes`: the last op (a float
    /// sum or mean is a tolerance source outside deterministic mode).
    fn reduce(
        &mut self,
        x: Value,
        dt: Dtype,
        shape: &[Dim],
        axes: Vec<usize>,
    ) -> (Value, Vec<Dim>) {
        let ops: Vec<ReduceOp> = ReduceOp::ALL.into_iter().filter(|o| o.admits(dt)).collect();
        let op = self.rng.pick(&ops);
        let keepdims = self.rng.one_in(2);
        let out = tc_core::types::reduced_shape(shape, &axes, keepdims);
        let v = self.fb.op(Op::Reduce {
            op,
            axes,
            keepdims,
            x,
        });
        (v, out)
    }
}

fn real_scalar(rng: &mut Rng, dt: Dtype) -> Scalar {
    if dt.is_float() {
        Scalar::Float(rng.pick(&[0.5, -1.0, 2.0, 1e-3, 3.0, -0.0]))
    } else if dt.is_int() {
        Scalar::Int(int_literal(rng, dt))
    } else {
        Scalar::Bool(rng.one_in(2))
    }
}

/// A product's dims `(m, k, n)`: hundreds to thousands (m also 1 to 140,
/// the streamed and in-place paths), `m·k·n` between the split threshold
/// and [`REAL_MAX_MACS`] over `batch`, every operand within the budget.
fn real_mkn(rng: &mut Rng, batch: i64) -> (i64, i64, i64) {
    const M: [i64; 14] = [1, 2, 4, 8, 9, 16, 33, 64, 140, 141, 256, 384, 512, 1000];
    const KN: [i64; 14] = [
        96, 128, 255, 256, 384, 500, 512, 768, 1000, 1024, 1536, 2048, 3000, 4096,
    ];
    let b = REAL_BUDGET as i64;
    for _ in 0..64 {
        let (m, k, n) = (rng.pick(&M), rng.pick(&KN), rng.pick(&KN));
        let macs = (batch * m * k * n) as u128;
        if (PAR_MACS..=REAL_MAX_MACS).contains(&macs)
            && batch * m * k <= b
            && batch * k * n <= b
            && batch * m * n <= b
        {
            return (m, k, n);
        }
    }
    (64, 512, 512)
}

/// The real-sizes class (issue #46): one program in [`GenConfig::real_pct`]
/// % of those that are not a llama family's (drawn from a stream of its
/// own, so that every other seed generates the program it generated
/// before), and only where the mix allows matmul, unary, binary and
/// reduce. A product of a weight parameter with a batch of activations
/// (f32 mostly, with the weight in either layout, per batch item or one
/// matrix broadcast over the batch, an exact op before it,
/// layout ops or an exact chain after it), or a chain of elementwise ops
/// over one large value and a weight of its shape, ending in a reduction
/// or not; σ puts the products past 2^23 multiply-adds (at most 2^26 in
/// all) and the values past 2^18 elements (at most 2^22).
fn real_program(seed: u64, cfg: &GenConfig) -> Option<Program> {
    let needed = [
        Family::Matmul,
        Family::Unary,
        Family::Binary,
        Family::Reduce,
    ];
    if cfg.real_pct == 0 || !needed.iter().all(|f| cfg.allows(*f)) {
        return None;
    }
    let mut rng = Rng::new(seed ^ 0x7ea1_5123_9c0f_fee5);
    if rng.below(100) >= cfg.real_pct {
        return None;
    }
    let mut sigma = Sigma::new();
    let mut ch = RealChain {
        rng: &mut rng,
        fb: FnBuilder::new("f"),
    };
    let kind;
    let (ret, dt, shape) = if ch.rng.below(4) < 3 {
        kind = "matmul";
        let dt = ch.rng.pick(&[
            Dtype::F32,
            Dtype::F32,
            Dtype::F32,
            Dtype::F32,
            Dtype::F32,
            Dtype::I32,
            Dtype::F16,
            Dtype::BF16,
        ]);
        let batch = if ch.rng.one_in(5) {
            ch.rng.pick(&[2, 3, 4])
        } else {
            1
        };
        let (m, k, n) = real_mkn(ch.rng, batch);
        let pre: Vec<Dim> = if batch > 1 {
            sigma.insert("B".into(), batch);
            vec![var("B")]
        } else {
            vec![]
        };
        for (v, x) in [("M", m), ("K", k), ("N", n)] {
            sigma.insert(v.into(), x);
        }
        let with = |tail: &[&str]| -> Vec<Dim> {
            let mut s = pre.clone();
            s.extend(dims(tail));
            s
        };
        let r = pre.len();
        let mut x = ch.fb.param("x", Type::tensor(dt, with(&["M", "K"])));
        // PyTorch's layout (`[N, K]`, read through a transpose) or `[K, N]`.
        let torch = ch.rng.one_in(2);
        // A batch's weight is its own per item, or one matrix broadcast
        // over the batch (a linear layer's form: read in place, the batch
        // folded into the rows; narrow floats too).
        let shared = batch > 1 && ch.rng.one_in(2);
        let wdims: &[&str] = if torch { &["N", "K"] } else { &["K", "N"] };
        let wshape = if shared { dims(wdims) } else { with(wdims) };
        let w = ch.fb.param("w", Type::tensor(dt, wshape));
        let bias = (dt.is_float() && ch.rng.one_in(6))
            .then(|| ch.fb.param("b", Type::tensor(dt, dims(&["N"]))));
        // An exact i32 product may feed a second one (parameters first).
        let mut w2 = None;
        if dt.is_int() && batch == 1 && ch.rng.one_in(3) {
            let p = ch.rng.pick(&[128i64, 256, 512, 1024]);
            let total = (m * k * n + m * n * p) as u128;
            let b = REAL_BUDGET as i64;
            if total <= REAL_MAX_MACS && n * p <= b && m * p <= b {
                sigma.insert("P".into(), p);
                w2 = Some(ch.fb.param("w2", Type::tensor(dt, dims(&["N", "P"]))));
            }
        }
        if ch.rng.one_in(3) {
            let op = ch.rng.pick(&[UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu]);
            x = ch.fb.op(Op::Unary(op, x));
        }
        let swap = |r: usize| {
            let mut perm: Vec<usize> = (0..r + 2).collect();
            perm.swap(r, r + 1);
            perm
        };
        let w = match (torch, shared) {
            (true, false) => ch.fb.op(Op::Transpose(swap(r), w)),
            (true, true) => ch.fb.op(Op::Transpose(vec![1, 0], w)),
            _ => w,
        };
        let w = if shared {
            ch.fb.op(Op::Broadcast(with(&["K", "N"]), w))
        } else {
            w
        };
        let mut h = ch.fb.op(Op::Matmul(x, w));
        let mut shape = with(&["M", "N"]);
        let mut hdt = dt;
        if let Some(b) = bias {
            // A bias epilogue: the sum is tainted (counted, not compared).
            let bb = ch.fb.op(Op::Broadcast(shape.clone(), b));
            h = ch.fb.op(Op::Binary(BinaryOp::Add, h, bb));
        }
        if dt.is_int() {
            // Exact: a second product and a chain may follow.
            if let Some(w2) = w2 {
                h = ch.fb.op(Op::Matmul(h, w2));
                shape = dims(&["M", "P"]);
            }
            let steps = ch.rng.below(4);
            for i in 0..steps {
                (h, hdt) = ch.step(h, hdt, &shape, None, i + 1 == steps);
            }
            if ch.rng.one_in(2) {
                let axis = r + ch.rng.below(2);
                (h, shape) = ch.reduce(h, hdt, &shape, vec![axis]);
            }
        } else {
            if ch.rng.one_in(4) {
                h = ch.fb.op(Op::Transpose(swap(r), h));
                shape.swap(r, r + 1);
            }
            if ch.rng.one_in(4) {
                let to = ch.rng.pick(&[Dtype::F32, Dtype::F16, Dtype::BF16]);
                h = ch.fb.op(Op::Cast(to, h));
                hdt = to;
            }
        }
        (h, hdt, shape)
    } else {
        kind = "elementwise";
        let dt = ch.rng.pick(&[
            Dtype::F32,
            Dtype::F32,
            Dtype::F32,
            Dtype::F16,
            Dtype::BF16,
            Dtype::I32,
            Dtype::I8,
        ]);
        const M: [i64; 9] = [1, 3, 64, 256, 300, 512, 1000, 1024, 2048];
        const N: [i64; 9] = [256, 384, 500, 512, 1000, 1024, 2048, 4096, 1 << 18];
        let (mut m, mut n) = (512, 1024);
        for _ in 0..64 {
            let (a, b) = (ch.rng.pick(&M), ch.rng.pick(&N));
            if (a * b) as u128 >= PAR_ELEMS && a * b <= REAL_BUDGET as i64 {
                (m, n) = (a, b);
                break;
            }
        }
        sigma.insert("M".into(), m);
        sigma.insert("N".into(), n);
        let shape = dims(&["M", "N"]);
        let x = ch.fb.param("x", Type::tensor(dt, shape.clone()));
        let w = ch.fb.param("w", Type::tensor(dt, shape.clone()));
        let steps = 2 + ch.rng.below(5);
        let reduce = ch.rng.one_in(2);
        let (mut h, mut hdt) = (x, dt);
        for i in 0..steps {
            let last = i + 1 == steps && !reduce;
            let other = (hdt == dt).then_some(w);
            (h, hdt) = ch.step(h, hdt, &shape, other, last);
        }
        let mut shape = shape;
        if reduce {
            let axes = ch.rng.pick(&[vec![1], vec![0], vec![0, 1], vec![1, 0]]);
            (h, shape) = ch.reduce(h, hdt, &shape, axes);
        }
        (h, hdt, shape)
    };
    let mut fb = ch.fb;
    fb.returns(Type::tensor(dt, shape));
    let main = fb.finish(ret);
    let used = families_in(&main);
    Some(Program {
        callees: vec![],
        twins: None,
        main,
        used,
        world: World::default(),
        llama: None,
        real: Some(RealPlan { kind, sigma }),
    })
}

// ------------------------------------------------------------- σ and data

/// Values a variable takes in ordinary cases (boundaries 1 and a few
/// "large" ones; 0 is added for variables opted into `>= 0`).
const SMALL: [i64; 12] = [1, 1, 1, 2, 2, 3, 4, 5, 7, 8, 17, 33];
/// Values for the huge dim: past the element cap, past the byte count of
/// a wide dtype, past `u32`, and near `i64::MAX`.
const HUGE: [i64; 7] = [
    1 << 16,
    (1 << 21) + 1,
    1 << 31,
    (1 << 32) + 1,
    1 << 40,
    1 << 62,
    i64::MAX,
];

fn draw_sigma(rng: &mut Rng, w: &World, spread: usize) -> Sigma {
    let mut s = Sigma::new();
    let small = |rng: &mut Rng| SMALL[rng.below(spread.clamp(3, SMALL.len()))];
    for (n, z) in &w.vars {
        let v = if *z && rng.one_in(3) { 0 } else { small(rng) };
        s.insert(n.clone(), v);
    }
    for (d, h) in &w.divs {
        let m = if w.zero(d) && rng.one_in(3) {
            0
        } else {
            small(rng)
        };
        s.insert(d.clone(), s[h] * m);
    }
    for (sv, kv, c) in &w.orders {
        let t = if rng.one_in(3) { 0 } else { small(rng) };
        s.insert(sv.clone(), s[kv] + c + t);
    }
    s
}

/// Does every refinement and `requires` of `sig` hold under σ?
fn sig_holds(sig: &tc_core::ir::Signature, sigma: &Sigma) -> bool {
    let refs = sig.params.iter().flat_map(|p| match &p.ty {
        Type::Tensor(t) => t.refs.clone(),
        _ => vec![],
    });
    refs.chain(sig.requires.iter().map(|r| r.node.clone()))
        .all(|p| p.eval(sigma) == Ok(true))
}

/// Concrete shape of a type under σ; `None` when a dim does not evaluate
/// (overflow) or is negative.
fn concrete(t: &Type, sigma: &Sigma) -> Option<(Dtype, Vec<usize>)> {
    let t = t.as_tensor()?;
    let mut shape = Vec::new();
    for d in &t.shape {
        let v = d.eval(sigma).ok()?;
        shape.push(usize::try_from(v).ok()?);
    }
    Some((t.dtype, shape))
}

/// What the values of a run at σ look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Volumes {
    /// Every value fits the budget.
    Fine,
    /// Some value exceeds the element cap (or its shape overflows) before
    /// any value exceeds the budget: a typed error is expected.
    Cap,
    /// Some value is between the budget and the cap: not run.
    TooBig,
}

/// Walk the values of `ck` (and, through calls, of the callees) in order.
fn volumes(ck: &Checked, sigma: &Sigma, callees: &[Checked], budget: u128) -> Volumes {
    // Module constants (the llama families') are part of σ.
    let mut sigma = sigma.clone();
    for (n, v) in &ck.func.sig.consts {
        sigma.insert(n.clone(), *v);
    }
    let sigma = &sigma;
    let mut shapes: ValueMap<Vec<usize>> = ValueMap::new();
    // The value of each dim value (`Dim![T]` parameters, `dim.value`).
    let mut dim_vals: BTreeMap<Value, i64> = BTreeMap::new();
    for (i, t) in &ck.types {
        let param = matches!(ck.func.value_def(i), Some(ValueDef::Param(_)));
        if matches!(t, Type::Scalar(_)) {
            shapes.push(vec![]);
            continue;
        }
        if let Type::Dim(d) = t {
            match d.eval(sigma) {
                Ok(v) => dim_vals.insert(i, v),
                Err(_) => return Volumes::TooBig,
            };
            shapes.push(vec![]);
            continue;
        }
        let Some((_, shape)) = concrete(t, sigma) else {
            // An empty value (a dim is 0) whose other dims overflow i64 when
            // evaluated (`(A + 4 − 5) / 2 + 1` at A = 2^63 − 1): the backends
            // return it empty (they size windows in usize), so no cap error
            // is due; its shape is not representable here, so the case is
            // skipped (seed 110000031235 expected a cap error).
            let empty = t
                .as_tensor()
                .is_some_and(|tt| tt.shape.iter().any(|d| d.eval(sigma) == Ok(0)));
            return if param || empty {
                Volumes::TooBig
            } else {
                Volumes::Cap
            };
        };
        // A zero dim makes the volume 0 whatever the others are (the
        // empty-tensor rule): `[2^62, 2^62, 2^62, 0]` is an empty value,
        // not one over the cap, though its other dims overflow u128.
        let vol = if shape.contains(&0) {
            Some(0)
        } else {
            shape
                .iter()
                .try_fold(1u128, |a, &d| a.checked_mul(d as u128))
        };
        if param {
            // Arguments are allocated by the fuzzer: they stay small, and
            // their dims multiply within usize in any order (a tensor
            // `[0, 2^62, 2^62]` is not constructible).
            let nonzero = shape
                .iter()
                .filter(|&&d| d != 0)
                .try_fold(1u128, |a, &d| a.checked_mul(d as u128));
            if vol.is_none_or(|v| v > budget) || nonzero.is_none_or(|v| v > usize::MAX as u128) {
                return Volumes::TooBig;
            }
        }
        match vol {
            None => return Volumes::Cap,
            Some(v) if v > tc_runtime::interp::MAX_ELEMS as u128 => return Volumes::Cap,
            Some(v) if v > budget => return Volumes::TooBig,
            _ => {}
        }
        if let Some(inst) = ck.func.inst(i) {
            if let Op::Call(name, xs) = &inst.op {
                let Some(c) = callees.iter().find(|c| &c.func.sig.name == name) else {
                    continue;
                };
                let mut cs = Sigma::new();
                for (p, x) in c.func.sig.params.iter().zip(xs) {
                    let pt = match &p.ty {
                        Type::Dim(d) => {
                            if let (Some(v), Some(n)) = (d.as_var(), dim_vals.get(x)) {
                                cs.insert(v.to_string(), *n);
                            }
                            continue;
                        }
                        t => t.as_tensor().expect("tensor parameter"),
                    };
                    for (d, &n) in pt.shape.iter().zip(&shapes[*x]) {
                        if let Some(v) = d.as_var() {
                            cs.insert(v.to_string(), n as i64);
                        }
                    }
                }
                match volumes(c, &cs, callees, budget) {
                    Volumes::Fine => {}
                    other => return other,
                }
            }
        }
        shapes.push(shape);
    }
    Volumes::Fine
}

fn special_bits(dt: Dtype) -> &'static [u32] {
    match dt {
        Dtype::F32 => &[
            0x7F80_0001,
            0xFFC0_0000,
            0x8000_0000,
            0x0000_0001,
            0x7F7F_FFFF,
            0xFF80_0000,
            0x7F80_0000,
        ],
        Dtype::F16 => &[0x7C01, 0xFE00, 0x8000, 0x0001, 0x7BFF, 0xFC00, 0x7D55],
        Dtype::BF16 => &[0x7F81, 0xFFC0, 0x8000, 0x0001, 0x7F7F, 0xFF80],
        Dtype::F8E4M3 => &[0x7F, 0xFF, 0x80, 0x01, 0x7E, 0xFE],
        Dtype::F8E5M2 => &[0x7D, 0xFE, 0x80, 0x01, 0x7B, 0x7C, 0xFC],
        _ => &[],
    }
}

fn random_elem(rng: &mut Rng, dt: Dtype) -> Elem {
    if dt.is_float() {
        let x = if rng.one_in(12) {
            rng.pick(&[-0.0f32, 0.0, 1.0, -1.0, 0.5])
        } else {
            (rng.unit() - 0.5) * 8.0
        };
        Elem::F(tc_runtime::cast::round_to(x, dt))
    } else if dt.is_int() {
        Elem::I(int_literal(rng, dt))
    } else {
        Elem::B(rng.one_in(2))
    }
}

/// Random data with, for floats, a few raw special encodings (signalling
/// NaNs, −0, subnormals, the largest finite value, infinities).
fn random_tensor(rng: &mut Rng, dt: Dtype, shape: &[usize]) -> Tensor {
    let n: usize = if shape.contains(&0) {
        0
    } else {
        shape.iter().product()
    };
    if rng.one_in(5) {
        return edge_tensor(rng, dt, shape, n);
    }
    let elems: Vec<Elem> = (0..n).map(|_| random_elem(rng, dt)).collect();
    let t = Tensor::from_elems(dt, shape, &elems).expect("elements of the dtype");
    if !dt.is_float() || n == 0 || rng.one_in(2) {
        return t;
    }
    let mut bytes = t.bytes().to_vec();
    let w = (dt.bits() / 8) as usize;
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(n);
        let pat = rng.pick(special_bits(dt));
        bytes[i * w..(i + 1) * w].copy_from_slice(&pat.to_le_bytes()[..w]);
    }
    Tensor::from_raw(dt, shape, bytes).expect("valid encodings")
}

/// Every element from a handful of edge values (±0, ±1, NaN, ±inf, the
/// signalling NaN encodings, int extremes): ties between ±0 in max/min,
/// NaN quieting and wrap-around become likely instead of rare.
fn edge_tensor(rng: &mut Rng, dt: Dtype, shape: &[usize], n: usize) -> Tensor {
    if !dt.is_float() {
        let pool: Vec<Elem> = match dt.int_range() {
            Some((lo, hi)) => [0, -1, 1, lo, hi].map(Elem::I).to_vec(),
            None => vec![Elem::B(false), Elem::B(true)],
        };
        let elems: Vec<Elem> = (0..n).map(|_| rng.pick(&pool)).collect();
        return Tensor::from_elems(dt, shape, &elems).expect("edge elements");
    }
    let w = (dt.bits() / 8) as usize;
    let plain =
        Tensor::from_elems(dt, &[4], &[-0.0, 0.0, 1.0, -1.0].map(Elem::F)).expect("small floats");
    let mut pats: Vec<u32> = special_bits(dt).to_vec();
    for i in 0..4 {
        let mut b = [0u8; 4];
        b[..w].copy_from_slice(&plain.bytes()[i * w..(i + 1) * w]);
        pats.extend([u32::from_le_bytes(b); 3]);
    }
    let mut bytes = Vec::with_capacity(n * w);
    for _ in 0..n {
        bytes.extend_from_slice(&rng.pick(&pats).to_le_bytes()[..w]);
    }
    Tensor::from_raw(dt, shape, bytes).expect("valid encodings")
}

fn random_scalar(rng: &mut Rng, dt: Dtype) -> Arg {
    let e = if dt.is_float() && rng.one_in(6) {
        Elem::F(rng.pick(&[f32::NAN, -0.0, f32::INFINITY]))
    } else {
        random_elem(rng, dt)
    };
    Arg::Scalar(e)
}

/// One accepted program at one σ with its arguments and expectation.
pub struct Case {
    /// The seed it came from.
    pub seed: u64,
    /// The program.
    pub program: Program,
    /// The checker's verdict on `f` (types of every value).
    pub checked: Checked,
    /// The checker's verdicts on the callees.
    pub callees: Vec<Checked>,
    /// σ.
    pub sigma: Sigma,
    /// Arguments realising σ.
    pub args: Vec<Arg>,
    /// Some value exceeds the element cap: both backends must fail alike.
    pub expect_cap: bool,
    /// The checker's return type under σ (absent when `expect_cap`).
    pub want: Option<(Dtype, Vec<usize>)>,
}

/// What became of a seed before anything ran.
pub enum Prepared {
    /// The checker refused a generated function (first message).
    Rejected(String),
    /// No σ within the size budget was found.
    NoSigma,
    /// Ready to run.
    Ready(Box<Case>),
}

fn check_all(fs: &[Function], main: &Function) -> Result<(Vec<Checked>, Checked), String> {
    let mut sigs = Signatures::new();
    let mut out = Vec::new();
    let first = |ds: Vec<tc_core::Diagnostic>, f: &Function| {
        let d = &ds[0];
        format!("{} [{}] in `{}`: {}", d.code, d.rule, f.sig.name, d.message)
    };
    for f in fs {
        let ck = check_function(f, &sigs).map_err(|ds| first(ds, f))?;
        sigs.insert(f.sig.name.clone(), f.sig.clone());
        out.push(ck);
    }
    let ck = check_function(main, &sigs).map_err(|ds| first(ds, main))?;
    Ok((out, ck))
}

/// Generate, check, and pick σ and arguments for case `seed`.
/// `budget` bounds the volume of every value of an ordinary run.
pub fn prepare(seed: u64, cfg: &GenConfig, budget: usize) -> Prepared {
    let mut program = gen_program(seed, cfg);
    let (callees, checked) = match check_all(&program.callees, &program.main) {
        Ok(x) => x,
        Err(e) => return Prepared::Rejected(e),
    };
    if let Some(t) = &program.twins {
        if check_all(t, &program.main).is_err() {
            // Counted as a pass of the original; the twin is a bonus.
            program.twins = None;
        }
    }
    let mut rng = Rng::new(seed ^ 0xa5a5_5a5a_dead_beef);
    if let Some(plan) = program.real.clone() {
        // Its own budget: the values are large on purpose.
        let sigma = plan.sigma;
        if !sig_holds(&program.main.sig, &sigma)
            || volumes(&checked, &sigma, &callees, REAL_BUDGET as u128) != Volumes::Fine
        {
            return Prepared::NoSigma;
        }
        let mut args = Vec::new();
        for p in &program.main.sig.params {
            let (dt, shape) = concrete(&p.ty, &sigma).expect("parameter shape under σ");
            args.push(Arg::Tensor(random_tensor(&mut rng, dt, &shape)));
        }
        let want = concrete(&checked.types[checked.func.ret], &sigma);
        return Prepared::Ready(Box::new(Case {
            seed,
            program,
            checked,
            callees,
            sigma,
            args,
            expect_cap: false,
            want,
        }));
    }
    if let Some(plan) = program.llama.clone() {
        // The plan's σs, largest first: the first within the budget.
        let Some((sigma, start)) = plan.sigmas.iter().find(|(s, _)| {
            sig_holds(&program.main.sig, s)
                && volumes(&checked, s, &callees, budget as u128) == Volumes::Fine
        }) else {
            return Prepared::NoSigma;
        };
        let args = llama_args(&plan, &program.main.sig, sigma, *start, &mut rng);
        let want = concrete(&checked.types[checked.func.ret], sigma);
        return Prepared::Ready(Box::new(Case {
            seed,
            program,
            checked,
            callees,
            sigma: sigma.clone(),
            args,
            expect_cap: false,
            want,
        }));
    }
    let huge = cfg.huge_one_in > 0 && rng.one_in(cfg.huge_one_in);
    let mut found = None;
    for attempt in 0..24 {
        let mut sigma = draw_sigma(&mut rng, &program.world, SMALL.len() - attempt / 3);
        // A huge dim fits only where an empty dim beside it keeps the
        // arguments small; when half the attempts found no such σ, the
        // case runs as an ordinary one instead of being lost (a fixed run
        // must run its seeds).
        if huge && attempt < 12 && !program.world.vars.is_empty() {
            let (v, _) = rng.pick(&program.world.vars);
            sigma.insert(v, rng.pick(&HUGE));
        }
        if !sig_holds(&program.main.sig, &sigma) {
            continue;
        }
        match volumes(&checked, &sigma, &callees, budget as u128) {
            Volumes::Fine => found = Some((sigma, false)),
            Volumes::Cap if huge => found = Some((sigma, true)),
            _ => continue,
        }
        break;
    }
    let Some((sigma, expect_cap)) = found else {
        return Prepared::NoSigma;
    };
    let mut args = Vec::new();
    for p in &program.main.sig.params {
        match &p.ty {
            Type::Scalar(dt) => args.push(random_scalar(&mut rng, *dt)),
            Type::Dim(d) => {
                // A multiple of a huge dim may leave i64: no such size.
                match d.eval(&sigma).ok().and_then(|n| usize::try_from(n).ok()) {
                    Some(n) => args.push(Arg::Dim(n)),
                    None => return Prepared::NoSigma,
                }
            }
            t => {
                let (dt, shape) = concrete(t, &sigma).expect("parameter shape under σ");
                args.push(Arg::Tensor(random_tensor(&mut rng, dt, &shape)));
            }
        }
    }
    let want = if expect_cap {
        None
    } else {
        concrete(&checked.types[checked.func.ret], &sigma)
    };
    Prepared::Ready(Box::new(Case {
        seed,
        program,
        checked,
        callees,
        sigma,
        args,
        expect_cap,
        want,
    }))
}

// ----------------------------------------------------------------- oracle

/// A JIT configuration the oracle runs every case under.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    /// Its name in reports.
    pub name: &'static str,
    /// Code generation options.
    pub opts: JitOptions,
    /// `CacheConfig::specialize_after`: 2 runs the shape-generic kernels
    /// first, then the σ-specialised ones (both are compared).
    pub specialize_after: u32,
}

const fn opts(fast_math: bool, deterministic: bool, threads: usize) -> JitOptions {
    JitOptions {
        fast_math,
        deterministic,
        threads,
        fast_quant: false,
    }
}

/// Every mode: the default, each option flipped alone, the strictest
/// combination, and the shape-generic path.
pub const MODES: [Mode; 6] = [
    Mode {
        name: "default",
        opts: opts(true, false, 0),
        specialize_after: 1,
    },
    Mode {
        name: "deterministic",
        opts: opts(true, true, 0),
        specialize_after: 1,
    },
    Mode {
        name: "no-fast-math",
        opts: opts(false, false, 0),
        specialize_after: 1,
    },
    Mode {
        name: "threads=1",
        opts: opts(true, false, 1),
        specialize_after: 1,
    },
    Mode {
        name: "exact",
        opts: opts(false, true, 1),
        specialize_after: 1,
    },
    Mode {
        name: "generic",
        opts: opts(true, false, 0),
        specialize_after: 2,
    },
];

/// How far a JIT result may be from the interpreter's (crate docs of
/// tc-llvm, "Numerics").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Taint {
    /// Bit for bit.
    Exact,
    /// Within the documented bound: the result is a tolerance op's output
    /// seen only through layout ops and float casts.
    Direct,
    /// A tolerance op's output went through ops that can amplify the
    /// difference without bound (comparisons, casts to int, …): values are
    /// not compared.
    Indirect,
}

fn is_tolerance_source(op: &Op, ck: &Checked, o: JitOptions) -> bool {
    let dt = |v: &Value| ck.types[*v].as_tensor().map(|t| t.dtype);
    let float = |v: &Value| dt(v).is_some_and(|d| d.is_float());
    match op {
        Op::Reduce { op, x, .. } => {
            float(x) && !o.deterministic && matches!(op, ReduceOp::Sum | ReduceOp::Mean)
        }
        // Deterministic mode sums products in the interpreter's order
        // (`tc-llvm/src/kernels/matmul/in_order.rs`), fast quantized numerics aside.
        Op::Matmul(a, _) | Op::Conv { x: a, .. } => float(a) && !o.deterministic,
        Op::QMatmul(a, _) => float(a) && (!o.deterministic || o.fast_quant),
        Op::Unary(u, x) => o.fast_math && dt(x) == Some(Dtype::F32) && fast_unary(*u),
        _ => false,
    }
}

/// `sdpa` (docs/syntax.md §12f) is bit for bit the interpreter's in
/// deterministic mode with exact transcendentals; in every other mode its
/// products' and `exp`'s differences pass through the softmax's `exp`,
/// which no propagated bound here covers (as for the composition it
/// replaces): its result is not compared there.
fn sdpa_inexact(op: &Op, o: JitOptions) -> bool {
    matches!(op, Op::Sdpa { .. }) && (!o.deterministic || o.fast_math)
}

/// The taint of `ck`'s returned value under options `o`.
pub fn taint(ck: &Checked, callees: &[Checked], o: JitOptions) -> Taint {
    taints(ck, callees, o)[ck.func.ret]
}

/// The per-element bound of `case`'s result under `o` when it is
/// [`Taint::Direct`]: its bound program ([`bound::bound_program`]) run on
/// the interpreter with the case's arguments, `fs` resolving its calls.
/// `None` when the result is not Direct or no bound could be made.
///
/// A real-sizes case's bound runs on the JIT's exact mode instead (its
/// `Σ|terms|` products would take the interpreter seconds): that mode is
/// bit-identical to the interpreter on every op, which every case checks.
pub fn bound_of(
    case: &Case,
    callees: &[Checked],
    fs: &[Function],
    o: JitOptions,
) -> Option<Tensor> {
    let t = taints(&case.checked, callees, o);
    let f = bound::bound_program(&case.checked, &t, o)?;
    let resolve = |n: &str| fs.iter().find(|f| f.sig.name == n);
    if case.program.real.is_some() {
        let exact = MODES.iter().find(|m| m.name == "exact")?;
        return guard_value(|| fresh(exact).call(&f, &case.args, &resolve));
    }
    guard_value(|| tc_runtime::exec::call(&f, &case.args, &resolve))
}

fn guard_value(f: impl FnOnce() -> Result<Tensor, tc_runtime::Error>) -> Option<Tensor> {
    match guard(f) {
        Out::Val(t) => Some(t),
        _ => None,
    }
}

/// The taint of every value of `ck` under options `o`.
fn taints(ck: &Checked, callees: &[Checked], o: JitOptions) -> ValueMap<Taint> {
    let mut t: ValueMap<Taint> = ck.func.sig.params.iter().map(|_| Taint::Exact).collect();
    for inst in &ck.func.body {
        let ins = inst
            .op
            .operands()
            .iter()
            .map(|v| t[*v])
            .max()
            .unwrap_or(Taint::Exact);
        let layout = match &inst.op {
            Op::Transpose(..)
            | Op::Reshape(..)
            | Op::Broadcast(..)
            | Op::Slice { .. }
            | Op::Concat(..)
            | Op::Pad { .. } => true,
            Op::Cast(d, _) => d.is_float(),
            _ => false,
        };
        let r = if let Op::Call(name, _) = &inst.op {
            // A callee's Direct result has its bound inside the callee,
            // which the caller's bound program does not reach (bound.rs).
            match (ins, callees.iter().find(|c| &c.func.sig.name == name)) {
                (Taint::Exact, Some(c)) => match taint(c, callees, o) {
                    Taint::Direct => Taint::Indirect,
                    t => t,
                },
                _ => Taint::Indirect,
            }
        } else if sdpa_inexact(&inst.op, o) {
            Taint::Indirect
        } else if is_tolerance_source(&inst.op, ck, o) {
            if ins == Taint::Exact {
                Taint::Direct
            } else {
                Taint::Indirect
            }
        } else if let Op::TopK { x, .. } | Op::CumSum { x, .. } = &inst.op {
            // Values that may differ may sort differently.
            if t[*x] == Taint::Exact {
                Taint::Exact
            } else {
                Taint::Indirect
            }
        } else if let Op::Gather { table, ids, .. } = &inst.op {
            // Ids that may differ select other elements: nothing bounds that.
            if t[*ids] == Taint::Exact {
                t[*table]
            } else {
                Taint::Indirect
            }
        } else if ins == Taint::Exact || layout {
            ins
        } else {
            Taint::Indirect
        };
        t.push(r);
    }
    t
}

/// The outcome of one backend run.
pub enum Out {
    /// A value.
    Val(Tensor),
    /// A typed error.
    Err(tc_runtime::Error),
    /// A panic, with its message.
    Panic(String),
}

fn guard(f: impl FnOnce() -> Result<Tensor, tc_runtime::Error>) -> Out {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(t)) => Out::Val(t),
        Ok(Err(e)) => Out::Err(e),
        Err(p) => Out::Panic(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into()),
        ),
    }
}

/// The variant name of an error: "identical in kind".
pub fn err_kind(e: &tc_runtime::Error) -> String {
    let s = format!("{e:?}");
    s.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}

fn max_finite(dt: Dtype) -> f32 {
    match dt {
        Dtype::F16 => 65504.0,
        Dtype::BF16 => 3.38e38,
        Dtype::F8E4M3 => 448.0,
        Dtype::F8E5M2 => 57344.0,
        _ => f32::MAX,
    }
}

/// How a JIT result compares with the interpreter's.
pub enum Verdict {
    /// Equal (within the tolerance where one applies).
    Same,
    /// Tainted beyond comparison ([`Taint::Indirect`]).
    Unchecked,
    /// Different: a short kind for grouping and a description.
    Differs(String, String),
}

fn elem_bits(e: &Elem) -> String {
    match e {
        Elem::F(x) => format!("{x:?} ({:#010x} as f32)", x.to_bits()),
        other => format!("{other:?}"),
    }
}

/// Compare `got` (JIT) with `want` (interpreter) under `taint`, with no
/// bound: a [`Taint::Direct`] difference is not compared.
pub fn compare(got: &Tensor, want: &Tensor, taint: Taint) -> Verdict {
    compare_within(got, want, taint, None)
}

/// [`compare`], a [`Taint::Direct`] result compared element by element
/// within `bound` (its per-element bound, `bound.rs`); without one it is
/// not compared.
pub fn compare_within(
    got: &Tensor,
    want: &Tensor,
    taint: Taint,
    bound: Option<&Tensor>,
) -> Verdict {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Verdict::Differs(
            "dtype/shape differs from the interpreter's".into(),
            format!(
                "jit {} {:?} vs interpreter {} {:?}",
                got.dtype(),
                got.shape(),
                want.dtype(),
                want.shape()
            ),
        );
    }
    if got.bytes() == want.bytes() {
        return Verdict::Same;
    }
    let bounds = match (taint, bound) {
        (Taint::Indirect, _) | (Taint::Direct, None) => return Verdict::Unchecked,
        (Taint::Direct, Some(b)) if b.shape() == want.shape() => b.to_vec::<f32>().ok(),
        (Taint::Direct, Some(_)) => None,
        (Taint::Exact, _) => None,
    };
    if taint == Taint::Direct && bounds.is_none() {
        return Verdict::Differs(
            "the bound's shape differs from the result's".into(),
            format!(
                "bound {:?} vs result {:?}",
                bound.map(|b| b.shape().to_vec()),
                want.shape()
            ),
        );
    }
    let dt = want.dtype();
    let (g, w) = (got.to_elems(), want.to_elems());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let kind = match (a, b) {
            (Elem::F(p), Elem::F(q)) if p.to_bits() == q.to_bits() => continue,
            (Elem::F(p), Elem::F(q)) => {
                if let Some(bs) = &bounds {
                    if within(*p, *q, bs[i], dt) {
                        continue;
                    }
                    "beyond the element's bound"
                } else if p.is_nan() && q.is_nan() {
                    "NaN bits differ"
                } else if *p == 0.0 && *q == 0.0 {
                    "sign of zero differs"
                } else {
                    "value differs"
                }
            }
            (x, y) if x != y => "value differs",
            _ => continue,
        };
        let bound_note = bounds
            .as_ref()
            .map(|bs| format!(" (bound {:e})", bs[i]))
            .unwrap_or_default();
        return Verdict::Differs(
            format!("{kind} [{dt}]"),
            format!(
                "element {i} of {:?}: jit {} vs interpreter {}{bound_note}",
                want.shape(),
                elem_bits(a),
                elem_bits(b)
            ),
        );
    }
    Verdict::Same
}

/// Is the JIT's `p` within `bound` of the interpreter's `q`? NaN matches
/// NaN. A bound that overflowed, or a non-finite interpreter value (some
/// term or partial sum overflowed), leaves the element unbounded: in
/// another order the sum may be ±inf, NaN or finite (the crate docs). A
/// narrow float's largest finite value may be such an infinity saturated
/// by a cast (seed 130000000607: ±inf of opposite signs from two orders,
/// both cast to ±57344 in f8e5m2).
fn within(p: f32, q: f32, bound: f32, dt: Dtype) -> bool {
    if p.is_nan() && q.is_nan() {
        return true;
    }
    let wild = |x: f32| !x.is_finite() || x.abs() >= max_finite(dt);
    if !bound.is_finite() || wild(q) || (wild(p) && bound >= max_finite(dt) / 8.0) {
        return true;
    }
    (f64::from(p) - f64::from(q)).abs() <= f64::from(bound)
}

// ------------------------------------------------------------------ runs

/// One failed expectation.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The failure family (grouping key).
    pub key: String,
    /// Where (backend and mode) and what, with the reproducer.
    pub detail: String,
}

/// What running one case found.
#[derive(Default)]
pub struct CaseResult {
    /// Failed expectations.
    pub failures: Vec<Failure>,
    /// JIT calls that fell back to the interpreter (allowed or not).
    pub fallbacks: u64,
    /// Comparisons skipped as [`Taint::Indirect`] (the values differed).
    pub unchecked: u64,
    /// How many comparisons of each kind were made.
    pub counts: Counts,
    /// It ran all six JIT modes.
    pub all_modes: bool,
    /// A real-sizes case whose two calls on 2 threads (the same weight
    /// tensor both times) both returned values, each compared.
    pub real_pair: bool,
}

/// The comparisons a case (or a run) made, and its fallbacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Values compared bit for bit ([`Taint::Exact`]; the cache-identity
    /// comparisons of a shared against a fresh cache included).
    pub exact: u64,
    /// Values compared within the documented bound ([`Taint::Direct`]).
    pub bounded: u64,
    /// Values not compared ([`Taint::Indirect`]), bit-identical or not.
    pub tainted: u64,
    /// Typed errors compared by kind (both backends refused).
    pub errors: u64,
    /// Fallbacks to the interpreter with a reason on [`ALLOWED_FALLBACKS`],
    /// by reason.
    pub allowed: BTreeMap<String, u64>,
    /// Fallbacks with any other reason: each failed its case.
    pub unexplained: u64,
    /// Quick-tier results compared bit for bit with the optimized tier's
    /// (`tier_identity`).
    pub tiers: u64,
    /// Tier comparisons skipped: the quick cache compiled nothing at the
    /// quick tier (every part was on disk at the optimized tier).
    pub tier_skips: u64,
}

impl Counts {
    /// Add another case's or run's counts.
    pub fn add(&mut self, o: &Counts) {
        self.exact += o.exact;
        self.bounded += o.bounded;
        self.tainted += o.tainted;
        self.errors += o.errors;
        self.unexplained += o.unexplained;
        self.tiers += o.tiers;
        self.tier_skips += o.tier_skips;
        for (k, v) in &o.allowed {
            *self.allowed.entry(k.clone()).or_default() += v;
        }
    }

    /// The protocol form (`exact bounded tainted errors unexplained
    /// reason=n;reason=n tiers tier_skips`), read back by [`Counts::parse`].
    fn encode(&self) -> String {
        let allowed: Vec<String> = self
            .allowed
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "{} {} {} {} {} {} {} {}",
            self.exact,
            self.bounded,
            self.tainted,
            self.errors,
            self.unexplained,
            if allowed.is_empty() {
                "-".into()
            } else {
                allowed.join(";")
            },
            self.tiers,
            self.tier_skips
        )
    }

    fn parse(f: &[&str]) -> Counts {
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        let allowed = f
            .get(5)
            .filter(|s| **s != "-")
            .map(|s| {
                s.split(';')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        Counts {
            exact: num(0),
            bounded: num(1),
            tainted: num(2),
            errors: num(3),
            unexplained: num(4),
            allowed,
            tiers: num(6),
            tier_skips: num(7),
        }
    }
}

// ------------------------------------------------------------- fallbacks

/// A reason for which a JIT call may hand a program to the interpreter
/// without failing its case.
pub struct AllowedFallback {
    /// Its name in reports.
    pub name: &'static str,
    /// Does a fallback with this `reason` ([`Jit::last_fallback`]) and this
    /// outcome of the JIT call have this reason?
    pub matches: fn(reason: &str, out: &Out) -> bool,
}

/// The only fallbacks to the interpreter the oracle accepts. A JIT that
/// quietly hands a program to the interpreter passes every comparison, so
/// every other fallback fails its case as an "unexplained fallback": an
/// LLVM error, a plan the plan verifier refused, an op the JIT does not
/// lower (`not supported by the JIT`), a planning error after which the
/// interpreter computes a value, and the call-depth limit (generated calls
/// nest two deep at most, far from `MAX_CALL_DEPTH`). Each entry is one
/// reason the JIT documents (`tc-llvm/src/cache.rs`, `Jit::call`), with
/// why it is not a failure; docs/soundness.md lists them too.
pub const ALLOWED_FALLBACKS: &[AllowedFallback] = &[
    // A value past the element cap at this σ: planning the concrete shapes
    // (`plan::shapes`, a σ-dependent planning error) found a value over
    // `tc_core::size::MAX_ELEMS` (`RuleError::Size`), and the interpreter, run
    // in the JIT's place, refused the call with a capacity error too (not
    // necessarily at the same value: the planner sizes every value first,
    // the interpreter stops at the first it computes). The JIT has no
    // kernel to build for a call that cannot run. Only the huge-dim cases
    // meet it. A cap error after which the interpreter computes a value is
    // not this reason (the planner refused a call the semantics runs), nor
    // is any other planning error (a negative dim, a malformed program).
    AllowedFallback {
        name: "element-cap-at-planning",
        matches: |reason, out| match out {
            Out::Err(e) => reason.ends_with("(tc_core::size::MAX_ELEMS)") && is_capacity(e),
            _ => false,
        },
    },
    // A dim past i64 at this σ: planning computed a value's dim, either by
    // evaluating a dim expression (a callee's result dims at a call,
    // through `tc_core::dim`'s checked arithmetic) or by an op's concrete
    // rule (`tc_core::concrete`: a concat's or a pad's axis, "… dimension
    // overflows"), and it overflows i64, so that value's shape cannot
    // exist; and the interpreter, run in the JIT's place, refused the call
    // with a capacity error too (a dim or an element count that overflows).
    // Only the huge-dim cases meet it: a twin callee doubling an axis of
    // 2^63 − 1 over an empty operand (seed 4304697948), a pad by 2^62 on
    // each side of a dead value (seed 4315980124), both in runs of
    // 2026-12-06. As for the cap, any other planning error is not this
    // reason, nor is this overflow where the interpreter computes a value.
    AllowedFallback {
        name: "dim-overflow-at-planning",
        matches: |reason, out| match out {
            Out::Err(e) => {
                let dim_overflow = reason.contains("arithmetic overflow while evaluating")
                    || reason.ends_with("dimension overflows");
                dim_overflow && is_capacity(e)
            }
            _ => false,
        },
    },
];

/// The [`ALLOWED_FALLBACKS`] entry a fallback with `reason` and outcome
/// `out` has, if any.
pub fn allowed_fallback(reason: &str, out: &Out) -> Option<&'static str> {
    ALLOWED_FALLBACKS
        .iter()
        .find(|a| (a.matches)(reason, out))
        .map(|a| a.name)
}

/// The reproducer: every function's IR, σ and the arguments' summary.
pub fn describe(case: &Case, twins: bool) -> String {
    let mut s = String::new();
    let fs = match (&case.program.twins, twins) {
        (Some(t), true) => t,
        _ => &case.program.callees,
    };
    for f in fs {
        let _ = writeln!(s, "{f}");
    }
    let _ = writeln!(s, "{}", case.program.main);
    let sigma: Vec<String> = case
        .sigma
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    let _ = write!(s, "σ = {{{}}}; seed {}", sigma.join(", "), case.seed);
    for (i, a) in case.args.iter().enumerate() {
        match a {
            Arg::Tensor(t) if t.numel() <= 8 => {
                let _ = write!(
                    s,
                    "\n  arg {i}: {} {:?} = {:?}",
                    t.dtype(),
                    t.shape(),
                    t.to_elems()
                );
            }
            Arg::Tensor(t) => {
                let _ = write!(s, "\n  arg {i}: {} {:?}", t.dtype(), t.shape());
            }
            Arg::Scalar(e) => {
                let _ = write!(s, "\n  arg {i}: scalar {e:?}");
            }
            Arg::Dim(n) => {
                let _ = write!(s, "\n  arg {i}: dim {n}");
            }
        }
    }
    s
}

struct Ctx<'c> {
    case: &'c Case,
    res: CaseResult,
    /// The per-element bound of the next judged Direct values
    /// ([`bound_of`]; `None`: none could be made, and they are not compared).
    bound: Option<Tensor>,
    /// The bounds made so far, by the options they depend on
    /// (`fast_math`, `deterministic`).
    bounds: BTreeMap<(bool, bool), Option<Tensor>>,
}

impl Ctx<'_> {
    /// Make (or reuse) the bound of the result under `o`, for the next
    /// judged values.
    fn set_bound(&mut self, callees: &[Checked], fs: &[Function], o: JitOptions) {
        let key = (o.fast_math, o.deterministic);
        if !self.bounds.contains_key(&key) {
            let b = bound_of(self.case, callees, fs, o);
            self.bounds.insert(key, b);
        }
        self.bound = self.bounds.get(&key).cloned().flatten();
    }

    fn fail(&mut self, key: String, what: String, twins: bool) {
        let detail = format!("{what}\n{}", describe(self.case, twins));
        self.res.failures.push(Failure { key, detail });
    }

    /// Check a JIT outcome against the interpreter's.
    fn judge(&mut self, who: &str, got: &Out, want: &Out, taint: Taint, twins: bool) {
        let (key, what) = match (got, want) {
            (Out::Val(g), Out::Val(w)) => match self.count_and_compare(g, w, taint) {
                Verdict::Same => return,
                Verdict::Unchecked => {
                    self.res.unchecked += 1;
                    return;
                }
                Verdict::Differs(k, d) => (k, d),
            },
            (Out::Panic(m), _) => ("JIT panic".into(), first_line(m)),
            (Out::Err(e), Out::Val(_)) => (
                format!("JIT error where the interpreter succeeded: {}", err_kind(e)),
                e.to_string(),
            ),
            (Out::Val(_), Out::Err(e)) => (
                format!(
                    "JIT succeeded where the interpreter failed: {}",
                    err_kind(e)
                ),
                e.to_string(),
            ),
            (Out::Err(a), Out::Err(b)) if err_kind(a) == err_kind(b) => {
                self.res.counts.errors += 1;
                return;
            }
            (Out::Err(a), Out::Err(b)) => (
                format!(
                    "error kinds differ: JIT {} vs interpreter {}",
                    err_kind(a),
                    err_kind(b)
                ),
                format!("JIT: {a}\ninterpreter: {b}"),
            ),
            (_, Out::Panic(_)) => return, // reported for the interpreter itself
        };
        self.fail(key, format!("[{who}] {what}"), twins);
    }

    /// Compare two values under `taint`, counting the comparison by kind.
    fn count_and_compare(&mut self, got: &Tensor, want: &Tensor, taint: Taint) -> Verdict {
        let c = &mut self.res.counts;
        match taint {
            Taint::Exact => c.exact += 1,
            Taint::Direct if self.bound.is_some() => c.bounded += 1,
            // A Direct result with no bound is not compared (`bound_of`).
            Taint::Direct | Taint::Indirect => c.tainted += 1,
        }
        compare_within(got, want, taint, self.bound.as_ref())
    }

    /// Run `fs`'s `f` on `jit`, accounting for its fallbacks to the
    /// interpreter: one whose reason is not on [`ALLOWED_FALLBACKS`] fails
    /// the case. (A call that falls back more than once, in nested calls,
    /// is judged by its last reason, the one [`Jit::last_fallback`] keeps.)
    fn jit_run(&mut self, who: &str, jit: &Jit, fs: &[Function], twins: bool) -> Out {
        let before = jit.stats().fallbacks;
        let out = jit_run(jit, self.case, fs);
        let n = jit.stats().fallbacks.saturating_sub(before);
        if n == 0 {
            return out;
        }
        self.res.fallbacks += n;
        let reason = jit.last_fallback().unwrap_or_default();
        match allowed_fallback(&reason, &out) {
            Some(name) => *self.res.counts.allowed.entry(name.into()).or_default() += n,
            None => {
                self.res.counts.unexplained += n;
                let gist = reason_gist(&reason);
                let outcome = match &out {
                    Out::Val(t) => format!("a value {} {:?}", t.dtype(), t.shape()),
                    Out::Err(e) => format!("error: {e}"),
                    Out::Panic(m) => format!("panic: {}", first_line(m)),
                };
                self.fail(
                    format!("unexplained JIT fallback to the interpreter: {gist}"),
                    format!("[{who}] {n} fallback(s), last reason: {reason}; outcome {outcome}"),
                    twins,
                );
            }
        }
        out
    }

    /// Oracle (a) and (b) on the interpreter's outcome.
    fn judge_interp(&mut self, want: &Out) {
        let case = self.case;
        match (want, case.expect_cap) {
            (Out::Panic(m), _) => self.fail("interpreter panic".into(), first_line(m), false),
            (Out::Val(_), true) => self.fail(
                "interpreter: no error although a value exceeds the element cap".into(),
                String::new(),
                false,
            ),
            (Out::Err(_), true) => {}
            (Out::Err(e), false) => self.fail(
                format!("interpreter error on an accepted program: {}", err_kind(e)),
                e.to_string(),
                false,
            ),
            (Out::Val(t), false) => {
                let got = (t.dtype(), t.shape().to_vec());
                if case.want.as_ref() != Some(&got) {
                    self.fail(
                        "result type differs from the checker's return type under σ".into(),
                        format!("interpreter {got:?}, checker {:?}", case.want),
                        false,
                    );
                }
            }
        }
    }
}

/// A fallback reason with its numbers and bracketed lists elided, so that
/// one cause is one failure family.
fn reason_gist(reason: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in first_line(reason).chars() {
        match c {
            '[' => {
                depth += 1;
                if depth == 1 {
                    out.push_str("[…]");
                }
            }
            ']' => depth = (depth - 1).max(0),
            _ if depth > 0 => {}
            c if c.is_ascii_digit() => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            c => out.push(c),
        }
    }
    out.chars().take(120).collect()
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(300).collect()
}

fn interp(case: &Case, fs: &[Function]) -> Out {
    let resolve = |n: &str| fs.iter().find(|f| f.sig.name == n);
    guard(|| tc_runtime::exec::call(&case.program.main, &case.args, &resolve))
}

fn jit_run(jit: &Jit, case: &Case, fs: &[Function]) -> Out {
    let resolve = |n: &str| fs.iter().find(|f| f.sig.name == n);
    guard(|| jit.call(&case.program.main, &case.args, &resolve))
}

fn fresh(mode: &Mode) -> Jit {
    Jit::new(CacheConfig {
        capacity: 16,
        specialize_after: mode.specialize_after,
        options: mode.opts,
    })
}

/// With `rotate`, does `seed` still run all six modes (one seed in
/// `one_in`, drawn from a stream of its own)?
pub fn samples_all_modes(seed: u64, one_in: usize) -> bool {
    one_in > 0 && Rng::new(seed ^ 0x0a11_d0de_5eed_6a11).one_in(one_in)
}

/// The modes `case` runs in: all of them, or with `rotate` the one its
/// seed picks (all of them for one seed in `all_one_in`).
fn modes_for(case: &Case, rotate: bool, all_one_in: usize) -> &'static [Mode] {
    if rotate && !samples_all_modes(case.seed, all_one_in) {
        let i = (case.seed % MODES.len() as u64) as usize;
        &MODES[i..=i]
    } else {
        &MODES
    }
}

/// Run `case` on the interpreter and every JIT mode (or, with `rotate`,
/// one), then in `shared` (a long-lived cache) when a default-options
/// result is there to compare with, then its twin in `shared`.
pub fn run_case(case: &Case, shared: &Jit, cfg: &GenConfig) -> CaseResult {
    let mut cx = Ctx {
        case,
        res: CaseResult::default(),
        bound: None,
        bounds: BTreeMap::new(),
    };
    let fs = &case.program.callees;
    let want = interp(case, fs);
    cx.judge_interp(&want);
    if case.program.real.is_some() {
        real_pair(&mut cx, fs, &want);
    }
    let mut first_default = None;
    let timing = std::env::var_os("TC_FUZZ_TIMING").is_some();
    let t0 = std::time::Instant::now();
    let modes = modes_for(case, cfg.rotate, cfg.all_modes_one_in);
    cx.res.all_modes = modes.len() == MODES.len();
    for mode in modes {
        if timing {
            eprintln!(
                "  {:>7.1} ms: {}",
                t0.elapsed().as_secs_f64() * 1e3,
                mode.name
            );
        }
        let jit = fresh(mode);
        let t = taint(&case.checked, &case.callees, mode.opts);
        cx.set_bound(&case.callees, fs, mode.opts);
        let runs = if mode.specialize_after > 1 { 2 } else { 1 };
        for k in 0..runs {
            let who = if runs > 1 {
                format!("{} run {}", mode.name, k + 1)
            } else {
                mode.name.to_string()
            };
            let got = cx.jit_run(&who, &jit, fs, false);
            cx.judge(&who, &got, &want, t, false);
            if first_default.is_none() && mode.name == MODES[0].name {
                first_default = Some(got);
            }
        }
    }
    if let Some(mode) = modes.first() {
        tier_identity(&mut cx, mode, fs);
    }
    let twin = case.program.twins.is_some() && !case.expect_cap;
    // A twin must meet its original in the shared cache, compared or not.
    if first_default.is_some() || twin {
        let got = cx.jit_run("shared cache", shared, fs, false);
        if let Some(fresh) = &first_default {
            cache_identity(
                &mut cx,
                &got,
                fresh,
                "[shared cache, default options]",
                false,
            );
        }
    }
    if let (Some(tw), false) = (&case.program.twins, case.expect_cap) {
        run_twin(&mut cx, tw, shared);
    }
    cx.res
}

/// The options of a real-sizes case's pair of calls: the defaults on 2
/// threads (rayon's global pool, which tc builds pinned unless
/// `TC_PIN_THREADS=0`).
pub const REAL_MODE: Mode = Mode {
    name: "threads=2",
    opts: opts(true, false, 2),
    specialize_after: 1,
};

/// A real-sizes case, before any other mode runs its arguments: one
/// compiled function called twice with the same argument tensors, so a
/// product's weight parameter is packed per call on the first and packed
/// whole and kept by the prepack cache on the second (`tc-llvm`'s
/// `prepack.rs`). Both results are judged against the interpreter, and
/// the second must equal the first bit for bit (the kept packing is the
/// one the GEMM makes per call).
fn real_pair(cx: &mut Ctx, fs: &[Function], want: &Out) {
    let jit = fresh(&REAL_MODE);
    let t = taint(&cx.case.checked, &cx.case.callees, REAL_MODE.opts);
    let cks = cx.case.callees.clone();
    cx.set_bound(&cks, fs, REAL_MODE.opts);
    let first = cx.jit_run("threads=2, call 1", &jit, fs, false);
    cx.judge("threads=2, call 1", &first, want, t, false);
    let second = cx.jit_run("threads=2, call 2 (same weight)", &jit, fs, false);
    cx.judge("threads=2, call 2 (same weight)", &second, want, t, false);
    if let (Out::Val(a), Out::Val(b)) = (&first, &second) {
        cx.res.real_pair = true;
        cx.res.counts.exact += 1;
        if let Verdict::Differs(_, d) = compare(b, a, Taint::Exact) {
            cx.fail(
                "prepack: a second call with the same weight differs from the first".into(),
                format!("[threads=2, call 2 against call 1] {d}"),
                false,
            );
        }
    }
}

/// The largest product of `case` in multiply-adds and its largest
/// elementwise value (unary, binary, scalar, select, cast) in elements,
/// at its σ (`f`'s own ops).
pub fn work(case: &Case) -> (u128, u128) {
    let ck = &case.checked;
    let numel = |v: Value| -> Option<u128> {
        let (_, s) = concrete(&ck.types[v], &case.sigma)?;
        s.iter().try_fold(1u128, |a, &d| a.checked_mul(d as u128))
    };
    let (mut macs, mut elems) = (0u128, 0u128);
    for inst in &ck.func.body {
        match &inst.op {
            Op::Matmul(a, _) => {
                let k = concrete(&ck.types[*a], &case.sigma)
                    .and_then(|(_, s)| s.last().copied())
                    .unwrap_or(0) as u128;
                let n = numel(inst.result).unwrap_or(0).saturating_mul(k);
                macs = macs.max(n);
            }
            Op::Unary(..)
            | Op::Binary(..)
            | Op::ScalarBinary { .. }
            | Op::Select(..)
            | Op::Cast(..) => elems = elems.max(numel(inst.result).unwrap_or(0)),
            _ => {}
        }
    }
    (macs, elems)
}

fn same_out(a: &Out, b: &Out) -> bool {
    match (a, b) {
        (Out::Val(x), Out::Val(y)) => {
            x.dtype() == y.dtype() && x.shape() == y.shape() && x.bytes() == y.bytes()
        }
        (Out::Err(x), Out::Err(y)) => err_kind(x) == err_kind(y),
        (Out::Panic(_), Out::Panic(_)) => true,
        _ => false,
    }
}

/// Oracle (d): a long-lived cache must give what a fresh one gives, bit
/// for bit (same options, so even tolerance ops agree).
fn cache_identity(cx: &mut Ctx, shared: &Out, fresh: &Out, who: &str, twins: bool) {
    if let (Out::Val(_), Out::Val(_)) = (shared, fresh) {
        cx.res.counts.exact += 1;
    }
    if same_out(shared, fresh) {
        return;
    }
    let what = match (shared, fresh) {
        (Out::Val(a), Out::Val(b)) => match compare(a, b, Taint::Exact) {
            Verdict::Differs(_, d) => d,
            _ => String::new(),
        },
        (Out::Err(e), _) => format!("shared cache: {e}"),
        (Out::Panic(m), _) => format!("shared cache panicked: {}", first_line(m)),
        _ => "the shared cache succeeded where a fresh one did not".into(),
    };
    let key = if twins {
        "cache identity: twin program (same `f`, other callees) in a shared cache differs from a fresh cache"
    } else {
        "cache identity: a shared cache differs from a fresh one"
    };
    cx.fail(key.into(), format!("{who} {what}"), twins);
}

/// The quick tier against the optimized one (`tc_llvm::jit::Tier`): the
/// case in `mode` in a cache compiling the quick tier and in one compiling
/// the optimized tier at once, bit for bit (NaN payloads included) or the
/// same error. The generated code fixes every order, so the tiers may
/// differ only in speed. Skipped (and counted) when the quick cache
/// compiled nothing quick, its every part on disk at the optimized tier.
fn tier_identity(cx: &mut Ctx, mode: &Mode, fs: &[Function]) {
    let quick = fresh(mode);
    quick.set_tiered(true);
    let q = cx.jit_run(&format!("{} (quick tier)", mode.name), &quick, fs, false);
    if quick.stats().quick_compiles == 0 {
        cx.res.counts.tier_skips += 1;
        return;
    }
    let optimized = fresh(mode);
    optimized.set_tiered(false);
    let o = cx.jit_run(
        &format!("{} (optimized tier)", mode.name),
        &optimized,
        fs,
        false,
    );
    cx.res.counts.tiers += 1;
    if same_out(&q, &o) {
        return;
    }
    let what = match (&q, &o) {
        (Out::Val(a), Out::Val(b)) => match compare(a, b, Taint::Exact) {
            Verdict::Differs(_, d) => d,
            _ => String::new(),
        },
        _ => "one tier failed where the other did not".into(),
    };
    cx.fail(
        "tiers: the quick tier differs from the optimized tier".into(),
        format!("[{}] {what}", mode.name),
        false,
    );
}

/// The twin (same `f`, other callee bodies and return shapes) after the
/// original in the same cache, and in a fresh one.
fn run_twin(cx: &mut Ctx, tw: &[Function], shared: &Jit) {
    let case = cx.case;
    let want = interp(case, tw);
    if let Out::Err(e) = &want {
        if is_capacity(e) {
            // The twin doubles an axis: at a huge σ its shapes may leave
            // i64 or the element cap where the original's do not (seed
            // 38654708159). Not the twin's check to make; but the JIT must
            // refuse it too, never run it.
            let got = cx.jit_run("twin past the cap", &fresh(&MODES[0]), tw, true);
            if !matches!(got, Out::Err(_)) {
                cx.judge(
                    "twin past the cap, fresh cache",
                    &got,
                    &want,
                    Taint::Exact,
                    true,
                );
            }
            return;
        }
    }
    if !matches!(want, Out::Val(_)) {
        cx.judge_interp(&want);
        return;
    }
    let Ok((cks, _)) = check_all(tw, &case.program.main) else {
        return;
    };
    let t = taint(&case.checked, &cks, MODES[0].opts);
    cx.bounds.clear();
    cx.set_bound(&cks, tw, MODES[0].opts);
    let got = cx.jit_run("twin, shared cache", shared, tw, true);
    let fresh_out = cx.jit_run("twin, fresh cache", &fresh(&MODES[0]), tw, true);
    cx.judge("twin, fresh cache", &fresh_out, &want, t, true);
    cache_identity(
        cx,
        &got,
        &fresh_out,
        "[twin after the original, shared cache]",
        true,
    );
}

/// A refusal for size: a count past the cap or out of memory, or a dim
/// that leaves i64 (the concat and pad rules' "overflows").
fn is_capacity(e: &tc_runtime::Error) -> bool {
    use tc_core::concrete::RuleError as R;
    use tc_runtime::Error as E;
    match e {
        E::Rule(R::Size(_)) | E::OutOfMemory { .. } => true,
        E::Rule(R::Op { message, .. }) => message.contains("overflows"),
        _ => false,
    }
}

// ----------------------------------------------------------- bookkeeping

/// What became of one seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// The checker refused the program.
    Rejected,
    /// No σ within budget.
    NoSigma,
    /// Ran, no failure.
    Pass,
    /// Ran, some failure (or the process died).
    Fail,
}

/// The record of one seed, as the worker reports it.
#[derive(Clone, Debug)]
pub struct Record {
    /// The seed.
    pub seed: u64,
    /// Its fate.
    pub status: Status,
    /// Instructions in all its functions (smaller reproducers win).
    pub size: usize,
    /// JIT fallbacks to the interpreter.
    pub fallbacks: u64,
    /// Comparisons skipped as tainted.
    pub unchecked: u64,
    /// A huge-dim case (typed error expected).
    pub cap: bool,
    /// It had a twin program.
    pub twin: bool,
    /// Op families present.
    pub families: Vec<String>,
    /// The checker's first message, for a rejection.
    pub reject: Option<String>,
    /// Failures.
    pub failures: Vec<Failure>,
    /// [`program_fingerprint`] of the program the worker generated (0 if
    /// generation itself failed).
    pub fingerprint: u64,
    /// Its comparisons and fallbacks.
    pub counts: Counts,
    /// A real-sizes program.
    pub real: bool,
    /// Its largest product reached [`PAR_MACS`] multiply-adds (bit 0), its
    /// largest elementwise value [`PAR_ELEMS`] elements (bit 1).
    pub over: u8,
    /// It ran all six JIT modes.
    pub all_modes: bool,
    /// A real-sizes case whose pair of calls on 2 threads ran and was
    /// compared ([`CaseResult::real_pair`]).
    pub real_pair: bool,
    /// Modules compiled by LLVM for this case, and loaded from the run's
    /// kernel cache instead (another mode or case compiled the same IR).
    pub modules: (u64, u64),
}

/// Lookups of the process's kernel cache so far: (missed, so compiled;
/// found, so loaded).
fn cache_lookups() -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    tc_llvm::disk::Store::global().map_or((0, 0), |s| {
        (s.stats.misses.load(Relaxed), s.stats.hits.load(Relaxed))
    })
}

fn program_size(p: &Program) -> usize {
    p.main.body.len() + p.callees.iter().map(|f| f.body.len()).sum::<usize>()
}

/// A stable fingerprint of a generated program: FNV-1a (64-bit) of the
/// printed IR of its callees, its twins and `f`. A known reproducer pins
/// the program its seed must regenerate with it, so a change to the
/// generator that draws another program from the seed shows instead of
/// passing silently.
pub fn program_fingerprint(p: &Program) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |s: &str| {
        for b in s.bytes().chain([0xFF]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    };
    for c in &p.callees {
        feed(&c.to_string());
    }
    for t in p.twins.iter().flatten() {
        feed(&t.to_string());
    }
    feed(&p.main.to_string());
    h
}

/// Prepare and run one seed.
pub fn process(seed: u64, cfg: &GenConfig, budget: usize, shared: &Jit) -> Record {
    let mut r = Record {
        seed,
        status: Status::Rejected,
        size: 0,
        fallbacks: 0,
        unchecked: 0,
        cap: false,
        twin: false,
        families: vec![],
        reject: None,
        failures: vec![],
        fingerprint: 0,
        counts: Counts::default(),
        real: false,
        over: 0,
        all_modes: false,
        real_pair: false,
        modules: (0, 0),
    };
    if let Ok(p) = catch_unwind(AssertUnwindSafe(|| gen_program(seed, cfg))) {
        r.fingerprint = program_fingerprint(&p);
    }
    let prepared = match catch_unwind(AssertUnwindSafe(|| prepare(seed, cfg, budget))) {
        Ok(p) => p,
        Err(e) => {
            // The checker (or the generator) panicked on a generated program.
            let m = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            r.status = Status::Fail;
            r.failures.push(Failure {
                key: "panic while generating or checking".into(),
                detail: format!(
                    "{}\nseed {seed}\n{}",
                    first_line(&m),
                    gen_program(seed, cfg).main
                ),
            });
            return r;
        }
    };
    match prepared {
        Prepared::Rejected(why) => r.reject = Some(why),
        Prepared::NoSigma => r.status = Status::NoSigma,
        Prepared::Ready(case) => {
            r.size = program_size(&case.program);
            r.cap = case.expect_cap;
            r.twin = case.program.twins.is_some();
            r.families = case.program.used.iter().map(|f| f.name().into()).collect();
            r.real = case.program.real.is_some();
            let (macs, elems) = work(&case);
            r.over = (macs >= PAR_MACS) as u8 | ((elems >= PAR_ELEMS) as u8) << 1;
            let before = cache_lookups();
            let res = run_case(&case, shared, cfg);
            let after = cache_lookups();
            r.modules = (after.0 - before.0, after.1 - before.1);
            r.all_modes = res.all_modes;
            r.real_pair = res.real_pair;
            r.fallbacks = res.fallbacks;
            r.unchecked = res.unchecked;
            r.counts = res.counts;
            r.status = if res.failures.is_empty() {
                Status::Pass
            } else {
                Status::Fail
            };
            r.failures = res.failures;
        }
    }
    r
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}

fn unesc(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(o) => out.push(o),
            None => {}
        }
    }
    out
}

impl Record {
    /// The worker's protocol lines for this record (`@@F`, `@@J`, `@@R`).
    pub fn lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        for f in &self.failures {
            v.push(format!(
                "@@F {} {}\t{}",
                self.seed,
                esc(&f.key),
                esc(&f.detail)
            ));
        }
        if let Some(j) = &self.reject {
            v.push(format!("@@J {} {}", self.seed, esc(j)));
        }
        let st = match self.status {
            Status::Rejected => "rejected",
            Status::NoSigma => "nosigma",
            Status::Pass => "pass",
            Status::Fail => "fail",
        };
        v.push(format!(
            "@@R {} {st} {} {} {} {} {} {} {:016x} {} {} {} {} {} {} {}",
            self.seed,
            self.size,
            self.fallbacks,
            self.unchecked,
            self.cap as u8,
            self.twin as u8,
            if self.families.is_empty() {
                "-".into()
            } else {
                self.families.join(",")
            },
            self.fingerprint,
            self.counts.encode(),
            self.real as u8,
            self.over,
            self.all_modes as u8,
            self.real_pair as u8,
            self.modules.0,
            self.modules.1
        ));
        v
    }
}

/// Reassembles records from a worker's lines.
#[derive(Default)]
pub struct Parser {
    failures: Vec<Failure>,
    reject: Option<String>,
    /// The seed whose `@@B` came last without its `@@R`.
    pub in_flight: Option<u64>,
}

impl Parser {
    /// Feed one line; a finished record comes back at its `@@R`.
    pub fn line(&mut self, l: &str) -> Option<Record> {
        // A harness may print on the same line first (libtest's
        // `test fuzz_worker ... `).
        let l = &l[l.find("@@")?..];
        let (tag, rest) = l.split_once(' ')?;
        match tag {
            "@@B" => {
                self.in_flight = rest.trim().parse().ok();
                self.failures.clear();
                self.reject = None;
                None
            }
            "@@F" => {
                let (_, body) = rest.split_once(' ')?;
                let (k, d) = body.split_once('\t')?;
                self.failures.push(Failure {
                    key: unesc(k),
                    detail: unesc(d),
                });
                None
            }
            "@@J" => {
                self.reject = rest.split_once(' ').map(|(_, r)| unesc(r));
                None
            }
            "@@R" => {
                let f: Vec<&str> = rest.split(' ').collect();
                let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
                let status = match *f.get(1)? {
                    "rejected" => Status::Rejected,
                    "nosigma" => Status::NoSigma,
                    "pass" => Status::Pass,
                    _ => Status::Fail,
                };
                self.in_flight = None;
                Some(Record {
                    seed: num(0),
                    status,
                    size: num(2) as usize,
                    fallbacks: num(3),
                    unchecked: num(4),
                    cap: num(5) == 1,
                    twin: num(6) == 1,
                    families: f
                        .get(7)
                        .filter(|s| **s != "-")
                        .map(|s| s.split(',').map(String::from).collect())
                        .unwrap_or_default(),
                    reject: self.reject.take(),
                    failures: std::mem::take(&mut self.failures),
                    fingerprint: f
                        .get(8)
                        .and_then(|x| u64::from_str_radix(x, 16).ok())
                        .unwrap_or(0),
                    counts: Counts::parse(f.get(9..).unwrap_or(&[])),
                    // After the counts' eight fields (`Counts::encode`).
                    real: num(17) == 1,
                    over: num(18) as u8,
                    all_modes: num(19) == 1,
                    real_pair: num(20) == 1,
                    modules: (num(21), num(22)),
                })
            }
            _ => None,
        }
    }
}

/// The smallest reproducer seen for one failure family.
#[derive(Clone, Debug)]
pub struct FamilyRecord {
    /// Failures of this family (over all modes).
    pub count: u64,
    /// Up to 8 seeds showing it.
    pub seeds: Vec<u64>,
    /// Size of the smallest reproducer.
    pub size: usize,
    /// Its detail.
    pub example: String,
}

/// Counts of a run.
#[derive(Default)]
pub struct Stats {
    /// Programs generated.
    pub generated: u64,
    /// Accepted by the checker.
    pub accepted: u64,
    /// Refused by the checker.
    pub rejected: u64,
    /// Accepted, but no σ within budget.
    pub no_sigma: u64,
    /// Run.
    pub run: u64,
    /// Run without failure.
    pub passed: u64,
    /// Run with some failure.
    pub failed: u64,
    /// Huge-dim cases run.
    pub cap_cases: u64,
    /// Cases with a twin program.
    pub twins: u64,
    /// JIT fallbacks.
    pub fallbacks: u64,
    /// Comparisons skipped as tainted.
    pub unchecked: u64,
    /// Real-sizes programs run.
    pub real: u64,
    /// Programs run with a product of at least [`PAR_MACS`] multiply-adds.
    pub over_macs: u64,
    /// Programs run with an elementwise value of at least [`PAR_ELEMS`]
    /// elements.
    pub over_elems: u64,
    /// Real-sizes programs whose pair of calls on 2 threads with the same
    /// weight ran and was compared.
    pub real_pairs: u64,
    /// Programs run in all six JIT modes.
    pub all_modes: u64,
    /// Modules compiled by LLVM, and loaded from the run's kernel cache.
    pub modules: (u64, u64),
    /// Comparisons by kind and fallbacks by reason.
    pub counts: Counts,
    /// Accepted programs per op family present.
    pub coverage: BTreeMap<String, u64>,
    /// Rejections per checker message (variable parts kept: they are short).
    pub rejections: BTreeMap<String, u64>,
    /// Failure families.
    pub families: BTreeMap<String, FamilyRecord>,
    /// What became of each seed, and the fingerprint of the program it
    /// generated ([`program_fingerprint`]): what a fixed run checks.
    pub seeds: BTreeMap<u64, (Status, u64)>,
}

impl Stats {
    /// Count one record.
    pub fn absorb(&mut self, r: &Record) {
        self.generated += 1;
        self.seeds.insert(r.seed, (r.status.clone(), r.fingerprint));
        match r.status {
            Status::Rejected => {
                self.rejected += 1;
                let why = r.reject.clone().unwrap_or_default();
                let key: String = why.chars().take(120).collect();
                *self.rejections.entry(key).or_default() += 1;
                return;
            }
            Status::NoSigma => {
                self.accepted += 1;
                self.no_sigma += 1;
                return;
            }
            Status::Pass => self.passed += 1,
            Status::Fail => self.failed += 1,
        }
        self.accepted += 1;
        self.run += 1;
        self.cap_cases += r.cap as u64;
        self.twins += r.twin as u64;
        self.fallbacks += r.fallbacks;
        self.unchecked += r.unchecked;
        self.real += r.real as u64;
        self.over_macs += (r.over & 1) as u64;
        self.over_elems += (r.over >> 1 & 1) as u64;
        self.real_pairs += r.real_pair as u64;
        self.all_modes += r.all_modes as u64;
        self.modules.0 += r.modules.0;
        self.modules.1 += r.modules.1;
        self.counts.add(&r.counts);
        for f in &r.families {
            *self.coverage.entry(f.clone()).or_default() += 1;
        }
        for f in &r.failures {
            self.add_failure(r.seed, r.size, f);
        }
    }

    /// Add the counts of another run (parallel workers).
    pub fn merge(&mut self, o: Stats) {
        self.generated += o.generated;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.no_sigma += o.no_sigma;
        self.run += o.run;
        self.passed += o.passed;
        self.failed += o.failed;
        self.cap_cases += o.cap_cases;
        self.twins += o.twins;
        self.fallbacks += o.fallbacks;
        self.unchecked += o.unchecked;
        self.real += o.real;
        self.over_macs += o.over_macs;
        self.over_elems += o.over_elems;
        self.real_pairs += o.real_pairs;
        self.all_modes += o.all_modes;
        self.modules.0 += o.modules.0;
        self.modules.1 += o.modules.1;
        self.counts.add(&o.counts);
        for (k, v) in o.coverage {
            *self.coverage.entry(k).or_default() += v;
        }
        for (k, v) in o.rejections {
            *self.rejections.entry(k).or_default() += v;
        }
        self.seeds.extend(o.seeds);
        for (k, f) in o.families {
            match self.families.get_mut(&k) {
                None => {
                    self.families.insert(k, f);
                }
                Some(e) => {
                    e.count += f.count;
                    for s in f.seeds {
                        if e.seeds.len() < 8 && !e.seeds.contains(&s) {
                            e.seeds.push(s);
                        }
                    }
                    if f.size < e.size {
                        e.size = f.size;
                        e.example = f.example;
                    }
                }
            }
        }
    }

    /// Count one failure of case `seed` (of `size` instructions).
    pub fn add_failure(&mut self, seed: u64, size: usize, f: &Failure) {
        let e = self
            .families
            .entry(f.key.clone())
            .or_insert_with(|| FamilyRecord {
                count: 0,
                seeds: vec![],
                size: usize::MAX,
                example: String::new(),
            });
        e.count += 1;
        if !e.seeds.contains(&seed) && e.seeds.len() < 8 {
            e.seeds.push(seed);
        }
        if size < e.size {
            e.size = size;
            e.example = f.detail.clone();
        }
    }

    /// The summary printed by the example and by the test on failure.
    pub fn report(&self, examples: bool) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "generated {}, accepted {}, rejected {}, no σ in budget {}, run {}, passed {}, failed {} \
             (huge-dim cases {}, twin programs {}, JIT fallbacks {}, tainted comparisons skipped {})",
            self.generated,
            self.accepted,
            self.rejected,
            self.no_sigma,
            self.run,
            self.passed,
            self.failed,
            self.cap_cases,
            self.twins,
            self.fallbacks,
            self.unchecked
        );
        let cov: Vec<String> = Family::ALL
            .iter()
            .map(|f| format!("{} {}", f.name(), self.coverage.get(f.name()).unwrap_or(&0)))
            .collect();
        let _ = writeln!(
            s,
            "coverage (run programs containing the family): {}",
            cov.join(", ")
        );
        let mut rej: Vec<(&String, &u64)> = self.rejections.iter().collect();
        rej.sort_by(|a, b| b.1.cmp(a.1));
        for (m, n) in rej.iter().take(5) {
            let _ = writeln!(s, "  rejected {n}×: {m}");
        }
        let _ = writeln!(s, "failure families: {}", self.families.len());
        for (k, f) in &self.families {
            let _ = writeln!(s, "== {k}: {} failures, seeds {:?}", f.count, f.seeds);
            if examples {
                let _ = writeln!(
                    s,
                    "   smallest ({} instructions):\n{}",
                    f.size,
                    indent(&f.example)
                );
            }
        }
        s
    }
}

impl Stats {
    /// The counts every run prints at its end: programs run, values
    /// compared bit for bit and within a bound, tainted values not
    /// compared, typed errors compared, fallbacks by allowed reason and
    /// unexplained fallbacks (each a failure).
    pub fn counts_report(&self) -> String {
        let c = &self.counts;
        let mut s = String::new();
        let _ = writeln!(s, "counts:");
        let _ = writeln!(s, "  programs run                      {}", self.run);
        let _ = writeln!(s, "  real-sizes programs               {}", self.real);
        let _ = writeln!(
            s,
            "    pairs of calls, 2 threads, same weight, compared {}",
            self.real_pairs
        );
        let _ = writeln!(s, "  a product of ≥ 2^23 multiply-adds {}", self.over_macs);
        let _ = writeln!(s, "  an elementwise value ≥ 2^18 elems {}", self.over_elems);
        let _ = writeln!(s, "  run in all six JIT modes          {}", self.all_modes);
        let _ = writeln!(
            s,
            "  modules compiled / loaded         {} / {} (the run's kernel cache)",
            self.modules.0, self.modules.1
        );
        let _ = writeln!(s, "  values compared bit-exactly       {}", c.exact);
        let _ = writeln!(s, "  values compared within a bound    {}", c.bounded);
        let _ = writeln!(
            s,
            "  tainted values not compared       {} ({} of them not bit-identical)",
            c.tainted, self.unchecked
        );
        let _ = writeln!(s, "  typed errors compared by kind     {}", c.errors);
        let _ = writeln!(
            s,
            "  quick tier vs optimized, compared {} (skipped, nothing quick: {})",
            c.tiers, c.tier_skips
        );
        let allowed: u64 = c.allowed.values().sum();
        let _ = writeln!(s, "  fallbacks, allowed reasons        {allowed}");
        for (k, v) in &c.allowed {
            let _ = writeln!(s, "    {k}: {v}");
        }
        let _ = writeln!(s, "  fallbacks, unexplained (failures) {}", c.unexplained);
        s
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("     {l}\n")).collect()
}

// ------------------------------------------------------------- isolation

/// The example's default `--budget`: the largest value of an ordinary
/// case, in elements.
pub const LONG_BUDGET: usize = 1 << 16;

/// The long-lived cache cases share (capacity small enough to evict).
pub fn shared_cache() -> Jit {
    Jit::new(CacheConfig {
        capacity: 32,
        specialize_after: 1,
        options: JitOptions::default(),
    })
}

/// Run seeds `from..from + count` in this process, printing the protocol
/// lines on stdout (`@@B seed` before each case, so a crash names it).
pub fn worker(from: u64, count: u64, cfg: &GenConfig, budget: usize) {
    use std::io::Write;
    std::panic::set_hook(Box::new(|_| {}));
    let shared = shared_cache();
    let out = std::io::stdout();
    for seed in from..from.saturating_add(count) {
        {
            let mut o = out.lock();
            let _ = writeln!(o, "@@B {seed}");
            let _ = o.flush();
        }
        let r = process(seed, cfg, budget, &shared);
        let mut o = out.lock();
        for l in r.lines() {
            let _ = writeln!(o, "{l}");
        }
        let _ = o.flush();
    }
}

/// The lines of a dead child's stderr worth reading: the cause and the
/// backtrace frames inside tc.
fn stderr_gist(lines: &[String]) -> String {
    let keep = |l: &&String| {
        l.contains("memory allocation")
            || l.contains("panicked")
            || l.contains("overflow")
            || l.contains("LLVM")
            || l.contains(" tc_")
    };
    let v: Vec<&str> = lines
        .iter()
        .filter(keep)
        .take(24)
        .map(|l| l.as_str())
        .collect();
    v.join("\n")
}

/// How a supervised child died.
fn death(status: Option<std::process::ExitStatus>, stderr: &[String]) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match status {
        None => "timed out".to_string(),
        Some(s) => match s.signal() {
            Some(6) => "aborted (SIGABRT)".into(),
            Some(11) => "segmentation fault (SIGSEGV)".into(),
            Some(7) => "bus error (SIGBUS)".into(),
            Some(n) => format!("killed by signal {n}"),
            None => format!("exited with {}", s.code().unwrap_or(-1)),
        },
    };
    // The line that names the cause (a failed allocation, a panic message,
    // a stack overflow), else the last one; digits elided so that one cause
    // is one family.
    let known = [
        "memory allocation of",
        "stack overflow",
        "panicked at",
        "LLVM ERROR",
    ];
    let pos = stderr
        .iter()
        .position(|l| known.iter().any(|k| l.contains(k)))
        .map(|i| {
            if stderr[i].contains("panicked at") {
                (i + 1).min(stderr.len() - 1)
            } else {
                i
            }
        });
    let why = pos
        .map(|i| &stderr[i])
        .or_else(|| stderr.iter().rev().find(|l| !l.trim().is_empty()))
        .map(|l| {
            let t: String = l.chars().take(100).collect();
            t.chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect::<String>()
        })
        .unwrap_or_default();
    if why.trim().is_empty() {
        format!("process {how}")
    } else {
        format!("process {how}: {why}")
    }
}

/// Run seeds `from..from + count` in child processes made by `spawn(from,
/// count)` (each runs [`worker`]); a child that dies is replaced, starting
/// after the seed it died on, and that seed is recorded as a failure with
/// its reproducer (regenerated here from the seed). Stops at `deadline`.
#[allow(clippy::too_many_arguments)]
pub fn supervise(
    spawn: &dyn Fn(u64, u64) -> std::process::Command,
    from: u64,
    count: u64,
    deadline: Option<std::time::Instant>,
    case_timeout: std::time::Duration,
    cfg: &GenConfig,
    budget: usize,
    stats: &mut Stats,
    progress: &mut dyn FnMut(&Stats),
) {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::sync::{mpsc, Arc, Mutex};
    let end = from.saturating_add(count);
    let mut next = from;
    while next < end && time_left(deadline) {
        let mut child = spawn(next, end - next)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a fuzz worker");
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let tail: Arc<Mutex<Vec<String>>> = Arc::default();
        let (t2, stderr) = (tail.clone(), child.stderr.take().expect("piped stderr"));
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let mut t = t2.lock().unwrap_or_else(|e| e.into_inner());
                t.push(l);
                let n = t.len();
                if n > 400 {
                    t.drain(..n - 400);
                }
            }
        });
        let mut parser = Parser::default();
        let mut timed_out = false;
        let mut heard = std::time::Instant::now();
        let pid = child.id();
        let mut cpu_at_heard = cpu_time(pid);
        loop {
            if !time_left(deadline) {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            match rx.recv_timeout(std::time::Duration::from_millis(500)) {
                Ok(l) => {
                    heard = std::time::Instant::now();
                    cpu_at_heard = cpu_time(pid);
                    if let Some(r) = parser.line(&l) {
                        next = r.seed + 1;
                        stats.absorb(&r);
                        progress(stats);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout)
                    if !stuck(pid, cpu_at_heard, heard, case_timeout) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    let _ = child.kill();
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = child.wait().ok().filter(|_| !timed_out);
        let Some(seed) = parser.in_flight else {
            if next < end && !status.is_some_and(|s| s.success()) {
                // Died between cases: nothing to blame, but do not spin.
                next += 1;
            }
            continue;
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        let lines = tail.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let key = death(status, &lines);
        let gist = stderr_gist(&lines);
        let detail = match catch_unwind(AssertUnwindSafe(|| prepare(seed, cfg, budget))) {
            Ok(Prepared::Ready(c)) => format!("{}\nstderr:\n{gist}", describe(&c, false)),
            _ => format!("seed {seed} (not reproducible here)\nstderr:\n{gist}"),
        };
        let size = program_size(&gen_program(seed, cfg));
        stats.absorb(&Record {
            seed,
            status: Status::Fail,
            size,
            fallbacks: 0,
            unchecked: 0,
            cap: false,
            twin: false,
            families: vec![],
            reject: None,
            failures: vec![Failure { key, detail }],
            fingerprint: program_fingerprint(&gen_program(seed, cfg)),
            counts: Counts::default(),
            real: gen_program(seed, cfg).real.is_some(),
            over: 0,
            all_modes: false,
            real_pair: false,
            modules: (0, 0),
        });
        progress(stats);
        next = seed + 1;
    }
}

/// Whether a silent worker is stuck: it spent `case_timeout` of CPU time
/// since its last line, or ten times that of wall time (a worker blocked
/// without using CPU). CPU time, not wall time, so a loaded machine does not
/// turn slow cases into false failures.
fn stuck(
    pid: u32,
    cpu_at_heard: Option<std::time::Duration>,
    heard: std::time::Instant,
    case_timeout: std::time::Duration,
) -> bool {
    let wall = heard.elapsed();
    match (cpu_time(pid), cpu_at_heard) {
        (Some(now), Some(then)) => {
            now.saturating_sub(then) >= case_timeout || wall >= case_timeout * 10
        }
        // No /proc (not Linux): fall back to wall time.
        _ => wall >= case_timeout,
    }
}

/// User + system CPU time of process `pid`, read from `/proc/<pid>/stat`
/// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ').skip(11);
    let ticks: u64 = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ticks.checked_mul(10)?))
}

fn time_left(deadline: Option<std::time::Instant>) -> bool {
    deadline.is_none_or(|d| std::time::Instant::now() < d)
}
