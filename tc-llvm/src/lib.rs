//! tc's LLVM backend: checked tensor functions lowered to fused, vectorized
//! CPU kernels, JIT-compiled at the first call for a shape substitution σ
//! and cached per (function, σ).
//!
//! Pipeline (issue 5):
//!
//! 0. [`inline`] (σ-specialised compilations): small call-free callees
//!    spliced into the caller, so fusion crosses call boundaries.
//! 1. [`plan`]: concrete dtypes and shapes of every value under σ, the
//!    fusion decision (which values get buffers) and the steps.
//! 2. [`codegen`]: each fused kernel becomes a loop nest in LLVM IR text:
//!    an expression tree per output element, layout ops as index
//!    arithmetic, reductions with their producer inside the reduction loop.
//! 3. [`jit`]: `default<O3>`, unrolling only loops that ask
//!    ([`host::PIPELINE`]), or at a first call the quick tier
//!    ([`jit::Tier`], raised in the background by [`tier`]; the same
//!    bits), with a host `TargetMachine`, every function
//!    carrying `target-cpu`/`target-features`/`prefer-vector-width`=512,
//!    a large module cut into parts optimised on parallel threads
//!    ([`jit::split_module`]), object code linked into the process by ORC
//!    (`orc`), through the persistent kernel cache ([`disk`]) when one is
//!    configured.
//! 4. [`exec`]: buffers (reused through `tc_runtime::pool` when a call of
//!    the same size class dropped one; fresh large ones on transparent huge
//!    pages), outer-loop splitting across the rayon pool (tiny tensors stay
//!    on the calling thread), streaming stores for large flat outputs,
//!    matmul through [`kernels::matmul`]'s packed, cache-tiled IR micro-kernel (f32
//!    and narrow floats) and [`kernels::matmul_int`]'s (integers), with
//!    transposed/broadcast/sliced/reshaped operands read through strides
//!    ([`plan::view`], each view checked against its buffer) and a
//!    batch-invariant right operand folded into one `[B·M, K] × [K, N]`;
//!    a one-row product against a weight kept packed ([`kernels::prepack`]) streams
//!    its panels four at a time (`gemv`, x86-64 with AVX-512).
//! 5. [`cache`]: the thread-safe, LRU-bounded kernel cache with statistics
//!    and the shape-generic path; [`call`] is the entry point
//!    ([`call_static`] for the `'static` IR that `#[tensor_fn]` builds).
//!
//! # Numerics (Section 2 §3, §5; Section 4 §6)
//!
//! Bit-identical to the reference interpreter: every integer and Bool op,
//! every cast, every elementwise op on F16/BF16/F8 (computed in f32, rounded
//! back with the exact Section 2 §5 rounding after each op), and on F32 the
//! basic arithmetic, comparisons, `sqrt`, `rsqrt`, `recip`, rounding ops and
//! the transcendentals when [`JitOptions::fast_math`] is off.
//!
//! NaNs and signed zeros follow Section 2 §3 in both backends, bit for bit
//! (the rules and their payload choices are listed in
//! `tc_runtime::cast`): a NaN result is quiet, an elementwise op returns
//! its first NaN operand quieted (payload kept; `x · 1`, `relu`, a cast
//! round trip included — the kernels quiet explicitly, since LLVM folds
//! those into pass-throughs), a NaN made from non-NaN operands and the
//! NaN of a reduction, a matmul or a convolution (whose summation order
//! Section 4 §5.4 and §6 leave unspecified) are the canonical `f32::NAN`
//! (rounded into a narrow dtype); float `max`/`min`
//! (elementwise, `relu = max(x, +0)`, and the `max`/`min` reductions in
//! every mode) are IEEE 754-2019 `maximum`/`minimum` with −0 < +0. The
//! `max`/`min` reductions are order-independent, so they are bit-identical
//! in every mode, row-fused and column forms included.
//!
//! Within a documented tolerance:
//! - F32 `exp, log, tanh, sigmoid, erf, gelu` with `fast_math` on (the
//!   default): vectorized polynomial approximations, each with its error
//!   bound in its doc comment (`codegen`); together within [`TOLERANCE`]
//!   for every input, ±∞, NaN and subnormals included (`erf` is exactly ±1
//!   beyond its clamp, `exp` rounds onto the subnormal grid rather than
//!   flushing to 0). Checked by `tests/edge_values.rs` and the dense sweep
//!   in `tests/differential.rs`.
//! - Float reductions (sum, mean) over the last axis and matmul: the
//!   summation order differs (vectorized partial sums, FMA, K-blocking),
//!   which Section 4 §6 allows. The order is the generated code's, never
//!   LLVM's (no fast-math flag reaches the IR): a sum outside
//!   deterministic mode adds element `i` of the last reduced axis into lane
//!   `i mod 16` of 16 accumulators (the outer reduced axes in row-major
//!   order), then sums the lanes by halving (lane `j` += lane `j + h`, h =
//!   8, 4, 2, 1: `codegen::reduce::LANES`). So the quick and the optimized
//!   tier ([`jit::Tier`]), the shape-generic and the specialised kernels,
//!   and hosts of every vector width compute the same bits. Float `prod` keeps the interpreter's order
//!   in every mode and is bit-identical: a reordered product overflows to
//!   ±inf (and inf · 0 = NaN) where the in-order fold is finite, which no
//!   error bound covers. Reductions over other axes vectorize across
//!   the kept last axis and fold each output element in the interpreter's
//!   order: bit-identical in every mode. The difference from the interpreter is bounded by
//!   `2·(n+2)·2⁻²⁴·Σ|terms|` for a reduction or dot product of `n` terms
//!   (plus one rounding of the result for the narrow dtypes) when
//!   `Σ|terms|` is below `f32::MAX`; beyond that a partial sum may
//!   overflow in one order and not the other (±inf or NaN against a
//!   finite value). A BF16 matmul on AVX512-BF16 (`vdpbf16ps`, two
//!   steps of k per slot: `kernels/matmul/bf16.rs`) is within the same
//!   bound: it runs only where a scan of its operands shows that the
//!   instruction's flushing of subnormals cannot occur. With
//!   [`JitOptions::deterministic`] reductions, matmuls, convolutions and
//!   (with exact quantized numerics) `qmatmul` run in the interpreter's
//!   sequential order and are bit-identical to it, overflow included
//!   (`matmul/in_order.rs`: each output row updated term by term, one
//!   rounded multiply and one rounded add per term, vectorized across the
//!   row's columns). Either way the result does not depend on the thread
//!   count: threads split only output rows, never a reduction.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(all(feature = "llvm19", feature = "llvm14"))]
compile_error!("tc-llvm: enable exactly one of the features `llvm19` and `llvm14`");
#[cfg(not(any(feature = "llvm19", feature = "llvm14")))]
compile_error!("tc-llvm: enable one of the features `llvm19` (default) or `llvm14`");
// The selected LLVM's C API under one name.
#[cfg(feature = "llvm14")]
extern crate llvm_sys_140 as llvm_sys;
#[cfg(all(feature = "llvm19", not(feature = "llvm14")))]
extern crate llvm_sys_191 as llvm_sys;

