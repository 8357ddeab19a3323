//! Signatures: Rust syntax → [`tc_core::ir::Signature`] plus the span table.
//!
//! * `Tensor![dt; d₀, d₁, … where p₁, p₂]` in a parameter or return type is a
//!   tensor type (dims are dim expressions, `where` refinements are predicates);
//! * `f32`, `bf16`, `i64`, `bool`, … as a parameter type is `Scalar[dt]`;
//! * `Dim![d]` as a parameter type is a dim parameter (Section 1 §6 site 1),
//!   a `usize` at the Rust call that binds `d` like one tensor dim;
//! * `#[tensor_fn(requires(p, …), axiom(p, …))]` carries the cross-parameter
//!   facts (Section 2 §14, §15).

use std::collections::BTreeMap;

use proc_macro2::{Ident, TokenStream};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{BinOp, Expr, FnArg, Lit, Pat, ReturnType, Token, Type, UnOp};
use tc_core::ctx::{zero_opt_ins, ShapeVar};
use tc_core::dim::DimError;
use tc_core::ir::{Param, Signature, Spanned};
use tc_core::{CmpOp, Dim, Dtype, Pred, TensorType};

use crate::ctxt::Ctxt;
use crate::spans::{err_at, SpanTable};
use tc_core::diag::codes;

/// Arguments of `#[tensor_fn(...)]`.
#[derive(Default)]
pub struct FnAttr {
    /// `requires(...)` predicates.
    pub requires: Vec<Expr>,
    /// `axiom(...)` predicates.
    pub axioms: Vec<Expr>,
}

impl Parse for FnAttr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut out = FnAttr::default();
        while !input.is_empty() {
            let key: Ident = input.call(Ident::parse_any)?;
            let content;
            syn::parenthesized!(content in input);
            let preds = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
            match key.to_string().as_str() {
                "requires" => out.requires.extend(preds),
                "axiom" | "axioms" => out.axioms.extend(preds),
                other => {
                    return Err(crate::spans::err_span(
                        codes::ITEM_FORM,
                        key.span(),
                        format!("unknown tensor_fn argument `{other}` (expected `requires(...)` or `axiom(...)`)"),
                    ))
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(out)
    }
}

/// The tokens of a `Tensor![...]` type, split up.
pub struct TensorSyntax {
    /// The dtype identifier.
    pub dtype: Ident,
    /// Dim expressions.
    pub dims: Vec<Expr>,
    /// `where` predicates.
    pub refs: Vec<Expr>,
}

impl Parse for TensorSyntax {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let dtype: Ident = input.call(Ident::parse_any)?;
        let mut dims = Vec::new();
        let mut refs = Vec::new();
        if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
            while !input.is_empty() && !input.peek(Token![where]) {
                dims.push(input.parse::<Expr>()?);
                if input.peek(Token![,]) {
                    input.parse::<Token![,]>()?;
                } else {
                    break;
                }
            }
        }
        if input.peek(Token![where]) {
            input.parse::<Token![where]>()?;
            refs.extend(Punctuated::<Expr, Token![,]>::parse_terminated(input)?);
        }
        if !input.is_empty() {
            return Err(input.error("expected `,`, `where` or the end of the tensor type"));
        }
        Ok(TensorSyntax { dtype, dims, refs })
    }
}

/// If `ty` is `Tensor![...]` (any path ending in `Tensor`), its tokens.
pub fn tensor_macro(ty: &Type) -> Option<&TokenStream> {
    match ty {
        Type::Macro(m)
            if m.mac
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "Tensor") =>
        {
            Some(&m.mac.tokens)
        }
        Type::Group(g) => tensor_macro(&g.elem),
        Type::Paren(p) => tensor_macro(&p.elem),
        _ => None,
    }
}

