//! Products of a few rows against a packed weight (Section 2 §7, Section
//! 4 §5.4 with M ≤ [`MAX_M`]): a decoder's step (a row per sequence),
//! `x[M × K] · W[K × N]` with `W` kept packed across calls
//! ([`crate::kernels::matmul::PackedB`]). Since a row-major weight is read in place
//! at so few rows until it is kept ([`crate::kernels::sweep`]), what comes here is a
//! kept weight: a tied LM head, a PyTorch-layout `Linear`, GPT-2's Conv1D
//! weights from their second call on.
//!
//! Why a path of its own: at so few rows the product reads every weight
//! float once and does M multiply-adds with it, so it runs at the speed
//! memory streams the weight in (GPT-2-small decoding reads 500 MB per
//! token). The register-tile kernel walks one packed panel at a time with
//! A packed per call and 14 rows of FMAs whatever M is. On the Xeon host
//! one stream was kept at 11 GB/s by its prefetchers, four panels side by
//! side (four streams, with a software prefetch a kilobyte ahead in each)
//! at 14–15 GB/s (issue #15, measured in one process, interleaved). On the
//! AMD EPYC (Zen 4) host the software prefetch hurt ([`ahead`]), and at 2
//! to 4 rows this path took half to two thirds of the tile path's time
//! ([`MAX_M`]).
//!
//! Numerics: the same as the tile path on the same packing, bit for bit.
//! Every output element is the FMA chain `acc = fma(x[i][k], w[k][j],
//! acc)` over one K-block in order from zero, added into C after the first
//! block (`C = C + acc`), exactly as [`crate::kernels::matmul`]'s micro-kernel
//! computes a tile row.
//!
//! x86-64 only (the module is compiled there alone); elsewhere these
//! products stay on the tile path.

use rayon::prelude::*;

use crate::kernels::gemm_common::SendPtr;

/// Most rows of a product here. Measured on the AMD EPYC (Zen 4) host, 1
/// thread, a kept 2048 × 8192 weight (64 MiB), four alternating runs each,
/// fastest per-call medians, this path against the tile path: 1 row 3.20
/// against 3.37 ms, 2 rows 2.48 / 5.19, 3 rows 2.41 / 5.51, 4 rows 3.51 /
/// 5.03, 6 rows 4.27 / 4.69, 8 rows 5.29 / 3.93. From 6 rows on the tile
/// path's register tile, which reuses each weight vector across 14 rows,
/// is as fast or faster.
pub(crate) const MAX_M: usize = 4;

/// Prefetch distance within a panel, in floats, where prefetching is on
/// (1 KiB: the distance that measured best at four streams on an Intel
/// Xeon, Emerald Rapids).
const AHEAD: usize = 256;

/// This host's prefetch distance in floats, 0 for none: `TC_GEMV_PF` if
/// set, else none on AMD and [`AHEAD`] elsewhere. On the AMD EPYC (Zen 4)
/// host the software prefetch halved what its hardware prefetchers
/// streamed: a C model of [`group`]'s four streams read 26.2 GB/s on one
/// core without it and 16.8 with it, and GPT-2-small decoding (1 thread,
/// 64 tokens, alternating runs) went from 30.5–33.3 to 39.1–40.0
/// tokens/s when it was dropped (2 threads: 35.5–37.8 to 43.5–48.0).
fn ahead() -> usize {
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        crate::ctx::Settings::get()
            .gemv_ahead
            .unwrap_or(if crate::host::amd() { 0 } else { AHEAD })
    })
}

/// Are kept packings advised onto transparent huge pages: `TC_PACK_HUGE`
/// (`0` or `1`) if set, else on AMD only, with [`ahead`]'s prefetch off
/// there. On the Xeon host, with the prefetch, four panels side by side
/// (addresses a multiple of 32 KiB apart) land in unrelated L2 sets on 4
/// KiB pages but in the same sets on one physically contiguous huge page:
/// GPT-2 decoding measured 20–24 tokens/s without the advice and 16–19
/// with it. On the AMD EPYC (Zen 4) host, without the prefetch, huge pages
/// spare the streams a TLB miss every 4 KiB: GPT-2-small's tied LM head
/// (per-call medians of four alternating pairs of runs) read 19.6–24.1
/// GB/s on 4 KiB pages and 21.8–27.6 on huge pages at 1 thread (three
/// pairs of four faster), 27.9–38.7 against 31.4–44.4 at 2 (all four).
///
/// `Some(force)` when they are: `force` (`TC_PACK_HUGE=1`) keeps the advice
/// even where [`tc_runtime::huge`]'s probe finds huge pages dear to fault
/// (3–4 s of GPT-2-small warm-up on that AMD VM, against 0.4 s).
pub(crate) fn huge_packings() -> Option<bool> {
    static H: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *H.get_or_init(|| match crate::ctx::Settings::get().pack_huge {
        Some(false) => None,
        Some(true) => Some(true),
        None => crate::host::amd().then_some(false),
    })
}

