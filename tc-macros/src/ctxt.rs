//! The macro's error sink, as serde_derive's `Ctxt`: every stage (parse,
//! weight structs, lowering, checking, literals) pushes its errors here
//! instead of returning vectors of its own, and the expansion turns what
//! the sink holds into `compile_error!`s in one place ([`Ctxt::into_tokens`]),
//! so every error of an expansion reaches the build, each with a code.

use std::cell::RefCell;

use proc_macro2::TokenStream;
use tc_core::diag::codes;

/// Errors collected so far. Shared by reference: a stage takes `&Ctxt`.
#[derive(Default)]
pub struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// An empty sink.
    pub fn new() -> Ctxt {
        Ctxt::default()
    }

    /// Record one error.
    pub fn push(&self, e: syn::Error) {
        self.errors.borrow_mut().push(e);
    }

    /// Record several errors.
    pub fn extend(&self, es: impl IntoIterator<Item = syn::Error>) {
        self.errors.borrow_mut().extend(es);
    }

    /// Move every error of `other` here.
    pub fn absorb(&self, other: Ctxt) {
        self.extend(other.errors.into_inner());
    }

    /// How many errors were recorded: a stage compares counts to learn
    /// whether it added any.
    pub fn len(&self) -> usize {
        self.errors.borrow().len()
    }

    /// No error recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The errors as `compile_error!` invocations. A message still without
    /// a code (one `syn`'s parser wrote for input that is not the expected
    /// syntax) gets E0703 here.
    pub fn into_tokens(self) -> TokenStream {
        crate::spans::combine(
            self.errors
                .into_inner()
                .into_iter()
                .map(|e| crate::spans::recode(codes::ITEM_FORM, e)),
        )
        .map(|e| e.into_compile_error())
        .unwrap_or_default()
    }
}
