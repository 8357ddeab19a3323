//! Matmul (Section 2 §7, Section 4 §5.4): packing, cache tiling and a
//! register-blocked micro-kernel generated as LLVM IR.
//!
//! The micro-kernel computes an `MR × NR` tile of C (14 × 32 on AVX-512, held
//! in 28 `<16 x float>` accumulators; 14 × 16 otherwise) from a packed A
//! micro-panel (`kc × MR`, column by column) and a packed B micro-panel
//! (`kc × NR`, row by row) with one broadcast of A and `NR/VW` vector FMAs per
//! row of the tile and step of k. It is emitted once per process as IR text
//! (`llvm.fma.v16f32`) and JIT-compiled like the other kernels. The loops
//! around it follow the BLIS order: `jc` (NC columns, B block in L3) →
//! `pc` (KC of the contraction, pack B) → `ic` (MC rows, pack A into L2,
//! split across threads) → `jr` → `ir` (micro-kernel, B micro-panel in L1).
//!
//! Numerics: f32 accumulation with FMA, blocked along K in KC chunks: the
//! sum order differs from the interpreter's sequential one (Section 4 §6:
//! the order is unspecified). Narrow floats are widened to f32 while packing
//! and rounded once at the end (Section 2 §3). Integer matmul wraps (i64
//! accumulation in the interpreter, wrapped to the dtype) is bit-exact and
//! runs on its own packed IR micro-kernels: [`crate::kernels::matmul_int`].

use crate::kernels::gemm_common::{
    blocked, compile_micro, kernel_set, matmul_dims, table, table_kernel, tile_into_c,
    ukernel_text, ALayout, Cols, Family, Kernels, Micro, SendPtr, Table, Tile, UkrSpec,
};
pub use crate::kernels::gemm_common::{
    checked_counts, contiguous_strides, set_column_kernels, PAR_MIN_MACS, PAR_MIN_MACS_SESSION,
};
use std::sync::OnceLock;

use crate::ctx::{ExecCtx, Settings};

mod bf16;
pub use bf16::{
    available as bf16_available, fallbacks as bf16_fallbacks, paired as bf16_paired,
    set_enabled as set_bf16_kernel,
};
#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
pub use amx::{
    available as bf16_amx_available, available_i8 as i8_amx_available, set_enabled as set_bf16_amx,
    tiled as bf16_tiled, tiled_i8 as i8_tiled,
};
mod dq;
pub use dq::{dq_matmul, DqOperands};
mod i8;
pub use i8::matmul_i32_strided;
mod in_order;
pub use in_order::matmul_strided_in_order;
pub(crate) use in_order::sgemm_in_order;

use rayon::prelude::*;
use tc_core::Dtype;
use tc_runtime::cast;

use crate::llvm_ir::{Ty, V};
use crate::options::Error;

/// Rows of the register tile.
pub const MR: usize = 14;
/// Contraction block. 512 since 2026-12-02 (issue #15): on a Zen 5 host
/// (48 KB L1, 1 MB L2) MiniLM's products measured faster with it at every
/// batch, interleaved in one run, 1 thread: batch 1 × 10 tokens 4.1–5.0 →
/// 2.8–4.2 ms, 32 × 16 84–88 → 73–77, 8 × 128 200–215 → 164–200 (half
/// as many passes of C through the cache, and a K of 384 is one block); a
/// B micro-panel of 64 KB is then read from L2, not L1.
pub const KC: usize = 512;
/// Row block (rounded up to a multiple of MR: 18 micro-panels, an A block
/// of 252 × 512 floats = 516 KB, half the L2 of a Zen 5 core). With the
/// B block (KC × n) larger than L2, each B micro-panel is fetched from L3
/// once per row block, so a larger block fetches it less often. Measured
/// on that host (issue #15), interleaved: 1024³ SGEMM 159–171 → 165–178
/// GFLOP/s (medians of three runs), MiniLM on 2 threads 32 × 16 41–42 →
/// 37–39 ms and 8 × 128 100–103 → 83–95 ms, 1 thread within noise. (On
/// the Intel host of 2026-11-30, KC = 256 and a 2 MB L2 holding the B
/// block, 56 rows measured best: `TC_MM_MC` overrides it.)
pub const MC: usize = 252;
/// Most rows for the streamed-B path (one row block packed once per
/// K-block); above, the blocked path with [`MC`]-row blocks.
pub const STREAM_MAX_M: usize = 140;

/// Column block.
pub const NC: usize = 4096;

/// K steps ahead (32 steps: 4 KiB of a 32-column panel) that the
/// micro-kernel prefetches its B panel. A kept packing streams from L3 or
/// memory at few rows, where the hardware prefetchers alone left the
/// kernel waiting: on the Xeon (Emerald Rapids) host of 2026-12-02,
/// interleaved (`scripts/peer-ab.py`, three rounds, medians), MiniLM
/// batch 1 × 10 tokens 7.8 → 4.0 ms at 1 thread and 4.0 → 2.3 ms at 2,
/// 32 × 16 148 → 116 and 73 → 68 ms, 8 × 128 295 → 249 and 156 → 141 ms;
/// 1024³ SGEMM 0.80–0.81× → 0.98–1.00× `gemm` at 1 thread (16 steps
/// measured alike, 8 less).
pub const B_PREFETCH: usize = 32;

/// Does an `m × n × k` product split across threads under `ctx` (the
/// threshold of a session, or [`PAR_MIN_MACS`])?
pub fn splits(ctx: &ExecCtx, m: usize, n: usize, k: usize) -> bool {
    let min = if ctx.session {
        PAR_MIN_MACS_SESSION
    } else {
        PAR_MIN_MACS
    };
    m.saturating_mul(n).saturating_mul(k) >= min
}

/// The micro-kernel's IR text for vector width `vw` (NR = 2·vw), MR = [`MR`].
pub fn ukernel_ir(vw: usize) -> String {
    ukernel_ir_mr(vw, MR)
}

/// Blocking parameters (defaults [`MR`], [`KC`], [`MC`]; `TC_MM_MR`,
/// `TC_MM_KC`, `TC_MM_MC` override them, for tuning).
fn params() -> (usize, usize, usize, usize) {
    let s = Settings::get();
    let mr = s.mm_mr.unwrap_or(MR).min(14);
    (
        mr,
        s.mm_kc.unwrap_or(KC),
        s.mm_mc.unwrap_or(MC),
        s.mm_nc.unwrap_or(NC),
    )
}

/// The micro-kernel's IR text for vector width `vw` and `mr` rows.
pub fn ukernel_ir_mr(vw: usize, mr: usize) -> String {
    ukernel_ir_rows(vw, mr, ALayout::Packed(mr), Cols::Whole)
}

/// The IR text of a kernel computing `rows` rows of a tile, A as `a` says:
/// the first `rows` of a panel packed `s ≥ rows` wide (an edge kernel when
/// `rows < s`), or `rows` rows of A in place; writing `cols` of C.
fn ukernel_ir_rows(vw: usize, rows: usize, a: ALayout, cols: Cols) -> String {
    let ahead = b_prefetch_steps() * 2 * vw;
    ukernel_text(&UkrSpec {
        elem: Ty::Float,
        vw,
        mr: rows,
        a,
        after_b: &|b, j, bp, bj| {
            if ahead > 0 {
                // Not `inbounds`: the address may lie past the panel (a
                // hint, never dereferenced).
                let pf = b.named(format_args!("pf{j}"));
                let pf = pf.gep_any(bp, &[&V::int(Ty::I64, ahead as i64)]);
                let pf8 = b.named(format_args!("pf8{j}")).bitcast(&pf, Ty::I8.ptr());
                b.prefetch(&pf8, false);
            }
            bj
        },
        after_a: &|_, _, a| a,
        step: &|b, (i, j), acc, a, bj| b.named(format_args!("n{i}_{j}")).fma(a, bj, acc),
        c_align: 4,
        k_unroll: f32_k_unroll(vw),
        cols,
    })
}

/// Copies of the f32 kernels' k step per loop trip. With 512-bit vectors,
/// one: the 1-, 3-, 4-, 8-, 10- and 14-row kernels ran at the same speed
/// unrolled 4 times (what O3 chose) and not at all (57.7 / 113 / 117.7 /
/// 117.6 / 117.2 / 116.9 GFLOP/s, K-blocks of 256 in L1, AMD Zen 4 host,
/// 2026-12-03), and a 14-row kernel compiles in 20 ms instead of 35 (a
/// cold start compiles three or four). With 256-bit vectors, four, as O3
/// chose: a 6-row kernel's step is about 22 µops for 12 FMAs, near a
/// 4-wide core's issue rate, where the loop's own µops could count; not
/// measured on such a host.
fn f32_k_unroll(vw: usize) -> u32 {
    if vw >= 16 {
        1
    } else {
        4
    }
}

/// K steps ahead that the micro-kernel prefetches its B panel (default
/// [`B_PREFETCH`]; `TC_MM_PF` overrides it, `0` turns it off).
fn b_prefetch_steps() -> usize {
    Settings::get().mm_prefetch.unwrap_or(B_PREFETCH)
}

/// The host kernel's tile `(mr, nr)`: what every f32 kernel's rows, panel
/// widths and packings follow, known without compiling one. Read once:
/// every product asks, a batch of small ones thousands of times per call,
/// and the host's feature test searches a string (a batched attention
/// product of MiniLM at 32 × 16 tokens took 2–3× as long asking it anew).
fn geometry() -> (usize, usize) {
    static G: OnceLock<(usize, usize)> = OnceLock::new();
    *G.get_or_init(|| {
        let vw = if crate::jit::host().has_avx512() {
            16
        } else {
            8
        };
        // 28 accumulators need AVX-512's 32 vector registers; AVX2 has 16.
        let mr = if vw == 16 {
            params().0
        } else {
            params().0.min(6)
        };
        (mr, 2 * vw)
    })
}

/// The host kernel (a [`geometry`] tile reading packed A) writing `cols`,
/// compiled the first time a product needs it.
fn micro(cols: Cols) -> Result<&'static Micro, Error> {
    static M: [OnceLock<Result<Micro, String>>; 3] = [const { OnceLock::new() }; 3];
    let r = M[cols.index()].get_or_init(|| {
        let (mr, nr) = geometry();
        let ir = ukernel_ir_rows(nr / 2, mr, ALayout::Packed(mr), cols);
        compile_micro(&ir, mr, nr, cols)
    });
    r.as_ref().map_err(|e| Error::Llvm(e.clone()))
}

/// The kernel of `rows` rows (`1..=14`) reading A as `layout` says and
/// writing `cols`, from `table`, compiled the first time it is asked for.
fn rows_kernel(
    table: &'static Table,
    rows: usize,
    layout: ALayout,
    cols: Cols,
) -> Result<&'static Micro, Error> {
    let (mr, nr) = geometry();
    table_kernel(table, (rows, mr), nr, cols, || {
        ukernel_ir_rows(nr / 2, rows, layout, cols)
    })
}

/// Kernels for the last row panel of a product whose row count is not a
/// multiple of MR: `edge(r)` computes the first `r < MR` rows of a
/// panel packed MR wide, straight into C. Before them the last panel ran
/// the full MR-row kernel into a scratch tile and copied `r` rows out, so
/// 16 rows computed 28 (a MiniLM sentence of 16 tokens), 32 computed 42
/// and 128 computed 140. Each is compiled the first time its `r` occurs
/// (≈ 5 ms; a model meets a few). Same FMA chain per element and the same
/// add into C as the tile path: bit-identical results.
fn edge(rows: usize, cols: Cols) -> Result<&'static Micro, Error> {
    static E: Table = table();
    let mr = geometry().0;
    if rows >= mr {
        return Err(Error::Unsupported(format!("edge kernel of {rows} rows")));
    }
    rows_kernel(&E, rows, ALayout::Packed(mr), cols)
}

/// `TC_MM_EDGE=0` runs edge row panels through the full kernel and a
/// scratch tile (for measurements and the equivalence test).
/// Turn the edge-row kernels on or off (process-wide; for tests and
/// measurements).
pub fn set_edge_kernels(on: bool) {
    Settings::get().mm_edge.set(on);
}

/// Kernels reading `rows` rows of A in place ([`ALayout::Rows`]), one per
/// row count `1..=MR`, each compiled the first time it is needed. Same
/// FMA chain per element as the packed kernels: bit-identical results.
/// `ahead`: the kernels of an A of several row panels prefetch its rows
/// ([`A_AHEAD`]); those of one row panel, which is read once per column
/// panel and mostly where the step before left it, do not.
fn in_place(rows: usize, ahead: bool, cols: Cols) -> Result<&'static Micro, Error> {
    static K: Table = table();
    static P: Table = table();
    if ahead {
        rows_kernel(&P, rows, ALayout::Rows { ahead: A_AHEAD }, cols)
    } else {
        rows_kernel(&K, rows, ALayout::Rows { ahead: 0 }, cols)
    }
}

/// Floats ahead (four 64-byte lines) that the kernels reading an A of
/// several row panels in place prefetch its rows. In a model, A comes
/// from the step before, out of L2 or L3, and the kernel's FMAs waited on
/// it: MiniLM at 8 × 128 tokens, 1 thread, its attention products
/// (`[8, 12, 128, 32] × [8, 12, 32, 128]` and `[8, 12, 128, 128] × [8,
/// 12, 128, 32]`, A read in place) took 1.83–2.56 ms per layer without
/// the prefetch, no faster than packing A (2.05–2.35), and 1.69–2.00
/// with it, against 1.92–2.21 packed in the same runs (AMD Zen 4 host,
/// 2026-12-03, alternating processes, medians of the step profile; 16
/// and 32 floats ahead measured between). A product
/// whose A is in cache (a 128³ loop) runs at the same speed either way.
const A_AHEAD: usize = 64;

/// `TC_MM_IN_PLACE=0` (or [`set_a_in_place`]) packs A in the streamed
/// path even where it could be read in place (measurements, the
/// equivalence tests).
/// Turn reading A in place on or off (process-wide; tests, measurements).
pub fn set_a_in_place(on: bool) {
    Settings::get().mm_in_place.set(on);
}

/// Most floats of an A of one row panel (its `m ≤ MR` rows of one
/// K-block) that the streamed path reads in place: 16 KiB, half the
/// smallest L1 measured on, so they stay in L1 from one column panel to
/// the next. (Measured when this bound applied to every A, with 14-row
/// kernels: beyond it they read A from L2 in 14 strided streams, and
/// packing was faster: on the AMD Zen 4 host MiniLM at 32 × 16 and 8 ×
/// 128 tokens (the blocked path, K = 384) took 12% longer in place, a
/// 256³ product 13%. An A of more rows is read by [`IN_PLACE_ROWS`]-row
/// kernels instead.)
const IN_PLACE_MAX_FLOATS: usize = 4096;

