//! Weight structs (issue #12; docs/syntax.md "Weight structs").
//!
//! Inside a `#[tensor_module]`, `#[tensor_params] struct Layer { wq:
//! Tensor![f32; HIDDEN, HIDDEN], … }` declares a group of typed tensors. A
//! tensor fn of the module may take it as one parameter (`layer: Layer`) and
//! read its fields (`layer.wq`), and pass it on whole to another tensor fn
//! (`encoder_layer(h, layer, eps)`).
//!
//! Why a rewrite before the pipeline rather than a new kind of parameter:
//! a struct parameter *is* its fields, each with a type the checker already
//! knows how to treat. So the fn is checked as if it took `layer__wq,
//! layer__bq, …` (this module flattens the signature and rewrites `layer.wq`
//! and a bare `layer` argument at the token level, with the user's spans),
//! the IR names those parameters `layer.wq` for run-time errors, and the
//! emitted Rust fn takes `layer: &Layer` and passes its fields in order.
//! The struct itself becomes plain Rust (`pub wq: tc::Tensor`) with a
//! `load(&tensors, prefix)` that checks every field's dtype and shape
//! (`tc::runtime::params::Binder`) before the struct exists.

use std::collections::BTreeMap;

use proc_macro2::{Delimiter, Group, Ident, Punct, Spacing, TokenStream, TokenTree};
use quote::{format_ident, quote, ToTokens};
use syn::{FnArg, Item, ItemFn, ItemStruct, Pat, Type};
use tc_core::{Dim, TensorType};

use crate::ctxt::Ctxt;
use crate::parse::{self, AnyName, Consts};
use crate::spans::{err_at, SpanTable};
use tc_core::diag::codes;

/// One field of a weight struct.
pub struct Field {
    /// Its name.
    pub ident: Ident,
    /// Its type as written (`Tensor![…]`).
    pub ty: Type,
    /// Its parsed type.
    pub tensor: TensorType,
    /// The tensor's name in the file, under the load prefix.
    pub file_name: String,
}

/// A `#[tensor_params]` struct.
pub struct ParamStruct {
    /// The struct without the tc attributes.
    pub item: ItemStruct,
    /// Its fields, in order (the flattened parameters' order).
    pub fields: Vec<Field>,
}

/// The module's weight structs by name.
pub type Structs = BTreeMap<String, ParamStruct>;

fn is_attr(a: &syn::Attribute, name: &str) -> bool {
    a.path().segments.last().is_some_and(|s| s.ident == name)
}

/// Is this item a `#[tensor_params]` struct?
pub fn is_params_struct(it: &Item) -> bool {
    matches!(it, Item::Struct(s) if s.attrs.iter().any(|a| is_attr(a, "tensor_params")))
}

/// Every `#[tensor_params]` struct of the module, its fields parsed.
pub fn collect(items: &[Item], spans: &mut SpanTable, cx: &Ctxt) -> Structs {
    let mut out = Structs::new();
    for it in items {
        let Item::Struct(s) = it else { continue };
        if !is_params_struct(it) {
            continue;
        }
        if !s.generics.params.is_empty() {
            cx.push(err_at(
                codes::PARAMS_STRUCT,
                &s.generics,
                "a `#[tensor_params]` struct takes no generics",
            ));
            continue;
        }
        let mut item = s.clone();
        item.attrs.retain(|a| !is_attr(a, "tensor_params"));
        let syn::Fields::Named(named) = &s.fields else {
            cx.push(err_at(
                codes::PARAMS_STRUCT,
                &s.ident,
                "a `#[tensor_params]` struct has named fields: `wq: Tensor![f32; D, D]`",
            ));
            continue;
        };
        let mut fields = Vec::new();
        for f in &named.named {
            if let Some(field) = field(f, spans, cx) {
                fields.push(field);
            }
        }
        out.insert(s.ident.to_string(), ParamStruct { item, fields });
    }
    out
}

fn field(f: &syn::Field, spans: &mut SpanTable, cx: &Ctxt) -> Option<Field> {
    let ident = f.ident.clone()?;
    let Some(toks) = parse::tensor_macro(&f.ty) else {
        cx.push(err_at(
            codes::PARAMS_STRUCT,
            &f.ty,
            "a `#[tensor_params]` field is a tensor: `Tensor![f32; D, D]`",
        ));
        return None;
    };
    let tensor = match parse::tensor_type(toks, &AnyName, spans) {
        Ok(p) => p.ty,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let mut file_name = ident.to_string();
    for a in f.attrs.iter().filter(|a| is_attr(a, "tensor_name")) {
        match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => file_name = s.value(),
                other => cx.push(err_at(
                    codes::PARAMS_STRUCT,
                    other,
                    "expected a string: `#[tensor_name = \"attention.self.query.weight\"]`",
                )),
            },
            _ => cx.push(err_at(
                codes::PARAMS_STRUCT,
                a,
                "expected `#[tensor_name = \"…\"]`",
            )),
        }
    }
    Some(Field {
        ident,
        ty: f.ty.clone(),
        tensor,
        file_name,
    })
}

