//! The host kernel library: the GEMMs and what serves them, called by the
//! executor's host steps (`exec`) with an explicit [`ExecCtx`].
//!
//! - [`matmul`] (f32 and narrow floats) and [`matmul_int`] (integers): packed,
//!   cache-tiled products over IR micro-kernels that `gemm_common` emits
//!   through the typed builder; `matmul/in_order.rs` the deterministic mode's
//!   products in the interpreter's order;
//! - `gemv`: products of up to four rows against a weight kept packed
//!   (x86-64 with AVX-512), and `sweep`: the few-row products over a packed
//!   weight's panels;
//! - [`prepack`]: the packed form of weights kept between calls;
//! - `readahead`: the next product's weight read into cache while the
//!   small kernels between two products run;
//! - [`conv`]: convolution as tiled im2col + the f32 GEMM.
//!
//! What a kernel may depend on besides its operands is in [`crate::ctx`]: the
//! tuning read once from the environment, the thread count and whether a
//! pool session is open.

pub mod attention;
pub mod conv;
pub(crate) mod gemm_common;
#[cfg(target_arch = "x86_64")]
pub(crate) mod gemv;
pub mod matmul;
pub mod matmul_int;
pub mod prepack;
pub(crate) mod readahead;
#[cfg(target_arch = "x86_64")]
pub(crate) mod sweep;

pub use crate::ctx::ExecCtx;