/// Rows of the kernels that read an A of more than one row panel in
/// place (`a_in_place`; fewer where the host's kernel has fewer).
///
/// Why not MR = 14: reading A in place for every row panel, the 14-row
/// kernels were bimodal from process to process on the AMD Zen 4 host
/// (2026-12-03, a 128³ product against packing, alternating call by call
/// in one process, ten processes: 3.4% faster in some, 4–12% slower, up
/// to 2×, in the others, whatever the addresses), where 8-row kernels, as
/// `gemm`'s 6-row ones, read few enough rows at once to be fast in every
/// process (6 rows measured alike).
pub const IN_PLACE_ROWS: usize = 8;

/// The rows of the kernels that may read the `m × k` A in place rather
/// than pack it, if any. Its rows must be contiguous, and the rows a kernel
/// reads at one step of k must not crowd one set of a 64-set L1 (at most
/// two to a set): a row stride of 4 KiB puts every row in the same set,
/// 8- or 12-way on the hosts measured, and they would evict each other on
/// every step. Then:
/// - an A of one row panel (`m ≤ mr`, the host kernel's rows) is read in
///   place while its K-block fits [`IN_PLACE_MAX_FLOATS`], with a kernel
///   of its `m` rows; packing it was faster above;
/// - a larger one always, by [`IN_PLACE_ROWS`]-row kernels: no packing
///   (a transpose, 5–6% of a 128³ product), and for each column panel the
///   8 rows of a panel are read as `gemm` reads them.
fn a_in_place(a: &View, (m, k): (usize, usize), mr: usize) -> Option<usize> {
    const SETS: usize = 64;
    let rows = if m <= mr {
        if m.saturating_mul(k.min(params().1)) > IN_PLACE_MAX_FLOATS {
            return None;
        }
        mr
    } else {
        IN_PLACE_ROWS.min(mr)
    };
    let mut per_set = [0u8; SETS];
    let line = |i: usize| i.wrapping_mul(a.rs).wrapping_mul(4) / 64 % SETS;
    let spread = (0..rows).all(|i| {
        per_set[line(i)] += 1;
        per_set[line(i)] <= 2
    });
    (Settings::get().mm_in_place.on() && a.cs == 1 && spread).then_some(rows)
}

/// Compile the micro-kernel now (so its cost is not charged to a call).
pub fn warm_up() -> Result<(), Error> {
    micro(Cols::Whole).map(|_| ())
}

/// A strided f32 matrix view: element `(i, j)` at `ptr + i·rs + j·cs`.
///
/// Building one is safe; reading through it happens only in [`sgemm`],
/// whose caller vouches that the view is valid for the extents it passes.
#[derive(Clone, Copy)]
pub struct View {
    ptr: *const f32,
    rs: usize,
    cs: usize,
}
// SAFETY: a `View` is only ever read through (never written), and only
// inside `sgemm`, whose caller keeps the viewed memory alive and unwritten
// until it returns; sharing a read-only pointer across threads races on
// nothing.
unsafe impl Send for View {}
// SAFETY: as for `Send` just above.
unsafe impl Sync for View {}

impl View {
    /// A row-major `ld`-strided view.
    pub fn new(ptr: *const f32, rs: usize, cs: usize) -> View {
        View { ptr, rs, cs }
    }

    /// Element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must lie in the extents the view is valid for.
    #[inline(always)]
    // SAFETY: (contract) met by `pack_b_panel` and `sgemm_packed`, its
    // callers.
    unsafe fn at(&self, i: usize, j: usize) -> f32 {
        // SAFETY: the element is inside the viewed memory (the contract).
        unsafe { *self.ptr.add(i * self.rs + j * self.cs) }
    }
}

/// `C[m×n] = A[m×k] · B[k×n]` in f32 (C row-major with leading dim `n`).
/// `threads == 1` runs on the calling thread only.
///
/// # Safety
/// `a` must be valid for reads of every `(i, j)`, `i < m`, `j < k`, and `b`
/// of every `(i, j)`, `i < k`, `j < n`, at their strides; `c` valid for
/// writes of `m·n` floats, not overlapping A or B, and neither written nor
/// read by anyone else during the call. It must stay `unsafe`: a `View` is
/// a raw pointer with strides, which cannot be checked against an
/// allocation (the safe entry points are the JIT's compiled functions, whose
/// buffers are sized from the checked shapes).
// SAFETY: (contract) in the crate, established by `matmul_strided` and
// `matmul`, whose own contracts `CompiledFn::exec` meets.
pub unsafe fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View,
    c: *mut f32,
    ctx: &ExecCtx,
) -> Result<(), Error> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // SAFETY: `c` is valid for `m·n` floats (the contract).
        unsafe { std::ptr::write_bytes(c, 0, m * n) };
        return Ok(());
    }
    let stream = streams(m)?;
    let (fam, par) = F32Gemm::for_product((m, n, k), ctx, stream.then_some(&a))?;
    if stream {
        // SAFETY: `m, n, k ≥ 1` and the views and C as `sgemm`'s contract.
        unsafe { streamed(&fam, (m, n, k), &a, BSrc::View(&b), c, par) };
    } else {
        // SAFETY: as just above; `F32Gemm`'s packers read the views over
        // exactly the rows, k and columns `blocked` asks for, and its tile
        // is at most 14 × 32 (`micro`).
        unsafe { blocked(&fam, (m, n, k), &a, &b, c, par) };
    }
    Ok(())
}

/// The f32 GEMM family: the micro-kernel (and edge kernel) of this call,
/// [`params`]' blocks, [`View`] operands packed by [`pack_a_panel`] and
/// [`pack_b_panel`], and per-thread packing buffers (B's on a huge page).
struct F32Gemm<'p> {
    ks: Kernels<'static>,
    /// B packed once, when the caller keeps it ([`PackedB`]).
    pre: Option<&'p PackedB>,
    /// The kernels read A in place ([`ALayout::Rows`]; the streamed path
    /// only).
    a_rows: bool,
}

impl F32Gemm<'_> {
    /// The family for an `m × n × k` product and whether it splits across
    /// the pool. `in_place`: A, when the product takes the streamed path,
    /// whose kernels may read it in place ([`F32Gemm::read_a_in_place`]).
    /// Otherwise the micro-kernel, and the kernel for the last row panel
    /// when `m` is not a multiple of MR. Only the kernels the product runs
    /// are compiled (before any thread needs them): the host kernel and an
    /// edge kernel, compiled for every product before it chose to read A in
    /// place, were about 20 ms each of a cold start without a kernel cache
    /// (a 32-row product, read in place by 8-row kernels, compiled the
    /// 14-row kernel and the 4-row edge, and never called them).
    fn for_product(
        (m, n, k): (usize, usize, usize),
        ctx: &ExecCtx,
        in_place: Option<&View>,
    ) -> Result<(F32Gemm<'static>, bool), Error> {
        let par = ctx.threads != 1 && splits(ctx, m, n, k);
        if let Some(fam) = in_place.map(|a| Self::read_a_in_place(a, (m, n, k))) {
            if let Some(fam) = fam? {
                return Ok((fam, par));
            }
        }
        let mr = geometry().0;
        let rows = (!m.is_multiple_of(mr) && Settings::get().mm_edge.on()).then_some(m % mr);
        let ks = kernel_set(n, (mr, geometry().1), rows, true, |r, cols| {
            if r == mr {
                micro(cols)
            } else {
                edge(r, cols)
            }
        })?;
        let fam = F32Gemm {
            ks,
            pre: None,
            a_rows: false,
        };
        Ok((fam, par))
    }

    /// The family of kernels reading A in place, for the streamed path of
    /// an `m × k` A, when [`a_in_place`] allows it. Packing A is a
    /// transpose (MR rows, one float each per step of k), paid once per
    /// call. Measured on the AMD Zen 4 host with the two alternating call
    /// by call in one process:
    /// - one row panel (medians of 40 000 each, B a kept packing):
    ///   MiniLM's batch-1 products 10 × 384 × {384, 1152, 1536} 0.5–1.9%
    ///   faster, an attention item 16 × 32 × 64 4%;
    /// - more, by [`IN_PLACE_ROWS`]-row kernels (2026-12-03, medians of
    ///   3 000, B packed per call, 1 thread): 128³ 6.1–6.5% faster (37.4
    ///   µs at p10, `gemm` x86-v4's time), attention items 128 × 32 × 128
    ///   and 128 × 128 × 32 16–20%, 15 × 384 × 384 10%, 128 × 384 × 384 3%,
    ///   linear layers of 16–140 rows and k, n up to 2304 0–5%, none slower
    ///   beyond 1%.
    fn read_a_in_place(
        a: &View,
        (m, n, k): (usize, usize, usize),
    ) -> Result<Option<F32Gemm<'static>>, Error> {
        let Some(rows) = a_in_place(a, (m, k), geometry().0) else {
            return Ok(None);
        };
        let ahead = m > rows;
        // One row panel: a kernel of exactly its rows, the only one it runs
        // (a 14-row kernel compiled for a 10-row product was 27–41 ms of a
        // cold start, never called).
        let mr = rows.min(m);
        // Always an edge kernel for a last, partial row panel: the full
        // kernel would read rows past `m` (`tile_into_c`).
        let edge = (!m.is_multiple_of(mr)).then_some(m % mr);
        let ks = kernel_set(n, (mr, geometry().1), edge, true, |r, cols| {
            in_place(r, ahead, cols)
        })?;
        Ok(Some(F32Gemm {
            ks,
            pre: None,
            a_rows: true,
        }))
    }
}

impl Family for F32Gemm<'_> {
    type E = f32;
    type Src = View;

    fn kernels(&self) -> Kernels<'_> {
        self.ks
    }

    fn blocks(&self) -> (usize, usize, usize) {
        let (_, kc, mc, nc) = params();
        (kc, mc, nc)
    }

    fn slots(&self, kc: usize) -> usize {
        kc
    }

    // SAFETY: (contract) `Family::pack_a`'s, met by its callers; it is
    // `pack_a_panel`'s.
    unsafe fn pack_a(
        &self,
        a: &View,
        pc: usize,
        kc: usize,
        row0: usize,
        mr: usize,
        m: usize,
        dst: &mut [f32],
    ) {
        // SAFETY: the same contract.
        unsafe { pack_a_panel(a, pc, kc, row0, mr, m, dst) }
    }

    // SAFETY: (contract) `Family::pack_b`'s, met by its callers; it is
    // `pack_b_panel`'s.
    unsafe fn pack_b(
        &self,
        b: &View,
        pc: usize,
        kc: usize,
        col0: usize,
        nr: usize,
        n: usize,
        dst: &mut [f32],
    ) {
        // SAFETY: the same contract.
        unsafe { pack_b_panel(b, pc, kc, col0, nr, n, dst) }
    }

    // The packed-B buffer (up to NC·KC floats) is kept per calling thread:
    // no allocation, zeroing or page faults per call.
    fn take_b(&self) -> Vec<f32> {
        BPACK.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    fn b_block<'a>(&self, buf: &'a mut Vec<f32>, need: usize) -> &'a mut [f32] {
        huge_slice(buf, need)
    }

    fn give_b(&self, buf: Vec<f32>) {
        BPACK.with(|s| *s.borrow_mut() = buf);
    }

    fn take_a(&self, len: usize) -> Vec<f32> {
        take_scratch(len)
    }

    fn give_a(&self, buf: Vec<f32>) {
        give_scratch(buf)
    }

    fn packed_b_block(&self, pc: usize, kc: usize, jc: usize, nc: usize) -> Option<&[f32]> {
        self.pre.and_then(|p| p.block(pc, kc, jc, nc))
    }
}

/// Most floats of packed A that [`streamed`] computes in one parallel
/// region (2 MiB): its K-blocks are packed together up to this much, so
/// a product of one row block splits across the pool once, not once per
/// K-block. A 768 × 3072 weight's `k = 3072` had six regions at 128 rows,
/// each a fork, a join and a packing of A on one thread while the other
/// waited. Such a group is computed K-block by K-block
/// ([`StreamJob::panels`]), so only one K-block of A (≤ `STREAM_MAX_M ·
/// KC` floats) needs to stay in L2, whatever the group.
const A_GROUP_FLOATS: usize = 1 << 19;

/// The group on one thread (256 KiB, a quarter of the smallest L2
/// measured on), computed panel by panel through its K-blocks: the order
/// and grouping measured fastest there (GPT-2 block 1 × 32 at 1 thread
/// 3.5% slower with [`A_GROUP_FLOATS`]'s large groups, 2026-12-04).
const A_GROUP_L2_FLOATS: usize = 1 << 16;

/// A group's packed A on one thread when it is this small; on the pool
/// (K-block by row panel) when larger.
const A_PACK_SPLIT_FLOATS: usize = 1 << 15;

/// One row block (m ≤ [`STREAM_MAX_M`], e.g. a sequence of 128 tokens
/// times a 768 × 3072 weight): pack A once per K-block and stream B panel
/// by panel through an L1-sized buffer, so the packed B (megabytes) is
/// never written out to L3 and read back. Same kernel, same K-blocking as
/// [`blocked`]: the results are bit-identical to it (each C tile gets its
/// K-blocks in order, written after the first, added after the others).
/// Threads (when `par`) split the column panels; consecutive K-blocks
/// whose packed A fits [`A_GROUP_FLOATS`] share one split (on one
/// thread, [`A_GROUP_L2_FLOATS`] bounds a group).
///
/// # Safety
/// `m, n, k ≥ 1`, `m ≤ STREAM_MAX_M` rounded up to whole tiles, and the
/// views and `c` as [`sgemm`]'s contract.
// SAFETY: (contract) met by `sgemm`, its only caller.
unsafe fn streamed(
    f: &F32Gemm<'_>,
    (m, n, k): (usize, usize, usize),
    a: &View,
    b: BSrc<'_>,
    c: *mut f32,
    par: bool,
) {
    let (nr, mr, kc_) = (f.ks.full.nr, f.ks.full.mr, params().1);
    let mpanels = m.div_ceil(mr);
    // K rows per group: whole K-blocks (so the blocking is the tile
    // path's), at least one. Read in place, A needs no packing, and the
    // group is all of K.
    let cap = if par {
        A_GROUP_FLOATS
    } else {
        A_GROUP_L2_FLOATS
    };
    let group = if f.a_rows {
        k
    } else {
        (cap / (mpanels * mr * kc_)).max(1) * kc_
    };
    let mut ap = take_scratch(if f.a_rows {
        0
    } else {
        mpanels * mr * group.min(k)
    });
    let npanels = n.div_ceil(nr);
    let chunks = if par {
        (rayon::current_num_threads().max(1) * 4).min(npanels)
    } else {
        1
    };
    for g0 in (0..k).step_by(group) {
        let g1 = (g0 + group).min(k);
        if !f.a_rows {
            // SAFETY: rows `0..m` and columns `g0..g1 ⊆ 0..k` of A, valid
            // by the contract; `ap` holds `mpanels·mr·(g1 − g0)` floats.
            unsafe { pack_a_group(a, (m, mpanels, mr), (g0, g1, kc_), &mut ap, par) };
        }
        let job = StreamJob {
            f,
            dims: (m, n, k),
            ks: (g0, g1),
            b,
            a,
            ap: SendPtr(ap.as_mut_ptr()),
            c: SendPtr(c),
            k_outer: par,
        };
        // SAFETY: `ap` holds the group's packed A (above; or the kernels
        // read A in place), B and C by the contract; the ranges below are
        // disjoint panel ranges.
        let range = |q0: usize, q1: usize| unsafe { job.panels(q0, q1) };
        if chunks > 1 {
            (0..chunks)
                .into_par_iter()
                .for_each(|i| range(npanels * i / chunks, npanels * (i + 1) / chunks));
        } else {
            range(0, npanels);
        }
    }
    give_scratch(ap);
}

