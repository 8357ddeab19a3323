//! Products on AMX tiles: BF16 on `tdpbf16ps`, which adds a 16 × 32 by
//! 32 × 16 product (thirty-two steps of k) to a 16 × 16 f32 tile per
//! instruction, sixteen times the multiply-adds of a `vdpbf16ps` per issue
//! slot; and I8 on `tdpbssd` (docs/syntax.md §7b `matmul_i32`), a 16 × 64
//! by 64 × 16 product into a 16 × 16 i32 tile. One driver serves both
//! ([`TileOp`]): an A tile row and a B slot row are 64 bytes either way,
//! two BF16 or four I8 k-steps per 4-byte slot.
//!
//! # Layout
//! - **B** is packed in 4-byte slots: per K-block, panels of 32 columns
//!   whose slot row `s` holds, per column, the k-steps of slot `s` (BF16:
//!   `vdpbf16ps`'s pairs `(b[2s][j], b[2s+1][j])`, [`super::bf16`]; I8:
//!   the quads `b[4s..4s+4][j]`, [`super::i8`]), 128 bytes. Sixteen such
//!   rows, read with a 128-byte stride from byte 0 (columns 0–15) or 64
//!   (16–31), are exactly the "VNNI layout" of the instruction's B tile;
//!   a BF16 weight's kept packing serves both its paths.
//! - **A** is packed once per call, each tile's 16 rows of 64 bytes
//!   contiguous ([`pack_a`]), rows past `m` zero (so no tile reads past
//!   the matrix).
//! - **C**: four tiles (32 rows × 32 columns) accumulate over the whole
//!   of k, are stored to L1 scratch and written to the output (BF16:
//!   rounded once; I32: as they are).
//!
//! Products with `k` a multiple of a tile row's k-steps run here (every
//! K-block then holds whole tiles); others keep the vector kernels.
//!
//! # Numerics
//! BF16 as [`super::bf16`]'s: a product of two BF16 values is exact in
//! f32 and each accumulation is one rounded f32 addition (round to
//! nearest even) in some order, so the widened path's bound holds; the
//! instruction's DAZ/FTZ cannot act on operands that pass
//! [`super::bf16::Scan`] (the caller's check), and the result is rounded
//! once to BF16. I8: `tdpbssd` sums exact products in i32 lanes, wrapping
//! (no saturation): arithmetic mod 2³², which is §7b's I32 result in any
//! order, bit for bit.
//!
//! # Tile state
//! Each task loads [`CONFIG`] once ([`Tiles::load`]), runs only tile and
//! vector code while it holds it (no rayon call: a waiting thread could
//! run another task's tiles), and releases it when done.

use std::arch::asm;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;
use tc_quant::tiles::{self, Config, Tiles};

use super::bf16::round_bf16;
use super::PackedB;
use crate::ctx::Settings;
use crate::kernels::gemm_common::SendPtr;
use crate::options::Error;

/// Rows and columns of one C tile.
pub(super) const T: usize = 16;
/// Bytes of one A tile row (and of one B slot row of 16 columns).
pub(super) const ROW_BYTES: usize = 64;
/// Bytes of A in a task's row block, which stays in L2 while the task
/// runs every column panel against it (half of a 1–2 MiB L2, the rest
/// for the panels of B streaming through).
const A_BLOCK_BYTES: usize = 512 << 10;

/// Rows of a row block for `row_bytes` of A per row: whole groups of 32,
/// A_BLOCK_BYTES of A at most (one group at least).
fn block_rows(row_bytes: usize) -> usize {
    (A_BLOCK_BYTES / row_bytes / (2 * T)).max(1) * 2 * T
}