/// If `ty` is `Dim![...]` (any path ending in `Dim`), its tokens.
pub fn dim_macro(ty: &Type) -> Option<&TokenStream> {
    match ty {
        Type::Macro(m) if m.mac.path.segments.last().is_some_and(|s| s.ident == "Dim") => {
            Some(&m.mac.tokens)
        }
        Type::Group(g) => dim_macro(&g.elem),
        Type::Paren(p) => dim_macro(&p.elem),
        _ => None,
    }
}

/// The dtype named by an identifier.
pub fn dtype_of(id: &Ident) -> syn::Result<Dtype> {
    id.to_string()
        .parse::<Dtype>()
        .map_err(|e| crate::spans::err_span(codes::UNKNOWN_DTYPE, id.span(), e))
}

/// A scalar parameter type (`f32`, `bf16`, `i64`, `bool`, …).
pub fn scalar_dtype(ty: &Type) -> Option<Dtype> {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            let id = p.path.get_ident()?;
            id.to_string().parse::<Dtype>().ok()
        }
        Type::Group(g) => scalar_dtype(&g.elem),
        _ => None,
    }
}

/// Strip parentheses and invisible groups.
pub fn unparen(mut e: &Expr) -> &Expr {
    loop {
        match e {
            Expr::Paren(p) => e = &p.expr,
            Expr::Group(g) => e = &g.expr,
            _ => return e,
        }
    }
}

/// A single identifier, if `e` is one.
pub fn ident_of(e: &Expr) -> Option<&Ident> {
    match unparen(e) {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident(),
        _ => None,
    }
}

/// An integer literal (possibly negated) as i64.
pub fn int_lit(e: &Expr) -> Option<i64> {
    match unparen(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.base10_parse::<i64>().ok(),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
            int_lit(&u.expr).and_then(|v| v.checked_neg())
        }
        _ => None,
    }
}

/// How identifiers inside a dim expression resolve.
pub trait DimNames {
    /// `Err(message)` when `name` may not appear in a dim here.
    fn check(&self, name: &Ident) -> Result<(), String>;
}

/// Every identifier is a shape variable (signatures).
pub struct AnyName;

impl DimNames for AnyName {
    fn check(&self, _: &Ident) -> Result<(), String> {
        Ok(())
    }
}

/// A dim expression (Section 1 §2 `e`): integer literals, shape variables,
/// constants, `+ - * / %`, unary minus, parentheses.
pub fn dim_expr(e: &Expr, names: &dyn DimNames) -> syn::Result<Dim> {
    match e {
        Expr::Paren(p) => dim_expr(&p.expr, names),
        Expr::Group(g) => dim_expr(&g.expr, names),
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => match i.base10_parse::<i64>() {
                Ok(v) => Ok(Dim::c(v)),
                Err(_) => Err(err_at(
                    codes::ITEM_FORM,
                    e,
                    "dim literal does not fit in i64",
                )),
            },
            _ => Err(err_at(
                codes::ITEM_FORM,
                e,
                "expected a dim expression (integer literal, shape variable, + - * / %)",
            )),
        },
        Expr::Path(_) => match ident_of(e) {
            Some(id) => {
                names
                    .check(id)
                    .map_err(|m| err_at(codes::KIND_MISMATCH, e, m))?;
                Ok(Dim::var(id.to_string()))
            }
            None => Err(err_at(
                codes::ITEM_FORM,
                e,
                "expected a shape variable: a single identifier",
            )),
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
            let d = dim_expr(&u.expr, names)?;
            d.checked_neg().map_err(|err| dim_err(e, &err))
        }
        Expr::Binary(b) => {
            let l = dim_expr(&b.left, names)?;
            let r = dim_expr(&b.right, names)?;
            // Checked (never wrapping) dim algebra: an overflow is E0106 at
            // the operation, a constant-0 divisor E0107 at the divisor.
            let res = match b.op {
                BinOp::Add(_) => l.checked_add(&r),
                BinOp::Sub(_) => l.checked_sub(&r),
                BinOp::Mul(_) => l.checked_mul(&r),
                BinOp::Div(_) => l.checked_div(&r),
                BinOp::Rem(_) => l.checked_rem(&r),
                _ => {
                    return Err(err_at(
                        codes::ITEM_FORM,
                        &b.op,
                        "expected a dim operator (`+`, `-`, `*`, `/`, `%`)",
                    ))
                }
            };
            res.map_err(|err| match err {
                DimError::DivByZero(_) => dim_err(&b.right, &err),
                DimError::Overflow(_) => dim_err(e, &err),
            })
        }
        _ => Err(err_at(
            codes::ITEM_FORM,
            e,
            "expected a dim expression (integer literal, shape variable, + - * / %)",
        )),
    }
}

