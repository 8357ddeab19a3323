//! Block-quantized tensors for tc (Section 2 §18 of the spec).
//!
//! - [`gguf`]: a hardened, zero-copy reader for GGUF v2/v3 files held in a
//!   byte slice. Every offset, size and count is checked; hostile input is a
//!   typed [`gguf::GgufError`], never a panic or an unbounded allocation.
//! - [`quant`]: the ggml block formats (`Q8_0`, `Q4_0`, `Q4_1`, `Q4_K`,
//!   `Q6_K`), reference dequantization bit-exact with ggml, and fused
//!   quantized matmul kernels (scalar, AVX2 and AVX-512, chosen at run time).
//! - [`tiles`]: the AMX tile state (the OS's grant, configurations), for
//!   this crate's AMX-INT8 kernels and tc-llvm's AMX-BF16 products.
//!
//! The crate depends on no other tc crate, so the runtime and the examples
//! can both use it without a cycle.

#![deny(missing_docs)]

pub mod gguf;
pub mod quant;
pub mod tiles;

#[doc(hidden)]
pub mod testing;

pub use gguf::{GgmlType, Gguf, GgufError, MetaValue, TensorInfo};
pub use quant::{
    available_paths, dequantize, qmatmul, qmatmul_packed, qmatmul_with, Format, Numerics,
    PackedWeights, Path, QuantError,
};