/// Rows of a row block for a product split over `threads`:
/// [`block_rows`], and at most an even share of the rows per thread
/// (whole groups of 32), so that the threads take rows apart rather than
/// column panels of one block, as the elementwise ops after a product
/// split their work. MiniLM bf16 at two threads on the Intel AMX host
/// (`peer_bench`, 30 repetitions, the two alternating four times): 32 ×
/// 16 18.0–18.7 → 16.5–17.6 ms, 8 × 128 47.8–50.0 → 46.1–48.5; only
/// products with k = 384 changed (longer k already had smaller blocks).
fn shared_rows(m: usize, row_bytes: usize, threads: usize) -> usize {
    let share = m.div_ceil(threads.max(1)).div_ceil(2 * T) * 2 * T;
    block_rows(row_bytes).min(share)
}

/// Bytes of a group's A (32 rows of k) that stay in L1 while every panel
/// of a row block runs against them: MiniLM's k = 384 at BF16 (24 KiB),
/// not 1536, whose A and panels then both came from L2.
const GROUP_L1_BYTES: usize = 32 << 10;

/// Multiply-adds below which a product stays on the calling thread
/// (about 40 µs of BF16 tiles).
const PAR_MIN_MACS: usize = 1 << 24;

/// Every tile 16 rows of 64 bytes: `tmm0`–`tmm3` C (16 × 16 f32 or i32),
/// `tmm4`, `tmm5` A (16 rows of 64 bytes), `tmm6`, `tmm7` B (16 slot
/// rows × 16 columns).
static CONFIG: Config = Config::new(&[(16, 64); 8]);

/// What a tile product multiplies, and how its sums reach the output.
pub(super) trait TileOp {
    /// Bytes of one element of A and B.
    const SIZE: usize;
    /// Whether this op's packing of B pads k to whole tile rows with zero
    /// rows ([`packed_k`]), so that any k runs on tiles; otherwise k must
    /// fill whole tile rows itself ([`fits`]).
    const PADS_K: bool;
    /// The output's element.
    type Out: Copy;
    /// Whether `b` is a packing of this op's slots.
    fn packs(b: &PackedB) -> bool;
    /// The counter of products run here.
    fn counter() -> &'static AtomicU64;
    /// One k-tile: `tmm0`/`tmm1` += A tile `a0` by B's two column tiles
    /// at `b` (slot rows 128 bytes apart, the second at byte 64); with
    /// `two`, `tmm2`/`tmm3` += A tile `a1` by the same.
    ///
    /// # Safety
    /// [`CONFIG`] loaded; `a0` (and `a1` with `two`) readable for 16 rows
    /// of 64 bytes, `b` for 16 rows of 128.
    // SAFETY: (contract) met by `group`, its only caller.
    unsafe fn step(two: bool, a0: *const u8, a1: *const u8, b: *const f32);
    /// Rows `r0..r0 + rows` (at most 32) and columns `j0..j0 + 32` (those
    /// below `n`) of the output from `c`'s tiles: each row's 32 columns
    /// (both column tiles) in one go.
    ///
    /// # Safety
    /// `out` must be valid for writes of those elements of an
    /// `n`-column row-major matrix, referenced by nothing else; the CPU
    /// has AVX-512 F and BW.
    // SAFETY: (contract) met by `matmul`, its only caller.
    unsafe fn write(c: &CTiles, out: *mut Self::Out, rows: (usize, usize), cols: (usize, usize));
}

/// BF16 operands on `tdpbf16ps`, a BF16 output rounded from the f32 sums.
pub(super) struct Bf16;
/// I8 operands on `tdpbssd`, the I32 sums as the output (§7b).
pub(super) struct I8;

/// BF16 products computed on AMX tiles.
static TILED: AtomicU64 = AtomicU64::new(0);
/// I8 products computed on AMX tiles.
static TILED_I8: AtomicU64 = AtomicU64::new(0);

/// How many BF16 products this process computed on AMX tiles.
pub fn tiled() -> u64 {
    TILED.load(Ordering::Relaxed)
}

/// How many `matmul_i32` products this process computed on AMX tiles.
pub fn tiled_i8() -> u64 {
    TILED_I8.load(Ordering::Relaxed)
}

