//! Bit-exactness of the Section 2 §5 casts and narrow-float encodings.
//!
//! F16/BF16 are checked against the `half` crate; F8E4M3/F8E5M2 against a
//! straightforward reference written from the format definitions below
//! (enumerate every code's value, pick the nearest, ties to the even code,
//! saturate). NaN rule under test: decode sets the quiet bit and keeps sign and
//! payload; so every bit pattern round-trips except signalling NaNs, which come
//! back with the quiet bit set, and the F8E5M2 infinities, which decode to ±inf
//! and (being a cast into F8) re-encode saturated to ±57344.

use tc_core::Dtype;
use tc_runtime::cast::{
    bf16_from_f32, bf16_to_f32, convert, decode_bits, encode_bits, f16_from_f32, f16_to_f32,
    f8e4m3_from_f32, f8e4m3_to_f32, f8e5m2_from_f32, f8e5m2_to_f32, float_to_int,
    int_to_f32_generic, int_to_float, round_to, wrap_int,
};
use tc_runtime::Elem;

/// SplitMix64: a small deterministic PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn next_u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }
    /// An f32 whose biased exponent lies in `lo..=hi` (random sign and mantissa).
    fn f32_in_exp(&mut self, lo: u32, hi: u32) -> f32 {
        let r = self.next();
        let exp = lo + (r as u32) % (hi - lo + 1);
        let man = ((r >> 32) as u32) & 0x7F_FFFF;
        let sign = ((r >> 63) as u32) << 31;
        f32::from_bits(sign | exp << 23 | man)
    }
}

const SAMPLES: usize = runs(2_000_000);

/// `n` natively; a thousandth (at least 100) under Miri (`scripts/miri.sh`),
/// which interprets every operation and would take hours over the full
/// sweeps. The sampled draws are still the first ones of the same streams.
const fn runs(n: usize) -> usize {
    if cfg!(miri) {
        if n / 1000 > 100 {
            n / 1000
        } else {
            100
        }
    } else {
        n
    }
}

/// The step through an exhaustive sweep of `len` values: 1 natively (every
/// value); under Miri one giving about 500 samples spread over the whole
/// range (odd, so the sample does not keep to even bit patterns).
const fn stride(len: usize) -> usize {
    if cfg!(miri) {
        (len / 500) | 1
    } else {
        1
    }
}

/// Interesting f32 values plus their neighbours (bit pattern ± 1, ± 2).
fn edge_cases() -> Vec<f32> {
    let p = |e: i32| 2f32.powi(e);
    let base = [
        0.0,
        1.0,
        1.5,
        2.0,
        0.1,
        1.0 + p(-11),       // F16 tie, to even (down)
        1.0 + 3.0 * p(-11), // F16 tie, to even (up)
        1.0 + p(-8),        // BF16 tie down
        1.0 + 3.0 * p(-8),  // BF16 tie up
        1.0 + p(-4),        // E4M3 tie
        1.0 + 3.0 * p(-4),
        1.0 + p(-3), // E5M2 tie
        1.0 + 3.0 * p(-3),
        65504.0,
        65519.0,
        65520.0,
        65536.0,
        448.0,
        464.0,
        480.0,
        57344.0,
        61440.0,
        65536.0,
        p(-14),
        p(-24),
        p(-25),
        3.0 * p(-25),
        p(-6),
        p(-9),
        p(-10),
        3.0 * p(-10),
        p(-14),
        p(-16),
        p(-17),
        3.0 * p(-17),
        p(-126),
        p(-127),
        p(-133),
        p(-149),
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::EPSILON,
        1e-45,
        f32::INFINITY,
        f32::from_bits(0x007F_FFFF), // max subnormal
        f32::from_bits(0x7F7F_8000), // BF16 rounding into inf
        f32::from_bits(0x7F7F_7FFF),
        f32::from_bits(0x7F7F_8001),
    ];
    let mut out = Vec::new();
    for x in base {
        for v in [x, -x] {
            let b = v.to_bits();
            for d in [-2i64, -1, 0, 1, 2] {
                let nb = (b as i64 + d) as u32;
                // stay within the same sign half
                if nb >> 31 == b >> 31 {
                    out.push(f32::from_bits(nb));
                }
            }
        }
    }
    for nan in [
        0x7FC0_0000u32,
        0x7F80_0001,
        0x7FBF_FFFF,
        0x7FFF_FFFF,
        0x7FA0_2000,
        0x7FC0_1234,
    ] {
        out.push(f32::from_bits(nan));
        out.push(f32::from_bits(nan | 0x8000_0000));
    }
    out
}

