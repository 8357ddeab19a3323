//! BF16 products on AVX-512 BF16: two steps of k per `vdpbf16ps`.
//!
//! Section 2 §3: a BF16 matmul accumulates in F32 and rounds once at the
//! end; Section 4 §6 leaves the summation order free. The widened path
//! (both operands widened to f32, the f32 GEMM, one rounding) does that
//! with FMAs. This path packs two consecutive k-steps of each operand
//! into one 32-bit slot (low half `k`, high half `k + 1`) and each
//! `vdpbf16ps` adds both products of a slot to sixteen f32 accumulators:
//! twice the multiply-adds per instruction of the f32 kernel, in the same
//! blocked driver (`gemm_common::blocked`) and register tile (14 × 32).
//!
//! # Numerics
//! A product of two BF16 values is exact in f32 (8-bit significands), so
//! each accumulation is one rounded f32 addition, in some order: the
//! widened path's bound, `2(n+2)·2⁻²⁴·Σ|terms|` before the final rounding,
//! holds for it (tc-llvm's crate docs, "Numerics").
//!
//! The instruction differs from IEEE arithmetic in one way: it treats
//! subnormal inputs as zero and flushes subnormal results (DAZ, FTZ). So
//! it runs only on operands where neither can happen ([`Scan`]): no
//! subnormal element, and every product of nonzero elements at least
//! 2⁻¹⁰². Such a product is a multiple of 2⁻¹¹⁶ (16 significant bits),
//! and so is every partial sum: an exact sum of multiples of 2⁻¹¹⁶ stays
//! one when rounded to f32 (below 2⁻⁹³ it is representable, above it the
//! f32 spacing is a multiple of 2⁻¹¹⁶). A nonzero partial sum is then at
//! least 2⁻¹¹⁶, never subnormal, so nothing is flushed and the result is
//! the IEEE one for this order. Other operands take the widened path
//! (counted: [`fallbacks`]).

use std::cell::RefCell;

use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::ctx::{ExecCtx, Settings};
use crate::kernels::gemm_common::{
    blocked, kernel_set, table, table_kernel, ukernel_text, ALayout, Cols, Family, Kernels, Micro,
    SendPtr, Table, UkrSpec,
};
use crate::llvm_ir::{Decl, Ty};
use crate::options::Error;

use super::{PackCache, PackedB, ViewKey};

/// Rows of the register tile (the f32 kernel's: 28 accumulators, two B
/// vectors and a broadcast of A in 32 registers).
const MR: usize = 14;
/// Lanes per vector; the tile is `MR × 2·VW`.
const VW: usize = 16;
/// Contraction block in k-slots (two steps of k each, so a pair never
/// straddles blocks): a B micro-panel of `KC_SLOTS × 32` slots is 64 KiB,
/// as the f32 kernel's.
const KC_SLOTS: usize = 512;
/// Row block (whole tiles).
const MC: usize = 252;
/// Column block.
const NC: usize = 4096;

/// Products that took the widened path because of their operands' values.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);
/// Products computed on `vdpbf16ps`.
static PAIRED: AtomicU64 = AtomicU64::new(0);

/// How many BF16 products this process computed on `vdpbf16ps`.
pub fn paired() -> u64 {
    PAIRED.load(Ordering::Relaxed)
}

/// How many BF16 products this process sent to the widened path because
/// an operand held a subnormal or a product could be subnormal (the module docs say when).
pub fn fallbacks() -> u64 {
    FALLBACKS.load(Ordering::Relaxed)
}

/// Whether BF16 products run on `vdpbf16ps` here: an x86 host with
/// AVX-512 and AVX512-BF16, detected at run time, and `TC_MM_BF16` not
/// `0` ([`set_enabled`]).
pub fn available() -> bool {
    static HOST: OnceLock<bool> = OnceLock::new();
    let host = *HOST.get_or_init(|| {
        let h = crate::jit::host();
        cfg!(target_arch = "x86_64") && h.has_avx512() && h.has("+avx512bf16")
    });
    host && Settings::get().mm_bf16.on()
}

/// Turn the `vdpbf16ps` path on or off, process-wide (measurements and the
/// equivalence tests; off, BF16 products are widened to f32).
pub fn set_enabled(on: bool) {
    Settings::get().mm_bf16.set(on)
}