/// Whether the CPU has `ext` and AVX-512 F and BW, and the OS granted the
/// tile state.
fn host_has(ext: tiles::Extension) -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && tiles::cpu_has(ext)
        && tiles::granted()
}

/// Whether BF16 products may run on AMX tiles: AMX-BF16 and AVX-512 F
/// and BW in the CPU, the tile state granted by the OS, and `TC_MM_AMX` not `0`
/// ([`set_enabled`]).
pub fn available() -> bool {
    static HOST: OnceLock<bool> = OnceLock::new();
    *HOST.get_or_init(|| host_has(tiles::Extension::Bf16)) && Settings::get().mm_amx.on()
}

/// Whether `matmul_i32` products may run on AMX tiles: AMX-INT8 and
/// AVX-512 F and BW in the CPU, the tile state granted, and `TC_MM_AMX`
/// not `0`.
pub fn available_i8() -> bool {
    static HOST: OnceLock<bool> = OnceLock::new();
    *HOST.get_or_init(|| host_has(tiles::Extension::Int8)) && Settings::get().mm_amx.on()
}

/// Turn the AMX paths on or off, process-wide (measurements and the
/// equivalence tests).
pub fn set_enabled(on: bool) {
    Settings::get().mm_amx.set(on)
}

/// Rows from which a product runs on tiles: a row tile of fewer than 16
/// rows computes zeros for the rest, but on the Intel AMX host even two
/// rows ran faster than on `vdpbf16ps` (`mm_bf16`, one thread, k =
/// 384 and 1536: 43–70 against 45–47 GMAC/s at 2 rows, 184–313 against
/// 51–52 at 10); one row (a matrix-vector product) was not (21–34
/// against 26–27).
const MIN_ROWS: usize = 2;

/// Whether an `m × k × n` product of `O` runs here: `k` whole tile rows
/// (or an op whose packing pads k, [`TileOp::PADS_K`]), and at least
/// [`MIN_ROWS`] rows.
pub(super) fn fits<O: TileOp>(m: usize, k: usize, _n: usize) -> bool {
    k > 0 && (O::PADS_K || (k * O::SIZE).is_multiple_of(ROW_BYTES)) && m >= MIN_ROWS
}

/// The k an `O` packing of a k-step operand holds: k rounded up to whole
/// tile rows (64 bytes of each row), the steps past k zero, so that they
/// add nothing to any sum. `None` if that overflows.
pub(super) fn packed_k<O: TileOp>(k: usize) -> Option<usize> {
    k.checked_next_multiple_of(ROW_BYTES / O::SIZE)
}

/// The lane masks of a panel's two column tiles when `left` columns of
/// the output remain from its first (all 32, or a ragged last panel's).
pub(super) fn panel_masks(left: usize) -> (u16, u16) {
    let cols = left.min(2 * T);
    let lo = if cols >= T { !0 } else { (1u16 << cols) - 1 };
    let hi = match cols {
        c if c == 2 * T => !0,
        c if c > T => (1u16 << (c - T)) - 1,
        _ => 0,
    };
    (lo, hi)
}

/// Four C tiles, 64-byte aligned for `tilestored` (f32 or i32 bits).
#[repr(C, align(64))]
pub(super) struct CTiles(pub(super) [f32; 4 * T * T]);

