//! The backend's options and error type: what the entry point, the cache,
//! the planner and the kernels all name. A leaf module: it imports nothing
//! of the crate, so no module depends on `lib.rs` (or on another module)
//! for these types. Also the thread's `qmatmul` numerics choice
//! ([`with_quant_numerics`]), which the cache and the session read.

use std::cell::Cell;

use tc_quant::quant::Numerics;

/// The tolerance of the fast F32 transcendentals: `|jit − interp| ≤
/// TOLERANCE.0 · |interp| + TOLERANCE.1`, for every f32 input (±0, ±∞,
/// subnormals; a NaN input or result gives a NaN on both sides).
pub const TOLERANCE: (f32, f32) = (2e-6, 2e-6);

/// The fast F32 `exp`'s constants (Cephes `expf`): the input's clamp,
/// the Cody–Waite split of ln 2 and the polynomial's coefficients, highest
/// degree first. The JIT's (`codegen::math`'s `fast_exp`) and the fused
/// attention kernel's (`kernels::attention::exp_fast`) read them here, so
/// the two compute the same polynomial.
pub(crate) mod fast_exp {
    /// Above: +∞.
    pub const HI: f32 = 88.722_83;
    /// Below: 0.
    pub const LO: f32 = -104.0;
    /// ln 2's high part.
    pub const C1: f32 = 0.693_359_4;
    /// ln 2's low part.
    pub const C2: f32 = -2.121_944_4e-4;
    /// The polynomial in the reduced argument.
    pub const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        5e-1,
    ];
}

/// Code generation options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JitOptions {
    /// F32 `exp/log/tanh/sigmoid/erf/gelu` as vectorized polynomials (fast,
    /// within [`TOLERANCE`]) instead of the interpreter's exact f64 libm path.
    pub fast_math: bool,
    /// Reductions, matmuls, convolutions and exact-numerics `qmatmul`s in
    /// the interpreter's sequential order (bit-identical to it and
    /// reproducible across thread counts): reductions not vectorized,
    /// products without FMA or blocking over the summed axis (the crate
    /// docs, "Numerics").
    pub deterministic: bool,
    /// Worker threads: 1 = the calling thread only; anything else = the
    /// rayon global pool.
    pub threads: usize,
    /// `qmatmul` (Section 2 §18) with its activations quantized per block
    /// to 8 bits and integer block dots, as llama.cpp computes
    /// (`tc_quant::quant::Numerics::Fast`, within the bound stated there),
    /// instead of each weight block dequantized to F32 and F32
    /// accumulation (`Numerics::Exact`, within the matmul tolerance of the
    /// reference denotation). Off by default: exact numerics.
    pub fast_quant: bool,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            fast_math: true,
            deterministic: false,
            threads: 0,
            fast_quant: false,
        }
    }
}

/// Errors of the backend (compilation); run-time failures are
/// `tc_runtime::Error`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// LLVM rejected something (a backend bug, reported).
    #[error("LLVM: {0}")]
    Llvm(String),
    /// An op or dtype this backend does not lower.
    #[error("not supported by the JIT: {0}")]
    Unsupported(String),
    /// Planning failed on the concrete shapes (the interpreter reports the same error).
    #[error(transparent)]
    Runtime(#[from] tc_runtime::Error),
}

thread_local! {
    /// This thread's [`with_quant_numerics`] choice, if any.
    static NUMERICS: Cell<Option<Numerics>> = const { Cell::new(None) };
}

/// Run `f` with the calls it makes on this thread (and their nested calls,
/// wherever they run) computing `qmatmul` with `numerics` (Section 2 §18),
/// whatever [`JitOptions::fast_quant`](crate::JitOptions) says for the
/// process: a model whose precision is part of its definition (an int8
/// encoder) states it where it runs, and a process can serve it beside a
/// model of the other numerics. Compiled code is kept per numerics (the
/// options are part of the cache key). The interpreter backend ignores it:
/// it computes the reference denotation.
pub fn with_quant_numerics<R>(numerics: Numerics, f: impl FnOnce() -> R) -> R {
    enter_quant_numerics(Some(numerics), f)
}

/// This thread's [`with_quant_numerics`] choice, if it made one: what a
/// hop onto another thread carries over ([`enter_quant_numerics`]); the
/// cache applies it to [`JitOptions::fast_quant`] per call.
pub fn quant_numerics() -> Option<Numerics> {
    NUMERICS.with(Cell::get)
}

/// Run `f` with this thread's choice set to `choice` exactly (`None`: no
/// choice, the process-wide option), as another thread's
/// [`quant_numerics`] gave it; restored after.
pub fn enter_quant_numerics<R>(choice: Option<Numerics>, f: impl FnOnce() -> R) -> R {
    with_local(&NUMERICS, choice, f)
}

/// Run `f` with this thread's `cell` set to `value`, restored after (also
/// when `f` unwinds): a setting that holds for one scope on one thread.
pub(crate) fn with_local<T: Copy + 'static, R>(
    cell: &'static std::thread::LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            let old = self.1;
            self.0.with(|c| c.set(old));
        }
    }
    let _restore = Restore(cell, cell.with(|c| c.replace(value)));
    f()
}
