//! AMX-INT8 tiles for fast-numerics products of 16 activation rows at a
//! time (prefill, batched decode), on the 32-element block formats.
//!
//! The operands are the ones `vnni.rs` already builds. A tile of 16
//! weight rows is packed once per call: for each block, 8 vectors whose
//! lane `j` holds 4 consecutive quants of row `j` (u8 for `vpdpbusd`:
//! `Q8_0`'s offset by 128, `Q4_0`'s by 8). Those 8 × 64 bytes are exactly
//! AMX's "VNNI layout" for the B operand of `tdpbssd` (K/4 rows of N × 4
//! bytes) once the offset is taken off again ([`shift_quants`]: the tiles
//! take the quants signed), and the activation block of 16 rows (`qx`, 32
//! i8 per row per block, row stride `k`) is the A operand as it lies in
//! memory. One `tdpbssd` gives the 16 × 16 integer block dots `C[r][j] = Σ
//! x_r·w_j`, exact, the sums `vpdpbusd`'s path reaches after adding its
//! `−128 · bsum` or `−8 · bsum` start, which the tiles' path does not
//! need. After the product every lane takes the scalar reference's f32
//! steps (`kernels::fast_dot`) in the same order as `vnni::step`, so the
//! results are bit-identical to the scalar path and to the VNNI tiles.
//!
//! A block's scales differ per block and per row, so the integer sums
//! cannot stay in the tile across blocks: each block is one `tdpbssd`
//! with K = 32, its C tile stored to a 1 KiB buffer in L1 and scaled by
//! AVX-512, as ggml does for these formats.
//!
//! The tile state (the OS's permission, the configuration) is
//! `crate::tiles`', shared with tc-llvm's AMX-BF16 products.

use super::act::Acts;
use super::vnni::{PACK, Q40, Q41, Q8};
use crate::tiles::{self, Tiles};
use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Activation rows per AMX step: the rows of the A and C tiles.
pub(crate) const ROWS: usize = 16;

/// Whether this process may run the AMX kernels: AVX-512 VNNI (the
/// packing and the scaling use it), CPUID's AMX-TILE and AMX-INT8, and
/// the operating system's permission for the tile state.
pub(crate) fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        super::x86::has_vnni() && tiles::cpu_has(tiles::Extension::Int8) && tiles::granted()
    })
}

/// The tiles [`rows16`] names: `tmm0`, `tmm3` and `tmm6` are C (16 rows
/// × 16 i32), `tmm1` and `tmm4` A (16 rows × 32 i8), `tmm2` and `tmm5` B
/// (8 rows × 64 u8).
pub(crate) static CONFIG: tiles::Config = tiles::Config::new(&[
    (16, 64),
    (16, 32),
    (8, 64),
    (16, 64),
    (16, 32),
    (8, 64),
    (16, 64),
]);

/// 64-byte aligned scratch for one C tile.
#[repr(C, align(64))]
struct CTile([i32; ROWS * 16]);

/// [`rows16`]'s three C tiles' scratch, which its callers keep per thread
/// (`vnni::tile`): every tile is stored before it is read, and zeroed per
/// call (3 KiB per 16-column weight tile, 12,800 of them in a 16-row
/// SmolLM2 step) they took 2.6 % of the step's samples in `memset`.
pub(crate) struct CScratch([CTile; 3]);

impl CScratch {
    pub(crate) const fn new() -> CScratch {
        CScratch([
            CTile([0; ROWS * 16]),
            CTile([0; ROWS * 16]),
            CTile([0; ROWS * 16]),
        ])
    }
}

/// The activation blocks' per-row scalars, regrouped so that [`rows16`]
/// reads the 16 rows of a group for one block contiguously: entry
/// `(g · nb + b) · 16 + r` is row `16g + r`, block `b`. Built once per
/// call and shared by all its tasks and weight tiles.
pub(crate) struct Scales {
    /// Groups of 16 rows.
    pub(crate) groups: usize,
    d: Vec<f32>,
    s: Vec<f32>,
}

