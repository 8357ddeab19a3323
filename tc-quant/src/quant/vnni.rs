//! Fast-numerics kernels on AVX-512 VNNI for the 32-element block formats
//! (`Q8_0`, `Q4_0`, `Q4_1`), register-tiled over 16 weight rows.
//!
//! The weight blocks of 16 consecutive rows are transposed on load
//! (16-byte loads and in-register shuffles): lane `i` of group vector `g` holds the 4
//! quants `4g..4g + 4` of row `i`'s block, as u8. The matching 4
//! activation bytes are the same for all 16 lanes, so `vpdpbusd` against
//! their broadcast yields row `i`'s block dot in lane `i` after 8 steps:
//! no horizontal reduction, and every f32 operation after it works on 16
//! outputs at once. Each lane then performs exactly the scalar reference's
//! operations (`kernels::fast_dot`): the running sum, in block order,
//! `fma(d_w · d_x, isum, acc)`, then for Q4_1 `fma(m_w, s, acc)`, so the
//! results are bit-identical to it.
//!
//! Signed Q8_0 weights are offset to `w + 128` (u8 for `vpdpbusd`) and
//! the dot started at `−128 · Σx`; Q4_0's `−8` is the start `−8 · Σx`.
//! Both are exact integer identities.
//!
//! For one activation row (decode) the transposed block feeds the dots
//! straight from the registers; for several (prefill) a tile is
//! transposed once into a per-thread buffer and streamed from L1/L2 for
//! every activation row, four rows at a time so that each weight vector
//! load serves four dots.

use super::act::Acts;
use super::amx;
use super::kernels::{Job, Out};
use super::packed;
use super::Format;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Weight rows per tile: the 16 i32 lanes of a 512-bit vector.
pub(crate) const TILE: usize = 16;

/// The formats and their const-generic tags.
pub(crate) const Q8: u8 = 0;
pub(crate) const Q40: u8 = 1;
pub(crate) const Q41: u8 = 2;

/// Vectors per transposed block: 8 quant groups, `d_w`, and Q4_1's `m_w`.
pub(crate) const PACK: usize = 10;

thread_local! {
    /// Transposed tiles for the multi-row kernel, and the AMX path's C
    /// tiles' scratch, reused across calls.
    static PACKED: RefCell<(Vec<__m512i>, amx::CScratch)> =
        const { RefCell::new((Vec::new(), amx::CScratch::new())) };
}

/// Whether [`columns`] handles this job: VNNI present, a 32-block format,
/// and every gather offset (`15 · row_bytes + block_bytes`) an i32.
pub(crate) fn supports(f: Format, row_bytes: usize) -> bool {
    matches!(f, Format::Q8_0 | Format::Q4_0 | Format::Q4_1)
        && super::x86::has_vnni()
        && TILE
            .checked_mul(row_bytes)
            .is_some_and(|b| i32::try_from(b).is_ok())
}

