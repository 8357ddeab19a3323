//! Differential edge-value tests (issue 10, item 8): every unary op, every
//! binary op, every cast pair and every reduction, over tensors built from
//! the special bit patterns of each dtype (±0, ±∞, quiet and signalling NaNs
//! with payloads, extreme finite values, subnormals, ±1, rounding ties) and
//! random bit patterns, on the reference interpreter and on every JIT mode.
//!
//! Results are compared on the *storage bits* (the shared `assert_bits`
//! decodes narrow floats first, and decoding quiets a signalling NaN, which
//! would hide exactly the bugs this file is for). Section 2 §3/§5 fix the
//! bits of: every int and Bool result, every cast, every elementwise op on
//! F16/BF16/F8, every F32 elementwise op except the fast transcendentals,
//! and max/min reductions (order-independent). Elsewhere the documented
//! tolerance applies ([`tc_llvm::TOLERANCE`], and the reassociation bound
//! of the crate docs for sum/prod/mean outside deterministic mode).
use crate::util;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, UnaryOp};
use tc_core::Dtype;
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::Tensor;
use util::*;

/// One JIT configuration under test.
struct Mode {
    name: &'static str,
    config: CacheConfig,
}

fn modes() -> Vec<Mode> {
    let cfg = |options: JitOptions, specialize_after: u32| CacheConfig {
        capacity: 8,
        specialize_after,
        options,
    };
    let d = JitOptions::default();
    vec![
        Mode {
            name: "default",
            config: cfg(d, 1),
        },
        Mode {
            name: "deterministic",
            config: cfg(
                JitOptions {
                    deterministic: true,
                    ..d
                },
                1,
            ),
        },
        Mode {
            name: "exact",
            config: cfg(
                JitOptions {
                    fast_math: false,
                    ..d
                },
                1,
            ),
        },
        Mode {
            name: "threads1",
            config: cfg(JitOptions { threads: 1, ..d }, 1),
        },
        // The first call of a σ runs the shape-generic kernel.
        Mode {
            name: "generic",
            config: cfg(d, 2),
        },
    ]
}

/// Run `f` on a fresh cache in `mode`; the JIT must not fall back, and the
/// generic mode must really run the generic kernel.
fn run(mode: &Mode, f: &Function, args: &[Arg]) -> Tensor {
    let j = Jit::new(mode.config);
    let r = j
        .call(f, args, &|_| None)
        .unwrap_or_else(|e| panic!("{}: {} failed: {e}", mode.name, f.sig.name));
    let s = j.stats();
    assert_eq!(s.fallbacks, 0, "fell back: {:?}", j.last_fallback());
    if mode.config.specialize_after > 1 {
        assert_eq!(s.generic_runs, 1, "{}: generic kernel not used", mode.name);
    }
    r
}

// ---- storage bits -----------------------------------------------------------

/// Storage bytes of one element of `dt` (I4: 0, packed).
fn width(dt: Dtype) -> usize {
    (dt.bits() as usize) / 8
}

/// The storage bits of element `i`.
fn raw(t: &Tensor, i: usize) -> u64 {
    let b = t.bytes();
    if t.dtype() == Dtype::I4 {
        return ((b[i / 2] >> (4 * (i % 2))) & 0xF) as u64;
    }
    let w = width(t.dtype());
    let mut v = 0u64;
    for k in 0..w {
        v |= (b[i * w + k] as u64) << (8 * k);
    }
    v
}

/// A tensor of `dt` from raw storage patterns (truncated to the width).
fn from_bits(dt: Dtype, shape: &[usize], bits: &[u64]) -> Tensor {
    let mut bytes = Vec::new();
    if dt == Dtype::I4 {
        bytes.resize(bits.len().div_ceil(2), 0u8);
        for (i, &v) in bits.iter().enumerate() {
            bytes[i / 2] |= ((v & 0xF) as u8) << (4 * (i % 2));
        }
    } else {
        for &v in bits {
            let v = if dt == Dtype::Bool { v & 1 } else { v };
            bytes.extend_from_slice(&v.to_le_bytes()[..width(dt)]);
        }
    }
    Tensor::from_raw(dt, shape, bytes).expect("raw tensor")
}

/// Decoded float value of element `i` (`None` for non-float dtypes).
fn fval(t: &Tensor, i: usize) -> Option<f32> {
    t.get(i).and_then(Elem::as_f32)
}

// ---- special values -----------------------------------------------------------