/// Pack rows `0..m` × columns `g0..g1` of A for [`streamed`]: K-block at
/// row `pc` from float `(pc − g0)·mpanels·mr` of `ap`, its row panel `p`
/// `p·kc·mr` further (`kc = min(kc_, g1 − pc)`, the last block short).
/// Each (K-block, row panel) slot is disjoint; with `par`, and more than
/// [`A_PACK_SPLIT_FLOATS`] floats, the slots are packed on the pool.
///
/// # Safety
/// `a` valid for reads of rows `0..m`, columns `g0..g1`; `ap` at least
/// `mpanels·mr·(g1 − g0)` floats; `mpanels·mr ≥ m`.
// SAFETY: (contract) met by `streamed`, its only caller.
unsafe fn pack_a_group(
    a: &View,
    (m, mpanels, mr): (usize, usize, usize),
    (g0, g1, kc_): (usize, usize, usize),
    ap: &mut [f32],
    par: bool,
) {
    let mut slots: Vec<(usize, usize, usize, &mut [f32])> = Vec::new();
    let mut rest = &mut ap[..mpanels * mr * (g1 - g0)];
    for pc in (g0..g1).step_by(kc_) {
        let kc = kc_.min(g1 - pc);
        for p in 0..mpanels {
            let (slot, tail) = std::mem::take(&mut rest).split_at_mut(kc * mr);
            slots.push((pc, kc, p, slot));
            rest = tail;
        }
    }
    // SAFETY: rows `p·mr < m` (p < mpanels = ⌈m / mr⌉) and columns
    // `pc..pc + kc ⊆ g0..g1` of A, readable by the contract; each slot is
    // its own `kc·mr` floats.
    let pack = |(pc, kc, p, dst): (usize, usize, usize, &mut [f32])| unsafe {
        pack_a_panel(a, pc, kc, p * mr, mr, m, dst)
    };
    if par && mpanels * mr * (g1 - g0) > A_PACK_SPLIT_FLOATS {
        slots.into_par_iter().for_each(pack);
    } else {
        slots.into_iter().for_each(pack);
    }
}

/// One group of K-blocks of a [`streamed`] product: rows `ks.0..ks.1` of
/// K, their A packed at `ap` (K-block at row `pc` from float `(pc −
/// ks.0)·mpanels·mr`, its row panel `p` `p·kc·mr` further), or read in
/// place from `a` when `f.a_rows`.
struct StreamJob<'a, 'f> {
    f: &'a F32Gemm<'f>,
    dims: (usize, usize, usize),
    ks: (usize, usize),
    b: BSrc<'a>,
    a: &'a View,
    ap: SendPtr<f32>,
    c: SendPtr<f32>,
    /// K-blocks outside the panels ([`A_GROUP_FLOATS`]'s large groups).
    k_outer: bool,
}

impl StreamJob<'_, '_> {
    /// C's column panels `q0..q1`, every K-block of the group in order.
    ///
    /// # Safety
    /// `q0 ≤ q1 ≤` the panel count; no other task writes those panels'
    /// columns of C during the call; `ap`, B and C as [`streamed`] sets
    /// them up.
    // SAFETY: (contract) met by `streamed`, its only caller, for each of
    // its disjoint panel ranges.
    unsafe fn panels(&self, q0: usize, q1: usize) {
        let (n, k) = (self.dims.1, self.dims.2);
        let (g0, g1) = self.ks;
        let (nr, kc_) = (self.f.ks.full.nr, params().1);
        let mut bq = BPANEL.with(|s| std::mem::take(&mut *s.borrow_mut()));
        let bo = if matches!(self.b, BSrc::View(_)) {
            aligned_off(&mut bq, PACK_PANELS * kc_.min(k) * nr)
        } else {
            0
        };
        // [`PACK_PANELS`] panels at a time, packed together per K-block
        // (one visit of each of B's rows), then computed; every C tile
        // gets its K-blocks in order, as in [`blocked`].
        let mut visit = |pc: usize, q: usize| {
            let (kc, qs) = (kc_.min(k - pc), q..(q + PACK_PANELS).min(q1));
            if let BSrc::View(v) = self.b {
                // SAFETY: rows `pc..pc + kc ⊆ 0..k` and columns `q·nr..
                // < n` of B, valid by the contract; the buffer has
                // `PACK_PANELS·kc·nr` floats from `bo`.
                unsafe { pack_b_panels(v, (pc, kc), (q * nr, qs.len()), nr, n, &mut bq[bo..]) };
            }
            for j in qs.clone() {
                let bpanel = match self.b {
                    BSrc::View(_) => bq[bo + (j - q) * kc * nr..].as_ptr(),
                    BSrc::Packed(p) => p.panel(pc, j).as_ptr(),
                };
                // SAFETY: `bpanel` is panel `j`'s `kc·nr` floats of this
                // K-block; the rest as `panels`' own contract.
                unsafe { self.column(j, (pc, kc), bpanel) };
            }
        };
        if self.k_outer {
            // A large group (on the pool): K-block by K-block, so one
            // K-block of packed A stays in L2 for every panel.
            for pc in (g0..g1).step_by(kc_) {
                (q0..q1).step_by(PACK_PANELS).for_each(|q| visit(pc, q));
            }
        } else {
            // A group that fits L2: panels by panels, each C tile kept
            // in L1 across the group's K-blocks.
            for q in (q0..q1).step_by(PACK_PANELS) {
                (g0..g1).step_by(kc_).for_each(|pc| visit(pc, q));
            }
        }
        BPANEL.with(|s| *s.borrow_mut() = bq);
    }

    /// C's column panel `q`, the K-block of `kc` rows at `pc`, against the
    /// packed B panel at `bpanel`: every row panel's tile.
    ///
    /// # Safety
    /// As [`StreamJob::panels`], with `q` in its range; `bpanel` holds the
    /// panel's `kc·nr` floats.
    // SAFETY: (contract) met by `StreamJob::panels`, its only caller.
    unsafe fn column(&self, q: usize, (pc, kc): (usize, usize), bpanel: *const f32) {
        let ks = &self.f.ks;
        let (m, n, _) = self.dims;
        let (nr, mr) = (ks.full.nr, ks.full.mr);
        let (col0, mpanels) = (q * nr, m.div_ceil(mr));
        let base = (pc - self.ks.0) * mpanels * mr;
        for p in 0..mpanels {
            let row0 = p * mr;
            // A panel `p` of this K-block is the `kc·mr` floats at
            // `base + p·kc·mr` of `ap` (packed by `streamed`), or
            // A's rows `row0..` from column `pc` (`cs = 1`; the
            // kernels read `nrows` rows: `tile_into_c`); the B
            // panel `kc·nr` floats; `row0 < m`, `col0 < n`.
            // SAFETY: so `tile_into_c`'s contract holds; this task
            // alone writes C's columns of its panels `q0..q1`.
            unsafe {
                let (a, lda) = if self.f.a_rows {
                    (self.a.ptr.add(row0 * self.a.rs + pc), self.a.rs)
                } else {
                    (self.ap.0.add(base + p * kc * mr).cast_const(), 0)
                };
                let t = Tile {
                    kc,
                    row0,
                    col0,
                    nrows: mr.min(m - row0),
                    ncols: nr.min(n - col0),
                    accum: pc > 0,
                    a,
                    lda,
                    b: bpanel,
                };
                tile_into_c(ks, &t, (m, n), self.c.0);
            }
        }
    }
}

/// Where [`streamed`] takes B's panels from.
#[derive(Clone, Copy)]
enum BSrc<'a> {
    /// Packed panel by panel from the view, on every call.
    View(&'a View),
    /// Packed once ([`PackedB`]).
    Packed(&'a PackedB),
}

/// Does an `m`-row product take the streamed path (one row block), the one
/// a [`PackedB`] serves?
pub fn streams(m: usize) -> Result<bool, Error> {
    let mr = geometry().0;
    Ok(m <= STREAM_MAX_M.div_ceil(mr) * mr && stream_b())
}

/// A right operand packed once (issue #15: a weight is constant across
/// calls, yet packing it, a transpose for PyTorch-layout weights, was most
/// of a small batch's time): every K-block's column panels, in
/// `pack_b_panel`'s layout, block after block. The same panels the
/// streamed path packs per call, so results are bit-identical.
pub struct PackedB {
    k: usize,
    n: usize,
    kc: usize,
    nr: usize,
    /// The packing is `data[off..]` (64-byte aligned, see [`aligned_off`]).
    data: Vec<f32>,
    off: usize,
    /// A BF16 operand's packing for `vdpbf16ps` (two steps of k per slot,
    /// `bf16.rs`) with its values' [`bf16::Scan`]; `None` for f32 panels.
    pairs: Option<bf16::Scan>,
    /// An I8 operand's packing in quads (four steps of k per slot,
    /// `i8.rs`).
    quads: bool,
}

impl PackedB {
    /// Pack the `k × n` view `b` (`k, n ≥ 1`); with `par`, its pages are
    /// faulted and its panels packed on the pool (the same bits).
    ///
    /// # Safety
    /// `b` must be valid for reads of every `(i, j)`, `i < k`, `j < n`.
    // SAFETY: (contract) met by `matmul_strided`, its caller, under its own.
    pub unsafe fn pack(b: &View, k: usize, n: usize, par: bool) -> Result<PackedB, Error> {
        let (nr, kc) = (geometry().1, params().1);
        let npanels = n.div_ceil(nr);
        let total = npanels
            .checked_mul(nr)
            .and_then(|w| w.checked_mul(k))
            .ok_or_else(|| Error::Unsupported(format!("packing a {k} × {n} operand")))?;
        // Fallible: a decoder's weights pack into hundreds of MB. Untouched
        // until packed below, so the huge-page advice (where `gemv` streams
        // faster from huge pages) takes effect.
        let padded = total
            .checked_add(15)
            .ok_or_else(|| Error::Unsupported(format!("packing a {k} × {n} operand")))?;
        let mut data = tc_runtime::alloc::zeroed::<f32>(padded)?;
        use tc_runtime::huge::{self, Advice};
        #[cfg(target_arch = "x86_64")]
        let advice = match crate::kernels::gemv::huge_packings() {
            Some(force) => huge::advise(&mut data, force),
            None => Advice::None,
        };
        #[cfg(not(target_arch = "x86_64"))]
        let advice = Advice::None;
        let later = !matches!(advice, Advice::Huge | Advice::None);
        // Where the packing is not on huge pages now, its small pages are
        // faulted in one call rather than one fault per 4 KiB as the
        // panels land (`huge::populate`).
        if advice != Advice::Huge {
            if par {
                let (lo, hi) = data.split_at_mut(padded / 2);
                rayon::join(|| huge::populate(lo), || huge::populate(hi));
            } else {
                huge::populate(&mut data);
            }
        }
        let start = line_off(&data);
        let slab = &mut data[start..start + total];
        for pc in (0..k).step_by(kc) {
            let kcb = kc.min(k - pc);
            // K-block `pc`: its `npanels` panels of `kcb·nr`, from float
            // `pc·npanels·nr`.
            let block = &mut slab[pc * npanels * nr..(pc + kcb) * npanels * nr];
            // Chunk `g`: panels `g·PACK_PANELS..`, each `kcb·nr` (the last
            // chunk may hold fewer), packed by one visit of each row.
            // SAFETY: rows `pc..pc + kcb ⊆ 0..k`, columns `g·PACK_PANELS·nr..
            // < n` (the contract); the chunk holds its panels' floats.
            let pack = |(g, d): (usize, &mut [f32])| unsafe {
                let panels = d.len() / (kcb * nr);
                pack_b_panels(b, (pc, kcb), (g * PACK_PANELS * nr, panels), nr, n, d)
            };
            let chunk = PACK_PANELS * kcb * nr;
            if par {
                block.par_chunks_mut(chunk).enumerate().for_each(pack);
            } else {
                block.chunks_mut(chunk).enumerate().for_each(pack);
            }
        }
        // Kept for the process: where huge pages were dear to fault, the
        // kernel may still collapse the packing onto them in the background.
        if later {
            huge::advise_filled(&data);
        }
        Ok(PackedB {
            k,
            n,
            kc,
            nr,
            data,
            off: start,
            pairs: None,
            quads: false,
        })
    }

    /// Whether this is an f32 packing (not a BF16 one: `bf16.rs`).
    fn is_f32(&self) -> bool {
        self.pairs.is_none() && !self.quads
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    /// The packing itself (every panel, 64-byte aligned).
    fn slab(&self) -> &[f32] {
        &self.data[self.off..]
    }

    /// The packing as [`crate::kernels::gemv`] reads it.
    #[cfg(target_arch = "x86_64")]
    fn panels(&self) -> crate::kernels::gemv::Panels<'_> {
        crate::kernels::gemv::Panels {
            data: self.slab(),
            k: self.k,
            n: self.n,
            kc: self.kc,
            nr: self.nr,
        }
    }

    /// The panels of the K-block of `kc` rows at row `pc` covering columns
    /// `jc..jc + nc`, in [`blocked`]'s layout (`None` unless that is a
    /// K-block of this packing and `jc` a panel boundary).
    /// A BF16 packing's K-blocks are in slots of two steps of k (`kc`
    /// even, so a block's slots start at `pc / 2`).
    fn block(&self, pc: usize, kc: usize, jc: usize, nc: usize) -> Option<&[f32]> {
        if pc >= self.k || !pc.is_multiple_of(self.kc) || !jc.is_multiple_of(self.nr) {
            return None;
        }
        let npanels = self.n.div_ceil(self.nr);
        let kcb = self.kc.min(self.k - pc);
        if kc != kcb {
            return None;
        }
        let per = match (self.pairs, self.quads) {
            (_, true) => 4,
            (Some(_), _) => 2,
            _ => 1,
        };
        let slots = kcb.div_ceil(per);
        let start = (pc / per) * npanels * self.nr + (jc / self.nr) * slots * self.nr;
        let len = nc.div_ceil(self.nr) * slots * self.nr;
        self.slab().get(start..start.checked_add(len)?)
    }

    /// Panel `q` of the K-block starting at row `pc`.
    fn panel(&self, pc: usize, q: usize) -> &[f32] {
        let npanels = self.n.div_ceil(self.nr);
        let kcb = self.kc.min(self.k - pc);
        let off = pc * npanels * self.nr + q * kcb * self.nr;
        &self.slab()[off..off + kcb * self.nr]
    }
}

impl crate::kernels::readahead::Packing for PackedB {
    fn slab(&self) -> &[f32] {
        PackedB::slab(self)
    }
}

/// The packed weights a caller keeps across calls ([`matmul_strided`]'s
/// `b_cache`): looked up by the view's address, strides and extents, which
/// identify the bytes only together with the caller's own check that the
/// storage under them is still the one it was packed from.
pub trait PackCache: Sync {
    /// What to do with this view.
    fn get(&self, key: &ViewKey) -> Lookup;
    /// Keep a packing.
    fn put(&self, key: ViewKey, packed: std::sync::Arc<PackedB>);
}

/// A [`PackCache`]'s answer.
pub enum Lookup {
    /// The packing kept for this view.
    Hit(std::sync::Arc<PackedB>),
    /// Seen before: pack it whole now and keep it.
    Pack,
    /// Not (yet) worth keeping (first sighting: an activation passed as a
    /// parameter is new on every call): pack per call, as without a cache.
    Skip,
}

/// A view's address, strides and extents (`k × n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ViewKey {
    /// First element's address.
    pub ptr: usize,
    /// Row and column strides (elements).
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
    /// Rows.
    pub k: usize,
    /// Columns.
    pub n: usize,
}

