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
//!
//! `Q6_K` (16 sub-blocks of 16, i8 scales, 6-bit values `u` stored as
//! 4 low bits in `ql` and 2 high bits in `qh`, `q = u − 32`): the
//! reference sums `sc_g · Σ q·x` per sub-block. Here `Σ u·x` comes from
//! `vpdpbusd` on `u` rebuilt per lane (`ql` nibble, `qh` bit pair shifted
//! up: no carry crosses a byte), minus the exact `32 · Σx` of the
//! sub-block. Packed: per half of the super-block, `ql`'s 64 bytes as 16
//! vectors and `qh`'s 32 as 8, the 16 i8 scales as `[16][16]`, then 16
//! f16 `d`: 3360 bytes, the size of the 16 raw super-blocks.

use super::act::Acts;
use super::dequant::scale_min_k4;
use super::kernels::{Job, Out};
use super::vnni::dot4;
use std::arch::x86_64::*;

/// Bytes of one packed `Q4_K` super-block of a tile.
pub(crate) const BLOCK: usize = 32 * 64 + 2 * 128 + 2 * 32;

/// Bytes of one packed `Q6_K` super-block of a tile.
pub(crate) const BLOCK6: usize = 48 * 64 + 256 + 32;

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

/// [`pack_block`] for `Q6_K` (210-byte raw blocks), into `BLOCK6` bytes.
pub(crate) fn pack_block6(rows: &[u8], row_bytes: usize, s: usize, dst: &mut [u8]) {
    for (i, row) in rows.chunks_exact(row_bytes).enumerate() {
        let blk = &row[s * 210..(s + 1) * 210];
        let (ql, qh, scales) = (&blk[0..128], &blk[128..192], &blk[192..208]);
        // ql: vector (2h + part)·8 + g holds bytes 64h + 32·part + 4g..;
        // qh: vector 32 + 8h + g holds bytes 32h + 4g...
        for v in 0..32 {
            let src = &ql[4 * v..4 * v + 4];
            dst[64 * v + 4 * i..64 * v + 4 * i + 4].copy_from_slice(src);
        }
        for v in 0..16 {
            let src = &qh[4 * v..4 * v + 4];
            dst[64 * (32 + v) + 4 * i..64 * (32 + v) + 4 * i + 4].copy_from_slice(src);
        }
        for (g, &sc) in scales.iter().enumerate() {
            dst[3072 + 16 * g + i] = sc;
        }
        dst[3328 + 2 * i..3328 + 2 * i + 2].copy_from_slice(&blk[208..210]);
    }
}

/// Fills `out` (column `c` for weight row `j0 + c`) from the job's packed
/// `Q4_K` or `Q6_K` weight. Call only with such a packed job on a VNNI
/// host.
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
    let q6 = job.f == super::Format::Q6_K;
    // Q6_K's sub-blocks are 16 long: their activation sums, once per task.
    let gsum: Vec<i32> = if q6 {
        let x = &acts.qx[..rows * k];
        x.chunks_exact(16)
            .map(|g| g.iter().map(|&v| v as i32).sum())
            .collect()
    } else {
        Vec::new()
    };
    let mut c = 0;
    while c < cols {
        let n = (cols - c).min(TILE);
        let tile = p.tile((j0 + c) / TILE);
        let mask: __mmask16 = if n >= TILE { !0 } else { (1u16 << n) - 1 };
        let mut put = |m: usize, y: __m512| {
            let dst = &mut out.rows[m][c..c + n];
            // SAFETY: the mask writes the `n` lanes of `dst` only.
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask, y) };
        };
        // Four rows at a time share each weight vector's load and split
        // (one row at a time, a 16-row product split every super-block 16
        // times); the last `rows % 4` one at a time.
        let mut m = 0;
        while m < rows {
            let r = if m + 4 <= rows { 4 } else { 1 };
            // SAFETY: `has_vnni` asserted above (it implies the AVX-512,
            // AVX2, FMA and F16C features); the lengths are asserted, and
            // rows `m..m + r` exist.
            let ys = unsafe {
                match r {
                    4 => tile_rows::<4>(q6, tile, nsb, acts, &gsum, k, m),
                    _ => {
                        let [y] = tile_rows::<1>(q6, tile, nsb, acts, &gsum, k, m);
                        [y; 4]
                    }
                }
            };
            for (i, &y) in ys[..r].iter().enumerate() {
                put(m + i, y);
            }
            m += r;
        }
        c += n;
    }
}

