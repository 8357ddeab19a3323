//! The span table: tc-core diagnostics carry opaque [`SpanId`]s; the macro
//! allocates them here (one per token range it may want to point at) and maps
//! them back to `proc_macro2` spans when it renders errors.
//!
//! A range is stored as its first and last token's spans. On stable Rust a
//! `Span` cannot be joined, but `syn::Error::new_spanned` takes the first and
//! last token of what it is given, so an error built from a two-token stream
//! with those spans underlines the whole range (`D / H`, not just `D`).

use proc_macro2::{Punct, Spacing, Span, TokenStream, TokenTree};
use quote::ToTokens;
use tc_core::SpanId;

/// Token ranges, indexed by `SpanId.0`.
#[derive(Default)]
pub struct SpanTable {
    spans: Vec<(Span, Span)>,
}

/// A token range `first ..= last`.
#[derive(Clone, Copy)]
pub struct SpanRange(pub Span, pub Span);

impl ToTokens for SpanRange {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let mut a = Punct::new('#', Spacing::Alone);
        a.set_span(self.0);
        let mut b = Punct::new('#', Spacing::Alone);
        b.set_span(self.1);
        tokens.extend([TokenTree::Punct(a), TokenTree::Punct(b)]);
    }
}

/// First and last token span of anything printable.
pub fn range_of(t: &dyn ToTokens) -> SpanRange {
    let ts = t.to_token_stream();
    let mut it = ts.into_iter();
    let first = it.next().map(|t| t.span()).unwrap_or_else(Span::call_site);
    let last = it.last().map(|t| t.span()).unwrap_or(first);
    SpanRange(first, last)
}

impl SpanTable {
    /// Record the range of `t`.
    pub fn alloc(&mut self, t: &dyn ToTokens) -> SpanId {
        self.alloc_range(range_of(t))
    }

    /// Record an explicit range.
    pub fn alloc_range(&mut self, r: SpanRange) -> SpanId {
        self.spans.push((r.0, r.1));
        SpanId((self.spans.len() - 1) as u32)
    }

    /// The range behind an id (call site for an id this table never issued).
    pub fn get(&self, id: SpanId) -> SpanRange {
        match self.spans.get(id.0 as usize) {
            Some((a, b)) => SpanRange(*a, *b),
            None => SpanRange(Span::call_site(), Span::call_site()),
        }
    }

    /// An error at an id's range.
    pub fn error(&self, id: SpanId, msg: impl std::fmt::Display) -> syn::Error {
        syn::Error::new_spanned(self.get(id), msg)
    }
}

/// An error spanning `t`.
pub fn err_at(t: &dyn ToTokens, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new_spanned(range_of(t), msg)
}

/// Combine many errors into one (None when there are none).
pub fn combine(errors: impl IntoIterator<Item = syn::Error>) -> Option<syn::Error> {
    let mut out: Option<syn::Error> = None;
    for e in errors {
        match &mut out {
            Some(acc) => acc.combine(e),
            None => out = Some(e),
        }
    }
    out
}