/// The kernel of `rows ≤ MR` rows (A packed `MR` wide) writing `cols`.
fn ukernel_text_rows(rows: usize, cols: Cols) -> String {
    let pair = Ty::I32.vec(VW);
    let dp = Decl::new(
        "llvm.x86.avx512bf16.dpbf16ps.512",
        Some(Ty::Float.vec(VW)),
        &[(Ty::Float.vec(VW), ""), (pair, ""), (pair, "")],
        "#1",
    );
    ukernel_text(&UkrSpec {
        elem: Ty::Float,
        vw: VW,
        mr: rows,
        a: ALayout::Packed(MR),
        after_b: &|b, j, bp, bj| {
            // The f32 kernel's prefetch of its B panel, as far ahead in
            // bytes (a kept packing streams from L3 or memory).
            let ahead = super::b_prefetch_steps() * 2 * VW;
            if ahead > 0 {
                // Not `inbounds`: the address may lie past the panel (a
                // hint, never dereferenced).
                let pf = b.named(format_args!("pf{j}"));
                let pf = pf.gep_any(bp, &[&crate::llvm_ir::V::int(Ty::I64, ahead as i64)]);
                let pf8 = b.named(format_args!("pf8{j}")).bitcast(&pf, Ty::I8.ptr());
                b.prefetch(&pf8, false);
            }
            b.named(format_args!("bw{j}")).bitcast(&bj, pair)
        },
        after_a: &|b, i, a| b.named(format_args!("aw{i}")).bitcast(&a, pair),
        step: &|b, (i, j), acc, a, bj| {
            b.named(format_args!("n{i}_{j}"))
                .call_to(&dp, &[acc, a, bj])
        },
        c_align: 4,
        k_unroll: 1,
        cols,
    })
}

/// The kernel of `rows` rows writing `cols`, compiled the first time a
/// product needs it.
fn kernel(rows: usize, cols: Cols) -> Result<&'static Micro, Error> {
    static T: Table = table();
    table_kernel(&T, (rows, MR), 2 * VW, cols, || {
        ukernel_text_rows(rows, cols)
    })
}

/// The kernels of an `m × n` product: the full tile, the last row panel's
/// and the ragged column panel's where there are such.
fn kernels(m: usize, n: usize) -> Result<Kernels<'static>, Error> {
    let edge = (!m.is_multiple_of(MR)).then_some(m % MR);
    kernel_set(n, (MR, 2 * VW), edge, true, kernel)
}

/// Compile the kernels an `m × n` product runs (so a call does not pay
/// for them).
pub(super) fn prepare(m: usize, n: usize) -> Result<(), Error> {
    kernels(m, n).map(drop)
}

/// What a scan of an operand found: whether it holds a subnormal, and the
/// smallest biased exponent of its nonzero elements (255 for none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    subnormal: bool,
    min_exp: u8,
}

impl Scan {
    /// The scan of no elements.
    pub(crate) const NONE: Scan = Scan {
        subnormal: false,
        min_exp: u8::MAX,
    };

    /// The scan of two parts together (in either order).
    pub(crate) fn and(self, o: Scan) -> Scan {
        Scan {
            subnormal: self.subnormal || o.subnormal,
            min_exp: self.min_exp.min(o.min_exp),
        }
    }

    /// Scan BF16 bit patterns.
    pub(crate) fn of(xs: &[u16]) -> Scan {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has AVX-512 F and BW (just detected).
            return unsafe { Scan::of_avx512(xs) };
        }
        Scan::of_any(xs)
    }

    /// [`Scan::of`], in pieces on the pool with `par` (the same answer:
    /// a scan's `or` and `min` fold in any order).
    pub(crate) fn of_par(xs: &[u16], par: bool) -> Scan {
        const PIECE: usize = 1 << 15;
        if !par || xs.len() <= 2 * PIECE {
            return Scan::of(xs);
        }
        xs.par_chunks(PIECE)
            .map(Scan::of)
            .reduce(|| Scan::NONE, Scan::and)
    }

    /// [`Scan::of`] compiled for AVX-512: the same loop, sixty-four
    /// elements a step (a call scans every activation of a product).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    // SAFETY: (contract) met by `Scan::of`, its only caller.
    unsafe fn of_avx512(xs: &[u16]) -> Scan {
        Scan::of_any(xs)
    }

    #[inline(always)]
    fn of_any(xs: &[u16]) -> Scan {
        // Branch-free, so it vectorizes: a chunk's `or` and `min`, folded.
        let (mut sub, mut min) = (false, u8::MAX);
        for c in xs.chunks(1024) {
            let (mut s, mut lo) = (false, u8::MAX);
            for &x in c {
                let e = ((x >> 7) & 0xFF) as u8;
                let mag = x & 0x7FFF;
                s |= e == 0 && mag != 0;
                lo = lo.min(if mag == 0 { u8::MAX } else { e });
            }
            sub |= s;
            min = min.min(lo);
        }
        Scan {
            subnormal: sub,
            min_exp: min,
        }
    }

    /// Whether `vdpbf16ps` computes the IEEE sums of products of these two
    /// operands (module docs): no subnormal in either, and every product of
    /// nonzero elements at least 2⁻¹⁰² (biased exponents summing to at
    /// least 254 − 102).
    pub(crate) fn exact_with(self, o: Scan) -> bool {
        !self.subnormal && !o.subnormal && u16::from(self.min_exp) + u16::from(o.min_exp) >= 152
    }
}

/// A contiguous row-major BF16 matrix: element `(i, j)` at `ptr + i·ld + j`.
#[derive(Clone, Copy)]
struct Mat {
    ptr: SendPtr<u16>,
    ld: usize,
}

