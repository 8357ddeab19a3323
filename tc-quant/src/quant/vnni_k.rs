//! Fast numerics for packed `Q4_K` weights on AVX-512 VNNI: tiles of 16
//! weight rows, one lane per row, as `vnni.rs` does for the 32-element
//! formats.
//!
//! A `Q4_K` super-block is 8 sub-blocks of 32 4-bit quants, each with a
//! 6-bit scale `sc_j` and min `m_j`, and f16 `d`, `dmin`. The scalar
//! reference (`kernels::term_q4_k`) forms two exact integers,
//! `sumi = Σ_j sc_j · (q·x)_j` and `summ = Σ_j m_j · bsum_j`, then
//! `d·dx·sumi − dmin·dx·summ` in f32, added to the running sum in
//! super-block order. Here lane `i` computes row `i`'s `(q·x)_j` with 8
//! `vpdpbusd` against broadcast activation words, the integer sums with
//! `vpmulld`, and the same f32 operations in the same order: results are
//! bit-identical to the scalar path.
//!
//! Packed layout of one super-block of a tile (`packed.rs` builds it):
//! 32 vectors of quants (pair `p` of sub-blocks, which share 32 bytes of
//! nibbles, low for `2p` and high for `2p + 1`; group `g`: lane `i` holds
//! bytes `32p + 4g .. + 4` of row `i`), then `sc` as `[8][16]` u8, `m` as
//! `[8][16]` u8 (the 6-bit fields unpacked), then 16 f16 `d` and 16 f16
//! `dmin`: 2368 bytes, 64 more than the 16 raw super-blocks.

use super::act::Acts;
use super::dequant::scale_min_k4;
use super::kernels::{Job, Out};
use std::arch::x86_64::*;

/// Bytes of one packed super-block of a tile.
pub(crate) const BLOCK: usize = 32 * 64 + 2 * 128 + 2 * 32;

/// Rows per tile.
const TILE: usize = 16;

/// Packs super-block `s` of the `n ≤ 16` raw rows in `rows` into `dst`
/// (`BLOCK` bytes); lanes past `n` stay zero.
pub(crate) fn pack_block(rows: &[u8], row_bytes: usize, s: usize, dst: &mut [u8]) {
    for (i, row) in rows.chunks_exact(row_bytes).enumerate() {
        let blk = &row[s * 144..(s + 1) * 144];
        let (scales, qs) = (&blk[4..16], &blk[16..144]);
        for v in 0..32 {
            let (p, g) = (v / 8, v % 8);
            let src = &qs[32 * p + 4 * g..32 * p + 4 * g + 4];
            dst[64 * v + 4 * i..64 * v + 4 * i + 4].copy_from_slice(src);
        }
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, scales);
            dst[2048 + 16 * j + i] = sc;
            dst[2176 + 16 * j + i] = m;
        }
        dst[2304 + 2 * i..2304 + 2 * i + 2].copy_from_slice(&blk[0..2]);
        dst[2336 + 2 * i..2336 + 2 * i + 2].copy_from_slice(&blk[2..4]);
    }
}

/// Fills `out` (column `c` for weight row `j0 + c`) from the job's packed
/// `Q4_K` weight. Call only with a packed `Q4_K` job on a VNNI host.
pub(crate) fn columns(job: &Job<'_>, acts: &Acts, j0: usize, out: &mut Out<'_>) {
    let (rows, k) = (job.rows, job.k);
    let p = job.packed.expect("a packed job");
    let nsb = k / 256;
    let cols = out.cols();
    // Every index the kernel forms is checked by slicing against these
    // (an internal bug otherwise; asserting keeps the kernel sound).
    assert!(super::x86::has_vnni() && acts.block == 256 && p.k == k);
    assert!(j0.is_multiple_of(TILE) && j0 + cols <= p.n_out && out.rows.len() == rows);
    assert!(acts.qx.len() >= rows * k && acts.d.len() >= rows * nsb);
    assert!(acts.bsum.len() >= rows * nsb * 8);
    let mut c = 0;
    while c < cols {
        let n = (cols - c).min(TILE);
        let tile = p.tile((j0 + c) / TILE);
        let mask: __mmask16 = if n >= TILE { !0 } else { (1u16 << n) - 1 };
        for m in 0..rows {
            // SAFETY: `has_vnni` asserted above (it implies the AVX-512,
            // AVX2, FMA and F16C features); the lengths are asserted.
            let y = unsafe { row(tile, nsb, acts, k, m) };
            let dst = &mut out.rows[m][c..c + n];
            // SAFETY: the mask writes the `n` lanes of `dst` only.
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask, y) };
        }
        c += n;
    }
}

