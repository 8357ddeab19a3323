//! Activation quantization for [`super::Numerics::Fast`]. Computed once
//! per call by portable code, so every kernel path sees the same bits.

use super::Format;

/// Quantized activations of a `[rows, k]` input.
pub(crate) struct Acts {
    /// `[rows][k]` 8-bit values, `|q| ≤ 127`.
    pub qx: Vec<i8>,
    /// `[rows][k / block]` scales (block = 32 or 256 by format).
    pub d: Vec<f32>,
    /// `[rows][k / 32]` sums of `qx` over each 32-element sub-block.
    pub bsum: Vec<i32>,
    /// `[rows][k / 32]`: `d · bsum` in f32 (Q4_1's min term).
    pub s: Vec<f32>,
    /// Activation block length.
    pub block: usize,
}

impl Acts {
    /// Quantizes `x` with blocks of 32 (256 for K-quants):
    /// `d = max|x| / 127`, `q = clamp(round_ties_even(x / d), ±127)`
    /// (0 when `d = 0`).
    pub fn quantize(f: Format, x: &[f32], rows: usize, k: usize) -> Acts {
        let block = f.block_elems();
        let mut acts = Acts {
            qx: vec![0; rows * k],
            d: Vec::with_capacity(rows * k / block),
            bsum: Vec::with_capacity(rows * k / 32),
            s: Vec::with_capacity(rows * k / 32),
            block,
        };
        #[cfg(target_arch = "x86_64")]
        let simd = super::x86::has_avx2();
        for (xb, qb) in x.chunks_exact(block).zip(acts.qx.chunks_exact_mut(block)) {
            #[cfg(target_arch = "x86_64")]
            let d = if simd {
                // SAFETY: `has_avx2` checked the features just above.
                unsafe { quantize_block_avx2(xb, qb) }
            } else {
                quantize_block(xb, qb)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let d = quantize_block(xb, qb);
            acts.d.push(d);
            for sub in qb.chunks_exact(32) {
                let sum: i32 = sub.iter().map(|&q| q as i32).sum();
                acts.bsum.push(sum);
                acts.s.push(d * sum as f32);
            }
        }
        acts
    }
}

/// [`quantize_block`] compiled for AVX2: the same operations, IEEE
/// division and `round_ties_even` included, so the same bits; without it
/// the baseline target calls libm's `rintf` once per element.
// SAFETY: (contract) callable only where AVX2, FMA and F16C are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block_avx2(x: &[f32], q: &mut [i8]) -> f32 {
    quantize_block(x, q)
}

#[inline(always)]
fn quantize_block(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    if d == 0.0 {
        q.fill(0);
        return d;
    }
    for (q, &v) in q.iter_mut().zip(x) {
        // |v / d| ≤ 127·(1 + 2u) < 127.5 only while `d` is a normal f32.
        // Below 127·2⁻¹²⁶ `d` is subnormal, loses relative precision, and
        // `v / d` can exceed 127 by any amount; `as` alone would saturate
        // negatives to −128, which the SIMD Q8_0 kernels' `sign_epi8`
        // trick cannot negate (paths would disagree). Clamping keeps
        // |q| ≤ 127 for every input (NaN stays NaN and `as` maps it to 0).
        *q = (v / d).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    d
}
