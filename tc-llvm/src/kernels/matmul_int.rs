//! Integer matmul (Section 2 §7 at I64, I32, I16, I8, I4): packing with
//! widening, cache tiling and a register-blocked micro-kernel generated as
//! LLVM IR — no BLAS, no scalar triple loop.
//!
//! # Why accumulating in i32 is bit-exact
//!
//! Section 2 §3: "Integer arithmetic wraps (two's complement) at the dtype's
//! width; I4 wraps in [-8, 7]". The reference interpreter accumulates each
//! dot product in i64 with wrapping `+`/`×` and wraps the sum to the dtype
//! at the end (`tc_runtime::cast::wrap_int`: keep the low `w` bits,
//! sign-extended). Wrapping arithmetic at width `W` is arithmetic in the ring
//! ℤ/2^W, and reduction mod 2^w is a ring homomorphism ℤ/2^W → ℤ/2^w whenever
//! `w ≤ W` (i.e. `2^w` divides `2^W`). Hence for I32, I16, I8 and I4
//! (`w` = 32, 16, 8, 4) the low `w` bits of the i64 sum equal the low `w`
//! bits of the same sum computed with wrapping i32 multiplies and adds — in
//! any order, blocked along K or not. Only I64 needs i64 lanes. Sign
//! extension of the operands while packing is exact (every I4/I8/I16/I32
//! value is representable in i32), and the final narrowing keeps the low
//! `w` bits exactly as `wrap_int` does (I4: the low nibble, which is what
//! its packed storage holds anyway).
//!
//! # Kernels
//!
//! Three micro-kernels, each emitted once per process as IR text,
//! JIT-compiled with the host's `target-cpu`/`target-features` (see
//! [`crate::jit::attributes`]) and cached in a `OnceLock`, as the f32 one
//! in [`crate::kernels::matmul`]:
//!
//! - `i64`: an `MR × NR` tile in `<8 x i64>` accumulators (AVX-512; `<4 x
//!   i64>` on AVX2), `mul`/`add` per step of k (`vpmullq` with AVX-512DQ).
//!   Used for I64.
//! - `i32`: the same over `<16 x i32>` (`vpmulld`). Used for I32, and for the
//!   narrow dtypes when the pair kernel is not available.
//! - `pair16` (x86 with AVX-512BW or AVX2): I16, I8 and I4 operands fit in
//!   i16, so the packing stores two consecutive k-steps per 32-bit slot (two
//!   i16) and the kernel multiplies and adds both with one `pmaddwd`
//!   (`llvm.x86.avx512.pmaddw.d.512`), accumulating in i32 lanes. Each lane
//!   gets `a₀b₀ + a₁b₁`; the only case that overflows i32 (all four operands
//!   −32768, sum 2^31) yields 0x8000_0000, which is 2^31 mod 2^32: the
//!   result is still exact mod 2^32, hence exact after wrapping to the dtype.
//!   Half the multiply instructions of the `i32` kernel, each one µop; on
//!   hosts with AVX-512 VNNI LLVM fuses `pmaddwd` and the add into one
//!   `vpdpwssd`.
//!
//! Tiles are 13 × 32 (i32, pair) and 13 × 16 (i64) on AVX-512: with a
//! separate multiply and add the product needs a register of its own, and
//! 13 rows is the most that runs without spills; the fused `vpdpwssd`
//! allows the f32 kernel's 14 rows.
//!
//! Every kernel has the f32 kernel's signature with integer pointers:
//! `(kc, packed A, packed B, C, ldc, accumulate)`; the loop nest around it is
//! the one blocked driver of the f32 GEMM (`gemm_common::blocked`: `jc` →
//! `pc` pack B → `ic` pack A, split across the rayon pool → micro-tiles),
//! here with `IntGemm`'s packing and blocks. A last row or column panel
//! that is not a whole tile is computed by a kernel of its own (edge rows,
//! masked columns) where that measured faster (`straight_into_c`), else
//! into a local tile and copied. I32 and I64 results are written straight
//! into the output; the narrow dtypes accumulate into an i32 scratch matrix
//! that is narrowed (and, for I4, packed into nibbles) at the end.
//! Threads split output rows or batch entries, never a dot product, and the
//! result is exact either way.

use std::marker::PhantomData;
use std::sync::OnceLock;

