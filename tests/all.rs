//! tc's integration tests as one test binary (`autotests = false` in
//! Cargo.toml), but those that need a process of their own: each file
//! named below is a module of it, so tc, LLVM and the dependencies are
//! linked once instead of once per file, and the harness keeps both
//! threads busy across files. Binaries of their own (`[[test]]`s in
//! Cargo.toml): `ui.rs` (trybuild), and the files whose tests set or count
//! the process-wide kernel cache (`dry_run.rs`, `gpt2_decode.rs`,
//! `quantized.rs`, `smollm2.rs`, which also bounds the peak resident set of
//! its own executable). A new test file is declared here or as a `[[test]]`
//! (`architecture.rs` fails on one that is neither); `cargo test --test all
//! -- layers::` runs one file's tests.

/// The soundness fuzzer's generator, shared by `concrete_rule.rs` and
/// `fuzz.rs`.
#[path = "../examples/fuzz/gen.rs"]
mod gen;

/// The macro fuzzer's renderer, for `fuzz_macro.rs`.
#[path = "../examples/fuzz/render.rs"]
mod render;

// `pub`, as each file's items were at the root of a binary of its own:
// an item only macro-generated code uses is no dead-code warning.
pub mod architecture;
pub mod compound_dims;
pub mod concrete_rule;
pub mod dim_params;
pub mod fuzz;
pub mod fuzz_macro;
pub mod layers;
pub mod minilm;
pub mod real_models;
pub mod window_ops_reference;