/// The special storage patterns of `dt`.
fn specials(dt: Dtype) -> Vec<u64> {
    let f32s = |xs: &[f32]| -> Vec<u64> { xs.iter().map(|x| x.to_bits() as u64).collect() };
    match dt {
        Dtype::F32 => {
            let mut v = vec![
                0x0000_0000,
                0x8000_0000,
                0x7F80_0000, // +inf
                0xFF80_0000, // -inf
                0x7FC0_0000, // quiet NaN
                0xFFC0_0001, // negative quiet NaN with payload
                0x7F80_0001, // signalling NaN, payload 1
                0x7FA0_0005, // signalling NaN, high payload bit
                0xFF80_0123, // negative signalling NaN
                0x7F7F_FFFF, // max finite
                0xFF7F_FFFF,
                0x0080_0000, // min normal
                0x0000_0001, // min subnormal
                0x8000_0001,
                0x007F_FFFF, // max subnormal
                0x3F80_1000, // 1 + 2^-11: F16 tie
                0x3F80_3000, // 1 + 3·2^-11: F16 tie, round up
                0x3F80_8000, // BF16 tie
                0x3F81_8000, // BF16 tie, round up
                0x3F88_0000, // F8E4M3 tie
                0x3F90_0000, // F8E5M2 tie
                0x477F_F000, // 65520: F16 overflow tie
                0x3380_0000, // 2^-24: min F16 subnormal
                0x3300_0000, // 2^-25: F16 tie to zero
                0x4F00_0000, // 2^31
                0xDF00_0000, // -2^63
            ];
            v.extend(f32s(&[
                1.0,
                -1.0,
                0.5,
                2.0,
                2.5,
                3.5,
                -2.5,
                0.499_999_97,
                127.5,
                -128.5,
                7.5,
                -8.5,
                464.0,
                61440.0,
                1e30,
                -1e-30,
                100.0,
                -100.0,
                88.8,
                -88.0,
                -104.0,
                4.5,
                -4.5,
                3.9,
            ]));
            v
        }
        Dtype::F16 => vec![
            0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x7C01, 0xFC01, 0x7D55, 0x7FFF, 0x7BFF,
            0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3C01, 0x3800, 0x4000, 0x4100,
            0x5BFF,
        ],
        Dtype::BF16 => vec![
            0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0xFF81, 0x7FA5, 0x7FFF, 0x7F7F,
            0xFF7F, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x3F81, 0x3F00, 0x4000, 0x4220,
        ],
        // Every pattern.
        Dtype::F8E4M3 | Dtype::F8E5M2 => (0..256).collect(),
        Dtype::Bool => vec![0, 1],
        _ => {
            let (lo, hi) = dt.int_range().expect("int");
            let mut v = vec![0, 1, -1, 2, -2, 7, -8, lo, hi, lo + 1, hi - 1, 3, -3];
            v.retain(|x| (lo..=hi).contains(x));
            v.into_iter().map(|x| x as u64).collect()
        }
    }
}

/// `specials(dt)` followed by random bit patterns, `n` in all.
fn pool(rng: &mut Rng, dt: Dtype, n: usize) -> Vec<u64> {
    let mut v = specials(dt);
    while v.len() < n {
        v.push(rng.next());
    }
    v.truncate(n.max(specials(dt).len()));
    v
}

/// A `[rows, 16]` tensor holding `bits` (padded with random patterns).
fn tensor_of(rng: &mut Rng, dt: Dtype, mut bits: Vec<u64>) -> Tensor {
    let rows = bits.len().div_ceil(16).max(1);
    while bits.len() < rows * 16 {
        bits.push(rng.next());
    }
    from_bits(dt, &[rows, 16], &bits)
}

// ---- comparisons ------------------------------------------------------------

/// Storage bits must match.
fn assert_same_bits(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (raw(got, i), raw(want, i));
        assert!(
            g == w,
            "{what}: element {i}: jit bits {g:#x} ({:?}) vs interpreter {w:#x} ({:?})",
            got.get(i),
            want.get(i)
        );
    }
}

/// `|jit − interp| ≤ TOLERANCE` on F32, NaN for NaN, and a zero of the
/// interpreter's sign where both are zero: `−0 == +0` numerically, but
/// `1 / x` tells them apart (±∞), so the tolerance never covers a sign.
fn assert_tolerance(what: &str, got: &Tensor, want: &Tensor) {
    let (r, a) = tc_llvm::TOLERANCE;
    for i in 0..want.numel() {
        let (g, w) = (fval(got, i).unwrap(), fval(want, i).unwrap());
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= r * w.abs() + a;
        assert!(ok, "{what}: element {i}: jit {g:?} vs interpreter {w:?}");
        if g == 0.0 && w == 0.0 {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{what}: element {i}: jit {g:?} vs interpreter {w:?} (sign of zero)"
            );
        }
    }
}

/// The F32 ops that fast mode replaces by polynomials.
fn is_fast_transcendental(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Erf
            | UnaryOp::Gelu
    )
}

#[test]
fn unary_ops_on_edge_values() {
    let mut rng = Rng(0xE1);
    for dt in Dtype::ALL {
        let p = pool(&mut rng, dt, 96);
        let x = tensor_of(&mut rng, dt, p);
        let args: Vec<Arg> = vec![x.into()];
        for op in UnaryOp::ALL {
            if !op.admits(dt) {
                continue;
            }
            let f = unary_fn(op, dt);
            let want = interp(&f, &args).unwrap();
            for m in modes() {
                let got = run(&m, &f, &args);
                let what = format!("{} at {dt} ({})", op.name(), m.name);
                if dt == Dtype::F32 && m.config.options.fast_math && is_fast_transcendental(op) {
                    assert_tolerance(&what, &got, &want);
                } else {
                    assert_same_bits(&what, &got, &want);
                }
            }
        }
    }
}

