//! tc-serve's integration tests but the embeddings server's, as one test
//! binary (`autotests = false` in Cargo.toml): each file named below is a
//! module of it, so the crate and its dependencies are linked once instead
//! of once per file. Every one of them that generates in this process sets
//! the process-wide kernel cache alike (generic kernels only, exact
//! numerics). `embeddings.rs` is a binary of its own: its batched and
//! unbatched embeddings must agree bit for bit, so no other test may
//! change that cache's settings while it runs. A new test file is declared
//! here or as a `[[test]]` of its own (the workspace's
//! `tests/architecture.rs` fails on one that is neither); `cargo test -p
//! tc-serve --test all -- generate::` runs one file's tests.

mod common;

// `pub`, as each file's items were at the root of a binary of its own:
// an item only macro-generated code uses is no dead-code warning.
pub mod batching;
pub mod generate;
pub mod openai_client;
pub mod process;
