//! The fused attention op (`sdpa`, docs/syntax.md §12f) against the
//! interpreter, which computes the composition it replaces op by op: bit
//! for bit in deterministic mode with exact transcendentals, within the
//! stated bound in the other modes; on the two layouts models give it (a
//! KV cache's first positions, read in place; an encoder's heads,
//! transposed views with a padding mask broadcast over heads and rows).
use crate::util;

use tc_core::build::FnBuilder;
use tc_core::ir::{BinaryOp, Function, Op, Scalar, Value};
use tc_core::{Dim, Dtype, Pred, Type};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;
use util::*;

/// Deterministic with the interpreter's exact `exp`: the mode that must
/// equal the interpreter bit for bit.
const DET_EXACT: JitOptions = JitOptions {
    fast_math: false,
    deterministic: true,
    threads: 1,
    fast_quant: false,
};

const SCALE: f64 = 0.3;

/// How the operands reach the op.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// A decoder step: queries `[B, H, M, D]`; keys `[B, H, D, C]` and
    /// values `[B, H, C, E]` caches sliced to their first `T` positions; a
    /// `[M, T]` mask broadcast over batch and heads.
    Cache,
    /// An encoder: queries, keys and values `[B, S, H, ·]` as the
    /// projections lay them out, transposed to heads; a `[B, T]` padding
    /// mask broadcast over heads and query rows.
    Encoder,
}

fn d(s: &str) -> Dim {
    Dim::var(s)
}

/// `sdpa` in `form`, or (`composed`) the composition it replaces; a
/// `Cache` form's caches hold `kv` (f32, f16 or bf16).
fn attention_fn(form: Form, composed: bool, kv: Dtype) -> Function {
    let mut b = builder(if composed { "attention" } else { "sdpa" });
    let full = |r: &str, c: &str| vec![d("B"), d("H"), d(r), d(c)];
    let (q, k, v, mask) = match form {
        Form::Cache => {
            let q = b.param("q", tt(Dtype::F32, &["B", "H", "M", "D"]));
            let kc = b.param("kc", tt(kv, &["B", "H", "D", "C"]));
            let vc = b.param("vc", tt(kv, &["B", "H", "C", "E"]));
            let m = b.param("mask", tt(Dtype::F32, &["M", "T"]));
            b.requires(Pred::le(d("T"), d("C")));
            let mut k = b.op(slice(3, kc));
            let mut v = b.op(slice(2, vc));
            if composed && kv != Dtype::F32 {
                // The composition widens a narrow cache first (exactly).
                k = b.op(Op::Cast(Dtype::F32, k));
                v = b.op(Op::Cast(Dtype::F32, v));
            }
            let r = b.op(Op::Reshape(vec![Dim::c(1), Dim::c(1), d("M"), d("T")], m));
            (q, k, v, b.op(Op::Broadcast(full("M", "T"), r)))
        }
        Form::Encoder => {
            let xq = b.param("q", tt(Dtype::F32, &["B", "M", "H", "D"]));
            let xk = b.param("k", tt(Dtype::F32, &["B", "T", "H", "D"]));
            let xv = b.param("v", tt(Dtype::F32, &["B", "T", "H", "E"]));
            let m = b.param("mask", tt(Dtype::F32, &["B", "T"]));
            let q = b.op(Op::Transpose(vec![0, 2, 1, 3], xq));
            let k = b.op(Op::Transpose(vec![0, 2, 3, 1], xk));
            let v = b.op(Op::Transpose(vec![0, 2, 1, 3], xv));
            let r = b.op(Op::Reshape(vec![d("B"), Dim::c(1), Dim::c(1), d("T")], m));
            (q, k, v, b.op(Op::Broadcast(full("M", "T"), r)))
        }
    };
    b.returns(Type::tensor(Dtype::F32, full("M", "E")));
    // An empty batch and a zero head width admitted.
    b.requires(Pred::ge(d("B"), Dim::c(0)));
    b.requires(Pred::ge(d("D"), Dim::c(0)));
    let out = if composed {
        composition(&mut b, [q, k, v, mask], full("M", "T"))
    } else {
        b.op(Op::Sdpa {
            q,
            k,
            v,
            mask,
            scale: Scalar::Float(SCALE),
        })
    };
    b.finish(out)
}

/// The first `T` positions along `axis`.
fn slice(axis: usize, x: Value) -> Op {
    Op::Slice {
        axis,
        start: Dim::c(0),
        stop: d("T"),
        step: 1,
        x,
    }
}