impl Mat {
    /// `len` elements of row `i` from column `j`.
    ///
    /// # Safety
    /// They must lie inside the matrix.
    #[inline(always)]
    // SAFETY: (contract) met by `pack_a` and `pack_b`, its only callers.
    unsafe fn row(&self, i: usize, j: usize, len: usize) -> &[u16] {
        // SAFETY: inside the matrix (the contract), which outlives the
        // product (`try_matmul`'s contract).
        unsafe { std::slice::from_raw_parts(self.ptr.0.add(i * self.ld + j), len) }
    }
}

/// Two BF16 bit patterns in one slot, `lo` (step `k`) in the low half.
#[inline(always)]
fn pair(lo: u16, hi: u16) -> f32 {
    f32::from_bits(u32::from(lo) | (u32::from(hi) << 16))
}

/// The BF16 family: [`kernels`], blocks of [`KC_SLOTS`] pairs, operands
/// packed in pairs of k-steps (zero past `k`), the f32 family's buffers;
/// B packed once where the caller keeps it.
struct Bf16Gemm<'p> {
    ks: Kernels<'static>,
    pre: Option<&'p PackedB>,
}

impl Family for Bf16Gemm<'_> {
    type E = f32;
    type Src = Mat;

    fn kernels(&self) -> Kernels<'_> {
        self.ks
    }

    fn blocks(&self) -> (usize, usize, usize) {
        (2 * KC_SLOTS, MC, NC)
    }

    fn slots(&self, kc: usize) -> usize {
        kc.div_ceil(2)
    }

    // SAFETY: (contract) `Family::pack_a`'s, met by `blocked`.
    unsafe fn pack_a(
        &self,
        a: &Mat,
        pc: usize,
        kc: usize,
        row0: usize,
        mr: usize,
        m: usize,
        dst: &mut [f32],
    ) {
        let rows = mr.min(m - row0);
        let slots = kc.div_ceil(2);
        let dst = &mut dst[..slots * mr];
        if rows < mr {
            dst.fill(0.0);
        }
        for r in 0..rows {
            // SAFETY: row `row0 + r < m`, k `pc..pc + kc`: readable (the
            // contract).
            let x = unsafe { a.row(row0 + r, pc, kc) };
            let (pairs, odd) = x.split_at(kc & !1);
            // Slot `s` of row `r` at `s·mr + r`: every `mr`-th from `r`.
            let col = dst[r..].iter_mut().step_by(mr);
            for (d, p) in col.zip(pairs.chunks_exact(2)) {
                *d = pair(p[0], p[1]);
            }
            if let [lo] = odd {
                dst[(slots - 1) * mr + r] = pair(*lo, 0);
            }
        }
    }

    // SAFETY: (contract) `Family::pack_b`'s, met by `blocked`; it is
    // `pack_b_pairs`'.
    unsafe fn pack_b(
        &self,
        b: &Mat,
        pc: usize,
        kc: usize,
        col0: usize,
        nr: usize,
        n: usize,
        dst: &mut [f32],
    ) {
        // SAFETY: the same contract.
        unsafe { pack_b_pairs(b, pc, kc, (col0, nr, n), dst) }
    }

    // B's packing buffer is kept per calling thread, as the f32 family's.
    fn take_b(&self) -> Vec<f32> {
        BPACK.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    fn b_block<'a>(&self, buf: &'a mut Vec<f32>, need: usize) -> &'a mut [f32] {
        super::huge_slice(buf, need)
    }

    fn give_b(&self, buf: Vec<f32>) {
        BPACK.with(|s| *s.borrow_mut() = buf);
    }

    fn take_a(&self, len: usize) -> Vec<f32> {
        super::take_scratch(len)
    }

    fn give_a(&self, buf: Vec<f32>) {
        super::give_scratch(buf)
    }

    fn packed_b_block(&self, pc: usize, kc: usize, jc: usize, nc: usize) -> Option<&[f32]> {
        self.pre.and_then(|p| p.block(pc, kc, jc, nc))
    }
}

/// The `k × n` B packed whole (every K-block's panels, as [`Bf16Gemm`]
/// packs them per call, in [`PackedB::block`]'s order) with its scan: a
/// weight kept across calls packs and scans once.
///
/// # Safety
/// `b` must be valid for reads of `k·n` elements (`k, n ≥ 1`).
// SAFETY: (contract) met by `try_matmul`, its only caller.
unsafe fn pack_kept(b: Mat, (k, n): (usize, usize), par: bool) -> Result<PackedB, Error> {
    let (nr, kc) = (2 * VW, 2 * KC_SLOTS);
    let npanels = n.div_ceil(nr);
    // Every K-block but the last has an even `kc`: `⌈k/2⌉` slots in all.
    let total = npanels
        .checked_mul(nr)
        .and_then(|w| w.checked_mul(k.div_ceil(2)))
        .ok_or_else(|| Error::Unsupported(format!("packing a {k} × {n} operand")))?;
    let padded = total
        .checked_add(15)
        .ok_or_else(|| Error::Unsupported(format!("packing a {k} × {n} operand")))?;
    let mut data = tc_runtime::alloc::zeroed::<f32>(padded)?;
    let off = super::line_off(&data);
    let slab = &mut data[off..off + total];
    for pc in (0..k).step_by(kc) {
        let kcb = kc.min(k - pc);
        let slots = kcb.div_ceil(2);
        let block = &mut slab[(pc / 2) * npanels * nr..(pc / 2 + slots) * npanels * nr];
        // SAFETY: k `pc..pc + kcb ⊆ 0..k`, columns from `q·nr < n` of B
        // (the contract); each chunk is one panel of `slots·nr`.
        let pack =
            |(q, d): (usize, &mut [f32])| unsafe { pack_b_pairs(&b, pc, kcb, (q * nr, nr, n), d) };
        if par {
            block.par_chunks_mut(slots * nr).enumerate().for_each(pack);
        } else {
            block.chunks_mut(slots * nr).enumerate().for_each(pack);
        }
    }
    // SAFETY: `k·n` readable elements (the contract).
    let scan = Scan::of(unsafe { std::slice::from_raw_parts(b.ptr.0, k * n) });
    Ok(PackedB {
        k,
        n,
        kc,
        nr,
        data,
        off,
        pairs: Some(scan),
        quads: false,
    })
}