fn random_f32(rng: &mut Rng, i: usize, lo: u32, hi: u32) -> f32 {
    if i & 1 == 0 {
        f32::from_bits(rng.next_u32())
    } else {
        rng.f32_in_exp(lo, hi)
    }
}

// ---------------------------------------------------------------- F16 / BF16

#[test]
fn f16_every_pattern_decodes_like_half_and_round_trips() {
    for b in (0..=u16::MAX).step_by(stride(1 << 16)) {
        let x = f16_to_f32(b);
        let h = half::f16::from_bits(b).to_f32();
        assert_eq!(x.to_bits(), h.to_bits(), "decode {b:#06x}");
        let is_nan = b & 0x7C00 == 0x7C00 && b & 0x03FF != 0;
        let expect = if is_nan { b | 0x0200 } else { b };
        assert_eq!(f16_from_f32(x), expect, "re-encode {b:#06x}");
        assert_eq!(
            decode_bits(b, Dtype::F16).map(f32::to_bits),
            Some(x.to_bits())
        );
    }
}

#[test]
fn bf16_every_pattern_decodes_like_half_and_round_trips() {
    for b in (0..=u16::MAX).step_by(stride(1 << 16)) {
        let x = bf16_to_f32(b);
        let h = half::bf16::from_bits(b).to_f32();
        assert_eq!(x.to_bits(), h.to_bits(), "decode {b:#06x}");
        let is_nan = b & 0x7F80 == 0x7F80 && b & 0x007F != 0;
        let expect = if is_nan { b | 0x0040 } else { b };
        assert_eq!(bf16_from_f32(x), expect, "re-encode {b:#06x}");
    }
}

#[test]
fn f32_to_f16_edge_cases_match_half() {
    let cases = edge_cases();
    assert!(cases.len() > 300);
    for x in cases {
        assert_eq!(
            f16_from_f32(x),
            half::f16::from_f32(x).to_bits(),
            "x = {x:e} ({:#010x})",
            x.to_bits()
        );
    }
    // Spot values stated by the spec/IEEE.
    assert_eq!(f16_from_f32(65520.0), 0x7C00); // rounds to +inf
    assert_eq!(f16_from_f32(65519.0), 0x7BFF);
    assert_eq!(f16_from_f32(-0.0), 0x8000);
    assert_eq!(f16_from_f32(2f32.powi(-25)), 0x0000); // tie to even: 0
    assert_eq!(f16_from_f32(3.0 * 2f32.powi(-25)), 0x0002); // tie to even: 2 ulp
    assert_eq!(f16_from_f32(1.0 + 2f32.powi(-11)), 0x3C00);
    assert_eq!(f16_from_f32(1.0 + 3.0 * 2f32.powi(-11)), 0x3C02);
}

#[test]
fn f32_to_bf16_edge_cases_match_half() {
    for x in edge_cases() {
        assert_eq!(
            bf16_from_f32(x),
            half::bf16::from_f32(x).to_bits(),
            "x = {x:e} ({:#010x})",
            x.to_bits()
        );
    }
    assert_eq!(bf16_from_f32(f32::from_bits(0x7F7F_8000)), 0x7F80); // tie at max → even → inf
    assert_eq!(bf16_from_f32(f32::from_bits(0x3F80_8000)), 0x3F80);
    assert_eq!(bf16_from_f32(f32::from_bits(0x3F81_8000)), 0x3F82);
}