impl ViewKey {
    /// The key of the `k × n` view `b`.
    fn of(b: &View, k: usize, n: usize) -> ViewKey {
        ViewKey {
            ptr: b.ptr as usize,
            rs: b.rs,
            cs: b.cs,
            k,
            n,
        }
    }
}

/// `C[m×n] = A[m×k] · B` with B packed ([`PackedB`]): the streamed path
/// takes its panels one by one, the blocked path its K-blocks whole (issue
/// #15: packing, a transpose for PyTorch-layout weights, no longer runs on
/// every call at any batch size). Bit-identical to [`sgemm`] on the view.
///
/// # Safety
/// `a` valid for reads of every `(i, j)`, `i < m`, `j < k` (`k` =
/// `b.k`); `view` for reads of every `(i, j)`, `i < k`, `j < n`, with `b`
/// packed from it; `c` as in [`sgemm`].
// SAFETY: (contract) met by `matmul_strided`, its only caller.
unsafe fn sgemm_packed(
    m: usize,
    a: View,
    (view, b): (View, &std::sync::Arc<PackedB>),
    c: *mut f32,
    ctx: &ExecCtx,
) -> Result<(), Error> {
    let (n, k) = (b.n, b.k);
    if m == 0 || n == 0 || k == 0 {
        return Err(Error::Unsupported(format!("packed-B product of {m} rows")));
    }
    #[cfg(target_arch = "x86_64")]
    if b.nr == geometry().1 && skips_gemm(m, k, &view, true) {
        let par =
            ctx.threads != 1 && (splits(ctx, m, n, k) || crate::kernels::gemv::splits(ctx, k, n));
        // A, K-major (`(i, j)` at `j·m + i`), as `packed_rows` reads it.
        let len = m
            .checked_mul(k)
            .ok_or_else(|| Error::Unsupported(format!("a {m} × {k} operand")))?;
        let mut x = tc_runtime::alloc::filled(len, 0f32)?;
        for (idx, xv) in x.iter_mut().enumerate() {
            // SAFETY: `(idx % m, idx / m)` with `idx < m·k`: a row below
            // `m` and a column below `k`, readable by the contract.
            *xv = unsafe { a.at(idx % m, idx / m) };
        }
        let _ahead = announce(ctx, b, par);
        // SAFETY: `available`; `1 ≤ m ≤ MAX_M`; `b` is a whole packing;
        // C's `m·n` floats by the contract.
        unsafe { crate::kernels::gemv::packed_rows(&x, m, &b.panels(), c, par) };
        return Ok(());
    }
    let stream = streams(m)?;
    let (mut fam, par) = F32Gemm::for_product((m, n, k), ctx, stream.then_some(&a))?;
    if stream {
        let _ahead = announce(ctx, b, par);
        // SAFETY: `m, n, k ≥ 1`, `m` streams; A and C by the contract; B's
        // panels are in memory (`b`).
        unsafe { streamed(&fam, (m, n, k), &a, BSrc::Packed(b), c, par) };
    } else {
        fam.pre = Some(b);
        // SAFETY: as `sgemm`'s blocked call: the view is `b`'s own (the
        // contract), packed per K-block only where `b` has no such block.
        unsafe { blocked(&fam, (m, n, k), &a, &view, c, par) };
    }
    Ok(())
}

/// A product of one row block over the kept packing `b`, split across a
/// session's threads: announced to the read-ahead for its duration, so
/// that the next product's weight is read while the small kernels between
/// the two run ([`crate::kernels::readahead`]). These products stream their weight
/// from memory (a decoder's step, a short sentence: each weight float
/// meets a few rows); more rows reuse each panel from cache and gain
/// nothing from it.
fn announce(
    ctx: &ExecCtx,
    b: &std::sync::Arc<PackedB>,
    par: bool,
) -> crate::kernels::readahead::Product {
    let on = par && ctx.session && crate::kernels::readahead::budget(ctx.settings) > 0;
    crate::kernels::readahead::Product::start(
        on.then(|| -> crate::kernels::readahead::Shared { b.clone() }),
    )
}

/// Whether a single row block streams B panel by panel (default on;
/// `TC_MM_STREAM=0` or [`set_stream_b`] turn it off, for measurements).
fn stream_b() -> bool {
    Settings::get().mm_stream_b.on()
}

/// Turn the streamed-B path for `m ≤ MC` on or off (benchmarks).
pub fn set_stream_b(on: bool) {
    Settings::get().mm_stream_b.set(on);
}

thread_local! {
    static BPANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    static BPACK: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Floats per 2 MiB huge page.
const HUGE_FLOATS: usize = (2 << 20) / 4;

/// The offset (0..16 floats) of `buf`'s first 64-byte-aligned float, with
/// `buf` grown (contents lost) to hold `need` floats from there. Packed B
/// is read a 64-byte vector at a time; from a `Vec`'s own start (16 or 48
/// bytes past a line, as glibc placed them) every such load straddled two
/// cache lines (`gemm` aligns its packing too). On the Xeon host, tc /
/// `gemm` in alternating runs, before → after: 128³ 0.86–0.95× →
/// 0.95–0.99×, 1024 × 1536 × 384 0.82–0.96× → 0.88–0.97× (issue #15).
fn aligned_off(buf: &mut Vec<f32>, need: usize) -> usize {
    if buf.len() < need.saturating_add(15) {
        buf.clear();
        buf.resize(need.saturating_add(15), 0.0);
    }
    line_off(buf)
}

/// The offset (0..16 floats) of the first 64-byte-aligned float of `buf`
/// (f32-aligned, so some float within 16 is).
fn line_off(buf: &[f32]) -> usize {
    let addr = buf.as_ptr() as usize;
    ((addr.next_multiple_of(64) - addr) / 4).min(15)
}

/// `need` floats of `buf` starting at a 2 MiB boundary, on a transparent
/// huge page where the kernel grants one; `buf` is reallocated (contents
/// lost) when too small.
///
/// Why: the packed B block (up to `KC × NC` floats, 1 MB at n = 1024) is
/// re-read from L2 for every row block. L2 is physically indexed, so on 4K
/// pages the block lands on random physical pages and, depending on the run,
/// several of them compete for the same L2 sets: the same sgemm measured
/// 16 ms in one process and 21–25 ms in the next. One physically contiguous
/// huge page spreads the block evenly over the sets, every run.
fn huge_slice(buf: &mut Vec<f32>, need: usize) -> &mut [f32] {
    if need * 4 < (256 << 10) {
        let off = aligned_off(buf, need);
        return &mut buf[off..off + need];
    }
    let total = need + HUGE_FLOATS;
    if buf.len() < total {
        *buf = huge_zeroed(total).unwrap_or_else(|_| vec![0.0; total]);
    }
    let off = (buf.as_ptr() as usize).next_multiple_of(2 << 20) - buf.as_ptr() as usize;
    let off = (off / 4).min(HUGE_FLOATS);
    &mut buf[off..off + need]
}

/// `len` zeroed floats, the whole 2 MiB pages among them on transparent
/// huge pages where the kernel grants them and they are cheap to fault
/// ([`tc_runtime::huge`]: the advice comes before the first write, as it
/// must for the faults to allocate huge pages);
/// `Unsupported` when the allocation is refused.
fn huge_zeroed(len: usize) -> Result<Vec<f32>, Error> {
    let mut v = tc_runtime::alloc::zeroed::<f32>(len)
        .map_err(|_| Error::Unsupported(format!("allocating {len} floats")))?;
    tc_runtime::huge::advise(&mut v, false);
    Ok(v)
}

/// A per-thread packing buffer of `len` floats (contents unspecified).
fn take_scratch(len: usize) -> Vec<f32> {
    let mut v = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if v.len() < len {
        v.resize(len, 0.0);
    }
    v
}

fn give_scratch(v: Vec<f32>) {
    SCRATCH.with(|s| *s.borrow_mut() = v);
}

/// Pack rows `row0..row0+mr` × columns `pc..pc+kc` of A column by column
/// (`dst[kk·mr + r]`), zero rows past `m`; the loop order follows A's
/// unit stride.
///
/// # Safety
/// The view must be valid over the rows `row0..m` and the columns
/// `pc..pc + kc`.
// SAFETY: (contract) met by `sgemm`, its only caller (rows below `m`,
// columns below `k`, which `sgemm`'s own contract makes readable).
unsafe fn pack_a_panel(
    a: &View,
    pc: usize,
    kc: usize,
    row0: usize,
    mr: usize,
    m: usize,
    dst: &mut [f32],
) {
    let rows = mr.min(m - row0);
    // Checked once per panel: it makes every unchecked index below safe.
    let dst = &mut dst[..kc * mr];
    let t16 = a.cs == 1 && mr <= 16 && avx512();
    // `pack_a16` writes the zero rows of the whole 16-column blocks itself:
    // only the rest needs zeroing first (for 10 of 14 rows, zeroing the
    // whole panel was 4% of MiniLM's samples at batch 1 on the AMD host).
    let whole = if t16 { kc - kc % 16 } else { 0 };
    if rows < mr {
        dst[whole * mr..].iter_mut().for_each(|x| *x = 0.0);
    }
    // Reads are of `(row0 + r, pc + kk)`, `r < rows ≤ m − row0`, `kk < kc`
    // (a `cs == 1` row slice is `kc` contiguous floats, a transposed column
    // slice `rows`); writes at `kk·mr + r < kc·mr = dst.len()` (`r < mr`).
    // SAFETY: so reads are inside the view (the contract), writes inside `dst`.
    unsafe {
        if t16 {
            // 16 columns at a time through the register transpose, the
            // rest (kc mod 16) one by one.
            let src = a.ptr.add(row0 * a.rs + pc);
            // AVX-512F is present; rows `< rows` of `whole` floats from
            // column `pc` are inside the view; `dst` holds `kc·mr ≥
            // whole·mr` floats.
            #[cfg(target_arch = "x86_64")]
            pack_a16(src, a.rs, rows, whole / 16, dst.as_mut_ptr(), mr);
            for r in 0..rows {
                let row = std::slice::from_raw_parts(src.add(r * a.rs), kc);
                for (kk, &x) in row.iter().enumerate().skip(whole) {
                    *dst.get_unchecked_mut(kk * mr + r) = x;
                }
            }
        } else if a.cs == 1 || a.rs != 1 {
            for r in 0..rows {
                let src = a.ptr.add((row0 + r) * a.rs + pc * a.cs);
                if a.cs == 1 {
                    let row = std::slice::from_raw_parts(src, kc);
                    for (kk, &x) in row.iter().enumerate() {
                        *dst.get_unchecked_mut(kk * mr + r) = x;
                    }
                } else {
                    for kk in 0..kc {
                        *dst.get_unchecked_mut(kk * mr + r) = *src.add(kk * a.cs);
                    }
                }
            }
        } else {
            // Unit stride down the rows (a transposed operand).
            for kk in 0..kc {
                let src = a.ptr.add(row0 + (pc + kk) * a.cs);
                let d = &mut dst[kk * mr..kk * mr + rows];
                d.copy_from_slice(std::slice::from_raw_parts(src, rows));
            }
        }
    }
}

/// Whether the AVX-512 16 × 16 transpose can run (`TC_MM_T16=0` turns it
/// off, for measurements).
fn avx512() -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    *A.get_or_init(|| Settings::get().mm_t16 && crate::host::avx512())
}

/// `dst[i·ds + c] = src[c·ss + i]` for `i, c < 16`: a 16 × 16 f32 transpose
/// in registers (`sweep::transpose16_regs`).
///
/// # Safety
/// AVX-512F must be available; the 16 source rows of 16 floats (stride
/// `ss`) must be valid for reads and the 16 destination rows (stride `ds`)
/// for writes. It stays `unsafe` for both: the CPU feature (a caller that
/// checked it once should not pay per 16 × 16 block) and the raw rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) in the crate met by `pack_b_panel` (`avx512()` checked,
// full 16 × 16 blocks only).
pub unsafe fn transpose16(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
    use std::arch::x86_64::*;
    let mut r = [_mm512_setzero_ps(); 16];
    for (c, x) in r.iter_mut().enumerate() {
        // SAFETY: source row `c < 16`, 16 readable floats (the contract);
        // the load is unaligned.
        *x = unsafe { _mm512_loadu_ps(src.add(c * ss)) };
    }
    // SAFETY: AVX-512F is available (the contract).
    let r = unsafe { crate::kernels::sweep::transpose16_regs(r) };
    for (i, x) in r.iter().enumerate() {
        // SAFETY: destination row `i < 16`, 16 writable floats (the
        // contract); the store is unaligned.
        unsafe { _mm512_storeu_ps(dst.add(i * ds), *x) };
    }
}

