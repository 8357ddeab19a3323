//! tc-runtime's integration tests as one test binary (`autotests = false`
//! in Cargo.toml): each file beside this one is a module of it, so the
//! crate and its dependencies are linked once instead of once per file,
//! and the harness keeps both threads busy across files. A new test file
//! is declared here (the workspace's `tests/architecture.rs` fails on one
//! that is not); `cargo test -p tc-runtime --test all -- interp::` runs one
//! file's tests.

mod support;

// `pub`, as each file's items were at the root of a binary of its own:
// an item only macro-generated code uses is no dead-code warning.
pub mod casts;
pub mod contract;
pub mod dim_args;
pub mod interp;
pub mod oom;
pub mod props;
pub mod tensor;
pub mod update_slice;
// The checker decides with Z3, a C library that Miri (`scripts/miri.sh`)
// cannot call into.
#[cfg(not(miri))]
pub mod wf_agreement;