use rayon::prelude::*;
use tc_core::Dtype;

use crate::ctx::ExecCtx;
use crate::kernels::gemm_common::{
    blocked, kernel_set, table, table_kernel, Cols, Family, GemmElem, Kernels, Micro, SendPtr,
    Table,
};
use crate::llvm_ir::{Decl, Ty};
use crate::options::Error;

/// Contraction block, in packed k-slots (a slot is one step of k, or two
/// for the pair kernel).
pub const KC_SLOTS: usize = 256;
/// Row block (rounded up to a multiple of the tile's rows).
pub const MC_INT: usize = 128;
/// Column block.
pub const NC_INT: usize = 4096;

/// Which micro-kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntKernel {
    /// `<vw x i64>` accumulators, `mul`/`add`.
    I64,
    /// `<vw x i32>` accumulators, `mul`/`add`.
    I32,
    /// `<vw x i32>` accumulators fed by `pmaddwd` on pairs of i16.
    Pair16,
}

fn has(feature: &str) -> bool {
    crate::jit::host().has(feature)
}

/// Whether the pair kernel can be generated on this host (x86 with
/// AVX-512BW or AVX2).
pub fn pair_available() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| {
        cfg!(any(target_arch = "x86_64", target_arch = "x86")) && (has("+avx512bw") || has("+avx2"))
    })
}

/// The micro-kernel's IR text: `kind`, `vw` lanes per vector, `mr` rows;
/// the tile is `mr × 2·vw`. For [`IntKernel::Pair16`], `vw` must be 16
/// (AVX-512BW) or 8 (AVX2).
pub fn ukernel_int_ir(kind: IntKernel, vw: usize, mr: usize) -> String {
    ukernel_int_ir_rows(kind, vw, (mr, mr), Cols::Whole)
}

/// The IR text of `kind`'s kernel computing the first `rows` of a tile
/// whose A panel is packed `mr` rows wide (an edge kernel when `rows <
/// mr`), writing `cols` of C (the masked forms for a ragged last column
/// panel, as the f32 kernels' [`Cols`]).
pub(crate) fn ukernel_int_ir_rows(
    kind: IntKernel,
    vw: usize,
    (rows, mr): (usize, usize),
    cols: Cols,
) -> String {
    let e = if kind == IntKernel::I64 {
        Ty::I64
    } else {
        Ty::I32
    };
    let (v, w) = (e.vec(vw), Ty::I16.vec(2 * vw));
    let pmadd = if vw == 16 {
        "llvm.x86.avx512.pmaddw.d.512"
    } else {
        "llvm.x86.avx2.pmadd.wd"
    };
    let pmadd = Decl::new(pmadd, Some(v), &[(w, ""), (w, "")], "#1");
    let pair = kind == IntKernel::Pair16;
    crate::kernels::gemm_common::ukernel_text(&crate::kernels::gemm_common::UkrSpec {
        elem: e,
        vw,
        mr: rows,
        a: crate::kernels::gemm_common::ALayout::Packed(mr),
        after_b: &|b, j, _, bj| {
            if pair {
                b.named(format_args!("bw{j}")).bitcast(&bj, w)
            } else {
                bj
            }
        },
        after_a: &|b, i, a| {
            if pair {
                b.named(format_args!("aw{i}")).bitcast(&a, w)
            } else {
                a
            }
        },
        step: &|b, (i, j), acc, a, bj| {
            let p = b.named(format_args!("p{i}_{j}"));
            let p = if pair {
                p.call_to(&pmadd, &[a, bj])
            } else {
                p.mul(a, bj)
            };
            b.named(format_args!("n{i}_{j}")).add(acc, &p)
        },
        c_align: 1,
        // As O3 chose for these kernels before the pipeline stopped
        // unrolling on its own (`host::PIPELINE`).
        k_unroll: 4,
        cols,
    })
}

/// Lanes and rows of `kind`'s kernel on this host (`TC_MM_INT_MR`
/// overrides the rows, up to 14, for tuning). Read once per kind: every
/// product asks, and the host's feature tests search a string.
fn geometry(kind: IntKernel) -> (usize, usize) {
    static G: [OnceLock<(usize, usize)>; 3] = [const { OnceLock::new() }; 3];
    *G[kind as usize].get_or_init(|| host_geometry(kind))
}

