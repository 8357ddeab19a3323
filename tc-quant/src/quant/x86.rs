//! AVX2 and AVX-512 kernels. Each reproduces the scalar reference in
//! `kernels` operation by operation: integer block dots are exact in any
//! lane order, and the f32 operations on them are the same ones, per
//! output, in the same order (lanes hold different outputs, never parts of
//! one sum), so results are bit-identical to the scalar path.

use super::act::Acts;
use super::{Format, Path};
use std::arch::x86_64::*;

/// AVX2 + FMA + F16C (the `Path::Avx2` kernels' features).
pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// `has_avx2` plus AVX-512 F/BW/VL (the `Path::Avx512` kernels' features).
pub(crate) fn has_avx512() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
}

/// `has_avx512` plus AVX-512 VNNI (`vpdpbusd`).
pub(crate) fn has_vnni() -> bool {
    has_avx512() && is_x86_feature_detected!("avx512vnni")
}

/// The exact-mode dot (`kernels::dot16`'s order) on a SIMD path.
pub(crate) fn dot16(path: Path, x: &[f32], w: &[f32]) -> f32 {
    let n = x.len().min(w.len()) / 16 * 16;
    let (x, w) = (&x[..n], &w[..n]);
    match path {
        // SAFETY: the path was checked available (`Path::is_available`)
        // before any job ran, so the CPU has the enabled features.
        Path::Avx512 | Path::Amx => unsafe { dot16_avx512(x, w) },
        // SAFETY: as above.
        Path::Avx2 => unsafe { dot16_avx2(x, w) },
        Path::Scalar => super::kernels::dot16(x, w),
    }
}

/// Folds 8 lanes as `fold16` does after its first step.
#[target_feature(enable = "avx2,fma")]
fn fold8(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    _mm_cvtss_f32(s1)
}

/// Lanes 0..8 in `a0`, 8..16 in `a1`; `x.len() == w.len()`, a multiple of 16.
// SAFETY: (contract) callable only where AVX2 and FMA are present.
#[target_feature(enable = "avx2,fma")]
unsafe fn dot16_avx2(x: &[f32], w: &[f32]) -> f32 {
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (xc, wc) in x.chunks_exact(16).zip(w.chunks_exact(16)) {
        let (xp, wp) = (xc.as_ptr(), wc.as_ptr());
        // SAFETY: each chunk holds 16 f32, so both 8-lane loads are in bounds.
        unsafe {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wp), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), _mm256_loadu_ps(wp.add(8)), a1);
        }
    }
    fold8(_mm256_add_ps(a0, a1))
}

// SAFETY: (contract) callable only where AVX-512F, AVX2 and FMA are present.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot16_avx512(x: &[f32], w: &[f32]) -> f32 {
    let mut acc = _mm512_setzero_ps();
    for (xc, wc) in x.chunks_exact(16).zip(w.chunks_exact(16)) {
        // SAFETY: each chunk holds 16 f32, one full 512-bit load.
        unsafe {
            acc = _mm512_fmadd_ps(
                _mm512_loadu_ps(xc.as_ptr()),
                _mm512_loadu_ps(wc.as_ptr()),
                acc,
            );
        }
    }
    let lo = _mm512_castps512_ps256(acc);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    fold8(_mm256_add_ps(lo, hi))
}

/// Four outputs (activation row `m` × weight rows `w`) in fast mode, or
/// `None` where this path has no kernel for the format (the caller then
/// uses the scalar one, which gives the same bits).
pub(crate) fn fast_tile4(
    path: Path,
    f: Format,
    a: &Acts,
    k: usize,
    m: usize,
    w: [&[u8]; 4],
) -> Option<[f32; 4]> {
    let fmt = match f {
        Format::Q8_0 => Q8,
        Format::Q4_0 => Q40,
        Format::Q4_1 => Q41,
        Format::Q4_K | Format::Q6_K => return None,
    };
    let t = Tile::new(f, a, k, m, w);
    // SAFETY (all arms): the path was checked available before the job
    // ran, and VNNI is re-checked here; `Tile::new` checked every length.
    Some(unsafe {
        match (path, fmt) {
            (Path::Scalar, _) => return None,
            (Path::Avx512, _) if has_vnni() => tile_vnni(fmt, &t),
            (_, Q8) => tile_avx2::<Q8>(&t),
            (_, Q40) => tile_avx2::<Q40>(&t),
            (_, _) => tile_avx2::<Q41>(&t),
        }
    })
}

