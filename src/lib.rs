//! # tc — shape-checked tensor programs in Rust
//!
//! Tensor functions whose shapes, dtypes and refinements are proven at
//! compile time by a Z3-backed checker running inside a proc macro, and whose
//! contract (σ binding, refinements, `requires`, axioms) is re-checked at
//! every call. The surface syntax is documented in `docs/syntax.md`.
//!
//! ```ignore
//! use tc::{tensor_fn, Tensor};
//!
//! #[tensor_fn]
//! pub fn linear(x: Tensor![f32; B, I], w: Tensor![f32; I, O], b: Tensor![f32; O]) -> Tensor![f32; B, O] {
//!     matmul(x, w) + broadcast(b, [B, O])
//! }
//! ```
#![deny(missing_docs)]

// The expansion of `#[tensor_fn]` names `::tc::…`; this makes that path
// resolve inside this crate too.
extern crate self as tc;

pub use tc_core as core;
pub use tc_macros::{tensor_fn, tensor_module};
pub use tc_runtime as runtime;
pub use tc_runtime::{Error, Tensor};

/// A tensor type in a `#[tensor_fn]` signature or `let` annotation:
/// `Tensor![f32; B, S, D where D % 8 == 0]`.
///
/// The attribute reads the tokens (dtype; dims; `where` refinements) and
/// checks them; as a type, outside the attribute, it is [`Tensor`] — the
/// runtime value, whose shape is checked by the contract at each call.
#[macro_export]
macro_rules! Tensor {
    ($($tokens:tt)*) => {
        $crate::Tensor
    };
}