/// A checked dim operation's failure as a compile error in the checker's
/// format (`[E0106] dim arithmetic (Section 1 §2): …`, then the note).
fn dim_err(at: &dyn ToTokens, err: &DimError) -> syn::Error {
    let (code, rule, why) = (err.code(), err.rule(), err.why());
    err_at(code, at, format!("{rule}: {err}\n  note: {why}"))
}

/// A predicate: comparisons of dims combined with `&&`, `||`, `!`.
pub fn pred_expr(e: &Expr, names: &dyn DimNames) -> syn::Result<Pred> {
    match e {
        Expr::Paren(p) => pred_expr(&p.expr, names),
        Expr::Group(g) => pred_expr(&g.expr, names),
        Expr::Lit(l) => match &l.lit {
            Lit::Bool(b) => Ok(if b.value { Pred::True } else { Pred::False }),
            _ => Err(err_at(
                codes::ITEM_FORM,
                e,
                "expected a predicate such as `D % H == 0`",
            )),
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Not(_)) => Ok(Pred::not(pred_expr(&u.expr, names)?)),
        Expr::Binary(b) => {
            let cmp = match b.op {
                BinOp::Eq(_) => Some(CmpOp::Eq),
                BinOp::Ne(_) => Some(CmpOp::Ne),
                BinOp::Le(_) => Some(CmpOp::Le),
                BinOp::Lt(_) => Some(CmpOp::Lt),
                BinOp::Ge(_) => Some(CmpOp::Ge),
                BinOp::Gt(_) => Some(CmpOp::Gt),
                _ => None,
            };
            if let Some(op) = cmp {
                return Ok(Pred::cmp(
                    dim_expr(&b.left, names)?,
                    op,
                    dim_expr(&b.right, names)?,
                ));
            }
            match b.op {
                BinOp::And(_) => Ok(Pred::and([
                    pred_expr(&b.left, names)?,
                    pred_expr(&b.right, names)?,
                ])),
                BinOp::Or(_) => Ok(Pred::or([
                    pred_expr(&b.left, names)?,
                    pred_expr(&b.right, names)?,
                ])),
                _ => Err(err_at(
                    codes::ITEM_FORM,
                    &b.op,
                    "expected a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`) or `&&`, `||`",
                )),
            }
        }
        _ => Err(err_at(
            codes::ITEM_FORM,
            e,
            "expected a predicate such as `D % H == 0`",
        )),
    }
}