const Q8: u8 = 0;
const Q40: u8 = 1;
const Q41: u8 = 2;

/// Bounds-checked views for one 4-output tile of a 32-block format.
struct Tile<'a> {
    qx: &'a [i8],
    d: &'a [f32],
    s: &'a [f32],
    bsum: &'a [i32],
    w: [&'a [u8]; 4],
    nb: usize,
    bb: usize,
}

impl<'a> Tile<'a> {
    fn new(f: Format, a: &'a Acts, k: usize, m: usize, w: [&'a [u8]; 4]) -> Tile<'a> {
        let nb = k / 32;
        let bb = f.block_bytes();
        // Slicing here panics only on an internal bug; the loads below rely
        // on these exact lengths.
        Tile {
            qx: &a.qx[m * k..(m + 1) * k],
            d: &a.d[m * nb..(m + 1) * nb],
            s: &a.s[m * nb..(m + 1) * nb],
            bsum: &a.bsum[m * nb..(m + 1) * nb],
            w: w.map(|r| &r[..nb * bb]),
            nb,
            bb,
        }
    }
}

/// Sums each of four 8-lane i32 vectors: `[Σv0, Σv1, Σv2, Σv3]`.
#[inline]
#[target_feature(enable = "avx2")]
fn reduce4(v: [__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
}

/// The four f16 at byte `at` of each weight block, as f32 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn f16x4(w: [&[u8]; 4], at: usize) -> __m128 {
    let h = |i: usize| u16::from_le_bytes([w[i][at], w[i][at + 1]]) as i16;
    _mm_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), 0, 0, 0, 0))
}

/// Weight bytes (as u8) and activations (sign-adjusted as i8) whose u8×i8
/// dot is the block's integer dot.
// SAFETY: (contract) AVX2 present and `blk` one whole block of the format.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn operands<const F: u8>(blk: &[u8], xv: __m256i) -> (__m256i, __m256i) {
    // SAFETY: `blk` is one whole block: 34 bytes for Q8_0 (32 loaded from
    // byte 2), 18/20 for Q4_0/Q4_1 (16 loaded from byte 2/4).
    unsafe {
        if F == Q8 {
            let wv = _mm256_loadu_si256(blk.as_ptr().add(2).cast());
            // |w| as u8 (−128 → 128) and x·sign(w): |x| ≤ 127 never overflows.
            return (_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
        }
        let at = if F == Q40 { 2 } else { 4 };
        let q = _mm_loadu_si128(blk.as_ptr().add(at).cast());
        let m4 = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(q, m4);
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        (_mm256_set_m128i(hi, lo), xv)
    }
}

