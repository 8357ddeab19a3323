//! # tc — shape-checked tensor programs in Rust
//!
//! Tensor functions whose shapes, dtypes and refinements are proven at
//! compile time by a Z3-backed checker running inside a proc macro, and whose
//! contract (σ binding, refinements, `requires`, axioms) is re-checked at
//! every call. The surface syntax is documented in `docs/syntax.md`.
//!
//! ## Quick start
//!
//! A `#[tensor_fn]` is checked when `cargo build` expands it; the fn it
//! generates re-checks its contract on every call (σ binding, dtypes,
//! refinements) and runs on the JIT:
//!
//! ```
//! use tc::{tensor_fn, Tensor};
//!
//! #[tensor_fn]
//! pub fn linear(
//!     x: Tensor![f32; B, I],
//!     w: Tensor![f32; I, O],
//!     b: Tensor![f32; O],
//! ) -> Tensor![f32; B, O] {
//!     matmul(x, w) + broadcast(b, [B, O])
//! }
//!
//! # fn main() -> Result<(), tc::Error> {
//! let x = Tensor::from_vec(&[2, 3], vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let w = Tensor::from_vec(&[3, 1], vec![1f32, 0.0, -1.0])?;
//! let b = Tensor::from_vec(&[1], vec![0.5f32])?;
//! let y = linear(x.clone(), w, b.clone())?; // σ = {B: 2, I: 3, O: 1}
//! assert_eq!(y.shape(), &[2, 1]);
//! assert_eq!(y.to_vec::<f32>()?, vec![-1.5, -1.5]);
//!
//! // A weight whose rows do not match `I` is a typed error naming the
//! // parameter and the dimension, never a panic or a wrong answer.
//! let w4 = Tensor::from_vec(&[4, 1], vec![0f32; 4])?;
//! let err = linear(x, w4, b).unwrap_err();
//! assert!(err.to_string().contains('w'), "{err}");
//! # Ok(())
//! # }
//! ```
//!
//! A shape mistake is a compile error with a counterexample: here
//! `matmul(x, w)` needs `w`'s first dim to be `I`, and it is `O`.
//!
//! ```compile_fail
//! use tc::{tensor_fn, Tensor};
//!
//! #[tensor_fn]
//! pub fn linear(x: Tensor![f32; B, I], w: Tensor![f32; O, I]) -> Tensor![f32; B, O] {
//!     matmul(x, w)
//! }
//! # fn main() {}
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

// The expansion of `#[tensor_fn]` names `::tc::…`; this makes that path
// resolve inside this crate too.
extern crate self as tc;

pub use tc_core as core;
pub use tc_llvm as llvm;
pub use tc_llvm::with_quant_numerics;
pub use tc_macros::{tensor_fn, tensor_module, tensor_params};
pub use tc_runtime as runtime;
pub use tc_runtime::{Error, Tensor};

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

use tc_core::ir::Function;
use tc_runtime::contract::Arg;

#[cfg(doctest)]
mod guide_doctest;
#[cfg(doctest)]
mod readme_doctest;

/// Which engine runs checked functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// JIT-compiled LLVM kernels, cached per shape substitution σ (the default).
    Jit,
    /// The Section 4 reference interpreter (the oracle; slow).
    Interpreter,
}

static BACKEND: AtomicU8 = AtomicU8::new(u8::MAX);

thread_local! {
    static THREAD_BACKEND: Cell<Option<Backend>> = const { Cell::new(None) };
}

fn decode(b: u8) -> Option<Backend> {
    match b {
        0 => Some(Backend::Jit),
        1 => Some(Backend::Interpreter),
        _ => None,
    }
}

/// The backend calls on this thread use: a [`with_backend`] override, else
/// the process-wide [`set_backend`] choice, else `TC_BACKEND=interp|jit`
/// from the environment, else [`Backend::Jit`].
pub fn backend() -> Backend {
    if let Some(b) = THREAD_BACKEND.with(Cell::get) {
        return b;
    }
    if let Some(b) = decode(BACKEND.load(Ordering::Relaxed)) {
        return b;
    }
    let b = match tc_core::env::TC_BACKEND.get().as_deref() {
        Some("interp") | Some("interpreter") => Backend::Interpreter,
        _ => Backend::Jit,
    };
    BACKEND.store(b as u8, Ordering::Relaxed);
    b
}

/// Choose the backend for the whole process.
pub fn set_backend(b: Backend) {
    BACKEND.store(b as u8, Ordering::Relaxed);
}

/// Run `f` with calls on this thread going to backend `b` (e.g. to compare
/// the JIT against the interpreter on the same inputs).
pub fn with_backend<R>(b: Backend, f: impl FnOnce() -> R) -> R {
    with_thread_backend(Some(b), f)
}

fn with_thread_backend<R>(b: Option<Backend>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Backend>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD_BACKEND.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(THREAD_BACKEND.with(|c| c.replace(b)));
    f()
}