/// [`rows_q6`] or [`rows_q4`] by format (`gsum` is read for `Q6_K` only).
#[inline]
// SAFETY: (contract) as for `rows_q4` and `rows_q6`.
unsafe fn tile_rows<const R: usize>(
    q6: bool,
    tile: &[u8],
    nsb: usize,
    a: &Acts,
    gsum: &[i32],
    k: usize,
    m: usize,
) -> [__m512; R] {
    // SAFETY: the caller's contract, which is theirs.
    unsafe {
        if q6 {
            rows_q6::<R>(tile, nsb, a, gsum, k, m)
        } else {
            rows_q4::<R>(tile, nsb, a, k, m)
        }
    }
}

/// Activation rows `m..m + R` against one packed tile: lane `i`, weight
/// row `i`. Each super-block's quants are loaded and split once for the
/// `R` rows, which share every weight vector; each row's lanes perform the
/// one-row sequence of operations (the integer sums are exact in any
/// order; the f32 operations are the reference's, in its order).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
// SAFETY: (contract) the features present; `tile` holds `nsb` packed
// super-blocks; `a` holds rows `m..m + R` (`k = 256 · nsb`, their sums and
// scales).
unsafe fn rows_q4<const R: usize>(
    tile: &[u8],
    nsb: usize,
    a: &Acts,
    k: usize,
    m: usize,
) -> [__m512; R] {
    let nib = _mm512_set1_epi8(0x0F);
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); R];
    // The next tile's same super-block, requested while this one is
    // computed (see `vnni::tile`); never dereferenced.
    let next = tile.as_ptr().wrapping_add(tile.len());
    for s in 0..nsb {
        for l in (0..BLOCK).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(s * BLOCK + l).cast());
        }
        let blk = &tile[s * BLOCK..(s + 1) * BLOCK];
        let bp = blk.as_ptr();
        let mut xs: [&[i8]; R] = [&[]; R];
        let mut bs: [&[i32]; R] = [&[]; R];
        for r in 0..R {
            let row = (m + r) * k + 256 * s;
            xs[r] = &a.qx[row..row + 256];
            let sb = ((m + r) * nsb + s) * 8;
            bs[r] = &a.bsum[sb..sb + 8];
        }
        // (Every load below is inside `blk`, `BLOCK` bytes: 32 vectors,
        // then 256 bytes of scales, then 64 of `d`/`dmin`; the activation
        // words are read by `dot4` from `xs`.)
        let (mut sumi, mut summ) = ([z; R], [z; R]);
        for p in 0..4 {
            let (mut lo, mut hi) = ([z; R], [z; R]);
            for g in 0..8 {
                // SAFETY: quant vector `8p + g < 32` of the block.
                let v = unsafe { _mm512_loadu_si512(bp.add(64 * (8 * p + g)).cast()) };
                let ql = _mm512_and_si512(v, nib);
                let qh = _mm512_and_si512(_mm512_srli_epi32::<4>(v), nib);
                for r in 0..R {
                    lo[r] = dot4(lo[r], ql, xs[r], 64 * p + 4 * g);
                    hi[r] = dot4(hi[r], qh, xs[r], 64 * p + 32 + 4 * g);
                }
            }
            for (j, dots) in [(2 * p, lo), (2 * p + 1, hi)] {
                // SAFETY: the 16 scales of sub-block `j < 8`.
                let sc =
                    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(bp.add(2048 + 16 * j).cast())) };
                // SAFETY: the 16 mins of sub-block `j < 8`.
                let mn =
                    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(bp.add(2176 + 16 * j).cast())) };
                for r in 0..R {
                    sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(sc, dots[r]));
                    let b = _mm512_set1_epi32(bs[r][j]);
                    summ[r] = _mm512_add_epi32(summ[r], _mm512_mullo_epi32(mn, b));
                }
            }
        }
        // SAFETY: the 16 f16 `d` at 2304..2336.
        let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(bp.add(2304).cast()) });
        // SAFETY: the 16 f16 `dmin` at 2336..2368 = BLOCK.
        let dmin = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(bp.add(2336).cast()) });
        for r in 0..R {
            let dx = _mm512_set1_ps(a.d[(m + r) * nsb + s]);
            // `d·dx·sumi − dmin·dx·summ`, evaluated as the reference does.
            let t1 = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sumi[r]));
            let t2 = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(summ[r]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_sub_ps(t1, t2));
        }
    }
    acc
}

