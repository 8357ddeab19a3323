//! Per-task work and the scalar reference kernels. The SIMD kernels in
//! `x86` reproduce these operation by operation (see the module docs of
//! `quant` for the orders), so their results are bit-identical.

use super::act::Acts;
use super::dequant::{dequant_block, f16_at, q6_k_value, scale_min_k4};
use super::{Format, Path};
use std::cell::RefCell;

/// One `qmatmul` call's validated arguments.
pub(crate) struct Job<'a> {
    pub path: Path,
    pub f: Format,
    pub x: &'a [f32],
    pub acts: Option<&'a Acts>,
    pub rows: usize,
    pub k: usize,
    pub w: &'a [u8],
    pub row_bytes: usize,
    /// The weight packed once (`qmatmul_packed`); `w` is then empty and
    /// only the VNNI tiles run.
    pub packed: Option<&'a super::PackedWeights>,
    /// Fast-mode groups of 16 rows on AMX tiles ([`Path::Amx`]); `path`
    /// is then [`Path::Avx512`], which runs everything else.
    pub amx: bool,
}

/// One task's share of `y`: columns `j0..j0 + cols` of every activation
/// row, each row its own slice of the row-major output, so kernels write
/// `y` in place (no column-major scratch, no transpose).
pub(crate) struct Out<'a> {
    /// `rows[m]`: row `m`'s `cols` outputs.
    pub rows: Vec<&'a mut [f32]>,
}

impl Out<'_> {
    /// Columns in this share (every row has the same number).
    pub fn cols(&self) -> usize {
        self.rows.first().map_or(0, |r| r.len())
    }
}