/// [`geometry`], worked out from the host.
fn host_geometry(kind: IntKernel) -> (usize, usize) {
    let avx512 = crate::jit::host().has_avx512();
    // With AVX-512 (32 registers): 2·MR accumulators, 2 B vectors, the
    // broadcast of A and, unless the multiply-add is one instruction
    // (`vpdpwssd`), the product: MR = 13 is the most that does not spill.
    let (vw, mr) = match kind {
        IntKernel::I64 if avx512 && has("+avx512dq") => (8, 13),
        // No vpmullq: the emulated multiply needs temporaries.
        IntKernel::I64 if avx512 => (8, 6),
        IntKernel::I64 => (4, 4),
        IntKernel::I32 if avx512 => (16, 13),
        IntKernel::Pair16 if avx512 && has("+avx512bw") => {
            (16, if has("+avx512vnni") { 14 } else { 13 })
        }
        // AVX2 (16 registers).
        _ => (8, 6),
    };
    static MR_ENV: OnceLock<Option<usize>> = OnceLock::new();
    let env = *MR_ENV.get_or_init(|| {
        crate::ctx::Settings::get()
            .mm_int_mr
            .filter(|&v: &usize| (1..=14).contains(&v))
    });
    (vw, env.unwrap_or(mr))
}

/// `kind`'s kernel of `rows ≤ mr` rows (A packed `mr` wide) writing
/// `cols`, compiled the first time a product needs it.
fn kernel(kind: IntKernel, rows: usize, cols: Cols) -> Result<&'static Micro, Error> {
    static TABLES: [Table; 3] = [table(), table(), table()];
    let (vw, mr) = geometry(kind);
    table_kernel(&TABLES[kind as usize], (rows, mr), 2 * vw, cols, || {
        ukernel_int_ir_rows(kind, vw, (rows, mr), cols)
    })
}

/// `kind`'s kernels for an `m × n` product ([`kernel_set`]): edge rows and
/// masked columns where [`straight_into_c`] says so, computed straight
/// into C instead of into a scratch tile and copied.
fn int_kernels(kind: IntKernel, m: usize, n: usize) -> Result<Kernels<'static>, Error> {
    let (vw, mr) = geometry(kind);
    let (rows_ok, cols_ok) = straight_into_c(kind);
    let edge = (rows_ok && !m.is_multiple_of(mr)).then_some(m % mr);
    kernel_set(n, (mr, 2 * vw), edge, cols_ok, |r, cols| {
        kernel(kind, r, cols)
    })
}

/// Whether `kind`'s last row panel and last column panel are computed by
/// kernels of their own (edge rows, masked columns) rather than by the
/// full kernel into a scratch tile. Measured where it paid (issue #15; AMD
/// Zen 4 host, 2026-12-04, one thread, 2 000 calls of each alternating,
/// medians): the `i32` kernel gained from both (20 × 64 × 40: 3.2 → 2.7
/// µs with masked columns, 4.1 → 3.5 with edge rows; 128 × 128 × 100 5–11%
/// with masked columns); the `i64` kernel from edge rows (27 × 128 × 20:
/// 12.2 → 11.1 µs) but not masked columns (11.0 → 11.5); the pair kernel
/// from neither on narrow products (50 × 256 × 24 at I8: 12.7 → 14.1 µs
/// masked, 12.2 → 12.5 edge rows; 26 × 256 × 56 at I16 10.3 → 11.7 and
/// 9.7 → 10.1), within 3% either way on wider ones.
fn straight_into_c(kind: IntKernel) -> (bool, bool) {
    match kind {
        IntKernel::I32 => (true, true),
        IntKernel::I64 => (true, false),
        IntKernel::Pair16 => (false, false),
    }
}

/// Which kernel [`matmul_int`] uses for dtype `dt` on this host: the pair
/// kernel for I16, I8 and I4 where available (`TC_MM_INT_PAIR=0` turns it
/// off, for measurements), else the plain one of the accumulator's width.
pub fn kernel_for(dt: Dtype) -> IntKernel {
    static PAIR: OnceLock<bool> = OnceLock::new();
    let pair = *PAIR.get_or_init(|| pair_available() && crate::ctx::Settings::get().mm_int_pair);
    match dt {
        Dtype::I64 => IntKernel::I64,
        Dtype::I32 => IntKernel::I32,
        _ if pair => IntKernel::Pair16,
        _ => IntKernel::I32,
    }
}