/// Shared body of the tile kernels; `$vnni` picks the 8-lane i32 dot
/// (`vpdpbusd`, or `vpmaddubsw` + `vpmaddwd`). Written without closures:
/// a closure does not inherit its function's target features, so it was
/// called, not inlined, once per block and weight row.
macro_rules! tile_body {
    ($t:expr, $F:expr, $vnni:expr) => {{
        let t = $t;
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm_setzero_ps();
        for b in 0..t.nb {
            let off = b * t.bb;
            let blks = [
                &t.w[0][off..off + t.bb],
                &t.w[1][off..off + t.bb],
                &t.w[2][off..off + t.bb],
                &t.w[3][off..off + t.bb],
            ];
            let xs = &t.qx[b * 32..b * 32 + 32];
            // SAFETY: `xs` holds exactly 32 bytes.
            let xv = unsafe { _mm256_loadu_si256(xs.as_ptr().cast()) };
            let mut v = [_mm256_setzero_si256(); 4];
            for (v, blk) in v.iter_mut().zip(blks) {
                // SAFETY: each `blk` is one whole block of the format, and
                // the enclosing function enables the dot's features.
                *v = unsafe {
                    let (u, s) = operands::<{ $F }>(blk, xv);
                    if $vnni {
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
                    } else {
                        _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones)
                    }
                };
            }
            let mut isum = reduce4(v);
            if $F == Q40 {
                isum = _mm_sub_epi32(isum, _mm_set1_epi32(8 * t.bsum[b]));
            }
            // `kernels::scaled`, then Q4_1's fused `m_w · s`.
            let scale = _mm_mul_ps(f16x4(blks, 0), _mm_set1_ps(t.d[b]));
            acc = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(isum), acc);
            if $F == Q41 {
                acc = _mm_fmadd_ps(f16x4(blks, 2), _mm_set1_ps(t.s[b]), acc);
            }
        }
        let mut out = [0f32; 4];
        // SAFETY: `out` holds 4 f32.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
        out
    }};
}

// SAFETY: (contract) AVX2, FMA and F16C present; `t` built by `Tile::new`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2<const F: u8>(t: &Tile<'_>) -> [f32; 4] {
    tile_body!(t, F, false)
}

// SAFETY: (contract) AVX-512 with VNNI present; `t` built by `Tile::new`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni(fmt: u8, t: &Tile<'_>) -> [f32; 4] {
    match fmt {
        Q8 => tile_body!(t, Q8, true),
        Q40 => tile_body!(t, Q40, true),
        _ => tile_body!(t, Q41, true),
    }
}

/// One weight row of a 32-element block format dequantized on a SIMD
/// path, bit-identical to `dequant::dequantize`: every `d·q` is exact in
/// f32 (an f16 scale has 11 significant bits, a quant at most 8), so
/// Q4_1's `d·q + m` rounds once whether fused or not. `false` where this
/// path has no kernel for the format (the caller dequantizes in scalar).
pub(crate) fn dequant_row(path: Path, f: Format, w: &[u8], out: &mut [f32]) -> bool {
    let ok = matches!(f, Format::Q8_0 | Format::Q4_0 | Format::Q4_1)
        && w.len() / f.block_bytes() * 32 == out.len()
        && w.len().is_multiple_of(f.block_bytes());
    if !ok {
        return false;
    }
    match path {
        // SAFETY: the path was checked available before any job ran; the
        // block counts of `w` and `out` agree (checked just above).
        Path::Avx512 | Path::Amx => unsafe { dequant_row_avx512(f, w, out) },
        // SAFETY: as above.
        Path::Avx2 => unsafe { dequant_row_avx2(f, w, out) },
        Path::Scalar => return false,
    }
    true
}

/// The 32 quants of a block as two vectors of 16 i32 (elements 0..16,
/// 16..32), before the scale.
// SAFETY: (contract) AVX-512 present and `blk` one whole block of a 32-block format.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn quants16x2(f: Format, blk: &[u8]) -> (__m512i, __m512i) {
    match f {
        Format::Q8_0 => {
            // SAFETY: a Q8_0 block holds 32 quant bytes from offset 2.
            let (a, b) = unsafe {
                (
                    _mm_loadu_si128(blk[2..18].as_ptr().cast()),
                    _mm_loadu_si128(blk[18..34].as_ptr().cast()),
                )
            };
            (_mm512_cvtepi8_epi32(a), _mm512_cvtepi8_epi32(b))
        }
        _ => {
            let off = if f == Format::Q4_0 { 2 } else { 4 };
            // SAFETY: a Q4_0 / Q4_1 block holds 16 nibble bytes from `off`.
            let qs = unsafe { _mm_loadu_si128(blk[off..off + 16].as_ptr().cast()) };
            let mask = _mm_set1_epi8(0x0F);
            let lo = _mm512_cvtepu8_epi32(_mm_and_si128(qs, mask));
            let hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(qs, 4), mask));
            if f == Format::Q4_0 {
                let eight = _mm512_set1_epi32(8);
                (_mm512_sub_epi32(lo, eight), _mm512_sub_epi32(hi, eight))
            } else {
                (lo, hi)
            }
        }
    }
}