#[test]
fn f32_to_f16_and_bf16_random_match_half() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF0);
    for i in 0..SAMPLES {
        let x = random_f32(&mut rng, i, 96, 146);
        assert_eq!(
            f16_from_f32(x),
            half::f16::from_f32(x).to_bits(),
            "f16 x = {:#010x}",
            x.to_bits()
        );
        assert_eq!(
            bf16_from_f32(x),
            half::bf16::from_f32(x).to_bits(),
            "bf16 x = {:#010x}",
            x.to_bits()
        );
    }
}

// ---------------------------------------------------------------- F8 reference

/// An F8 format described by its definition, independent of the library.
struct F8Ref {
    mbits: u32,
    bias: i32,
    /// The value of every positive code 0..=0x7F (None for NaN/inf codes).
    values: Vec<Option<f64>>,
    /// Largest finite positive code.
    max_code: u8,
}

impl F8Ref {
    fn new(ebits: u32, mbits: u32, bias: i32, fnuz_like_e4m3: bool) -> F8Ref {
        let mut values = Vec::new();
        for c in 0u32..0x80 {
            let e = c >> mbits;
            let m = c & ((1 << mbits) - 1);
            let emax_field = (1 << ebits) - 1;
            let special = if fnuz_like_e4m3 {
                e == emax_field && m == (1 << mbits) - 1 // only S.1111.111 is NaN
            } else {
                e == emax_field // inf and NaNs
            };
            values.push(if special {
                None
            } else if e == 0 {
                Some(m as f64 * 2f64.powi(1 - bias - mbits as i32))
            } else {
                Some(
                    (m as f64 + (1u32 << mbits) as f64) * 2f64.powi(e as i32 - bias - mbits as i32),
                )
            });
        }
        let max_code = values.iter().rposition(|v| v.is_some()).unwrap() as u8;
        F8Ref {
            mbits,
            bias,
            values,
            max_code,
        }
    }

    fn e4m3() -> F8Ref {
        F8Ref::new(4, 3, 7, true)
    }

    fn e5m2() -> F8Ref {
        F8Ref::new(5, 2, 15, false)
    }

    fn max(&self) -> f64 {
        self.values[self.max_code as usize].unwrap()
    }

    /// Nearest code to a non-NaN `x` (f64 so that it can take exact integers),
    /// ties to the even code, saturating at ±max.
    fn encode(&self, x: f64) -> u8 {
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let a = x.abs();
        if a >= self.max() {
            return sign | self.max_code;
        }
        // Largest code whose value is <= a (codes are monotone in value).
        let mut lo = 0u8;
        while lo < self.max_code && self.values[lo as usize + 1].unwrap() <= a {
            lo += 1;
        }
        let vlo = self.values[lo as usize].unwrap();
        if vlo == a {
            return sign | lo;
        }
        let hi = lo + 1;
        let vhi = self.values[hi as usize].unwrap();
        // 2a vs vlo + vhi is exact in f64 for f32 inputs and F8 values.
        let code = if 2.0 * a < vlo + vhi {
            lo
        } else if 2.0 * a > vlo + vhi {
            hi
        } else if lo & 1 == 0 {
            lo
        } else {
            hi
        };
        sign | code
    }

    fn decode(&self, b: u8) -> Option<f64> {
        let v = self.values[(b & 0x7F) as usize]?;
        Some(if b & 0x80 != 0 { -v } else { v })
    }
}

#[test]
fn f8_reference_tables_are_what_the_spec_says() {
    let e4 = F8Ref::e4m3();
    assert_eq!(e4.max(), 448.0);
    assert_eq!(e4.values.iter().filter(|v| v.is_none()).count(), 1);
    assert_eq!(e4.values[1], Some(2f64.powi(-9)));
    assert_eq!((e4.mbits, e4.bias), (3, 7));
    let e5 = F8Ref::e5m2();
    assert_eq!(e5.max(), 57344.0);
    assert_eq!(e5.values.iter().filter(|v| v.is_none()).count(), 4);
    assert_eq!(e5.values[1], Some(2f64.powi(-16)));
    assert_eq!((e5.mbits, e5.bias), (2, 15));
}