/// B's kept packing for this call, where `cache` keeps it (or packs it
/// now to keep): `None` to pack per call.
///
/// # Safety
/// As [`pack_kept`].
// SAFETY: (contract) met by `try_matmul`, its only caller.
unsafe fn kept(
    cache: &dyn PackCache,
    b: Mat,
    (k, n): (usize, usize),
    par: bool,
) -> Result<Option<std::sync::Arc<PackedB>>, Error> {
    let key = ViewKey {
        ptr: b.ptr.0.addr(),
        rs: n,
        cs: 1,
        k,
        n,
    };
    // SAFETY: the contract.
    let pack = || unsafe { pack_kept(b, (k, n), par) };
    super::kept_packing(cache, key, |p| p.pairs.is_some(), pack)
}

/// Pack k `pc..pc + kc` × columns `col0..col0 + nr` (zero past `n`) of
/// B into `dst[s·nr + c]`, slot `s` the pair of k-steps `pc + 2s` and `pc +
/// 2s + 1` (zero past `pc + kc`): [`Family::pack_b`]'s layout, shared by the
/// per-call packing and [`pack_kept`].
///
/// # Safety
/// `b` must be readable over k `pc..pc + kc` and columns `col0..n`.
// SAFETY: (contract) met by `Bf16Gemm::pack_b` and `pack_kept`.
unsafe fn pack_b_pairs(
    b: &Mat,
    pc: usize,
    kc: usize,
    (col0, nr, n): (usize, usize, usize),
    dst: &mut [f32],
) {
    let cols = nr.min(n - col0);
    let slots = kc.div_ceil(2);
    let dst = &mut dst[..slots * nr];
    if cols < nr {
        dst.fill(0.0);
    }
    for s in 0..slots {
        let l = pc + 2 * s;
        // SAFETY: k `l < pc + kc` (and `l + 1` when inside the block),
        // columns `col0..col0 + cols ≤ n`: readable (the contract).
        let lo = unsafe { b.row(l, col0, cols) };
        let d = &mut dst[s * nr..s * nr + cols];
        if 2 * s + 1 < kc {
            // SAFETY: as just above, row `l + 1 < pc + kc`.
            let hi = unsafe { b.row(l + 1, col0, cols) };
            for ((d, &lo), &hi) in d.iter_mut().zip(lo).zip(hi) {
                *d = pair(lo, hi);
            }
        } else {
            for (d, &lo) in d.iter_mut().zip(lo) {
                *d = pair(lo, 0);
            }
        }
    }
}

