//! tc-quant's integration tests as one test binary (`autotests = false` in
//! Cargo.toml): each file beside this one is a module of it, so the crate
//! and its dependencies are linked once instead of once per file. A new
//! test file is declared here (the workspace's `tests/architecture.rs`
//! fails on one that is not); `cargo test -p tc-quant --test all --
//! qmatmul::` runs one file's tests.

mod common;

// `pub`, as each file's items were at the root of a binary of its own:
// an item only macro-generated code uses is no dead-code warning.
pub mod dequant;
pub mod fast_real;
pub mod gguf_mutations;
pub mod qmatmul;
pub mod smollm2;