#[test]
fn f8e4m3_every_pattern_decodes_and_round_trips() {
    let r = F8Ref::e4m3();
    for b in 0..=u8::MAX {
        let x = f8e4m3_to_f32(b);
        match r.decode(b) {
            Some(v) => {
                assert_eq!(x as f64, v, "decode {b:#04x}");
                assert_eq!(x.is_sign_negative(), b & 0x80 != 0, "sign of {b:#04x}");
            }
            None => {
                assert!(x.is_nan(), "{b:#04x} must be NaN");
                assert_eq!(x.is_sign_negative(), b & 0x80 != 0);
            }
        }
        assert!(!x.is_infinite());
        assert_eq!(f8e4m3_from_f32(x), b, "re-encode {b:#04x}");
    }
}

#[test]
fn f8e5m2_every_pattern_decodes_and_round_trips() {
    let r = F8Ref::e5m2();
    for b in 0..=u8::MAX {
        let x = f8e5m2_to_f32(b);
        let mag = b & 0x7F;
        match r.decode(b) {
            Some(v) => assert_eq!(x as f64, v, "decode {b:#04x}"),
            None if mag == 0x7C => {
                assert!(x.is_infinite(), "{b:#04x} is inf");
            }
            None => assert!(x.is_nan(), "{b:#04x} is NaN"),
        }
        assert_eq!(x.is_sign_negative(), b & 0x80 != 0, "sign of {b:#04x}");
        // 0x7D / 0xFD are the signalling NaNs: they come back quiet. ±inf
        // (0x7C / 0xFC) decode to ±inf, which a cast saturates to ±max (0x7B).
        let expect = match mag {
            0x7D => b | 0x02,
            0x7C => b - 1,
            _ => b,
        };
        assert_eq!(f8e5m2_from_f32(x), expect, "re-encode {b:#04x}");
    }
}

fn check_f8(x: f32, r: &F8Ref, enc: fn(f32) -> u8, what: &str) {
    let got = enc(x);
    if x.is_nan() {
        assert!(
            (f8_decode_by_name(what, got)).is_nan(),
            "{what}: NaN {:#010x} must stay NaN, got {got:#04x}",
            x.to_bits()
        );
        assert_eq!(got & 0x80 != 0, x.is_sign_negative(), "{what}: NaN sign");
        return;
    }
    let want = r.encode(x as f64);
    assert_eq!(got, want, "{what}: x = {x:e} ({:#010x})", x.to_bits());
}

fn f8_decode_by_name(what: &str, b: u8) -> f32 {
    if what == "e4m3" {
        f8e4m3_to_f32(b)
    } else {
        f8e5m2_to_f32(b)
    }
}