fn binary_fn(op: BinaryOp, dt: Dtype) -> Function {
    let mut b = builder("b");
    let x = b.param("x", tt(dt, &["A", "B"]));
    let y = b.param("y", tt(dt, &["A", "B"]));
    b.returns(tt(op.result_dtype(dt), &["A", "B"]));
    let r = b.op(Op::Binary(op, x, y));
    b.finish(r)
}

/// Every ordered pair of specials, then random pairs.
fn pairs(rng: &mut Rng, dt: Dtype) -> (Tensor, Tensor) {
    let mut s = specials(dt);
    if s.len() > 48 {
        // F8: every pattern is a special; pair a spread of 48 of them.
        s = (0..48).map(|k| s[(k * 37 + 5) % s.len()]).collect();
        s.extend([0x00, 0x80, 0x7F, 0xFF, 0x7C, 0x7D, 0xFD, 0x7E, 0xFE]);
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &p in &s {
        for &q in &s {
            a.push(p);
            b.push(q);
        }
    }
    for _ in 0..64 {
        a.push(rng.next());
        b.push(rng.next());
    }
    let n = a.len().div_ceil(16) * 16;
    while a.len() < n {
        a.push(rng.next());
        b.push(rng.next());
    }
    (
        from_bits(dt, &[n / 16, 16], &a),
        from_bits(dt, &[n / 16, 16], &b),
    )
}

#[test]
fn binary_ops_on_edge_values() {
    let mut rng = Rng(0xE2);
    for dt in Dtype::ALL {
        let (x, y) = pairs(&mut rng, dt);
        let args: Vec<Arg> = vec![x.into(), y.into()];
        for op in BinaryOp::ALL {
            if !op.admits(dt) {
                continue;
            }
            let f = binary_fn(op, dt);
            let want = interp(&f, &args).unwrap();
            for m in modes() {
                let got = run(&m, &f, &args);
                assert_same_bits(&format!("{} at {dt} ({})", op.name(), m.name), &got, &want);
            }
        }
    }
}

fn cast_fn(from: Dtype, to: Dtype) -> Function {
    let mut b = builder("c");
    let x = b.param("x", tt(from, &["A", "B"]));
    b.returns(tt(to, &["A", "B"]));
    let r = b.op(Op::Cast(to, x));
    b.finish(r)
}

/// `cast[to](cast[mid](x))`: a round trip through a wider type must not be
/// folded into a pass-through of a signalling NaN.
fn round_trip_fn(from: Dtype, mid: Dtype) -> Function {
    let mut b = builder("rt");
    let x = b.param("x", tt(from, &["A", "B"]));
    b.returns(tt(from, &["A", "B"]));
    let w = b.op(Op::Cast(mid, x));
    let r = b.op(Op::Cast(from, w));
    b.finish(r)
}

#[test]
fn casts_on_edge_values() {
    let mut rng = Rng(0xE3);
    for from in Dtype::ALL {
        let p = pool(&mut rng, from, 80);
        let x = tensor_of(&mut rng, from, p);
        let args: Vec<Arg> = vec![x.into()];
        for to in Dtype::ALL {
            let mut fs = vec![(format!("cast {from}→{to}"), cast_fn(from, to))];
            if from.is_float() && to.is_float() {
                fs.push((format!("cast {from}→{to}→{from}"), round_trip_fn(from, to)));
            }
            for (what, f) in fs {
                let want = interp(&f, &args).unwrap();
                for m in modes() {
                    let got = run(&m, &f, &args);
                    assert_same_bits(&format!("{what} ({})", m.name), &got, &want);
                }
            }
        }
    }
}

/// `x · 1`, `x + (−0)`, `x / 1`, `max(x, x)`: identities on every non-NaN
/// value, which LLVM folds into a pass-through unless the kernel quiets.
#[test]
fn scalar_identities_quiet_signalling_nans() {
    use tc_core::ir::Scalar;
    let mut rng = Rng(0xE4);
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        let x = tensor_of(&mut rng, dt, specials(dt));
        let args: Vec<Arg> = vec![x.into()];
        for (op, s) in [
            (BinaryOp::Mul, 1.0),
            (BinaryOp::Add, -0.0),
            (BinaryOp::Sub, 0.0),
            (BinaryOp::Div, 1.0),
            (BinaryOp::Max, f64::NEG_INFINITY),
            (BinaryOp::Min, f64::INFINITY),
        ] {
            let mut b = builder("s");
            let xv = b.param("x", tt(dt, &["A", "B"]));
            b.returns(tt(dt, &["A", "B"]));
            let r = b.op(Op::ScalarBinary {
                op,
                x: xv,
                s: Scalar::Float(s),
                scalar_left: false,
            });
            let f = b.finish(r);
            let want = interp(&f, &args).unwrap();
            for m in modes() {
                let got = run(&m, &f, &args);
                let what = format!("{}(x, {s}) at {dt} ({})", op.name(), m.name);
                assert_same_bits(&what, &got, &want);
            }
            // The interpreter itself follows §3: a NaN result is quiet.
            for i in 0..want.numel() {
                if let Some(v) = fval(&want, i) {
                    assert!(!v.is_nan() || v.to_bits() & 0x0040_0000 != 0, "{dt}: {v:?}");
                }
            }
        }
    }
}

