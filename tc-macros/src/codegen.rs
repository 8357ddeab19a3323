//! Rust expressions for the dims and dtypes of weight structs' checked
//! `load` (`params.rs`). A tensor fn's IR is not rebuilt from constructor
//! code: it is embedded as bytes (`tc_core::embed`).

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::quote;
use tc_core::dim::Atom;
use tc_core::{Dim, Dtype};

fn variant(x: &impl std::fmt::Debug) -> Ident {
    Ident::new(&format!("{x:?}"), Span::call_site())
}

fn i64_lit(n: i64) -> TokenStream {
    if n == i64::MIN {
        quote!(::core::primitive::i64::MIN)
    } else if n < 0 {
        let m = Literal::i64_suffixed(-n);
        quote!((-#m))
    } else {
        let m = Literal::i64_suffixed(n);
        quote!(#m)
    }
}

/// Constructor of a dtype (`__tc::Dtype::…`).
pub fn dtype(d: Dtype) -> TokenStream {
    let v = variant(&d);
    quote!(__tc::Dtype::#v)
}

fn atom(a: &Atom) -> TokenStream {
    match a {
        Atom::Var(v) => {
            let l = Literal::string(v);
            quote!(__tc::Dim::var(#l))
        }
        Atom::Div(x, y) => {
            let (x, y) = (dim(x), dim(y));
            quote!(#x.div(&#y))
        }
        Atom::Mod(x, y) => {
            let (x, y) = (dim(x), dim(y));
            quote!(#x.rem(&#y))
        }
    }
}

/// Constructor of a dim.
pub fn dim(d: &Dim) -> TokenStream {
    let mut terms = Vec::new();
    for (m, c) in d.terms() {
        let mut t = if c == 1 && !m.is_empty() {
            None
        } else {
            let c = i64_lit(c);
            Some(quote!(__tc::Dim::c(#c)))
        };
        for a in m {
            let a = atom(a);
            t = Some(match t {
                None => a,
                Some(t) => quote!((#t * #a)),
            });
        }
        terms.push(t.unwrap_or_else(|| quote!(__tc::Dim::c(0i64))));
    }
    match terms.len() {
        0 => quote!(__tc::Dim::c(0i64)),
        _ => {
            let first = &terms[0];
            let rest = &terms[1..];
            quote!((#first #(+ #rest)*))
        }
    }
}
