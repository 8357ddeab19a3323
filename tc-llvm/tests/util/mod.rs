//! Shared helpers for the differential tests.
#![allow(dead_code)]

use tc_core::build::FnBuilder;
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, UnaryOp, Value};
use tc_core::{Dim, Dtype, Type};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::{cast, Tensor};

/// Exact mode on one thread: no fast math, no reordering.
pub const EXACT: JitOptions = JitOptions {
    fast_math: false,
    deterministic: false,
    threads: 1,
    fast_quant: false,
};

/// Deterministic mode on the pool: reductions in the interpreter's order.
pub const DET: JitOptions = JitOptions {
    fast_math: false,
    deterministic: true,
    threads: 0,
    fast_quant: false,
};

/// A cache that never specialises: every call runs the shape-generic kernels.
pub fn generic_jit() -> Jit {
    Jit::new(CacheConfig {
        capacity: 8,
        specialize_after: 1000,
        options: EXACT,
    })
}

/// A small deterministic generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A tensor of dtype `dt` with random values (specials included for floats).
pub fn random(rng: &mut Rng, dt: Dtype, shape: &[usize], specials: bool) -> Tensor {
    let n: usize = shape.iter().product();
    let elems: Vec<Elem> = (0..n)
        .map(|_| {
            if dt.is_float() {
                let r = rng.next() % 64;
                let x = if specials && r == 0 {
                    f32::NAN
                } else if specials && r == 1 {
                    -0.0
                } else if specials && r == 2 {
                    0.0
                } else if specials && r == 3 {
                    f32::INFINITY
                } else if specials && r == 4 {
                    -1e30
                } else {
                    (rng.unit() - 0.5) * 8.0
                };
                Elem::F(cast::round_to(x, dt))
            } else if dt.is_int() {
                let (lo, hi) = dt.int_range().unwrap();
                let v = if rng.next().is_multiple_of(8) {
                    [lo, hi, 0, -1, 1][(rng.next() % 5) as usize]
                } else {
                    (rng.next() % 21) as i64 - 10
                };
                Elem::I(v.clamp(lo, hi))
            } else {
                Elem::B(rng.next().is_multiple_of(2))
            }
        })
        .collect();
    Tensor::from_elems(dt, shape, &elems).unwrap()
}

pub fn tt(dt: Dtype, shape: &[&str]) -> Type {
    Type::tensor(
        dt,
        shape
            .iter()
            .map(|s| {
                s.parse::<i64>()
                    .map(Dim::c)
                    .unwrap_or_else(|_| Dim::var(*s))
            })
            .collect(),
    )
}

pub fn interp(f: &Function, args: &[Arg]) -> Result<Tensor, tc_runtime::Error> {
    tc_runtime::exec::call(f, args, &|_| None)
}

pub fn jit_with(opts: JitOptions) -> Jit {
    Jit::new(CacheConfig {
        capacity: 64,
        specialize_after: 1,
        options: opts,
    })
}

pub fn jit(f: &Function, args: &[Arg], opts: JitOptions) -> Tensor {
    let j = jit_with(opts);
    let r = j.call(f, args, &|_| None).expect("jit run");
    assert_eq!(j.stats().fallbacks, 0, "fell back: {:?}", j.last_fallback());
    r
}

/// `f` on `args` in every JIT mode (exact, deterministic, default) and on
/// `generic`'s shape-generic kernels, each bit for bit with the interpreter.
pub fn assert_every_mode(what: &str, f: &Function, args: &[Arg], generic: &Jit) {
    let want = interp(f, args).unwrap();
    for opts in [EXACT, DET, JitOptions::default()] {
        assert_bits(what, &jit(f, args, opts), &want, false);
    }
    let g = generic.call(f, args, &|_| None).unwrap();
    assert_bits(&format!("{what} (generic)"), &g, &want, false);
}

