//! Block-quantized formats, reference dequantization and fused quantized
//! matmul (Section 2 §18: block-quantized tensors).
//!
//! A format fixes a block length `b` and a byte layout exactly as ggml
//! defines it. A weight matrix `W : [n_out, K]` is stored row by row, each
//! row `K / b` consecutive blocks (a GGUF tensor `[ne0 = K, ne1 = n_out]`).
//!
//! [`dequantize`] is the denotation of §18: bit-exact with ggml's
//! `dequantize_row_*` (and gguf-py's `gguf.quants.dequantize`).
//! [`qmatmul`] computes `y = x · Wᵀ` under one of two [`Numerics`]:
//!
//! - [`Numerics::Exact`]: each weight row is dequantized exactly as
//!   [`dequantize`] does, and each output is a dot product accumulated in
//!   f32 with FMA in a fixed order: element `k` goes to lane `k mod 16` of
//!   16 partial sums, each summed in increasing `k`; the 16 lanes are then
//!   folded by halves (`l + l+8`, then `l + l+4`, `l + l+2`, `l + l+1`).
//!   Every [`Path`] uses this order, so all paths agree bit for bit. Any
//!   such order satisfies the classic bound
//!   `|ŷ − Σ x_k w_k| ≤ γ_K · Σ |x_k w_k|`, `γ_K = K·u / (1 − K·u)`,
//!   `u = 2⁻²⁴`, against the exact real dot of the dequantized weights, so
//!   it differs from a naive sequential f32 dot by at most `2 γ_K Σ|x_k w_k|`.
//! - [`Numerics::Fast`]: as llama.cpp does, each activation block (32
//!   elements for `Q8_0`/`Q4_0`/`Q4_1`, 256 for the K-quants) is quantized
//!   to 8 bits, `d = max|x| / 127`, `q = round_ties_even(x / d)` clamped
//!   to `±127` (which only bites when `d` is subnormal); the block
//!   dot is an exact integer dot, scaled in f32; blocks are summed in
//!   increasing order (for the 32-element formats each block's term is
//!   added with a fused multiply-add, `acc ← fma(d_w·d_x, isum, acc)`,
//!   then for `Q4_1` `acc ← fma(m_w, s_x, acc)`: each a single
//!   rounding). With `d_b` the activation scale of the block holding
//!   `k`, the per-element bound against the f64 dot of the dequantized
//!   weights is
//!   `|ŷ − Σ x_k w_k| ≤ Σ_k |w_k| · ((1/2 + 2⁻¹⁵) · d_b + γ_{n+6} · (|x_k| + d_b))`
//!   with `n = K / b`: the first term is the activation rounding (at most
//!   half a step, plus the rounding of `x / d`), the second the f32
//!   scaling and accumulation of the block terms (a few roundings each,
//!   plus the `n`-term sum) and the re-association of ggml's `d·q + m`.
//!   Every path computes the same per-block terms in the same order, so
//!   all paths agree bit for bit here too, for every input.
//!
//! Both bounds are the usual ones "in the absence of underflow". Where f32
//! underflows (activation blocks with `max|x| < 127·2⁻¹²⁶`, so `d` is
//! subnormal, or products of tiny scales) each affected operation adds at
//! most `2⁻¹⁵⁰` absolutely instead of a relative error: at most
//! `(K + 16)·2⁻¹⁵⁰` in total for Exact, and for Fast at most
//! `127·2⁻¹⁵⁰·|w_k|` per element (the error in a subnormal `d`) plus
//! `2²⁸·2⁻¹⁵⁰` per block (an underflowed scale times the integer dot).
//!
//! Kernels: a scalar reference, AVX2+FMA+F16C, and AVX-512 (F/BW/VL, using
//! VNNI `vpdpbusd` for the fast integer dots when the host has it), chosen
//! at run time. With VNNI, [`Numerics::Fast`] on the 32-element formats
//! runs tiles of 16 weight rows whose blocks are transposed in registers,
//! so each `vpdpbusd` computes a part of 16 block dots at once (see
//! `vnni.rs`); with AMX-INT8 ([`Path::Amx`]), 16 activation rows at a
//! time go through one `tdpbssd` per block on the same packed weights
//! (see `amx.rs`). The output columns are split across rayon's global pool;
//! a packed product of many rows splits its rows first ([`qmatmul_packed`]).

mod act;
#[cfg(target_arch = "x86_64")]
mod amx;
mod dequant;
mod kernels;
mod packed;
mod quantize;
#[cfg(test)]
mod unsafe_tests;
#[cfg(target_arch = "x86_64")]
mod vnni;
#[cfg(target_arch = "x86_64")]
mod vnni_k;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::gguf::GgmlType;
use rayon::prelude::*;