/// Fewest weight floats of a one-row product split across threads inside a
/// [`crate::team::session`] (where the other workers are awake): 2^16, a
/// quarter MiB. The product is bound by memory, not arithmetic, so the
/// GEMM's threshold in multiply-adds ([`crate::kernels::matmul::splits`]: 2^20)
/// kept a 768 × 768 projection (8% of a GPT-2 layer's bytes) on one core.
const PAR_MIN_FLOATS: usize = 1 << 16;

/// Does a one-row product over a `k × n` weight split across threads
/// under `ctx` (only inside a [`crate::team::session`])?
pub(crate) fn splits(ctx: &crate::ctx::ExecCtx, k: usize, n: usize) -> bool {
    ctx.session && k.saturating_mul(n) >= PAR_MIN_FLOATS
}

/// A packed weight in the tile path's layout (`matmul::PackedB`, which
/// lends it): every K-block's `nr`-column panels (zero past `n`), block
/// after block, each panel `rows × nr` floats row by row.
pub(crate) struct Panels<'a> {
    /// The packing.
    pub data: &'a [f32],
    /// Rows of the operand.
    pub k: usize,
    /// Columns of the operand.
    pub n: usize,
    /// Rows per K-block.
    pub kc: usize,
    /// Columns per panel.
    pub nr: usize,
}

impl Panels<'_> {
    /// Panels `q..q + g` of the K-block starting at row `pc` (adjacent:
    /// `g` × that block's rows × `nr` floats).
    fn group(&self, pc: usize, q: usize, g: usize) -> &[f32] {
        let npanels = self.n.div_ceil(self.nr);
        let kcb = self.kc.min(self.k - pc);
        let off = pc * npanels * self.nr + q * kcb * self.nr;
        &self.data[off..off + g * kcb * self.nr]
    }
}

/// Can [`packed_row`] run here (AVX-512F, and panels of the 32 columns it
/// is written for)?
pub(crate) fn available(nr: usize) -> bool {
    nr == 32 && crate::host::avx512()
}

/// `c[m × n] = x · B` for `B` packed (`k × n`; C row-major with leading
/// dimension `n`), with `x` given K-major: element `(i, kk)` of the `m × k`
/// operand at `x[kk·m + i]`, so the `m` values of one K step are adjacent.
/// `par` splits the columns across the pool's threads.
///
/// # Safety
/// [`available`]`(b.nr)`; `1 ≤ m ≤ MAX_M`; `b.data` holds the whole
/// packing; `c` valid for writes of `m·b.n` floats, not overlapping `x` or
/// `b`, and untouched by anyone else during the call.
// SAFETY: (contract) met by `matmul::sgemm_packed`, its only caller.
pub(crate) unsafe fn packed_rows(x: &[f32], m: usize, b: &Panels, c: *mut f32, par: bool) {
    assert!(
        (1..=MAX_M).contains(&m) && x.len() == m * b.k,
        "gemv: operand sizes"
    );
    // Panels side by side per row count: four at one row (as measured),
    // and as many as keep the `2·G·R` accumulators, the `R` broadcasts and
    // two loads within AVX-512's 32 registers at more.
    // SAFETY: `R == m` in every arm; the rest is this function's contract.
    unsafe {
        match m {
            1 => split::<4, 1>(x, b, c, par),
            2 => split::<4, 2>(x, b, c, par),
            3 => split::<4, 3>(x, b, c, par),
            _ => split::<2, 4>(x, b, c, par),
        }
    }
}