/// Identifiers of an expression in source order (first appearance).
pub fn idents_in_order(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Paren(p) => idents_in_order(&p.expr, out),
        Expr::Group(g) => idents_in_order(&g.expr, out),
        Expr::Unary(u) => idents_in_order(&u.expr, out),
        Expr::Binary(b) => {
            idents_in_order(&b.left, out);
            idents_in_order(&b.right, out);
        }
        Expr::Path(_) => {
            if let Some(id) = ident_of(e) {
                let s = id.to_string();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        _ => {}
    }
}

/// A parsed tensor type with spans.
pub struct ParsedTensor {
    /// The type.
    pub ty: TensorType,
    /// One span per dim.
    pub dim_spans: Vec<tc_core::SpanId>,
    /// One span per refinement.
    pub ref_spans: Vec<tc_core::SpanId>,
    /// The dim expressions (for variable order).
    pub dim_exprs: Vec<Expr>,
}

/// Parse the tokens of `Tensor![...]`.
pub fn tensor_type(
    tokens: &TokenStream,
    names: &dyn DimNames,
    spans: &mut SpanTable,
) -> syn::Result<ParsedTensor> {
    let syn_t: TensorSyntax = TensorSyntax::parse.parse2(tokens.clone())?;
    let dtype = dtype_of(&syn_t.dtype)?;
    let mut errors = Vec::new();
    let mut shape = Vec::new();
    let mut dim_spans = Vec::new();
    for d in &syn_t.dims {
        match dim_expr(d, names) {
            Ok(x) => shape.push(x),
            Err(e) => errors.push(e),
        }
        dim_spans.push(spans.alloc(d));
    }
    let mut refs = Vec::new();
    let mut ref_spans = Vec::new();
    for r in &syn_t.refs {
        match pred_expr(r, names) {
            Ok(p) => refs.push(p),
            Err(e) => errors.push(e),
        }
        ref_spans.push(spans.alloc(r));
    }
    if let Some(e) = crate::spans::combine(errors) {
        return Err(e);
    }
    Ok(ParsedTensor {
        ty: TensorType { dtype, shape, refs },
        dim_spans,
        ref_spans,
        dim_exprs: syn_t.dims,
    })
}

/// Module constants: name → value.
pub type Consts = BTreeMap<String, i64>;

/// Why a module constant has no value for tc.
pub enum ConstError {
    /// Not an expression tc evaluates (a call, another crate's constant, …):
    /// fine unless the name is used as a dim.
    Opaque,
    /// Evaluable but wrong (out of range, overflow, division by zero): a
    /// compile error at these tokens.
    Invalid(syn::Error),
}

fn const_invalid(at: &dyn quote::ToTokens, msg: String) -> ConstError {
    ConstError::Invalid(err_at(codes::MODULE_CONST, at, msg))
}

/// Evaluate a constant's initialiser: integer literals, earlier constants,
/// `+ - * / %`, parentheses and `as` casts to integer types, in checked i64
/// arithmetic (dims are i64, Section 1 §2).
pub fn const_expr(e: &Expr, consts: &Consts) -> Result<i64, ConstError> {
    match unparen(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.base10_parse::<i64>().map_err(|_| {
                const_invalid(
                    e,
                    format!(
                        "module constant out of range: expected an integer in [{}, {}] (tc's dims are i64), found `{}`",
                        i64::MIN,
                        i64::MAX,
                        i.base10_digits()
                    ),
                )
            }),
            _ => Err(ConstError::Opaque),
        },
        Expr::Path(_) => {
            let id = ident_of(e).ok_or(ConstError::Opaque)?;
            consts.get(&id.to_string()).copied().ok_or(ConstError::Opaque)
        }
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
            // `-9223372036854775808` is in range although its digits are not.
            if let Expr::Lit(syn::ExprLit { lit: Lit::Int(i), .. }) = unparen(&u.expr) {
                if let Ok(v) = i.base10_parse::<i128>() {
                    return i64::try_from(-v).map_err(|_| {
                        const_invalid(e, format!("module constant out of range: expected an integer in [{}, {}], found `-{v}`", i64::MIN, i64::MAX))
                    });
                }
            }
            let v = const_expr(&u.expr, consts)?;
            v.checked_neg()
                .ok_or_else(|| const_invalid(e, format!("module constant overflows i64: -({v})")))
        }
        Expr::Binary(b) => {
            let l = const_expr(&b.left, consts)?;
            let r = const_expr(&b.right, consts)?;
            let (v, sym) = match b.op {
                BinOp::Add(_) => (l.checked_add(r), "+"),
                BinOp::Sub(_) => (l.checked_sub(r), "-"),
                BinOp::Mul(_) => (l.checked_mul(r), "*"),
                BinOp::Div(_) if r == 0 => return Err(const_invalid(e, "division by zero in a module constant".into())),
                BinOp::Rem(_) if r == 0 => return Err(const_invalid(e, "remainder by zero in a module constant".into())),
                BinOp::Div(_) => (l.checked_div(r), "/"),
                BinOp::Rem(_) => (l.checked_rem(r), "%"),
                _ => return Err(ConstError::Opaque),
            };
            v.ok_or_else(|| const_invalid(e, format!("module constant overflows i64: {l} {sym} {r}")))
        }
        Expr::Cast(c) => {
            let v = const_expr(&c.expr, consts)?;
            match int_type_range(&c.ty) {
                Some((lo, hi)) if i128::from(v) < lo || i128::from(v) > hi => Err(const_invalid(
                    e,
                    format!(
                        "module constant out of range: `as {}` would change {v} (expected [{lo}, {hi}]); tc does not evaluate wrapping casts",
                        quote::ToTokens::to_token_stream(&c.ty)
                    ),
                )),
                Some(_) => Ok(v),
                None => Err(ConstError::Opaque),
            }
        }
        _ => Err(ConstError::Opaque),
    }
}

