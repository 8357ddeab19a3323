//! Weight quantization into `Q8_0`, transcribed from ggml's
//! `quantize_row_q8_0_ref` (and gguf-py's `quantize_blocks` for `Q8_0`):
//! per block of 32, `d = max|x| / 127`, `q = roundf(x · (1 / d))` (half away
//! from zero; 0 for an all-zero block), `d` stored as f16. The same f32
//! operations in the same order, so the blocks are byte-identical to
//! llama.cpp's for the same weights.
//!
//! Bound, per element `x` of a block with scale `d` (f32) and stored
//! scale `d16`: `|x − d16 · q| ≤ d / 2 + 127 · max(2⁻¹¹ · d, 2⁻²⁵) + 2.01 ·
//! 2⁻²⁴ · |x|`. The first term is the rounding to an integer step, the
//! second the f16 rounding of the scale (relative 2⁻¹¹ where `d16` is a
//! normal f16, absolute 2⁻²⁵ where it is subnormal) times `|q| ≤ 127`, the
//! third the f32 roundings of `1 / d` and `x · (1 / d)`. (A block below
//! `max|x| = 127 · 2⁻²⁵` may get the scale 0, as in ggml: the second term
//! covers it.) A scale f16 cannot hold (an infinite or NaN weight, or
//! `max|x| / 127` past 65504) is refused rather than stored wrong:
//! [`QuantError::ScaleRange`].

use super::{Format, QuantError};
use half::f16;

/// The `Q8_0` blocks of `x` (rows of `k` floats, `k` a multiple of 32), row
/// by row: `x.len() / 32 · 34` bytes.
pub fn quantize_q8_0(x: &[f32], k: usize) -> Result<Vec<u8>, QuantError> {
    let f = Format::Q8_0;
    if !k.is_multiple_of(32) || (k > 0 && !x.len().is_multiple_of(k)) || (k == 0 && !x.is_empty()) {
        return Err(QuantError::NotBlockMultiple {
            format: f.name(),
            len: k,
            block: 32,
        });
    }
    let blocks = x.len() / 32;
    let bytes = blocks
        .checked_mul(f.block_bytes())
        .ok_or(QuantError::Overflow {
            what: "q8_0 blocks",
        })?;
    let mut out = Vec::with_capacity(bytes);
    for (b, blk) in x.chunks_exact(32).enumerate() {
        // Tested element by element: `f32::max` below passes over a NaN.
        if blk.iter().any(|v| !v.is_finite()) {
            return Err(QuantError::ScaleRange { block: b });
        }
        let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let d16 = f16::from_f32(d);
        // A scale past f16's range would dequantize every element to
        // ±inf or NaN. (One that flushes to 0, for a block below
        // `127 · 2⁻²⁵`, is what ggml stores, and within the bound.)
        if d16.is_infinite() {
            return Err(QuantError::ScaleRange { block: b });
        }
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&d16.to_bits().to_le_bytes());
        // |x · id| ≤ 127 (rounded: ≤ 127 + an ulp), so the cast saturates
        // nothing; `round` is C's `roundf`, half away from zero.
        out.extend(blk.iter().map(|&v| (v * id).round() as i8 as u8));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(x: &[f32]) -> Vec<f32> {
        let b = quantize_q8_0(x, x.len()).unwrap();
        let mut y = vec![0f32; x.len()];
        super::super::dequantize(Format::Q8_0, &b, &mut y).unwrap();
        y
    }

    #[test]
    fn blocks_are_ggmls() {
        // Block 0: max 127 → d = 1, q = x rounded half away from zero.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = -127.0;
        x[4] = 0.49;
        let b = quantize_q8_0(&x, 32).unwrap();
        assert_eq!(&b[..2], &f16::from_f32(1.0).to_bits().to_le_bytes());
        assert_eq!(b[2..7], [127u8, 3, (-3i8) as u8, (-127i8) as u8, 0]);
        // An all-zero block: scale 0, quants 0.
        let z = quantize_q8_0(&[0f32; 32], 32).unwrap();
        assert!(z.iter().all(|&v| v == 0));
    }

    #[test]
    fn refuses_what_f16_cannot_scale() {
        let mut x = [0f32; 64];
        x[40] = f32::INFINITY;
        assert_eq!(
            quantize_q8_0(&x, 64),
            Err(QuantError::ScaleRange { block: 1 })
        );
        x[40] = 1e9;
        assert!(quantize_q8_0(&x, 64) == Err(QuantError::ScaleRange { block: 1 }));
        x[40] = f32::NAN;
        assert!(quantize_q8_0(&x, 64) == Err(QuantError::ScaleRange { block: 1 }));
        assert!(quantize_q8_0(&x[..40], 40).is_err());
        assert!(quantize_q8_0(&[], 0).unwrap().is_empty());
    }

    proptest! {
        /// Every element within the module's stated bound, for blocks of
        /// any scale f16 holds (normal and subnormal scales).
        #[test]
        fn dequantized_within_the_bound(
            exp in -30i32..20,
            m in proptest::collection::vec(-1.0f32..1.0, 64),
        ) {
            let scale = 2f32.powi(exp);
            let x: Vec<f32> = m.iter().map(|v| v * scale).collect();
            let y = roundtrip(&x);
            for (blk, yb) in x.chunks(32).zip(y.chunks(32)) {
                let d = blk.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
                for (&xi, &yi) in blk.iter().zip(yb) {
                    let bound = f64::from(d) / 2.0
                        + 127.0 * (f64::from(d) * 2f64.powi(-11)).max(2f64.powi(-25))
                        + 2.01 * 2f64.powi(-24) * f64::from(xi.abs());
                    prop_assert!((f64::from(xi) - f64::from(yi)).abs() <= bound,
                        "x {xi} y {yi} d {d} bound {bound}");
                }
            }
        }
    }
}
