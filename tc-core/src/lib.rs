//! The tc calculus: dtypes, symbolic dims, refinements, Γ, the Z3-backed
//! solver, subtyping, operation typing, the core IR and its bidirectional
//! checker (spec Sections 1–3).
//!
//! Nothing here depends on `proc_macro`: diagnostics carry opaque
//! [`diag::SpanId`]s, so every rule is testable with plain `#[test]`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod build;
pub mod callgraph;
pub mod check;
pub mod concrete;
pub mod ctx;
pub mod diag;
pub mod dim;
pub mod dtype;
pub mod embed;
pub mod env;
pub mod invert;
pub mod ir;
pub mod pred;
pub mod profile;
pub mod size;
pub mod solver;
pub mod subtype;
pub mod types;

pub use ctx::Ctx;
pub use diag::{Counterexample, Diagnostic, SpanId};
pub use dim::{Dim, Sigma};
pub use dtype::{Dtype, DtypeClass};
pub use pred::{CmpOp, Pred};
pub use types::{FnType, TensorType, Type};
