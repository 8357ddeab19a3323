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
    /// The scalars regrouped for the AMX tiles, built once per call when
    /// they run ([`Acts::with_amx`]).
    #[cfg(target_arch = "x86_64")]
    pub amx: Option<super::amx::Scales>,
}

impl Acts {
    /// Quantizes `x` with blocks of 32 (256 for K-quants):
    /// `d = max|x| / 127`, `q = clamp(round_ties_even(x / d), ±127)`
    /// (0 when `d = 0`). Each block is its own, so a large input is
    /// quantized in row ranges on the pool's threads, with the same bits:
    /// done by one thread it took an eighth of an int8 encoder's time at
    /// two threads, the other thread waiting.
    pub fn quantize(f: Format, x: &[f32], rows: usize, k: usize) -> Acts {
        use rayon::prelude::*;
        let block = f.block_elems();
        let (nb, ns) = (k / block, k / 32);
        let mut acts = Acts {
            qx: vec![0; rows * k],
            d: vec![0.0; rows * nb],
            bsum: vec![0; rows * ns],
            s: vec![0.0; rows * ns],
            block,
            #[cfg(target_arch = "x86_64")]
            amx: None,
        };
        let threads = rayon::current_num_threads();
        if rows * k < PAR_MIN || threads <= 1 || k == 0 {
            fill(
                block,
                x,
                &mut acts.qx,
                &mut acts.d,
                &mut acts.bsum,
                &mut acts.s,
            );
            return acts;
        }
        let per = rows.div_ceil(4 * threads);
        x.par_chunks(per * k)
            .zip(acts.qx.par_chunks_mut(per * k))
            .zip(acts.d.par_chunks_mut(per * nb))
            .zip(acts.bsum.par_chunks_mut(per * ns))
            .zip(acts.s.par_chunks_mut(per * ns))
            .for_each(|((((x, q), d), bsum), s)| fill(block, x, q, d, bsum, s));
        acts
    }
}

/// Elements below which [`Acts::quantize`] stays on one thread.
const PAR_MIN: usize = 1 << 16;

/// Whole rows quantized into their slices of `Acts`' four vectors: `x`
/// and `qx` of equal length, a multiple of `block`; `d` one per block,
/// `bsum` and `s` one per 32 elements.
fn fill(block: usize, x: &[f32], qx: &mut [i8], d: &mut [f32], bsum: &mut [i32], s: &mut [f32]) {
    let per = block / 32;
    let blocks = x.chunks_exact(block).zip(qx.chunks_exact_mut(block));
    let scalars = d
        .iter_mut()
        .zip(bsum.chunks_exact_mut(per).zip(s.chunks_exact_mut(per)));
    #[cfg(target_arch = "x86_64")]
    let (wide, simd) = (super::x86::has_avx512(), super::x86::has_avx2());
    // Whether the block's quantizer wrote its 32-element sums.
    #[cfg(target_arch = "x86_64")]
    let summed = wide;
    #[cfg(not(target_arch = "x86_64"))]
    let summed = false;
    for ((xb, qb), (d, (sums, ss))) in blocks.zip(scalars) {
        #[cfg(target_arch = "x86_64")]
        let v = if wide {
            // SAFETY: `has_avx512` checked the features; blocks are 32 or
            // 256 elements, whole 32-element groups, and `sums` holds one
            // per group.
            unsafe { quantize_block_avx512(xb, qb, sums) }
        } else if simd {
            // SAFETY: `has_avx2` checked the features just above.
            unsafe { quantize_block_avx2(xb, qb) }
        } else {
            quantize_block(xb, qb)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let v = quantize_block(xb, qb);
        if !summed {
            for (sum, sub) in sums.iter_mut().zip(qb.chunks_exact(32)) {
                *sum = sub.iter().map(|&q| q as i32).sum();
            }
        }
        *d = v;
        for (s, &sum) in ss.iter_mut().zip(sums.iter()) {
            *s = v * sum as f32;
        }
    }
}

impl Acts {
    /// Adds the AMX tiles' scalars where they will run: `amx` set, a
    /// 32-element format, and 16 rows or more, or [`AMX_PAD_MIN`] or more
    /// in a last group of fewer than 16, which is then padded with zero
    /// rows (computed, never stored: every row's outputs are the same bits
    /// on either kernel, and a 16-row tile step costs about what 9 rows on
    /// the VNNI tiles do).
    #[cfg(target_arch = "x86_64")]
    pub fn with_amx(mut self, f: Format, amx: bool, rows: usize, k: usize) -> Acts {
        use super::amx::ROWS;
        if !amx || f.block_elems() != 32 {
            return self;
        }
        let groups = if rows % ROWS >= AMX_PAD_MIN {
            rows.div_ceil(ROWS)
        } else {
            rows / ROWS
        };
        if groups == 0 {
            return self;
        }
        let (padded, nb) = (groups * ROWS, k / 32);
        if padded > rows {
            self.qx.resize(padded * k, 0);
            self.d.resize(padded * nb, 0.0);
            self.bsum.resize(padded * nb, 0);
            self.s.resize(padded * nb, 0.0);
        }
        self.amx = Some(super::amx::Scales::new(&self, padded, k));
        self
    }
}

/// The fewest rows of a last, partial group that the AMX tiles take
/// (padded to 16): below it, the VNNI tiles cost less.
#[cfg(target_arch = "x86_64")]
pub(crate) const AMX_PAD_MIN: usize = 8;

/// [`quantize_block`] compiled for AVX2: the same operations, IEEE
/// division and `round_ties_even` included, so the same bits; without it
/// the baseline target calls libm's `rintf` once per element.
// SAFETY: (contract) callable only where AVX2, FMA and F16C are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block_avx2(x: &[f32], q: &mut [i8]) -> f32 {
    quantize_block(x, q)
}

