//! Literal scalars must fit the dtype they meet (a check after typing: only
//! then is the dtype of `x` in `x * 300` known).
//!
//! Integer arithmetic wraps at the dtype's width (Section 2 §3), so a literal
//! that does not fit would silently become another number (`full::<i4>(…,
//! 100)` filling with 4). A float literal beyond the dtype's largest finite
//! value would round to infinity (f16, bf16, f32) or saturate (f8, Section 2
//! §5). Both are rejected at the literal instead; a float literal that fits is
//! rounded to the dtype to nearest, ties to even, like a cast (values below the
//! smallest subnormal become ±0).

use tc_core::check::Checked;
use tc_core::ir::{Op, Scalar};
use tc_core::{Dtype, SpanId, Type};

use crate::ctxt::Ctxt;
use crate::spans::SpanTable;

/// The values an integer dtype holds.
pub fn int_range(dt: Dtype) -> Option<(i64, i64)> {
    Some(match dt {
        Dtype::I4 => (-8, 7),
        Dtype::I8 => (i8::MIN.into(), i8::MAX.into()),
        Dtype::I16 => (i16::MIN.into(), i16::MAX.into()),
        Dtype::I32 => (i32::MIN.into(), i32::MAX.into()),
        Dtype::I64 => (i64::MIN, i64::MAX),
        _ => return None,
    })
}

/// The largest finite value of a float dtype and the magnitude from which a
/// value rounds (to nearest, ties to even) beyond it: max + ½ ulp(max). The
/// tie itself rounds up (max has an odd significand), so it is excluded.
pub fn float_limits(dt: Dtype) -> Option<(f64, f64)> {
    let (max, ulp): (f64, f64) = match dt {
        Dtype::F32 => (f32::MAX.into(), 2f64.powi(104)),
        Dtype::F16 => (65504.0, 32.0),
        // (2 − 2⁻⁷) · 2¹²⁷
        Dtype::BF16 => (3.389_531_389_251_535_5e38, 2f64.powi(120)),
        Dtype::F8E4M3 => (448.0, 32.0),
        Dtype::F8E5M2 => (57344.0, 8192.0),
        _ => return None,
    };
    Some((max, max + ulp / 2.0))
}

/// A float for a message: plain when short, else in exponent form.
fn show(x: f64) -> String {
    if x.abs() < 1e7 {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// Why a literal does not fit `dt`, or `None` when it does (or the pair is a
/// class mismatch, which the checker reports).
pub fn out_of_range(s: &Scalar, dt: Dtype) -> Option<String> {
    match *s {
        Scalar::Int(v) => {
            let (lo, hi) = int_range(dt)?;
            (v < lo || v > hi).then(|| {
                format!(
                    "integer literal out of range for {dt} (Section 2 §3): expected an integer in [{lo}, {hi}], found {v}"
                )
            })
        }
        Scalar::Float(x) => {
            let (max, bound) = float_limits(dt)?;
            (x.abs() >= bound).then(|| {
                format!(
                    "float literal out of range for {dt} (Section 2 §5): expected a value that rounds to a finite {dt}, \
                     |x| < {} (the largest {dt} is {}), found {}",
                    show(bound),
                    show(max),
                    show(x)
                )
            })
        }
        Scalar::Bool(_) | Scalar::Param(_) => None,
    }
}

const HELP: &str = "a literal must fit the dtype it meets: integers would wrap at the dtype's width and \
                    floats beyond the largest finite value would become infinity (or saturate in f8)";

/// Every literal of a checked function that does not fit its dtype, as an
/// error in `cx`; whether there was none.
pub fn check(c: &Checked, spans: &SpanTable, cx: &Ctxt) -> bool {
    let before = cx.len();
    for inst in &c.func.body {
        let (s, dt, span): (&Scalar, Dtype, SpanId) = match &inst.op {
            Op::ScalarBinary { x, s, .. } => match c.types.get(*x) {
                // Comparisons too: the scalar meets `x`'s dtype, not the result's.
                Some(Type::Tensor(t)) => (s, t.dtype, inst.arg_span(1)),
                _ => continue,
            },
            Op::Fill(dt, _, s) => (s, *dt, inst.arg_span(0)),
            Op::Pad { x, value, .. } => match c.types.get(*x) {
                Some(Type::Tensor(t)) => (value, t.dtype, inst.arg_span(1)),
                _ => continue,
            },
            _ => continue,
        };
        if let Some(msg) = out_of_range(s, dt) {
            let code = tc_core::diag::codes::LITERAL_RANGE;
            let help = crate::spans::help_line(Some(HELP), code);
            cx.push(spans.error(span, format!("[{code}] {msg}{help}")));
        }
    }
    cx.len() == before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_the_dtype_ranges() {
        let all = [Dtype::I4, Dtype::I8, Dtype::I16, Dtype::I32, Dtype::I64];
        for dt in all {
            let (lo, hi) = int_range(dt).expect("int dtype");
            assert!(out_of_range(&Scalar::Int(lo), dt).is_none());
            assert!(out_of_range(&Scalar::Int(hi), dt).is_none());
            if lo > i64::MIN {
                assert!(out_of_range(&Scalar::Int(lo - 1), dt).is_some());
                assert!(out_of_range(&Scalar::Int(hi + 1), dt).is_some());
            }
        }
        assert!(out_of_range(&Scalar::Int(100), Dtype::I4).is_some());
        assert!(out_of_range(&Scalar::Float(65504.0), Dtype::F16).is_none());
        // Rounds down to 65504; the tie 65520 rounds to infinity.
        assert!(out_of_range(&Scalar::Float(-65519.0), Dtype::F16).is_none());
        assert!(out_of_range(&Scalar::Float(-65520.0), Dtype::F16).is_some());
        assert!(out_of_range(&Scalar::Float(1e6), Dtype::F16).is_some());
        assert!(out_of_range(&Scalar::Float(463.0), Dtype::F8E4M3).is_none());
        assert!(out_of_range(&Scalar::Float(464.0), Dtype::F8E4M3).is_some());
        assert!(out_of_range(&Scalar::Float(1e39), Dtype::F32).is_some());
        // `3.4028235e38` (f32::MAX as Rust prints it) is above f32::MAX as an
        // f64 but rounds to it.
        assert!(out_of_range(&Scalar::Float(3.4028235e38), Dtype::F32).is_none());
        assert!(out_of_range(&Scalar::Float(1e38), Dtype::BF16).is_none());
        // Class mismatches are the checker's.
        assert!(out_of_range(&Scalar::Float(1e9), Dtype::I8).is_none());
    }

    #[test]
    fn float_bounds_agree_with_rounding() {
        // The largest bf16 is the f32 with the low 16 mantissa bits cleared.
        let max = f32::from_bits(0x7F7F_0000);
        assert_eq!(float_limits(Dtype::BF16).map(|l| l.0), Some(f64::from(max)));
        // f32: Rust's own f64 → f32 rounding is the reference.
        let (_, bound) = float_limits(Dtype::F32).expect("float");
        assert!((bound as f32).is_infinite());
        assert!((f64::from(f32::MAX) + (bound - f64::from(f32::MAX)) * 0.999) as f32 == f32::MAX);
    }
}