#[test]
fn f32_to_f8_edge_cases_match_reference() {
    let (e4, e5) = (F8Ref::e4m3(), F8Ref::e5m2());
    let mut cases = edge_cases();
    // Every F8 value, every midpoint between neighbours, and their f32 neighbours.
    for r in [&e4, &e5] {
        for w in r.values.windows(2) {
            if let (Some(a), Some(b)) = (w[0], w[1]) {
                for v in [a, (a + b) / 2.0] {
                    let f = v as f32;
                    for d in [-1i32, 0, 1] {
                        let nb = (f.to_bits() as i64 + d as i64).max(0) as u32;
                        cases.push(f32::from_bits(nb));
                        cases.push(-f32::from_bits(nb));
                    }
                }
            }
        }
    }
    let n = cases.len();
    for x in cases.into_iter().step_by(stride(n)) {
        check_f8(x, &e4, f8e4m3_from_f32, "e4m3");
        check_f8(x, &e5, f8e5m2_from_f32, "e5m2");
    }
    // Saturation and specials, spelled out.
    assert_eq!(f8e4m3_from_f32(f32::INFINITY), 0x7E);
    assert_eq!(f8e4m3_from_f32(f32::NEG_INFINITY), 0xFE);
    assert_eq!(f8e4m3_from_f32(1e6), 0x7E);
    assert_eq!(f8e4m3_from_f32(f32::NAN), 0x7F);
    assert_eq!(f8e4m3_from_f32(-f32::NAN), 0xFF);
    assert_eq!(f8e5m2_from_f32(f32::INFINITY), 0x7B);
    assert_eq!(f8e5m2_from_f32(-1e30), 0xFB);
    assert_eq!(f8e5m2_from_f32(f32::NAN), 0x7E);
    assert_eq!(f8e4m3_from_f32(-0.0), 0x80);
    assert_eq!(f8e4m3_from_f32(-1e-30), 0x80);
}

#[test]
fn f32_to_f8_random_match_reference() {
    let (e4, e5) = (F8Ref::e4m3(), F8Ref::e5m2());
    let mut rng = Rng(0xF8F8_0000_1111_2222);
    for i in 0..SAMPLES {
        let x = random_f32(&mut rng, i, 100, 146);
        check_f8(x, &e4, f8e4m3_from_f32, "e4m3");
        check_f8(x, &e5, f8e5m2_from_f32, "e5m2");
    }
}

#[test]
fn encode_decode_bits_dispatch() {
    assert_eq!(encode_bits(1.0, Dtype::F16), Some(0x3C00));
    assert_eq!(encode_bits(1.0, Dtype::BF16), Some(0x3F80));
    assert_eq!(encode_bits(1.0, Dtype::F8E4M3), Some(0x38));
    assert_eq!(encode_bits(1.0, Dtype::F8E5M2), Some(0x3C));
    assert_eq!(encode_bits(1.0, Dtype::F32), None);
    assert_eq!(encode_bits(1.0, Dtype::I8), None);
    assert_eq!(decode_bits(0x38, Dtype::F8E4M3), Some(1.0));
    assert_eq!(decode_bits(0x3C, Dtype::F8E5M2), Some(1.0));
    assert_eq!(decode_bits(0x3C00, Dtype::I16), None);
}

// ---------------------------------------------------------------- round_to / float casts

#[test]
fn round_to_rounds_once_and_keeps_nan() {
    assert_eq!(round_to(1.0 + 2f32.powi(-11), Dtype::F16), 1.0);
    assert_eq!(
        round_to(1.0 + 2f32.powi(-11), Dtype::F32),
        1.0 + 2f32.powi(-11)
    );
    assert_eq!(round_to(70000.0, Dtype::F16), f32::INFINITY);
    assert_eq!(round_to(70000.0, Dtype::BF16), 70144.0);
    assert_eq!(round_to(70000.0, Dtype::F8E5M2), 57344.0);
    assert_eq!(round_to(-500.0, Dtype::F8E4M3), -448.0);
    assert_eq!(round_to(f32::INFINITY, Dtype::F8E4M3), 448.0);
    assert_eq!(round_to(f32::NEG_INFINITY, Dtype::F8E5M2), -57344.0);
    assert_eq!(round_to(f32::INFINITY, Dtype::F16), f32::INFINITY);
    for dt in [Dtype::F16, Dtype::BF16, Dtype::F8E4M3, Dtype::F8E5M2] {
        assert!(round_to(f32::NAN, dt).is_nan(), "{dt}");
        assert!(round_to(-f32::NAN, dt).is_sign_negative(), "{dt}");
        assert_eq!(round_to(-0.0, dt).to_bits(), (-0.0f32).to_bits(), "{dt}");
    }
}