/// Compile the kernel `dt` needs now (so its cost is not charged to a call).
pub fn warm_up(dt: Dtype) -> Result<(), Error> {
    let kind = kernel_for(dt);
    kernel(kind, geometry(kind).1, Cols::Whole).map(|_| ())
}

/// An accumulator element type of a kernel.
trait Acc: GemmElem {
    fn from_i64(x: i64) -> Self;
    /// Two i16 operands in one slot (low half first): pair kernel only.
    fn pair(lo: i64, hi: i64) -> Self;
}

impl Acc for i64 {
    #[inline(always)]
    fn from_i64(x: i64) -> Self {
        x
    }
    #[inline(always)]
    fn pair(lo: i64, _hi: i64) -> Self {
        lo
    }
}

impl Acc for i32 {
    #[inline(always)]
    fn from_i64(x: i64) -> Self {
        x as i32
    }
    #[inline(always)]
    fn pair(lo: i64, hi: i64) -> Self {
        ((lo as u16 as u32) | ((hi as u16 as u32) << 16)) as i32
    }
}

/// Read element `i` (linear, over the whole buffer) of an int operand as
/// i64 (sign-extended; I4: nibble `i % 2` of byte `i / 2`, low first).
///
/// # Safety
/// Element `i` of `dt`'s storage at `p` must be readable (any alignment).
#[inline(always)]
// SAFETY: (contract) met by `Mat::at`, its only caller.
unsafe fn read(dt: Dtype, p: *const u8, i: usize) -> i64 {
    // SAFETY: the element's bytes are readable (the contract); the
    // multi-byte reads are unaligned ones.
    unsafe {
        match dt {
            Dtype::I64 => (p as *const i64).add(i).read_unaligned(),
            Dtype::I32 => (p as *const i32).add(i).read_unaligned() as i64,
            Dtype::I16 => (p as *const i16).add(i).read_unaligned() as i64,
            Dtype::I8 => *(p as *const i8).add(i) as i64,
            _ => {
                let byte = *p.add(i / 2);
                let nib = if i.is_multiple_of(2) {
                    byte << 4
                } else {
                    byte & 0xF0
                };
                ((nib as i8) >> 4) as i64
            }
        }
    }
}

/// A contiguous row-major operand: element `(i, j)` is linear element
/// `base + i·ld + j` of `ptr`'s storage.
#[derive(Clone, Copy)]
struct Mat {
    ptr: SendPtr<u8>,
    dt: Dtype,
    base: usize,
    ld: usize,
}

impl Mat {
    /// Element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must lie inside the operand the `Mat` describes.
    #[inline(always)]
    // SAFETY: (contract) met by `pack_a` and `pack_b`, its only callers.
    unsafe fn at(&self, i: usize, j: usize) -> i64 {
        // SAFETY: linear element `base + i·ld + j` is `(i, j)` of the
        // operand, readable by the contract.
        unsafe { read(self.dt, self.ptr.0, self.base + i * self.ld + j) }
    }
}

/// Run `body` with `$m` rebound to a [`Mat`] whose dtype is a compile-time
/// constant (the match is hoisted out of the packing loops).
macro_rules! per_dtype {
    ($m:ident, $body:expr) => {
        match $m.dt {
            Dtype::I64 => {
                let $m = Mat {
                    dt: Dtype::I64,
                    ..$m
                };
                $body
            }
            Dtype::I32 => {
                let $m = Mat {
                    dt: Dtype::I32,
                    ..$m
                };
                $body
            }
            Dtype::I16 => {
                let $m = Mat {
                    dt: Dtype::I16,
                    ..$m
                };
                $body
            }
            Dtype::I8 => {
                let $m = Mat {
                    dt: Dtype::I8,
                    ..$m
                };
                $body
            }
            _ => {
                let $m = Mat {
                    dt: Dtype::I4,
                    ..$m
                };
                $body
            }
        }
    };
}