/// [`packed_rows`] for `R` rows, `G` panels side by side: the columns in
/// contiguous shares of whole groups, one per task.
///
/// # Safety
/// As [`packed_rows`]', with `m == R`.
// SAFETY: (contract) met by `packed_rows`, its only caller.
unsafe fn split<const G: usize, const R: usize>(x: &[f32], b: &Panels, c: *mut f32, par: bool) {
    let npanels = b.n.div_ceil(b.nr);
    let groups = npanels.div_ceil(G);
    let tasks = if par {
        rayon::current_num_threads().clamp(1, groups)
    } else {
        1
    };
    let cp = SendPtr(c);
    let run = |t: usize| {
        // The whole `SendPtr` (Sync), not its raw-pointer field, which the
        // closure would capture alone.
        #[allow(clippy::redundant_locals)]
        let cp = cp;
        // Task `t`'s groups: a contiguous share, so its columns are too.
        let (g0, g1) = (groups * t / tasks, groups * (t + 1) / tasks);
        let (q0, q1) = (g0 * G, (g1 * G).min(npanels));
        // SAFETY: panels `q0..q1 ⊆ 0..npanels` of `b`; this task alone
        // writes C's columns `q0·nr..min(q1·nr, n)` of every row, inside
        // C's `R × n`.
        unsafe { columns::<G, R>(x, b, (q0, q1), cp.0) };
    };
    if tasks > 1 {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// C's columns of panels `q0..q1` in all `R` rows, over every K-block of
/// `b`.
///
/// # Safety
/// As [`packed_rows`]', with `m == R`, `q0 ≤ q1 ≤` the panel count.
// SAFETY: (contract) met by `split`, its only caller.
unsafe fn columns<const G: usize, const R: usize>(
    x: &[f32],
    b: &Panels,
    (q0, q1): (usize, usize),
    c: *mut f32,
) {
    let (k, n, kc, nr) = (b.k, b.n, b.kc, b.nr);
    for pc in (0..k).step_by(kc) {
        let rows = kc.min(k - pc);
        let xs = &x[pc * R..(pc + rows) * R];
        let mut q = q0;
        while q < q1 {
            let g = G.min(q1 - q);
            let panels = b.group(pc, q, g);
            let ncols = (n - q * nr).min(g * nr);
            let out = Out {
                // In bounds: `q·nr < n` (`q < q1 ≤` the panel count).
                ptr: c.wrapping_add(q * nr),
                ld: n,
                ncols,
                accum: pc > 0,
            };
            // SAFETY: `panels` holds `g` whole panels of the K-block (`xs`
            // has `R` values per row of it); C's columns `q·nr..q·nr +
            // ncols` of rows `0..R` are inside C (`ncols ≤ n − q·nr`) and
            // this task's.
            unsafe {
                if g == G {
                    group::<G, R>(xs, panels, &out);
                } else {
                    for i in 0..g {
                        let one = &panels[i * rows * nr..(i + 1) * rows * nr];
                        let part = Out {
                            ptr: out.ptr.wrapping_add(i * nr),
                            ncols: ncols.saturating_sub(i * nr).min(nr),
                            ..out
                        };
                        group::<1, R>(xs, one, &part);
                    }
                }
            }
            q += g;
        }
    }
}

/// Where a panel group's sums go: `ncols` columns from `ptr` in each row,
/// rows `ld` floats apart; written, or added (`accum`) after the first
/// K-block.
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    ld: usize,
    ncols: usize,
    accum: bool,
}

/// `G` adjacent 32-column panels of one K-block (`panels`: `G` × `rows`
/// rows × 32 floats) times the `R` rows of `xs` (K-major: `rows × R`),
/// written (or added) to `out`.
///
/// # Safety
/// AVX-512F available ([`available`]); `panels.len() == G·32·rows` for
/// `rows = xs.len() / R`; `out.ncols ≤ 32·G`, and the first `out.ncols`
/// floats of rows `0..R` at `out` valid for reads and writes.
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `columns`, under `packed_rows`' `available`.
unsafe fn group<const G: usize, const R: usize>(xs: &[f32], panels: &[f32], out: &Out) {
    use std::arch::x86_64::*;
    let rows = xs.len() / R;
    // The loads below rely on it: checked, not assumed (once per group of
    // `rows` × `G` vector loads).
    assert!(
        xs.len() == rows * R && panels.len() == G * 32 * rows,
        "gemv: panel group size"
    );
    let base = panels.as_ptr();
    let pf = ahead();
    let mut acc = [[[_mm512_setzero_ps(); 2]; R]; G];
    for (kk, xk) in xs.chunks_exact(R).enumerate() {
        let mut xv = [_mm512_setzero_ps(); R];
        for (v, &xi) in xv.iter_mut().zip(xk) {
            *v = _mm512_set1_ps(xi);
        }
        for (g, a) in acc.iter_mut().enumerate() {
            let off = (g * rows + kk) * 32;
            // The prefetch address may lie past the slice (a hint, never
            // dereferenced): computed with wrapping arithmetic. `pf` is
            // fixed per process, so the branch always goes one way.
            if pf > 0 {
                _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(off + pf).cast::<i8>());
            }
            // SAFETY: `off + 32 ≤ G·32·rows = panels.len()` (`g < G`,
            // `kk < rows`; the length asserted above).
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_ps(base.add(off)),
                    _mm512_loadu_ps(base.add(off + 16)),
                )
            };
            for (ar, &x) in a.iter_mut().zip(&xv) {
                ar[0] = _mm512_fmadd_ps(x, b0, ar[0]);
                ar[1] = _mm512_fmadd_ps(x, b1, ar[1]);
            }
        }
    }
    for (g, a) in acc.iter().enumerate() {
        for (i, ar) in a.iter().enumerate() {
            for (h, &v) in ar.iter().enumerate() {
                let col = g * 32 + h * 16;
                if col >= out.ncols {
                    break;
                }
                let m: __mmask16 = if out.ncols - col >= 16 {
                    0xffff
                } else {
                    (1u16 << (out.ncols - col)) - 1
                };
                // SAFETY: the masked lanes are columns `col..min(col + 16,
                // ncols)` of row `i < R` at `out`, valid by the contract.
                unsafe {
                    let dst = out.ptr.add(i * out.ld + col);
                    let v = if out.accum {
                        _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), v)
                    } else {
                        v
                    };
                    _mm512_mask_storeu_ps(dst, m, v);
                }
            }
        }
    }
}
