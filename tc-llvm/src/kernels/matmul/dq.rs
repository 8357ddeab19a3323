//! docs/syntax.md §7c `dq_matmul`: each row of F32 activations quantized
//! to i8 by its own scale, its exact i32 sums against an I8 weight scaled
//! back, plus the F32 product of its outlier channels (LLM.int8()'s split).
//!
//! On AMX-INT8 tiles ([`super::amx`]) the quantization writes A's tile
//! packing directly and the tiles' writer scales the sums, adds the
//! outliers' product and stores F32: the i8 activations and the i32 sums
//! never reach memory, and the outliers' product is never an output of
//! its own. Elsewhere the rows are quantized into a buffer, the integer
//! GEMM sums them (`vpdpbusd`/`vpdpwssd` where the CPU has them), and the
//! rows are finished in a second pass.
//!
//! Every path computes the interpreter's `denote::dq_matmul` bit for bit:
//! the scale and the quantization are the same F32 operations, the sums
//! exact, the scaling the same two products in the same order, and the
//! outliers' dot the same fused multiply-adds in the same order.

use rayon::prelude::*;
use tc_runtime::cast::{maximum, CANONICAL_NAN};

use super::{ExecCtx, PackCache};
use crate::options::Error;

/// One product's operands, as their storage: `x` `rows × (k + j)` F32
/// (row-major), `w` `k × n` I8 bytes, `scale` `n` F32, `outliers` `j × n`
/// F32.
#[derive(Clone, Copy, Debug)]
pub struct DqOperands<'a> {
    /// The activations.
    pub x: &'a [f32],
    /// The int8 weight, as bytes.
    pub w: &'a [u8],
    /// The weight's scale per column.
    pub scale: &'a [f32],
    /// The outlier channels' F32 weight rows.
    pub outliers: &'a [f32],
    /// Rows of `x` (every leading dim).
    pub rows: usize,
    /// Int8 channels.
    pub k: usize,
    /// Outlier channels.
    pub j: usize,
    /// Output columns.
    pub n: usize,
}

impl DqOperands<'_> {
    /// Whether every slice holds its operand (and `y` the output).
    fn fits(&self, y: &[f32]) -> bool {
        let Some(c) = self.k.checked_add(self.j) else {
            return false;
        };
        let holds = |len: usize, a: usize, b: usize| a.checked_mul(b).is_some_and(|e| len >= e);
        holds(self.x.len(), self.rows, c)
            && holds(self.w.len(), self.k, self.n)
            && self.scale.len() >= self.n
            && holds(self.outliers.len(), self.j, self.n)
            && holds(y.len(), self.rows, self.n)
    }
}

/// `y = dq_matmul(x, w, scale, outliers)` (`rows × n`, row-major), on AMX
/// tiles where the CPU has them (the weight's quad packing kept in
/// `b_cache`), on the integer GEMM otherwise.
pub fn dq_matmul(
    o: &DqOperands,
    y: &mut [f32],
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<(), Error> {
    if !o.fits(y) {
        return Err(Error::Unsupported(format!(
            "dq_matmul: operands shorter than {} × ({} + {}) by {}",
            o.rows, o.k, o.j, o.n
        )));
    }
    if o.rows == 0 || o.n == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if o.k > 0 && super::amx::available_i8() && super::amx::fits::<super::amx::I8>(o.rows, o.k, o.n)
    {
        return tiled(o, y, ctx, b_cache);
    }
    generic(o, y, ctx)
}

/// Row `x`'s scale (`maximum(max |x| / 127, 1e-30)`, the max from `+0`)
/// and its channels quantized into `q`.
fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    let a = row_scale(x.iter().fold(0f32, |m, v| maximum(m, v.abs())));
    for (q, &v) in q.iter_mut().zip(x) {
        // `as`: saturating, NaN to 0 (§5.2's float-to-int cast).
        *q = (v / a).round_ties_even() as i8;
    }
    a
}

/// What the generic path's row passes may use, detected once per call
/// rather than once per row.
#[derive(Clone, Copy)]
struct Cpu {
    avx512: bool,
    fma: bool,
}

impl Cpu {
    fn detect() -> Cpu {
        #[cfg(target_arch = "x86_64")]
        return Cpu {
            avx512: std::arch::is_x86_feature_detected!("avx512f"),
            fma: std::arch::is_x86_feature_detected!("fma"),
        };
        #[cfg(not(target_arch = "x86_64"))]
        Cpu {
            avx512: false,
            fma: false,
        }
    }
}

