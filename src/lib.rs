//! tc facade.
pub use tc_core as core;