/// The value of an integer module constant, which must also fit its declared
/// type (`const K: usize = -1;` is refused here as well as by rustc).
pub fn const_value(c: &syn::ItemConst, consts: &Consts) -> Result<i64, ConstError> {
    let v = const_expr(&c.expr, consts)?;
    match int_type_range(&c.ty) {
        Some((lo, hi)) if i128::from(v) < lo || i128::from(v) > hi => Err(const_invalid(
            &c.expr,
            format!(
                "module constant out of range for `{}`: expected an integer in [{lo}, {hi}], found {v}",
                quote::ToTokens::to_token_stream(&c.ty)
            ),
        )),
        _ => Ok(v),
    }
}

/// The values of a Rust integer type (usize and isize as 64-bit).
fn int_type_range(ty: &Type) -> Option<(i128, i128)> {
    let Type::Path(p) = ty else { return None };
    Some(match p.path.get_ident()?.to_string().as_str() {
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" | "usize" => (0, u64::MAX.into()),
        "u128" => (0, i128::MAX),
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        "i64" | "isize" => (i64::MIN.into(), i64::MAX.into()),
        "i128" => (i128::MIN, i128::MAX),
        _ => return None,
    })
}

/// The integer type names a module constant may have.
pub fn is_int_type(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.get_ident().is_some_and(|i| {
            matches!(
                i.to_string().as_str(),
                "usize"
                    | "isize"
                    | "u8"
                    | "u16"
                    | "u32"
                    | "u64"
                    | "u128"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "i128"
            )
        }),
        _ => false,
    }
}

/// What a parameter is, syntactically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// `Tensor![...]`.
    Tensor,
    /// A scalar dtype.
    Scalar(Dtype),
    /// `Dim![...]`: a dim parameter, a `usize` in Rust.
    Dim,
}

/// Classify a parameter type without parsing the tensor's contents (used to
/// rewrite the signature even when it has errors).
pub fn param_kind(ty: &Type) -> Option<ParamKind> {
    if tensor_macro(ty).is_some() {
        Some(ParamKind::Tensor)
    } else if dim_macro(ty).is_some() {
        Some(ParamKind::Dim)
    } else {
        scalar_dtype(ty).map(ParamKind::Scalar)
    }
}

/// The tokens of `Dim![d]`: exactly one dim expression (Section 1 §6 site 1),
/// its parsed dim and its span. Refinements go in `requires`.
fn dim_param(
    tokens: &TokenStream,
    spans: &mut SpanTable,
) -> syn::Result<(Expr, Dim, tc_core::SpanId)> {
    let e: Expr = syn::parse2(tokens.clone()).map_err(|e| {
        crate::spans::err_span(
            codes::ITEM_FORM,
            e.span(),
            format!("expected one dim in `Dim![…]`, e.g. `Dim![H]` ({e}); state refinements in `requires(…)`"),
        )
    })?;
    let d = dim_expr(&e, &AnyName)?;
    let span = spans.alloc(&e);
    Ok((e, d, span))
}