/// Activation row `m` against one packed tile: lane `i`, weight row `i`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
// SAFETY: (contract) the features present; `tile` holds `nsb` packed
// super-blocks; `a` holds row `m` (`k = 256 · nsb`, its sums and scale).
unsafe fn row(tile: &[u8], nsb: usize, a: &Acts, k: usize, m: usize) -> __m512 {
    let nib = _mm512_set1_epi8(0x0F);
    let z = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    // The next tile's same super-block, requested while this one is
    // computed (see `vnni::tile`); never dereferenced.
    let next = tile.as_ptr().wrapping_add(tile.len());
    for s in 0..nsb {
        for l in (0..BLOCK).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(s * BLOCK + l).cast());
        }
        let blk = &tile[s * BLOCK..(s + 1) * BLOCK];
        let xs = &a.qx[m * k + 256 * s..m * k + 256 * s + 256];
        let bs = &a.bsum[(m * nsb + s) * 8..(m * nsb + s) * 8 + 8];
        let bp = blk.as_ptr();
        // SAFETY (every load below): inside `blk` (`BLOCK` bytes: 32
        // vectors, then 256 bytes of scales, then 64 of `d`/`dmin`), or 4
        // bytes inside `xs` (`4g + 32j < 256`); unaligned loads.
        let x = |at: usize| unsafe { xs.as_ptr().add(at).cast::<i32>().read_unaligned() };
        let (mut sumi, mut summ) = (z, z);
        for p in 0..4 {
            let (mut lo, mut hi) = (z, z);
            for g in 0..8 {
                // SAFETY: quant vector `8p + g < 32` of the block.
                let v = unsafe { _mm512_loadu_si512(bp.add(64 * (8 * p + g)).cast()) };
                let ql = _mm512_and_si512(v, nib);
                let qh = _mm512_and_si512(_mm512_srli_epi32::<4>(v), nib);
                lo = _mm512_dpbusd_epi32(lo, ql, _mm512_set1_epi32(x(64 * p + 4 * g)));
                hi = _mm512_dpbusd_epi32(hi, qh, _mm512_set1_epi32(x(64 * p + 32 + 4 * g)));
            }
            for (j, dot) in [(2 * p, lo), (2 * p + 1, hi)] {
                // SAFETY: the 16 scales of sub-block `j < 8`.
                let sc =
                    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(bp.add(2048 + 16 * j).cast())) };
                // SAFETY: the 16 mins of sub-block `j < 8`.
                let mn =
                    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(bp.add(2176 + 16 * j).cast())) };
                sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(sc, dot));
                summ = _mm512_add_epi32(summ, _mm512_mullo_epi32(mn, _mm512_set1_epi32(bs[j])));
            }
        }
        // SAFETY: the 16 f16 `d` at 2304..2336.
        let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(bp.add(2304).cast()) });
        // SAFETY: the 16 f16 `dmin` at 2336..2368 = BLOCK.
        let dmin = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(bp.add(2336).cast()) });
        let dx = _mm512_set1_ps(a.d[m * nsb + s]);
        // `d·dx·sumi − dmin·dx·summ`, evaluated as the reference does.
        let t1 = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sumi));
        let t2 = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(summ));
        acc = _mm512_add_ps(acc, _mm512_sub_ps(t1, t2));
    }
    acc
}