/// The struct as plain Rust, and its `load`.
pub fn expand_struct(ps: &ParamStruct, consts: &Consts) -> TokenStream {
    let mut item = ps.item.clone();
    if let syn::Fields::Named(named) = &mut item.fields {
        for f in named.named.iter_mut() {
            f.attrs.retain(|a| !is_attr(a, "tensor_name"));
            f.ty = syn::parse_quote!(::tc::Tensor);
        }
    }
    let name = &item.ident;
    let subst: BTreeMap<String, Dim> = consts
        .iter()
        .map(|(k, v)| (k.clone(), Dim::c(*v)))
        .collect();
    let takes = ps.fields.iter().map(|f| {
        let id = &f.ident;
        let file = &f.file_name;
        let dt = crate::codegen::dtype(f.tensor.dtype);
        let dims = f.tensor.shape.iter().map(|d| {
            // Module constants are numbers here; a failed substitution (an
            // overflow) keeps the dim, and the checker reports it.
            crate::codegen::dim(&d.checked_subst(&subst).unwrap_or_else(|_| d.clone()))
        });
        quote!(#id: __b.take(tensors, #file, #dt, &[#(#dims),*])?,)
    });
    let doc = format!(
        " Load every field from `tensors` by its name under `prefix` (`\"\"`: none), checking its dtype and shape \
         against `{name}`'s declaration (a typed error naming the tensor otherwise)."
    );
    quote! {
        #item
        impl #name {
            #[doc = #doc]
            #[allow(dead_code)]
            pub fn load(
                tensors: &::std::collections::BTreeMap<::std::string::String, ::tc::Tensor>,
                prefix: &str,
            ) -> ::core::result::Result<Self, ::tc::Error> {
                #[allow(unused_imports)]
                mod __tc {
                    pub use ::tc::core::dim::Dim;
                    pub use ::tc::core::dtype::Dtype;
                }
                let mut __b = ::tc::runtime::params::Binder::new(prefix);
                ::core::result::Result::Ok(#name { #(#takes)* })
            }
        }
    }
}

/// A struct parameter of a tensor fn: its name and its struct's fields.
pub struct StructParam<'s> {
    /// The parameter.
    pub name: Ident,
    /// Its struct.
    pub strukt: &'s ParamStruct,
}

/// `layer` + `wq` → `layer__wq`, spanned at the field.
fn mangle(param: &Ident, field: &Ident) -> Ident {
    format_ident!("{}__{}", param, field, span = field.span())
}

/// The struct a parameter's type names, if any.
pub fn struct_of<'s>(ty: &Type, structs: &'s Structs) -> Option<&'s ParamStruct> {
    match ty {
        Type::Path(p) if p.qself.is_none() => structs.get(&p.path.get_ident()?.to_string()),
        Type::Reference(r) => struct_of(&r.elem, structs),
        _ => None,
    }
}