// ---- reductions -------------------------------------------------------------

fn reduce_fn(op: ReduceOp, dt: Dtype, axis: usize) -> Function {
    let mut b = builder("r");
    let x = b.param("x", tt(dt, &["A", "B"]));
    let out = if axis == 1 { "A" } else { "B" };
    b.returns(tt(dt, &[out]));
    let r = b.op(Op::Reduce {
        op,
        axes: vec![axis],
        keepdims: false,
        x,
    });
    b.finish(r)
}

fn argreduce_fn(max: bool, dt: Dtype, axis: usize) -> Function {
    let mut b = builder("ar");
    let x = b.param("x", tt(dt, &["A", "B"]));
    let out = if axis == 1 { "A" } else { "B" };
    b.returns(tt(Dtype::I64, &[out]));
    let r = b.op(Op::ArgReduce {
        max,
        axis,
        keepdims: false,
        x,
    });
    b.finish(r)
}

/// `[ROWS, COLS]` reduction operands: rows of signed zeros (the `[-0, 0, -0, 0]`
/// of the issue), zeros with one NaN, specials in rotation, random bits.
const ROWS: usize = 24;
const COLS: usize = 64;

fn reduction_operand(rng: &mut Rng, dt: Dtype) -> Tensor {
    let s = specials(dt);
    let zero = 0u64;
    let nzero: u64 = match dt {
        Dtype::F32 => 0x8000_0000,
        Dtype::F16 | Dtype::BF16 => 0x8000,
        Dtype::F8E4M3 | Dtype::F8E5M2 => 0x80,
        _ => 0,
    };
    let mut bits = Vec::with_capacity(ROWS * COLS);
    for r in 0..ROWS {
        for c in 0..COLS {
            let v = match r {
                0 => [nzero, zero][c % 2],
                1 => [zero, nzero][c % 2],
                2 => nzero,
                3 => {
                    if rng.next().is_multiple_of(2) {
                        zero
                    } else {
                        nzero
                    }
                }
                4 if c == 37 => s[6 % s.len()], // a (signalling) NaN among zeros
                4 => [nzero, zero][c % 2],
                5..=15 => s[(r * 7 + c * 5) % s.len()],
                _ => rng.next(),
            };
            bits.push(v);
        }
    }
    from_bits(dt, &[ROWS, COLS], &bits)
}

/// The rows (`axis` = 1) or columns (`axis` = 0) of `x`, decoded.
fn lanes(x: &Tensor, axis: usize) -> Vec<Vec<f64>> {
    let (r, c) = (x.shape()[0], x.shape()[1]);
    let at = |i: usize, j: usize| fval(x, i * c + j).unwrap() as f64;
    if axis == 1 {
        (0..r).map(|i| (0..c).map(|j| at(i, j)).collect()).collect()
    } else {
        (0..c).map(|j| (0..r).map(|i| at(i, j)).collect()).collect()
    }
}

/// What a reassociated float fold of `terms` may return: `None` when the
/// order decides between overflow and a finite result (Section 4 §6),
/// otherwise the allowed absolute error (`Some(0.0)`: exact class only, a
/// NaN, an infinity or a signed zero, checked by the caller).
fn fold_bound(op: ReduceOp, terms: &[f64]) -> Option<f64> {
    let n = terms.len() as f64;
    let u = 2f64.powi(-24);
    let finite: Vec<f64> = terms.iter().copied().filter(|t| t.is_finite()).collect();
    let s: f64 = finite.iter().map(|t| t.abs()).sum();
    if s >= 1e38 {
        return None;
    }
    let b = 2.0 * (n + 2.0) * u * s;
    Some(if op == ReduceOp::Mean { b / n } else { b })
}

/// Storage precision of a float dtype: (mantissa bits, smallest subnormal).
fn precision(dt: Dtype) -> (i32, f64) {
    match dt {
        Dtype::F16 => (10, 2f64.powi(-24)),
        Dtype::BF16 => (7, 2f64.powi(-133)),
        Dtype::F8E4M3 => (3, 2f64.powi(-9)),
        Dtype::F8E5M2 => (2, 2f64.powi(-16)),
        _ => (23, 2f64.powi(-149)),
    }
}

/// A reassociated sum/mean against the interpreter's sequential one.
fn assert_fold(what: &str, op: ReduceOp, x: &Tensor, axis: usize, got: &Tensor, want: &Tensor) {
    let dt = x.dtype();
    let (mb, sub) = precision(dt);
    for (i, terms) in lanes(x, axis).iter().enumerate() {
        let (g, w) = (fval(got, i).unwrap(), fval(want, i).unwrap());
        let Some(bound) = fold_bound(op, terms) else {
            continue;
        };
        let ok = if w.is_nan() || w.is_infinite() || w == 0.0 {
            raw(got, i) == raw(want, i) || (g.is_nan() && w.is_nan())
        } else {
            // One more rounding into a narrow dtype on each side.
            let slack = if dt == Dtype::F32 {
                0.0
            } else {
                2.0 * (w.abs() as f64 * 2f64.powi(-mb) + sub)
            };
            ((g as f64) - (w as f64)).abs() <= bound + slack
        };
        assert!(ok, "{what}: lane {i}: jit {g:?} vs interpreter {w:?}");
    }
}