/// Fills `out` (column `c` for weight row `j0 + c`) with the job's
/// fast-mode outputs, `acts` being its quantized activations. Call only
/// where [`supports`] said yes.
pub(crate) fn columns(job: &Job<'_>, acts: &Acts, j0: usize, out: &mut Out<'_>) {
    let (f, rows, k, w, row_bytes) = (job.f, job.rows, job.k, job.w, job.row_bytes);
    let cols = out.cols();
    let nb = k / 32;
    // These checks make every pointer the kernels form point inside its
    // buffer; they hold for any job `qmatmul` builds (an internal bug
    // otherwise), and asserting here keeps the code below sound.
    assert!(supports(f, row_bytes) && acts.block == 32);
    assert!(row_bytes == nb * f.block_bytes());
    match job.packed {
        // Whole tiles from `j0` on (`run_columns` splits at multiples of
        // 16), and packed from this very shape.
        Some(p) => assert!(j0.is_multiple_of(TILE) && j0 + cols <= p.n_out && p.k == k && p.f == f),
        None => assert!((j0 + cols) * row_bytes <= w.len()),
    }
    assert!(acts.qx.len() >= rows * k && acts.d.len() >= rows * nb);
    assert!(acts.bsum.len() >= rows * nb && acts.s.len() >= rows * nb);
    assert!(out.rows.len() == rows);
    let scales = acts.amx.as_ref().filter(|_| job.amx);
    // The tiles are configured once for all of this task's weight tiles:
    // configured and released per weight tile, `ldtilecfg` and the first
    // product after it took a fifth of a 16-row product's time.
    // SAFETY: `acts.amx` is set only where `amx::available()` said yes,
    // which includes the OS's grant; this task makes no rayon call while
    // the tiles are held (its loop below runs kernels only).
    let tiles = scales.map(|_| unsafe { crate::tiles::Tiles::load(&amx::CONFIG) });
    let amx = scales.zip(tiles.as_ref());
    let mut c = 0;
    while c < cols {
        let n = (cols - c).min(TILE);
        let src = match job.packed {
            Some(p) => Src::Packed(p.tile((j0 + c) / TILE)),
            None => Src::Raw(&w[(j0 + c) * row_bytes..(j0 + c + n) * row_bytes]),
        };
        let t = Tile {
            src,
            n,
            row_bytes,
            nb,
            acts,
            k,
            amx,
        };
        // SAFETY: `supports` checked VNNI (and, through it, AVX-512 and
        // the AVX2/FMA/F16C set) and the i32 offsets; the asserts above
        // give the lengths `Tile`'s contract names.
        unsafe {
            match f {
                Format::Q8_0 => tile::<Q8>(&t, rows, out, c),
                Format::Q4_0 => tile::<Q40>(&t, rows, out, c),
                _ => tile::<Q41>(&t, rows, out, c),
            }
        }
        c += n;
    }
}

/// `n ≤ 16` consecutive weight rows (`w`: exactly `n · row_bytes` bytes,
/// `nb` blocks per row) against the quantized activations.
struct Tile<'a> {
    src: Src<'a>,
    n: usize,
    row_bytes: usize,
    nb: usize,
    acts: &'a Acts,
    k: usize,
    /// The activations' scalars for the AMX groups and the configured
    /// tiles: set only where `amx::available()` said yes and there are 16
    /// rows or more.
    amx: Option<(&'a amx::Scales, &'a crate::tiles::Tiles)>,
}

/// Groups of 16 rows ahead of the one computed whose outputs
/// [`ask_for_rows`] requests.
const AHEAD_GROUPS: usize = 2;

/// Requests for writing the outputs `c0..c0 + n` of the 16 rows from `m`
/// (those that exist). A weight tile writes one line or two in every row
/// of the output, rows a few KiB apart, of an output that has usually
/// left the caches since its buffer's last use: each store then waited
/// for its line (`qbench` with `QBENCH_COLDY=32`, one thread: MiniLM
/// int8's 1,024 × 384 × 1,152 product took 3.9 ms with such an output,
/// 1.9 with a warm one, 2.6 with these requests). A request a few groups
/// ahead overlaps those fetches with the tiles' arithmetic. The AMX
/// groups only: the VNNI rows, slower per row, ran 7 % slower with them.
/// A hint only: no value changes, and a prefetch never faults.
#[inline]
fn ask_for_rows(out: &Out<'_>, m: usize, c0: usize, n: usize) {
    for row in out.rows.iter().skip(m).take(amx::ROWS) {
        let first = row.as_ptr().wrapping_add(c0);
        for p in [first, first.wrapping_add(n.max(1) - 1)] {
            // SAFETY: a prefetch reads nothing architecturally and never
            // faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_ET0>(p.cast()) };
        }
    }
}