/// Bit-identical (NaN payloads included, except that any NaN matches any NaN
/// when `nan_any`).
pub fn assert_bits(what: &str, a: &Tensor, b: &Tensor, nan_any: bool) {
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    if a.bytes() == b.bytes() {
        return;
    }
    let (ea, eb) = (a.to_elems(), b.to_elems());
    for (i, (x, y)) in ea.iter().zip(&eb).enumerate() {
        let same = match (x, y) {
            (Elem::F(p), Elem::F(q)) => {
                p.to_bits() == q.to_bits() || (nan_any && p.is_nan() && q.is_nan())
            }
            _ => x == y,
        };
        assert!(same, "{what}: element {i}: jit {x:?} vs interpreter {y:?}");
    }
}

/// `|a − b| ≤ rtol·|b| + atol`, NaN matches NaN, equal infinities match.
pub fn assert_close(what: &str, a: &Tensor, b: &Tensor, rtol: f32, atol: f32) {
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    for (i, (x, y)) in a.to_elems().iter().zip(b.to_elems()).enumerate() {
        match (x, y) {
            (Elem::F(p), Elem::F(q)) => {
                let ok =
                    (p.is_nan() && q.is_nan()) || p == &q || (p - q).abs() <= rtol * q.abs() + atol;
                assert!(ok, "{what}: element {i}: jit {p:?} vs interpreter {q:?}");
            }
            _ => assert_eq!(x, &y, "{what}: element {i}"),
        }
    }
}

pub fn builder(name: &str) -> FnBuilder {
    FnBuilder::new(name)
}

/// A reduction of `x` over `axes` (the builder's op, one line per use).
pub fn reduce(b: &mut FnBuilder, op: ReduceOp, axes: &[usize], keepdims: bool, x: Value) -> Value {
    b.op(Op::Reduce {
        op,
        axes: axes.to_vec(),
        keepdims,
        x,
    })
}

/// The softmax over the last axis of `x` (of shape `full`), as a library
/// function writes it: max, subtract, exp, sum, divide.
pub fn softmax_rows(b: &mut FnBuilder, x: Value, full: Vec<Dim>) -> Value {
    let last = full.len() - 1;
    let m = reduce(b, ReduceOp::Max, &[last], true, x);
    let mb = b.op(Op::Broadcast(full.clone(), m));
    let d = b.op(Op::Binary(BinaryOp::Sub, x, mb));
    let e = b.op(Op::Unary(UnaryOp::Exp, d));
    let s = reduce(b, ReduceOp::Sum, &[last], true, e);
    let sb = b.op(Op::Broadcast(full, s));
    b.op(Op::Binary(BinaryOp::Div, e, sb))
}

/// `x · wᵀ` with `w: [N, K]` in PyTorch's layout (read through strides);
/// with `copy`, `wᵀ · 1` materialized first, so the weight is new storage
/// on every call and is packed per call (the kept-packing tests' reference).
pub fn linear(copy: bool) -> Function {
    use tc_core::ir::{BinaryOp, Op, Scalar};
    let mut b = builder(if copy { "linear_copy" } else { "linear" });
    let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
    let w = b.param("w", tt(Dtype::F32, &["N", "K"]));
    b.returns(tt(Dtype::F32, &["M", "N"]));
    let mut wt = b.op(Op::Transpose(vec![1, 0], w));
    if copy {
        wt = b.op(Op::ScalarBinary {
            op: BinaryOp::Mul,
            x: wt,
            s: Scalar::Float(1.0),
            scalar_left: false,
        });
    }
    let y = b.op(Op::Matmul(x, wt));
    b.finish(y)
}

/// Bits of the guard floats [`guarded_sgemm`] puts past C.
pub const GUARD: u32 = 0x7fc0_dead;