impl Scales {
    /// The whole groups of 16 among `a`'s rows (`k / 32` blocks each).
    pub(crate) fn new(a: &Acts, rows: usize, k: usize) -> Scales {
        let (nb, n) = (k / 32, rows / ROWS * ROWS * (k / 32));
        let mut sc = Scales {
            groups: rows / ROWS,
            d: Vec::with_capacity(n),
            s: Vec::with_capacity(n),
        };
        for g in 0..rows / ROWS {
            for b in 0..nb {
                for r in 0..ROWS {
                    let i = (ROWS * g + r) * nb + b;
                    sc.d.push(a.d[i]);
                    sc.s.push(a.s[i]);
                }
            }
        }
        sc
    }
}

/// Block dots into C tile `$c` from A tile `$a` and B tile `$b`: the
/// tile is zeroed, the block's activations (`$x`, row stride `$k`) and
/// weights (`$w`) loaded, the product accumulated. No store: the tile is
/// stored a block later ([`rows16`]'s pipeline), when its product is done.
macro_rules! block_dots {
    ($c:literal, $a:literal, $b:literal, $x:expr, $k:expr, $w:expr) => {
        asm!(
            concat!("tilezero tmm", $c),
            concat!("tileloadd tmm", $a, ", [{x} + {kx}*1]"),
            concat!("tileloadd tmm", $b, ", [{w} + {kw}*1]"),
            concat!("tdpbssd tmm", $c, ", tmm", $a, ", tmm", $b),
            x = in(reg) $x,
            kx = in(reg) $k,
            w = in(reg) $w,
            kw = in(reg) 64usize,
            options(nostack, readonly),
        )
    };
}

/// C tile `$c` stored to `$out` (16 rows of 64 bytes).
macro_rules! store_c {
    ($c:literal, $out:expr) => {
        asm!(
            concat!("tilestored [{c} + {kc}*1], tmm", $c),
            c = in(reg) $out,
            kc = in(reg) 64usize,
            options(nostack),
        )
    };
}

/// What `vnni`'s packing adds to format `F`'s quants to make them
/// unsigned for `vpdpbusd` (`Q8_0`: 128, `Q4_0`: 8; `Q4_1`'s are
/// unsigned as they are), as a wrapping byte: [`shift_quants`] by its
/// negation gives the tiles the signed quants, and by it again the
/// packing back.
pub(crate) const fn unsigned_offset<const F: u8>() -> i8 {
    match F {
        Q8 => i8::MIN,
        Q40 => 8,
        _ => 0,
    }
}

/// A packed weight tile's quants (`buf`: `PACK` vectors per block, the
/// first 8 the quants, one byte each) plus `by`, wrapping.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn shift_quants(buf: &mut [__m512i], by: i8) {
    let by = _mm512_set1_epi8(by);
    for slot in buf.chunks_exact_mut(PACK) {
        for q in &mut slot[..8] {
            *q = _mm512_add_epi8(*q, by);
        }
    }
}

