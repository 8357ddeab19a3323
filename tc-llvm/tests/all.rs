//! tc-llvm's integration tests as one test binary (`autotests = false` in
//! Cargo.toml), but those that need a process of their own: each file
//! named below is a module of it, so the crate, LLVM and the dependencies
//! are linked once instead of once per file, and the harness keeps both
//! threads busy across files.
//!
//! Binaries of their own (`[[test]]`s in Cargo.toml), each because of
//! state one process shares: `avx2_host.rs` describes the host as AVX2-only
//! (`TC_HOST_AVX2`) before anything else; the three `gemm_kernels_*.rs`
//! count the compiles of a fresh process-wide kernel cache; `matmul_columns`,
//! `matmul_edges`, `matmul_int`, `matmul_paths`, `matmul_paths_prop` and
//! `pack_wide` toggle the GEMM's process-wide path switches, which would
//! move other tests off the path they mean to take; `prepack.rs` counts
//! the bytes the process read ahead and `streaming.rs` the hits of the
//! process's storage pool, which other tests would add to; `tiers.rs`
//! turns the persistent kernel cache off before anything compiles and
//! counts the process's tier-ups.
//!
//! A new test file is declared here or as a `[[test]]`
//! (`tests/architecture.rs` at the workspace root fails on one that is
//! neither); `cargo test -p tc-llvm --test all -- soundness::` runs one
//! file's tests.

mod util;

// `pub`, as each file's items were at the root of a binary of its own:
// an item only macro-generated code uses is no dead-code warning.
pub mod cache;
pub mod cache_entry_kinds;
pub mod compile_reentrance;
pub mod concat_empty;
pub mod differential;
pub mod edge_values;
pub mod fusion_asm;
pub mod gemv;
pub mod in_order;
pub mod inline;
pub mod matmul_views;
pub mod model_patterns;
pub mod nan_canonical;
pub mod object_code_identity;
pub mod persistent_cache;
pub mod pinned_pool;
pub mod proptest_graphs;
pub mod reduce_axes;
pub mod sdpa;
pub mod slice_overflow;
pub mod smoke;
pub mod soundness;
pub mod split_compile;
pub mod sweep;
pub mod topk_kernel;
pub mod window_ops;