pub use dequant::dequantize;
pub use packed::PackedWeights;
pub use quantize::quantize_q8_0;

/// A ggml block format this crate decodes.
#[allow(non_camel_case_types)] // ggml's own names
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// 32 × i8 with an f16 scale `d`: `w = d·q`.
    Q8_0,
    /// 32 × 4 bits with an f16 scale: `w = d·(q − 8)`.
    Q4_0,
    /// 32 × 4 bits with f16 scale and min: `w = d·q + m`.
    Q4_1,
    /// 256-element super-block: f16 `d`, `dmin`, 8 × (6-bit scale, 6-bit
    /// min), 4-bit values: `w = d·sc_j·q − dmin·m_j`.
    Q4_K,
    /// 256-element super-block: 6-bit values (`ql`, `qh`), 16 i8 scales,
    /// f16 `d`: `w = d·sc_j·(q − 32)`.
    Q6_K,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 5] = [
        Format::Q8_0,
        Format::Q4_0,
        Format::Q4_1,
        Format::Q4_K,
        Format::Q6_K,
    ];

    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            Format::Q8_0 | Format::Q4_0 | Format::Q4_1 => 32,
            Format::Q4_K | Format::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q8_0 => 34,
            Format::Q4_0 => 18,
            Format::Q4_1 => 20,
            Format::Q4_K => 144,
            Format::Q6_K => 210,
        }
    }

    /// ggml's lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Q8_0 => "q8_0",
            Format::Q4_0 => "q4_0",
            Format::Q4_1 => "q4_1",
            Format::Q4_K => "q4_k",
            Format::Q6_K => "q6_k",
        }
    }

    /// The format of a GGUF tensor type, if this crate decodes it.
    pub fn from_ggml(t: GgmlType) -> Option<Format> {
        Some(match t {
            GgmlType::Q8_0 => Format::Q8_0,
            GgmlType::Q4_0 => Format::Q4_0,
            GgmlType::Q4_1 => Format::Q4_1,
            GgmlType::Q4_K => Format::Q4_K,
            GgmlType::Q6_K => Format::Q6_K,
            _ => return None,
        })
    }
}

/// Why a quantized operation refused its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// A buffer has the wrong length.
    #[error("{what} has length {found}, expected {expected}")]
    BadLength {
        /// Which buffer.
        what: &'static str,
        /// The length the other arguments imply.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// The reduction length is not a whole number of blocks.
    #[error("{format}: length {len} is not a multiple of the block length {block}")]
    NotBlockMultiple {
        /// The format's name.
        format: &'static str,
        /// The length given.
        len: usize,
        /// The block length.
        block: usize,
    },
    /// A size product overflows `usize`.
    #[error("size of {what} overflows")]
    Overflow {
        /// Which size.
        what: &'static str,
    },
    /// A block's scale does not fit the format's f16 (a weight that is
    /// not finite, or a block so large that `max|x| / 127` overflows f16).
    #[error("block {block} has no f16 scale: a weight is not finite, or max |x| / 127 exceeds f16's range")]
    ScaleRange {
        /// The block's index.
        block: usize,
    },
    /// The host CPU lacks the requested kernel path.
    #[error("kernel path {0:?} is not available on this CPU")]
    PathUnavailable(Path),
}

/// How [`qmatmul`] rounds; see the module docs for the bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Numerics {
    /// Dequantize to f32 exactly, accumulate in f32.
    Exact,
    /// Quantize activations to 8 bits per block, integer block dots.
    Fast,
}

/// A kernel implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Portable Rust; the reference the others match bit for bit.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL (plus AVX2/FMA/F16C), with VNNI when present.
    Avx512,
    /// [`Path::Avx512`] with VNNI, plus AMX-INT8 tiles for
    /// [`Numerics::Fast`] products of 16 or more activation rows in the
    /// 32-element formats (prefill, batched decode). Offered where the
    /// CPU has AMX-TILE and AMX-INT8 and the OS grants the tile state.
    Amx,
}