/// Activation rows `16g..16g + 16` against the packed weight tile `buf`
/// (`k / 32` packs of `PACK` vectors, as `vnni::tile` builds them): per
/// row, the 16 weight rows' outputs. With `ahead`, block `b`'s share of
/// the next weight tile is requested while block `b` is computed, so this
/// tile's arithmetic hides its fetch (see `vnni::tile`).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
// SAFETY: (contract) the `vnni` features present; `tiles` shows a
// configuration is loaded, checked below to be [`CONFIG`].
pub(crate) unsafe fn rows16<const F: u8>(
    tiles: &Tiles,
    buf: &[__m512i],
    a: &Acts,
    sc: &Scales,
    k: usize,
    g: usize,
    ahead: Option<super::vnni::NextTile>,
    scratch: &mut CScratch,
) -> [__m512; ROWS] {
    assert!(tiles.are(&CONFIG), "the tiles rows16 names");
    let nb = k / 32;
    // Indexing checks every bound the tile loads rely on: the group's
    // 16 rows of `k` activation bytes, `nb` packs, `nb · 16` scalars.
    let xs = &a.qx[ROWS * g * k..ROWS * (g + 1) * k];
    let buf = &buf[..nb * PACK];
    let at = g * nb * ROWS..(g + 1) * nb * ROWS;
    let (d, s) = (&sc.d[at.clone()], &sc.s[at]);
    let mut acc = [_mm512_setzero_ps(); ROWS];
    let c = &mut scratch.0;
    // A pipeline three blocks deep, so that no instruction waits for the
    // one before it: while block `b` is scaled (from memory), block
    // `b + 1`'s product, issued an iteration earlier and done by now, is
    // stored, and block `b + 2`'s is issued. C tiles rotate over three
    // registers (`tmm0`, `tmm3`, `tmm6`) and scratch buffers, A and B over
    // two sets. (With one block's product stored right after it was
    // issued, the store waited out the product's latency: 290 cycles a
    // block against about 60 now.)
    // SAFETY (every `block_dots!` below): A reads 16 rows of 32 bytes at
    // `xs + 32b + r·k`, inside `xs` (`32b + 32 ≤ k`); B reads 8 rows of 64
    // bytes, inside block `b`'s pack of 640 bytes. The tile registers are
    // named, never allocated: the compiler itself uses none.
    // SAFETY: as just above.
    let dots = |b: usize| unsafe {
        let (x, w) = (xs.as_ptr().add(32 * b), buf[b * PACK..].as_ptr());
        match (b % 3, b % 2) {
            (0, 0) => block_dots!("0", "1", "2", x, k, w),
            (0, _) => block_dots!("0", "4", "5", x, k, w),
            (1, 0) => block_dots!("3", "1", "2", x, k, w),
            (1, _) => block_dots!("3", "4", "5", x, k, w),
            (_, 0) => block_dots!("6", "1", "2", x, k, w),
            _ => block_dots!("6", "4", "5", x, k, w),
        }
    };
    // SAFETY: C writes the 1024 bytes of one `CTile`.
    let store = |b: usize, c: &mut [CTile; 3]| unsafe {
        let out = c[b % 3].0.as_mut_ptr();
        match b % 3 {
            0 => store_c!("0", out),
            1 => store_c!("3", out),
            _ => store_c!("6", out),
        }
    };
    if nb > 0 {
        dots(0);
    }
    if nb > 1 {
        dots(1);
    }
    if nb > 0 {
        store(0, c);
    }
    for b in 0..nb {
        if let Some(next) = ahead {
            next.ask(b);
        }
        if b + 2 < nb {
            dots(b + 2);
        }
        if b + 1 < nb {
            store(b + 1, c);
        }
        let slot = &buf[b * PACK..(b + 1) * PACK];
        let (dw, mw) = (_mm512_castsi512_ps(slot[8]), _mm512_castsi512_ps(slot[9]));
        let blk = b * ROWS..(b + 1) * ROWS;
        let (db, sb): (&[f32; ROWS], &[f32; ROWS]) = (
            d[blk.clone()].try_into().unwrap(),
            s[blk].try_into().unwrap(),
        );
        let cb = &c[b % 3];
        // Unrolled by hand, with constant indices, so that the 16
        // accumulators stay in registers (a loop kept them on the stack).
        macro_rules! row {
            ($r:literal) => {{
                // SAFETY: row `r` of the aligned C scratch, 64 bytes.
                // The signed weights' sum: `vnni::step`'s after its
                // start is added.
                let isum = unsafe { _mm512_load_si512(cb.0.as_ptr().add(16 * $r).cast()) };
                // `vnni::step`'s operations, in its order.
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(db[$r]));
                acc[$r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc[$r]);
                if F == Q41 {
                    acc[$r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sb[$r]), acc[$r]);
                }
            }};
        }
        row!(0);
        row!(1);
        row!(2);
        row!(3);
        row!(4);
        row!(5);
        row!(6);
        row!(7);
        row!(8);
        row!(9);
        row!(10);
        row!(11);
        row!(12);
        row!(13);
        row!(14);
        row!(15);
    }
    acc
}
