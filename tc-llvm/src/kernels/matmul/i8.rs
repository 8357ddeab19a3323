//! docs/syntax.md §7b `matmul_i32`: I8 operands, I32 sums. On AMX-INT8
//! tiles where the CPU has them ([`super::amx`], `tdpbssd`), B packed in
//! quads of k-steps and kept across calls for a weight; elsewhere the
//! integer GEMM's pair kernel (`pmaddwd`, `vpdpwssd` with VNNI), whose i32
//! accumulators are the result. Every path sums in i32 lanes, wrapping:
//! arithmetic mod 2³², which is the I32 matmul of the widened operands in
//! any order, so every path gives the interpreter's bits.

#[cfg(target_arch = "x86_64")]
use rayon::prelude::*;

use super::{gathered, narrow_layout, strided_dims, ExecCtx, Narrow, PackCache};
#[cfg(target_arch = "x86_64")]
use super::{PackedB, ViewKey};
use crate::options::Error;

/// The product of the I8 views `a` and `b` (shapes `sa`, `sb`, element
/// strides `st_a`, `st_b`) into the contiguous I32 `out`. A linear
/// layer's form (`x: [p…, M, K]` row-major against one `[K, N]` weight
/// broadcast over the batch) is one `(p·M) × K` product, on tiles where
/// they fit, its B packing kept in `b_cache`; contiguous operands run
/// batched; any other view (an I8 broadcast that does not fold, which the
/// planner reads in place: `plan::matmul_view_ok`) is copied in order
/// first.
///
/// # Safety
/// Every element the views address must be readable; `out` must be valid
/// for writes of the `p ++ [M, N]` I32 result (4-byte aligned), not
/// overlapping the operands.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) met by `exec::run_matmul`, which checks each view
// against its buffer.
pub unsafe fn matmul_i32_strided(
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
    let wide = crate::kernels::matmul_int::matmul_int_wide;
    match narrow_layout(sa, sb, st_a, st_b) {
        Narrow::Folded { rows, k } => {
            #[cfg(target_arch = "x86_64")]
            if super::amx::available_i8() && super::amx::fits::<super::amx::I8>(rows, k, n) {
                // SAFETY: A is one contiguous `rows × k` matrix, B's first
                // item a contiguous `k × n` one, the output `rows·n` I32s
                // (`Narrow::Folded`, the contract).
                return unsafe { tiled(a, b, out.cast(), (rows, k, n), ctx, b_cache) };
            }
            // SAFETY: as just above, the contract of `matmul_int_wide`.
            unsafe { wide(a, b, out, &[rows, k], &[k, n], ctx) }
        }
        // SAFETY: contiguous operands of shapes `sa`, `sb` (the contract).
        Narrow::Contiguous => unsafe { wide(a, b, out, sa, sb, ctx) },
        Narrow::Other => {
            // SAFETY: every element the strides address is readable (the
            // contract), one byte each.
            let (a2, b2) = unsafe { gathered((a, sa, st_a), (b, sb, st_b), 1)? };
            // SAFETY: the copies are contiguous operands of shapes `sa`,
            // `sb`, the output as this function's contract.
            unsafe { wide(a2.as_ptr().cast(), b2.as_ptr().cast(), out, sa, sb, ctx) }
        }
    }
}

/// Columns of a packed panel (two C tiles).
#[cfg(target_arch = "x86_64")]
const NR: usize = 32;
/// k-steps of a K-block of the packing: 256 slots of four.
#[cfg(target_arch = "x86_64")]
const KC: usize = 1024;

