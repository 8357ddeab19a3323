//! The two entry points as `proc_macro2` functions (so they are testable
//! without a compiler): parse → lower → check → expand.
//!
//! Whatever goes wrong, the output still contains every tensor fn with its
//! signature rewritten as the successful expansion would have it (body
//! replaced), so callers see only the real errors, never secondary ones.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, ToTokens};
use syn::{FnArg, Item, ItemFn, Pat};
use tc_core::diag::codes;
use tc_core::ir::{Function, Signature, Signatures};
use tc_core::Dtype;

use crate::ctxt::Ctxt;
use crate::params::{self, Structs};
use crate::parse::{self, Consts, FnAttr, ParamKind};
use crate::spans::SpanTable;
use crate::{check, lower};

/// Is this attribute `#[tensor_fn]` (any path ending in `tensor_fn`)?
fn is_tensor_fn_attr(a: &syn::Attribute) -> bool {
    a.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "tensor_fn")
}

/// The Rust type a scalar parameter of dtype `dt` takes in the expansion.
fn scalar_rust_type(dt: Dtype) -> TokenStream {
    match dt {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F8E4M3 | Dtype::F8E5M2 => quote!(f32),
        Dtype::I64 => quote!(i64),
        Dtype::I32 => quote!(i32),
        Dtype::I16 => quote!(i16),
        Dtype::I8 | Dtype::I4 => quote!(i8),
        Dtype::Bool => quote!(bool),
        // Refused by the checker (a quantized format has no scalars,
        // Section 2 §18); the expansion still needs a type to re-emit.
        Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => quote!(f32),
    }
}