#[test]
fn reductions_on_edge_values() {
    let mut rng = Rng(0xE5);
    for dt in Dtype::ALL {
        let x = reduction_operand(&mut rng, dt);
        let args: Vec<Arg> = vec![x.clone().into()];
        for axis in [1, 0] {
            let mut fs: Vec<(String, Option<ReduceOp>, Function)> = Vec::new();
            for op in ReduceOp::ALL {
                if op.admits(dt) {
                    fs.push((op.name().to_string(), Some(op), reduce_fn(op, dt, axis)));
                }
            }
            if !dt.is_bool() {
                fs.push(("argmax".into(), None, argreduce_fn(true, dt, axis)));
                fs.push(("argmin".into(), None, argreduce_fn(false, dt, axis)));
            }
            for (name, op, f) in fs {
                let want = interp(&f, &args).unwrap();
                for m in modes() {
                    let got = run(&m, &f, &args);
                    let what = format!("{name} over axis {axis} at {dt} ({})", m.name);
                    // Products keep the interpreter's order in every mode
                    // (crate docs): bit for bit, overflow and `inf · 0` included.
                    let folds = matches!(op, Some(ReduceOp::Sum | ReduceOp::Mean));
                    if dt.is_float() && folds && !m.config.options.deterministic {
                        assert_fold(&what, op.unwrap(), &x, axis, &got, &want);
                    } else {
                        assert_same_bits(&what, &got, &want);
                    }
                }
            }
        }
    }
}

/// Products keep the interpreter's order in every mode. A zero early in a
/// row of large terms: the in-order fold is 0 from there on, while
/// reordered partial products overflow to inf and meet the zero as
/// inf · 0 = NaN (the long fuzz run's seed 51539620640: `prod` over
/// `sqrt(iota)`). Lengths around the vector widths, the zero at several
/// places, both axes.
#[test]
fn products_that_overflow_around_a_zero_keep_their_order() {
    for dt in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for len in [17usize, 33, 64, 67] {
            let mut vals = Vec::new();
            for zero_at in [0, 1, 2, len / 2, len - 1] {
                for i in 0..len {
                    vals.push(if i == zero_at { 0.0 } else { 45.0 + i as f32 });
                }
            }
            let rows = vals.len() / len;
            let elems = |v: &[f32]| v.iter().map(|&x| Elem::F(x)).collect::<Vec<_>>();
            let x = Tensor::from_elems(dt, &[rows, len], &elems(&vals)).unwrap();
            let t = transpose(&vals, rows, len);
            let xt = Tensor::from_elems(dt, &[len, rows], &elems(&t)).unwrap();
            for (axis, x) in [(1, x), (0, xt)] {
                let f = reduce_fn(ReduceOp::Prod, dt, axis);
                let args: Vec<Arg> = vec![x.into()];
                let want = interp(&f, &args).unwrap();
                for m in modes() {
                    let got = run(&m, &f, &args);
                    let what = format!("prod over axis {axis} of {len} at {dt} ({})", m.name);
                    assert_same_bits(&what, &got, &want);
                }
            }
        }
    }
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| v[r * cols + c]))
        .collect()
}

/// A softmax-shaped row group: the last-axis max feeds an elementwise
/// member of the same row kernel (the row-fused path).
#[test]
fn row_fused_max_is_exact() {
    use tc_core::Dim;
    let mut rng = Rng(0xE6);
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        let x = reduction_operand(&mut rng, dt);
        let mut b = builder("sm");
        let xv = b.param("x", tt(dt, &["A", "B"]));
        b.returns(tt(dt, &["A", "B"]));
        let m = b.op(Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![1],
            keepdims: true,
            x: xv,
        });
        let mb = b.op(Op::Broadcast(vec![Dim::var("A"), Dim::var("B")], m));
        let d = b.op(Op::Binary(BinaryOp::Sub, xv, mb));
        let r = b.op(Op::Binary(BinaryOp::Max, d, mb));
        let f = b.finish(r);
        let args: Vec<Arg> = vec![x.into()];
        let want = interp(&f, &args).unwrap();
        for m in modes() {
            let got = run(&m, &f, &args);
            assert_same_bits(&format!("row group at {dt} ({})", m.name), &got, &want);
        }
    }
}