/// The `m × k × n` product on AMX tiles, B packed (or its kept packing
/// taken from `b_cache`).
///
/// # Safety
/// [`super::amx::available_i8`] and `fits`; `a` readable for `m·k`
/// bytes, `b` for `k·n`, `out` writable for `m·n` I32s (aligned), not
/// overlapping them.
#[cfg(target_arch = "x86_64")]
// SAFETY: (contract) met by `matmul_i32_strided`, its only caller.
unsafe fn tiled(
    a: *const u8,
    b: *const u8,
    out: *mut i32,
    (m, k, n): (usize, usize, usize),
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<(), Error> {
    let par = ctx.threads != 1 && super::splits(ctx, m, n, k);
    // SAFETY: B's `k·n` bytes (the contract).
    let pb = unsafe { quads(b, (k, n), par, b_cache)? };
    // SAFETY: the contract; `pb` packs this B in quads.
    unsafe { super::amx::matmul::<super::amx::I8>(a, &pb, out, (m, k, n), par) }
}

/// B (`k × n` row-major bytes) packed in quads ([`pack_quads`]): the
/// packing `b_cache` keeps for it, or one made now (kept when the cache
/// asks for it).
///
/// # Safety
/// `b` must be readable for `k·n` bytes.
#[cfg(target_arch = "x86_64")]
// SAFETY: (contract) met by `tiled` and `dq::tiled`, its callers.
pub(super) unsafe fn quads(
    b: *const u8,
    (k, n): (usize, usize),
    par: bool,
    b_cache: Option<&dyn PackCache>,
) -> Result<std::sync::Arc<PackedB>, Error> {
    let key = ViewKey {
        ptr: b.addr(),
        rs: n,
        cs: 1,
        k,
        n,
    };
    // SAFETY: B's `k·n` bytes (the contract). A `Copy` closure: used
    // here or given to the cache.
    let pack = || unsafe { pack_quads(b, (k, n), par) };
    let kept = match b_cache {
        Some(cache) => super::kept_packing(cache, key, |p| p.quads, pack)?,
        None => None,
    };
    match kept {
        Some(p) => Ok(p),
        None => Ok(std::sync::Arc::new(pack()?)),
    }
}

/// B (`k × n` row-major bytes) in quads, as a `kp × n` operand whose rows
/// past `k` are zero (`kp`: k in whole tile rows, [`super::amx::packed_k`],
/// so that a k that is not a multiple of 64 runs on tiles too, its padding
/// adding nothing): per K-block of [`KC`] k-steps, panels of [`NR`]
/// columns, slot row `s` holding for each column `j` the bytes `b[pc + 4s
/// + i][j]`, `i < 4` (zero past `k` and `n`), one 4-byte word:
/// [`PackedB::block`]'s addressing with four k-steps per slot.
///
/// # Safety
/// `b` must be readable for `k·n` bytes.
#[cfg(target_arch = "x86_64")]
// SAFETY: (contract) met by `tiled`, its only caller.
unsafe fn pack_quads(b: *const u8, (k, n): (usize, usize), par: bool) -> Result<PackedB, Error> {
    let npanels = n.div_ceil(NR);
    let too_big = || Error::Unsupported(format!("packing a {k} × {n} operand"));
    let kp = super::amx::packed_k::<super::amx::I8>(k).ok_or_else(too_big)?;
    let total = npanels
        .checked_mul(NR)
        .and_then(|w| w.checked_mul(kp / 4))
        .ok_or_else(too_big)?;
    let mut data = tc_runtime::alloc::zeroed::<f32>(total.checked_add(15).ok_or_else(too_big)?)?;
    let off = super::line_off(&data);
    // SAFETY: `k·n` readable bytes (the contract).
    let src = unsafe { std::slice::from_raw_parts(b, k * n) };
    let slab = &mut data[off..off + total];
    for pc in (0..kp).step_by(KC) {
        let kcb = KC.min(kp - pc);
        let slots = kcb / 4;
        let block = &mut slab[(pc / 4) * npanels * NR..(pc / 4 + slots) * npanels * NR];
        let panel = |(q, d): (usize, &mut [f32])| {
            let (col0, cols) = (q * NR, NR.min(n - q * NR));
            for s in 0..slots {
                for j in 0..cols {
                    let mut quad = [0u8; 4];
                    for (i, byte) in quad.iter_mut().enumerate() {
                        let l = pc + 4 * s + i;
                        if l < k {
                            *byte = src[l * n + col0 + j];
                        }
                    }
                    d[s * NR + j] = f32::from_bits(u32::from_le_bytes(quad));
                }
            }
        };
        if par {
            block.par_chunks_mut(slots * NR).enumerate().for_each(panel);
        } else {
            block.chunks_mut(slots * NR).enumerate().for_each(panel);
        }
    }
    Ok(PackedB {
        k: kp,
        n,
        kc: KC,
        nr: NR,
        data,
        off,
        pairs: None,
        quads: true,
    })
}