/// A parameter's value as the expansion passes it: moved, as written
/// (`tc_runtime::contract::IntoArgs` converts it), or, for a type tc does
/// not know, through `Arg::from`.
fn arg_expr(name: &TokenStream, kind: Option<ParamKind>) -> TokenStream {
    match kind {
        Some(_) => name.clone(),
        None => quote!(::tc::runtime::contract::Arg::from(#name)),
    }
}

/// The most elements of a tuple that implements `IntoArgs` (its impls in
/// tc-runtime's `contract.rs` stop at 8).
const TUPLE_ARGS: usize = 8;

/// `args` as one `IntoArgs` value: a tuple, nested in tuples of at most
/// [`TUPLE_ARGS`] for longer lists.
fn arg_tuple(mut args: Vec<TokenStream>) -> TokenStream {
    while args.len() > TUPLE_ARGS {
        args = args.chunks(TUPLE_ARGS).map(|c| quote!((#(#c,)*))).collect();
    }
    quote!((#(#args,)*))
}

/// The parameters of the expanded fn and the values it passes, in the
/// IR's parameter order.
struct RustSig {
    params: Vec<TokenStream>,
    names: Vec<(TokenStream, Option<ParamKind>)>,
}

fn rust_sig(item: &ItemFn, structs: &Structs) -> RustSig {
    let mut params = Vec::new();
    let mut names = Vec::new();
    for arg in &item.sig.inputs {
        let FnArg::Typed(pt) = arg else { continue };
        // A weight struct: taken by reference, its fields passed in order.
        if let (Some(s), Pat::Ident(pi)) = (params::struct_of(&pt.ty, structs), &*pt.pat) {
            params.push(params::rust_param(&pt.pat, &pt.ty));
            for a in params::field_args(&pi.ident, s) {
                names.push((a, Some(ParamKind::Tensor)));
            }
            continue;
        }
        let kind = parse::param_kind(&pt.ty);
        let ty = match kind {
            // Kept as written: `Tensor![…]` expands (macro_rules) to `tc::Tensor`,
            // so the user's import of the macro is used and IDEs see it.
            Some(ParamKind::Tensor) => pt.ty.to_token_stream(),
            Some(ParamKind::Scalar(dt)) => scalar_rust_type(dt),
            // Kept as written too: `Dim![…]` expands to `usize`, the size the
            // caller passes (checked against the dim range by `Arg::Dim`'s contract).
            Some(ParamKind::Dim) => pt.ty.to_token_stream(),
            None => pt.ty.to_token_stream(),
        };
        let pat = match &*pt.pat {
            Pat::Ident(pi) => {
                names.push((pi.ident.to_token_stream(), kind));
                let id = &pi.ident;
                quote!(#id)
            }
            other => other.to_token_stream(),
        };
        params.push(quote!(#pat: #ty));
    }
    RustSig { params, names }
}

/// How a fn's body becomes tokens.
enum Body {
    /// Checked: run the IR.
    Run {
        /// Items the body starts with (the static holding the IR).
        items: TokenStream,
        /// Expression of type `&'static tc_core::embed::Embedded`.
        ir: TokenStream,
        /// Expression of type `&tc_core::embed::Resolver`.
        resolve: TokenStream,
    },
    /// Errors were reported elsewhere: a body that type-checks and never runs.
    Stub,
}

fn emit_fn(item: &ItemFn, sig_doc: Option<&str>, body: Body, structs: &Structs) -> TokenStream {
    let attrs = item.attrs.iter().filter(|a| !is_tensor_fn_attr(a));
    let vis = &item.vis;
    let name = &item.sig.ident;
    let rs = rust_sig(item, structs);
    let params = &rs.params;
    let doc = sig_doc.map(|s| {
        let text = format!(" ```text\n {}\n ```", s.replace('\n', "\n "));
        quote!(#[doc = ""] #[doc = " **Shape contract** (checked by `tc` at compile time, enforced at every call):"] #[doc = ""] #[doc = #text])
    });
    let body = match body {
        Body::Run { items, ir, resolve } => {
            // One call, the parameters moved into it: nothing for rustc to
            // generate per fn but the call.
            let args = arg_tuple(rs.names.iter().map(|(n, k)| arg_expr(n, *k)).collect());
            quote!({
                #items
                ::tc::call_embedded(#ir, #args, #resolve)
            })
        }
        Body::Stub => {
            let names = rs.names.iter().map(|(n, _)| n);
            quote!({
                let _ = (#(&#names,)*);
                ::core::panic!("tc: this tensor_fn did not type-check")
            })
        }
    };
    let ret = match &item.sig.output {
        syn::ReturnType::Type(_, t) if parse::tensor_macro(t).is_some() => t.to_token_stream(),
        _ => quote!(::tc::Tensor),
    };
    quote! {
        #(#attrs)*
        #doc
        #[allow(clippy::all)]
        #vis fn #name(#(#params),*) -> ::core::result::Result<#ret, ::tc::Error> #body
    }
}

/// The `static` named `name` that holds a checked function embedded as
/// bytes (`tc_core::embed`), decoded and verified on first use (a
/// `tc_core::embed::Embedded`: non-generic, so the expansion monomorphises
/// nothing). An encoding that failed is a compile error.
fn ir_static(name: &Ident, encoded: Result<&[u8], &tc_core::embed::EmbedError>) -> TokenStream {
    let (lit, err) = match encoded {
        Ok(bytes) => (proc_macro2::Literal::byte_string(bytes), None),
        Err(e) => {
            let msg = e.to_string();
            let lit = proc_macro2::Literal::byte_string(b"");
            (lit, Some(quote!(::core::compile_error!(#msg);)))
        }
    };
    quote!(
        #err
        #[allow(non_upper_case_globals)]
        static #name: ::tc::core::embed::Embedded = ::tc::core::embed::Embedded::new(#lit);
    )
}

/// The body of a standalone tensor fn that runs the IR `encoded` holds.
fn standalone_body(encoded: Result<&[u8], &tc_core::embed::EmbedError>) -> Body {
    let name = format_ident!("__TC_IR");
    Body::Run {
        items: ir_static(&name, encoded),
        ir: quote!(&#name),
        resolve: quote!(::tc::core::embed::NO_CALLEES),
    }
}

/// A standalone tensor fn expanded from the whole-fn cache
/// (`fn_cache.rs`): its entry's IR and documentation, its signature as
/// written. `None` (check it) on a miss.
fn from_cache(key: &crate::fn_cache::Key, item: &TokenStream) -> Option<TokenStream> {
    let e = tc_core::profile::time("fn_cache.load", || crate::fn_cache::load(key))?;
    let item: ItemFn = tc_core::profile::time("fn_cache.parse", || syn::parse2(item.clone()).ok())?;
    tc_core::profile::time("fn_cache.emit", || {
        Some(emit_fn(
            &item,
            Some(&e.doc),
            standalone_body(Ok(&e.ir)),
            &Structs::new(),
        ))
    })
}

/// One tensor fn as the front end sees it.
struct Unit {
    item: ItemFn,
    sig: Option<Signature>,
    /// This fn's errors, emitted beside its expansion.
    errors: Ctxt,
    checked: Option<Function>,
    /// The lowered body, checked or not (for the call graph).
    lowered: Option<Function>,
    /// The signature parsed but is not well formed (Section 1 §4): reported
    /// at its own tokens; its body is not checked and its callers stay quiet.
    refused: bool,
}

fn build_sig(
    item: &ItemFn,
    consts: &Consts,
    spans: &mut SpanTable,
    attr: syn::Result<FnAttr>,
) -> Unit {
    let errors = Ctxt::new();
    let attr = match attr {
        Ok(a) => a,
        Err(e) => {
            errors.push(e);
            FnAttr::default()
        }
    };
    let attr_ok = errors.is_empty();
    let sig = parse::signature(&item.sig, &attr, consts, spans, &errors).filter(|_| attr_ok);
    Unit {
        item: item.clone(),
        sig,
        errors,
        checked: None,
        lowered: None,
        refused: false,
    }
}

/// Pass 1 of both entry points: form the signature once (Section 1 §4).
/// A refused one is treated like one that failed to parse, so a caller gets
/// no error derived from it (e.g. "cannot infer" for a var the signature
/// cannot bind), only its own.
fn form_sig(u: &mut Unit, spans: &SpanTable) {
    let Some(sig) = &u.sig else { return };
    u.refused = !check::signature(sig, spans, &u.errors);
}

fn check_unit(
    u: &mut Unit,
    sigs: &Signatures,
    broken: &BTreeSet<String>,
    in_module: bool,
    spans: &mut SpanTable,
) {
    let Some(sig) = u.sig.clone() else { return };
    let lowered = lower::function(
        sig,
        &u.item.block,
        sigs,
        broken,
        in_module,
        spans,
        &u.errors,
    );
    // A refused signature's body is lowered for its own syntax errors and
    // the call graph, not checked: every body judgment needs a well-formed
    // signature.
    if let (Ok(f), false) = (&lowered, u.refused) {
        u.checked = check::function(f, sigs, spans, &u.errors)
            .filter(|c| crate::literals::check(c, spans, &u.errors))
            .map(|c| c.func);
    }
    u.lowered = lowered.ok();
}

/// The item with its body (its last top-level `{…}`) emptied, if what is left
/// passes the size limits: enough to emit the fn's signature with a stub body
/// when the body itself is too deep to parse.
fn signature_only(item: &TokenStream) -> Option<ItemFn> {
    let mut toks: Vec<proc_macro2::TokenTree> = item.clone().into_iter().collect();
    let body = toks.iter().rposition(|t| {
        matches!(t, proc_macro2::TokenTree::Group(g) if g.delimiter() == proc_macro2::Delimiter::Brace)
    })?;
    toks[body] = proc_macro2::Group::new(proc_macro2::Delimiter::Brace, TokenStream::new()).into();
    let head: TokenStream = toks.into_iter().collect();
    crate::limits::check(&head).ok()?;
    syn::parse2(head).ok()
}

/// `#[tensor_fn(...)] fn …` on its own.
pub fn tensor_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    // Before any recursive parse: an input beyond the limits would overflow
    // the compiler's stack in `syn` (see `limits`).
    if let Err(e) = crate::limits::check(&attr).and_then(|()| crate::limits::check(&item)) {
        let stub = signature_only(&item).map(|f| emit_fn(&f, None, Body::Stub, &Structs::new()));
        let e = e.into_compile_error();
        return quote!(#e #stub);
    }
    // An unchanged fn that checked cleanly before is expanded from the
    // whole-fn cache, unchecked (`fn_cache.rs` says what it is keyed by).
    let key = tc_core::profile::time("fn_cache.key", || crate::fn_cache::key(&attr, &item));
    if let Some(out) = key.as_ref().and_then(|k| from_cache(k, &item)) {
        return out;
    }
    let item: ItemFn = match syn::parse2(item) {
        Ok(i) => i,
        Err(e) => return crate::spans::recode(codes::ITEM_FORM, e).into_compile_error(),
    };
    let fn_attr = syn::parse2::<FnAttr>(attr);
    let mut spans = SpanTable::default();
    let mut u = build_sig(&item, &Consts::new(), &mut spans, fn_attr);
    form_sig(&mut u, &spans);
    let sigs = Signatures::new();
    check_unit(&mut u, &sigs, &BTreeSet::new(), false, &mut spans);
    let errs = std::mem::take(&mut u.errors).into_tokens();
    let doc = u.sig.as_ref().map(ToString::to_string);
    let out = match &u.checked {
        Some(f) => {
            let bytes = tc_core::embed::encode(f);
            // Only a clean verdict is kept: a fn with errors is checked
            // again every time, its diagnostics the checker's own.
            if let (Some(k), Ok(ir), Some(doc), true) = (&key, &bytes, &doc, errs.is_empty()) {
                crate::fn_cache::save(
                    k,
                    &crate::fn_cache::Expansion {
                        doc: doc.clone(),
                        ir: ir.clone(),
                    },
                );
            }
            emit_fn(
                &u.item,
                doc.as_deref(),
                standalone_body(bytes.as_deref()),
                &Structs::new(),
            )
        }
        None => emit_fn(&u.item, None, Body::Stub, &Structs::new()),
    };
    quote!(#errs #out)
}

/// A constant tc cannot evaluate must not silently become a shape variable of
/// a signature that names it.
fn opaque_consts_in_dims(opaque: &[&syn::ItemConst], sigs: &Signatures, errors: &Ctxt) {
    for c in opaque {
        let name = c.ident.to_string();
        let user = sigs
            .values()
            .find(|s| s.vars.iter().any(|v| v.name == name));
        if let Some(s) = user {
            errors.push(crate::spans::err_at(
                codes::MODULE_CONST,
                &c.expr,
                format!(
                    "`{name}` is used as a dim (in `fn {}`), but tc cannot evaluate this initialiser: a dim constant is \
                     built from integer literals, earlier constants of the module, `+ - * / %`, parentheses and `as` casts",
                    s.name,
                ),
            ));
        }
    }
}

/// A signature dim that the module constants make a number below 1 (`const
/// K: i64 = -3;` used as `Tensor![f32; K]`): constants are what they are, and
/// a dim is at least 1 (Section 2 §16). Reported at the constant when the dim
/// is the bare constant, else at the dim.
fn const_dims_positive(
    items: &[Item],
    consts: &Consts,
    units: &[(usize, Unit)],
    spans: &SpanTable,
    errors: &Ctxt,
) {
    let map: std::collections::BTreeMap<String, tc_core::Dim> = consts
        .iter()
        .map(|(k, v)| (k.clone(), tc_core::Dim::c(*v)))
        .collect();
    let mut reported = BTreeSet::new();
    for (_, u) in units {
        let Some(sig) = &u.sig else { continue };
        let rets = std::iter::once((&sig.ret, &sig.ret_dim_spans));
        for (ty, dim_spans) in sig.params.iter().map(|p| (&p.ty, &p.dim_spans)).chain(rets) {
            let tc_core::Type::Tensor(t) = ty else {
                continue;
            };
            for (i, d) in t.shape.iter().enumerate() {
                // Checked: an overflow here is reported by the checker (E0106).
                let Some(v) = d
                    .checked_subst(&map)
                    .ok()
                    .and_then(|d| d.as_const())
                    .filter(|v| *v < 1)
                else {
                    continue;
                };
                if d.as_const().is_some() {
                    continue; // a literal: the checker's (E0105)
                }
                let msg = format!(
                    "[{}] dimension `{d}` of `fn {}` is {v} with this module's constants; expected at least 1 \
                     (Section 2 §16: constants are what they are, and a dim is at least 1){}",
                    codes::MODULE_CONST,
                    sig.name,
                    crate::spans::help_line(None, codes::MODULE_CONST)
                );
                match d.as_var().and_then(|k| module_const(items, k)) {
                    Some(c) if reported.insert(c.ident.to_string()) => errors.push(
                        syn::Error::new_spanned(crate::spans::range_of(&c.expr), msg),
                    ),
                    Some(_) => {}
                    None => {
                        errors.push(spans.error(dim_spans.get(i).copied().unwrap_or(sig.span), msg))
                    }
                }
            }
        }
    }
}

fn module_const<'a>(items: &'a [Item], name: &str) -> Option<&'a syn::ItemConst> {
    items.iter().find_map(|it| match it {
        Item::Const(c) if c.ident == name => Some(c),
        _ => None,
    })
}

/// Call-graph cycles (Section 2 §17 has no recursion): an error at each call
/// that closes one; the fns on a cycle get stub bodies.
fn refuse_recursion(units: &mut [(usize, Unit)], spans: &SpanTable) {
    let with_body: Vec<usize> = (0..units.len())
        .filter(|&i| units[i].1.lowered.is_some())
        .collect();
    let funcs: Vec<&Function> = with_body
        .iter()
        .filter_map(|&i| units[i].1.lowered.as_ref())
        .collect();
    let cycles = tc_core::callgraph::recursion(&funcs);
    for (k, d) in cycles {
        let u = &mut units[with_body[k]].1;
        u.errors.extend(check::to_errors(&[d], spans));
        u.checked = None;
    }
}

/// `#[tensor_module] mod m { … }`.
pub fn tensor_module(attr: TokenStream, item: TokenStream) -> TokenStream {
    let (module, items, errors) = match open_module(attr, item) {
        Ok(opened) => opened,
        Err(out) => return out,
    };
    let (consts, opaque) = module_consts(&items, &errors);
    let mut spans = SpanTable::default();
    let structs = params::collect(&items, &mut spans, &errors);
    let (check_items, ir_names) = flatten_struct_params(&items, &structs, &errors);
    // Pass 1: every signature, so calls see each other.
    let mut units = module_units(&check_items, &consts, &mut spans);
    let (sigs, broken) = visible_sigs(&mut units, &spans, &errors);
    opaque_consts_in_dims(&opaque, &sigs, &errors);
    const_dims_positive(&items, &consts, &units, &spans, &errors);
    // Pass 2: bodies.
    for (_, u) in units.iter_mut() {
        check_unit(u, &sigs, &broken, true, &mut spans);
    }
    refuse_recursion(&mut units, &spans);
    name_struct_fields(&mut units, &ir_names);
    let ok: Vec<Function> = units
        .iter()
        .filter_map(|(_, u)| u.checked.clone())
        .collect();
    let (resolve_arms, cells) = ir_items(&ok);
    let out_items = module_items(items, units, &structs, &consts);
    let attrs = &module.attrs;
    let vis = &module.vis;
    let unsafety = &module.unsafety;
    let mod_tok = &module.mod_token;
    let ident = &module.ident;
    let errs = errors.into_tokens();
    quote! {
        #errs
        #(#attrs)*
        #vis #unsafety #mod_tok #ident {
            #(#out_items)*
            #(#cells)*
            #[doc(hidden)]
            #[allow(dead_code)]
            fn __tc_resolve(name: &str) -> ::core::option::Option<&'static ::tc::core::ir::Function> {
                match name {
                    #(#resolve_arms)*
                    _ => ::core::option::Option::None,
                }
            }
            /// The checked IR of the tensor fn `name` of this module (its
            /// signature with every refinement, and its body), for printing
            /// and inspection.
            #[allow(dead_code)]
            pub fn tc_ir(name: &str) -> ::core::option::Option<&'static ::tc::core::ir::Function> {
                __tc_resolve(name)
            }
        }
    }
}

/// The module and its items, with the errors so far (an argument to the
/// attribute); `Err` is the whole output when there is no inline module to
/// expand, so that nothing below runs on input it cannot take.
fn open_module(
    attr: TokenStream,
    item: TokenStream,
) -> Result<(syn::ItemMod, Vec<Item>, Ctxt), TokenStream> {
    // Before any recursive parse (see `limits`). The module is not re-emitted:
    // recovering its items would need the very parse that is unsafe here.
    if let Err(e) = crate::limits::check(&attr).and_then(|()| crate::limits::check(&item)) {
        return Err(crate::spans::recode(codes::ITEM_FORM, e).into_compile_error());
    }
    let errors = Ctxt::new();
    if !attr.is_empty() {
        errors.push(crate::spans::err_at(
            codes::ITEM_FORM,
            &attr,
            "`#[tensor_module]` takes no arguments",
        ));
    }
    let mut module: syn::ItemMod = match syn::parse2(item.clone()) {
        Ok(m) => m,
        Err(_) => {
            let e = crate::spans::err_span(
                codes::ITEM_FORM,
                proc_macro2::Span::call_site(),
                "`#[tensor_module]` applies to an inline module: `#[tensor_module] mod name { … }`",
            );
            return Err(quote!(#item)
                .into_iter()
                .chain(e.into_compile_error())
                .collect());
        }
    };
    let Some((_, items)) = module.content.take() else {
        errors.push(crate::spans::err_at(
codes::ITEM_FORM,
            &module,
            "`#[tensor_module]` needs an inline module `mod name { … }`: on stable Rust a macro on a file module \
             (`mod name;`) sees only that line, not the file's items",
        ));
        return Err(errors.into_tokens());
    };
    Ok((module, items, errors))
}

/// Module constants (Section 1 §6 binding site 3), in order, and the integer
/// constants tc cannot evaluate (an error only if a signature uses one).
fn module_consts<'a>(items: &'a [Item], errors: &Ctxt) -> (Consts, Vec<&'a syn::ItemConst>) {
    let mut consts = Consts::new();
    let mut opaque: Vec<&syn::ItemConst> = Vec::new();
    for it in items {
        if let Item::Const(c) = it {
            if parse::is_int_type(&c.ty) {
                match parse::const_value(c, &consts) {
                    Ok(v) => {
                        consts.insert(c.ident.to_string(), v);
                    }
                    Err(parse::ConstError::Opaque) => opaque.push(c),
                    Err(parse::ConstError::Invalid(e)) => errors.push(e),
                }
            }
        }
    }
    (consts, opaque)
}

/// Pass 1's parse: a unit per `#[tensor_fn]` item, with its index among the
/// module's items (where its expansion goes back).
fn module_units(items: &[Item], consts: &Consts, spans: &mut SpanTable) -> Vec<(usize, Unit)> {
    let mut units: Vec<(usize, Unit)> = Vec::new();
    for (idx, it) in items.iter().enumerate() {
        if let Item::Fn(f) = it {
            let Some(a) = f.attrs.iter().find(|a| is_tensor_fn_attr(a)) else {
                continue;
            };
            let attr_res = match &a.meta {
                syn::Meta::Path(_) => Ok(FnAttr::default()),
                syn::Meta::List(l) => syn::parse2::<FnAttr>(l.tokens.clone()),
                syn::Meta::NameValue(nv) => Err(crate::spans::err_at(
                    codes::ITEM_FORM,
                    nv,
                    "expected `#[tensor_fn(...)]`",
                )),
            };
            units.push((idx, build_sig(f, consts, spans, attr_res)));
        }
    }
    units
}

/// Pass 1's formation: every signature formed once, then the signatures
/// calls can see and the names whose callers must stay quiet (refused or
/// unparsed); a duplicate name is an error at the second fn.
fn visible_sigs(
    units: &mut [(usize, Unit)],
    spans: &SpanTable,
    errors: &Ctxt,
) -> (Signatures, BTreeSet<String>) {
    let mut sigs = Signatures::new();
    let mut broken = BTreeSet::new();
    for (_, u) in units.iter_mut() {
        form_sig(u, spans);
    }
    for (_, u) in units.iter() {
        if u.refused {
            broken.insert(u.item.sig.ident.to_string());
        }
        match &u.sig {
            Some(s) => {
                if sigs.insert(s.name.clone(), s.clone()).is_some() {
                    errors.push(crate::spans::err_at(
                        codes::ITEM_FORM,
                        &u.item.sig.ident,
                        "a tensor fn of this name is already defined",
                    ));
                }
            }
            None => {
                broken.insert(u.item.sig.ident.to_string());
            }
        }
    }
    (sigs, broken)
}

/// The items as the checker sees them: each tensor fn that takes a weight
/// struct flattened (`params::flatten_fn`), with the IR names of its
/// flattened parameters by item index.
fn flatten_struct_params(
    items: &[Item],
    structs: &Structs,
    errors: &Ctxt,
) -> (Vec<Item>, BTreeMap<usize, BTreeMap<String, String>>) {
    let mut names = BTreeMap::new();
    let out = items
        .iter()
        .enumerate()
        .map(|(idx, it)| match it {
            Item::Fn(f) if f.attrs.iter().any(is_tensor_fn_attr) => {
                match params::flatten_fn(f, structs, errors) {
                    Some((flat, n)) => {
                        names.insert(idx, n);
                        Item::Fn(flat)
                    }
                    None => it.clone(),
                }
            }
            _ => it.clone(),
        })
        .collect();
    (out, names)
}

/// Run-time errors name a flattened parameter by its field (`layer.wq`),
/// not by the checker's spelling (`layer__wq`).
fn name_struct_fields(
    units: &mut [(usize, Unit)],
    names: &BTreeMap<usize, BTreeMap<String, String>>,
) {
    for (idx, u) in units.iter_mut() {
        let (Some(f), Some(n)) = (u.checked.as_mut(), names.get(idx)) else {
            continue;
        };
        for p in f.sig.params.iter_mut() {
            if let Some(shown) = n.get(&p.name) {
                p.name = shown.clone();
            }
        }
    }
}

/// For the checked fns: the arms of `__tc_resolve` and the statics
/// holding each one's IR, which the run-time call resolution reaches by
/// name.
fn ir_items(ok: &[Function]) -> (Vec<TokenStream>, Vec<TokenStream>) {
    let resolve_arms: Vec<TokenStream> = ok
        .iter()
        .map(|f| {
            let n = &f.sig.name;
            let ir = ir_static_name(n);
            quote!(#n => #ir.get().ok(),)
        })
        .collect();
    let cells: Vec<TokenStream> = ok
        .iter()
        .map(|f| {
            let encoded = tc_core::embed::encode(f);
            let cell = ir_static(&ir_static_name(&f.sig.name), encoded.as_deref());
            quote!(#[doc(hidden)] #cell)
        })
        .collect();
    (resolve_arms, cells)
}

/// The name of the static holding module fn `name`'s IR.
fn ir_static_name(name: &str) -> Ident {
    format_ident!("__tc_ir_{}", name)
}

/// The module's items in their order, each tensor fn replaced by its
/// expansion (its errors, then the fn with a running or a stub body, with
/// the signature as the user wrote it) and each weight struct by its.
fn module_items(
    items: Vec<Item>,
    units: Vec<(usize, Unit)>,
    structs: &Structs,
    consts: &Consts,
) -> Vec<TokenStream> {
    let mut out_items: Vec<TokenStream> = Vec::new();
    let mut unit_iter = units.into_iter().peekable();
    for (idx, it) in items.into_iter().enumerate() {
        if let Item::Struct(st) = &it {
            if let Some(ps) = structs
                .get(&st.ident.to_string())
                .filter(|_| params::is_params_struct(&it))
            {
                out_items.push(params::expand_struct(ps, consts));
                continue;
            }
        }
        match unit_iter.peek() {
            Some((i, _)) if *i == idx => {
                let (_, mut u) = unit_iter.next().expect("peeked");
                if let Item::Fn(orig) = it {
                    u.item = orig;
                }
                let errs = u.errors.into_tokens();
                let f = match &u.checked {
                    Some(f) => {
                        let irf = ir_static_name(&f.sig.name);
                        // The checked signature: flattened weight structs
                        // show as `layer.wq`, …
                        emit_fn(
                            &u.item,
                            Some(&f.sig.to_string()),
                            Body::Run {
                                items: TokenStream::new(),
                                ir: quote!(&#irf),
                                resolve: quote!(&__tc_resolve),
                            },
                            structs,
                        )
                    }
                    None => emit_fn(&u.item, None, Body::Stub, structs),
                };
                out_items.push(quote!(#errs #f));
            }
            _ => out_items.push(it.into_token_stream()),
        }
    }
    out_items
}