/// The spec's fixed points, checked on the interpreter and every mode.
#[test]
fn maximum_minimum_signed_zero_and_nan() {
    let z = [-0.0f32, 0.0, -0.0, 0.0];
    let x = Tensor::from_vec(&[1, 4], z.to_vec()).unwrap();
    let args: Vec<Arg> = vec![x.into()];
    for (op, want) in [(ReduceOp::Max, 0.0f32), (ReduceOp::Min, -0.0f32)] {
        let f = reduce_fn(op, Dtype::F32, 1);
        let i = interp(&f, &args).unwrap();
        assert_eq!(
            fval(&i, 0).unwrap().to_bits(),
            want.to_bits(),
            "{op:?} interp"
        );
        for m in modes() {
            let g = run(&m, &f, &args);
            assert_eq!(
                fval(&g, 0).unwrap().to_bits(),
                want.to_bits(),
                "{op:?} {}",
                m.name
            );
        }
    }
    // relu(−0) = maximum(−0, +0) = +0; relu(sNaN) is the quieted NaN.
    let x = from_bits(Dtype::F16, &[1, 2], &[0x8000, 0x7C01]);
    let args: Vec<Arg> = vec![x.into()];
    let f = unary_fn(UnaryOp::Relu, Dtype::F16);
    for got in
        std::iter::once(interp(&f, &args).unwrap()).chain(modes().iter().map(|m| run(m, &f, &args)))
    {
        assert_eq!((raw(&got, 0), raw(&got, 1)), (0x0000, 0x7E01));
    }
}

/// Fast mode at the edges of its approximations: erf saturates to exactly
/// ±1, exp reaches the subnormal range instead of flushing to zero.
#[test]
fn fast_approximations_at_their_edges() {
    let xs = vec![
        f32::INFINITY,
        f32::NEG_INFINITY,
        4.0,
        -4.0,
        10.0,
        -100.0,
        -87.5,
        -95.0,
        -103.0,
        -103.9,
        -110.0,
        88.7,
        f32::from_bits(1),
        -f32::from_bits(1),
    ];
    let n = xs.len();
    let x = Tensor::from_vec(&[1, n], xs.clone()).unwrap();
    let args: Vec<Arg> = vec![x.into()];
    let fast = Mode {
        name: "fast",
        config: CacheConfig::default(),
    };
    for op in [UnaryOp::Erf, UnaryOp::Exp, UnaryOp::Gelu, UnaryOp::Sigmoid] {
        let f = unary_fn(op, Dtype::F32);
        let want = interp(&f, &args).unwrap();
        let got = run(&fast, &f, &args);
        assert_tolerance(&format!("{} fast edges", op.name()), &got, &want);
        for (i, &xi) in xs.iter().enumerate() {
            let (g, w) = (fval(&got, i).unwrap(), fval(&want, i).unwrap());
            if op == UnaryOp::Erf && xi.abs() >= 4.0 {
                assert_eq!(g.to_bits(), w.to_bits(), "erf({xi}) = {g:?}");
            }
            if op == UnaryOp::Exp && w != 0.0 && w < f32::MIN_POSITIVE {
                // Subnormal results: within two units of the last place.
                let d = (g.to_bits() as i64 - w.to_bits() as i64).abs();
                assert!(d <= 2, "exp({xi}) = {g:?}, want {w:?}");
            }
        }
    }
}

/// Signed zeros and values near zero through every float unary op, in
/// every mode (fast math on and off): the result has the interpreter's sign
/// wherever the interpreter's is not a NaN (an odd function such as `tanh`,
/// `erf`, `gelu` keeps the sign of its argument, so `1 / f(−0)` is −∞),
/// a ±0 argument gives exactly the interpreter's bits (every op is exact
/// there), and the rest is within the op's tolerance. A fast polynomial
/// `x + x·p(x²)` turns −0 into +0 unless its sign is restored.
#[test]
fn signed_zeros_and_tiny_values_keep_their_sign() {
    let mut xs = vec![0.0f32, -0.0];
    for m in [
        f32::from_bits(1),
        f32::from_bits(0x007F_FFFF),
        f32::MIN_POSITIVE,
        1e-30,
        1e-20,
        1e-10,
        1e-7,
        1e-4,
        0.01,
    ] {
        xs.extend([m, -m]);
    }
    let n = xs.len();
    let x = Tensor::from_vec(&[1, n], xs.clone()).unwrap();
    let args: Vec<Arg> = vec![x.into()];
    for op in UnaryOp::ALL {
        if !op.admits(Dtype::F32) {
            continue;
        }
        let f = unary_fn(op, Dtype::F32);
        let want = interp(&f, &args).unwrap();
        for m in modes() {
            let got = run(&m, &f, &args);
            let what = format!("{} ({})", op.name(), m.name);
            for (i, &xi) in xs.iter().enumerate() {
                let (g, w) = (fval(&got, i).unwrap(), fval(&want, i).unwrap());
                if w.is_nan() {
                    assert!(g.is_nan(), "{what}({xi:e}) = {g:e}, interpreter NaN");
                    continue;
                }
                assert_eq!(
                    g.is_sign_negative(),
                    w.is_sign_negative(),
                    "{what}({xi:e}) = {g:e}, interpreter {w:e}: the sign differs"
                );
                if xi == 0.0 {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "{what}({xi:e}) = {g:e}, interpreter {w:e}"
                    );
                }
            }
            if m.config.options.fast_math && is_fast_transcendental(op) {
                assert_tolerance(&what, &got, &want);
            } else {
                assert_same_bits(&what, &got, &want);
            }
        }
    }
}