/// Pack rows `row0..row0+mr` (zero past `m`) × k `pc..pc+kc` of A into
/// `dst[s·mr + r]`, slot `s` = k `pc+s` (or the pair `pc+2s, pc+2s+1`, zero
/// past `pc+kc`).
///
/// # Safety
/// `a` must be readable over rows `row0..m` and k `pc..pc + kc`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
// SAFETY: (contract) met by `IntGemm::pack_a`, its only caller.
unsafe fn pack_a<T: Acc>(
    a: Mat,
    pair: bool,
    pc: usize,
    kc: usize,
    row0: usize,
    mr: usize,
    m: usize,
    dst: &mut [T],
) {
    let rows = mr.min(m - row0);
    let slots = if pair { kc.div_ceil(2) } else { kc };
    let dst = &mut dst[..slots * mr];
    if rows < mr {
        dst.iter_mut().for_each(|x| *x = T::default());
    }
    // SAFETY: reads of `(row0 + r, pc + j)` with `r < rows ≤ m − row0` and
    // `j < kc` (the pair's high half only when `2s + 1 < kc`), inside A by
    // the contract; writes are bounds-checked.
    per_dtype!(a, unsafe {
        for r in 0..rows {
            let i = row0 + r;
            if pair {
                for s in 0..slots {
                    let l = pc + 2 * s;
                    let hi = if 2 * s + 1 < kc { a.at(i, l + 1) } else { 0 };
                    dst[s * mr + r] = T::pair(a.at(i, l), hi);
                }
            } else {
                for s in 0..slots {
                    dst[s * mr + r] = T::from_i64(a.at(i, pc + s));
                }
            }
        }
    })
}

/// Pack k `pc..pc+kc` × columns `col0..col0+nr` (zero past `n`) of B into
/// `dst[s·nr + c]` (slots as in [`pack_a`]).
///
/// # Safety
/// `b` must be readable over k `pc..pc + kc` and columns `col0..n`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
// SAFETY: (contract) met by `IntGemm::pack_b`, its only caller.
unsafe fn pack_b<T: Acc>(
    b: Mat,
    pair: bool,
    pc: usize,
    kc: usize,
    col0: usize,
    nr: usize,
    n: usize,
    dst: &mut [T],
) {
    let cols = nr.min(n - col0);
    let slots = if pair { kc.div_ceil(2) } else { kc };
    let dst = &mut dst[..slots * nr];
    if cols < nr {
        dst.iter_mut().for_each(|x| *x = T::default());
    }
    // SAFETY: reads of `(pc + j, col0 + c)` with `j < kc` (the pair's high
    // half only when `2s + 1 < kc`) and `c < cols ≤ n − col0`, inside B by
    // the contract; writes are bounds-checked.
    per_dtype!(b, unsafe {
        for s in 0..slots {
            let d = &mut dst[s * nr..s * nr + cols];
            if pair {
                let l = pc + 2 * s;
                if 2 * s + 1 < kc {
                    for (c, x) in d.iter_mut().enumerate() {
                        *x = T::pair(b.at(l, col0 + c), b.at(l + 1, col0 + c));
                    }
                } else {
                    for (c, x) in d.iter_mut().enumerate() {
                        *x = T::pair(b.at(l, col0 + c), 0);
                    }
                }
            } else {
                for (c, x) in d.iter_mut().enumerate() {
                    *x = T::from_i64(b.at(pc + s, col0 + c));
                }
            }
        }
    })
}

