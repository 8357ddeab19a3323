//! The tc runtime: tensors of all 11 dtypes, bit-exact casts (Section 2 §5),
//! the Section 4 reference interpreter and the runtime contract.
#![deny(missing_docs)]

pub mod error;

pub use error::{Error, Result};
