//! Bit-exact value semantics of `cast[dt]` (Section 2 §5) and the encodings of
//! the narrow float formats.
//!
//! Every rounding here is done once, directly from the exact source value
//! (an `f32` or an `i64`), to nearest with ties to even. The JIT kernels must
//! reproduce these functions bit for bit.
//!
//! Formats:
//!
//! | dtype  | exp bits | mantissa bits | bias | max finite | overflow          |
//! |--------|----------|---------------|------|------------|-------------------|
//! | F16    | 5        | 10            | 15   | 65504      | ±inf (IEEE)       |
//! | BF16   | 8        | 7             | 127  | ≈3.39e38   | ±inf (IEEE)       |
//! | F8E4M3 | 4        | 3             | 7    | 448        | saturate to ±448  |
//! | F8E5M2 | 5        | 2             | 15   | 57344      | saturate to ±57344|
//!
//! F8E4M3 is the "FN" variant: no infinities, exponent field 1111 is a normal
//! binade except `S.1111.111`, the only NaN. Infinities cast into either F8
//! format saturate to ±max finite (ONNX `Cast`, saturate=1).
//!
//! NaN rule (encode, f32 → narrow): the sign is kept; F16, BF16 and F8E5M2
//! keep the top payload bits of the f32 mantissa and set the quiet bit (the
//! behaviour of `half` and of x86 `vcvtps2ph`); F8E4M3 has only `S.1111.111`.
//! NaN rule (decode, narrow → f32): the sign and payload are kept and the
//! quiet bit is set. Hence encode∘decode is the identity on every bit pattern
//! except signalling NaNs, which come back quiet (same sign and payload), and
//! the F8E5M2 infinities (stored data may hold them), which decode to ±inf and
//! re-encode saturated to ±57344.

use tc_core::Dtype;

use crate::elem::Elem;

/// Parameters of one binary floating-point format (at most 32 bits wide).
#[derive(Clone, Copy)]
struct Format {
    /// Explicit mantissa bits.
    mbits: u32,
    /// Exponent bias.
    bias: i32,
    /// Code of the largest finite magnitude (sign bit clear).
    max_code: u32,
    /// Code of the magnitude produced by overflow (infinity, or `max_code` when saturating).
    overflow_code: u32,
    /// Position of the sign bit.
    sign_shift: u32,
}

const F32_FMT: Format = Format {
    mbits: 23,
    bias: 127,
    max_code: 0x7F7F_FFFF,
    overflow_code: 0x7F80_0000,
    sign_shift: 31,
};
const F16_FMT: Format = Format {
    mbits: 10,
    bias: 15,
    max_code: 0x7BFF,
    overflow_code: 0x7C00,
    sign_shift: 15,
};
const BF16_FMT: Format = Format {
    mbits: 7,
    bias: 127,
    max_code: 0x7F7F,
    overflow_code: 0x7F80,
    sign_shift: 15,
};
const E4M3_FMT: Format = Format {
    mbits: 3,
    bias: 7,
    max_code: 0x7E,
    overflow_code: 0x7E,
    sign_shift: 7,
};
const E5M2_FMT: Format = Format {
    mbits: 2,
    bias: 15,
    max_code: 0x7B,
    overflow_code: 0x7B,
    sign_shift: 7,
};

/// Largest finite F8E4M3 value.
pub const F8E4M3_MAX: f32 = 448.0;
/// Largest finite F8E5M2 value.
pub const F8E5M2_MAX: f32 = 57344.0;