/// The error bounds stated in the doc comments of the fast approximations
/// (`codegen.rs`): `|jit − interp| ≤ rel·|interp| + abs` over a dense sweep
/// of every binade that matters, tails and subnormals included.
#[test]
fn fast_approximation_error_bounds() {
    let mut xs: Vec<f32> = (0..80_000)
        .map(|i| (i as f32 - 40_000.0) * 0.0028)
        .collect();
    for e in -149..=7 {
        let m = 2f32.powi(e);
        xs.extend([m, -m, m * 1.37, -m * 1.37]);
    }
    let n = xs.len();
    let x = Tensor::from_vec(&[1, n], xs.clone()).unwrap();
    let args: Vec<Arg> = vec![x.into()];
    let fast = Mode {
        name: "fast",
        config: CacheConfig::default(),
    };
    let tiny = 2f32.powi(-148);
    for (op, rel, abs) in [
        (UnaryOp::Exp, 2.4e-7, tiny),
        (UnaryOp::Log, 2.4e-7, 1e-7),
        (UnaryOp::Tanh, 2.4e-7, 3e-7),
        (UnaryOp::Sigmoid, 3.6e-7, tiny),
        (UnaryOp::Erf, 2.4e-7, 1e-7),
        (UnaryOp::Gelu, 4.8e-7, 1e-6),
    ] {
        let f = unary_fn(op, Dtype::F32);
        let want = interp(&f, &args).unwrap();
        let got = run(&fast, &f, &args);
        let (mut worst_rel, mut worst_abs) = (0f64, 0f64);
        for (i, &xi) in xs.iter().enumerate() {
            let (g, w) = (fval(&got, i).unwrap(), fval(&want, i).unwrap());
            if (g.is_nan() && w.is_nan()) || g == w {
                continue;
            }
            let d = (g as f64 - w as f64).abs();
            worst_abs = worst_abs.max(d);
            worst_rel = worst_rel.max(d / (w as f64).abs());
            assert!(
                d <= rel * (w as f64).abs() + abs as f64,
                "{}({xi}) = {g:?}, interpreter {w:?}: outside {rel} rel + {abs} abs",
                op.name()
            );
        }
        eprintln!(
            "{}: worst abs {worst_abs:e}, worst rel {worst_rel:e}",
            op.name()
        );
    }
}

// ---- stores --------------------------------------------------------------

/// Every bit pattern of a float dtype (16-bit ones sampled every 7th).
fn every_pattern(dt: Dtype) -> Tensor {
    let bytes: Vec<u8> = match dt.storage_bytes(1) {
        1 => (0..=255u8).collect(),
        2 => (0..65536u32)
            .step_by(7)
            .flat_map(|b| (b as u16).to_le_bytes())
            .collect(),
        _ => specials(dt)
            .into_iter()
            .flat_map(|b| (b as u32).to_le_bytes())
            .collect(),
    };
    let n = bytes.len() / dt.storage_bytes(1);
    Tensor::from_raw(dt, &[n, 1], bytes).unwrap()
}

/// Storing a value is exact, in both backends: data movement keeps every
/// non-NaN stored value, F8E5M2's ±inf included (the §5 cast saturates
/// ±inf, but a transpose is no cast), and a fused consumer reads what a
/// materialised one reads back. Found by the fuzzer (seed 4295968404):
/// `pow(select(c, x, 0), 3.5)` on an F8E5M2 −inf gave NaN in the
/// interpreter (which stored the select's −inf as −57344) and +57344 in
/// the JIT (which fused the select).
#[test]
fn stores_are_exact_and_fusion_does_not_change_values() {
    use tc_core::ir::Scalar;
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        let x = every_pattern(dt);
        let args: Vec<Arg> = vec![x.clone().into()];
        let mut b = builder("t");
        let xv = b.param("x", tt(dt, &["A", "B"]));
        b.returns(tt(dt, &["B", "A"]));
        let t = b.op(Op::Transpose(vec![1, 0], xv));
        let moved = interp(&b.finish(t), &args).unwrap();
        for i in 0..x.numel() {
            let (a, m) = (fval(&x, i).unwrap(), fval(&moved, i).unwrap());
            if !a.is_nan() {
                assert_eq!(a.to_bits(), m.to_bits(), "{dt}: transpose changed {a}");
            }
        }
        let mut b = builder("p");
        let xv = b.param("x", tt(dt, &["A", "B"]));
        b.returns(tt(dt, &["A", "B"]));
        let c = b.op(Op::Cast(Dtype::Bool, xv));
        let dims = vec![tc_core::Dim::var("A"), tc_core::Dim::var("B")];
        let z = b.op(Op::Fill(dt, dims, Scalar::Float(0.0)));
        let sel = b.op(Op::Select(c, xv, z));
        let r = b.op(Op::ScalarBinary {
            op: BinaryOp::Pow,
            x: sel,
            s: Scalar::Float(3.687387466430664),
            scalar_left: false,
        });
        let f = b.finish(r);
        let want = interp(&f, &args).unwrap();
        for m in modes() {
            let got = run(&m, &f, &args);
            assert_same_bits(&format!("pow(select) at {dt} ({})", m.name), &got, &want);
        }
    }
}