/// [`quantize_row`], on AVX-512 where the CPU has it (the same bits).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn quantize_row_fast(cpu: Cpu, x: &[f32], q: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if cpu.avx512 {
        // SAFETY: the CPU has AVX-512 F (`Cpu::detect`).
        return unsafe { quantize_row_avx512(x, q) };
    }
    quantize_row(x, q)
}

/// The scale of a row whose channels reach `m`.
fn row_scale(m: f32) -> f32 {
    maximum(m / 127.0, 1e-30)
}

/// The quantized rows, the integer GEMM's sums, then each row finished.
fn generic(o: &DqOperands, y: &mut [f32], ctx: &ExecCtx) -> Result<(), Error> {
    let (rows, k, j, n) = (o.rows, o.k, o.j, o.n);
    let (c, cpu) = (k + j, Cpu::detect());
    let mut q = vec![0i8; rows * k];
    // A row with no int8 channel has the scale of `m = +0` and sums 0.
    let mut scales = vec![row_scale(0.0); rows];
    let mut acc = vec![0i32; rows * n];
    if k > 0 {
        let quantize = |(r, (qr, a)): (usize, (&mut [i8], &mut f32))| {
            *a = quantize_row_fast(cpu, &o.x[r * c..][..k], qr);
        };
        if ctx.threads != 1 {
            let rows_q = q.par_chunks_mut(k).zip(scales.par_iter_mut());
            rows_q.enumerate().for_each(quantize);
        } else {
            let rows_q = q.chunks_mut(k).zip(scales.iter_mut());
            rows_q.enumerate().for_each(quantize);
        }
        // SAFETY: `q` holds the `rows × k` I8 operand, `w` the `k × n` one
        // (`fits`), `acc` the `rows × n` I32 output, disjoint from both.
        unsafe {
            crate::kernels::matmul_int::matmul_int_wide(
                q.as_ptr().cast(),
                o.w.as_ptr(),
                acc.as_mut_ptr().cast(),
                &[rows, k],
                &[k, n],
                ctx,
            )?
        };
    }
    let finish = |(r, yr): (usize, &mut [f32])| {
        let xo = &o.x[r * c + k..][..j];
        finish_row(
            cpu,
            &acc[r * n..][..n],
            scales[r],
            (o.scale, xo, o.outliers),
            yr,
        );
    };
    let y = &mut y[..rows * n];
    if ctx.threads != 1 {
        y.par_chunks_mut(n).enumerate().for_each(finish);
    } else {
        y.chunks_mut(n).enumerate().for_each(finish);
    }
    Ok(())
}

/// One output row from its sums: `acc · a · scale + o`, `o` the outlier
/// channels `xo` against their weight rows (`outliers`, `xo.len()` rows
/// of `y.len()` columns) as fused multiply-adds in order from `+0`.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn finish_row(
    cpu: Cpu,
    acc: &[i32],
    a: f32,
    (scale, xo, outliers): (&[f32], &[f32], &[f32]),
    y: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if cpu.fma {
        // SAFETY: the CPU has FMA (`Cpu::detect`).
        return unsafe { finish_row_fma(acc, a, (scale, xo, outliers), y) };
    }
    finish_row_with(acc, a, (scale, xo, outliers), y)
}

/// [`finish_row`] compiled with FMA, so that `mul_add` is one instruction.
///
/// # Safety
/// The CPU has FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
// SAFETY: (contract) met by `finish_row`, its only caller.
unsafe fn finish_row_fma(acc: &[i32], a: f32, parts: (&[f32], &[f32], &[f32]), y: &mut [f32]) {
    finish_row_with(acc, a, parts, y)
}

#[inline(always)]
fn finish_row_with(
    acc: &[i32],
    a: f32,
    (scale, xo, outliers): (&[f32], &[f32], &[f32]),
    y: &mut [f32],
) {
    let n = y.len();
    y.fill(0.0);
    for (t, &x) in xo.iter().enumerate() {
        for (o, &v) in y.iter_mut().zip(&outliers[t * n..][..n]) {
            *o = x.mul_add(v, *o);
        }
    }
    for ((o, &s), &sum) in y.iter_mut().zip(scale).zip(acc) {
        let v = sum as f32 * a * s + *o;
        *o = if v.is_nan() { CANONICAL_NAN } else { v };
    }
}