thread_local! {
    /// One dequantized weight row per worker, reused across calls so the
    /// exact path allocates only when K grows.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl Job<'_> {
    /// Weight row `j`.
    pub fn wrow(&self, j: usize) -> &[u8] {
        &self.w[j * self.row_bytes..(j + 1) * self.row_bytes]
    }

    /// Fills `out` with the outputs of columns `j0..`.
    pub fn columns(&self, j0: usize, out: &mut Out<'_>) {
        match self.acts {
            Some(acts) => self.fast_columns(acts, j0, out),
            None => self.exact_columns(j0, out),
        }
    }

    fn exact_columns(&self, j0: usize, out: &mut Out<'_>) {
        ROW.with_borrow_mut(|row| {
            row.resize(self.k, 0.0);
            let (be, bb) = (self.f.block_elems(), self.f.block_bytes());
            let fused = self.fused_columns(j0, out);
            for c in fused..out.cols() {
                self.dequant_row(self.wrow(j0 + c), row, be, bb);
                for m in 0..self.rows {
                    out.rows[m][c] = self.dot(&self.x[m * self.k..(m + 1) * self.k], row);
                }
            }
        });
    }

    /// The columns `j0..` against every activation row on the fused
    /// kernels, in tiles of 4 rows × 4 columns (a decoder's single row: 1 ×
    /// 4); how many whole columns of `out` it filled: 0 where the path
    /// has no fused kernel for the format.
    fn fused_columns(&self, j0: usize, out: &mut Out<'_>) -> usize {
        let cols = out.cols();
        let mut c = 0;
        while c < cols {
            let n = if c + 4 <= cols { 4 } else { 1 };
            if !self.fused_block(j0 + c, n, out, c) {
                return c;
            }
            c += n;
        }
        c
    }

    /// Columns `c0..c0 + n` (n = 4 or 1) of every row into `out`.
    fn fused_block(&self, j: usize, n: usize, out: &mut Out<'_>, c0: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use super::x86::fused_tile;
            let (rows, k) = (self.rows, self.k);
            let xr = |m: usize| &self.x[m * k..(m + 1) * k];
            let mut put = |m: usize, i: usize, y: f32| out.rows[m][c0 + i] = y;
            let mut m = 0;
            while m < rows {
                let r4 = m + 4 <= rows;
                let ok = match (n, r4) {
                    (4, true) => {
                        let w = [0, 1, 2, 3].map(|i| self.wrow(j + i));
                        fused_tile(self.path, self.f, [0, 1, 2, 3].map(|r| xr(m + r)), w).map(|y| {
                            (0..4).for_each(|r| (0..4).for_each(|i| put(m + r, i, y[r][i])))
                        })
                    }
                    (4, false) => {
                        let w = [0, 1, 2, 3].map(|i| self.wrow(j + i));
                        fused_tile(self.path, self.f, [xr(m)], w)
                            .map(|y| (0..4).for_each(|i| put(m, i, y[0][i])))
                    }
                    _ => fused_tile(self.path, self.f, [xr(m)], [self.wrow(j)])
                        .map(|y| put(m, 0, y[0][0])),
                };
                if ok.is_none() {
                    return false;
                }
                m += if n == 4 && r4 { 4 } else { 1 };
            }
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (j, n, out, c0);
            false
        }
    }

    /// One weight row dequantized into `row` (the SIMD kernels where the
    /// path has one for the format, bit-identical to the scalar ones).
    fn dequant_row(&self, w: &[u8], row: &mut [f32], be: usize, bb: usize) {
        #[cfg(target_arch = "x86_64")]
        if self.path != Path::Scalar && super::x86::dequant_row(self.path, self.f, w, row) {
            return;
        }
        for (blk, o) in w.chunks_exact(bb).zip(row.chunks_exact_mut(be)) {
            dequant_block(self.f, blk, o);
        }
    }

    fn dot(&self, x: &[f32], w: &[f32]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if self.path != Path::Scalar {
            return super::x86::dot16(self.path, x, w);
        }
        dot16(x, w)
    }

    fn fast_columns(&self, acts: &Acts, j0: usize, out: &mut Out<'_>) {
        #[cfg(target_arch = "x86_64")]
        if self.packed.is_some() && matches!(self.f, Format::Q4_K | Format::Q6_K) {
            super::vnni_k::columns(self, acts, j0, out);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.path == Path::Avx512 && super::vnni::supports(self.f, self.row_bytes) {
            super::vnni::columns(self, acts, j0, out);
            return;
        }
        let rows = self.rows;
        let n = out.cols();
        let mut c = 0;
        while c + 4 <= n {
            let w = [0, 1, 2, 3].map(|i| self.wrow(j0 + c + i));
            for m in 0..rows {
                let y = self.fast_tile4(acts, m, w);
                for (i, v) in y.into_iter().enumerate() {
                    out.rows[m][c + i] = v;
                }
            }
            c += 4;
        }
        for c in c..n {
            for m in 0..rows {
                out.rows[m][c] = fast_dot(self.f, acts, self.k, m, self.wrow(j0 + c));
            }
        }
    }

    fn fast_tile4(&self, acts: &Acts, m: usize, w: [&[u8]; 4]) -> [f32; 4] {
        #[cfg(target_arch = "x86_64")]
        if let Some(y) = super::x86::fast_tile4(self.path, self.f, acts, self.k, m, w) {
            return y;
        }
        w.map(|w| fast_dot(self.f, acts, self.k, m, w))
    }
}

/// The exact-mode dot: lane `k mod 16`, FMA in increasing `k`, then the
/// 16 lanes folded by halves.
pub(crate) fn dot16(x: &[f32], w: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (xc, wc) in x.chunks_exact(16).zip(w.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = xc[l].mul_add(wc[l], acc[l]);
        }
    }
    fold16(acc)
}

/// Folds 16 lanes by halves: `l + l+8`, `l + l+4`, `l + l+2`, `l + l+1`.
pub(crate) fn fold16(mut acc: [f32; 16]) -> f32 {
    for h in [8, 4, 2, 1] {
        for l in 0..h {
            acc[l] += acc[l + h];
        }
    }
    acc[0]
}

