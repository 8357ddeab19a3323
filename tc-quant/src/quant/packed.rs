//! Weights packed once into the VNNI tiles' layout, so that fast-numerics
//! products stream them instead of transposing 16 rows per block per
//! call (Section 2 §18: the packing is a storage layout, not a change of
//! values; results are bit-identical to the raw layout's).
//!
//! `vnni.rs` transposes each block of 16 weight rows in registers: 16
//! loads, 12 inserts, 8 unpacks and a gather for the scales, to feed 8
//! `vpdpbusd`. A decoder reads each weight once per token, so that work
//! is per byte streamed, and it kept the one-row products well under the
//! memory bandwidth. Packed, the same transposed vectors are read as they
//! lie: per tile of 16 rows and per block, the quant vectors (`Q8_0`: 8,
//! offset to u8; `Q4_0`/`Q4_1`: 4 of packed nibbles, split at use), then
//! the 16 rows' f16 `d` and, for `Q4_1`, the 16 f16 `m`. That is exactly
//! the bytes of the 16 raw blocks, rearranged, so the packed copy is the
//! size of the raw weight (plus the padding of a last partial tile).

use super::{check_shapes, Format, QuantError};

/// Bytes of one packed block of one tile: its quant vectors, the 16
/// `d`, and (Q4_1) the 16 `m`.
pub(crate) fn block_bytes(f: Format) -> usize {
    match f {
        Format::Q8_0 => 8 * 64 + 32,
        Format::Q4_0 => 4 * 64 + 32,
        #[cfg(target_arch = "x86_64")]
        Format::Q4_K => super::vnni_k::BLOCK,
        #[cfg(target_arch = "x86_64")]
        Format::Q6_K => super::vnni_k::BLOCK6,
        _ => 4 * 64 + 64,
    }
}

/// One 64-byte line; a `Vec` of them is 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub [u8; 64]);

/// A weight matrix `W : [n_out, k]` of any format this crate decodes, packed
/// for [`qmatmul_packed`](super::qmatmul_packed): tiles of 16 rows, each
/// `k / 32` packed blocks, each tile starting on a 64-byte line.
pub struct PackedWeights {
    pub(crate) f: Format,
    pub(crate) n_out: usize,
    pub(crate) k: usize,
    /// Bytes from one tile's start to the next's (a multiple of 64).
    pub(crate) tile_bytes: usize,
    pub(crate) lines: Vec<Line>,
}

impl std::fmt::Debug for PackedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeights")
            .field("format", &self.f)
            .field("n_out", &self.n_out)
            .field("k", &self.k)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PackedWeights {
    /// Packs `w` (`n_out` rows of `k / 32` blocks of `f`, as GGUF stores
    /// them). `Ok(None)` on a host without AVX-512 VNNI, where no packed
    /// kernel exists; the caller then uses `qmatmul` on `w`.
    pub fn new(f: Format, w: &[u8], n_out: usize, k: usize) -> Result<Option<Self>, QuantError> {
        let supported = matches!(
            f,
            Format::Q8_0 | Format::Q4_0 | Format::Q4_1 | Format::Q4_K | Format::Q6_K
        );
        #[cfg(target_arch = "x86_64")]
        let supported = supported && super::x86::has_vnni();
        #[cfg(not(target_arch = "x86_64"))]
        let supported = false;
        if !supported {
            return Ok(None);
        }
        let row_bytes = check_shapes(f, &[], 0, k, w, n_out, &[])?;
        if k == 0 {
            // No blocks to pack (a tile of no bytes); the raw kernels
            // give such a product its zeros.
            return Ok(None);
        }
        let nb = k / f.block_elems();
        let over = QuantError::Overflow {
            what: "packed weight",
        };
        let tile_bytes = nb
            .checked_mul(block_bytes(f))
            .and_then(|b| b.checked_next_multiple_of(64))
            .ok_or(over.clone())?;
        let tiles = n_out.div_ceil(16);
        let total = tiles.checked_mul(tile_bytes).ok_or(over)?;
        let mut lines = Vec::with_capacity(total / 64);
        advise_huge_pages(&lines);
        lines.resize(total / 64, Line([0; 64]));
        for (t, tile) in lines.chunks_exact_mut(tile_bytes / 64).enumerate() {
            let n = (n_out - 16 * t).min(16);
            let rows = &w[16 * t * row_bytes..(16 * t + n) * row_bytes];
            pack_tile(f, rows, row_bytes, nb, as_bytes_mut(tile));
        }
        Ok(Some(PackedWeights {
            f,
            n_out,
            k,
            tile_bytes,
            lines,
        }))
    }

    /// The format the weight was packed from.
    pub fn format(&self) -> Format {
        self.f
    }

    /// Output features (rows of `W`).
    pub fn n_out(&self) -> usize {
        self.n_out
    }

    /// The reduction length (columns of `W`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.lines.len() * 64
    }

    /// Tile `t`'s bytes (`tile_bytes` of them: `k / block` packed blocks,
    /// then padding to a 64-byte line).
    pub(crate) fn tile(&self, t: usize) -> &[u8] {
        let per = self.tile_bytes / 64;
        as_bytes(&self.lines[t * per..(t + 1) * per])
    }
}

