//! Products of a few rows against a weight read where it lies (Section 2
//! §7, Section 4 §5.4 with M ≤ [`MAX_M`]): a decoder's step and a short
//! prompt, `x[M × K] · W[K × N]`, with `W` row-major (`[in, out]`, GPT-2's
//! Conv1D) or transposed (`[out, in]`: PyTorch's `Linear`, a tied LM head).
//!
//! Why a path of its own: at so few rows the product reads every weight
//! float once and does M multiply-adds with it, so it runs at the speed
//! memory streams the weight in. Packing the weight per call (the tile
//! path) reads and writes it once more: a GPT-2-small prompt of 8 tokens
//! took twice as long as with no packing. So a weight's products at so few
//! rows are swept here until it is kept packed ([`crate::kernels::prepack`], from
//! its second call), and always when the cache of kept packings is off
//! (`TC_PACK_CACHE_MB=0`): a decoder then holds no packed copy of its
//! weights and its first step packs nothing, for about a tenth of its
//! steady decoding speed (`matmul::one_matrix` has the figures).
//!
//! A row-major weight: each task sweeps the rows of its column range top to
//! bottom, multiply-adding four or eight rows at a time into accumulators
//! for its `M` output rows that stay in L1 (at most [`ACC_FLOATS`] of
//! them), so the weight is read in long sequential runs. A transposed one:
//! 16 columns at a time, 16 K steps of them loaded as 16 vectors and
//! transposed in registers, accumulators in registers.
//!
//! Numerics: the tile path's, bit for bit. Every output element is the FMA
//! chain `acc = fma(x[i][k], w[k][j], acc)` over one K-block of the tile
//! path's length ([`crate::kernels::matmul::KC`] or its override) in order from
//! zero, written to C after the first block and added into it after the
//! others (`C = C + acc`), as [`crate::kernels::matmul`]'s micro-kernel computes a
//! tile row.
//!
//! x86-64 with AVX-512F only (the module is compiled there alone, and
//! [`available`] checks the feature); elsewhere these products stay on the
//! tile path.

use std::arch::x86_64::*;

use rayon::prelude::*;

use crate::kernels::gemm_common::SendPtr;

/// Most rows of a swept product. Above, a weight is worth packing: the
/// tile path reuses each packed panel across its register tile's 14 rows.
pub(crate) const MAX_M: usize = 8;

/// Accumulator floats of one column chunk (`M` rows × chunk width): 32 KiB
/// of the 48 KiB L1 of the host it was measured on (a Xeon, Emerald
/// Rapids); the weight's lines pass through the rest, prefetched into L2.
/// Interleaved on that host, 8 rows against 40 weights of 768 × 2304:
/// 16 KiB 8.6–11.6 GB/s, 32 KiB 10.7–11.8; at one row the two were alike
/// (issue #15).
const ACC_FLOATS: usize = 8192;

/// How a swept weight lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Unit column stride: rows are contiguous (`[in, out]`, GPT-2's
    /// Conv1D).
    Rows,
    /// Unit row stride: columns are contiguous (a transposed `[out, in]`
    /// weight: PyTorch's `Linear`, a tied LM head).
    Cols,
}

/// Is an `m × k` by `k × n` product with B's strides `(rs, cs)` swept
/// here, and how? `k ≥ 1` (a `k = 0` product is all zeros, the tile
/// path's case).
pub(crate) fn available(m: usize, k: usize, (rs, cs): (usize, usize)) -> Option<Layout> {
    if !(1..=MAX_M).contains(&m) || k == 0 || !enabled() {
        return None;
    }
    match (rs, cs) {
        (_, 1) => Some(Layout::Rows),
        (1, _) => Some(Layout::Cols),
        _ => None,
    }
}

/// AVX-512F here, and not turned off by `TC_MM_SWEEP=0` (for
/// measurements: those products then take the tile path).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::host::avx512() && crate::ctx::Settings::get().mm_sweep)
}

/// A weight read in place: `k × n` floats, `(i, j)` at `ptr + i·rs + j·cs`
/// with `rs` or `cs` equal to 1 ([`Layout`]).
pub(crate) struct Weight {
    /// Row 0, column 0.
    pub ptr: *const f32,
    /// Row stride (floats).
    pub rs: usize,
    /// Column stride (floats).
    pub cs: usize,
    /// Rows.
    pub k: usize,
    /// Columns.
    pub n: usize,
}