/// [`rows_q4`] for packed `Q6_K`; `gsum` holds the 16-element sums of every
/// activation row.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
// SAFETY: (contract) as for `rows_q4`, with `BLOCK6`-byte super-blocks, and
// `gsum` holding rows `m..m + R`'s `k / 16` sums.
unsafe fn rows_q6<const R: usize>(
    tile: &[u8],
    nsb: usize,
    a: &Acts,
    gsum: &[i32],
    k: usize,
    m: usize,
) -> [__m512; R] {
    let (nib, two) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x03));
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); R];
    let next = tile.as_ptr().wrapping_add(tile.len());
    for s in 0..nsb {
        for l in (0..BLOCK6).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(s * BLOCK6 + l).cast());
        }
        let blk = &tile[s * BLOCK6..(s + 1) * BLOCK6];
        let bp = blk.as_ptr();
        let mut xs: [&[i8]; R] = [&[]; R];
        let mut gs: [&[i32]; R] = [&[]; R];
        for r in 0..R {
            let row = (m + r) * k + 256 * s;
            xs[r] = &a.qx[row..row + 256];
            let sg = ((m + r) * nsb + s) * 16;
            gs[r] = &gsum[sg..sg + 16];
        }
        let mut sumi = [z; R];
        for h in 0..2 {
            for q in 0..4 {
                let (mut d0, mut d1) = ([z; R], [z; R]);
                for g in 0..8 {
                    let lv = 64 * ((2 * h + (q & 1)) * 8 + g);
                    // SAFETY: `ql` vector `< 32` and `qh` vector `< 48` of
                    // the block (`BLOCK6` bytes).
                    let (vl, vh) = unsafe {
                        (
                            _mm512_loadu_si512(bp.add(lv).cast()),
                            _mm512_loadu_si512(bp.add(64 * (32 + 8 * h + g)).cast()),
                        )
                    };
                    let lo = if q < 2 {
                        vl
                    } else {
                        _mm512_srli_epi32::<4>(vl)
                    };
                    let hi = _mm512_and_si512(
                        _mm512_srlv_epi32(vh, _mm512_set1_epi32(2 * q as i32)),
                        two,
                    );
                    let u = _mm512_or_si512(_mm512_and_si512(lo, nib), _mm512_slli_epi32::<4>(hi));
                    let at = 128 * h + 32 * q + 4 * g;
                    for r in 0..R {
                        if g < 4 {
                            d0[r] = dot4(d0[r], u, xs[r], at);
                        } else {
                            d1[r] = dot4(d1[r], u, xs[r], at);
                        }
                    }
                }
                for (half, dots) in [(0, d0), (1, d1)] {
                    let gi = 8 * h + 2 * q + half;
                    // SAFETY: the 16 scales of sub-block `gi < 16`.
                    let sc = unsafe {
                        _mm512_cvtepi8_epi32(_mm_loadu_si128(bp.add(3072 + 16 * gi).cast()))
                    };
                    for r in 0..R {
                        let dq = _mm512_sub_epi32(dots[r], _mm512_set1_epi32(32 * gs[r][gi]));
                        sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(sc, dq));
                    }
                }
            }
        }
        // SAFETY: the 16 f16 `d` at 3328..3360 = BLOCK6.
        let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(bp.add(3328).cast()) });
        for r in 0..R {
            let dx = _mm512_set1_ps(a.d[(m + r) * nsb + s]);
            acc[r] = _mm512_add_ps(
                acc[r],
                _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sumi[r])),
            );
        }
    }
    acc
}