// SAFETY: (contract) AVX-512 present; `out` holds 32 f32 per block of `w`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn dequant_row_avx512(f: Format, w: &[u8], out: &mut [f32]) {
    for (blk, o) in w
        .chunks_exact(f.block_bytes())
        .zip(out.chunks_exact_mut(32))
    {
        let d = _mm512_set1_ps(f16_f32(blk, 0));
        // SAFETY: the features are enabled on this fn.
        let (a, b) = unsafe { quants16x2(f, blk) };
        let (a, b) = (_mm512_cvtepi32_ps(a), _mm512_cvtepi32_ps(b));
        let (va, vb) = if f == Format::Q4_1 {
            let m = _mm512_set1_ps(f16_f32(blk, 2));
            (_mm512_fmadd_ps(a, d, m), _mm512_fmadd_ps(b, d, m))
        } else {
            (_mm512_mul_ps(a, d), _mm512_mul_ps(b, d))
        };
        // SAFETY: `o` holds 32 f32: two full 512-bit stores.
        unsafe {
            _mm512_storeu_ps(o.as_mut_ptr(), va);
            _mm512_storeu_ps(o[16..].as_mut_ptr(), vb);
        }
    }
}

// SAFETY: (contract) AVX2, FMA and F16C present; `out` holds 32 f32 per block of `w`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequant_row_avx2(f: Format, w: &[u8], out: &mut [f32]) {
    let mask = _mm_set1_epi8(0x0F);
    for (blk, o) in w
        .chunks_exact(f.block_bytes())
        .zip(out.chunks_exact_mut(32))
    {
        let d = _mm256_set1_ps(super::dequant::f16_at(blk, 0));
        let m = _mm256_set1_ps(if f == Format::Q4_1 {
            super::dequant::f16_at(blk, 2)
        } else {
            0.0
        });
        // Four groups of 8 quants as i32, elements 0..8, 8..16, 16..24, 24..32.
        let groups: [__m256i; 4] = match f {
            Format::Q8_0 => {
                // SAFETY: a Q8_0 block holds 32 quant bytes from offset 2;
                // each load reads 8 of them.
                unsafe {
                    [2, 10, 18, 26].map(|at| {
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64(blk[at..at + 8].as_ptr().cast()))
                    })
                }
            }
            _ => {
                let off = if f == Format::Q4_0 { 2 } else { 4 };
                // SAFETY: 16 nibble bytes from `off`.
                let qs = unsafe { _mm_loadu_si128(blk[off..off + 16].as_ptr().cast()) };
                let lo = _mm_and_si128(qs, mask);
                let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
                let bias = _mm256_set1_epi32(if f == Format::Q4_0 { 8 } else { 0 });
                [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
                    .map(|v| _mm256_sub_epi32(_mm256_cvtepu8_epi32(v), bias))
            }
        };
        for (g, q) in groups.into_iter().enumerate() {
            let q = _mm256_cvtepi32_ps(q);
            let v = if f == Format::Q4_1 {
                _mm256_fmadd_ps(q, d, m)
            } else {
                _mm256_mul_ps(q, d)
            };
            // SAFETY: `o` holds 32 f32; group `g` stores 8 of them.
            unsafe { _mm256_storeu_ps(o[8 * g..].as_mut_ptr(), v) };
        }
    }
}