/// The integer GEMM family at accumulator type `T` (i32 or i64): one of
/// the kernels of [`IntKernel`], blocks of [`KC_SLOTS`] k-slots (two steps
/// of k each for the pair kernel, so pairs never straddle blocks),
/// [`MC_INT`] and [`NC_INT`], [`Mat`] operands widened while packing, and
/// packing buffers allocated per call.
struct IntGemm<'a, T> {
    ks: Kernels<'a>,
    pair: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T: Acc> Family for IntGemm<'_, T> {
    type E = T;
    type Src = Mat;

    fn kernels(&self) -> Kernels<'_> {
        self.ks
    }

    fn blocks(&self) -> (usize, usize, usize) {
        (KC_SLOTS * if self.pair { 2 } else { 1 }, MC_INT, NC_INT)
    }

    fn slots(&self, kc: usize) -> usize {
        if self.pair {
            kc.div_ceil(2)
        } else {
            kc
        }
    }

    // SAFETY: (contract) `Family::pack_a`'s, met by its callers; it is
    // `pack_a`'s.
    unsafe fn pack_a(
        &self,
        a: &Mat,
        pc: usize,
        kc: usize,
        row0: usize,
        mr: usize,
        m: usize,
        dst: &mut [T],
    ) {
        // SAFETY: the same contract.
        unsafe { pack_a(*a, self.pair, pc, kc, row0, mr, m, dst) }
    }

    // SAFETY: (contract) `Family::pack_b`'s, met by its callers; it is
    // `pack_b`'s.
    unsafe fn pack_b(
        &self,
        b: &Mat,
        pc: usize,
        kc: usize,
        col0: usize,
        nr: usize,
        n: usize,
        dst: &mut [T],
    ) {
        // SAFETY: the same contract.
        unsafe { pack_b(*b, self.pair, pc, kc, col0, nr, n, dst) }
    }

    fn take_b(&self) -> Vec<T> {
        Vec::new()
    }

    fn b_block<'b>(&self, buf: &'b mut Vec<T>, need: usize) -> &'b mut [T] {
        if buf.len() < need {
            buf.resize(need, T::default());
        }
        &mut buf[..need]
    }

    fn give_b(&self, _buf: Vec<T>) {}

    fn take_a(&self, len: usize) -> Vec<T> {
        vec![T::default(); len]
    }

    fn give_a(&self, _buf: Vec<T>) {}
}

/// Products below this many multiply-adds stay on the calling thread
/// (the f32 GEMM's threshold, [`crate::kernels::gemm_common::PAR_MIN_MACS`]).
const PAR_MIN: usize = crate::kernels::gemm_common::PAR_MIN_MACS;

/// All `batch` products into `c` (`batch × m × n` elements of `T`).
///
/// # Safety
/// As [`matmul_int`]; `c` holds `batch·m·n` elements.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) met by `matmul_int_using`, its only caller.
unsafe fn batched<T: Acc>(
    ks: Kernels<'static>,
    pair: bool,
    dt: Dtype,
    a: *const u8,
    b: *const u8,
    c: *mut T,
    batch: usize,
    (m, k, n): (usize, usize, usize),
    ctx: &ExecCtx,
) {
    let one = m.saturating_mul(n).saturating_mul(k);
    let total = one.saturating_mul(batch);
    let nthreads = rayon::current_num_threads().max(1);
    let pool = ctx.threads != 1 && total >= PAR_MIN && nthreads > 1;
    // Many small products: one per task; few large ones: split their rows.
    let par_batch = pool && batch > 1 && (batch >= nthreads || one < PAR_MIN);
    let (ap, bp, cp) = (SendPtr(a as *mut u8), SendPtr(b as *mut u8), SendPtr(c));
    let run = |p: usize, par: bool| {
        let (ap, bp, cp) = (ap, bp, cp);
        let am = Mat {
            ptr: ap,
            dt,
            base: p * m * k,
            ld: k,
        };
        let bm = Mat {
            ptr: bp,
            dt,
            base: p * k * n,
            ld: n,
        };
        let fam = IntGemm::<T> {
            ks,
            pair,
            _t: PhantomData,
        };
        // Item `p < batch` of each contiguous operand starts at linear
        // element `p·m·k` (`p·k·n`), readable by the contract; `m, n, k ≥ 1`
        // (`matmul_int_using`) and the tile is at most 14 × 32 (`geometry`).
        // SAFETY: so the reads are in bounds, and item `p` of C (the `m·n`
        // elements at `p·m·n`, aligned for `T`) is written by this call alone.
        unsafe { blocked(&fam, (m, n, k), &am, &bm, cp.0.add(p * m * n), par) };
    };
    if par_batch {
        (0..batch).into_par_iter().for_each(|p| run(p, false));
    } else {
        (0..batch).for_each(|p| run(p, pool && one >= PAR_MIN));
    }
}