/// max/min reductions return a dtype value unrounded, infinities included:
/// F8E5M2 stores ±inf, which the §5 cast (and so a rounding step) would
/// saturate to ±57344 (found by the long fuzz run, seed 17179870744 of the
/// generator of 2026-12-01: `reduce.max` over one F8E5M2 `+inf`). Lanes hold
/// no NaN, so the infinity decides the result.
#[test]
fn max_and_min_reductions_keep_infinities() {
    let bits = |dt: Dtype| -> Option<(u64, u64, u64)> {
        // (+inf, −inf, 1.0)
        Some(match dt {
            Dtype::F32 => (0x7F80_0000, 0xFF80_0000, 0x3F80_0000),
            Dtype::F16 => (0x7C00, 0xFC00, 0x3C00),
            Dtype::BF16 => (0x7F80, 0xFF80, 0x3F80),
            Dtype::F8E5M2 => (0x7C, 0xFC, 0x3C),
            // No infinities: its largest finite values instead.
            Dtype::F8E4M3 => (0x7E, 0xFE, 0x38),
            _ => return None,
        })
    };
    for dt in Dtype::ALL {
        let Some((pinf, ninf, one)) = bits(dt) else {
            continue;
        };
        // Wide enough for the row and column (blocked) kernel forms too.
        let mut wide = vec![one; 16 * 40];
        wide[3 * 40 + 7] = pinf;
        wide[5 * 40 + 9] = ninf;
        let cases = [
            (vec![2, 3], vec![pinf, one, ninf, one, pinf, one]),
            (vec![1, 1], vec![pinf]),
            (vec![1, 1], vec![ninf]),
            (vec![16, 40], wide),
        ];
        for (shape, v) in cases {
            let x = from_bits(dt, &shape, &v);
            let args: Vec<Arg> = vec![x.into()];
            for axis in [0, 1] {
                for op in [ReduceOp::Max, ReduceOp::Min] {
                    let f = reduce_fn(op, dt, axis);
                    let want = interp(&f, &args).unwrap();
                    for m in modes() {
                        let what = format!(
                            "{} of {shape:?} over axis {axis} at {dt} ({})",
                            op.name(),
                            m.name
                        );
                        assert_same_bits(&what, &run(&m, &f, &args), &want);
                    }
                }
            }
        }
    }
}

/// Gather copies like every data-movement op: every special value of every
/// dtype (signalling NaNs, signed zeros, infinities, subnormals) comes out
/// as the interpreter's copy does — narrow signalling NaNs quiet, all else
/// bit for bit. (The first JIT gather copied narrow signalling NaNs raw.)
#[test]
fn gather_copies_special_values_like_the_interpreter() {
    for dt in Dtype::ALL {
        let s = specials(dt);
        let table = from_bits(dt, &[s.len()], &s);
        let n = table.numel() as i64;
        let mut b = builder("g");
        let t = b.param("t", tt(dt, &["V"]));
        let ids = b.param("ids", tt(Dtype::I64, &["M"]));
        b.returns(tt(dt, &["M"]));
        let g = b.op(Op::Gather {
            axis: 0,
            table: t,
            ids,
        });
        let f = b.finish(g);
        let order: Vec<i64> = (0..n).rev().chain(0..n).collect();
        let ids = Tensor::from_slice(&[order.len()], &order).unwrap();
        let args: Vec<Arg> = vec![table.into(), ids.into()];
        let want = interp(&f, &args).unwrap();
        for m in modes() {
            assert_same_bits(
                &format!("gather at {dt} ({})", m.name),
                &run(&m, &f, &args),
                &want,
            );
        }
    }
}

/// Transposes of small 16-bit-float tensors, every row count around the
/// vector widths and strides 1–8: LLVM 14 miscompiled the vectorized
/// epilogue of an F16 loop with an interleaved load group (a `[28, 6]` or
/// `[31, 3]` transpose wrote wrong elements; long fuzz run, seed
/// 42949678659), now off (`tc_llvm::host::LLVM_OPTIONS`).
#[test]
fn f16_transposes_of_every_small_shape() {
    let mut rng = Rng(0x7F);
    for dt in [Dtype::F16, Dtype::BF16] {
        for a in [5usize, 17, 24, 28, 31, 40, 44, 63] {
            for k in 1..=8usize {
                let mut b = builder("t");
                let x = b.param("x", tt(dt, &["A", "K"]));
                b.returns(tt(dt, &["K", "A"]));
                let t = b.op(Op::Transpose(vec![1, 0], x));
                let f = b.finish(t);
                let bits: Vec<u64> = (0..a * k).map(|_| rng.next() & 0x3BFF).collect();
                let args: Vec<Arg> = vec![from_bits(dt, &[a, k], &bits).into()];
                let want = interp(&f, &args).unwrap();
                for m in modes() {
                    let what = format!("transpose of [{a}, {k}] at {dt} ({})", m.name);
                    assert_same_bits(&what, &run(&m, &f, &args), &want);
                }
            }
        }
    }
}