/// `c[m × n] = x[m × k] · B` (`x` row by row, C row-major with leading
/// dimension `n`), over K-blocks of `kc` rows; `par` splits the columns
/// across the pool's threads.
///
/// # Safety
/// [`available`]`(m, b.k, (b.rs, b.cs))` is `Some`; `x.len() == m·b.k`; `b` valid for reads of
/// every `(i, j)`, `i < k`, `j < n`; `c` valid for writes of `m·n` floats,
/// not overlapping `x` or `b`, and untouched by anyone else during the call.
// SAFETY: (contract) met by `matmul::swept`, its only caller.
pub(crate) unsafe fn rows(x: &[f32], m: usize, b: &Weight, kc: usize, c: *mut f32, par: bool) {
    assert!(x.len() == m * b.k && kc >= 1, "sweep: operand sizes");
    let nvec = b.n.div_ceil(16);
    let tasks = if par {
        rayon::current_num_threads().clamp(1, nvec)
    } else {
        1
    };
    let (cp, bp) = (SendPtr(c), SendPtr(b.ptr as *mut f32));
    let (rs, cs, k, n) = (b.rs, b.cs, b.k, b.n);
    let run = |t: usize| {
        // The whole `SendPtr`s (Sync), not their raw-pointer fields, which
        // the closure would capture alone.
        #[allow(clippy::redundant_locals)]
        let (cp, bp) = (cp, bp);
        // Task `t`'s columns: a contiguous share of whole vectors.
        let (v0, v1) = (nvec * t / tasks, nvec * (t + 1) / tasks);
        let cols = (v0 * 16, (v1 * 16).min(n));
        let w = Weight {
            ptr: bp.0,
            rs,
            cs,
            k,
            n,
        };
        // SAFETY: columns `cols ⊆ 0..n` of `b`, written by this task alone;
        // `cs == 1` or else `rs == 1` (`available`).
        unsafe {
            if cs == 1 {
                columns(x, m, &w, kc, cols, cp.0);
            } else {
                transposed(x, m, &w, kc, cols, cp.0);
            }
        }
    };
    if tasks > 1 {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// `f::<R>(args)` for the row count `m ∈ 1..=MAX_M` (8 for any larger,
/// which `available` excludes): kernels are generic over their row count
/// so that their per-row loops have constant bounds.
macro_rules! by_rows {
    ($m:expr, $f:ident($($arg:expr),*)) => {
        match $m {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            _ => $f::<8>($($arg),*),
        }
    };
}

/// L1 accumulators, aligned to a cache line.
#[repr(align(64))]
struct Acc([f32; ACC_FLOATS]);

/// C's columns `j0..j1`, chunk by chunk, every K-block, B's rows
/// contiguous ([`Layout::Rows`]).
///
/// # Safety
/// As [`rows`]', with `j0 ≤ j1 ≤ n` and `b.cs == 1`.
// SAFETY: (contract) met by `rows`, its only caller.
unsafe fn columns(
    x: &[f32],
    m: usize,
    b: &Weight,
    kc: usize,
    (j0, j1): (usize, usize),
    c: *mut f32,
) {
    // No wider than the columns: each K-block clears `m × width`
    // accumulators, and a narrow product (an attention head's `p · v`, 64
    // columns) cleared all 32 KiB per block.
    let width = (ACC_FLOATS / m / 16 * 16).min((j1 - j0).div_ceil(16) * 16);
    // This thread's accumulators, kept across calls: zeroing 32 KiB per
    // call was most of a small product's time (the values left in them
    // are never read: each K-block clears what it uses).
    thread_local! {
        static ACC: std::cell::RefCell<Box<Acc>> =
            std::cell::RefCell::new(Box::new(Acc([0.0; ACC_FLOATS])));
    }
    ACC.with_borrow_mut(|acc| {
        let mut j = j0;
        while j < j1 {
            let cols = width.min(j1 - j);
            for pc in (0..b.k).step_by(kc) {
                let blk = Block {
                    pc,
                    rows: kc.min(b.k - pc),
                    j,
                    cols,
                    width,
                };
                // SAFETY: rows `pc..pc + rows ⊆ 0..k` and columns `j..j + cols
                // ⊆ j0..j1` of `b` and C (the contract); `m·width ≤
                // ACC_FLOATS`; AVX-512F by `available`.
                unsafe { by_rows!(m, block(x, b, &blk, &mut acc.0, c)) }
            }
            j += cols;
        }
    });
}

/// One K-block (`rows` rows from `pc`) of one column chunk (`cols` columns
/// from `j`; accumulator row stride `width`).
struct Block {
    pc: usize,
    rows: usize,
    j: usize,
    cols: usize,
    width: usize,
}

/// Weight rows multiply-added per pass over the accumulators of `rows`
/// output rows: eight for one row, four for more (as many streams through
/// memory, and that fraction of the accumulator loads and stores). Each
/// line is prefetched into L2 one pass ahead (the same columns `step`
/// rows down). Measured on that Xeon host, interleaved, one row against 40
/// weights of 768 × 2304 (issue #15): four rows with a prefetch 1 KiB
/// along the row 11.1–13.0 GB/s, four with this prefetch 12.0–13.9, eight
/// 12.2–14.2, against 12.7–15.3 for the kept packing's [`crate::kernels::gemv`]; 8
/// output rows: four 8.4–11.6, eight 7.7–10.2, the tile path on a kept
/// packing 6.9–7.7.
const fn step(rows: usize) -> usize {
    if rows == 1 {
        8
    } else {
        4
    }
}

/// One K-block's sums `s` into C's lanes `m` at `dst`: written after the
/// first K-block, added after the others (`C = C + acc`, the tile path's
/// order).
///
/// # Safety
/// AVX-512F available; the lanes `m` at `dst` valid for reads and writes.
#[target_feature(enable = "avx512f")]
#[inline]
// SAFETY: (contract) met by `block` and `cols16`, under `available`.
unsafe fn write_c(dst: *mut f32, m: __mmask16, s: __m512, accum: bool) {
    // SAFETY: the masked lanes at `dst` (the contract).
    unsafe {
        let s = if accum {
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), s)
        } else {
            s
        };
        _mm512_mask_storeu_ps(dst, m, s);
    }
}