/// Build the IR signature of `sig` with its attribute. The phases allocate
/// spans in source order (parameters, return type, `requires`, axioms, the
/// name), which the span table's ids follow.
pub fn signature(
    sig: &syn::Signature,
    attr: &FnAttr,
    consts: &Consts,
    spans: &mut SpanTable,
    cx: &Ctxt,
) -> Option<Signature> {
    let before = cx.len();
    refuse_qualifiers(sig, cx);
    let mut var_order: Vec<String> = Vec::new();
    let mut all_refs: Vec<Pred> = Vec::new();
    let params = params_of(sig, spans, &mut var_order, &mut all_refs, cx);
    let (ret, ret_span, ret_dim_spans) = return_type(sig, spans, &mut all_refs, cx);
    let (requires, axioms) = attr_facts(attr, spans, &mut all_refs, cx);
    if cx.len() > before {
        return None;
    }
    let vars = shape_vars(var_order, consts, &all_refs);
    Some(Signature {
        name: sig.ident.to_string(),
        vars,
        consts: consts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        params,
        requires,
        axioms,
        ret,
        ret_span,
        ret_dim_spans,
        span: spans.alloc(&sig.ident),
    })
}

/// A tensor fn is a plain fn: an error at each qualifier, generic or
/// variadic that the checker and the JIT have no meaning for.
fn refuse_qualifiers(sig: &syn::Signature, cx: &Ctxt) {
    if let Some(c) = &sig.constness {
        cx.push(err_at(codes::ITEM_FORM, c, "a tensor_fn cannot be `const`"));
    }
    if let Some(a) = &sig.asyncness {
        cx.push(err_at(codes::ITEM_FORM, a, "a tensor_fn cannot be `async`"));
    }
    if let Some(u) = &sig.unsafety {
        cx.push(err_at(
            codes::ITEM_FORM,
            u,
            "a tensor_fn cannot be `unsafe`",
        ));
    }
    if let Some(a) = &sig.abi {
        cx.push(err_at(
            codes::ITEM_FORM,
            a,
            "a tensor_fn cannot have an ABI",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        cx.push(err_at(
codes::ITEM_FORM,
            &sig.generics,
            "a tensor_fn takes no generics: shape variables are the identifiers of its `Tensor![...]` dims",
        ));
    }
    if let Some(v) = &sig.variadic {
        cx.push(err_at(
            codes::ITEM_FORM,
            v,
            "a tensor_fn cannot be variadic",
        ));
    }
}

/// The parameters, in order; the names their dims mention (in order of first
/// occurrence: the shape variables) and their refinements are collected too.
fn params_of(
    sig: &syn::Signature,
    spans: &mut SpanTable,
    var_order: &mut Vec<String>,
    all_refs: &mut Vec<Pred>,
    cx: &Ctxt,
) -> Vec<Param> {
    let mut params = Vec::new();
    for arg in &sig.inputs {
        let FnArg::Typed(pt) = arg else {
            cx.push(err_at(
                codes::ITEM_FORM,
                arg,
                "a tensor_fn cannot take `self`",
            ));
            continue;
        };
        let name = match &*pt.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.to_string(),
            other => {
                cx.push(err_at(
                    codes::ITEM_FORM,
                    other,
                    "a tensor_fn parameter must be a plain identifier",
                ));
                continue;
            }
        };
        let span = spans.alloc(&pt.ty);
        if let Some(toks) = tensor_macro(&pt.ty) {
            match tensor_type(toks, &AnyName, spans) {
                Ok(t) => {
                    for d in &t.dim_exprs {
                        idents_in_order(d, var_order);
                    }
                    all_refs.extend(t.ty.refs.iter().cloned());
                    params.push(Param {
                        name,
                        ty: tc_core::Type::Tensor(t.ty),
                        span,
                        dim_spans: t.dim_spans,
                        ref_spans: t.ref_spans,
                    });
                }
                Err(e) => cx.push(e),
            }
        } else if let Some(toks) = dim_macro(&pt.ty) {
            match dim_param(toks, spans) {
                Ok((e, d, dim_span)) => {
                    idents_in_order(&e, var_order);
                    params.push(Param {
                        name,
                        ty: tc_core::Type::Dim(d),
                        span,
                        dim_spans: vec![dim_span],
                        ref_spans: vec![],
                    });
                }
                Err(e) => cx.push(e),
            }
        } else if let Some(dt) = scalar_dtype(&pt.ty) {
            params.push(Param {
                name,
                ty: tc_core::Type::Scalar(dt),
                span,
                dim_spans: vec![],
                ref_spans: vec![],
            });
        } else {
            cx.push(err_at(
codes::ITEM_FORM,
                &pt.ty,
                "a tensor_fn parameter must be `Tensor![dtype; dims…]`, `Dim![dim]` or a scalar dtype \
                 (f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i16, i8, i4, bool)",
            ));
        }
    }
    params
}

/// The return type (a tensor, else an error and `Unit`), its span and its
/// dims' spans; its refinements join the ones that decide `>= 0` opt-ins.
fn return_type(
    sig: &syn::Signature,
    spans: &mut SpanTable,
    all_refs: &mut Vec<Pred>,
    cx: &Ctxt,
) -> (tc_core::Type, tc_core::SpanId, Vec<tc_core::SpanId>) {
    match &sig.output {
        ReturnType::Type(_, ty) => match tensor_macro(ty) {
            Some(toks) => {
                let span = spans.alloc(ty);
                match tensor_type(toks, &AnyName, spans) {
                    Ok(t) => {
                        all_refs.extend(t.ty.refs.iter().cloned());
                        (tc_core::Type::Tensor(t.ty), span, t.dim_spans)
                    }
                    Err(e) => {
                        cx.push(e);
                        (tc_core::Type::Unit, span, vec![])
                    }
                }
            }
            None => {
                cx.push(err_at(
                    codes::ITEM_FORM,
                    ty,
                    "a tensor_fn must return `Tensor![dtype; dims…]`",
                ));
                (tc_core::Type::Unit, spans.alloc(ty), vec![])
            }
        },
        ReturnType::Default => {
            cx.push(crate::spans::err_span(
                codes::ITEM_FORM,
                sig.paren_token.span.close(),
                "a tensor_fn must declare its return type `-> Tensor![dtype; dims…]`",
            ));
            (tc_core::Type::Unit, spans.alloc(&sig.ident), vec![])
        }
    }
}

/// `requires(…)` and `axiom(…)` of the attribute, each with its span;
/// `requires` predicates also decide `>= 0` opt-ins, axioms do not.
fn attr_facts(
    attr: &FnAttr,
    spans: &mut SpanTable,
    all_refs: &mut Vec<Pred>,
    cx: &Ctxt,
) -> (Vec<Spanned<Pred>>, Vec<Spanned<Pred>>) {
    let mut requires = Vec::new();
    for r in &attr.requires {
        let span = spans.alloc(r);
        match pred_expr(r, &AnyName) {
            Ok(p) => {
                all_refs.push(p.clone());
                requires.push(Spanned { node: p, span });
            }
            Err(e) => cx.push(e),
        }
    }
    let mut axioms = Vec::new();
    for r in &attr.axioms {
        let span = spans.alloc(r);
        match pred_expr(r, &AnyName) {
            Ok(p) => axioms.push(Spanned { node: p, span }),
            Err(e) => cx.push(e),
        }
    }
    (requires, axioms)
}

/// The signature's shape variables in order of first occurrence: every name
/// its dims mention but a module constant, opted into `>= 0` where a
/// refinement or `requires` says so (Section 2 §16).
fn shape_vars(var_order: Vec<String>, consts: &Consts, all_refs: &[Pred]) -> Vec<ShapeVar> {
    let zero = zero_opt_ins(all_refs);
    var_order
        .into_iter()
        .filter(|v| !consts.contains_key(v))
        .map(|v| ShapeVar {
            allow_zero: zero.contains(&v),
            name: v,
            fresh: false,
        })
        .collect()
}