#[test]
fn float_to_float_conversions() {
    // Narrow → F32 is exact.
    for b in 0..=u8::MAX {
        let x = f8e4m3_to_f32(b);
        if let Elem::F(y) = convert(Elem::F(x), Dtype::F32) {
            assert_eq!(x.to_bits(), y.to_bits());
        }
        // E4M3 → F16 and → BF16 are exact too (every E4M3 value fits).
        if !x.is_nan() {
            assert_eq!(convert(Elem::F(x), Dtype::F16), Elem::F(x));
            assert_eq!(convert(Elem::F(x), Dtype::BF16), Elem::F(x));
        }
    }
    // F16 → BF16 rounds (11 → 8 significant bits) ...
    let x = f16_to_f32(0x3C01); // 1 + 2^-10
    assert_eq!(convert(Elem::F(x), Dtype::BF16), Elem::F(1.0));
    // ... and BF16 → F16 overflows to inf.
    assert_eq!(
        convert(Elem::F(bf16_to_f32(0x4780)), Dtype::F16), // 65536
        Elem::F(f32::INFINITY)
    );
    // E5M2 → E4M3 saturates; E5M2 inf → E4M3 max.
    assert_eq!(convert(Elem::F(57344.0), Dtype::F8E4M3), Elem::F(448.0));
    assert_eq!(
        convert(Elem::F(f32::NEG_INFINITY), Dtype::F8E4M3),
        Elem::F(-448.0)
    );
}

// ---------------------------------------------------------------- float → int

#[test]
fn float_to_int_truncates_saturates_and_zeroes_nan() {
    let c = |x: f32, dt: Dtype| convert(Elem::F(x), dt);
    assert_eq!(c(2.9, Dtype::I32), Elem::I(2));
    assert_eq!(c(-2.9, Dtype::I32), Elem::I(-2));
    assert_eq!(c(-0.0, Dtype::I8), Elem::I(0));
    assert_eq!(c(1e10, Dtype::I32), Elem::I(i32::MAX as i64));
    assert_eq!(c(-1e10, Dtype::I32), Elem::I(i32::MIN as i64));
    assert_eq!(c(1e30, Dtype::I64), Elem::I(i64::MAX));
    assert_eq!(c(f32::NEG_INFINITY, Dtype::I64), Elem::I(i64::MIN));
    assert_eq!(c(f32::INFINITY, Dtype::I16), Elem::I(i16::MAX as i64));
    assert_eq!(c(200.0, Dtype::I8), Elem::I(127));
    assert_eq!(c(-200.0, Dtype::I8), Elem::I(-128));
    assert_eq!(c(7.99, Dtype::I4), Elem::I(7));
    assert_eq!(c(8.0, Dtype::I4), Elem::I(7));
    assert_eq!(c(-8.5, Dtype::I4), Elem::I(-8));
    assert_eq!(c(-100.0, Dtype::I4), Elem::I(-8));
    for dt in [Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8, Dtype::I4] {
        assert_eq!(c(f32::NAN, dt), Elem::I(0), "{dt}");
        assert_eq!(c(-f32::NAN, dt), Elem::I(0), "{dt}");
    }
    // Agrees with Rust `as` on random inputs.
    let mut rng = Rng(77);
    for _ in 0..runs(100_000) {
        let x = f32::from_bits(rng.next_u32());
        assert_eq!(float_to_int(x, Dtype::I32), x as i32 as i64);
        assert_eq!(float_to_int(x, Dtype::I16), x as i16 as i64);
        assert_eq!(float_to_int(x, Dtype::I8), x as i8 as i64);
        assert_eq!(float_to_int(x, Dtype::I64), x as i64);
    }
}

// ---------------------------------------------------------------- int → int