/// Encode the exact value `(-1)^neg · m · 2^e` into `fmt`, rounding once to
/// nearest-even. Returns the code including the sign bit.
fn encode_exact(neg: bool, m: u64, e: i32, fmt: Format) -> u32 {
    let sign = if neg { 1u32 << fmt.sign_shift } else { 0 };
    if m == 0 {
        return sign;
    }
    let mb = fmt.mbits as i32;
    let emin = 1 - fmt.bias; // unbiased exponent of the smallest normal
    let p = 63 - m.leading_zeros() as i32; // msb position of m
    let exp = p + e; // unbiased exponent of the value
    let mut q = exp.max(emin) - mb; // exponent of one unit in the last place
    let shift = q - e;
    let m = m as u128;
    let mut r: u128 = if shift <= 0 {
        // Exact: the value is a multiple of the quantum. -shift <= mb here.
        m << (-shift) as u32
    } else if shift > 100 {
        0 // m < 2^64 < 2^(shift-1): below half a unit
    } else {
        let sh = shift as u32;
        let r = m >> sh;
        let rem = m & ((1u128 << sh) - 1);
        let half = 1u128 << (sh - 1);
        if rem > half || (rem == half && r & 1 == 1) {
            r + 1
        } else {
            r
        }
    };
    if r == 0 {
        return sign;
    }
    let implicit = 1u128 << fmt.mbits;
    if r < implicit {
        // Subnormal (q == emin - mb): biased exponent 0.
        return sign | r as u32;
    }
    if r >= implicit << 1 {
        // Rounding carried into the next binade (r == 2^(mbits+1)).
        r >>= 1;
        q += 1;
    }
    let biased = (q + mb + fmt.bias) as i64;
    let code = (biased << fmt.mbits) | (r - implicit) as i64;
    if code > fmt.max_code as i64 {
        sign | fmt.overflow_code
    } else {
        sign | code as u32
    }
}

/// Split a finite `f32` into `(neg, m, e)` with value `(-1)^neg · m · 2^e`.
fn split_f32(x: f32) -> (bool, u64, i32) {
    let bits = x.to_bits();
    let neg = bits >> 31 == 1;
    let exp = ((bits >> 23) & 0xFF) as i32;
    let man = (bits & 0x7F_FFFF) as u64;
    if exp == 0 {
        (neg, man, -149)
    } else {
        (neg, man | 1 << 23, exp - 150)
    }
}

/// Shared f32 → narrow encoder for the formats with an IEEE NaN/inf exponent
/// field (F16, BF16) or a saturating F8 format.
fn encode_f32(x: f32, fmt: Format, kind: NarrowKind) -> u16 {
    let bits = x.to_bits();
    let neg = bits >> 31 == 1;
    let sign = if neg { 1u32 << fmt.sign_shift } else { 0 };
    let man = bits & 0x7F_FFFF;
    if x.is_nan() {
        let code = match kind {
            NarrowKind::Ieee => {
                // Exponent all ones, quiet bit, top payload bits.
                let exp_ones = fmt.overflow_code; // infinity code
                let quiet = 1u32 << (fmt.mbits - 1);
                exp_ones | quiet | (man >> (23 - fmt.mbits))
            }
            NarrowKind::E5M2 => 0x7C | 0x02 | ((man >> 21) & 0x3),
            NarrowKind::E4M3 => 0x7F,
        };
        return (sign | code) as u16;
    }
    if x.is_infinite() {
        return (sign | fmt.overflow_code) as u16;
    }
    let (neg, m, e) = split_f32(x);
    encode_exact(neg, m, e, fmt) as u16
}

#[derive(Clone, Copy)]
enum NarrowKind {
    Ieee,
    E5M2,
    E4M3,
}

/// Decode a narrow code (F16, F8E4M3 or F8E5M2 layout) exactly into `f32`.
fn decode_small(bits: u32, fmt: Format, ebits: u32, kind: NarrowKind) -> f32 {
    let mb = fmt.mbits;
    let neg = (bits >> fmt.sign_shift) & 1 == 1;
    let sign = if neg { 0x8000_0000u32 } else { 0 };
    let exp = (bits >> mb) & ((1 << ebits) - 1);
    let man = bits & ((1 << mb) - 1);
    let exp_ones = (1 << ebits) - 1;
    match kind {
        NarrowKind::Ieee | NarrowKind::E5M2 if exp == exp_ones => {
            if man == 0 {
                return f32::from_bits(sign | 0x7F80_0000);
            }
            return f32::from_bits(sign | 0x7FC0_0000 | (man << (23 - mb)));
        }
        NarrowKind::E4M3 if exp == exp_ones && man == (1 << mb) - 1 => {
            return f32::from_bits(sign | 0x7FC0_0000);
        }
        _ => {}
    }
    if exp == 0 {
        // Subnormal: man · 2^(1 - bias - mb), a normal f32 for all these formats.
        let scale = f32::from_bits(((1 - fmt.bias - mb as i32 + 127) as u32) << 23);
        let v = man as f32 * scale;
        return if neg { -v } else { v };
    }
    let e32 = (exp as i32 - fmt.bias + 127) as u32;
    f32::from_bits(sign | (e32 << 23) | (man << (23 - mb)))
}