/// One tile into columns `c0..c0 + t.n` of `out`.
// SAFETY: (contract) AVX-512 F/BW/VL with VNNI, AVX2, FMA and F16C
// present; `16 · row_bytes` fits an i32; `t.w` holds `t.n` rows of `nb`
// blocks of the format; `acts` holds `rows` rows of `k = 32 · nb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<const F: u8>(t: &Tile<'_>, rows: usize, out: &mut Out<'_>, c0: usize) {
    let mask: __mmask16 = if t.n >= TILE { !0 } else { (1u16 << t.n) - 1 };
    // Lane i reads row i; the cast is exact (`supports` bounded it).
    let idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(t.row_bytes as i32),
    );
    let bb = t.row_bytes / t.nb.max(1);
    // Rows past the tile's `n` re-read row `n − 1`: in bounds, never stored.
    let off: [usize; TILE] = std::array::from_fn(|i| i.min(t.n - 1) * t.row_bytes);
    let put = |out: &mut Out<'_>, m: usize, y: __m512| {
        let dst = &mut out.rows[m][c0..c0 + t.n];
        // SAFETY: the mask writes lanes `< t.n` only, the `t.n` f32 of
        // `dst` (which indexing just checked).
        unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), mask, y) };
    };
    if rows == 1 {
        // While block `b` is computed, its share of the next tile
        // (`16 · bb` bytes) is requested.
        let next = t.src.next_tile(t.nb);
        let mut acc = _mm512_setzero_ps();
        for b in 0..t.nb {
            next.ask(b);
            // SAFETY: the contract of `block`: `b < nb`, and `off`/`idx`
            // under `mask` address rows `< n` of a raw source.
            let p = unsafe { block::<F>(t.src, b, bb, idx, mask, &off) };
            acc = step::<F>(&p, t.acts, t.k, 0, b, acc);
        }
        put(out, 0, acc);
        return;
    }
    PACKED.with_borrow_mut(|(buf, scratch)| {
        // `nb · PACK` vectors: at most `k / 32 · 10 · 64` bytes, every one
        // written below (zeroed again per tile, they took 8 % of a 16-row
        // product in `memset`).
        if buf.len() != t.nb * PACK {
            buf.clear();
            buf.resize(t.nb * PACK, _mm512_setzero_si512());
        }
        for (b, slot) in buf.chunks_exact_mut(PACK).enumerate() {
            // SAFETY: as in the single-row case.
            let p = unsafe { block::<F>(t.src, b, bb, idx, mask, &off) };
            slot[..8].copy_from_slice(&p.q);
            slot[8] = _mm512_castps_si512(p.d);
            slot[9] = _mm512_castps_si512(p.m);
        }
        let mut m = 0;
        if let Some((sc, tiles)) = t.amx.filter(|(sc, _)| sc.groups > 0) {
            // The tiles take the quants signed.
            let offset = amx::unsigned_offset::<F>();
            if offset != 0 {
                amx::shift_quants(buf, offset.wrapping_neg());
            }
            // The first group requests the next tile's bytes, block by
            // block, as the VNNI rows' first pass does below: without
            // them, a 16-row product of weights that had left the caches
            // (a decoder's batched step reads every weight from memory)
            // fetched each tile only when it copied it, and its time was
            // the fetches' plus the arithmetic's (`qbench` with
            // `QBENCH_COLD=64`, one thread: 576 × 3,072 at 16 rows 268 µs
            // against 155 with the weights in cache, 165 with these
            // requests). Requested all at once, before the arithmetic,
            // the requests stalled on the line fill buffers instead.
            let mut ahead = Some(t.src.next_tile(t.nb));
            // Whole groups, and a last one padded with zero rows
            // (`Acts::with_amx`) whose padding is not stored.
            for g in 0..sc.groups {
                ask_for_rows(out, (g + AHEAD_GROUPS) * amx::ROWS, c0, t.n);
                // SAFETY: this function's features; `tiles` is loaded;
                // the activations hold `sc.groups` whole groups.
                let y = unsafe {
                    amx::rows16::<F>(tiles, buf, t.acts, sc, t.k, g, ahead.take(), scratch)
                };
                for (r, y) in y.into_iter().enumerate().take(rows - m) {
                    put(out, m + r, y);
                }
                m = (m + amx::ROWS).min(rows);
            }
            if offset != 0 && m < rows {
                // Unsigned again for the rows `vpdpbusd` computes.
                amx::shift_quants(buf, offset);
            }
        }
        // The first pass over the transposed tile requests the next
        // tile's bytes, block by block as in the one-row case: spread over
        // that pass's arithmetic, the next tile's copy into `buf` finds
        // them in cache instead of stalling on memory (a hint only: no
        // value changes).
        let mut next = (m == 0).then(|| t.src.next_tile(t.nb));
        while m + 4 <= rows {
            let y = rows_packed::<F, 4>(buf, t.acts, t.k, m, next.take());
            for (r, y) in y.into_iter().enumerate() {
                put(out, m + r, y);
            }
            m += 4;
        }
        while m < rows {
            let [y] = rows_packed::<F, 1>(buf, t.acts, t.k, m, next.take());
            put(out, m, y);
            m += 1;
        }
    });
}