thread_local! {
    /// The BF16 family's packed-B buffer.
    static BPACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A calling thread's f32 sums before rounding.
    static CBUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `batch` contiguous BF16 products `a: [m, k] · b: [k, n]` into BF16
/// `out` (`batch·m·n`: the f32 sums, their NaNs canonical, rounded once)
/// on `vdpbf16ps`, when [`available`], `k ≥ 1` and the operands' values
/// allow it ([`Scan::exact_with`]); `false` (and `out` untouched)
/// otherwise. With `b_cache` (one product, `b` a weight the caller
/// keeps), B is packed and scanned once.
///
/// # Safety
/// `a` and `b` must be valid for reads of `batch·m·k` and `batch·k·n`
/// elements (2-byte aligned), `out` for writes of `batch·m·n` (2-byte
/// aligned) that overlap neither; `batch·m·k`, `batch·k·n` and
/// `batch·m·n` must not overflow (`matmul_dims` checked them).
// SAFETY: (contract) met by `matmul` and `matmul_strided`, its callers.
pub(super) unsafe fn try_matmul(
    a: *const u16,
    b: *const u16,
    out: *mut u16,
    batch: usize,
    dims: (usize, usize, usize),
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<bool, Error> {
    #[cfg(target_arch = "x86_64")]
    let tiles = super::amx::available();
    #[cfg(not(target_arch = "x86_64"))]
    let tiles = false;
    // SAFETY: the same contract.
    unsafe { try_matmul_on(a, b, out, batch, dims, ctx, b_cache, tiles) }
}

/// [`try_matmul`], with products that fit AMX tiles run on them where
/// `tiles` (which [`super::amx::available`] must then have said),
/// else on `vdpbf16ps`: the tests run both paths on a host that has both.
///
/// # Safety
/// [`try_matmul`]'s contract.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) met by `try_matmul` and the tests.
unsafe fn try_matmul_on(
    a: *const u16,
    b: *const u16,
    out: *mut u16,
    batch: usize,
    (m, k, n): (usize, usize, usize),
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
    tiles: bool,
) -> Result<bool, Error> {
    if !available() || k == 0 || batch * m * n == 0 {
        return Ok(false);
    }
    let (na, nb) = (m * k, k * n);
    // SAFETY: the operands' whole storage (the contract).
    let (sa, sb) = unsafe {
        (
            std::slice::from_raw_parts(a, batch * na),
            std::slice::from_raw_parts(b, batch * nb),
        )
    };
    let par = ctx.threads != 1 && super::splits(ctx, m, n, k);
    let mat = |p: *const u16, ld| Mat {
        ptr: SendPtr(p.cast_mut()),
        ld,
    };
    let pre = match b_cache.filter(|_| batch == 1) {
        // SAFETY: B's `k·n` elements (the contract).
        Some(cache) => unsafe { kept(cache, mat(b, n), (k, n), par)? },
        None => None,
    };
    let b_scan = match pre.as_ref().and_then(|p| p.pairs) {
        Some(s) => s,
        None => Scan::of_par(sb, par),
    };
    if !Scan::of_par(sa, par).exact_with(b_scan) {
        FALLBACKS.fetch_add(1, Ordering::Relaxed);
        return Ok(false);
    }
    #[cfg(target_arch = "x86_64")]
    if tiles && batch == 1 && super::amx::fits::<super::amx::Bf16>(m, k, n) {
        let own;
        let pb = match pre.as_deref() {
            Some(p) => p,
            None => {
                // SAFETY: B's `k·n` elements (the contract).
                own = unsafe { pack_kept(mat(b, n), (k, n), par)? };
                &own
            }
        };
        // SAFETY: AMX available (`tiles`, the contract) and the shape
        // fits (just checked); A's
        // `m·k` elements and the output's `m·n` (the contract); `pb`
        // packs this B in this module's layout.
        unsafe { super::amx::matmul::<super::amx::Bf16>(a.cast(), pb, out, (m, k, n), par)? };
        return Ok(true);
    }
    let fam = Bf16Gemm {
        ks: kernels(m, n)?,
        pre: pre.as_deref(),
    };
    // The f32 sums in a buffer kept per calling thread: a fresh one was
    // page faults and zeroing on every call.
    let total = batch * m * n;
    let mut sums = CBUF.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if sums.len() < total {
        sums = tc_runtime::alloc::filled(total, 0f32)?;
    }
    let c = sums.as_mut_ptr();
    let (ap, bp, cp) = (SendPtr(a.cast_mut()), SendPtr(b.cast_mut()), SendPtr(c));
    let item = |p: usize, par: bool| {
        let (ap, bp, c) = (ap, bp, cp);
        let (am, bm) = (
            mat(ap.0.wrapping_add(p * na), k),
            mat(bp.0.wrapping_add(p * nb), n),
        );
        // Item `p < batch` of each operand is the `na` (`nb`) elements at
        // `p·na` (`p·nb`), of C the `m·n` at `p·m·n`: inside the storage
        // (the contract); `m, n, k ≥ 1`; the packers read exactly the rows,
        // k and columns `blocked` asks for; the tile is 14 × 32; each item
        // writes its own part of C.
        // SAFETY: so `blocked`'s (and `one_panel`'s) contract holds.
        unsafe {
            if par && m <= MR && n > 2 * VW {
                one_panel(&fam, (m, n, k), &am, &bm, c.0.add(p * m * n));
            } else {
                blocked(&fam, (m, n, k), &am, &bm, c.0.add(p * m * n), par);
            }
        }
    };
    // Items too small to split (attention's batch × heads) one per task,
    // when together they are worth it; larger ones each split over the
    // pool. The same bits either way.
    let by_item = !par
        && batch > 1
        && ctx.threads != 1
        && rayon::current_num_threads() > 1
        && super::splits(ctx, batch * m, n, k);
    if by_item {
        (0..batch).into_par_iter().for_each(|p| item(p, false));
    } else {
        (0..batch).for_each(|p| item(p, par));
    }
    // SAFETY: `out` holds `total` elements (the contract), `sums` at
    // least as many, all written by the products.
    unsafe { round_into(&mut sums[..total], out, par) };
    CBUF.with(|s| *s.borrow_mut() = sums);
    PAIRED.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

/// A matmul's f32 sum rounded to BF16 (Section 2 §5: nearest, ties to
/// even), a NaN as the canonical NaN rounds (a matmul's NaN is canonical,
/// Section 4 §6: which term made it must not show). Branch-free, so the
/// loop over a piece vectorizes (`half`'s slice conversion ran one
/// element at a time, a twentieth of a product's time).
#[inline(always)]
pub(super) fn round_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    // Wraps only for a NaN (above 0xFF80_0000), which takes the other arm.
    let rounded = u.wrapping_add(0x7FFF + ((u >> 16) & 1)) >> 16;
    let nan = (super::cast::CANONICAL_NAN.to_bits() >> 16) | 0x40;
    if x.is_nan() {
        nan as u16
    } else {
        rounded as u16
    }
}

/// An `m ≤ MR`-row product (one row panel, a batch of one short
/// sentence): A packed once per K-block, the column panels split over the
/// pool. [`blocked`] splits row blocks only, so such a product ran on one
/// thread. Each element's sum is the one `blocked` computes (the same
/// kernels, K-blocks and packing): the same bits.
///
/// # Safety
/// [`blocked`]'s contract, with `m ≤ MR`.
// SAFETY: (contract) met by `try_matmul`, its only caller.
unsafe fn one_panel(
    f: &Bf16Gemm<'_>,
    (m, n, k): (usize, usize, usize),
    a: &Mat,
    b: &Mat,
    c: *mut f32,
) {
    use crate::kernels::gemm_common::{tile_into_c, Tile};
    let (mr, nr) = (MR, 2 * VW);
    let kern = f.kernels();
    let npanels = n.div_ceil(nr);
    let cp = SendPtr(c);
    for pc in (0..k).step_by(2 * KC_SLOTS) {
        let kcb = (2 * KC_SLOTS).min(k - pc);
        let ks = kcb.div_ceil(2);
        let mut packed_a = f.take_a(ks * mr);
        // SAFETY: rows `0..m`, k `pc..pc + kcb ⊆ 0..k` of A (the contract).
        unsafe { f.pack_a(a, pc, kcb, 0, mr, m, &mut packed_a) };
        let pre = f
            .packed_b_block(pc, kcb, 0, n)
            .filter(|p| p.len() >= npanels * ks * nr);
        let ap = &packed_a[..ks * mr];
        let panel = |q: usize| {
            let c = cp;
            let mut own = Vec::new();
            let bp = match pre {
                Some(p) => p[q * ks * nr..(q + 1) * ks * nr].as_ptr(),
                None => {
                    own.resize(ks * nr, 0f32);
                    // SAFETY: k `pc..pc + kcb`, columns from `q·nr < n` of
                    // B (the contract).
                    unsafe { f.pack_b(b, pc, kcb, q * nr, nr, n, &mut own) };
                    own.as_ptr()
                }
            };
            let t = Tile {
                kc: ks,
                row0: 0,
                col0: q * nr,
                nrows: m,
                ncols: nr.min(n - q * nr),
                accum: pc > 0,
                a: ap.as_ptr(),
                lda: 0,
                b: bp,
            };
            // SAFETY: a packed A panel of `ks·mr` and B panel of `ks·nr`
            // f32 slots, the tile `m × ncols` at column `q·nr` inside C
            // (`m ≤ mr`: the last and only row panel, whose edge kernel
            // `kernels` made), written by this task alone.
            unsafe { tile_into_c(&kern, &t, (m, n), c.0) };
        };
        let per = npanels.div_ceil(4 * rayon::current_num_threads().max(1));
        (0..npanels)
            .into_par_iter()
            .with_min_len(per)
            .for_each(panel);
        f.give_a(packed_a);
    }
}

/// The f32 sums `c`, their NaNs made canonical (a matmul's NaN, Section
/// 4 §6), rounded into BF16 at `out`; in pieces on the pool with `par`.
///
/// # Safety
/// `out` must be valid for writes of `c.len()` elements (2-byte aligned)
/// that nothing else references.
// SAFETY: (contract) met by `try_matmul`, its only caller.
unsafe fn round_into(c: &mut [f32], out: *mut u16, par: bool) {
    const PIECE: usize = 1 << 14;
    let out = SendPtr(out);
    let piece = |(i, c): (usize, &mut [f32])| {
        let out = out;
        // SAFETY: piece `i` is elements `i·PIECE..` of the output, inside
        // it (the contract); pieces are disjoint.
        let o = unsafe { std::slice::from_raw_parts_mut(out.0.add(i * PIECE), c.len()) };
        for (o, &x) in o.iter_mut().zip(c.iter()) {
            *o = round_bf16(x);
        }
    };
    if par && c.len() > 2 * PIECE {
        c.par_chunks_mut(PIECE).enumerate().for_each(piece);
    } else {
        c.chunks_mut(PIECE).enumerate().for_each(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(x: f32) -> u16 {
        half::bf16::from_f32(x).to_bits()
    }

    /// The scan finds subnormals and the smallest exponent, and the rule
    /// admits products down to 2⁻¹⁰² exactly.
    #[test]
    fn scan_rule() {
        let s = Scan::of(&[bits(1.0), 0, 0x8000, bits(-0.5)]);
        assert_eq!(
            s,
            Scan {
                subnormal: false,
                min_exp: 126
            }
        );
        assert!(Scan::of(&[1, bits(1.0)]).subnormal);
        assert!(Scan::of(&[0x8001]).subnormal);
        assert_eq!(Scan::of(&[0, 0x8000]).min_exp, u8::MAX);
        let p = |e: i32| Scan::of(&[bits(2f32.powi(e))]);
        assert!(p(-51).exact_with(p(-51)));
        assert!(!p(-51).exact_with(p(-52)));
        assert!(p(-126).exact_with(p(24)));
        assert!(!p(-126).exact_with(p(23)));
        // Infinities and NaNs are not small.
        assert!(Scan::of(&[0x7F80, 0x7FC1]).exact_with(p(0)));
    }

    /// The scan in pieces on the pool finds what the whole scan finds,
    /// wherever the subnormal or the smallest exponent lies.
    #[test]
    fn scan_in_pieces_is_the_scan() {
        let len = 5 * (1 << 15) + 123;
        let mut xs = operand(len, 7);
        for at in [0, 1 << 15, len / 2, len - 1] {
            for special in [1u16, bits(2f32.powi(-100))] {
                let keep = xs[at];
                xs[at] = special;
                assert_eq!(
                    Scan::of_par(&xs, true),
                    Scan::of(&xs),
                    "{special:#x} at {at}"
                );
                xs[at] = keep;
            }
        }
        assert_eq!(Scan::of_par(&xs, true), Scan::of(&xs));
    }

    /// A deterministic BF16 operand: signed values over `[2⁻¹², 8)`, a
    /// tenth of them zero.
    fn operand(len: usize, seed: u64) -> Vec<u16> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 10 == 0 {
                    return 0;
                }
                let mag = 2f32.powf(((x >> 8) % 15_000) as f32 / 1000.0 - 12.0);
                bits(if x & 2 == 0 { mag } else { -mag })
            })
            .collect()
    }

    fn f(b: u16) -> f64 {
        f64::from(half::bf16::from_bits(b).to_f32())
    }

    /// Every element of `c`, the BF16 product of `batch` items `a: [m, k]
    /// · b: [k, n]`, is within the bound the widened path promises:
    /// `2(k+2)·2⁻²⁴·Σ|a·b|` of the exact sum before the final rounding,
    /// then half a BF16 spacing (relative `2⁻⁸` bounds it).
    fn within_bound(
        a: &[u16],
        b: &[u16],
        c: &[u16],
        (batch, m, k, n): (usize, usize, usize, usize),
        how: &str,
    ) {
        for p in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let (mut exact, mut abs) = (0f64, 0f64);
                    for l in 0..k {
                        let t = f(a[p * m * k + i * k + l]) * f(b[p * k * n + l * n + j]);
                        exact += t;
                        abs += t.abs();
                    }
                    let got = f(c[p * m * n + i * n + j]);
                    let sum = 2.0 * (k as f64 + 2.0) * 2f64.powi(-24) * abs;
                    let bound = sum + (exact.abs() + sum) * 2f64.powi(-8);
                    assert!(
                        (got - exact).abs() <= bound,
                        "{batch}×{m}×{k}×{n} ({how}) at ({p},{i},{j}): {got} vs {exact}, bound {bound}"
                    );
                }
            }
        }
    }

    /// Every element of the paired product, for shapes that cover edge
    /// rows, ragged column panels, odd `k` and several K-blocks, batched
    /// and split over threads (by rows, by column panels for one row panel,
    /// or by batch items: the same bits as one thread), is within the
    /// bound the widened path promises ([`within_bound`]); on AMX tiles
    /// too, where the host has them, for the shapes that fit them (edge
    /// row groups of 1–31 rows, products of 2 to 15 rows, several row
    /// blocks and K-blocks).
    #[test]
    fn paired_products_within_the_bound() {
        if !available() {
            eprintln!("no AVX512-BF16 on this host: the paired path is not tested here");
            return;
        }
        let mut seed = 1;
        for &(batch, m, k, n) in &[
            (1, 1, 1, 1),
            (1, 3, 2, 17),
            (2, 14, 3, 32),
            (1, 15, 31, 33),
            (1, 29, 64, 69),
            (2, 5, 1025, 40),
            (1, 30, 2051, 65),
            (1, 64, 384, 1152),
            (1, 10, 384, 1152),
            (1, 7, 2051, 300),
            (96, 32, 33, 32),
            (1, 2, 64, 50),
            (1, 16, 32, 16),
            (1, 17, 64, 40),
            (1, 33, 96, 33),
            (1, 50, 1056, 70),
            (1, 300, 2048, 64),
        ] {
            seed += 1;
            let a = operand(batch * m * k, seed);
            let b = operand(batch * k * n, seed + 100);
            #[cfg(target_arch = "x86_64")]
            let amx = super::super::amx::available();
            #[cfg(not(target_arch = "x86_64"))]
            let amx = false;
            for tiles in [false, true].into_iter().filter(|&t| !t || amx) {
                let mut outs = Vec::new();
                for threads in [1, 2] {
                    let mut c = vec![0x7FC1u16; batch * m * n];
                    // Two threads as in a session, where products of 2^20
                    // multiply-adds split.
                    let ctx = ExecCtx::new(threads, threads > 1);
                    #[cfg(target_arch = "x86_64")]
                    let before = super::super::amx::tiled();
                    // SAFETY: operands and output of exactly these sizes;
                    // `tiles` only where AMX is available.
                    let ran = unsafe {
                        try_matmul_on(
                            a.as_ptr(),
                            b.as_ptr(),
                            c.as_mut_ptr(),
                            batch,
                            (m, k, n),
                            &ctx,
                            None,
                            tiles,
                        )
                    }
                    .unwrap();
                    assert!(ran, "the operands pass the scan");
                    #[cfg(target_arch = "x86_64")]
                    if tiles
                        && batch == 1
                        && super::super::amx::fits::<super::super::amx::Bf16>(m, k, n)
                    {
                        assert!(super::super::amx::tiled() > before, "{m}×{k}×{n} on tiles");
                    }
                    let how = format!("{threads} threads, tiles {tiles}");
                    within_bound(&a, &b, &c, (batch, m, k, n), &how);
                    outs.push(c);
                }
                // Threads split rows, column panels or units, never a sum.
                assert_eq!(
                    outs[0], outs[1],
                    "{batch}×{m}×{k}×{n}: 1 vs 2 threads ({tiles})"
                );
            }
        }
    }

    /// The vectorized rounding is the Section 2 §5 cast's, bit for bit,
    /// with every NaN canonical: on the special values, every exponent
    /// with its rounding boundaries, and a stride through all patterns.
    #[test]
    fn rounding_matches_the_cast() {
        let want = |x: f32| {
            let x = if x.is_nan() {
                tc_runtime::cast::CANONICAL_NAN
            } else {
                x
            };
            tc_runtime::cast::encode_bits(x, tc_core::Dtype::BF16).unwrap() as u16
        };
        let mut pats: Vec<u32> = (0..=u32::MAX).step_by(997).collect();
        for e in 0..=255u32 {
            for m in [0, 1, 0x7FFF, 0x8000, 0x8001, 0x1_7FFF, 0x1_8000, 0x7F_FFFF] {
                pats.extend([(e << 23) | m, 0x8000_0000 | (e << 23) | m]);
            }
        }
        for u in pats {
            let x = f32::from_bits(u);
            assert_eq!(round_bf16(x), want(x), "{u:#010x}");
        }
    }

    /// A subnormal operand, or products that could underflow, go to the
    /// widened path, counted; an empty contraction too (not counted).
    /// Held by the tests that count [`fallbacks`], a process-wide counter.
    static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn operands_outside_the_rule_are_declined() {
        if !available() {
            return;
        }
        let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = ExecCtx::new(1, false);
        let try_ = |a: &[u16], b: &[u16], k: usize| {
            let mut c = [0u16; 4];
            // SAFETY: a 2 × k by k × 2 product, output 2 × 2.
            unsafe {
                try_matmul(
                    a.as_ptr(),
                    b.as_ptr(),
                    c.as_mut_ptr(),
                    1,
                    (2, k, 2),
                    &ctx,
                    None,
                )
            }
            .unwrap()
        };
        let one = bits(1.0);
        let before = fallbacks();
        assert!(try_(&[one; 4], &[one; 4], 2));
        assert!(!try_(&[one, one, one, 1], &[one; 4], 2));
        assert!(!try_(&[bits(1e-20); 4], &[bits(1e-20); 4], 2));
        assert_eq!(fallbacks(), before + 2);
        assert!(!try_(&[], &[], 0));
        assert_eq!(fallbacks(), before + 2);
    }

    /// The same rule where the tiles' path could take the product (k a
    /// multiple of 32, two rows or more): a subnormal in A's last row, or
    /// products below 2⁻¹⁰², are declined whichever path would run,
    /// counted, and leave the output as it was.
    #[test]
    fn operands_outside_the_rule_are_declined_on_both_paths() {
        if !available() {
            return;
        }
        let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = ExecCtx::new(1, false);
        let (m, k, n) = (3, 64, 2);
        let one = bits(1.0);
        let mut a_sub = vec![one; m * k];
        a_sub[m * k - 1] = 1;
        let cases = [
            (vec![one; m * k], vec![one; k * n], true),
            (a_sub, vec![one; k * n], false),
            (vec![bits(1e-20); m * k], vec![bits(1e-20); k * n], false),
        ];
        for tiles in [false, true] {
            if tiles && !super::super::amx::available() {
                continue;
            }
            for (a, b, ok) in &cases {
                let before = fallbacks();
                let mut c = vec![0x7777u16; m * n];
                // SAFETY: an m × k by k × n product, output m × n.
                let done = unsafe {
                    try_matmul_on(
                        a.as_ptr(),
                        b.as_ptr(),
                        c.as_mut_ptr(),
                        1,
                        (m, k, n),
                        &ctx,
                        None,
                        tiles,
                    )
                }
                .unwrap();
                assert_eq!(done, *ok, "tiles {tiles}");
                assert_eq!(fallbacks(), before + u64::from(!ok), "tiles {tiles}");
                let want = if *ok { bits(64.0) } else { 0x7777 };
                assert!(c.iter().all(|&x| x == want), "tiles {tiles}: {c:x?}");
            }
        }
    }
}