/// The product on AMX-INT8 tiles: each row's scale, then its channels
/// quantized straight into A's tile packing; the tiles' sums finished by
/// [`DqWrite`].
#[cfg(target_arch = "x86_64")]
fn tiled(
    o: &DqOperands,
    y: &mut [f32],
    ctx: &ExecCtx,
    b_cache: Option<&dyn PackCache>,
) -> Result<(), Error> {
    use super::amx::{drive, I8};
    let (rows, k, n) = (o.rows, o.k, o.n);
    let c = k + o.j;
    let par = ctx.threads != 1 && super::splits(ctx, rows, n, k);
    // SAFETY: `w` holds `k·n` bytes (`fits`).
    let pb = unsafe { super::i8::quads(o.w.as_ptr(), (k, n), par, b_cache)? };
    // Each row's scale, then its channels into the packing, while the
    // row is in L1; the scales go on to the writer.
    let pack = |packed: &mut [u8], row_bytes: usize, par: bool| {
        const G: usize = 2 * super::amx::T;
        let mut scales = vec![0f32; packed.len() / row_bytes];
        let one = |(g, (d, sc)): (usize, (&mut [u8], &mut [f32]))| {
            for (rr, a) in sc.iter_mut().enumerate() {
                let r = g * G + rr;
                let row = (r < rows).then(|| &o.x[r * c..][..k]);
                // SAFETY: the CPU has AVX-512 F (AMX-INT8 hosts do:
                // `available_i8`); `d` is this group's packing,
                // `row_bytes` per row.
                *a = unsafe { pack_row_avx512(row, rr, row_bytes, d) };
            }
        };
        if par {
            let groups = packed
                .par_chunks_mut(G * row_bytes)
                .zip(scales.par_chunks_mut(G));
            groups.enumerate().for_each(one);
        } else {
            let groups = packed.chunks_mut(G * row_bytes).zip(scales.chunks_mut(G));
            groups.enumerate().for_each(one);
        }
        DqWrite {
            y: y.as_mut_ptr(),
            scales,
            o: *o,
        }
    };
    // SAFETY: AMX-INT8 available and `fits` (checked by `dq_matmul`), `pb`
    // packs `w` in quads; the writer writes the `rows × n` output `y`
    // holds.
    unsafe { drive::<I8, _>(&pb, (rows, k, n), par, pack) }
}

/// The largest `|x|` of a row, `None` if it holds a NaN (whose scale, and
/// so every output of the row, is NaN).
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `pack_row_avx512` and `quantize_row_avx512`.
unsafe fn row_max_avx512(x: &[f32]) -> Option<f32> {
    use std::arch::x86_64::*;
    let abs = _mm512_set1_epi32(0x7FFF_FFFF);
    let (mut m, mut nan) = (_mm512_setzero_ps(), 0u16);
    for chunk in x.chunks(16) {
        let keep: __mmask16 = if chunk.len() == 16 {
            !0
        } else {
            (1 << chunk.len()) - 1
        };
        // SAFETY: the mask covers the chunk's elements only.
        let v = unsafe { _mm512_maskz_loadu_ps(keep, chunk.as_ptr()) };
        let v = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs));
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        m = _mm512_max_ps(m, v);
    }
    (nan == 0).then(|| _mm512_reduce_max_ps(m))
}

/// Row `rr` of a group's tile packing (`d`, [`super::amx`]'s `pack_a`
/// layout: k-tile `t` of the group's 32 rows at byte `t·2048`, a row's 64
/// bytes at `rr·64` in it) from `row`, its channels quantized by its
/// scale ([`quantize_row`]'s), zeros past them; all zeros without a row.
/// The row's scale (NaN for a row with a NaN, whose every output is
/// then NaN; 0 without a row).
///
/// # Safety
/// The CPU has AVX-512 F; `d` holds a group's packing of `row_bytes` per
/// row (a multiple of 64, at least the row's length).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `tiled`, its only caller.
unsafe fn pack_row_avx512(row: Option<&[f32]>, rr: usize, row_bytes: usize, d: &mut [u8]) -> f32 {
    use std::arch::x86_64::*;
    const ROW: usize = super::amx::ROW_BYTES;
    let Some(x) = row else {
        for t in 0..row_bytes / ROW {
            d[t * 2 * super::amx::T * ROW + rr * ROW..][..ROW].fill(0);
        }
        return 0.0;
    };
    // SAFETY: the CPU has AVX-512 F (the contract).
    let a = unsafe { row_max_avx512(x) }.map_or(f32::NAN, row_scale);
    let av = _mm512_set1_ps(a);
    for t in 0..row_bytes / ROW {
        let at = &mut d[t * 2 * super::amx::T * ROW + rr * ROW..][..ROW];
        for (h, dst) in at.chunks_mut(16).enumerate() {
            // SAFETY: the CPU has AVX-512 F (the contract).
            let q = unsafe { quantize16(x, t * ROW + h * 16, av) };
            // SAFETY: `dst` is 16 bytes of `at`.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), q) };
        }
    }
    a
}