/// `dst[i·mr + r] = src[r·ss + i]` for `i < 16·blocks`, `r < rows`, and 0
/// for `rows ≤ r < mr`: the whole 16-column blocks of an A micro-panel
/// packed from `rows` row-major rows, through the register transpose (the
/// scalar loop stores one float per cycle at a stride of `mr` floats: a
/// fifth of a 128³ product's time). Every row is loaded under a mask (empty,
/// at row 0's address, past `rows`) so the 16 vectors have constant indices and stay in
/// registers: with a loop over `rows` they went through the stack, and
/// packing was 9% of a 128³ product (issue #15, Xeon host, 2026-12-02).
///
/// # Safety
/// AVX-512F must be available; `1 ≤ rows ≤ mr ≤ 16`; the `rows` source rows of
/// `16·blocks` floats (stride `ss`) must be valid for reads and `dst` for
/// writes of `16·blocks·mr` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) in the crate met by `pack_a_panel` (`avx512()`
// checked, whole 16-column blocks inside the view and `dst`, `mr ≤ 16`).
unsafe fn pack_a16(
    src: *const f32,
    ss: usize,
    rows: usize,
    blocks: usize,
    dst: *mut f32,
    mr: usize,
) {
    use std::arch::x86_64::*;
    let store: __mmask16 = ((1u32 << mr.min(16)) - 1) as __mmask16;
    for kb in 0..blocks {
        let mut r = [_mm512_setzero_ps(); 16];
        for (c, x) in r.iter_mut().enumerate() {
            // A row past `rows` loads nothing from row 0's address. An
            // empty mask at an address past the panel (possibly unmapped,
            // or on a page the TLB has not seen) is slow on AMD Zen 4: the
            // samples sat on those loads. On that host (2026-12-02, MiniLM
            // at batch 1 × 10 tokens: 10 of 14 rows, 2 threads) this, with
            // `pack_a_panel` no longer zeroing what this writes, took
            // `pack_a16` from 7.0% to 4.3% of the samples and the median
            // call from 2.56 to 1.83 ms (interleaved runs).
            let (load, row): (__mmask16, usize) = if c < rows { (0xffff, c) } else { (0, 0) };
            // SAFETY: row `row < rows` (row 0 exists: `rows ≥ 1`), floats
            // `16·kb..16·kb + 16 < 16·blocks`: readable (the contract),
            // whether or not the mask reads them.
            *x = unsafe { _mm512_maskz_loadu_ps(load, src.add(row * ss + kb * 16)) };
        }
        // SAFETY: AVX-512F is available (the contract).
        let r = unsafe { crate::kernels::sweep::transpose16_regs(r) };
        for (i, x) in r.iter().enumerate() {
            // SAFETY: lanes `0..mr` of `dst[(16·kb + i)·mr..]`, `16·kb + i <
            // 16·blocks`: inside the writable floats (the contract); masked
            // lanes are not written.
            unsafe { _mm512_mask_storeu_ps(dst.add((kb * 16 + i) * mr), store, *x) };
        }
    }
}

/// Rows ahead that [`pack_b_rows16`] prefetches, at any stride. A
/// row-major B (GPT-2's `[in, out]` weights) is read a few lines per row
/// at a stride of its width, and a product that packs its weight per call
/// (a process's first call, before the weight is kept; every call with
/// `TC_PACK_CACHE_MB=0`) waited on every row. Measured in one process, 1
/// thread, 200 calls of each alternating (medians): 32 × 768 × 3072 4.19
/// → 3.44 ms, 10 × 768 × 3072 3.34 → 2.37, 32 × 768 × 1536 2.05 → 1.82,
/// 14 × 384 × 1536 0.90 → 0.70, 32 × 768 × 2304 3.50 → 3.38; 16 rows
/// ahead, or the next panel as well, were no better. It applied first
/// from a 4 KiB stride, then also to [`PACK_PANELS`]-panel visits; on two
/// threads a product's panels split into visits of fewer (GPT-2's `[3072,
/// 768]` weight: 3 panels of 3 KiB rows) and went without, at 2.4–2.7 ms
/// against 1.4 for the `[768, 3072]` weight of the same size. Prefetching
/// those as well (medians of 48 calls, 2 threads, AMD Zen 4 host,
/// 2026-12-04), 32 × 3072 × 768 from memory 1.86–2.39 → 1.36–1.49 ms,
/// from L3 1.26–1.88 → 1.09–1.28; one panel per visit 2.25–2.49 →
/// 1.64–2.09 from memory, 1.45–1.47 → 1.22–1.39 from L3; 1 thread, rows
/// of 128–768 floats, within noise or faster (32 × 8192 × 128 from
/// memory 1.26 → 1.16).
const PACK_AHEAD: usize = 8;

/// Column panels a product packs per call together ([`pack_b_panels`]):
/// one visit of each of B's rows reads `PACK_PANELS · NR` floats of it
/// instead of `NR`.
const PACK_PANELS: usize = 4;

/// `panels` adjacent panels of B's rows, each `kc` rows of `nr`: panel
/// `p`'s `dst[p·kc·nr + kk·nr + c] = src[kk·rs + p·nr + c]` where `p·nr +
/// c < cols`, 0 past `cols`, `kk < kc`. 16 floats at a time, each chunk
/// loaded under a mask of its valid columns (zeros past them) and stored
/// whole. A copy and a memset per row were a third of a batch of 16 × 32
/// × 16 products (`memmove` 15%, `memset` 10%: calls for 64 bytes).
/// Several panels per visit of a row: see [`PACK_PANELS`].
///
/// # Safety
/// AVX-512F must be available; `nr` a multiple of 16, `cols ≤ panels·nr`;
/// the `kc` rows of `cols` floats at `src` (stride `rs`) readable; `dst`
/// holds `panels·kc·nr` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) in the crate met by `pack_b_panels` (`avx512()`
// checked, the rows inside the view, `dst` its `panels·kc·nr` floats).
unsafe fn pack_b_rows16(
    src: *const f32,
    rs: usize,
    (kc, panels): (usize, usize),
    cols: usize,
    nr: usize,
    dst: &mut [f32],
) {
    use std::arch::x86_64::*;
    let dst = &mut dst[..panels * kc * nr];
    for kk in 0..kc {
        if kk + PACK_AHEAD < kc {
            // Row `kk + PACK_AHEAD < kc`, the lines of its first `cols`
            // floats (one per 16).
            // SAFETY: inside the rows the contract makes readable; a
            // prefetch reads nothing architecturally.
            unsafe {
                let p = src.add((kk + PACK_AHEAD) * rs);
                for c0 in (0..cols).step_by(16) {
                    _mm_prefetch::<_MM_HINT_T0>(p.add(c0).cast());
                }
            }
        }
        for p in 0..panels {
            for h in (0..nr).step_by(16) {
                let c0 = p * nr + h;
                let valid = cols.saturating_sub(c0).min(16);
                let mask = ((1u32 << valid) - 1) as __mmask16;
                let at = p * kc * nr + kk * nr + h;
                // Loaded only when `valid > 0` (then `c0 < cols`): the
                // masked lanes, columns `c0 + l < cols` of row `kk < kc`;
                // the store at `at + 16 ≤ p·kc·nr + kc·nr ≤ panels·kc·nr =
                // dst.len()` (`nr` a multiple of 16, `h ≤ nr − 16`).
                // SAFETY: so reads are inside the rows (the contract),
                // masked-off lanes unread, and the store inside `dst`.
                unsafe {
                    let x = if valid > 0 {
                        _mm512_maskz_loadu_ps(mask, src.add(kk * rs + c0))
                    } else {
                        _mm512_setzero_ps()
                    };
                    _mm512_storeu_ps(dst.as_mut_ptr().add(at), x);
                }
            }
        }
    }
}

/// Pack the `panels` adjacent panels of columns `col0..` (rows `pc..pc +
/// kc`) of B into `dst`, panel `p` at `p·kc·nr` in [`pack_b_panel`]'s
/// layout: for a row-major B, by one visit of each row ([`PACK_PANELS`]).
///
/// # Safety
/// As [`pack_b_panel`] for each panel; `dst` holds `panels·kc·nr` floats.
// SAFETY: (contract) met by `StreamJob::panels` and `PackedB::pack`, its
// callers.
unsafe fn pack_b_panels(
    b: &View,
    (pc, kc): (usize, usize),
    (col0, panels): (usize, usize),
    nr: usize,
    n: usize,
    dst: &mut [f32],
) {
    let dst = &mut dst[..panels * kc * nr];
    // From `col0 ≥ n` on, every panel is padding, which `pack_b_panel`
    // writes without addressing B.
    #[cfg(target_arch = "x86_64")]
    if b.cs == 1 && nr.is_multiple_of(16) && col0 < n && avx512() {
        let cols = (panels * nr).min(n - col0);
        // SAFETY: rows `pc..pc + kc`, columns `col0..col0 + cols` (`1 ≤
        // cols ≤ n − col0`) inside the view (the contract), `panels` panels
        // of `kc·nr` in `dst`; AVX-512F detected by `avx512()`.
        unsafe {
            pack_b_rows16(
                b.ptr.add(pc * b.rs + col0),
                b.rs,
                (kc, panels),
                cols,
                nr,
                dst,
            )
        };
        return;
    }
    for (p, d) in dst.chunks_mut(kc * nr).enumerate() {
        // SAFETY: panel `p`'s columns `col0 + p·nr..` (the contract).
        unsafe { pack_b_panel(b, pc, kc, col0 + p * nr, nr, n, d) };
    }
}