impl Path {
    /// Whether this host can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Path::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => x86::has_avx2(),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => x86::has_avx512(),
            #[cfg(target_arch = "x86_64")]
            Path::Amx => amx::available(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// The paths this host can run, slowest first.
pub fn available_paths() -> Vec<Path> {
    [Path::Scalar, Path::Avx2, Path::Avx512, Path::Amx]
        .into_iter()
        .filter(|p| p.is_available())
        .collect()
}

/// The fastest available path.
pub fn best_path() -> Path {
    // Decided once: `qmatmul` asks on every call (a decoder's step makes
    // hundreds), and the answer is the host's.
    static BEST: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
    *BEST.get_or_init(|| available_paths().pop().unwrap_or(Path::Scalar))
}

/// `y[m·n_out + j] = Σ_k x[m·k_dim + k] · W[j, k]` for `m < rows`, with `W`
/// (`[n_out, k_dim]`, row-major blocks of `f`) in `w`, on the fastest path
/// the host has. See the module docs for the [`Numerics`] and their bounds.
#[allow(clippy::too_many_arguments)] // the BLAS-like signature is the API
pub fn qmatmul(
    f: Format,
    numerics: Numerics,
    x: &[f32],
    rows: usize,
    k_dim: usize,
    w: &[u8],
    n_out: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    qmatmul_with(best_path(), f, numerics, x, rows, k_dim, w, n_out, y)
}

/// [`qmatmul`] on a chosen path; [`QuantError::PathUnavailable`] if the
/// host lacks it. Every path gives bit-identical results.
#[allow(clippy::too_many_arguments)] // the BLAS-like signature is the API
pub fn qmatmul_with(
    path: Path,
    f: Format,
    numerics: Numerics,
    x: &[f32],
    rows: usize,
    k_dim: usize,
    w: &[u8],
    n_out: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    if !path.is_available() {
        return Err(QuantError::PathUnavailable(path));
    }
    let row_bytes = check_shapes(f, x, rows, k_dim, w, n_out, y)?;
    if rows == 0 || n_out == 0 {
        return Ok(());
    }
    // AMX only adds a kernel; everything else runs on AVX-512.
    let (path, amx) = match path {
        Path::Amx => (Path::Avx512, true),
        p => (p, false),
    };
    let acts = match numerics {
        Numerics::Fast => Some(quantize(f, x, rows, k_dim, amx)),
        Numerics::Exact => None,
    };
    let job = kernels::Job {
        path,
        amx,
        f,
        x,
        acts: acts.as_ref(),
        rows,
        k: k_dim,
        w,
        row_bytes,
        packed: None,
    };
    run_columns(&job, y, n_out);
    Ok(())
}

/// [`qmatmul`] in the reference's order: each weight row dequantized
/// ([`dequantize`], ggml's arithmetic), then each output
/// `Σ_k x[m, k] · W[j, k]` summed in f32 from +0 in order of `k`, one
/// rounded multiply and one rounded add per term, as the interpreter's
/// `qmatmul_reference` does: its result bit for bit (tc's deterministic
/// mode). The weight is never dequantized whole: one row at a time.
#[allow(clippy::too_many_arguments)] // the BLAS-like signature is the API
pub fn qmatmul_in_order(
    f: Format,
    x: &[f32],
    rows: usize,
    k_dim: usize,
    w: &[u8],
    n_out: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    let row_bytes = check_shapes(f, x, rows, k_dim, w, n_out, y)?;
    if rows == 0 || n_out == 0 {
        return Ok(());
    }
    let mut wrow = vec![0f32; k_dim];
    for j in 0..n_out {
        dequantize(f, &w[j * row_bytes..(j + 1) * row_bytes], &mut wrow)?;
        for m in 0..rows {
            let mut acc = 0f32;
            for (a, b) in x[m * k_dim..(m + 1) * k_dim].iter().zip(&wrow) {
                acc += a * b;
            }
            y[m * n_out + j] = acc;
        }
    }
    Ok(())
}

/// [`qmatmul`] with [`Numerics::Fast`] on a weight packed once
/// ([`PackedWeights::new`]): the same results, bit for bit, without
/// transposing the weight's blocks on every call.
pub fn qmatmul_packed(
    w: &PackedWeights,
    x: &[f32],
    rows: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    let (k, n_out) = (w.k, w.n_out);
    let mul = |a: usize, b: usize, what| a.checked_mul(b).ok_or(QuantError::Overflow { what });
    for (what, expected, found) in [
        ("x", mul(rows, k, "x")?, x.len()),
        ("y", mul(rows, n_out, "y")?, y.len()),
    ] {
        if expected != found {
            return Err(QuantError::BadLength {
                what,
                expected,
                found,
            });
        }
    }
    if rows == 0 || n_out == 0 {
        return Ok(());
    }
    let threads = rayon::current_num_threads().max(1);
    if threads > 1 && rows >= ROW_SPLIT_MIN * threads {
        // Each thread takes whole rows, as the elementwise ops after a
        // product split their work, instead of every thread a column
        // share of every row. A row's outputs depend on its own
        // activations alone, so the bits are the same.
        let per = rows.div_ceil(threads).next_multiple_of(16);
        x.par_chunks(per * k)
            .zip(y.par_chunks_mut(per * n_out))
            .for_each(|(x, y)| packed_rows(w, x, x.len() / k, y, false));
    } else {
        packed_rows(w, x, rows, y, true);
    }
    Ok(())
}

/// Activation rows from which a packed product on several threads splits
/// its rows over them, per thread: MiniLM int8 at 8 × 128 and 32 × 16
/// tokens (512–1,024 rows) splits, a decode step's 16 rows do not (there
/// each thread reading its own share of the weight is what counts).
const ROW_SPLIT_MIN: usize = 128;

/// [`qmatmul_packed`] on checked lengths: `rows` rows of `x` into `y`, the
/// columns split over the pool with `par`, else all on this thread.
fn packed_rows(w: &PackedWeights, x: &[f32], rows: usize, y: &mut [f32], par: bool) {
    let (f, k, n_out) = (w.f, w.k, w.n_out);
    let amx = Path::Amx.is_available();
    let acts = quantize(f, x, rows, k, amx);
    let job = kernels::Job {
        // `PackedWeights::new` packs only where VNNI (so AVX-512) is.
        path: Path::Avx512,
        amx,
        f,
        x,
        acts: Some(&acts),
        rows,
        k,
        w: &[],
        row_bytes: k / f.block_elems() * f.block_bytes(),
        packed: Some(w),
    };
    if par {
        run_columns(&job, y, n_out);
    } else {
        let mut out = kernels::Out {
            rows: y.chunks_exact_mut(n_out).collect(),
        };
        job.columns(0, &mut out);
    }
}

/// The activations quantized once per call, with the AMX tiles' scalars
/// where those run.
fn quantize(f: Format, x: &[f32], rows: usize, k: usize, amx: bool) -> act::Acts {
    let acts = act::Acts::quantize(f, x, rows, k);
    #[cfg(target_arch = "x86_64")]
    let acts = acts.with_amx(f, amx, rows, k);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = amx;
    acts
}

/// Splits the columns (output features) over the pool: each task owns the
/// same column range of every row of the row-major `y`.
fn run_columns(job: &kernels::Job<'_>, y: &mut [f32], n_out: usize) {
    let tasks = rayon::current_num_threads().max(1) * 8;
    // Multiples of 16 columns keep the 4-column and 16-column kernels
    // busy; tiny matrices stay on one task because scheduling would cost
    // more than the work.
    let cols = n_out.div_ceil(tasks).next_multiple_of(16);
    let mut shares: Vec<kernels::Out<'_>> = (0..n_out.div_ceil(cols))
        .map(|_| kernels::Out {
            rows: Vec::with_capacity(job.rows),
        })
        .collect();
    for row in y.chunks_exact_mut(n_out) {
        for (share, part) in shares.iter_mut().zip(row.chunks_mut(cols)) {
            share.rows.push(part);
        }
    }
    // With one thread, a caller outside the pool (a decoder's main
    // thread) would hand every call to the pool's worker and sleep until
    // it is done: two context switches per product, hundreds per token.
    if rayon::current_num_threads() <= 1 {
        for (ci, mut out) in shares.into_iter().enumerate() {
            job.columns(ci * cols, &mut out);
        }
        return;
    }
    shares
        .into_par_iter()
        .enumerate()
        .for_each(|(ci, mut out)| job.columns(ci * cols, &mut out));
}

/// Validates every length with checked arithmetic; returns bytes per row.
fn check_shapes(
    f: Format,
    x: &[f32],
    rows: usize,
    k_dim: usize,
    w: &[u8],
    n_out: usize,
    y: &[f32],
) -> Result<usize, QuantError> {
    let block = f.block_elems();
    if !k_dim.is_multiple_of(block) {
        return Err(QuantError::NotBlockMultiple {
            format: f.name(),
            len: k_dim,
            block,
        });
    }
    let row_bytes = k_dim / block * f.block_bytes();
    let mul = |a: usize, b: usize, what| a.checked_mul(b).ok_or(QuantError::Overflow { what });
    let expect = |what, expected: usize, found: usize| {
        if expected == found {
            Ok(())
        } else {
            Err(QuantError::BadLength {
                what,
                expected,
                found,
            })
        }
    };
    expect("x", mul(rows, k_dim, "x")?, x.len())?;
    expect("w", mul(n_out, row_bytes, "w")?, w.len())?;
    expect("y", mul(rows, n_out, "y")?, y.len())?;
    Ok(row_bytes)
}
