//! `#[tensor_fn]` and `#[tensor_module]`: tensor programs whose shapes are
//! proven at compile time.
//!
//! The attribute parses the signature (`Tensor![dt; dims where preds]`,
//! `requires(...)`, `axiom(...)`) and the body into the tc IR, runs the
//! tc-core checker (Z3, a context per checked function, answers kept in the
//! proof cache under `target/`: see `proof_cache.rs`) and
//! either expands to a normal Rust fn over `tc::Tensor` that runs the checked
//! IR, or reports every violation as a compile error at the offending tokens
//! with a counterexample. See `docs/syntax.md` in the repository.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

use proc_macro::TokenStream;

mod check;
mod codegen;
mod ctxt;
pub(crate) mod expand;
mod fn_cache;
mod limits;
mod literals;
mod lower;
mod params;
mod parse;
mod proof_cache;
mod spans;

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;

/// Run an expansion, turning a panic (a bug) into a compile error instead of
/// an ICE-like "proc macro panicked".
fn guarded(f: impl FnOnce() -> proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(ts) => ts,
        Err(_) => spans::err_span(
            tc_core::diag::codes::INTERNAL,
            proc_macro2::Span::call_site(),
            "internal error in tc-macros (please report): the expansion panicked",
        )
        .into_compile_error(),
    }
}

/// Check a tensor function's shapes at compile time and expand it to a Rust
/// fn over `tc::Tensor` returning `Result<tc::Tensor, tc::Error>`.
///
/// Arguments: `requires(pred, …)` (facts across parameters) and
/// `axiom(pred, …)` (assumed statically, re-checked at every call).
#[proc_macro_attribute]
pub fn tensor_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    let t = std::time::Instant::now();
    let label = tc_core::profile::enabled().then(|| fn_name(&item));
    proof_cache::install();
    let (attr, item) = (attr.into(), item.into());
    let out = guarded(|| expand::tensor_fn(attr, item)).into();
    if let Some(label) = label {
        tc_core::profile::add("macro.total", t.elapsed());
        tc_core::profile::flush(&label);
    }
    out
}

/// `tensor_fn:<name>` for the profile (`TC_PROFILE`): the ident after `fn`.
fn fn_name(item: &TokenStream) -> String {
    let mut toks = item.clone().into_iter();
    while let Some(t) = toks.next() {
        if matches!(&t, proc_macro::TokenTree::Ident(i) if i.to_string() == "fn") {
            if let Some(n) = toks.next() {
                return format!("tensor_fn:{n}");
            }
        }
    }
    "tensor_fn:?".to_string()
}

/// Check every `#[tensor_fn]` of an inline module together, so that calls
/// between them are checked (Section 2 §17), and make its integer `const`s
/// visible to their shapes.
#[proc_macro_attribute]
pub fn tensor_module(attr: TokenStream, item: TokenStream) -> TokenStream {
    proof_cache::install();
    let (attr, item) = (attr.into(), item.into());
    guarded(|| expand::tensor_module(attr, item)).into()
}

/// A weight struct: typed tensors loaded and checked together, taken by a
/// tensor fn as one parameter (docs/syntax.md "Weight structs"). It is
/// expanded by the enclosing `#[tensor_module]`, which also sees the tensor
/// fns that take it; on its own it is an error at the attribute.
#[proc_macro_attribute]
pub fn tensor_params(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    let _ = attr;
    let e = spans::err_span(
        tc_core::diag::codes::PARAMS_STRUCT,
        proc_macro2::Span::call_site(),
        "`#[tensor_params]` structs live in a `#[tensor_module]`, which checks the tensor fns that take them",
    )
    .into_compile_error();
    quote::quote!(#e #item).into()
}