/// Pack rows `pc..pc+kc` × columns `col0..col0+nr` of B row by row
/// (`dst[kk·nr + c]`), zero columns past `n`; the loop order follows B's
/// unit stride.
///
/// # Safety
/// The view must be valid over the rows `pc..pc + kc` and the columns
/// `col0..n`.
// SAFETY: (contract) met by `sgemm`, its only caller (rows below `k`,
// columns below `n`, which `sgemm`'s own contract makes readable).
unsafe fn pack_b_panel(
    b: &View,
    pc: usize,
    kc: usize,
    col0: usize,
    nr: usize,
    n: usize,
    dst: &mut [f32],
) {
    let cols = nr.min(n.saturating_sub(col0));
    // Checked once per panel: it makes every unchecked index below safe.
    let dst = &mut dst[..kc * nr];
    if cols == 0 {
        // A panel wholly past `n` is all padding. Its column `col0` is not
        // in the view, and a pointer to it (`b.ptr + pc·rs + col0`) may lie
        // past B's allocation, where forming it is already undefined.
        dst.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if b.cs == 1 && nr.is_multiple_of(16) && avx512() {
        // SAFETY: rows `pc..pc + kc`, columns `col0..col0 + cols` (`1 ≤
        // cols ≤ n − col0`) inside the view (the contract), `kc` rows of
        // `nr` in `dst`; AVX-512F detected by `avx512()`.
        unsafe { pack_b_rows16(b.ptr.add(pc * b.rs + col0), b.rs, (kc, 1), cols, nr, dst) };
        return;
    }
    if cols < nr {
        dst.iter_mut().for_each(|x| *x = 0.0);
    }
    // Reads are of `(pc + kk, col0 + c)`, `kk < kc`, `c < cols ≤ n − col0`;
    // writes at `kk·nr + c < kc·nr = dst.len()` (16 × 16 blocks only when
    // `kb + 16 ≤ kc` and `cb + 16 ≤ cols ≤ nr`).
    // SAFETY: so reads are inside the view (the contract), writes inside
    // `dst`; `transpose16` runs only where `avx512()` detected AVX-512F.
    unsafe {
        if b.cs == 1 {
            for kk in 0..kc {
                let src = b.ptr.add((pc + kk) * b.rs + col0);
                dst[kk * nr..kk * nr + cols].copy_from_slice(std::slice::from_raw_parts(src, cols));
            }
        } else if b.rs == 1 {
            // A transposed operand (a PyTorch-layout weight): columns are
            // contiguous. Transpose in 16 × 16 tiles so reads and writes stay in L1.
            const T: usize = 16;
            let mut kb = 0;
            while kb < kc {
                let kn = T.min(kc - kb);
                let mut cb = 0;
                while cb < cols {
                    let cn = T.min(cols - cb);
                    if kn == T && cn == T && avx512() {
                        // AVX-512F is present; 16 rows of 16 floats are inside
                        // the view, 16 rows of 16 inside `dst`.
                        #[cfg(target_arch = "x86_64")]
                        transpose16(
                            b.ptr.add(pc + kb + (col0 + cb) * b.cs),
                            b.cs,
                            dst.as_mut_ptr().add(kb * nr + cb),
                            nr,
                        );
                    } else if kn == T && cn == T {
                        let mut tile = [[0f32; T]; T];
                        for (c, row) in tile.iter_mut().enumerate() {
                            let src = b.ptr.add(pc + kb + (col0 + cb + c) * b.cs);
                            row.copy_from_slice(std::slice::from_raw_parts(src, T));
                        }
                        for i in 0..T {
                            let d = dst.as_mut_ptr().add((kb + i) * nr + cb);
                            for (c, row) in tile.iter().enumerate() {
                                *d.add(c) = row[i];
                            }
                        }
                    } else {
                        for c in 0..cn {
                            let src = b.ptr.add(pc + kb + (col0 + cb + c) * b.cs);
                            for i in 0..kn {
                                *dst.get_unchecked_mut((kb + i) * nr + cb + c) = *src.add(i);
                            }
                        }
                    }
                    cb += T;
                }
                kb += T;
            }
        } else {
            for kk in 0..kc {
                for c in 0..cols {
                    dst[kk * nr + c] = b.at(pc + kk, col0 + c);
                }
            }
        }
    }
}

/// Batched matmul on raw storage (Section 2 §5 layout) of dtype `dt`:
/// `a: p ++ [M, K]`, `b: p ++ [K, N]` → `out: p ++ [M, N]` (contiguous),
/// with the operands read through element strides `st_a`, `st_b` (F32: any
/// strides, e.g. a transposed weight or a batch broadcast with stride 0;
/// other dtypes: contiguous only).
///
/// F32 with a right operand that does not vary over the batch (stride 0 or
/// size 1 on every batch dim) and a left operand whose batch dims merge with
/// its rows runs as one `[p·M, K] × [K, N]` product (one packing of B, more
/// rows to split across threads); other batched products split the batch
/// across threads.
///
/// Shapes that are not a matmul (Section 2 §7: equal ranks ≥ 2, equal
/// batch prefixes, K = K'), strides that do not match the ranks or are
/// negative, and an element count that overflows are errors, never a panic.
///
/// # Safety
/// `a` and `b` must be valid for reads of every element the shapes and
/// strides address, `out` for writes of the output's storage
/// (`batch·M·N` elements of `dt`), not overlapping the operands. It stays
/// `unsafe` because raw buffers carry no length to check against; the
/// JIT's compiled functions are the safe entry point.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) in the crate met by `CompiledFn::exec`, see there.
pub unsafe fn matmul_strided(
    dt: Dtype,
    a: *const u8,
    st_a: &[isize],
    b: *const u8,
    st_b: &[isize],
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<(), Error> {
    let (batch, m, _, n) = strided_dims(sa, sb, st_a, st_b)?;
    if batch * m * n == 0 {
        return Ok(());
    }
    if dt != Dtype::F32 {
        match narrow_layout(sa, sb, st_a, st_b) {
            Narrow::Folded { rows, k } => {
                // SAFETY: the operands hold `rows·k` and `k·n` BF16
                // elements and the output `rows·n` (`Narrow::Folded`;
                // counts checked by `strided_dims`).
                if dt == Dtype::BF16
                    && unsafe {
                        bf16::try_matmul(
                            a.cast(),
                            b.cast(),
                            out.cast(),
                            1,
                            (rows, k, n),
                            ctx,
                            b_cache,
                        )?
                    }
                {
                    return Ok(());
                }
                // SAFETY: the contract of `matmul`, given by this
                // function's (as just said).
                return unsafe { matmul(dt, a, b, out, &[rows, k], &[k, n], ctx) };
            }
            // SAFETY: contiguous operands of shapes `sa`, `sb`: the contract
            // of `matmul`, given by this function's.
            Narrow::Contiguous => return unsafe { matmul(dt, a, b, out, sa, sb, ctx) },
            Narrow::Other => {}
        }
        if !dt.bits().is_multiple_of(8) {
            return Err(Error::Unsupported(format!("strided matmul at {dt}")));
        }
        // SAFETY: every element the strides address is readable (the
        // contract); the dtype's element is whole bytes (just checked).
        let (a2, b2) = unsafe { gathered((a, sa, st_a), (b, sb, st_b), dt.bits() as usize / 8)? };
        // SAFETY: the copies are contiguous operands of shapes `sa`, `sb`
        // (8-byte aligned words), the output as this function's contract.
        return unsafe { matmul(dt, a2.as_ptr().cast(), b2.as_ptr().cast(), out, sa, sb, ctx) };
    }
    let (a, b, c) = (a as *const f32, b as *const f32, out as *mut f32);
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    // SAFETY: the contract of this function, passed on unchanged.
    unsafe { f32_strided(a, st_a, b, st_b, c, sa, sb, ctx, b_cache) }?;
    // SAFETY: `out` is valid for writes of the output's `batch·M·N` f32s
    // (the contract), which the product above has just written, and
    // nothing else references it during this call.
    let c = unsafe { std::slice::from_raw_parts_mut(c, batch * m * n) };
    canonical_nans_in(c, ctx);
    Ok(())
}

/// How a product other than F32's reads its operand views.
pub(super) enum Narrow {
    /// A linear layer's form, `x: [p…, M, K] · broadcast(w: [K, N])`: A
    /// one contiguous `rows × k` matrix (its rows contiguous, its batch
    /// dims stepping by whole row blocks: `folds`), B's first item a
    /// contiguous `k × n` one, the output `rows·n` contiguous elements;
    /// one product against `w`'s one copy, which the narrow paths widen
    /// or pack once instead of per item.
    Folded { rows: usize, k: usize },
    /// Both operands contiguous in their own shapes.
    Contiguous,
    /// Any other view (a broadcast that does not fold, a transpose): its
    /// elements copied in order first ([`gathered`]).
    Other,
}

/// [`Narrow`] for operands of shapes `sa`, `sb` and strides `st_a`,
/// `st_b` (a matmul's, as `strided_dims` checked them).
pub(super) fn narrow_layout(sa: &[usize], sb: &[usize], st_a: &[isize], st_b: &[isize]) -> Narrow {
    let r = sa.len();
    let (k, n) = (sa[r - 1], sb[r - 1]);
    let row_major = |st: &[isize], cols: usize| st[r - 1] == 1 && st[r - 2] == cols as isize;
    if row_major(st_a, k) && row_major(st_b, n) && folds(sa, sb, st_a, st_b) {
        let rows = sa[..r - 1].iter().product();
        return Narrow::Folded { rows, k };
    }
    if st_a == contiguous_strides(sa).as_slice() && st_b == contiguous_strides(sb).as_slice() {
        return Narrow::Contiguous;
    }
    Narrow::Other
}

/// Both operands (pointer, shape, strides) copied in order into
/// contiguous words ([`gather_contiguous`], `size` bytes per element).
///
/// # Safety
/// As [`gather_contiguous`], for each operand.
// SAFETY: (contract) met by `matmul_strided` and `i8::matmul_i32_strided`.
pub(super) unsafe fn gathered(
    (a, sa, st_a): (*const u8, &[usize], &[isize]),
    (b, sb, st_b): (*const u8, &[usize], &[isize]),
    size: usize,
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    // SAFETY: the contract.
    unsafe {
        Ok((
            gather_contiguous(a, sa, st_a, size)?,
            gather_contiguous(b, sb, st_b, size)?,
        ))
    }
}

/// The operand of `shape` at `ptr` read through element strides `st`,
/// copied in row-major order into 8-byte aligned words (`size` bytes per
/// element).
///
/// # Safety
/// Every element `Σ idx[d]·st[d]` of the shape must be readable at `ptr`
/// (`size` bytes each); the element count must fit (`matmul_dims`
/// checked it).
// SAFETY: (contract) met by `gathered`, its only caller.
unsafe fn gather_contiguous(
    ptr: *const u8,
    shape: &[usize],
    st: &[isize],
    size: usize,
) -> Result<Vec<u64>, Error> {
    let count: usize = shape.iter().product();
    let bytes = count
        .checked_mul(size)
        .ok_or_else(|| Error::Unsupported(format!("copying a {shape:?} operand")))?;
    let mut words = tc_runtime::alloc::filled(bytes.div_ceil(8), 0u64)?;
    let dst = words.as_mut_ptr().cast::<u8>();
    let mut idx = vec![0usize; shape.len()];
    for i in 0..count {
        let off: isize = idx.iter().zip(st).map(|(&x, &s)| x as isize * s).sum();
        // SAFETY: element `idx` of the view is readable (the contract);
        // element `i < count` of the copy is inside its `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr.offset(off * size as isize), dst.add(i * size), size)
        };
        // The next index in row-major order.
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(words)
}

/// A strided product's `(batch, m, k, n)` (`matmul_dims`), its strides
/// checked against its shapes: one per dim, none negative.
fn strided_dims(
    sa: &[usize],
    sb: &[usize],
    st_a: &[isize],
    st_b: &[isize],
) -> Result<(usize, usize, usize, usize), Error> {
    let dims = matmul_dims(sa, sb)?;
    let r = sa.len();
    if st_a.len() != r || st_b.len() != r || st_a.iter().chain(st_b).any(|&s| s < 0) {
        return Err(Error::Unsupported(format!(
            "matmul strides {st_a:?} and {st_b:?} for shapes {sa:?} and {sb:?}"
        )));
    }
    Ok(dims)
}

/// Batch item `p`'s offset in an operand of `shape` (rank ≥ 2) read
/// through strides `st`: its multi-index over the batch dims times the
/// strides.
fn batch_offset(p: usize, shape: &[usize], st: &[isize]) -> isize {
    let mut rest = p;
    let mut off = 0isize;
    for d in (0..shape.len() - 2).rev() {
        off += (rest % shape[d]) as isize * st[d];
        rest /= shape[d];
    }
    off
}

/// A NaN of a matmul's output is [`cast::CANONICAL_NAN`], as in the
/// interpreter: Section 4 §5.4 leaves the summation order unspecified
/// (§6), so which term, partial sum or lane made the NaN, and with it the
/// hardware's payload, must not show (the rule of a reduction's NaN,
/// `tc_runtime::cast`). A read-only test per chunk of 256, which folds
/// into vector compares, and a rewrite only of a chunk holding a NaN: an
/// output without one, the usual case, is read once and not stored to. A
/// compare-and-select per element (0.28 ns) was 3% of MiniLM at 8 × 128
/// tokens, one thread; the test takes 0.06 ns (AMD Zen 4).
pub(crate) fn canonical_nans(c: &mut [f32]) {
    for chunk in c.chunks_mut(256) {
        if chunk.iter().fold(false, |any, v| any | v.is_nan()) {
            for v in chunk.iter_mut().filter(|v| v.is_nan()) {
                *v = cast::CANONICAL_NAN;
            }
        }
    }
}

/// [`canonical_nans`] split over the pool where the call may split and the
/// output pays for the hand-off. The pass re-reads the whole output after
/// the product; done by one thread it was 1–2% of MiniLM at 32 × 16 and
/// 8 × 128 tokens on two threads (AMD Zen 4, interleaved A/B).
pub(crate) fn canonical_nans_in(c: &mut [f32], ctx: &ExecCtx) {
    const PIECE: usize = 1 << 14;
    if ctx.threads == 1 || c.len() < 4 * PIECE || rayon::current_num_threads() < 2 {
        return canonical_nans(c);
    }
    c.par_chunks_mut(PIECE).for_each(canonical_nans);
}

/// [`matmul_strided`] at f32 on a non-empty output, NaNs as computed.
///
/// # Safety
/// [`matmul_strided`]'s contract, with `a`, `b`, `c` its storage as f32.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) met by `matmul_strided`, its only caller.
unsafe fn f32_strided(
    a: *const f32,
    st_a: &[isize],
    b: *const f32,
    st_b: &[isize],
    c: *mut f32,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<(), Error> {
    let (batch, m, k, n) = matmul_dims(sa, sb)?;
    let r = sa.len();
    if folds(sa, sb, st_a, st_b) || batch == 1 {
        let va = View::new(a, st_a[r - 2] as usize, st_a[r - 1] as usize);
        let vb = View::new(b, st_b[r - 2] as usize, st_b[r - 1] as usize);
        // One batch item, or a B equal for every item and an A whose batch
        // dims step by whole row blocks (`st_a[d] = st_a[r−2]·ext`): A is one
        // `(batch·M) × K` matrix of row stride `st_a[r−2]`, B one `K × N`.
        // SAFETY: so the views address exactly the elements the contract makes
        // readable, and C (contiguous `p ++ [M, N]`) is `(batch·M) × N`.
        // SAFETY: as just above.
        return unsafe { one_matrix((batch * m, n, k), va, vb, c, ctx, b_cache) };
    }
    let offs = |p: usize, st: &[isize]| batch_offset(p, sa, st);
    let cp = SendPtr(c);
    let (ap, bp) = (SendPtr(a as *mut f32), SendPtr(b as *mut f32));
    let serial = ctx.serial();
    let one = |p: usize| -> Result<(), Error> {
        let (cp, ap, bp) = (cp, ap, bp);
        // `offs(p, ·)` is batch item `p < batch`'s offset (its multi-index
        // over the shared batch dims times the strides).
        // SAFETY: so each offset stays inside its operand's storage and each
        // view addresses item `p` of its operand (readable by the contract).
        let (va, vb) = unsafe {
            (
                View::new(
                    ap.0.offset(offs(p, st_a)),
                    st_a[r - 2] as usize,
                    st_a[r - 1] as usize,
                ),
                View::new(
                    bp.0.offset(offs(p, st_b)),
                    st_b[r - 2] as usize,
                    st_b[r - 1] as usize,
                ),
            )
        };
        // A few rows per item (a decoder's query rows against each key/value
        // head's cache): swept, B read where it lies, as `one_matrix` does
        // for one matrix; bit-identical to `sgemm`. Packed per item, every
        // call copied each head's whole cache before reading it.
        #[cfg(target_arch = "x86_64")]
        if skips_gemm(m, k, &vb, false) {
            // SAFETY: the views of item `p` as above, `sweep::available`
            // (`skips_gemm` asked); this call alone writes item `p`.
            return unsafe { swept((m, n, k), &va, &vb, cp.0.add(p * m * n), &serial) };
        }
        // SAFETY: the views of item `p` as above; this call alone writes item
        // `p`, `m·n` floats at `p·m·n` of C.
        unsafe { sgemm(m, n, k, va, vb, cp.0.add(p * m * n), &serial) }
    };
    if ctx.threads != 1
        && splits(ctx, batch, m.saturating_mul(n), k)
        && rayon::current_num_threads() > 1
    {
        (0..batch).into_par_iter().try_for_each(one)
    } else {
        (0..batch).try_for_each(one)
    }
}

/// Does a batched product fold its batch into M: B the same for every
/// item (stride 0 or size 1 on every batch dim), and A's batch dims
/// stepping by whole row blocks (`st_a[d] = st_a[r−2]·rows`), so A is one
/// `(batch·M) × K` matrix? (Shapes and strides as [`matmul_strided`]
/// checked them: equal ranks ≥ 2, strides ≥ 0.)
fn folds(sa: &[usize], sb: &[usize], st_a: &[isize], st_b: &[isize]) -> bool {
    let r = sa.len();
    if !(0..r - 2).all(|d| sb[d] == 1 || st_b[d] == 0) {
        return false;
    }
    let mut ext = sa[r - 2];
    for d in (0..r - 2).rev() {
        if sa[d] == 1 {
            continue;
        }
        if st_a[d] != st_a[r - 2].saturating_mul(ext as isize) {
            return false;
        }
        ext = ext.saturating_mul(sa[d]);
    }
    true
}

/// Does an `m`-row product against the `k`-row B `b` run without the
/// GEMM kernels: through `gemv` from B's kept packing (`packed`), or
/// swept, B read where it lies ([`crate::kernels::sweep`])? The one test of
/// [`one_matrix`], [`sgemm_packed`] and [`prepare`].
fn skips_gemm(m: usize, k: usize, b: &View, packed: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if packed {
            m <= crate::kernels::gemv::MAX_M && crate::kernels::gemv::available(geometry().1)
        } else {
            crate::kernels::sweep::available(m, k, (b.rs, b.cs)).is_some()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, k, b, packed);
        false
    }
}

/// Compile now the GEMM kernels a [`matmul_strided`] of these shapes and
/// strides will run, `kept`: its B a weight whose packing is kept (issue
/// #15: a function's first call compiled them one after another while it
/// ran, after its module; [`crate::exec`] compiles them beside the
/// module, on the pool's other workers). The same decisions as the call
/// (the same `folds`, `skips_gemm` and `F32Gemm::for_product`): a
/// kernel it did not foresee (a packing the cache declined) is compiled
/// when first run, as before; results never depend on it.
pub fn prepare(
    dt: Dtype,
    (st_a, st_b): (&[isize], &[isize]),
    (sa, sb): (&[usize], &[usize]),
    kept: bool,
) -> Result<(), Error> {
    let (batch, m, k, n) = matmul_dims(sa, sb)?;
    let r = sa.len();
    let ok = st_a.len() == r && st_b.len() == r && st_a.iter().chain(st_b).all(|&s| s >= 0);
    if !ok || batch * m * n == 0 || k == 0 {
        return Ok(());
    }
    let one = batch == 1 || folds(sa, sb, st_a, st_b);
    if dt == Dtype::BF16 && bf16::available() {
        return bf16::prepare(if one { batch * m } else { m }, n);
    }
    if dt != Dtype::F32 {
        return Ok(());
    }
    let view = |st: &[isize]| View::new(std::ptr::null(), st[r - 2] as usize, st[r - 1] as usize);
    let m = if one { batch * m } else { m };
    if one && skips_gemm(m, k, &view(st_b), kept) {
        return Ok(());
    }
    // `for_product` reads the view's strides only (`a_in_place`).
    let in_place = streams(m)?.then(|| view(st_a));
    F32Gemm::for_product((m, n, k), &ExecCtx::new(1, false), in_place.as_ref()).map(|_| ())
}

/// [`prepare`] for a product whose later calls may change its column
/// count and its depth (a shape-generic compilation: a decoder's
/// attention reads a cache one position longer each step, as the columns
/// of its scores and the depth of its weighted sum): the kernels of a
/// whole last column panel and of both ragged variants (`Cols`), each
/// for A read in place and for A packed (which of the two a call takes
/// depends on the depth), whether or not B's packing is kept or a
/// product of that depth skips the GEMM. Rows and strides as given.
pub fn prepare_any_columns(
    dt: Dtype,
    (st_a, st_b): (&[isize], &[isize]),
    (sa, sb): (&[usize], &[usize]),
) -> Result<(), Error> {
    let (batch, m, k, _) = matmul_dims(sa, sb)?;
    let r = sa.len();
    let ok = st_a.len() == r && st_b.len() == r && st_a.iter().chain(st_b).all(|&s| s >= 0);
    if dt != Dtype::F32 || !ok || batch * m == 0 {
        return Ok(());
    }
    let one = batch == 1 || folds(sa, sb, st_a, st_b);
    let m = if one { batch * m } else { m };
    let a = View::new(std::ptr::null(), st_a[r - 2] as usize, st_a[r - 1] as usize);
    let in_place = streams(m)?.then_some(a);
    let nr = geometry().1;
    let k = k.max(1);
    for n in [nr, 1, nr / 2 + 1] {
        F32Gemm::for_product((m, n, k), &ExecCtx::new(1, false), in_place.as_ref())?;
        F32Gemm::for_product((m, n, k), &ExecCtx::new(1, false), None)?;
    }
    Ok(())
}

/// `C[m×n] = A · B` for one matrix each: swept ([`crate::kernels::sweep`]), from a
/// kept packing, or by [`sgemm`].
///
/// # Safety
/// `va` valid for reads of every `(i, j)`, `i < m`, `j < k`, `vb` of every
/// `(i, j)`, `i < k`, `j < n`; `c` as in [`sgemm`].
// SAFETY: (contract) met by `matmul_strided`, its only caller.
unsafe fn one_matrix(
    (m, n, k): (usize, usize, usize),
    va: View,
    vb: View,
    c: *mut f32,
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<(), Error> {
    if let Some(cache) = b_cache.filter(|_| k > 0) {
        // SAFETY: the contract (B is `k × n` at `vb`).
        if let Some(packed) = unsafe { packed_b(cache, &vb, (k, n), ctx)? } {
            // SAFETY: the contract.
            return unsafe { sgemm_packed(m, va, (vb, &packed), c, ctx) };
        }
    }
    // A few rows against a weight not (yet) kept: read where it lies
    // instead of packed for this call (a first call, or every call with
    // the cache off). Kept from the second call on, because the kept
    // packing still streamed faster (issue #15, interleaved on a Xeon
    // host): one row against 768 × 2304 row-major weights 12.6–14.4 GB/s
    // swept against 14.3–15.1 through `gemv`, 768 × 50257 transposed
    // 12.2–13.4 against 13.8–14.7. GPT-2-small, 1 thread, three
    // alternating runs each: with the cache off (everything swept) a
    // decoding step took 39–49 ms against 36–41 kept (minima over 38
    // steps), the first step 40–56 ms against 333–400 (which packs and
    // keeps 500 MB).
    #[cfg(target_arch = "x86_64")]
    if skips_gemm(m, k, &vb, false) {
        // SAFETY: the contract (`sweep::available`, as `skips_gemm` asked).
        return unsafe { swept((m, n, k), &va, &vb, c, ctx) };
    }
    // SAFETY: the contract.
    unsafe { sgemm(m, n, k, va, vb, c, ctx) }
}

/// `C[m×n] = A · B` by [`crate::kernels::sweep`], B read where it lies (no packing,
/// none kept): bit-identical to [`sgemm`] on the views.
///
/// # Safety
/// [`crate::kernels::sweep::available`]`(m, k, (b.rs, b.cs))` is `Some`; `a` valid for reads of every
/// `(i, j)`, `i < m`, `j < k`, `b` of every `(i, j)`, `i < k`, `j < n`;
/// `c` as in [`sgemm`].
// SAFETY: (contract) met by `one_matrix`, its only caller.
#[cfg(target_arch = "x86_64")]
unsafe fn swept(
    (m, n, k): (usize, usize, usize),
    a: &View,
    b: &View,
    c: *mut f32,
    ctx: &ExecCtx,
) -> Result<(), Error> {
    let len = m
        .checked_mul(k)
        .ok_or_else(|| Error::Unsupported(format!("a {m} × {k} operand")))?;
    let mut x = tc_runtime::alloc::filled(len, 0f32)?;
    // Row by row: no division per element (at a few rows and a short K it
    // cost as much as the product).
    for (i, row) in x.chunks_exact_mut(k.max(1)).enumerate() {
        for (j, xp) in row.iter_mut().enumerate() {
            // SAFETY: `i < m`, `j < k`: readable by the contract.
            *xp = unsafe { a.at(i, j) };
        }
    }
    let par = ctx.threads != 1 && (splits(ctx, m, n, k) || crate::kernels::gemv::splits(ctx, k, n));
    let w = crate::kernels::sweep::Weight {
        ptr: b.ptr,
        rs: b.rs,
        cs: b.cs,
        k,
        n,
    };
    // SAFETY: `available` (the contract); `x` is `m × k`; B and C as the
    // contract makes them.
    unsafe { crate::kernels::sweep::rows(&x, m, &w, params().1, c, par) };
    Ok(())
}

/// `b` packed, from `cache` or packed now and kept there; `None` when the
/// cache says to pack per call.
///
/// # Safety
/// `b` valid for reads of every `(i, j)`, `i < k`, `j < n`.
// SAFETY: (contract) met by `matmul_strided`, its only caller.
unsafe fn packed_b(
    cache: &dyn PackCache,
    b: &View,
    (k, n): (usize, usize),
    ctx: &ExecCtx,
) -> Result<Option<std::sync::Arc<PackedB>>, Error> {
    // Packed on the pool where the call may split.
    let par = ctx.threads != 1 && rayon::current_num_threads() > 1;
    // SAFETY: the contract.
    let pack = || unsafe { PackedB::pack(b, k, n, par) };
    kept_packing(cache, ViewKey::of(b, k, n), PackedB::is_f32, pack)
}

/// The packing `cache` keeps for `key`, if `fits` takes it (a packing of
/// this path's layout), or `pack`'s, kept, when the cache asks for one;
/// `None` to pack per call. One rule for every path's kept weights.
fn kept_packing(
    cache: &dyn PackCache,
    key: ViewKey,
    fits: fn(&PackedB) -> bool,
    pack: impl FnOnce() -> Result<PackedB, Error>,
) -> Result<Option<std::sync::Arc<PackedB>>, Error> {
    Ok(match cache.get(&key) {
        Lookup::Hit(p) => fits(&p).then_some(p),
        Lookup::Skip => None,
        Lookup::Pack => {
            let p = std::sync::Arc::new(pack()?);
            cache.put(key, p.clone());
            Some(p)
        }
    })
}

/// Widen `len` elements of a narrow float dtype's storage at `ptr` to f32
/// (exact: every F16/BF16/F8 value is an f32). F16 and BF16 go through
/// `half`'s slice conversion (F16C instructions when the CPU has them,
/// detected at run time) and a shift; F8 through a 256-entry table built from the
/// Section 2 §5 decoder. Per element through `cast::decode_bits`, widening
/// a 768 × 3072 F16 weight took longer than the matmul itself.
///
/// # Safety
/// `ptr` must hold `len` elements of `d`'s storage (2-byte aligned for the
/// 16-bit dtypes: tensor storage is 8-byte aligned).
// SAFETY: (contract) met by `matmul` (whole operand storage) and its test.
unsafe fn widen(d: Dtype, ptr: *const u8, len: usize) -> Result<Vec<f32>, Error> {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

    // Fallible: an operand within the element cap may still not fit twice.
    let mut out = tc_runtime::alloc::filled(len, 0f32)?;
    match d {
        Dtype::F16 => {
            // SAFETY: `len` initialised, 2-byte aligned u16s (the contract).
            let bits = unsafe { std::slice::from_raw_parts(ptr as *const u16, len) };
            let h: &[half::f16] = bits.reinterpret_cast();
            h.convert_to_f32_slice(&mut out);
        }
        Dtype::BF16 => {
            // A BF16 is the high half of an f32: a shift (vectorizes).
            // SAFETY: `len` initialised, 2-byte aligned u16s (the contract).
            let bits = unsafe { std::slice::from_raw_parts(ptr as *const u16, len) };
            for (o, b) in out.iter_mut().zip(bits) {
                *o = f32::from_bits((*b as u32) << 16);
            }
        }
        _ => {
            let table: Vec<f32> = (0..256u16)
                .map(|b| cast::decode_bits(b, d).unwrap_or(f32::NAN))
                .collect();
            // SAFETY: `len` initialised bytes (the contract).
            let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
            for (o, b) in out.iter_mut().zip(bytes) {
                *o = table[*b as usize];
            }
        }
    }
    Ok(out)
}

/// Round f32 results into a narrow float dtype's storage at `out`, with
/// the Section 2 §5 rounding (round to nearest even). F16 and BF16 go
/// through `half`'s slice conversions, which give the same bits as
/// `cast::encode_bits` (`narrow_tests` checks 2M patterns, NaNs included);
/// F8 through `cast::encode_bits` per element.
///
/// # Safety
/// `out` must be valid for writes of `xs.len()` elements of `d`'s storage
/// (2-byte aligned for the 16-bit dtypes) and not referenced elsewhere.
// SAFETY: (contract) met by `matmul`, its only caller (the whole output).
unsafe fn narrow(d: Dtype, xs: &[f32], out: *mut u8) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    match d {
        Dtype::F16 => {
            // SAFETY: `xs.len()` writable, 2-byte aligned u16s that nothing
            // else references (the contract); every u16 is valid.
            let bits = unsafe { std::slice::from_raw_parts_mut(out as *mut u16, xs.len()) };
            let h: &mut [half::f16] = bits.reinterpret_cast_mut();
            h.convert_from_f32_slice(xs);
        }
        Dtype::BF16 => {
            // SAFETY: as for F16 just above.
            let bits = unsafe { std::slice::from_raw_parts_mut(out as *mut u16, xs.len()) };
            let h: &mut [half::bf16] = bits.reinterpret_cast_mut();
            h.convert_from_f32_slice(xs);
        }
        _ => {
            for (i, x) in xs.iter().enumerate() {
                // SAFETY: byte `i < xs.len()` of the output (the contract).
                unsafe { *out.add(i) = cast::encode_bits(*x, d).unwrap_or(0) as u8 };
            }
        }
    }
}

/// Batched matmul on contiguous raw storage (Section 2 §5 layout) of dtype
/// `dt`: `a: p ++ [M, K]`, `b: p ++ [K, N]` → `out: p ++ [M, N]`.
///
/// Shapes that are not a matmul (Section 2 §7) and element counts that
/// overflow are errors, never a panic.
///
/// # Safety
/// `a` and `b` must be valid for reads of the storage of `sa` and `sb`,
/// `out` for writes of the storage of `p ++ [M, N]`, not overlapping the
/// operands; the 16-bit float dtypes need 2-byte aligned storage (tensor
/// storage is 8-byte aligned). It stays `unsafe` because raw buffers carry
/// no length to check against.
// SAFETY: (contract) in the crate met by `matmul_strided` (contiguous case).
pub unsafe fn matmul(
    dt: Dtype,
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
) -> Result<(), Error> {
    let (batch, m, k, n) = matmul_dims(sa, sb)?;
    if batch * m * n == 0 {
        return Ok(());
    }
    // Each at most an operand's or the output's count (`matmul_dims`:
    // checked, within the cap).
    let (na, nb, nc) = (m * k, k * n, m * n);
    match dt {
        Dtype::F32 => {
            let (a, b, c) = (a as *const f32, b as *const f32, out as *mut f32);
            for p in 0..batch {
                // SAFETY: item `p < batch` of each contiguous operand is the
                // `na` (`nb`, `nc`) floats at `p·na` (`p·nb`, `p·nc`), inside
                // the storage the contract makes valid.
                unsafe {
                    sgemm(
                        m,
                        n,
                        k,
                        View::new(a.add(p * na), k, 1),
                        View::new(b.add(p * nb), n, 1),
                        c.add(p * nc),
                        ctx,
                    )?;
                }
            }
            // SAFETY: `out` holds the output's `batch·nc` f32s (the
            // contract), just written, referenced nowhere else.
            canonical_nans_in(
                unsafe { std::slice::from_raw_parts_mut(c, batch * nc) },
                ctx,
            );
        }
        d if d.is_float() => {
            // SAFETY: `a`, `b` hold `batch·na`, `batch·nb` BF16 elements
            // (2-byte aligned), `out` `batch·nc`, the counts checked by
            // `matmul_dims` (the contract).
            if d == Dtype::BF16
                && unsafe {
                    bf16::try_matmul(a.cast(), b.cast(), out.cast(), batch, (m, k, n), ctx, None)?
                }
            {
                return Ok(());
            }
            let mut cf = tc_runtime::alloc::filled(batch * nc, 0f32)?;
            // SAFETY: `batch·na` and `batch·nb` elements of `d`, the whole
            // storage of `sa` and `sb`, aligned as the contract says.
            let (af, bf) = unsafe { (widen(d, a, batch * na)?, widen(d, b, batch * nb)?) };
            for p in 0..batch {
                // SAFETY: as for F32, on the widened copies `af`, `bf` and
                // `cf` (allocated with exactly `batch` items each).
                unsafe {
                    sgemm(
                        m,
                        n,
                        k,
                        View::new(af.as_ptr().add(p * na), k, 1),
                        View::new(bf.as_ptr().add(p * nb), n, 1),
                        cf.as_mut_ptr().add(p * nc),
                        ctx,
                    )?;
                }
            }
            canonical_nans_in(&mut cf, ctx);
            // SAFETY: `cf` has the `batch·nc` elements of `out`'s storage.
            unsafe { narrow(d, &cf, out) };
        }
        d if d.is_int() => {
            // SAFETY: the same contract.
            return unsafe { crate::kernels::matmul_int::matmul_int(d, a, b, out, sa, sb, ctx) };
        }
        _ => return Err(Error::Unsupported(format!("matmul at {dt}"))),
    }
    Ok(())
}

#[cfg(test)]
mod in_place_tests {
    use super::*;

    /// Which products read A in place, and with kernels of how many rows
    /// (on a host whose kernel has 14 rows).
    #[test]
    fn a_is_read_in_place_as_documented() {
        if geometry().0 != 14 {
            return;
        }
        let view = |rs: usize| View::new(std::ptr::null(), rs, 1);
        // One row panel: while its K-block fits 4096 floats, by a kernel
        // of the panel's rows.
        assert_eq!(a_in_place(&view(384), (10, 384), 14), Some(14));
        assert_eq!(a_in_place(&view(1536), (10, 1536), 14), None);
        // More: always, 8 rows at a time, unless 8 rows crowd an L1 set
        // (6 KiB apart: four to a set).
        assert_eq!(a_in_place(&view(128), (128, 128), 14), Some(IN_PLACE_ROWS));
        assert_eq!(a_in_place(&view(1536), (15, 384), 14), None);
        assert_eq!(a_in_place(&view(1552), (15, 1536), 14), Some(IN_PLACE_ROWS));
        // Rows 4 KiB apart share an L1 set: packed.
        assert_eq!(a_in_place(&view(1024), (128, 128), 14), None);
        assert_eq!(a_in_place(&view(1024), (10, 128), 14), None);
        // Not contiguous along k: packed.
        assert_eq!(
            a_in_place(&View::new(std::ptr::null(), 1, 128), (128, 128), 14),
            None
        );
    }
}

#[cfg(test)]
mod nan_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The chunked NaN pass equals the per-element rule on any length
        /// (across and inside chunk edges), any NaN payload and sign at any
        /// position, infinities and zeros left alone.
        #[test]
        fn canonical_nans_rewrites_exactly_the_nans(
            bits in proptest::collection::vec(
                prop_oneof![
                    any::<u32>(),
                    (any::<bool>(), 1u32..(1 << 23)).prop_map(|(s, m)| (u32::from(s) << 31) | 0x7f80_0000 | m),
                    Just(0x7f80_0000u32),
                    Just(0x8000_0000u32),
                ],
                0..1100,
            )
        ) {
            let mut c: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
            canonical_nans(&mut c);
            for (&b, v) in bits.iter().zip(&c) {
                let want = if f32::from_bits(b).is_nan() { cast::CANONICAL_NAN.to_bits() } else { b };
                prop_assert_eq!(v.to_bits(), want);
            }
        }

        /// Split over a pool of two, the pass gives the serial pass's bits
        /// on outputs past the split threshold, NaNs at any position (piece
        /// edges included).
        #[test]
        fn the_split_pass_equals_the_serial_one(
            len in 66_000usize..90_000,
            nans in proptest::collection::vec((any::<prop::sample::Index>(), 1u32..(1 << 23)), 0..40),
        ) {
            let mut c: Vec<f32> = (0..len).map(|i| i as f32 - 1000.0).collect();
            for (at, m) in &nans {
                c[at.index(len)] = f32::from_bits(0x7f80_0000 | m);
            }
            for edge in [16_383, 16_384, 32_768] {
                c[edge] = f32::NAN;
            }
            let mut serial = c.clone();
            canonical_nans(&mut serial);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            pool.install(|| canonical_nans_in(&mut c, &ExecCtx::new(2, false)));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&c), bits(&serial));
        }
    }
}

