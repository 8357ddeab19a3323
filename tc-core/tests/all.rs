//! tc-core's integration tests as one test binary (`autotests = false` in
//! Cargo.toml): each file beside this one is a module of it, so the crate
//! and its dependencies are linked once instead of once per file, and the
//! harness keeps both threads busy across files. A new test file is
//! declared here (the workspace's `tests/architecture.rs` fails on one
//! that is not); `cargo test -p tc-core --test all -- dims::` runs one
//! file's tests.

// `pub`, as each file's items were at the root of a binary of its own:
// an item only macro-generated code uses is no dead-code warning.
pub mod compound_inference;
pub mod determinism;
pub mod dim_params;
pub mod dims;
pub mod error_index;
pub mod help_texts;
pub mod op_rules;
pub mod props;
pub mod section_examples;
pub mod signature_vars;
pub mod slice_lengths;
pub mod smoke;
pub mod solver_nonlinear;
pub mod volumes;