/// `matmul(softmax(matmul(q, k) · scale + mask), v)`, as a library writes it.
fn composition(b: &mut FnBuilder, [q, k, v, mask]: [Value; 4], scores: Vec<Dim>) -> Value {
    let s = b.op(Op::Matmul(q, k));
    let scaled = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: s,
        s: Scalar::Float(SCALE),
        scalar_left: false,
    });
    let x = b.op(Op::Binary(BinaryOp::Add, scaled, mask));
    let p = softmax_rows(b, x, scores);
    b.op(Op::Matmul(p, v))
}

/// Arguments of `form` for `(B, H, M, D, T, E)` (and a cache of `T + 3`
/// positions), random, with NaN, ±∞ and −1e30 among them when `specials`.
fn args(
    form: Form,
    [bs, h, m, dd, t, e]: [usize; 6],
    rng: &mut Rng,
    specials: bool,
    kv: Dtype,
) -> Vec<Arg> {
    let mut r = |dt, shape: &[usize]| -> Arg { random(rng, dt, shape, specials).into() };
    let f = Dtype::F32;
    match form {
        Form::Cache => {
            let c = t + 3;
            vec![
                r(f, &[bs, h, m, dd]),
                r(kv, &[bs, h, dd, c]),
                r(kv, &[bs, h, c, e]),
                r(f, &[m, t]),
            ]
        }
        Form::Encoder => vec![
            r(f, &[bs, m, h, dd]),
            r(f, &[bs, t, h, dd]),
            r(f, &[bs, t, h, e]),
            r(f, &[bs, t]),
        ],
    }
}

/// The forms and cache dtypes tested: an encoder, and caches of each
/// dtype the op reads.
const FORMS: [(Form, Dtype); 4] = [
    (Form::Cache, Dtype::F32),
    (Form::Cache, Dtype::F16),
    (Form::Cache, Dtype::BF16),
    (Form::Encoder, Dtype::F32),
];

const SHAPES: [[usize; 6]; 7] = [
    [1, 3, 3, 64, 41, 64],
    [2, 2, 5, 16, 17, 33],
    [1, 1, 1, 1, 1, 1],
    [2, 3, 9, 7, 70, 5],
    [1, 2, 4, 0, 6, 3],
    [0, 2, 3, 4, 5, 6],
    [2, 1, 20, 32, 20, 32],
];

/// Deterministic mode with exact `exp` equals the interpreter bit for bit
/// (NaNs included: the op's NaN is a matmul's, canonical), specials included; and the interpreter's
/// `sdpa` is its composition, bit for bit.
#[test]
fn sdpa_is_its_composition_bit_for_bit() {
    let mut rng = Rng(0x5d9a);
    for (form, kv) in FORMS {
        let (f, g) = (attention_fn(form, false, kv), attention_fn(form, true, kv));
        for shape in SHAPES {
            for specials in [false, true] {
                let a = args(form, shape, &mut rng, specials, kv);
                let what = format!("{form:?} {kv} {shape:?} specials={specials}");
                let want = interp(&f, &a).unwrap();
                assert_bits(
                    &format!("{what}: interpreter ≡ composition"),
                    &interp(&g, &a).unwrap(),
                    &want,
                    false,
                );
                assert_bits(
                    &format!("{what}: deterministic JIT"),
                    &jit(&f, &a, DET_EXACT),
                    &want,
                    false,
                );
            }
        }
    }
}

/// Every other mode (FMA chains; the fast `exp`; the pool; the
/// shape-generic kernels) within the tolerance docs/syntax.md §12f states
/// (the products' and the fast `exp`'s), worked out per output element: `(2δ + 2ε + (T + 4)·u) · Σⱼ pⱼ·|vⱼ| + γ_T · Σⱼ
/// pⱼ·|vⱼ|` where `δ` bounds the row's score errors (`γ_D · scale ·
/// Σ_d |q_d·k_d|` plus the rounding of the scale and the mask's sum),
/// `ε` is the fast `exp`'s relative bound and `u` the unit roundoff.
#[test]
fn sdpa_every_mode_within_its_bound() {
    let mut rng = Rng(0xa77e);
    let generic = generic_jit();
    let modes = [
        ("exact", EXACT),
        ("deterministic", DET),
        ("default", JitOptions::default()),
        (
            "default on the pool",
            JitOptions {
                threads: 0,
                ..JitOptions::default()
            },
        ),
    ];
    for (form, kv) in FORMS {
        let f = attention_fn(form, false, kv);
        for shape in SHAPES {
            let a = args(form, shape, &mut rng, false, kv);
            let bound = bound(form, shape, &a);
            let want = interp(&f, &a).unwrap();
            let what = format!("{form:?} {kv} {shape:?}");
            for (name, opts) in modes {
                let got = jit(&f, &a, opts);
                assert_within(&format!("{what} {name}"), &got, &want, &bound);
            }
            let g = generic.call(&f, &a, &|_| None).unwrap();
            assert_within(&format!("{what} generic"), &g, &want, &bound);
        }
    }
}