#[cfg(test)]
pub(crate) mod unsafe_tests;

#[cfg(test)]
mod widen_tests {
    use super::*;

    /// The fast widening equals the Section 2 §5 decoder on every bit
    /// pattern of every narrow float dtype (NaNs stay NaN).
    #[test]
    fn widen_matches_decode_bits_exhaustively() {
        for d in [Dtype::F16, Dtype::BF16, Dtype::F8E4M3, Dtype::F8E5M2] {
            let n = if d.bits() == 16 { 1usize << 16 } else { 256 };
            let raw: Vec<u8> = (0..n)
                .flat_map(|b| {
                    if d.bits() == 16 {
                        (b as u16).to_le_bytes().to_vec()
                    } else {
                        vec![b as u8]
                    }
                })
                .collect();
            // 16-bit storage must be 2-byte aligned, as tensor storage is.
            let words: Vec<u64> = raw
                .chunks(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    u64::from_le_bytes(w)
                })
                .collect();
            // SAFETY: `words` holds `n` elements of `d`'s storage.
            let got = unsafe { widen(d, words.as_ptr() as *const u8, n) }.unwrap();
            for (b, g) in got.iter().enumerate() {
                let want = cast::decode_bits(b as u16, d).unwrap_or(f32::NAN);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{d}: bits {b:#x}: widen {g:?} vs decode {want:?}"
                );
            }
        }
    }
}