/// The lane mask of vector `v` of a `cols`-column chunk.
fn lanes(v: usize, cols: usize) -> __mmask16 {
    let left = cols - v * 16;
    if left >= 16 {
        0xffff
    } else {
        (1u16 << left) - 1
    }
}

/// `R` rows of one K-block of one column chunk, written (after the first
/// K-block: added) to C.
///
/// # Safety
/// AVX-512F available; `R ≤ MAX_M`, `x.len() == R·b.k`; `R·blk.width ≤
/// acc.len()`, `blk.cols ≤ blk.width`; rows `blk.pc..blk.pc + blk.rows ⊆
/// 0..k` and columns `blk.j..blk.j + blk.cols ⊆ 0..n` of `b` readable and
/// of C (`R × n`, row-major) writable.
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `columns`, under `rows`' `available`.
unsafe fn block<const R: usize>(x: &[f32], b: &Weight, blk: &Block, acc: &mut [f32], c: *mut f32) {
    let (nvec, w) = (blk.cols.div_ceil(16), blk.width);
    assert!(
        R * w <= acc.len() && blk.cols <= w,
        "sweep: accumulator size"
    );
    acc[..R * w].fill(0.0);
    let ap = acc.as_mut_ptr();
    let end = blk.pc + blk.rows;
    let mut kk = blk.pc;
    while kk < end {
        let u = step(R).min(end - kk);
        // SAFETY: rows `kk..kk + u ⊆ pc..pc + rows`; `R·w ≤ acc.len()`.
        unsafe {
            if u == 8 {
                rows_step::<R, 8>(x, b, blk, kk, ap);
            } else if u == 4 {
                rows_step::<R, 4>(x, b, blk, kk, ap);
            } else {
                for r in kk..end {
                    rows_step::<R, 1>(x, b, blk, r, ap);
                }
            }
        }
        kk += u;
    }
    for i in 0..R {
        for v in 0..nvec {
            let m = lanes(v, blk.cols);
            // SAFETY: C's row `i < R`, columns `j + 16v ..` under the mask,
            // inside `j..j + cols ⊆ 0..n` (the contract); `acc` as above.
            unsafe {
                let s = _mm512_load_ps(ap.add(i * w + v * 16));
                write_c(c.add(i * b.n + blk.j + v * 16), m, s, blk.pc > 0);
            }
        }
    }
}