fn assert_within(what: &str, got: &Tensor, want: &Tensor, bound: &[f64]) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (
        got.as_slice::<f32>().unwrap(),
        want.as_slice::<f32>().unwrap(),
    );
    for (i, ((x, y), b)) in g.iter().zip(w).zip(bound).enumerate() {
        let err = (*x as f64 - *y as f64).abs();
        assert!(
            err <= *b,
            "{what}: element {i}: {x} vs interpreter {y}, error {err:e} over the bound {b:e}"
        );
    }
}

/// The bound of each output element (twice the stated one: both the JIT's
/// and the interpreter's results are within it of the exact value).
fn bound(form: Form, [bs, h, m, dd, t, e]: [usize; 6], a: &[Arg]) -> Vec<f64> {
    // A narrow cache's values widened (exactly).
    let data: Vec<Vec<f32>> = a
        .iter()
        .map(|x| match x {
            Arg::Tensor(t) => t.cast(Dtype::F32).unwrap().to_vec::<f32>().unwrap(),
            _ => unreachable!("tensor arguments"),
        })
        .collect();
    let u = f64::from(f32::EPSILON) / 2.0;
    let gamma = |n: usize| n as f64 * u / (1.0 - n as f64 * u);
    let eps = f64::from(tc_llvm::TOLERANCE.0) + u;
    let c = t + 3;
    // Element readers per form, `[b, h, row, col]` of each operand.
    let qv = |b: usize, hh: usize, i: usize, x: usize| match form {
        Form::Cache => data[0][((b * h + hh) * m + i) * dd + x],
        Form::Encoder => data[0][((b * m + i) * h + hh) * dd + x],
    };
    let kv = |b: usize, hh: usize, x: usize, j: usize| match form {
        Form::Cache => data[1][((b * h + hh) * dd + x) * c + j],
        Form::Encoder => data[1][((b * t + j) * h + hh) * dd + x],
    };
    let vv = |b: usize, hh: usize, j: usize, y: usize| match form {
        Form::Cache => data[2][((b * h + hh) * c + j) * e + y],
        Form::Encoder => data[2][((b * t + j) * h + hh) * e + y],
    };
    let mk = |b: usize, i: usize, j: usize| match form {
        Form::Cache => data[3][i * t + j],
        Form::Encoder => data[3][b * t + j],
    };
    let mut out = Vec::with_capacity(bs * h * m * e);
    for b in 0..bs {
        for hh in 0..h {
            for i in 0..m {
                // Exact scores in f64, their error bound, then the
                // probabilities.
                let mut xs = vec![0f64; t];
                let mut delta = 0f64;
                for (j, x) in xs.iter_mut().enumerate() {
                    let (mut s, mut abs) = (0f64, 0f64);
                    for z in 0..dd {
                        let p = f64::from(qv(b, hh, i, z)) * f64::from(kv(b, hh, z, j));
                        s += p;
                        abs += p.abs();
                    }
                    *x = s * SCALE + f64::from(mk(b, i, j));
                    let err = gamma(dd) * abs * SCALE + 2.0 * u * (s.abs() * SCALE + x.abs());
                    delta = delta.max(err);
                }
                let top = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let es: Vec<f64> = xs.iter().map(|x| (x - top).exp()).collect();
                let sum: f64 = es.iter().sum();
                let rel = 2.0 * delta + 2.0 * eps + (t as f64 + 4.0) * u + gamma(t);
                for y in 0..e {
                    let mag: f64 = (0..t)
                        .map(|j| es[j] / sum * f64::from(vv(b, hh, j, y)).abs())
                        .sum();
                    out.push(2.0 * rel * mag + 1e-30);
                }
            }
        }
    }
    out
}

/// A cache with no position yet is a typed error on both backends (the
/// softmax's `max` has nothing to take), never a read.
#[test]
fn sdpa_over_no_keys_is_a_typed_error() {
    let mut rng = Rng(3);
    for form in [Form::Cache, Form::Encoder] {
        let f = attention_fn(form, false, Dtype::F32);
        let a = args(form, [1, 2, 3, 4, 0, 5], &mut rng, false, Dtype::F32);
        assert!(interp(&f, &a).is_err(), "{form:?}: interpreter");
        let j = jit_with(JitOptions::default());
        assert!(j.call(&f, &a, &|_| None).is_err(), "{form:?}: JIT");
    }
}