/// [`quantize_row`] on AVX-512: the same scale and bits.
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `quantize_row_fast`, its only caller.
unsafe fn quantize_row_avx512(x: &[f32], q: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: the CPU has AVX-512 F (the contract).
    let a = unsafe { row_max_avx512(x) }.map_or(f32::NAN, row_scale);
    let av = _mm512_set1_ps(a);
    for (h, dst) in q.chunks_mut(16).enumerate() {
        let mut b = [0i8; 16];
        // SAFETY: the CPU has AVX-512 F; `b` holds 16 bytes.
        unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), quantize16(x, h * 16, av)) };
        dst.copy_from_slice(&b[..dst.len()]);
    }
    a
}

/// Elements `l0..l0 + 16` of `x` (those inside it; 0 past its end)
/// quantized by the scale `av` as [`quantize_row`] does:
/// `round_ties_even(x / a)`, NaN to 0, saturated to i8.
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
// SAFETY: (contract) met by `pack_row_avx512` and `quantize_row_avx512`.
unsafe fn quantize16(
    x: &[f32],
    l0: usize,
    av: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::*;
    let have = x.len().saturating_sub(l0).min(16);
    let keep: __mmask16 = if have == 16 { !0 } else { (1 << have) - 1 };
    // SAFETY: the mask covers elements `l0..l0 + have` of `x` only.
    let v = unsafe { _mm512_maskz_loadu_ps(keep, x.as_ptr().wrapping_add(l0)) };
    let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_div_ps(v, av),
    );
    // A NaN quotient (a NaN scale, or `x / a` of infinities) casts to 0.
    let r = _mm512_mask_mov_ps(
        r,
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(r, r),
        _mm512_setzero_ps(),
    );
    _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r))
}

/// The tiles' writer: each C block's sums scaled by its rows' and
/// columns' scales, plus the outliers' product, stored as F32.
#[cfg(target_arch = "x86_64")]
struct DqWrite<'a> {
    y: *mut f32,
    scales: Vec<f32>,
    o: DqOperands<'a>,
}

// SAFETY: `y` is only written through by `write`, whose callers give each
// call rows and columns of its own (`TileWrite`'s contract); the rest is
// shared reads.
#[cfg(target_arch = "x86_64")]
unsafe impl Sync for DqWrite<'_> {}