/// The product `a: [m, k]` (row-major, `O`'s elements as bytes) by the
/// packed `b` into `out: [m, n]`; on the pool with `par`.
///
/// # Safety
/// `O`'s tiles available ([`available`], [`available_i8`]); `a` must be
/// valid for reads of `m·k` elements and `out` for writes of `m·n`
/// (aligned for `O::Out`, not overlapping `a`); `b` packs a `k × n`
/// operand in `O`'s slots; [`fits`]`(m, k, n)`.
// SAFETY: (contract) met by `bf16::try_matmul` and `i8::matmul`, its
// callers.
pub(super) unsafe fn matmul<O: TileOp>(
    a: *const u8,
    b: &PackedB,
    out: *mut O::Out,
    (m, k, n): (usize, usize, usize),
    par: bool,
) -> Result<(), Error> {
    let src_row = k * O::SIZE;
    // SAFETY: A's `m·k` elements (the contract).
    let a = unsafe { std::slice::from_raw_parts(a, m * src_row) };
    let pack = |packed: &mut [u8], row_bytes: usize, par: bool| {
        pack_a(a, (m, src_row, row_bytes), packed, par);
        Plain::<O>(SendPtr(out))
    };
    // SAFETY: the contract: `out` writable for the `m × n` output, `b`
    // this product's packing, the tiles available, `fits`.
    unsafe { drive::<O, _>(b, (m, k, n), par, pack) }
}

/// How a C tile block reaches the output.
pub(super) trait TileWrite<O: TileOp>: Sync {
    /// Rows `r0..r0 + rows` (at most 32) and columns `j0..j0 + 32` (those
    /// below `n`) of the output from `c`'s tiles.
    ///
    /// # Safety
    /// Those rows and columns lie inside the `m × n` output this writer
    /// was made for, and no other call writes them meanwhile; the CPU has
    /// AVX-512 F and BW.
    // SAFETY: (contract) met by `drive`, its only caller.
    unsafe fn write(&self, c: &CTiles, rows: (usize, usize), cols: (usize, usize));
}

/// The op's own output, [`TileOp::write`].
struct Plain<O: TileOp>(SendPtr<O::Out>);

// SAFETY: the pointer is only written through by `write`, whose callers
// give each call rows and columns of its own (`TileWrite`'s contract).
unsafe impl<O: TileOp> Sync for Plain<O> {}

impl<O: TileOp> TileWrite<O> for Plain<O> {
    // SAFETY: (contract) the trait's.
    unsafe fn write(&self, c: &CTiles, rows: (usize, usize), (j0, n): (usize, usize)) {
        // SAFETY: the trait's contract is `O::write`'s for this output.
        unsafe { O::write(c, self.0 .0, rows, (j0, n)) }
    }
}