/// Where a tile's weights come from.
#[derive(Clone, Copy)]
enum Src<'a> {
    /// `n` raw rows (GGUF blocks), transposed per block as they are read.
    Raw(&'a [u8]),
    /// One tile of a [`PackedWeights`]: the transposed blocks as stored.
    Packed(&'a [u8]),
}

impl Src<'_> {
    fn bytes(&self) -> &[u8] {
        match *self {
            Src::Raw(b) | Src::Packed(b) => b,
        }
    }

    /// The next tile's bytes, which follow this tile's in memory (raw rows
    /// follow each other; a packed tile is followed by the next one,
    /// `tile_bytes` later), in `nb` shares, one per block.
    fn next_tile(&self, nb: usize) -> NextTile {
        let here = self.bytes();
        NextTile {
            at: here.as_ptr().wrapping_add(here.len()),
            per: here.len() / nb.max(1),
        }
    }
}

/// The next weight tile, requested block by block while this one's block
/// of the same index computes ([`Src::next_tile`]): the weights then stream
/// from memory instead of stalling each tile's first use. A hint only: a
/// prefetch reads nothing architecturally and never faults, and the
/// addresses are formed with `wrapping_add`, never dereferenced.
#[derive(Clone, Copy)]
pub(crate) struct NextTile {
    at: *const u8,
    /// Bytes of each block's share.
    per: usize,
}

impl NextTile {
    /// Requests block `b`'s share.
    #[inline(always)]
    pub(crate) fn ask(self, b: usize) {
        let at = self.at.wrapping_add(b.wrapping_mul(self.per));
        for l in (0..self.per).step_by(64) {
            // SAFETY: SSE is part of x86-64 (this module is x86-64 only),
            // and a prefetch reads nothing architecturally and never
            // faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(l).cast()) };
        }
    }
}

/// Block `b` of the tile, transposed (raw) or read (packed).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
// SAFETY: (contract) the `vnni` features present; `b < nb` of the tile;
// for a raw source, `bb` is the format's block size, the source holds
// whole rows of `nb` blocks, and `off`/`idx` under `mask` address rows
// `< n` of it (as `pack` requires).
unsafe fn block<const F: u8>(
    src: Src<'_>,
    b: usize,
    bb: usize,
    idx: __m512i,
    mask: __mmask16,
    off: &[usize; TILE],
) -> Pack {
    match src {
        // SAFETY: block `b` of row 0 starts inside the rows (`b < nb`);
        // the rest is `pack`'s contract, which the caller's gives.
        Src::Raw(w) => unsafe { pack::<F>(w.as_ptr().add(b * bb), idx, mask, off) },
        Src::Packed(tile) => unpack::<F>(tile, b),
    }
}

/// Block `b` of a packed tile (`packed.rs`'s layout): the quant vectors
/// as stored (Q4: nibbles split as `pack` splits them), the scales
/// widened from f16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn unpack<const F: u8>(tile: &[u8], b: usize) -> Pack {
    let (groups, pb) = match F {
        Q8 => (8, packed::block_bytes(Format::Q8_0)),
        Q40 => (4, packed::block_bytes(Format::Q4_0)),
        _ => (4, packed::block_bytes(Format::Q4_1)),
    };
    // Indexing checks the whole block is inside the tile.
    let blk = &tile[b * pb..(b + 1) * pb];
    let p = blk.as_ptr();
    let z = _mm512_setzero_si512();
    let mut q = [z; 8];
    // SAFETY (every load below): `blk` holds `pb` bytes: `groups` vectors
    // of 64, then 32 bytes of `d` (and for Q4_1 32 of `m`); unaligned
    // loads need no alignment.
    if F == Q8 {
        for (g, q) in q.iter_mut().enumerate() {
            // SAFETY: vector `g < 8` of the block's quants.
            *q = unsafe { _mm512_loadu_si512(p.add(64 * g).cast()) };
        }
    } else {
        let nib = _mm512_set1_epi8(0x0F);
        for g in 0..4 {
            // SAFETY: vector `g < 4` of the block's quants.
            let v = unsafe { _mm512_loadu_si512(p.add(64 * g).cast()) };
            q[g] = _mm512_and_si512(v, nib);
            q[g + 4] = _mm512_and_si512(_mm512_srli_epi32::<4>(v), nib);
        }
    }
    // SAFETY: the 32 bytes of `d` after the quant vectors.
    let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.add(64 * groups).cast()) });
    let m = if F == Q41 {
        // SAFETY: Q4_1's 32 bytes of `m` after `d`.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.add(64 * groups + 32).cast()) })
    } else {
        _mm512_setzero_ps()
    };
    Pack { q, d, m }
}

