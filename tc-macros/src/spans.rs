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
        match self.spans.get(id.index()) {
            Some((a, b)) => SpanRange(*a, *b),
            None => SpanRange(Span::call_site(), Span::call_site()),
        }
    }

    /// An error at an id's range.
    pub fn error(&self, id: SpanId, msg: impl std::fmt::Display) -> syn::Error {
        syn::Error::new_spanned(self.get(id), msg)
    }
}

/// A front-end error spanning `t`: `[code] message`, then the pointer to
/// the code's entry in the error index. Every error the macros report is
/// built here, by [`err_span`], or by `check::render` for the checker's
/// diagnostics, so none reaches the user without a code.
pub fn err_at(code: &str, t: &dyn ToTokens, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new_spanned(range_of(t), coded(code, msg))
}

/// [`err_at`] with a `help:` line before the index pointer.
pub fn err_help(
    code: &str,
    t: &dyn ToTokens,
    msg: impl std::fmt::Display,
    help: &str,
) -> syn::Error {
    let text = format!("[{code}] {msg}{}", help_line(Some(help), code));
    syn::Error::new_spanned(range_of(t), text)
}

/// [`err_at`] at one span.
pub fn err_span(code: &str, span: Span, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new(span, coded(code, msg))
}

/// Every message of `e` with a code: a message built by [`err_at`] (or the
/// checker's renderer) keeps its own; one from `syn`'s parser (a token
/// stream that is not the expected syntax) gets `code`.
pub fn recode(code: &str, e: syn::Error) -> syn::Error {
    combine(e.into_iter().map(|m| {
        if is_coded(&m.to_string()) {
            m
        } else {
            err_span(code, m.span(), m)
        }
    }))
    .unwrap_or_else(|| err_span(code, Span::call_site(), "malformed input"))
}

/// Starts with `[Ennnn]`.
pub fn is_coded(msg: &str) -> bool {
    let b = msg.as_bytes();
    b.len() >= 7
        && b[0] == b'['
        && b[1] == b'E'
        && b[2..6].iter().all(u8::is_ascii_digit)
        && b[6] == b']'
}

fn coded(code: &str, msg: impl std::fmt::Display) -> String {
    format!("[{code}] {msg}{}", help_line(None, code))
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

/// `help: …; see docs/errors.md#e0204` (or just the pointer).
pub fn help_line(help: Option<&str>, code: &str) -> String {
    let anchor = tc_core::diag::codes::doc_anchor(code);
    match help {
        Some(h) => format!("\n  help: {h}; see {anchor}"),
        None => format!("\n  help: see {anchor}"),
    }
}