/// F32 → F16 bits, RNE; overflow → ±inf (IEEE); NaN keeps sign and top payload, quiet bit set.
pub fn f16_from_f32(x: f32) -> u16 {
    encode_f32(x, F16_FMT, NarrowKind::Ieee)
}

/// F16 bits → the exact `f32` value (NaN: quiet bit set, payload kept).
pub fn f16_to_f32(bits: u16) -> f32 {
    decode_small(bits as u32, F16_FMT, 5, NarrowKind::Ieee)
}

/// F32 → BF16 bits, RNE; overflow → ±inf (IEEE); NaN keeps sign and top payload, quiet bit set.
pub fn bf16_from_f32(x: f32) -> u16 {
    encode_f32(x, BF16_FMT, NarrowKind::Ieee)
}

/// BF16 bits → the exact `f32` value (the top half of an f32; NaN: quiet bit set).
pub fn bf16_to_f32(bits: u16) -> f32 {
    let b = bits as u32;
    if b & 0x7FFF > 0x7F80 {
        f32::from_bits((b | 0x0040) << 16)
    } else {
        f32::from_bits(b << 16)
    }
}

/// F32 → F8E4M3 ("FN") byte, RNE; out-of-range and ±inf saturate to ±448; NaN → `S.1111.111`.
pub fn f8e4m3_from_f32(x: f32) -> u8 {
    encode_f32(x, E4M3_FMT, NarrowKind::E4M3) as u8
}

/// F8E4M3 byte → the exact `f32` value (`S.1111.111` → NaN with that sign).
pub fn f8e4m3_to_f32(bits: u8) -> f32 {
    decode_small(bits as u32, E4M3_FMT, 4, NarrowKind::E4M3)
}

/// F32 → F8E5M2 byte, RNE; out-of-range and ±inf saturate to ±57344; NaN keeps sign and the
/// top payload bit, quiet bit set.
pub fn f8e5m2_from_f32(x: f32) -> u8 {
    encode_f32(x, E5M2_FMT, NarrowKind::E5M2) as u8
}

/// F8E5M2 byte → the exact `f32` value (±inf stay infinite; NaN: quiet bit set).
pub fn f8e5m2_to_f32(bits: u8) -> f32 {
    decode_small(bits as u32, E5M2_FMT, 5, NarrowKind::E5M2)
}

/// Encode an `f32` into the bits of a narrow float dtype (F16, BF16, F8E4M3,
/// F8E5M2; the F8 codes occupy the low byte). `None` for any other dtype.
pub fn encode_bits(x: f32, to: Dtype) -> Option<u16> {
    match to {
        Dtype::F16 => Some(f16_from_f32(x)),
        Dtype::BF16 => Some(bf16_from_f32(x)),
        Dtype::F8E4M3 => Some(f8e4m3_from_f32(x) as u16),
        Dtype::F8E5M2 => Some(f8e5m2_from_f32(x) as u16),
        _ => None,
    }
}

/// The storage bits of `x`, a member of `to`'s value set (a result already
/// rounded to `to`, or a copy of a stored element): exact, where
/// [`encode_bits`] is the §5 cast. The two differ only on F8E5M2's ±inf,
/// which the cast saturates to ±57344 but the format stores: data movement
/// (transpose, select, concat, …) must keep it, and a fused kernel (which
/// never stores the intermediate) must see what a materialised one reads
/// back. Both backends store through this.
pub fn store_bits(x: f32, to: Dtype) -> Option<u16> {
    if to == Dtype::F8E5M2 && x.is_infinite() {
        return Some(if x > 0.0 { 0x7C } else { 0xFC });
    }
    encode_bits(x, to)
}

