//! The README as a doctest: `cargo test --doc` compiles and runs its quick
//! start and checks that its shape-error example fails to compile, so the
//! first code a user copies is known to work. Only compiled under
//! `cfg(doctest)`.
#![doc = include_str!("../README.md")]
