//! BF16 products on AMX-BF16 tiles: `tdpbf16ps` adds a 16 × 32 by 32 × 16
//! product (thirty-two steps of k) to a 16 × 16 f32 tile per instruction,
//! sixteen times the multiply-adds of a `vdpbf16ps` per issue slot.
//!
//! # Layout
//! - **B** is `vdpbf16ps`'s packing ([`super::bf16`]): per K-block, panels
//!   of 32 columns whose slot row `s` holds the pairs `(b[2s][j],
//!   b[2s+1][j])` of its 32 columns, 128 bytes. Sixteen such rows, read
//!   with a 128-byte stride from byte 0 (columns 0–15) or 64 (16–31), are
//!   exactly the "VNNI layout" of `tdpbf16ps`'s B tile; a weight's kept
//!   packing serves both paths.
//! - **A** is packed once per call, each tile's 16 rows of 32 k-steps
//!   contiguous ([`pack_a`]), rows past `m` zero (so no tile reads past
//!   the matrix).
//! - **C**: four f32 tiles (32 rows × 32 columns) accumulate over the
//!   whole of k, are stored to L1 scratch and rounded into the BF16 output.
//!
//! Products with `k` a multiple of 32 run here (every K-block then holds
//! whole tiles); others keep `vdpbf16ps`.
//!
//! # Numerics
//! As [`super::bf16`]'s: a product of two BF16 values is exact in f32 and
//! each accumulation is one rounded f32 addition (round to nearest even)
//! in some order, so the widened path's bound holds; the instruction's
//! DAZ/FTZ cannot act on operands that pass [`super::bf16::Scan`] (the
//! caller's check), and the result is rounded once to BF16.
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
const T: usize = 16;
/// k-steps of one A tile row (64 bytes of BF16).
const TK: usize = 32;
/// Bytes of A in a task's row block, which stays in L2 while the task
/// runs every column panel against it (half of a 1–2 MiB L2, the rest
/// for the panels of B streaming through).
const A_BLOCK_BYTES: usize = 512 << 10;

/// Rows of a row block for this `k`: whole groups of 32, A_BLOCK_BYTES
/// of A at most (one group at least).
fn block_rows(k: usize) -> usize {
    (A_BLOCK_BYTES / (2 * k) / (2 * T)).max(1) * 2 * T
}

/// Rows of a row block for a product split over `threads`:
/// [`block_rows`], and at most an even share of the rows per thread
/// (whole groups of 32), so that the threads take rows apart rather than
/// column panels of one block, as the elementwise ops after a product
/// split their work. MiniLM bf16 at two threads on the Intel AMX host
/// (`peer_bench`, 30 repetitions, the two alternating four times): 32 ×
/// 16 18.0–18.7 → 16.5–17.6 ms, 8 × 128 47.8–50.0 → 46.1–48.5; only
/// products with k = 384 changed (longer k already had smaller blocks).
fn shared_rows(m: usize, k: usize, threads: usize) -> usize {
    let share = m.div_ceil(threads.max(1)).div_ceil(2 * T) * 2 * T;
    block_rows(k).min(share)
}

/// Bytes of a group's A (32 rows of k) that stay in L1 while every panel
/// of a row block runs against them: MiniLM's k = 384 (24 KiB), not
/// 1536, whose A and panels then both came from L2.
const GROUP_L1_BYTES: usize = 32 << 10;

/// Multiply-adds below which a product stays on the calling thread
/// (about 40 µs of tiles).
const PAR_MIN_MACS: usize = 1 << 24;

/// Every tile 16 rows of 64 bytes: `tmm0`–`tmm3` C (16 × 16 f32),
/// `tmm4`, `tmm5` A (16 × 32 BF16), `tmm6`, `tmm7` B (16 pair rows × 16
/// columns).
static CONFIG: Config = Config::new(&[(16, 64); 8]);

/// Products computed on AMX tiles.
static TILED: AtomicU64 = AtomicU64::new(0);

/// How many BF16 products this process computed on AMX tiles.
pub fn tiled() -> u64 {
    TILED.load(Ordering::Relaxed)
}