#[test]
fn int_narrowing_wraps_and_widening_sign_extends() {
    let c = |x: i64, dt: Dtype| convert(Elem::I(x), dt);
    assert_eq!(c(300, Dtype::I8), Elem::I(44));
    assert_eq!(c(-129, Dtype::I8), Elem::I(127));
    assert_eq!(c(65535, Dtype::I16), Elem::I(-1));
    assert_eq!(c(1 << 31, Dtype::I32), Elem::I(i32::MIN as i64));
    assert_eq!(c(i64::MIN, Dtype::I32), Elem::I(0));
    assert_eq!(c(8, Dtype::I4), Elem::I(-8));
    assert_eq!(c(15, Dtype::I4), Elem::I(-1));
    assert_eq!(c(16, Dtype::I4), Elem::I(0));
    assert_eq!(c(-9, Dtype::I4), Elem::I(7));
    assert_eq!(c(-1, Dtype::I64), Elem::I(-1)); // widening keeps the value
    assert_eq!(c(-8, Dtype::I32), Elem::I(-8));
    // I4: every nibble decodes to its two's-complement value.
    for n in 0..16i64 {
        let want = if n >= 8 { n - 16 } else { n };
        assert_eq!(wrap_int(n, Dtype::I4), want);
        assert_eq!(wrap_int(want, Dtype::I4), want);
    }
    let mut rng = Rng(5);
    for _ in 0..runs(100_000) {
        let x = rng.next() as i64;
        assert_eq!(wrap_int(x, Dtype::I16), x as i16 as i64);
        assert_eq!(wrap_int(x, Dtype::I4), ((x & 0xF) ^ 8) - 8);
    }
}

// ---------------------------------------------------------------- bool

#[test]
fn bool_rules() {
    assert_eq!(convert(Elem::B(true), Dtype::F16), Elem::F(1.0));
    assert_eq!(convert(Elem::B(false), Dtype::F8E4M3), Elem::F(0.0));
    assert_eq!(convert(Elem::B(true), Dtype::I4), Elem::I(1));
    assert_eq!(convert(Elem::B(true), Dtype::Bool), Elem::B(true));
    assert_eq!(convert(Elem::F(f32::NAN), Dtype::Bool), Elem::B(true));
    assert_eq!(convert(Elem::F(-0.0), Dtype::Bool), Elem::B(false));
    assert_eq!(convert(Elem::F(0.0), Dtype::Bool), Elem::B(false));
    assert_eq!(convert(Elem::F(1e-45), Dtype::Bool), Elem::B(true));
    assert_eq!(convert(Elem::I(0), Dtype::Bool), Elem::B(false));
    assert_eq!(convert(Elem::I(-3), Dtype::Bool), Elem::B(true));
    assert_eq!(convert(Elem::I(16), Dtype::Bool), Elem::B(true)); // no wrap before the test
}

// ---------------------------------------------------------------- int → float

/// Exact RNE of an i64 to `p` significant bits (no exponent limits).
fn ref_round_int(x: i64, p: u32) -> f64 {
    let a = x.unsigned_abs() as u128;
    if a == 0 {
        return 0.0;
    }
    let msb = 127 - a.leading_zeros();
    let v = if msb < p {
        a
    } else {
        let k = msb + 1 - p;
        let lo = (a >> k) << k;
        let rem = a - lo;
        let half = 1u128 << (k - 1);
        if rem > half || (rem == half && (a >> k) & 1 == 1) {
            lo + (1 << k)
        } else {
            lo
        }
    };
    let v = v as f64; // v has at most p <= 24 significant bits: exact
    if x < 0 {
        -v
    } else {
        v
    }
}