/// Weight rows `kk..kk + U` of one K-block of one column chunk,
/// multiply-added into the `R` accumulator rows at `ap`, row by row in
/// order for every element.
///
/// # Safety
/// As [`block`]'s, with rows `kk..kk + U` inside the K-block and `ap` its
/// accumulators.
#[target_feature(enable = "avx512f")]
#[inline]
// SAFETY: (contract) met by `block`, its only caller.
unsafe fn rows_step<const R: usize, const U: usize>(
    x: &[f32],
    b: &Weight,
    blk: &Block,
    kk: usize,
    ap: *mut f32,
) {
    let w = blk.width;
    // Plain loops with constant bounds, not `array::from_fn`: a closure
    // there is not inlined into this AVX-512 function (it lacks the
    // feature), and every vector went through memory.
    let mut xv = [[_mm512_setzero_ps(); U]; R];
    for (i, xi) in xv.iter_mut().enumerate() {
        for (u, v) in xi.iter_mut().enumerate() {
            *v = _mm512_set1_ps(x[i * b.k + kk + u]);
        }
    }
    let mut row = [b.ptr; U];
    for (u, r) in row.iter_mut().enumerate() {
        // SAFETY: row `kk + u < k`, column `j < n` (the contract).
        *r = unsafe { b.ptr.add((kk + u) * b.rs + blk.j) };
    }
    for v in 0..blk.cols.div_ceil(16) {
        let m = lanes(v, blk.cols);
        // SAFETY: the masked lanes are columns `j + 16v .. j + cols` of
        // readable rows; `acc` holds `R` rows of `w ≥ 16·nvec` floats. The
        // prefetch address (`U` rows down) may lie past the weight (a hint,
        // never dereferenced): wrapping arithmetic.
        unsafe {
            let mut bv = [_mm512_setzero_ps(); U];
            for (u, bu) in bv.iter_mut().enumerate() {
                _mm_prefetch::<_MM_HINT_T1>(row[u].wrapping_add(v * 16 + U * b.rs).cast::<i8>());
                *bu = _mm512_maskz_loadu_ps(m, row[u].add(v * 16));
            }
            for (i, xi) in xv.iter().enumerate() {
                let a = ap.add(i * w + v * 16);
                let mut s = _mm512_load_ps(a);
                for u in 0..U {
                    s = _mm512_fmadd_ps(xi[u], bv[u], s);
                }
                _mm512_store_ps(a, s);
            }
        }
    }
}

/// C's columns `j0..j1`, 16 at a time, every K-block, B's columns
/// contiguous ([`Layout::Cols`]): 16 columns × 16 rows of B are loaded as
/// 16 vectors along K and transposed in registers, so each FMA still takes
/// one K step for 16 columns, in the order of the tile path's chain.
///
/// # Safety
/// As [`rows`]', with `j0 ≤ j1 ≤ n` and `b.rs == 1`.
// SAFETY: (contract) met by `rows`, its only caller.
unsafe fn transposed(
    x: &[f32],
    m: usize,
    b: &Weight,
    kc: usize,
    (j0, j1): (usize, usize),
    c: *mut f32,
) {
    for j in (j0..j1).step_by(16) {
        for pc in (0..b.k).step_by(kc) {
            let blk = Block {
                pc,
                rows: kc.min(b.k - pc),
                j,
                cols: 16.min(j1 - j),
                width: 16,
            };
            // SAFETY: rows `pc..pc + rows ⊆ 0..k` and columns `j..j + cols
            // ⊆ j0..j1` of `b` and C (the contract); AVX-512F by
            // `available`.
            unsafe { by_rows!(m, cols16(x, b, &blk, c)) }
        }
    }
}