/// The exact-mode dots of `R` activation rows with `N` weight rows of a
/// 32-element block format, dequantizing in registers: per output the same
/// FMAs in the same lanes and order as `dequant_row` then `dot16` (block
/// `b`'s elements `0..16` then `16..32` are chunks `2b` and `2b + 1`), so
/// the same bits, without the weights' round trip through memory. The
/// `R · N` independent accumulators hide the FMA latency, each weight
/// block is decoded once for the `R` rows and each activation load serves
/// the `N` weight rows. `None` where this path has no fused kernel for the
/// format.
pub(crate) fn fused_tile<const R: usize, const N: usize>(
    path: Path,
    f: Format,
    x: [&[f32]; R],
    w: [&[u8]; N],
) -> Option<[[f32; N]; R]> {
    let k = x[0].len();
    let ok = path == Path::Avx512
        && R * N <= 16
        && matches!(f, Format::Q8_0 | Format::Q4_0 | Format::Q4_1)
        && x.iter().all(|x| x.len() == k)
        && w.iter().all(|w| {
            w.len().is_multiple_of(f.block_bytes()) && w.len() / f.block_bytes() * 32 == k
        });
    // SAFETY: AVX-512 was checked available before any job ran; every `x`
    // row holds exactly 32 f32 per block of every weight row (checked just
    // above).
    ok.then(|| unsafe { fused_tile_avx512(f, x, w) })
}

// SAFETY: (contract) AVX-512 present; every `x` row holds 32 f32 per block of every weight row.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn fused_tile_avx512<const R: usize, const N: usize>(
    f: Format,
    x: [&[f32]; R],
    w: [&[u8]; N],
) -> [[f32; N]; R] {
    let bb = f.block_bytes();
    let mut acc = [[_mm512_setzero_ps(); N]; R];
    for b in 0..x[0].len() / 32 {
        let mut wv = [(_mm512_setzero_ps(), _mm512_setzero_ps()); N];
        for (v, w) in wv.iter_mut().zip(&w) {
            let blk = &w[b * bb..(b + 1) * bb];
            // The next tile's rows follow these in memory (a matrix's rows
            // are contiguous): ask for the same block of the row `N` rows
            // on, so the read of the weights streams instead of stalling on
            // each block's scale. A prefetch never faults, and the address
            // is only computed (`wrapping_add`), never dereferenced.
            _mm_prefetch::<_MM_HINT_T0>(blk.as_ptr().wrapping_add(N * w.len()).cast());
            let d = _mm512_set1_ps(f16_f32(blk, 0));
            // SAFETY: the features are enabled on this fn.
            let (qa, qb) = unsafe { quants16x2(f, blk) };
            let (qa, qb) = (_mm512_cvtepi32_ps(qa), _mm512_cvtepi32_ps(qb));
            *v = if f == Format::Q4_1 {
                let m = _mm512_set1_ps(f16_f32(blk, 2));
                (_mm512_fmadd_ps(qa, d, m), _mm512_fmadd_ps(qb, d, m))
            } else {
                (_mm512_mul_ps(qa, d), _mm512_mul_ps(qb, d))
            };
        }
        for (acc, x) in acc.iter_mut().zip(&x) {
            let xc = &x[b * 32..b * 32 + 32];
            // SAFETY: `xc` holds 32 f32: two full 512-bit loads.
            let (xa, xb) = unsafe {
                (
                    _mm512_loadu_ps(xc.as_ptr()),
                    _mm512_loadu_ps(xc[16..].as_ptr()),
                )
            };
            for (a, (va, vb)) in acc.iter_mut().zip(&wv) {
                *a = _mm512_fmadd_ps(xa, *va, *a);
                *a = _mm512_fmadd_ps(xb, *vb, *a);
            }
        }
    }
    acc.map(|row| {
        row.map(|a| {
            let lo = _mm512_castps512_ps256(a);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
            fold8(_mm256_add_ps(lo, hi))
        })
    })
}

/// The little-endian f16 at `b[i..i + 2]` as f32 (`vcvtph2ps`: exact, as
/// `half`'s conversion).
#[inline]
#[target_feature(enable = "f16c")]
fn f16_f32(b: &[u8], i: usize) -> f32 {
    let h = u16::from_le_bytes([b[i], b[i + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}
