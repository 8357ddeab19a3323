//! The guide (`docs/guide/`) as doctests: each chapter is the documentation
//! of one item here, so `cargo test --doc` compiles every Rust block of the
//! guide, runs those not marked `no_run`, and checks that every
//! `compile_fail` block fails to compile. Only compiled under `cfg(doctest)`.

#[doc = include_str!("../docs/guide/README.md")]
pub struct Index;

#[doc = include_str!("../docs/guide/01-first-layer.md")]
pub struct FirstLayer;

#[doc = include_str!("../docs/guide/02-shape-errors.md")]
pub struct ShapeErrors;

#[doc = include_str!("../docs/guide/03-dims-and-requires.md")]
pub struct DimsAndRequires;

#[doc = include_str!("../docs/guide/04-weights.md")]
pub struct Weights;

#[doc = include_str!("../docs/guide/05-jit-and-interpreter.md")]
pub struct JitAndInterpreter;

#[doc = include_str!("../docs/guide/06-serving.md")]
pub struct Serving;