/// Write `vals` (wrapping) as the narrow int dtype `dt` into `out`,
/// elements `0..vals.len()` (I4: nibbles, low first; a last odd nibble
/// keeps its byte's other half).
///
/// # Safety
/// `out` must be valid for reads and writes of the storage of `vals.len()`
/// elements of `dt` (any alignment), initialised (an odd I4 tail byte is
/// read).
// SAFETY: (contract) met by `matmul_int_using` and `write_zeros`.
unsafe fn narrow(dt: Dtype, vals: &[i32], out: *mut u8) {
    // SAFETY: element `i < vals.len()` (byte `i / 2` for I4) of the output,
    // valid by the contract; multi-byte writes are unaligned ones.
    unsafe {
        match dt {
            Dtype::I32 => {
                for (i, &v) in vals.iter().enumerate() {
                    (out as *mut i32).add(i).write_unaligned(v);
                }
            }
            Dtype::I16 => {
                for (i, &v) in vals.iter().enumerate() {
                    (out as *mut i16).add(i).write_unaligned(v as i16);
                }
            }
            Dtype::I8 => {
                for (i, &v) in vals.iter().enumerate() {
                    *out.add(i) = v as u8;
                }
            }
            _ => {
                let mut pairs = vals.chunks_exact(2);
                for (i, pr) in pairs.by_ref().enumerate() {
                    *out.add(i) = (pr[0] as u8 & 0xF) | ((pr[1] as u8) << 4);
                }
                if let [last] = pairs.remainder() {
                    let byte = out.add(vals.len() / 2);
                    *byte = (*byte & 0xF0) | (*last as u8 & 0xF);
                }
            }
        }
    }
}

/// Batched integer matmul on contiguous raw storage (Section 2 §5 layout) of
/// the int dtype `dt`: `a: p ++ [M, K]`, `b: p ++ [K, N]` → `out: p ++ [M, N]`,
/// bit-identical to the interpreter (i64 wrapping accumulation, wrapped to
/// `dt`). `threads == 1` runs on the calling thread only.
///
/// Shapes that are not a matmul (rank < 2, different ranks or batch dims,
/// K ≠ K'), element counts that overflow and non-int dtypes are errors,
/// never a panic; `K = 0` gives zeros, an empty output writes nothing.
///
/// # Safety
/// `a` and `b` must be valid for reads of the storage of `sa` and `sb`
/// (any alignment), `out` for reads and writes of the initialised storage
/// of `p ++ [M, N]`, not overlapping the operands (`out` is written only
/// within it). It stays `unsafe` because raw buffers carry no length to
/// check against; the JIT's compiled functions are the safe entry point.
// SAFETY: (contract) in the crate met by `matmul::matmul` (whose contract
// `CompiledFn::exec` meets through `matmul_strided`).
pub unsafe fn matmul_int(
    dt: Dtype,
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
) -> Result<(), Error> {
    // SAFETY: the same contract.
    unsafe { matmul_int_using(kernel_for(dt), dt, a, b, out, sa, sb, ctx) }
}

/// [`matmul_int`] with the micro-kernel chosen by the caller (tests and
/// benchmarks): [`IntKernel::I64`] computes I64 only, [`IntKernel::I32`]
/// every other int dtype, [`IntKernel::Pair16`] I16, I8 and I4 on hosts with
/// AVX-512BW or AVX2. Other combinations are errors.
///
/// # Safety
/// As [`matmul_int`].
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) in the crate met by `matmul_int`, its only caller.
pub unsafe fn matmul_int_using(
    kind: IntKernel,
    dt: Dtype,
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
) -> Result<(), Error> {
    // SAFETY: the same contract.
    unsafe { matmul_int_into(kind, (dt, dt), a, b, out, sa, sb, ctx) }
}

/// §7b `matmul_i32` on contiguous raw storage: I8 operands `a: p ++ [M,
/// K]`, `b: p ++ [K, N]`, the I32 sums into `out: p ++ [M, N]` with no
/// narrowing (the kernels accumulate in i32 lanes: exact mod 2³²,
/// Section 2 §3's wrapping of I32, whatever the order).
///
/// # Safety
/// As [`matmul_int`], `out` holding the I32 storage of `p ++ [M, N]`.
// SAFETY: (contract) in the crate met by `matmul::i8`'s callers.
pub unsafe fn matmul_int_wide(
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
) -> Result<(), Error> {
    let kind = kernel_for(Dtype::I8);
    // SAFETY: the same contract.
    unsafe { matmul_int_into(kind, (Dtype::I8, Dtype::I32), a, b, out, sa, sb, ctx) }
}