/// Asks for transparent huge pages over a fresh allocation, before its
/// pages are first touched: a decoder streams every packed weight once
/// per token, and with 4 KiB pages the hardware prefetchers stop at
/// every page boundary and the TLB misses on each. Only a hint: where
/// THP is off, or on other systems, nothing changes.
fn advise_huge_pages(lines: &Vec<Line>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (start, len) = (lines.as_ptr() as usize, lines.capacity() * 64);
        let (lo, hi) = (start.next_multiple_of(HUGE), (start + len) / HUGE * HUGE);
        if hi > lo {
            // SAFETY: `[lo, hi)` lies inside the vector's own allocation
            // (its capacity), which nothing else uses; MADV_HUGEPAGE only
            // changes how the kernel backs those pages, never their
            // contents or validity.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = lines;
}

fn as_bytes(lines: &[Line]) -> &[u8] {
    // SAFETY: `Line` is 64 plain bytes with no padding (repr(C), size
    // 64), so a slice of them is `64 · len` initialized bytes.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast(), lines.len() * 64) }
}

fn as_bytes_mut(lines: &mut [Line]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast(), lines.len() * 64) }
}

/// One tile: `rows` holds `n ≤ 16` raw rows. Rows past `n` stay zero
/// (`d = 0`), and their outputs are never stored.
fn pack_tile(f: Format, rows: &[u8], row_bytes: usize, nb: usize, out: &mut [u8]) {
    let (bb, pb) = (f.block_bytes(), block_bytes(f));
    #[cfg(target_arch = "x86_64")]
    if matches!(f, Format::Q4_K | Format::Q6_K) {
        for (s, dst) in out.chunks_exact_mut(pb).take(nb).enumerate() {
            match f {
                Format::Q4_K => super::vnni_k::pack_block(rows, row_bytes, s, dst),
                _ => super::vnni_k::pack_block6(rows, row_bytes, s, dst),
            }
        }
        return;
    }
    let (at, groups) = match f {
        Format::Q8_0 => (2, 8),
        Format::Q4_0 => (2, 4),
        _ => (4, 4),
    };
    for (i, row) in rows.chunks_exact(row_bytes).enumerate() {
        for b in 0..nb {
            let blk = &row[b * bb..(b + 1) * bb];
            let dst = &mut out[b * pb..(b + 1) * pb];
            // Lane `i` of vector `g`: the 4 quant bytes `4g..4g + 4`.
            for g in 0..groups {
                let src = &blk[at + 4 * g..at + 4 * g + 4];
                let lane = &mut dst[64 * g + 4 * i..64 * g + 4 * i + 4];
                lane.copy_from_slice(src);
                if f == Format::Q8_0 {
                    // i8 → u8 for `vpdpbusd`, as `vnni::pack` does.
                    lane.iter_mut().for_each(|q| *q ^= 0x80);
                }
            }
            let s = 64 * groups;
            dst[s + 2 * i..s + 2 * i + 2].copy_from_slice(&blk[0..2]);
            if f == Format::Q4_1 {
                dst[s + 32 + 2 * i..s + 32 + 2 * i + 2].copy_from_slice(&blk[2..4]);
            }
        }
    }
}