/// The fn as the checker sees it: struct parameters flattened into their
/// fields, field reads and whole-struct arguments rewritten; `None` when it
/// takes no struct. Also the IR names of the flattened parameters
/// (`layer__wq` → `layer.wq`).
pub fn flatten_fn(
    item: &ItemFn,
    structs: &Structs,
    cx: &Ctxt,
) -> Option<(ItemFn, BTreeMap<String, String>)> {
    let mut sps = Vec::new();
    let mut inputs: Vec<TokenStream> = Vec::new();
    let mut names = BTreeMap::new();
    for arg in &item.sig.inputs {
        let FnArg::Typed(pt) = arg else {
            inputs.push(arg.to_token_stream());
            continue;
        };
        match (struct_of(&pt.ty, structs), &*pt.pat) {
            (Some(s), Pat::Ident(pi)) => {
                for f in &s.fields {
                    let m = mangle(&pi.ident, &f.ident);
                    names.insert(m.to_string(), format!("{}.{}", pi.ident, f.ident));
                    let ty = &f.ty;
                    inputs.push(quote!(#m: #ty));
                }
                sps.push(StructParam {
                    name: pi.ident.clone(),
                    strukt: s,
                });
            }
            _ => inputs.push(arg.to_token_stream()),
        }
    }
    // A struct passed on whole from a caller's own struct parameter is
    // rewritten even when the fn takes no struct itself; only fns that
    // mention none are left alone.
    if sps.is_empty() {
        return None;
    }
    let body = rewrite(item.block.to_token_stream(), &sps, false, cx);
    let (attrs, vis, sig) = (&item.attrs, &item.vis, &item.sig);
    let (ident, output, generics) = (&sig.ident, &sig.output, &sig.generics);
    let toks = quote!(#(#attrs)* #vis fn #ident #generics(#(#inputs),*) #output #body);
    match syn::parse2::<ItemFn>(toks) {
        Ok(f) => Some((f, names)),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}

/// Rewrite a body's tokens: `p.f` → `p__f` for a struct parameter `p` and a
/// field `f` of its struct; a bare `p` as a whole call argument → its
/// fields, comma separated; any other use of `p`, or an unknown field, is an
/// error at it.
fn rewrite(ts: TokenStream, sps: &[StructParam], in_parens: bool, cx: &Ctxt) -> TokenStream {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut out: Vec<TokenTree> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            TokenTree::Group(g) => {
                let parens = g.delimiter() == Delimiter::Parenthesis;
                let inner = rewrite(g.stream(), sps, parens, cx);
                let mut ng = Group::new(g.delimiter(), inner);
                ng.set_span(g.span());
                out.push(TokenTree::Group(ng));
            }
            TokenTree::Ident(id) => {
                let after_dot =
                    matches!(out.last(), Some(TokenTree::Punct(p)) if p.as_char() == '.');
                match sps.iter().find(|sp| sp.name == *id).filter(|_| !after_dot) {
                    Some(sp) => {
                        i += struct_use(sp, &toks, (i, in_parens), &mut out, cx);
                        continue;
                    }
                    None => out.push(toks[i].clone()),
                }
            }
            t => out.push(t.clone()),
        }
        i += 1;
    }
    out.into_iter().collect()
}

/// Rewrite one use of the struct parameter at `toks[i]`; returns the number
/// of tokens consumed.
fn struct_use(
    sp: &StructParam,
    toks: &[TokenTree],
    (i, in_parens): (usize, bool),
    out: &mut Vec<TokenTree>,
    cx: &Ctxt,
) -> usize {
    let id = &sp.name;
    let dot = matches!(toks.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '.' && p.spacing() == Spacing::Alone);
    if let (true, Some(TokenTree::Ident(f))) = (dot, toks.get(i + 2)) {
        let call = matches!(toks.get(i + 3), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis);
        if !call {
            match sp.strukt.fields.iter().find(|x| x.ident == *f) {
                Some(field) => out.push(TokenTree::Ident(mangle(id, &field.ident))),
                None => {
                    let have: Vec<String> = sp
                        .strukt
                        .fields
                        .iter()
                        .map(|x| format!("`{}`", x.ident))
                        .collect();
                    cx.push(err_at(
                        codes::PARAMS_STRUCT,
                        f,
                        format!(
                            "no field `{f}` on `{}`; its fields are {}",
                            sp.strukt.item.ident,
                            have.join(", ")
                        ),
                    ));
                    out.push(stand_in(sp, f.span()));
                }
            }
            return 3;
        }
    }
    let prev_open = match out.last() {
        None => false,
        Some(TokenTree::Punct(p)) => p.as_char() == ',',
        Some(_) => false,
    } || i == 0;
    let next_close = matches!(toks.get(i + 1), None)
        || matches!(toks.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == ',');
    if in_parens && prev_open && next_close {
        // A whole-struct argument: its fields in order.
        for (k, f) in sp.strukt.fields.iter().enumerate() {
            if k > 0 {
                let mut comma = Punct::new(',', Spacing::Alone);
                comma.set_span(id.span());
                out.push(TokenTree::Punct(comma));
            }
            out.push(TokenTree::Ident(mangle(id, &f.ident)));
        }
        return 1;
    }
    cx.push(err_at(
codes::PARAMS_STRUCT,
        &toks[i],
        format!(
            "`{id}` is a `{}` of tensors: read its fields (`{id}.{}`) or pass it whole as a call argument",
            sp.strukt.item.ident,
            sp.strukt.fields.first().map_or("field".to_string(), |f| f.ident.to_string())
        ),
    ));
    out.push(stand_in(sp, toks[i].span()));
    1
}

/// What an erroneous use becomes so that the checker does not report it
/// again ("unknown name"): the struct's first field.
fn stand_in(sp: &StructParam, span: proc_macro2::Span) -> TokenTree {
    let f = sp
        .strukt
        .fields
        .first()
        .map_or_else(|| sp.name.clone(), |f| f.ident.clone());
    let mut m = mangle(&sp.name, &f);
    m.set_span(span);
    TokenTree::Ident(m)
}

/// The emitted Rust parameter for a struct parameter: `name: &Struct`.
pub fn rust_param(pat: &Pat, ty: &Type) -> TokenStream {
    match ty {
        Type::Reference(_) => quote!(#pat: #ty),
        _ => quote!(#pat: &#ty),
    }
}

/// The argument expressions a struct parameter passes: its fields in order.
pub fn field_args(name: &Ident, ps: &ParamStruct) -> Vec<TokenStream> {
    ps.fields
        .iter()
        .map(|f| {
            let fid = &f.ident;
            quote!(&#name.#fid)
        })
        .collect()
}