#[test]
fn i64_to_bf16_rounds_once() {
    // 2^31 + 2^23 + 1: via f32 it becomes 2^31 + 2^23, a BF16 tie that goes
    // to even (2^31); rounded directly it is above the tie: 2^31 + 2^24.
    let x: i64 = (1 << 31) + (1 << 23) + 1;
    let double = round_to(x as f32, Dtype::BF16);
    assert_eq!(double, 2f32.powi(31));
    assert_eq!(int_to_float(x, Dtype::BF16), 2f32.powi(31) + 2f32.powi(24));
    assert_eq!(
        convert(Elem::I(x), Dtype::BF16),
        Elem::F(2f32.powi(31) + 2f32.powi(24))
    );
    assert_eq!(
        convert(Elem::I(-x), Dtype::BF16),
        Elem::F(-(2f32.powi(31) + 2f32.powi(24)))
    );
    let mut rng = Rng(99);
    for i in 0..runs(200_000) {
        let x = match i % 3 {
            0 => rng.next() as i64,
            1 => (rng.next() as i64) >> (rng.next() % 64),
            _ => (rng.next() as i64) >> 40,
        };
        assert_eq!(
            int_to_float(x, Dtype::BF16) as f64,
            ref_round_int(x, 8),
            "bf16 {x}"
        );
        // F16: 11 significant bits; a rounded magnitude of 2^16 or more is ±inf.
        let h = ref_round_int(x, 11);
        let h = if h.abs() >= 65536.0 {
            h.signum() * f64::INFINITY
        } else {
            h
        };
        assert_eq!(int_to_float(x, Dtype::F16) as f64, h, "f16 {x}");
        // Generic encoder vs Rust's (single-rounding) i64 → f32.
        assert_eq!(
            int_to_f32_generic(x).to_bits(),
            (x as f32).to_bits(),
            "f32 {x}"
        );
        assert_eq!(int_to_float(x, Dtype::F32), x as f32);
    }
}

#[test]
fn i64_to_narrow_float_overflow_and_saturation() {
    assert_eq!(int_to_float(65504, Dtype::F16), 65504.0);
    assert_eq!(int_to_float(65519, Dtype::F16), 65504.0);
    assert_eq!(int_to_float(65520, Dtype::F16), f32::INFINITY);
    assert_eq!(int_to_float(-70000, Dtype::F16), f32::NEG_INFINITY);
    assert_eq!(int_to_float(i64::MIN, Dtype::BF16), -(2f32.powi(63)));
    assert_eq!(int_to_float(i64::MAX, Dtype::BF16), 2f32.powi(63));
    assert_eq!(int_to_float(1000, Dtype::F8E4M3), 448.0);
    assert_eq!(int_to_float(-1000, Dtype::F8E4M3), -448.0);
    assert_eq!(int_to_float(i64::MAX, Dtype::F8E5M2), 57344.0);
    assert_eq!(int_to_float(i64::MIN, Dtype::F8E4M3), -448.0);
    assert_eq!(int_to_float(0, Dtype::F8E4M3).to_bits(), 0);
    let (e4, e5) = (F8Ref::e4m3(), F8Ref::e5m2());
    for x in (-70_000i64..=70_000).step_by(stride(140_001)) {
        let a = int_to_float(x, Dtype::F8E4M3);
        assert_eq!(a, f8e4m3_to_f32(e4.encode(x as f64)), "e4m3 {x}");
        let b = int_to_float(x, Dtype::F8E5M2);
        assert_eq!(b, f8e5m2_to_f32(e5.encode(x as f64)), "e5m2 {x}");
    }
}

// ---------------------------------------------------------------- convert, generally

#[test]
fn convert_is_idempotent_and_lands_in_the_target_class() {
    let mut rng = Rng(2024);
    for _ in 0..runs(50_000) {
        let e = match rng.next() % 3 {
            0 => Elem::F(f32::from_bits(rng.next_u32())),
            1 => Elem::I(rng.next() as i64 >> (rng.next() % 64)),
            _ => Elem::B(rng.next() & 1 == 0),
        };
        for dt in Dtype::ALL {
            let once = convert(e, dt);
            assert!(once.matches_class(dt), "{e:?} → {dt} gave {once:?}");
            assert!(
                convert(once, dt).bit_eq(once),
                "{e:?} → {dt} not idempotent"
            );
            if let (Elem::I(v), Some((lo, hi))) = (once, dt.int_range()) {
                assert!(lo <= v && v <= hi);
            }
        }
    }
}