/// One transposed block: quant groups (u8, Q8_0 offset by 128), `d_w`
/// and (Q4_1) `m_w` per lane.
struct Pack {
    q: [__m512i; 8],
    d: __m512,
    m: __m512,
}

/// Transposes block `b` of 16 rows (`blk`: that block in row 0). Lane
/// `i` reads the row at byte offset `off[i]` from row 0: its own row for
/// the tile's `n` rows, row `n − 1` again beyond them (those lanes are
/// never stored). The scales come by one gather, which reads only lanes
/// under `mask` (others are 0); the quants by 16-byte loads, transposed
/// in registers, which costs fewer loads than one gather per group.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
// SAFETY: (contract) the `vnni` features present; `blk + off[i]` starts a
// whole block of the format for every `i`, and `blk + idx_i` too for every
// lane `i` in `mask`.
unsafe fn pack<const F: u8>(
    blk: *const u8,
    idx: __m512i,
    mask: __mmask16,
    off: &[usize; TILE],
) -> Pack {
    let z = _mm512_setzero_si512();
    // SAFETY: each lane reads the 4 bytes at offset 0 of its row's block.
    let first = unsafe { _mm512_mask_i32gather_epi32::<1>(z, mask, idx, blk.cast()) };
    // d_w: the low f16 of the block's first dword (Q4_1: m_w the high one).
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(first));
    let m = if F == Q41 {
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(first)))
    } else {
        _mm512_setzero_ps()
    };
    let mut q = [z; 8];
    if F == Q8 {
        let bias = _mm512_set1_epi8(-128);
        // SAFETY: bytes 2..18 and 18..34 of a 34-byte block.
        let (lo, hi) = unsafe { (transpose16x4(blk, off, 2), transpose16x4(blk, off, 18)) };
        for g in 0..4 {
            q[g] = _mm512_xor_si512(lo[g], bias);
            q[g + 4] = _mm512_xor_si512(hi[g], bias);
        }
    } else {
        let at = if F == Q40 { 2 } else { 4 };
        let nib = _mm512_set1_epi8(0x0F);
        // SAFETY: bytes 2..18 of an 18-byte block, 4..20 of a 20-byte one.
        let v = unsafe { transpose16x4(blk, off, at) };
        for g in 0..4 {
            q[g] = _mm512_and_si512(v[g], nib);
            q[g + 4] = _mm512_and_si512(_mm512_srli_epi32::<4>(v[g]), nib);
        }
    }
    Pack { q, d, m }
}

/// The 16 bytes at `blk + off[i] + at` of 16 rows as 4 vectors: lane `i`
/// of vector `g` is dword `g` of row `i`'s bytes. Rows `4k + j` go to
/// 128-bit lane `k` of vector `j`; a 4 × 4 dword transpose within each
/// 128-bit lane then puts row `4k + j` at lane `4k + j`.
// SAFETY: (contract) AVX-512 F present; `blk + off[i] + at .. + 16` is
// readable for every `i`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn transpose16x4(blk: *const u8, off: &[usize; TILE], at: usize) -> [__m512i; 4] {
    // A macro, not a closure: closures were left out of line, one call
    // per load.
    macro_rules! ld {
        // SAFETY: the contract's 16 readable bytes of row `i`.
        ($i:expr) => {
            unsafe { _mm_loadu_si128(blk.add(off[$i] + at).cast()) }
        };
    }
    let mut z = [_mm512_setzero_si512(); 4];
    for (j, z) in z.iter_mut().enumerate() {
        let v = _mm512_castsi128_si512(ld!(j));
        let v = _mm512_inserti32x4::<1>(v, ld!(4 + j));
        let v = _mm512_inserti32x4::<2>(v, ld!(8 + j));
        *z = _mm512_inserti32x4::<3>(v, ld!(12 + j));
    }
    let t0 = _mm512_unpacklo_epi32(z[0], z[1]);
    let t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    let t2 = _mm512_unpacklo_epi32(z[2], z[3]);
    let t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    [
        _mm512_unpacklo_epi64(t0, t2),
        _mm512_unpackhi_epi64(t0, t2),
        _mm512_unpacklo_epi64(t1, t3),
        _mm512_unpackhi_epi64(t1, t3),
    ]
}