#[cfg(test)]
mod narrow_tests {
    use tc_core::Dtype;
    use tc_runtime::cast;

    /// `half`'s f32 → F16/BF16 rounding (the matmul's `narrow`) gives the
    /// Section 2 §5 bits of `cast::encode_bits` on 2M f32 patterns: 1M
    /// random bit patterns (NaNs, infinities, subnormals included) and the
    /// first 1M non-negative ones.
    #[test]
    fn half_encode_agrees_with_cast() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..2_000_000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = f32::from_bits(if i < 1 << 20 {
                (s >> 32) as u32
            } else {
                i as u32
            });
            for (d, got) in [
                (Dtype::F16, half::f16::from_f32(x).to_bits()),
                (Dtype::BF16, half::bf16::from_f32(x).to_bits()),
            ] {
                assert_eq!(
                    Some(got),
                    cast::encode_bits(x, d),
                    "{d}: f32 bits {:#x}",
                    x.to_bits()
                );
            }
        }
    }
}

#[cfg(test)]
mod dims_tests {
    use super::*;

    /// Every raw entry point rejects a call whose shapes are not a matmul
    /// (Section 2 §7), whose strides do not fit them or whose element count
    /// overflows, before touching a buffer: the pointers here are dangling
    /// and must never be read.
    #[test]
    fn malformed_shapes_and_strides_are_errors_before_any_access() {
        let p = std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8;
        let big = usize::MAX / 2;
        let bad: &[(&[usize], &[usize])] = &[
            (&[2], &[2]),                 // rank < 2
            (&[2, 3], &[2, 3, 4]),        // ranks differ
            (&[2, 3], &[4, 2]),           // K ≠ K'
            (&[2, 1, 3], &[3, 3, 1]),     // batch prefixes differ
            (&[big, 4], &[4, 1]),         // A's count overflows
            (&[1, 4], &[4, big]),         // B's count overflows
            (&[big, 1, 1], &[big, 1, 1]), // over the element cap
            (&[big, 3, 1], &[big, 1, 3]), // C's count overflows
        ];
        assert_eq!(matmul_dims(&[4, 1, 1], &[4, 1, 1]).ok(), Some((4, 1, 1, 1)));
        for &(sa, sb) in bad {
            let dims = matmul_dims(sa, sb);
            assert!(dims.is_err(), "{sa:?} × {sb:?}");
            for dt in [Dtype::F32, Dtype::F16, Dtype::I32] {
                // SAFETY: each call must return an error before any access
                // (which is what this test checks); nothing is dereferenced.
                let r =
                    unsafe { matmul(dt, p, p, p, sa, sb, &crate::ctx::ExecCtx::on_this_thread(1)) };
                assert!(r.is_err(), "matmul {dt} {sa:?} × {sb:?}");
                let (st_a, st_b) = (contiguous_strides(sa), contiguous_strides(sb));
                // SAFETY: as above.
                let r = unsafe {
                    matmul_strided(
                        dt,
                        p,
                        &st_a,
                        p,
                        &st_b,
                        p,
                        sa,
                        sb,
                        &crate::ctx::ExecCtx::on_this_thread(1),
                        None,
                    )
                };
                assert!(r.is_err(), "matmul_strided {dt} {sa:?} × {sb:?}");
            }
        }
        // Strides of the wrong rank, or negative.
        let (sa, sb) = ([2usize, 3], [3usize, 2]);
        for (st_a, st_b) in [(vec![3isize], vec![2, 1]), (vec![3, 1], vec![-2, 1])] {
            // SAFETY: as above.
            let r = unsafe {
                matmul_strided(
                    Dtype::F32,
                    p,
                    &st_a,
                    p,
                    &st_b,
                    p,
                    &sa,
                    &sb,
                    &crate::ctx::ExecCtx::on_this_thread(1),
                    None,
                )
            };
            assert!(r.is_err(), "strides {st_a:?} {st_b:?}");
        }
    }
}

#[cfg(test)]
mod align_tests {
    use super::*;

    /// Kept packings and per-call panel buffers start on a cache line
    /// whatever address the allocator gave (a split 64-byte load costs a
    /// second line per B vector), and the packing still holds B's values.
    #[test]
    fn packings_start_on_a_cache_line() {
        for (k, n) in [(1, 1), (3, 5), (128, 128), (384, 1536), (1536, 384)] {
            let b: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
            // SAFETY: `b` holds the `k × n` row-major view.
            let p = unsafe { PackedB::pack(&View::new(b.as_ptr(), n, 1), k, n, false) }.unwrap();
            assert_eq!(p.slab().as_ptr() as usize % 64, 0, "{k} × {n}");
            // Panel 0 of K-block 0, row 0: B's first `min(n, nr)` floats.
            let first = &p.panel(0, 0)[..n.min(p.nr)];
            assert!(first.iter().zip(&b).all(|(x, y)| x == y), "{k} × {n}");
        }
        for need in [1, 100, 5000, 70_000] {
            // Start from buffers of every alignment a `Vec<f32>` can have.
            for skew in 0..16 {
                let mut buf: Vec<f32> = vec![0.0; skew + 1];
                buf.drain(..skew);
                let off = aligned_off(&mut buf, need);
                assert!(off < 16 && off + need <= buf.len());
                assert_eq!(buf[off..].as_ptr() as usize % 64, 0);
            }
        }
    }

    /// A packing holds every element of B where [`PackedB::panel`] says
    /// (zeros past `n`), made on one thread or on the pool: every K-block,
    /// the ragged last panel, a row-major B and one read through a
    /// transposed view.
    #[test]
    fn every_packing_holds_b_where_its_panels_say() {
        for (k, n) in [(1, 1), (7, 33), (600, 100), (1100, 1041)] {
            let b: Vec<f32> = (0..k * n).map(|i| (i % 9973) as f32 - 17.5).collect();
            for (rs, cs) in [(n, 1), (1, k)] {
                for par in [false, true] {
                    // SAFETY: `b` holds `k·n` floats, read as the row-major
                    // `k × n` view or as its transpose (`(i, j)` at `j·k + i`).
                    let p = unsafe { PackedB::pack(&View::new(b.as_ptr(), rs, cs), k, n, par) }
                        .unwrap();
                    for pc in (0..k).step_by(p.kc) {
                        for q in 0..n.div_ceil(p.nr) {
                            let panel = p.panel(pc, q);
                            for (idx, &x) in panel.iter().enumerate() {
                                let (i, j) = (pc + idx / p.nr, q * p.nr + idx % p.nr);
                                let want = if j < n { b[i * rs + j * cs] } else { 0.0 };
                                assert_eq!(
                                    x.to_bits(),
                                    want.to_bits(),
                                    "{k}×{n} par={par} ({i}, {j})"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod kernel_variant_tests {
    use crate::kernels::gemm_common::{ALayout, Cols};
    use crate::kernels::matmul_int::IntKernel;

    /// The f32 kernels the planner can ask for, by name: both vector
    /// widths, every row count, A packed (as wide as the tile or wider:
    /// an edge kernel) or read in place with and without its prefetch,
    /// each [`Cols`] variant.
    fn f32_variants() -> Vec<(String, String)> {
        let mut out = Vec::new();
        for vw in [8, 16] {
            for rows in 1..=14 {
                let mut layouts = vec![
                    ALayout::Packed(rows),
                    ALayout::Rows { ahead: 0 },
                    ALayout::Rows {
                        ahead: super::A_AHEAD,
                    },
                ];
                layouts.extend(
                    [6, 13, 14]
                        .into_iter()
                        .filter(|&s| s > rows)
                        .map(ALayout::Packed),
                );
                for a in layouts {
                    for c in [Cols::Whole, Cols::One, Cols::Two] {
                        let name = format!("f32 vw{vw} rows{rows} {a:?} {c:?}");
                        out.push((name, super::ukernel_ir_rows(vw, rows, a, c)));
                    }
                }
            }
        }
        out
    }

    /// The integer kernels, by name: each kind at its vector widths,
    /// every row count of panels packed as wide or wider, each [`Cols`]
    /// variant.
    fn int_variants() -> Vec<(String, String)> {
        let kinds = [
            (IntKernel::I64, [4, 8]),
            (IntKernel::I32, [8, 16]),
            (IntKernel::Pair16, [8, 16]),
        ];
        let mut out = Vec::new();
        for (kind, vws) in kinds {
            for vw in vws {
                for rows in 1..=14 {
                    let wider = [4, 6, 13, 14].into_iter().filter(|&s| s > rows);
                    for mr in std::iter::once(rows).chain(wider) {
                        for c in [Cols::Whole, Cols::One, Cols::Two] {
                            let name = format!("{kind:?} vw{vw} rows{rows} mr{mr} {c:?}");
                            let ir = crate::kernels::matmul_int::ukernel_int_ir_rows(
                                kind,
                                vw,
                                (rows, mr),
                                c,
                            );
                            out.push((name, ir));
                        }
                    }
                }
            }
        }
        out
    }

    /// Every micro-kernel variant's module parses and verifies in LLVM
    /// (what compiling it checks first, without the optimisation and code
    /// generation that would take minutes over all of them).
    #[test]
    fn every_kernel_variant_is_valid_ir() {
        use inkwell::context::Context;
        use inkwell::memory_buffer::MemoryBuffer;
        let variants: Vec<_> = f32_variants().into_iter().chain(int_variants()).collect();
        assert_eq!(variants.len(), 1278);
        let ctx = Context::create();
        for (name, ir) in variants {
            let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), &name);
            let module = ctx
                .create_module_from_ir(buf)
                .unwrap_or_else(|e| panic!("{name} does not parse: {e}\n{ir}"));
            if let Err(e) = module.verify() {
                panic!("{name} does not verify: {e}\n{ir}");
            }
        }
    }
}