/// [`quantize_block`] on AVX-512, 16 lanes at a time, plus the block's
/// 32-element sums written to `bsum` (one per group): the same operations per element, so
/// the same bits. `max` returns its second operand for a NaN, as
/// `f32::max` returns the non-NaN one; the clamp's `min`/`max` would turn
/// a NaN quotient into ±127, so NaN lanes are zeroed by mask, as `as i8`
/// maps NaN to 0; the quotient is an IEEE division, rounded to nearest
/// even; integral values in ±127 convert exactly.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
// SAFETY: (contract) AVX-512 F/BW/VL present; `x.len() == q.len()`, a
// multiple of 32.
unsafe fn quantize_block_avx512(x: &[f32], q: &mut [i8], bsum: &mut [i32]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert!(x.len() == q.len() && x.len().is_multiple_of(32));
    debug_assert!(bsum.len() == x.len() / 32);
    // SAFETY (every load and store below): `c` and `o` are whole chunks
    // of 16 f32 and 16 i8.
    let mut a = _mm512_setzero_ps();
    for c in x.chunks_exact(16) {
        let v = _mm512_abs_ps(unsafe { _mm512_loadu_ps(c.as_ptr()) });
        a = _mm512_max_ps(v, a);
    }
    let amax = _mm512_reduce_max_ps(a);
    let d = amax / 127.0;
    if d == 0.0 {
        q.fill(0);
        bsum.fill(0);
        return d;
    }
    let (dv, hi, lo) = (
        _mm512_set1_ps(d),
        _mm512_set1_ps(127.0),
        _mm512_set1_ps(-127.0),
    );
    for ((c, o), total) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).zip(bsum) {
        let mut sum = _mm512_setzero_si512();
        for h in 0..2 {
            // SAFETY: `c` holds 32 f32; `16h + 16 ≤ 32`.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr().add(16 * h)) };
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_div_ps(v, dv),
            );
            let ord = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(r, r);
            let i = _mm512_maskz_cvtps_epi32(ord, _mm512_max_ps(_mm512_min_ps(r, hi), lo));
            sum = _mm512_add_epi32(sum, i);
            // SAFETY: `o` holds 32 i8; `16h + 16 ≤ 32`.
            unsafe { _mm_storeu_si128(o.as_mut_ptr().add(16 * h).cast(), _mm512_cvtepi32_epi8(i)) };
        }
        *total = _mm512_reduce_add_epi32(sum);
    }
    d
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The portable reference: `quantize_block` and the 32-element sums.
    fn reference(x: &[f32]) -> (Vec<i8>, f32, Vec<i32>) {
        let mut q = vec![0i8; x.len()];
        let d = quantize_block(x, &mut q);
        let sums = q
            .chunks_exact(32)
            .map(|s| s.iter().map(|&v| v as i32).sum())
            .collect();
        (q, d, sums)
    }

    /// Values that stress each step: NaN (ignored by the max, 0 after),
    /// ±inf, ±0, subnormals (a subnormal `d`), exact ties of `x / d`.
    fn special() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => -4.0f32..4.0,
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NEG_INFINITY),
            1 => Just(-0.0f32),
            1 => (1u32..0x0080_0000).prop_map(f32::from_bits),
            1 => (-127i32..=127).prop_map(|i| i as f32 + 0.5),
            1 => Just(f32::MAX),
        ]
    }

    /// A large input, quantized in row ranges on the pool, has the bits
    /// of one pass over all of it.
    #[test]
    fn row_ranges_on_the_pool_are_one_pass() {
        let (rows, k) = (301, 512);
        assert!(rows * k >= PAR_MIN);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let x: Vec<f32> = (0..rows * k)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let v = (state >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0;
                if i % 4099 == 7 {
                    f32::NAN
                } else if i % 997 < 40 {
                    0.0
                } else {
                    v
                }
            })
            .collect();
        for f in [Format::Q8_0, Format::Q4_K] {
            let par = Acts::quantize(f, &x, rows, k);
            let (nb, ns) = (k / f.block_elems(), k / 32);
            let mut one = (
                vec![0i8; rows * k],
                vec![0f32; rows * nb],
                vec![0; rows * ns],
                vec![0f32; rows * ns],
            );
            fill(
                f.block_elems(),
                &x,
                &mut one.0,
                &mut one.1,
                &mut one.2,
                &mut one.3,
            );
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(par.qx, one.0);
            assert_eq!(bits(&par.d), bits(&one.1));
            assert_eq!(par.bsum, one.2);
            assert_eq!(bits(&par.s), bits(&one.3));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Every SIMD quantizer gives the portable one's bits, for every
        /// input: the kernels' bit-identity rests on it.
        #[test]
        fn simd_quantizers_match_the_reference(
            x in prop::collection::vec(special(), 32 * 8),
            block in prop::sample::select(vec![32usize, 256]),
        ) {
            let f = if block == 32 { Format::Q4_1 } else { Format::Q4_K };
            let acts = Acts::quantize(f, &x, x.len() / 256, 256);
            let mut qs = Vec::new();
            let (mut ds, mut sums) = (Vec::new(), Vec::new());
            for xb in x.chunks_exact(block) {
                let (q, d, s) = reference(xb);
                qs.extend(q);
                ds.push(d.to_bits());
                sums.extend(s);
            }
            prop_assert_eq!(&acts.qx, &qs);
            prop_assert_eq!(acts.d.iter().map(|d| d.to_bits()).collect::<Vec<_>>(), ds);
            prop_assert_eq!(&acts.bsum, &sums);
        }
    }
}