/// Block `b` of activation row `m` added into `acc`, per lane: the scalar
/// reference's `fma(d_w · d_x, isum, acc)` (`kernels::scaled`), then for
/// `Q4_1` `fma(m_w, s, acc)`.
/// Row `m` and block `b` must exist in `a` (`k` per row, 32-element
/// blocks); indexing checks it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn step<const F: u8>(p: &Pack, a: &Acts, k: usize, m: usize, b: usize, acc: __m512) -> __m512 {
    let i = m * (k / 32) + b;
    let at = m * k + b * 32;
    // The 8 groups of 4 activation bytes, each broadcast by its product
    // straight from memory ([`dot4`]).
    let xs = &a.qx[at..at + 32];
    let start = match F {
        Q8 => -128 * a.bsum[i],
        Q40 => -8 * a.bsum[i],
        _ => 0,
    };
    // Two chains of four halve the dependent-latency path; integer sums
    // are exact in any order.
    let mut s0 = _mm512_set1_epi32(start);
    let mut s1 = _mm512_setzero_si512();
    for g in 0..4 {
        s0 = dot4(s0, p.q[g], xs, 4 * g);
        s1 = dot4(s1, p.q[g + 4], xs, 4 * g + 16);
    }
    let isum = _mm512_add_epi32(s0, s1);
    let scale = _mm512_mul_ps(p.d, _mm512_set1_ps(a.d[i]));
    let acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc);
    if F == Q41 {
        return _mm512_fmadd_ps(p.m, _mm512_set1_ps(a.s[i]), acc);
    }
    acc
}

/// `s + vpdpbusd(w, broadcast(xs[at..at + 4]))`, the activation bytes
/// read by the instruction's own 32-bit broadcast (`{1to16}`). Through
/// the intrinsic and `_mm512_set1_epi32`, LLVM loaded them into a general
/// register and broadcast that for the Q4 formats (`vpbroadcastd zmm,
/// r32`, a vector-pipe uop per product beside `vpdpbusd`'s own) and
/// spilled accumulators to the stack. `qbench Packed Fast` on AMD Zen 4,
/// one thread, Q4_1, alternated three times: 1 row 15.1–16.2 → 11.4–12.1
/// µs, 16 rows 158–168 → 103–113, 128 rows 1176–1311 → 745–819 (576 ×
/// 1536 and 1536 × 576); Q8_0, which LLVM already broadcast from memory,
/// within 3% either way.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn dot4(mut s: __m512i, w: __m512i, xs: &[i8], at: usize) -> __m512i {
    let four = &xs[at..at + 4];
    // SAFETY: the instruction reads the 4 bytes at `four` (in bounds: the
    // slice was indexed above), writes only `s`, and needs AVX-512 VNNI,
    // which this function's features require of its callers.
    unsafe {
        std::arch::asm!(
            "vpdpbusd {s}, {w}, dword ptr [{p}]{{1to16}}",
            s = inout(zmm_reg) s,
            w = in(zmm_reg) w,
            p = in(reg) four.as_ptr(),
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    s
}

/// Activation rows `m..m + R` against a transposed tile in `buf` (`k / 32`
/// packs of `PACK` vectors); the rows must exist in `a`. With `next`,
/// block `b`'s share of the next tile is requested while block `b` is
/// computed.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn rows_packed<const F: u8, const R: usize>(
    buf: &[__m512i],
    a: &Acts,
    k: usize,
    m: usize,
    next: Option<NextTile>,
) -> [__m512; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    for (b, slot) in buf.chunks_exact(PACK).enumerate() {
        if let Some(next) = next {
            next.ask(b);
        }
        let p = Pack {
            q: [
                slot[0], slot[1], slot[2], slot[3], slot[4], slot[5], slot[6], slot[7],
            ],
            d: _mm512_castsi512_ps(slot[8]),
            m: _mm512_castsi512_ps(slot[9]),
        };
        for (r, acc) in acc.iter_mut().enumerate() {
            *acc = step::<F>(&p, a, k, m + r, b, *acc);
        }
    }
    acc
}