/// The tile loop of an `m × k × n` product against the packed `b`: A
/// packed by `pack` (given the packing, each row's packed bytes — `b.k`
/// elements — and whether to use the pool), which must lay out every
/// row as [`pack_a`] does and returns the writer of the output (which
/// may carry what the packing found: the rows' scales); each unit's C
/// block to that writer.
///
/// # Safety
/// `O`'s tiles available; `b` packs a `k × n` operand in `O`'s slots;
/// [`fits`]`(m, k, n)`; the writer writes an `m × n` output.
// SAFETY: (contract) met by `matmul` and `dq::tiled`, its callers.
pub(super) unsafe fn drive<O: TileOp, W: TileWrite<O>>(
    b: &PackedB,
    (m, k, n): (usize, usize, usize),
    par: bool,
    pack: impl FnOnce(&mut [u8], usize, bool) -> W,
) -> Result<(), Error> {
    let tk = ROW_BYTES / O::SIZE;
    assert!(O::packs(b) && Some(b.k) == packed_k::<O>(k) && b.n == n && b.nr == 2 * T);
    assert!(fits::<O>(m, k, n) && b.kc.is_multiple_of(tk));
    // A task on the pool costs microseconds; at these rates a product
    // under `PAR_MIN_MACS` is done sooner on the calling thread.
    let par = par && m.saturating_mul(n).saturating_mul(k) >= PAR_MIN_MACS;
    // A's rows as packed: B's k, whole tile rows.
    let row_bytes = b.k * O::SIZE;
    let groups = m.div_ceil(2 * T);
    let mut packed = APACK.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let len = (groups * 2 * T)
        .checked_mul(row_bytes)
        .ok_or_else(|| Error::Unsupported(format!("packing a {m} × {k} operand")))?;
    if packed.len() < len {
        packed = tc_runtime::alloc::filled(len, 0u8)?;
    }
    let out = &pack(&mut packed[..len], row_bytes, par);
    let npanels = n.div_ceil(2 * T);
    let mb = if par {
        shared_rows(m, row_bytes, rayon::current_num_threads())
    } else {
        block_rows(row_bytes)
    };
    let blocks = m.div_ceil(mb);
    let units = blocks * npanels;
    let ap = &packed[..len];
    let run = |range: std::ops::Range<usize>| {
        // SAFETY: `O` available (the contract) includes the OS's grant;
        // the loop below runs tiles and vector code only.
        let tiles = unsafe { Tiles::load(&CONFIG) };
        let mut c = CTiles([0.0; 4 * T * T]);
        let mut u = range.start;
        while u < range.end {
            // The units of one row block: its A stays in L2 across the
            // panels. A group's A that fits L1 beside a panel streaming
            // through runs every panel of the block before the next group.
            let rb = u / npanels;
            let qs = u % npanels..npanels.min(u % npanels + range.end - u);
            u += qs.len();
            let step = if 2 * T * row_bytes <= GROUP_L1_BYTES {
                qs.len()
            } else {
                1
            };
            for q0 in qs.clone().step_by(step) {
                for r0 in (rb * mb..m.min((rb + 1) * mb)).step_by(2 * T) {
                    for q in q0..qs.end.min(q0 + step) {
                        let rows = (m - r0).min(2 * T);
                        let g = r0 / (2 * T);
                        // SAFETY: group `g`'s packing (`2·T` rows of
                        // `row_bytes`); `b` the packing of a `k × n`
                        // operand (asserted); `q < npanels`.
                        unsafe {
                            group::<O>(
                                &tiles,
                                &ap[g * 2 * T * row_bytes..][..2 * T * row_bytes],
                                b,
                                q,
                                rows > T,
                                &mut c,
                            )
                        };
                        // SAFETY: rows `r0..r0 + rows ≤ m` and panel `q`'s columns
                        // of the output, written by this unit alone; the CPU has
                        // AVX-512 F and BW (`available`).
                        unsafe { out.write(&c, (r0, rows), (q * 2 * T, n)) };
                    }
                }
            }
        }
    };
    if par && units > 1 {
        let per = units.div_ceil(4 * rayon::current_num_threads().max(1));
        let chunks = units.div_ceil(per);
        (0..chunks)
            .into_par_iter()
            .for_each(|i| run(i * per..units.min((i + 1) * per)));
    } else {
        run(0..units);
    }
    APACK.with(|p| *p.borrow_mut() = packed);
    O::counter().fetch_add(1, Ordering::Relaxed);
    Ok(())
}