/// Run `f` on a pool worker with the pool's other workers kept awake until
/// it returns ([`tc_llvm::session`]: a model's whole forward pass as one
/// hop onto the pool). What this thread chose for its calls goes with `f`
/// ([`CallContext`]).
pub fn session<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let cx = CallContext::here();
    tc_llvm::session(move || cx.enter(f))
}

/// What a thread chose for the calls it makes: its [`with_backend`], its
/// [`with_quant_numerics`], and whether they run dry
/// ([`llvm::dry_run`]: compiled ahead, not computed). All three are
/// per thread, so code that hands tensor-fn calls to other threads (a
/// rayon `par_iter` over a batch's sequences) takes them along: `let cx =
/// CallContext::here();` on this thread, `cx.enter(|| …)` on the other,
/// as [`session`] does. Otherwise those calls run on the process-wide
/// backend and numerics, and a warm-up's calls on other threads compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallContext {
    backend: Option<Backend>,
    numerics: Option<tc_runtime::quant::Numerics>,
    dry: bool,
}

impl CallContext {
    /// This thread's choices.
    pub fn here() -> CallContext {
        CallContext {
            backend: THREAD_BACKEND.with(Cell::get),
            numerics: tc_llvm::quant_numerics(),
            dry: tc_llvm::in_dry_run(),
        }
    }

    /// Run `f` on this thread with these choices (restored after).
    pub fn enter<R>(self, f: impl FnOnce() -> R) -> R {
        with_thread_backend(self.backend, || {
            tc_llvm::enter_quant_numerics(self.numerics, || tc_llvm::enter_dry_run(self.dry, f))
        })
    }
}

/// Statistics of the process-wide kernel cache (hits, misses, compiles,
/// compile time, evictions, interpreter fallbacks).
pub fn kernel_cache_stats() -> tc_llvm::Stats {
    tc_llvm::Jit::global().stats()
}

/// What the code generated by `#[tensor_fn]` calls: run a checked function on
/// the current [`backend`]. The runtime contract (σ binding, dtypes, every
/// refinement, `requires` and axiom) is checked first on both backends.
pub fn call<'f>(
    func: &Function,
    args: &[Arg],
    resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
) -> Result<Tensor, Error> {
    match backend() {
        Backend::Jit => tc_llvm::call(func, args, resolve),
        Backend::Interpreter => tc_runtime::exec::call(func, args, resolve),
    }
}

/// [`call`] for `'static` IR — what `#[tensor_fn]` expansions call (the IR
/// is embedded as bytes and lives, decoded, in a `OnceLock`:
/// [`core::embed`]): the JIT cache identifies the function by its address
/// alone, so a cache hit does not compare the whole IR. Embedded IR that a
/// load refused is [`core::concrete::RuleError::Malformed`].
pub fn call_static(
    func: Result<&'static Function, &'static tc_core::embed::EmbedError>,
    args: &[Arg],
    resolve: &(dyn Fn(&str) -> Option<&'static Function> + Sync),
) -> Result<Tensor, Error> {
    let func = func.map_err(|e| Error::malformed(e.to_string()))?;
    match backend() {
        Backend::Jit => tc_llvm::call_static(func, args, resolve),
        Backend::Interpreter => tc_runtime::exec::call(func, args, resolve),
    }
}

/// What a `#[tensor_fn]` expansion calls: `args` (its parameters, moved
/// into a tuple) on the function embedded in `ir`, as [`call_static`]. The
/// only generic step is flattening the tuple, instantiated once per
/// parameter-type list, so each tensor fn's own code is this one call.
#[doc(hidden)]
pub fn call_embedded<A: tc_runtime::contract::IntoArgs>(
    ir: &'static tc_core::embed::Embedded,
    args: A,
    resolve: &tc_core::embed::Resolver,
) -> Result<Tensor, Error> {
    call_static(ir.get(), &tc_runtime::contract::into_args(args), resolve)
}

/// A tensor type in a `#[tensor_fn]` signature or `let` annotation:
/// `Tensor![f32; B, S, D where D % 8 == 0]`.
///
/// The attribute reads the tokens (dtype; dims; `where` refinements) and
/// checks them; as a type, outside the attribute, it is [`Tensor`](struct@Tensor) — the
/// runtime value, whose shape is checked by the contract at each call.
#[macro_export]
macro_rules! Tensor {
    ($($tokens:tt)*) => {
        $crate::Tensor
    };
}

/// A dim parameter's type: `heads: Dim![H]` binds the shape variable `H`
/// from a size passed at the call (Section 1 §6, binding site 1), as one dim
/// of a tensor parameter would, with no witness tensor.
///
/// The attribute reads the dim; as a type, outside the attribute, it is
/// `usize`, the size the caller passes (checked by the contract against σ,
/// `requires` and the dim range at every call).
#[macro_export]
macro_rules! Dim {
    ($($tokens:tt)*) => {
        ::core::primitive::usize
    };
}
