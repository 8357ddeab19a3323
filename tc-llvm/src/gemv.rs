//! One-row products against a packed weight (Section 2 §7, Section 4 §5.4
//! with M = 1): a decoder's step, `x[1 × K] · W[K × N]` with `W` kept
//! packed across calls ([`crate::matmul::PackedB`]). Since a row-major
//! weight is read in place at so few rows ([`crate::sweep`]), what comes
//! here is a kept transposed one (a tied LM head, a PyTorch-layout
//! `Linear`), or any weight a larger product packed and kept first.
//!
//! Why a path of its own: at M = 1 the product reads every weight once and
//! does one multiply-add per float read, so it runs at the speed memory
//! streams the weight in (GPT-2-small decoding reads 500 MB per token).
//! The register-tile kernel walks one packed panel at a time: one stream,
//! which this host's prefetchers kept at 11 GB/s. Four panels side by side
//! (four streams, with a software prefetch a kilobyte ahead in each) read
//! the same bytes at 14–15 GB/s (issue #15, measured in one process,
//! interleaved).
//!
//! Numerics: the same as the tile path on the same packing, bit for bit.
//! Every output element is the FMA chain `acc = fma(x[k], w[k][j], acc)`
//! over one K-block in order from zero, added into C after the first block
//! (`C = C + acc`), exactly as [`crate::matmul`]'s micro-kernel computes
//! row 0 of a tile.
//!
//! x86-64 only (the module is compiled there alone); elsewhere M = 1 stays
//! on the tile path.

use rayon::prelude::*;

use crate::gemm_common::SendPtr;

/// Panels computed side by side.
const GROUP: usize = 4;

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
        std::env::var("TC_GEMV_PF")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if crate::host::amd() { 0 } else { AHEAD })
    })
}

/// Fewest weight floats of a one-row product split across threads inside a
/// [`crate::team::session`] (where the other workers are awake): 2^16, a
/// quarter MiB. The product is bound by memory, not arithmetic, so the
/// GEMM's threshold in multiply-adds ([`crate::matmul::splits`]: 2^20)
/// kept a 768 × 768 projection (8% of a GPT-2 layer's bytes) on one core.
const PAR_MIN_FLOATS: usize = 1 << 16;

/// Does a one-row product over a `k × n` weight split across threads now
/// (`in_session`: on a [`crate::team::session`]'s thread)?
pub(crate) fn splits(k: usize, n: usize, in_session: bool) -> bool {
    in_session && k.saturating_mul(n) >= PAR_MIN_FLOATS
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
    nr == 32 && std::arch::is_x86_feature_detected!("avx512f")
}

/// `c[0..n] = x · B` for `B` packed (`k × n`, `x` of `k` floats); `par`
/// splits the columns across the pool's threads.
///
/// # Safety
/// [`available`]`(b.nr)`; `b.data` holds the whole packing; `c` valid for
/// writes of `b.n` floats, not overlapping `x` or `b`, and untouched by
/// anyone else during the call.
// SAFETY: (contract) met by `matmul::sgemm_packed`, its only caller.
pub(crate) unsafe fn packed_row(x: &[f32], b: &Panels, c: *mut f32, par: bool) {
    let npanels = b.n.div_ceil(b.nr);
    let groups = npanels.div_ceil(GROUP);
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
        let (q0, q1) = (g0 * GROUP, (g1 * GROUP).min(npanels));
        // SAFETY: panels `q0..q1 ⊆ 0..npanels` of `b`; this task alone
        // writes C's columns `q0·nr..min(q1·nr, n)`, inside C's `n`.
        unsafe { columns(x, b, (q0, q1), cp.0) };
    };
    if tasks > 1 {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// C's columns of panels `q0..q1`, over every K-block of `b`.
///
/// # Safety
/// As [`packed_row`]'s, with `q0 ≤ q1 ≤` the panel count and `x` of `b.k`
/// floats.
// SAFETY: (contract) met by `packed_row`, its only caller.
unsafe fn columns(x: &[f32], b: &Panels, (q0, q1): (usize, usize), c: *mut f32) {
    let (k, n, kc, nr) = (b.k, b.n, b.kc, b.nr);
    for pc in (0..k).step_by(kc) {
        let mut q = q0;
        while q < q1 {
            let g = GROUP.min(q1 - q);
            let panels = b.group(pc, q, g);
            let ncols = (n - q * nr).min(g * nr);
            let xs = &x[pc..pc + kc.min(k - pc)];
            // SAFETY: `panels` holds `g` whole panels of the K-block (`xs`
            // has its row count); C's columns `q·nr..q·nr + ncols` are
            // inside C (`ncols ≤ n − q·nr`) and this task's.
            unsafe {
                let out = c.add(q * nr);
                if g == GROUP {
                    group::<GROUP>(xs, panels, out, ncols, pc > 0);
                } else {
                    for i in 0..g {
                        let one = &panels[i * xs.len() * nr..(i + 1) * xs.len() * nr];
                        let cols = ncols.saturating_sub(i * nr).min(nr);
                        group::<1>(xs, one, out.add(i * nr), cols, pc > 0);
                    }
                }
            }
            q += g;
        }
    }
}

/// `G` adjacent 32-column panels of one K-block (`panels`: `G` × `xs.len()`
/// rows × 32 floats) times `xs`, written (`accum`: added) to the first
/// `ncols` floats at `out`.
///
/// # Safety
/// AVX-512F available ([`available`]); `panels.len() == G·32·xs.len()`;
/// `out` valid for reads and writes of `ncols ≤ 32·G` floats.
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `columns`, under `packed_row`'s `available`.
unsafe fn group<const G: usize>(
    xs: &[f32],
    panels: &[f32],
    out: *mut f32,
    ncols: usize,
    accum: bool,
) {
    use std::arch::x86_64::*;
    let rows = xs.len();
    // The loads below rely on it: checked, not assumed (once per group of
    // `rows` × `G` vector loads).
    assert_eq!(panels.len(), G * 32 * rows, "gemv: panel group size");
    let base = panels.as_ptr();
    let pf = ahead();
    let mut acc = [[_mm512_setzero_ps(); 2]; G];
    for (kk, &xk) in xs.iter().enumerate() {
        let xv = _mm512_set1_ps(xk);
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
            a[0] = _mm512_fmadd_ps(xv, b0, a[0]);
            a[1] = _mm512_fmadd_ps(xv, b1, a[1]);
        }
    }
    for (g, a) in acc.iter().enumerate() {
        for (h, &v) in a.iter().enumerate() {
            let col = g * 32 + h * 16;
            if col >= ncols {
                return;
            }
            let m: __mmask16 = if ncols - col >= 16 {
                0xffff
            } else {
                (1u16 << (ncols - col)) - 1
            };
            // SAFETY: the masked lanes are columns `col..min(col + 16,
            // ncols)` at `out`, valid by the contract.
            unsafe {
                let dst = out.add(col);
                let v = if accum {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), v)
                } else {
                    v
                };
                _mm512_mask_storeu_ps(dst, m, v);
            }
        }
    }
}