thread_local! {
    /// A calling thread's packing of A.
    static APACK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A (`m` rows of `src_row` bytes) packed tile by tile, each row padded
/// with zeros to `row_bytes` (whole tile rows, `src_row ≤ row_bytes`):
/// group `g` of 32 rows, k-tile `t` (64 bytes of each row), is the two A
/// tiles (rows 0–15, then 16–31) of that tile, 1 KiB each, at byte
/// `(g·(row_bytes / 64) + t)·2048`; rows past `m` zero. A tile is then one
/// contiguous 1 KiB read (at a 64-byte stride), where reading A in place
/// took 16 rows `row_bytes` apart.
fn pack_a(a: &[u8], (m, src_row, row_bytes): (usize, usize, usize), dst: &mut [u8], par: bool) {
    let per_group = 2 * T * row_bytes;
    let one = |(g, d): (usize, &mut [u8])| {
        for r in 0..2 * T {
            let row = 2 * T * g + r;
            for t in 0..row_bytes / ROW_BYTES {
                let at = &mut d[t * 2 * T * ROW_BYTES + r * ROW_BYTES..][..ROW_BYTES];
                // This row's bytes of tile `t` (fewer in a ragged last
                // tile, none past the row), the rest zero.
                let have = if row < m {
                    src_row.saturating_sub(t * ROW_BYTES).min(ROW_BYTES)
                } else {
                    0
                };
                if have > 0 {
                    at[..have].copy_from_slice(&a[row * src_row + t * ROW_BYTES..][..have]);
                }
                at[have..].fill(0);
            }
        }
    };
    if par {
        dst.par_chunks_mut(per_group).enumerate().for_each(one);
    } else {
        dst.chunks_mut(per_group).enumerate().for_each(one);
    }
}

/// The 32 × 32 sums of a group of rows (`a`: its packing, [`pack_a`];
/// only the first 16 rows without `two`) against panel `q` of `b`, over
/// all of k, into `c`: tile `2i + h` holds row tile `i`, column half `h`.
///
/// # Safety
/// `b` must be a packing of `O`'s slots whose K-blocks hold whole tiles,
/// `q` one of its panels.
#[inline]
// SAFETY: (contract) met by `matmul`, its only caller.
unsafe fn group<O: TileOp>(
    tiles: &Tiles,
    a: &[u8],
    b: &PackedB,
    q: usize,
    two: bool,
    c: &mut CTiles,
) {
    let row_bytes = b.k * O::SIZE;
    assert!(tiles.are(&CONFIG) && a.len() == 2 * T * row_bytes);
    // k-steps per 4-byte slot, and per tile row.
    let (per, tk) = (4 / O::SIZE, ROW_BYTES / O::SIZE);
    // SAFETY: the configuration names tmm0–tmm3.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    };
    for pc in (0..b.k).step_by(b.kc) {
        let kcb = b.kc.min(b.k - pc);
        let slots = kcb / per;
        let panel = b
            .block(pc, kcb, q * 2 * T, 2 * T)
            .expect("a K-block's panel");
        assert!(panel.len() >= slots * 2 * T && kcb.is_multiple_of(tk));
        for s in (0..slots).step_by(T) {
            // Slot rows `s..s + 16` of the panel (128 bytes each, inside
            // it: `s + 16 ≤ slots`); k-tile `(pc + per·s) / tk` of the
            // group's packing, its two tiles of 1 KiB (inside: `pc + per·s
            // + tk ≤ k`).
            let bp = panel[s * 2 * T..].as_ptr();
            let a0 = a[(pc + per * s) / tk * 2 * T * ROW_BYTES..][..2 * T * ROW_BYTES].as_ptr();
            let a1 = a0.wrapping_add(T * ROW_BYTES);
            // SAFETY: each load reads 16 rows of 64 bytes inside the
            // slices just indexed (`a1` only with `two`, inside the same
            // 2 KiB); the tile registers are named, never allocated.
            unsafe { O::step(two, a0, a1, bp) };
        }
    }
    let out = c.0.as_mut_ptr();
    // SAFETY: each store writes 16 rows of 64 bytes into its quarter of
    // `c` (1 KiB, 64-byte aligned).
    unsafe {
        asm!(
            "tilestored [{c} + {ld}*1], tmm0",
            "tilestored [{c} + {ld}*1 + 1024], tmm1",
            "tilestored [{c} + {ld}*1 + 2048], tmm2",
            "tilestored [{c} + {ld}*1 + 3072], tmm3",
            c = in(reg) out,
            ld = in(reg) 64usize,
            options(nostack),
        )
    };
}

/// One k-tile of `$op` (`tdpbf16ps`, `tdpbssd`): [`TileOp::step`].
macro_rules! tile_step {
    ($op:literal, $two:expr, $a0:expr, $a1:expr, $b:expr) => {
        if $two {
            asm!(
                "tileloadd tmm4, [{a0} + {lda}*1]",
                "tileloadd tmm6, [{b} + {ldb}*1]",
                concat!($op, " tmm0, tmm4, tmm6"),
                "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
                concat!($op, " tmm1, tmm4, tmm7"),
                "tileloadd tmm5, [{a1} + {lda}*1]",
                concat!($op, " tmm2, tmm5, tmm6"),
                concat!($op, " tmm3, tmm5, tmm7"),
                a0 = in(reg) $a0,
                a1 = in(reg) $a1,
                lda = in(reg) 64usize,
                b = in(reg) $b,
                ldb = in(reg) 128usize,
                options(nostack, readonly),
            )
        } else {
            asm!(
                "tileloadd tmm4, [{a0} + {lda}*1]",
                "tileloadd tmm6, [{b} + {ldb}*1]",
                "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
                concat!($op, " tmm0, tmm4, tmm6"),
                concat!($op, " tmm1, tmm4, tmm7"),
                a0 = in(reg) $a0,
                lda = in(reg) 64usize,
                b = in(reg) $b,
                ldb = in(reg) 128usize,
                options(nostack, readonly),
            )
        }
    };
}

impl TileOp for Bf16 {
    const SIZE: usize = 2;
    // The pairs packing is shared with the `vdpbf16ps` kernel, which
    // reads exactly k steps.
    const PADS_K: bool = false;
    type Out = u16;

    fn packs(b: &PackedB) -> bool {
        b.pairs.is_some()
    }

    fn counter() -> &'static AtomicU64 {
        &TILED
    }

    #[inline]
    // SAFETY: (contract) the trait's, met by `group`.
    unsafe fn step(two: bool, a0: *const u8, a1: *const u8, b: *const f32) {
        // SAFETY: the contract: the tiles configured, the reads inside.
        unsafe { tile_step!("tdpbf16ps", two, a0, a1, b) }
    }

    /// Rounded to BF16 as [`round_bf16`] rounds, bit for bit (the
    /// rounding and the element loop took a quarter of a k = 384
    /// product's time).
    #[target_feature(enable = "avx512f,avx512bw")]
    // SAFETY: (contract) the trait's, met by `matmul`.
    unsafe fn write(
        c: &CTiles,
        out: *mut u16,
        (r0, rows): (usize, usize),
        (j0, n): (usize, usize),
    ) {
        use std::arch::x86_64::*;
        let cols = (n - j0).min(2 * T);
        let keep: __mmask32 = if cols == 32 { !0 } else { (1u32 << cols) - 1 };
        let nan = _mm512_set1_epi32(i32::from(round_bf16(f32::NAN)) << 16);
        let (one, half) = (_mm512_set1_epi32(1), _mm512_set1_epi32(0x7FFF));
        // Each f32 rounded in its upper half: `u + 0x7FFF + lsb` (a NaN, whose
        // sum may wrap, replaced), as `round_bf16`.
        let round = |x: __m512| {
            let u = _mm512_castps_si512(x);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(u), one);
            let r = _mm512_add_epi32(_mm512_add_epi32(u, half), lsb);
            _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), nan)
        };
        // The upper halves of 16 lanes of `lo`, then of `hi`.
        let odd = _mm512_set_epi16(
            63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21,
            19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
        );
        for r in 0..rows {
            let t = 2 * (r / T) * T * T + (r % T) * T;
            // SAFETY: row `r % T` of tiles `2·(r / T)` and the next, 16
            // floats each inside `c`.
            let (lo, hi) = unsafe {
                (
                    _mm512_loadu_ps(c.0.as_ptr().add(t)),
                    _mm512_loadu_ps(c.0.as_ptr().add(t + T * T)),
                )
            };
            let v = _mm512_permutex2var_epi16(round(lo), odd, round(hi));
            // SAFETY: row `r0 + r`, columns `j0..j0 + cols ≤ n` under the
            // mask: inside the output (the contract).
            unsafe { _mm512_mask_storeu_epi16(out.add((r0 + r) * n + j0).cast(), keep, v) };
        }
    }
}