/// Decode the bits of a narrow float dtype (F16, BF16, F8E4M3, F8E5M2; F8
/// codes in the low byte, high byte ignored) exactly into `f32`. `None` for any
/// other dtype.
pub fn decode_bits(bits: u16, from: Dtype) -> Option<f32> {
    match from {
        Dtype::F16 => Some(f16_to_f32(bits)),
        Dtype::BF16 => Some(bf16_to_f32(bits)),
        Dtype::F8E4M3 => Some(f8e4m3_to_f32(bits as u8)),
        Dtype::F8E5M2 => Some(f8e5m2_to_f32(bits as u8)),
        _ => None,
    }
}

/// Round an `f32` to the float dtype `to` (RNE, F8 saturating, NaN stays NaN)
/// and return the result as an `f32`. Identity for F32 and for non-float `to`.
pub fn round_to(x: f32, to: Dtype) -> f32 {
    match to {
        Dtype::F16 => f16_to_f32(f16_from_f32(x)),
        Dtype::BF16 => bf16_to_f32(bf16_from_f32(x)),
        Dtype::F8E4M3 => f8e4m3_to_f32(f8e4m3_from_f32(x)),
        Dtype::F8E5M2 => f8e5m2_to_f32(f8e5m2_from_f32(x)),
        _ => x,
    }
}

/// Two's-complement wrap of `x` to the width of the int dtype `to` (keep the
/// low bits, sign-extend): I32/I16/I8 like Rust's `as`, I4 into [-8, 7].
/// Identity for I64 and for non-int `to`.
pub fn wrap_int(x: i64, to: Dtype) -> i64 {
    match to {
        Dtype::I32 => x as i32 as i64,
        Dtype::I16 => x as i16 as i64,
        Dtype::I8 => x as i8 as i64,
        Dtype::I4 => (x << 60) >> 60,
        _ => x,
    }
}

/// Saturate `x` into the range of the int dtype `to` (I4: [-8, 7]).
/// Identity for non-int `to`.
pub fn saturate_int(x: i64, to: Dtype) -> i64 {
    match to.int_range() {
        Some((lo, hi)) => x.clamp(lo, hi),
        None => x,
    }
}

/// Float → int cast: truncate toward zero, saturate to the int dtype's range,
/// NaN → 0 (Rust `as` semantics; I4 saturates to [-8, 7]).
/// For a non-int `to` this is `x as i64`.
pub fn float_to_int(x: f32, to: Dtype) -> i64 {
    saturate_int(x as i64, to)
}

/// Int → float cast: round the exact `i64` once, to nearest-even, into the
/// float dtype `to` (F8 saturating, F16 overflowing to ±inf), returned as the
/// exact `f32` value of the result. For a non-float `to` this is `x as f32`.
pub fn int_to_float(x: i64, to: Dtype) -> f32 {
    let neg = x < 0;
    let m = x.unsigned_abs();
    match to {
        Dtype::F16 => f16_to_f32(encode_exact(neg, m, 0, F16_FMT) as u16),
        Dtype::BF16 => bf16_to_f32(encode_exact(neg, m, 0, BF16_FMT) as u16),
        Dtype::F8E4M3 => f8e4m3_to_f32(encode_exact(neg, m, 0, E4M3_FMT) as u8),
        Dtype::F8E5M2 => f8e5m2_to_f32(encode_exact(neg, m, 0, E5M2_FMT) as u8),
        _ => x as f32, // Rust's i64 → f32 is a single RNE rounding
    }
}

/// The same single rounding as `int_to_float(x, F32)`, through the generic
/// encoder (exposed for cross-checking against Rust's `as f32`).
#[doc(hidden)]
pub fn int_to_f32_generic(x: i64) -> f32 {
    f32::from_bits(encode_exact(x < 0, x.unsigned_abs(), 0, F32_FMT))
}