/// `R` rows of one K-block of 16 columns (`blk.cols` of them real), B's
/// columns contiguous; accumulators in registers, written (after the first
/// K-block: added) to C.
///
/// # Safety
/// AVX-512F available; `R ≤ MAX_M`, `x.len() == R·b.k`; `blk.cols ≤ 16`;
/// `b.rs == 1`; rows `blk.pc..blk.pc + blk.rows ⊆ 0..k` and columns
/// `blk.j..blk.j + blk.cols ⊆ 0..n` of `b` readable and of C (`R × n`,
/// row-major) writable.
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `transposed`, under `rows`' `available`.
unsafe fn cols16<const R: usize>(x: &[f32], b: &Weight, blk: &Block, c: *mut f32) {
    let mut acc = [_mm512_setzero_ps(); R];
    let end = blk.pc + blk.rows;
    let mut k0 = blk.pc;
    while k0 < end {
        let kn = 16.min(end - k0);
        // B's rows `k0..k0 + kn` of the block's 16 columns (the last
        // `16 − cols` zero). Loaded here, by a loop with a constant bound
        // for a whole group, so the 16 vectors stay in registers: through an
        // AVX-512 function returning them, or `array::from_fn` (whose
        // closure lacks the feature), each went through memory.
        let mask = lanes(0, kn);
        let mut t = [_mm512_setzero_ps(); 16];
        let load = |r: usize| {
            // SAFETY: column `j + r < j + cols ≤ n`, rows `k0..k0 + kn ⊆ 0..k`
            // under the mask, contiguous (`rs == 1`): readable (the contract).
            // The prefetch (the line after) may lie past the weight (a hint,
            // never dereferenced): wrapping arithmetic.
            unsafe {
                let col = b.ptr.add((blk.j + r) * b.cs + k0);
                _mm_prefetch::<_MM_HINT_T0>(col.wrapping_add(64).cast::<i8>());
                _mm512_maskz_loadu_ps(mask, col)
            }
        };
        if blk.cols == 16 {
            for (r, v) in t.iter_mut().enumerate() {
                *v = load(r);
            }
        } else {
            for (r, v) in t.iter_mut().enumerate().take(blk.cols) {
                *v = load(r);
            }
        }
        // SAFETY: AVX-512F (the contract).
        let t = unsafe { transpose16_regs(t) };
        // Lane `r` of `t[i]` is B's `(k0 + i, j + r)`: one K step for the 16
        // columns, K steps in order. A whole tile's loops have constant
        // bounds, so the accumulators stay in registers.
        if kn == 16 {
            let mut xs: [&[f32]; R] = [&[]; R];
            for (r, xr) in xs.iter_mut().enumerate() {
                *xr = &x[r * b.k + k0..r * b.k + k0 + 16];
            }
            for (i, ti) in t.iter().enumerate() {
                for (a, xr) in acc.iter_mut().zip(&xs) {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(xr[i]), *ti, *a);
                }
            }
        } else {
            for (i, ti) in t.iter().enumerate().take(kn) {
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(x[r * b.k + k0 + i]), *ti, *a);
                }
            }
        }
        k0 += kn;
    }
    let m = lanes(0, blk.cols);
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: C's row `r < R`, columns `j..j + cols ⊆ 0..n` under the
        // mask (the contract).
        unsafe { write_c(c.add(r * b.n + blk.j), m, *a, blk.pc > 0) };
    }
}

/// The 16 × 16 transpose of 16 rows held in registers (unpack, 64-bit
/// unpack, two 128-bit lane shuffles): out row `i` lane `c` is in row `c`
/// lane `i`.
#[target_feature(enable = "avx512f")]
#[inline]
// SAFETY: (contract) AVX-512F must be available: met by its callers,
// themselves `avx512f` functions that `matmul::avx512()` or [`available`]
// gate.
pub(crate) unsafe fn transpose16_regs(
    mut r: [std::arch::x86_64::__m512; 16],
) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let pd = _mm512_castps_pd;
    let ps = _mm512_castpd_ps;
    for g in 0..4 {
        let b = 4 * g;
        r[b] = ps(_mm512_unpacklo_pd(pd(t[b]), pd(t[b + 2])));
        r[b + 1] = ps(_mm512_unpackhi_pd(pd(t[b]), pd(t[b + 2])));
        r[b + 2] = ps(_mm512_unpacklo_pd(pd(t[b + 1]), pd(t[b + 3])));
        r[b + 3] = ps(_mm512_unpackhi_pd(pd(t[b + 1]), pd(t[b + 3])));
    }
    for h in 0..2 {
        let b = 8 * h;
        for j in 0..4 {
            t[b + j] = _mm512_shuffle_f32x4::<0x88>(r[b + j], r[b + 4 + j]);
            t[b + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(r[b + j], r[b + 4 + j]);
        }
    }
    for j in 0..8 {
        r[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]);
        r[8 + j] = _mm512_shuffle_f32x4::<0xdd>(t[j], t[8 + j]);
    }
    r
}