mod bind_memo;
pub mod cache;
pub mod codegen;
pub mod ctx;
pub mod disk;
pub mod exec;
mod gather;
pub mod host;
pub mod inline;
pub mod jit;
pub mod kernels;
mod llvm_ir;
mod offpool;
mod options;
mod orc;
pub mod plan;
mod rt;
pub mod team;
pub mod threads;
pub mod tier;

pub use cache::{dry_run, enter_dry_run, in_dry_run, CacheConfig, Jit, Stats};
pub use exec::{compile, compile_with, CompiledFn};
pub use jit::release_target_machines;
pub use offpool::threads_started as compile_threads_started;
pub use options::{
    enter_quant_numerics, quant_numerics, with_quant_numerics, Error, JitOptions, TOLERANCE,
};
pub use team::session;
pub use tier::{finish_tier_ups, tier_ups};

use tc_core::ir::Function;
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;

/// Call `func` through the process-wide kernel cache ([`Jit::global`]):
/// bind σ with `tc_runtime::contract::bind`, find or compile the kernels,
/// run them. Functions the JIT cannot compile run on the interpreter (see
/// [`Stats::fallbacks`]). Calls in the body resolve through `resolve`.
pub fn call<'f>(
    func: &Function,
    args: &[Arg],
    resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
) -> Result<Tensor, tc_runtime::Error> {
    Jit::global().call(func, args, resolve)
}

/// [`call`] for a `'static` function: see [`Jit::call_static`].
pub fn call_static(
    func: &'static Function,
    args: &[Arg],
    resolve: &(dyn Fn(&str) -> Option<&'static Function> + Sync),
) -> Result<Tensor, tc_runtime::Error> {
    Jit::global().call_static(func, args, resolve)
}