/// The value semantics of `cast[to]` (Section 2 §5) on one decoded element.
///
/// The result is exactly representable in `to` and has the variant `to`
/// decodes into: floats rounded to `to`, ints wrapped (from ints) or
/// truncated and saturated (from floats), Bool as `x ≠ 0` (NaN → true,
/// -0.0 → false), Bool → numeric as 0/1.
pub fn convert(e: Elem, to: Dtype) -> Elem {
    match e {
        Elem::F(x) => {
            if to.is_float() {
                Elem::F(round_to(x, to))
            } else if to.is_int() {
                Elem::I(float_to_int(x, to))
            } else {
                Elem::B(x != 0.0)
            }
        }
        Elem::I(x) => {
            if to.is_float() {
                Elem::F(int_to_float(x, to))
            } else if to.is_int() {
                Elem::I(wrap_int(x, to))
            } else {
                Elem::B(x != 0)
            }
        }
        Elem::B(b) => {
            if to.is_float() {
                Elem::F(if b { 1.0 } else { 0.0 })
            } else if to.is_int() {
                Elem::I(b as i64)
            } else {
                Elem::B(b)
            }
        }
    }
}

// ---- NaN rules (Section 2 §3) ---------------------------------------------
//
// Section 2 §3: an operation whose result is a NaN returns a quiet NaN; one
// that passes a signalling NaN operand through sets the quiet bit and keeps
// the payload; float `maximum`/`minimum` are IEEE 754-2019's. Which payload
// a NaN result carries is fixed here, identically for both backends (the
// JIT emits the same selection; it cannot rely on the hardware's choice,
// since LLVM commutes operands and folds identities such as `x · 1`):
//
// - an elementwise op with a NaN operand returns the first NaN operand
//   (in operand order), quieted: sign and payload kept. `neg`/`abs` act on
//   the sign as usual (they are sign operations), then quiet;
// - a NaN made from non-NaN operands (`∞ − ∞`, `0 · ∞`, `√−1`, `log −1`)
//   is [`CANONICAL_NAN`] (x86 would give a negative NaN, ARM a positive
//   one: the spec fixes one);
// - a reduction (sum, prod, mean, max, min), a matmul or a convolution
//   whose result is a NaN returns [`CANONICAL_NAN`]: its fold or summation
//   order is not observable (Section 4 §5.4, §6), so its NaN must not
//   depend on it either.
//
// Narrow floats need nothing more: decoding their storage already quiets
// (see the module docs), and every result is computed in f32 from decoded
// values.

/// The quiet NaN of a NaN result that has no NaN operand to inherit from
/// (positive, payload 0: `f32::NAN`).
pub const CANONICAL_NAN: f32 = f32::NAN;

/// The f32 quiet bit (the top mantissa bit).
pub const QUIET_BIT: u32 = 0x0040_0000;

/// `x` with the quiet bit set when `x` is a NaN (sign and payload kept);
/// every other value unchanged.
pub fn quiet(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(x.to_bits() | QUIET_BIT)
    } else {
        x
    }
}

/// The Section 2 §3 NaN rule for an elementwise result `r` computed from
/// `operands`: `r` itself when it is not a NaN, else the first NaN operand
/// quieted, else [`CANONICAL_NAN`].
pub fn nan_result(r: f32, operands: &[f32]) -> f32 {
    if !r.is_nan() {
        return r;
    }
    match operands.iter().find(|x| x.is_nan()) {
        Some(&x) => quiet(x),
        None => CANONICAL_NAN,
    }
}

/// IEEE 754-2019 `maximum` (Section 2 §3): a NaN operand wins (the first,
/// quieted), and −0 < +0.
pub fn maximum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        nan_result(f32::NAN, &[a, b])
    } else if a > b {
        a
    } else if b > a {
        b
    } else {
        // Equal: identical bits, or ±0 where +0 (sign bit clear) wins.
        f32::from_bits(a.to_bits() & b.to_bits())
    }
}

/// IEEE 754-2019 `minimum` (Section 2 §3): a NaN operand wins (the first,
/// quieted), and −0 < +0.
pub fn minimum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        nan_result(f32::NAN, &[a, b])
    } else if a < b {
        a
    } else if b < a {
        b
    } else {
        // Equal: identical bits, or ±0 where −0 (sign bit set) wins.
        f32::from_bits(a.to_bits() | b.to_bits())
    }
}