#[cfg(target_arch = "x86_64")]
impl super::amx::TileWrite<super::amx::I8> for DqWrite<'_> {
    #[target_feature(enable = "avx512f,avx512bw")]
    // SAFETY: (contract) the trait's, met by `amx::drive`.
    unsafe fn write(
        &self,
        c: &super::amx::CTiles,
        (r0, rows): (usize, usize),
        (j0, n): (usize, usize),
    ) {
        let (lo, hi) = super::amx::panel_masks(n - j0);
        // Four rows at a time: each outlier weight row's load serves four
        // rows' multiply-adds.
        let mut r = 0;
        while r + 4 <= rows {
            // SAFETY: rows `r..r + 4` of the block (the trait's contract).
            unsafe { self.rows::<4>(c, (r0, r), j0, (lo, hi)) };
            r += 4;
        }
        while r < rows {
            // SAFETY: row `r` of the block (the trait's contract).
            unsafe { self.rows::<1>(c, (r0, r), j0, (lo, hi)) };
            r += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl DqWrite<'_> {
    /// Rows `r..r + R` of the block at row `r0` (columns `j0..`, under the
    /// masks `lo` and `hi` of its two column tiles): `acc · a · scale + o`,
    /// `o` the outliers' fused multiply-adds in order from `+0`, a NaN
    /// made canonical.
    ///
    /// # Safety
    /// [`super::amx::TileWrite::write`]'s, for these rows; `r + R ≤ 32`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    // SAFETY: (contract) met by `write`, its only caller.
    unsafe fn rows<const R: usize>(
        &self,
        c: &super::amx::CTiles,
        (r0, r): (usize, usize),
        j0: usize,
        (lo, hi): (std::arch::x86_64::__mmask16, std::arch::x86_64::__mmask16),
    ) {
        use std::arch::x86_64::*;
        const T: usize = super::amx::T;
        let (k, j, n) = (self.o.k, self.o.j, self.o.n);
        // Elements `i..` of `p` under a mask. Macros, not closures: a
        // closure's intrinsics became calls in this loop.
        macro_rules! load {
            ($m:expr, $p:expr, $i:expr) => {
                // SAFETY: the masks cover columns `j0..j0 + cols ≤ n` of
                // the scale and of each outlier row (`fits`); the CPU has
                // AVX-512 F (the contract).
                unsafe { _mm512_maskz_loadu_ps($m, $p.as_ptr().wrapping_add($i)) }
            };
        }
        let (s_lo, s_hi) = (load!(lo, self.o.scale, j0), load!(hi, self.o.scale, j0 + T));
        let zero = _mm512_setzero_ps();
        let (mut o_lo, mut o_hi) = ([zero; R], [zero; R]);
        let xo: [&[f32]; R] = std::array::from_fn(|i| &self.o.x[(r0 + r + i) * (k + j) + k..][..j]);
        for t in 0..j {
            let w = t * n + j0;
            let (w_lo, w_hi) = (
                load!(lo, self.o.outliers, w),
                load!(hi, self.o.outliers, w + T),
            );
            for i in 0..R {
                let xb = _mm512_set1_ps(xo[i][t]);
                o_lo[i] = _mm512_fmadd_ps(xb, w_lo, o_lo[i]);
                o_hi[i] = _mm512_fmadd_ps(xb, w_hi, o_hi[i]);
            }
        }
        let nan = _mm512_set1_ps(CANONICAL_NAN);
        macro_rules! canon {
            ($v:expr) => {{
                let v = $v;
                _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), nan)
            }};
        }
        for i in 0..R {
            let (rr, row) = (r + i, r0 + r + i);
            let t = 2 * (rr / T) * T * T + (rr % T) * T;
            // SAFETY: row `rr % T` of tiles `2·(rr / T)` and the next, 16
            // lanes each inside `c` (`rr < 32`).
            let (acc_lo, acc_hi) = unsafe {
                (
                    _mm512_loadu_si512(c.0.as_ptr().add(t).cast()),
                    _mm512_loadu_si512(c.0.as_ptr().add(t + T * T).cast()),
                )
            };
            let a = _mm512_set1_ps(self.scales[row]);
            let v_lo = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc_lo), a), s_lo);
            let v_hi = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc_hi), a), s_hi);
            let y_lo = canon!(_mm512_add_ps(v_lo, o_lo[i]));
            let y_hi = canon!(_mm512_add_ps(v_hi, o_hi[i]));
            // SAFETY: row `row < m`, columns `j0..j0 + cols ≤ n` under
            // the masks: inside the output, this unit's alone (the
            // contract).
            let out = self.y.wrapping_add(row * n + j0);
            unsafe {
                _mm512_mask_storeu_ps(out, lo, y_lo);
                if hi != 0 {
                    _mm512_mask_storeu_ps(out.wrapping_add(T), hi, y_hi);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 quantization gives the portable one's scale and bytes
    /// (the portable one runs where the CPU has no AVX-512, so the
    /// interpreter comparisons of `tests/matmul_int.rs` reach it only
    /// through this): rows of every length to 40 with ties, NaN,
    /// infinities, subnormals, zeros and values past i8 after rounding.
    #[test]
    fn avx512_quantization_is_the_portable_one() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            let specials = [
                0.0,
                -0.0,
                0.5,
                -1.5,
                127.0,
                -127.0,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::from_bits(1),
                f32::MIN_POSITIVE,
                1e-31,
                3.4e38,
            ];
            for len in 1..=40usize {
                for s in 0..specials.len() {
                    let x: Vec<f32> = (0..len)
                        .map(|i| match (i * 7 + s) % 5 {
                            0 => specials[(i + s) % specials.len()],
                            _ => (i as f32 - 20.0) * 0.37 + s as f32,
                        })
                        .collect();
                    let (mut q1, mut q2) = (vec![0i8; len], vec![0i8; len]);
                    let a1 = quantize_row(&x, &mut q1);
                    // SAFETY: the CPU has AVX-512 F (checked).
                    let a2 = unsafe { quantize_row_avx512(&x, &mut q2) };
                    assert!(a1.to_bits() == a2.to_bits() || (a1.is_nan() && a2.is_nan()));
                    if !a1.is_nan() {
                        assert_eq!(q1, q2, "{x:?}");
                    }
                }
            }
        }
    }
}