/// [`matmul_int_using`] with operands of `dt` and a result of `out_dt`
/// (`dt` itself, or I32 for I8 operands).
///
/// # Safety
/// As [`matmul_int`], `out` holding the storage of `p ++ [M, N]` at
/// `out_dt`.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) met by `matmul_int_using` and `matmul_int_wide`.
unsafe fn matmul_int_into(
    kind: IntKernel,
    (dt, out_dt): (Dtype, Dtype),
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
) -> Result<(), Error> {
    if out_dt != dt && !(dt == Dtype::I8 && out_dt == Dtype::I32) {
        return Err(Error::Unsupported(format!(
            "integer matmul of {dt} operands into {out_dt}"
        )));
    }
    let fits = match kind {
        IntKernel::I64 => dt == Dtype::I64,
        IntKernel::I32 => dt.is_int() && dt != Dtype::I64,
        IntKernel::Pair16 => pair_available() && matches!(dt, Dtype::I16 | Dtype::I8 | Dtype::I4),
    };
    if !fits {
        return Err(Error::Unsupported(format!(
            "integer matmul at {dt} with the {kind:?} kernel"
        )));
    }
    let (batch, m, k, n) = crate::kernels::gemm_common::matmul_dims(sa, sb)?;
    // No overflow: `matmul_dims` checked the counts (within the cap).
    let total = batch * m * n;
    if total == 0 {
        return Ok(());
    }
    let shape = (m, k, n);
    if k == 0 {
        // SAFETY: `total` elements of `out_dt`: the output's storage
        // (contract).
        unsafe { write_zeros(out_dt, out, total)? };
        return Ok(());
    }
    let ks = int_kernels(kind, m, n)?;
    let pair = kind == IntKernel::Pair16;
    // The kernel's C is `T`-typed: straight into `out` when it is the
    // accumulator type and aligned for it, else through an aligned copy.
    // In every arm the operands are as the contract says.
    match out_dt {
        // SAFETY: `out` is checked aligned and holds `total` i64s (contract).
        Dtype::I64 if (out as usize).is_multiple_of(std::mem::align_of::<i64>()) => unsafe {
            batched(ks, false, dt, a, b, out as *mut i64, batch, shape, ctx)
        },
        Dtype::I64 => {
            let mut tmp = tc_runtime::alloc::filled(total, 0i64)?;
            // SAFETY: `tmp` has exactly `total` elements; the copy writes
            // `total` unaligned i64s, `out`'s storage (contract).
            unsafe {
                batched(ks, false, dt, a, b, tmp.as_mut_ptr(), batch, shape, ctx);
                for (i, v) in tmp.iter().enumerate() {
                    (out as *mut i64).add(i).write_unaligned(*v);
                }
            }
        }
        // SAFETY: `out` is checked aligned and holds `total` i32s (contract).
        Dtype::I32 if (out as usize).is_multiple_of(std::mem::align_of::<i32>()) => unsafe {
            batched(ks, pair, dt, a, b, out as *mut i32, batch, shape, ctx)
        },
        _ => {
            let mut tmp = tc_runtime::alloc::filled(total, 0i32)?;
            // SAFETY: `tmp` has exactly `total` elements; `narrow` writes
            // `total` elements of `out_dt`, `out`'s storage (contract).
            unsafe {
                batched(ks, pair, dt, a, b, tmp.as_mut_ptr(), batch, shape, ctx);
                narrow(out_dt, &tmp, out);
            }
        }
    }
    Ok(())
}

/// Zero `total` elements of the int dtype `dt` at `out`.
///
/// # Safety
/// As [`narrow`] for `total` elements.
// SAFETY: (contract) met by `matmul_int_using`, its only caller.
unsafe fn write_zeros(dt: Dtype, out: *mut u8, total: usize) -> Result<(), Error> {
    if dt == Dtype::I64 {
        for i in 0..total {
            // SAFETY: element `i < total` (the contract), unaligned write.
            unsafe { (out as *mut i64).add(i).write_unaligned(0) };
        }
    } else {
        let zeros = tc_runtime::alloc::filled(total, 0i32)?;
        // SAFETY: the same contract.
        unsafe { narrow(dt, &zeros, out) };
    }
    Ok(())
}

#[cfg(test)]
mod unsafe_tests;