/// The value of `cast[to]` as an operation (Section 2 §3, §5): [`convert`],
/// except that a float NaN operand is quieted first (a float → float cast
/// is the identity on every other value of a wider or equal `to`, so it is
/// one of the operations that pass a NaN through). [`convert`] itself is
/// also the storage conversion of `Tensor::from_elems`, which must keep an
/// F32 signalling NaN a caller stored.
pub fn cast_value(e: Elem, to: Dtype) -> Elem {
    match e {
        Elem::F(x) => convert(Elem::F(quiet(x)), to),
        other => convert(other, to),
    }
}

#[cfg(test)]
mod nan_rules {
    use super::*;

    const SNAN: f32 = f32::from_bits(0x7F80_0001);
    const NEG_QNAN: f32 = f32::from_bits(0xFFC0_0123);

    fn bits(x: f32) -> u32 {
        x.to_bits()
    }

    #[test]
    fn maximum_minimum_follow_ieee_2019() {
        // −0 < +0, in either operand order.
        assert_eq!(bits(maximum(-0.0, 0.0)), bits(0.0));
        assert_eq!(bits(maximum(0.0, -0.0)), bits(0.0));
        assert_eq!(bits(minimum(-0.0, 0.0)), bits(-0.0));
        assert_eq!(bits(minimum(0.0, -0.0)), bits(-0.0));
        assert_eq!(bits(maximum(-0.0, -0.0)), bits(-0.0));
        assert_eq!(bits(minimum(0.0, 0.0)), bits(0.0));
        // A NaN operand wins over every number, ±∞ included: the first
        // NaN, quieted, payload and sign kept.
        for y in [f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1.0] {
            assert_eq!(bits(maximum(SNAN, y)), 0x7FC0_0001);
            assert_eq!(bits(maximum(y, SNAN)), 0x7FC0_0001);
            assert_eq!(bits(minimum(y, NEG_QNAN)), bits(NEG_QNAN));
        }
        assert_eq!(bits(maximum(NEG_QNAN, SNAN)), bits(NEG_QNAN));
        assert_eq!(bits(minimum(SNAN, NEG_QNAN)), 0x7FC0_0001);
        assert_eq!(maximum(1.0, 2.0), 2.0);
        assert_eq!(minimum(1.0, 2.0), 1.0);
    }

    #[test]
    fn nan_results_are_quiet_with_the_first_payload() {
        assert_eq!(bits(quiet(SNAN)), 0x7FC0_0001);
        assert_eq!(bits(quiet(-0.0)), bits(-0.0));
        // x · 1 on a signalling NaN: the operand, quieted.
        assert_eq!(bits(nan_result(SNAN * 1.0, &[SNAN, 1.0])), 0x7FC0_0001);
        // Two NaN operands: the first.
        assert_eq!(
            bits(nan_result(f32::NAN, &[NEG_QNAN, SNAN])),
            bits(NEG_QNAN)
        );
        // ∞ − ∞: no NaN operand, the canonical NaN (x86 computes 0xFFC00000).
        let inf = std::hint::black_box(f32::INFINITY);
        assert_eq!(
            bits(nan_result(inf - inf, &[inf, inf])),
            bits(CANONICAL_NAN)
        );
        // Not a NaN: unchanged.
        assert_eq!(bits(nan_result(-0.0, &[SNAN])), bits(-0.0));
    }

    #[test]
    fn cast_value_quiets_even_between_equal_dtypes() {
        assert_eq!(
            cast_value(Elem::F(SNAN), Dtype::F32).as_f32().map(bits),
            Some(0x7FC0_0001)
        );
        // The storage conversion keeps what a caller stored.
        assert_eq!(
            convert(Elem::F(SNAN), Dtype::F32).as_f32().map(bits),
            Some(bits(SNAN))
        );
        // F16 sNaN 0x7C01 decodes quiet and re-encodes as 0x7E01.
        let x = f16_to_f32(0x7C01);
        assert_eq!(f16_from_f32(x), 0x7E01);
    }
}