/// `sgemm` of seeded `m × k` and `k × n` operands (values in ±0.5), with
/// 64 guard floats past C that must come back untouched (a kernel writing
/// past its tile would change them); returns C, A and B.
pub fn guarded_sgemm(
    m: usize,
    n: usize,
    k: usize,
    seed: u64,
    threads: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    use tc_llvm::kernels::matmul::{sgemm, View};
    let mut rng = Rng(seed);
    let a: Vec<f32> = (0..m * k).map(|_| rng.unit() - 0.5).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.unit() - 0.5).collect();
    let mut c = vec![f32::from_bits(GUARD); m * n + 64];
    // SAFETY: the views cover `a` (m × k) and `b` (k × n); `c` holds m × n.
    unsafe {
        sgemm(
            m,
            n,
            k,
            View::new(a.as_ptr(), k, 1),
            View::new(b.as_ptr(), n, 1),
            c.as_mut_ptr(),
            &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
        )
        .unwrap();
    }
    assert!(
        c[m * n..].iter().all(|x| x.to_bits() == GUARD),
        "m={m} n={n} k={k}: a write past C"
    );
    c.truncate(m * n);
    (c, a, b)
}

/// The F32 unary ops that `fast_math` computes as polynomials (within
/// `tc_llvm::TOLERANCE`), and the exact path computes through f64 libm.
pub const FAST_MATH_OPS: [tc_core::ir::UnaryOp; 6] = [
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Erf,
    UnaryOp::Gelu,
];

/// `op(x)` elementwise on `x: [A, B]` of dtype `dt`.
pub fn unary_fn(op: tc_core::ir::UnaryOp, dt: Dtype) -> Function {
    let mut b = builder("u");
    let x = b.param("x", tt(dt, &["A", "B"]));
    b.returns(tt(dt, &["A", "B"]));
    let r = b.op(tc_core::ir::Op::Unary(op, x));
    b.finish(r)
}

/// Dims named by shape variables.
fn var_dims(ds: &[&str]) -> Vec<Dim> {
    ds.iter().map(|d| Dim::var(*d)).collect()
}

/// Softmax over the last axis of a rank-4 tensor, as the model writes it.
pub fn softmax4_fn() -> Function {
    let mut b = builder("softmax4");
    let x = b.param("x", tt(Dtype::F32, &["B", "H", "S", "T"]));
    b.returns(tt(Dtype::F32, &["B", "H", "S", "T"]));
    let r = softmax_rows(&mut b, x, var_dims(&["B", "H", "S", "T"]));
    b.finish(r)
}

/// Layer norm over the last axis, as the model writes it.
pub fn layer_norm_fn() -> Function {
    let mut b = builder("ln");
    let x = b.param("x", tt(Dtype::F32, &["B", "S", "C"]));
    let g = b.param("g", tt(Dtype::F32, &["C"]));
    let be = b.param("be", tt(Dtype::F32, &["C"]));
    let eps = b.param("eps", tc_core::Type::Scalar(Dtype::F32));
    b.returns(tt(Dtype::F32, &["B", "S", "C"]));
    let full = var_dims(&["B", "S", "C"]);
    let mu = reduce(&mut b, ReduceOp::Mean, &[2], true, x);
    let mub = b.op(Op::Broadcast(full.clone(), mu));
    let xc = b.op(Op::Binary(BinaryOp::Sub, x, mub));
    let sq = b.op(Op::Binary(BinaryOp::Mul, xc, xc));
    let var = reduce(&mut b, ReduceOp::Mean, &[2], true, sq);
    let ve = b.op(Op::ScalarBinary {
        op: BinaryOp::Add,
        x: var,
        s: b.scalar_param(eps),
        scalar_left: false,
    });
    let inv = b.op(Op::Unary(UnaryOp::Rsqrt, ve));
    let ib = b.op(Op::Broadcast(full.clone(), inv));
    let y = b.op(Op::Binary(BinaryOp::Mul, xc, ib));
    let gb = b.op(Op::Broadcast(full.clone(), g));
    let yg = b.op(Op::Binary(BinaryOp::Mul, y, gb));
    let bb = b.op(Op::Broadcast(full, be));
    let r = b.op(Op::Binary(BinaryOp::Add, yg, bb));
    b.finish(r)
}