impl TileOp for I8 {
    const SIZE: usize = 1;
    const PADS_K: bool = true;
    type Out = i32;

    fn packs(b: &PackedB) -> bool {
        b.quads
    }

    fn counter() -> &'static AtomicU64 {
        &TILED_I8
    }

    #[inline]
    // SAFETY: (contract) the trait's, met by `group`.
    unsafe fn step(two: bool, a0: *const u8, a1: *const u8, b: *const f32) {
        // SAFETY: the contract: the tiles configured, the reads inside.
        unsafe { tile_step!("tdpbssd", two, a0, a1, b) }
    }

    /// The i32 sums as they are.
    #[target_feature(enable = "avx512f,avx512bw")]
    // SAFETY: (contract) the trait's, met by `matmul`.
    unsafe fn write(
        c: &CTiles,
        out: *mut i32,
        (r0, rows): (usize, usize),
        (j0, n): (usize, usize),
    ) {
        use std::arch::x86_64::*;
        let (lo_keep, hi_keep) = panel_masks(n - j0);
        for r in 0..rows {
            let t = 2 * (r / T) * T * T + (r % T) * T;
            // SAFETY: row `r % T` of tiles `2·(r / T)` and the next, 16
            // lanes each inside `c`; row `r0 + r`, columns `j0..j0 +
            // cols ≤ n` under the masks: inside the output (the contract).
            unsafe {
                let lo = _mm512_loadu_si512(c.0.as_ptr().add(t).cast());
                let hi = _mm512_loadu_si512(c.0.as_ptr().add(t + T * T).cast());
                let row = out.add((r0 + r) * n + j0);
                _mm512_mask_storeu_epi32(row, lo_keep, lo);
                if hi_keep != 0 {
                    _mm512_mask_storeu_epi32(row.add(T), hi_keep, hi);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Bf16::write`] stores [`round_bf16`]'s bits for every element of the
    /// rows and columns it is given and nothing else: on ties, NaNs of
    /// any payload, infinities, subnormals and a stride through all bit
    /// patterns, for a whole panel, a ragged last one, and short row
    /// groups.
    #[test]
    fn write_rounds_as_round_bf16() {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")) {
            return;
        }
        let mut pats: Vec<u32> = (0..=u32::MAX).step_by(65_521).collect();
        pats.extend([
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0xFFFF_FFFF,
            0x7F80_0001,
            0x0000_0001,
            0x8000_0000,
            0x3F80_8000,
            0x3F81_8000,
            0x7F7F_8000,
            0x7F7F_FFFF,
        ]);
        // Two column panels: 32 columns, then 13.
        let (n, all_rows, fill) = (45, 40, 0xABCDu16);
        for chunk in pats.chunks(4 * T * T) {
            let mut c = CTiles([0.0; 4 * T * T]);
            for (x, &u) in c.0.iter_mut().zip(chunk.iter().cycle()) {
                *x = f32::from_bits(u);
            }
            for (r0, rows, j0) in [(3, 32, 0), (3, 17, 32), (0, 5, 0), (8, 1, 32)] {
                let mut out = vec![fill; all_rows * n];
                // SAFETY: rows `r0..r0 + rows ≤ 40` and columns `j0..j0 +
                // 32` below `n` of a 40 × 45 matrix; AVX-512 F and BW
                // (checked).
                unsafe { Bf16::write(&c, out.as_mut_ptr(), (r0, rows), (j0, n)) };
                for (i, &got) in out.iter().enumerate() {
                    let (row, col) = (i / n, i % n);
                    let inside = (r0..r0 + rows).contains(&row) && (j0..j0 + 2 * T).contains(&col);
                    let want = if inside {
                        let (r, j) = (row - r0, col - j0);
                        round_bf16(c.0[(2 * (r / T) + j / T) * T * T + (r % T) * T + j % T])
                    } else {
                        fill
                    };
                    assert_eq!(got, want, "row {row}, column {col} of ({r0}, {rows}, {j0})");
                }
            }
        }
    }
}