/// The fast-mode dot of activation row `m` with one weight row: per-block
/// terms (exact integer dots, scaled in f32) summed in block order.
pub(crate) fn fast_dot(f: Format, a: &Acts, k: usize, m: usize, w: &[u8]) -> f32 {
    let qx = &a.qx[m * k..(m + 1) * k];
    let nb = k / a.block;
    let (d, s, bsum) = (&a.d[m * nb..], &a.s[m * k / 32..], &a.bsum[m * k / 32..]);
    let bb = f.block_bytes();
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(bb).enumerate() {
        let x = &qx[b * a.block..(b + 1) * a.block];
        acc = match f {
            Format::Q8_0 => scaled(f16_at(blk, 0), d[b], idot_q8(&blk[2..], x), acc),
            Format::Q4_0 => scaled(
                f16_at(blk, 0),
                d[b],
                idot_q4(&blk[2..], x) - 8 * bsum[b],
                acc,
            ),
            Format::Q4_1 => f16_at(blk, 2).mul_add(
                s[b],
                scaled(f16_at(blk, 0), d[b], idot_q4(&blk[4..], x), acc),
            ),
            Format::Q4_K => acc + term_q4_k(blk, d[b], &bsum[8 * b..8 * b + 8], x),
            Format::Q6_K => acc + term_q6_k(blk, d[b], x),
        };
    }
    acc
}

/// `acc + (d_w · d_x) · isum` with one rounding for the product and the
/// sum (a fused multiply-add), the shared step of the 32-element formats:
/// every path takes it in this order (`Q4_1` then adds `m_w · s` fused
/// too), so all agree bit for bit.
pub(crate) fn scaled(dw: f32, dx: f32, isum: i32, acc: f32) -> f32 {
    (dw * dx).mul_add(isum as f32, acc)
}

fn idot_q8(w: &[u8], x: &[i8]) -> i32 {
    w[..32]
        .iter()
        .zip(x)
        .map(|(&w, &x)| w as i8 as i32 * x as i32)
        .sum()
}

/// Σ q·x over the 32 nibbles (low nibbles are elements 0..16).
fn idot_q4(qs: &[u8], x: &[i8]) -> i32 {
    let lo = qs[..16]
        .iter()
        .zip(&x[..16])
        .map(|(&q, &x)| (q & 0x0F) as i32 * x as i32);
    let hi = qs[..16]
        .iter()
        .zip(&x[16..32])
        .map(|(&q, &x)| (q >> 4) as i32 * x as i32);
    lo.sum::<i32>() + hi.sum::<i32>()
}

/// `d·dx·Σ_j sc_j·(q·x)_j − dmin·dx·Σ_j m_j·bsum_j` over the 8 sub-blocks.
fn term_q4_k(blk: &[u8], dx: f32, bsum: &[i32], x: &[i8]) -> f32 {
    let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
    let (scales, qs) = (&blk[4..16], &blk[16..144]);
    let (mut sumi, mut summ) = (0i32, 0i32);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        let q = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
        let xs = &x[j * 32..j * 32 + 32];
        let nib = |q: u8| if j % 2 == 0 { q & 0x0F } else { q >> 4 };
        let dot: i32 = q
            .iter()
            .zip(xs)
            .map(|(&q, &x)| nib(q) as i32 * x as i32)
            .sum();
        sumi += sc as i32 * dot;
        summ += m as i32 * bsum[j];
    }
    d * dx * sumi as f32 - dmin * dx * summ as f32
}

/// `d·dx·Σ_g sc_g·Σ_{k∈g} q_k·x_k` over the 16 sub-blocks of 16.
fn term_q6_k(blk: &[u8], dx: f32, x: &[i8]) -> f32 {
    let (ql, qh, scales) = (&blk[0..128], &blk[128..192], &blk[192..208]);
    let d = f16_at(blk, 208);
    let mut sumi = 0i32;
    for (g, &sc) in scales.iter().enumerate() {
        let dot: i32 = (g * 16..g * 16 + 16)
            .map(|k| q6_k_value(ql, qh, k) * x[k] as i32)
            .sum();
        sumi += sc as i8 as i32 * dot;
    }
    d * dx * sumi as f32
}