/// Whether BF16 products may run on AMX tiles: AMX-BF16 and AVX-512 F
/// and BW in the CPU, the tile state granted by the OS, and `TC_MM_AMX` not `0`
/// ([`set_enabled`]).
pub fn available() -> bool {
    static HOST: OnceLock<bool> = OnceLock::new();
    let host = *HOST.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && tiles::cpu_has(tiles::Extension::Bf16)
            && tiles::granted()
    });
    host && Settings::get().mm_amx.on()
}

/// Turn the AMX path on or off, process-wide (measurements and the
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

/// Whether an `m × k × n` product runs here: `k` whole tiles, and at
/// least [`MIN_ROWS`] rows.
pub(super) fn fits(m: usize, k: usize, _n: usize) -> bool {
    k > 0 && k.is_multiple_of(TK) && m >= MIN_ROWS
}

/// Four C tiles, 64-byte aligned for `tilestored`.
#[repr(C, align(64))]
struct CTiles([f32; 4 * T * T]);

/// The product `a: [m, k]` (BF16, row-major) by the packed `b` into BF16
/// `out: [m, n]`, the f32 sums rounded once; on the pool with `par`.
///
/// # Safety
/// [`available`] returned true; `a` must be valid for reads of `m·k`
/// elements and `out` for writes of `m·n` (2-byte aligned, not
/// overlapping `a`); `b` packs a `k × n` operand in [`super::bf16`]'s
/// layout; [`fits`]`(m, k, n)`.
// SAFETY: (contract) met by `bf16::try_matmul`, its only caller.
pub(super) unsafe fn matmul(
    a: *const u16,
    b: &PackedB,
    out: *mut u16,
    (m, k, n): (usize, usize, usize),
    par: bool,
) -> Result<(), Error> {
    assert!(b.pairs.is_some() && b.k == k && b.n == n && b.nr == 2 * T);
    assert!(fits(m, k, n) && b.kc.is_multiple_of(TK));
    // A task on the pool costs microseconds; at these rates a product
    // under `PAR_MIN_MACS` is done sooner on the calling thread.
    let par = par && m.saturating_mul(n).saturating_mul(k) >= PAR_MIN_MACS;
    let groups = m.div_ceil(2 * T);
    let mut packed = APACK.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let len = (groups * 2 * T)
        .checked_mul(k)
        .ok_or_else(|| Error::Unsupported(format!("packing a {m} × {k} operand")))?;
    if packed.len() < len {
        packed = tc_runtime::alloc::filled(len, 0u16)?;
    }
    // SAFETY: A's `m·k` elements (the contract).
    let a = unsafe { std::slice::from_raw_parts(a, m * k) };
    pack_a(a, (m, k), &mut packed[..len], par);
    let npanels = n.div_ceil(2 * T);
    let mb = if par {
        shared_rows(m, k, rayon::current_num_threads())
    } else {
        block_rows(k)
    };
    let blocks = m.div_ceil(mb);
    let units = blocks * npanels;
    let op = SendPtr(out);
    let ap = &packed[..len];
    let run = |range: std::ops::Range<usize>| {
        let op = op;
        // SAFETY: `available()` (the contract) includes the OS's grant;
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
            let step = if 2 * T * k * 2 <= GROUP_L1_BYTES {
                qs.len()
            } else {
                1
            };
            for q0 in qs.clone().step_by(step) {
                for r0 in (rb * mb..m.min((rb + 1) * mb)).step_by(2 * T) {
                    for q in q0..qs.end.min(q0 + step) {
                        let rows = (m - r0).min(2 * T);
                        let g = r0 / (2 * T);
                        // SAFETY: group `g`'s packing (`2·T·k` elements); `b` the
                        // packing of a `k × n` operand (asserted); `q < npanels`.
                        unsafe {
                            group(
                                &tiles,
                                &ap[g * 2 * T * k..][..2 * T * k],
                                b,
                                q,
                                rows > T,
                                &mut c,
                            )
                        };
                        // SAFETY: rows `r0..r0 + rows ≤ m` and panel `q`'s columns
                        // of the output, written by this unit alone; the CPU has
                        // AVX-512 F and BW (`available`).
                        unsafe { write(&c, op.0, (r0, rows), (q * 2 * T, n)) };
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
    TILED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

thread_local! {
    /// A calling thread's packing of A.
    static APACK: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// A (`m × k`) packed tile by tile: group `g` of 32 rows, k-step `t` of
/// 32 columns, is the two A tiles (rows 0–15, then 16–31) of that step,
/// 1 KiB each, at element `(g·(k/32) + t)·1024`; rows past `m` zero. A
/// tile is then one contiguous 1 KiB read (at a 64-byte stride), where
/// reading A in place took 16 rows `2k` bytes apart.
fn pack_a(a: &[u16], (m, k): (usize, usize), dst: &mut [u16], par: bool) {
    let per_group = 2 * T * k;
    let one = |(g, d): (usize, &mut [u16])| {
        for r in 0..2 * T {
            let row = 2 * T * g + r;
            for t in 0..k / TK {
                let at = &mut d[t * 2 * T * TK + r * TK..][..TK];
                if row < m {
                    at.copy_from_slice(&a[row * k + t * TK..][..TK]);
                } else {
                    at.fill(0);
                }
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
/// `b` must be a BF16 packing whose K-blocks hold whole tiles, `q` one of
/// its panels.
#[inline]
// SAFETY: (contract) met by `matmul`, its only caller.
unsafe fn group(tiles: &Tiles, a: &[u16], b: &PackedB, q: usize, two: bool, c: &mut CTiles) {
    assert!(tiles.are(&CONFIG) && a.len() == 2 * T * b.k);
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
        let slots = kcb / 2;
        let panel = b
            .block(pc, kcb, q * 2 * T, 2 * T)
            .expect("a K-block's panel");
        assert!(panel.len() >= slots * 2 * T && kcb.is_multiple_of(TK));
        for s in (0..slots).step_by(TK / 2) {
            // Slot rows `s..s + 16` of the panel (128 bytes each, inside
            // it: `s + 16 ≤ slots`); k-step `(pc + 2s) / 32` of the
            // group's packing, its two tiles of 1 KiB (inside: `pc + 2s +
            // 32 ≤ k`).
            let bp = panel[s * 2 * T..].as_ptr();
            let a0 = a[(pc + 2 * s) / TK * 2 * T * TK..][..2 * T * TK].as_ptr();
            let a1 = a0.wrapping_add(T * TK);
            if two {
                // SAFETY: each load reads 16 rows of 64 bytes inside the
                // slices just indexed; the tile registers are named, never
                // allocated.
                unsafe {
                    asm!(
                        "tileloadd tmm4, [{a0} + {lda}*1]",
                        "tileloadd tmm6, [{b} + {ldb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tileloadd tmm5, [{a1} + {lda}*1]",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0,
                        a1 = in(reg) a1,
                        lda = in(reg) 64usize,
                        b = in(reg) bp,
                        ldb = in(reg) 128usize,
                        options(nostack, readonly),
                    )
                };
            } else {
                // SAFETY: as above, one row tile.
                unsafe {
                    asm!(
                        "tileloadd tmm4, [{a0} + {lda}*1]",
                        "tileloadd tmm6, [{b} + {ldb}*1]",
                        "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        a0 = in(reg) a0,
                        lda = in(reg) 64usize,
                        b = in(reg) bp,
                        ldb = in(reg) 128usize,
                        options(nostack, readonly),
                    )
                };
            }
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

/// Rows `r0..r0 + rows` (at most 32) and columns `j0..j0 + 32` (those
/// below `n`) of the output from `c`'s tiles, rounded to BF16 as
/// [`round_bf16`] rounds, bit for bit: each row's 32 columns (both column
/// tiles) in one store, so a line of the output is written whole, not in
/// two halves that each had to fetch it (the rounding and the element
/// loop took a quarter of a k = 384 product's time).
///
/// # Safety
/// `out` must be valid for writes of those elements of an `n`-column
/// row-major matrix, referenced by nothing else; the CPU has AVX-512 F
/// and BW.
#[target_feature(enable = "avx512f,avx512bw")]
// SAFETY: (contract) met by `matmul`, its only caller.
unsafe fn write(c: &CTiles, out: *mut u16, (r0, rows): (usize, usize), (j0, n): (usize, usize)) {
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
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19,
        17, 15, 13, 11, 9, 7, 5, 3, 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// [`write`] stores [`round_bf16`]'s bits for every element of the
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
                unsafe { write(&c, out.as_mut_ptr(), (r0, rows), (j0, n)) };
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
