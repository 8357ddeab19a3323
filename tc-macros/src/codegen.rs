//! Rust code that rebuilds a checked [`Function`] at run time.
//!
//! The expansion builds the IR once per function (in a `OnceLock`), from
//! constructor calls generated here. Dims are rebuilt from their normalised
//! terms and predicates from their exact variants, so the value built at run
//! time is equal (`==`) to the one the checker proved things about.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::quote;
use tc_core::dim::Atom;
use tc_core::ir::{
    DimBinding, Function, Inst, Op, Param, PoolKind, Scalar, Signature, Spanned, Window,
};
use tc_core::{CmpOp, Dim, Dtype, Pred, SpanId, TensorType, Type};

fn variant(x: &impl std::fmt::Debug) -> Ident {
    Ident::new(&format!("{x:?}"), Span::call_site())
}

fn usize_lit(n: usize) -> Literal {
    Literal::usize_suffixed(n)
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

fn string(s: &str) -> TokenStream {
    let l = Literal::string(s);
    quote!(::std::string::String::from(#l))
}

fn span_id(s: SpanId) -> TokenStream {
    let n = Literal::u32_suffixed(s.0);
    quote!(__tc::SpanId(#n))
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

fn dims(ds: &[Dim]) -> TokenStream {
    let ds = ds.iter().map(dim);
    quote!(::std::vec![#(#ds),*])
}

fn cmp_op(op: CmpOp) -> TokenStream {
    let v = variant(&op);
    quote!(__tc::CmpOp::#v)
}

/// Constructor of a predicate (exact variants, no renormalisation).
pub fn pred(p: &Pred) -> TokenStream {
    match p {
        Pred::True => quote!(__tc::Pred::True),
        Pred::False => quote!(__tc::Pred::False),
        Pred::Cmp(a, op, b) => {
            let (a, op, b) = (dim(a), cmp_op(*op), dim(b));
            quote!(__tc::Pred::Cmp(#a, #op, #b))
        }
        Pred::And(ps) => {
            let ps = ps.iter().map(pred);
            quote!(__tc::Pred::And(::std::vec![#(#ps),*]))
        }
        Pred::Or(ps) => {
            let ps = ps.iter().map(pred);
            quote!(__tc::Pred::Or(::std::vec![#(#ps),*]))
        }
        Pred::Not(q) => {
            let q = pred(q);
            quote!(__tc::Pred::Not(::std::boxed::Box::new(#q)))
        }
    }
}

fn tensor_type(t: &TensorType) -> TokenStream {
    let dt = dtype(t.dtype);
    let shape = dims(&t.shape);
    let refs = t.refs.iter().map(pred);
    quote!(__tc::TensorType { dtype: #dt, shape: #shape, refs: ::std::vec![#(#refs),*] })
}

fn ty(t: &Type) -> TokenStream {
    match t {
        Type::Tensor(tt) => {
            let tt = tensor_type(tt);
            quote!(__tc::Type::Tensor(#tt))
        }
        Type::Scalar(d) => {
            let d = dtype(*d);
            quote!(__tc::Type::Scalar(#d))
        }
        Type::Dim(d) => {
            let d = dim(d);
            quote!(__tc::Type::Dim(#d))
        }
        Type::Unit => quote!(__tc::Type::Unit),
        Type::Fn(f) => {
            let ps = f.params.iter().map(ty);
            let r = ty(&f.ret);
            quote!(__tc::Type::Fn(__tc::FnType {
                params: ::std::vec![#(#ps),*],
                ret: ::std::boxed::Box::new(#r),
            }))
        }
    }
}

fn spans(ss: &[SpanId]) -> TokenStream {
    let ss = ss.iter().map(|s| span_id(*s));
    quote!(::std::vec![#(#ss),*])
}

fn spanned_pred(s: &Spanned<Pred>) -> TokenStream {
    let p = pred(&s.node);
    let sp = span_id(s.span);
    quote!(__tc::Spanned { node: #p, span: #sp })
}

fn param(p: &Param) -> TokenStream {
    let name = string(&p.name);
    let t = ty(&p.ty);
    let span = span_id(p.span);
    let ds = spans(&p.dim_spans);
    let rs = spans(&p.ref_spans);
    quote!(__tc::Param { name: #name, ty: #t, span: #span, dim_spans: #ds, ref_spans: #rs })
}

fn signature(s: &Signature) -> TokenStream {
    let name = string(&s.name);
    let vars = s.vars.iter().map(|v| {
        let n = string(&v.name);
        let (z, f) = (v.allow_zero, v.fresh);
        quote!(__tc::ShapeVar { name: #n, allow_zero: #z, fresh: #f })
    });
    let consts = s.consts.iter().map(|(n, v)| {
        let n = string(n);
        let v = i64_lit(*v);
        quote!((#n, #v))
    });
    let params = s.params.iter().map(param);
    let requires = s.requires.iter().map(spanned_pred);
    let axioms = s.axioms.iter().map(spanned_pred);
    let ret = ty(&s.ret);
    let ret_span = span_id(s.ret_span);
    let rds = spans(&s.ret_dim_spans);
    let span = span_id(s.span);
    quote!(__tc::Signature {
        name: #name,
        vars: ::std::vec![#(#vars),*],
        consts: ::std::vec![#(#consts),*],
        params: ::std::vec![#(#params),*],
        requires: ::std::vec![#(#requires),*],
        axioms: ::std::vec![#(#axioms),*],
        ret: #ret,
        ret_span: #ret_span,
        ret_dim_spans: #rds,
        span: #span,
    })
}

fn value(v: tc_core::ir::Value) -> TokenStream {
    let n = Literal::u32_suffixed(v.0);
    quote!(__tc::Value(#n))
}

fn values(vs: &[tc_core::ir::Value]) -> TokenStream {
    let vs = vs.iter().map(|v| value(*v));
    quote!(::std::vec![#(#vs),*])
}

fn usizes(xs: &[usize]) -> TokenStream {
    let xs = xs.iter().map(|x| usize_lit(*x));
    quote!(::std::vec![#(#xs),*])
}

fn scalar(s: &Scalar) -> TokenStream {
    match s {
        Scalar::Float(x) => {
            let bits = Literal::u64_suffixed(x.to_bits());
            quote!(__tc::Scalar::Float(::core::primitive::f64::from_bits(#bits)))
        }
        Scalar::Int(i) => {
            let i = i64_lit(*i);
            quote!(__tc::Scalar::Int(#i))
        }
        Scalar::Bool(b) => quote!(__tc::Scalar::Bool(#b)),
        Scalar::Param(i) => {
            let i = usize_lit(*i);
            quote!(__tc::Scalar::Param(#i))
        }
    }
}

fn op(o: &Op) -> TokenStream {
    match o {
        Op::Unary(u, x) => {
            let (u, x) = (variant(u), value(*x));
            quote!(__tc::Op::Unary(__tc::UnaryOp::#u, #x))
        }
        Op::Cast(d, x) => {
            let (d, x) = (dtype(*d), value(*x));
            quote!(__tc::Op::Cast(#d, #x))
        }
        Op::Binary(b, x, y) => {
            let (b, x, y) = (variant(b), value(*x), value(*y));
            quote!(__tc::Op::Binary(__tc::BinaryOp::#b, #x, #y))
        }
        Op::ScalarBinary {
            op,
            x,
            s,
            scalar_left,
        } => {
            let (b, x, s) = (variant(op), value(*x), scalar(s));
            quote!(__tc::Op::ScalarBinary { op: __tc::BinaryOp::#b, x: #x, s: #s, scalar_left: #scalar_left })
        }
        Op::Select(c, a, b) => {
            let (c, a, b) = (value(*c), value(*a), value(*b));
            quote!(__tc::Op::Select(#c, #a, #b))
        }
        Op::Matmul(a, b) => {
            let (a, b) = (value(*a), value(*b));
            quote!(__tc::Op::Matmul(#a, #b))
        }
        Op::QMatmul(x, w) => {
            let (x, w) = (value(*x), value(*w));
            quote!(__tc::Op::QMatmul(#x, #w))
        }
        Op::Reduce {
            op,
            axes,
            keepdims,
            x,
        } => {
            let (r, axes, x) = (variant(op), usizes(axes), value(*x));
            quote!(__tc::Op::Reduce { op: __tc::ReduceOp::#r, axes: #axes, keepdims: #keepdims, x: #x })
        }
        Op::ArgReduce {
            max,
            axis,
            keepdims,
            x,
        } => {
            let (axis, x) = (usize_lit(*axis), value(*x));
            quote!(__tc::Op::ArgReduce { max: #max, axis: #axis, keepdims: #keepdims, x: #x })
        }
        Op::Transpose(p, x) => {
            let (p, x) = (usizes(p), value(*x));
            quote!(__tc::Op::Transpose(#p, #x))
        }
        Op::Reshape(s, x) => {
            let (s, x) = (dims(s), value(*x));
            quote!(__tc::Op::Reshape(#s, #x))
        }
        Op::Broadcast(s, x) => {
            let (s, x) = (dims(s), value(*x));
            quote!(__tc::Op::Broadcast(#s, #x))
        }
        Op::Slice {
            axis,
            start,
            stop,
            step,
            x,
        } => {
            let (axis, start, stop, x) = (usize_lit(*axis), dim(start), dim(stop), value(*x));
            let step = usize_lit(*step);
            quote!(__tc::Op::Slice { axis: #axis, start: #start, stop: #stop, step: #step, x: #x })
        }
        Op::Concat(axis, xs) => {
            let (axis, xs) = (usize_lit(*axis), values(xs));
            quote!(__tc::Op::Concat(#axis, #xs))
        }
        Op::Gather { .. } | Op::TopK { .. } | Op::CumSum { .. } | Op::Pad { .. } => lane_op(o),
        Op::Conv { .. } | Op::Pool { .. } => window_op(o),
        Op::Fill(d, s, v) => {
            let (d, s, v) = (dtype(*d), dims(s), scalar(v));
            quote!(__tc::Op::Fill(#d, #s, #v))
        }
        Op::Iota(d, s, a) => {
            let (d, s, a) = (dtype(*d), dims(s), usize_lit(*a));
            quote!(__tc::Op::Iota(#d, #s, #a))
        }
        Op::Call(n, xs) => {
            let (n, xs) = (string(n), values(xs));
            quote!(__tc::Op::Call(#n, #xs))
        }
        Op::Dim(d) => {
            let d = dim(d);
            quote!(__tc::Op::Dim(#d))
        }
    }
}

/// [`op`] for convolution and pooling.
fn window_op(o: &Op) -> TokenStream {
    let usizes = |v: &[usize]| {
        let v = v.iter().map(|&x| usize_lit(x));
        quote!(::std::vec![#(#v),*])
    };
    let window = |w: &Window| {
        let (s, p, d) = (usizes(&w.stride), usizes(&w.padding), usizes(&w.dilation));
        quote!(__tc::Window { stride: #s, padding: #p, dilation: #d })
    };
    match o {
        Op::Conv {
            window: w,
            groups,
            x,
            w: wt,
        } => {
            let (win, g, x, wt) = (window(w), usize_lit(*groups), value(*x), value(*wt));
            quote!(__tc::Op::Conv { window: #win, groups: #g, x: #x, w: #wt })
        }
        Op::Pool {
            kind,
            kernel,
            window: w,
            x,
        } => {
            let kind = match kind {
                PoolKind::Max => quote!(__tc::PoolKind::Max),
                PoolKind::Avg => quote!(__tc::PoolKind::Avg),
            };
            let (k, win, x) = (usizes(kernel), window(w), value(*x));
            quote!(__tc::Op::Pool { kind: #kind, kernel: #k, window: #win, x: #x })
        }
        _ => TokenStream::new(),
    }
}

/// [`op`] for gather, top-k, cumsum and pad (the ops beyond Section 2).
fn lane_op(o: &Op) -> TokenStream {
    match o {
        Op::Pad {
            axis,
            before,
            after,
            value,
            x,
        } => {
            let (axis, before, after) = (usize_lit(*axis), dim(before), dim(after));
            let (value, x) = (scalar(value), self::value(*x));
            quote!(__tc::Op::Pad { axis: #axis, before: #before, after: #after, value: #value, x: #x })
        }
        Op::CumSum { axis, x } => {
            let (axis, x) = (usize_lit(*axis), value(*x));
            quote!(__tc::Op::CumSum { axis: #axis, x: #x })
        }
        Op::TopK {
            k,
            axis,
            indices,
            x,
        } => {
            let (k, axis, x) = (dim(k), usize_lit(*axis), value(*x));
            quote!(__tc::Op::TopK { k: #k, axis: #axis, indices: #indices, x: #x })
        }
        Op::Gather { axis, table, ids } => {
            let (axis, table, ids) = (usize_lit(*axis), value(*table), value(*ids));
            quote!(__tc::Op::Gather { axis: #axis, table: #table, ids: #ids })
        }
        _ => TokenStream::new(),
    }
}

fn inst(i: &Inst) -> TokenStream {
    let result = value(i.result);
    let o = op(&i.op);
    let annot = match &i.annot {
        Some(t) => {
            let t = ty(t);
            quote!(::core::option::Option::Some(#t))
        }
        None => quote!(::core::option::Option::None),
    };
    let span = span_id(i.span);
    let args = spans(&i.arg_spans);
    let attrs = spans(&i.attr_spans);
    let annot_span = span_id(i.annot_span);
    quote!(__tc::Inst {
        result: #result,
        op: #o,
        annot: #annot,
        span: #span,
        arg_spans: #args,
        attr_spans: #attrs,
        annot_span: #annot_span,
    })
}

fn dim_binding(b: &DimBinding) -> TokenStream {
    let name = string(&b.name);
    let of = value(b.of);
    let axis = usize_lit(b.axis);
    let before = usize_lit(b.before);
    let span = span_id(b.span);
    quote!(__tc::DimBinding { name: #name, of: #of, axis: #axis, before: #before, span: #span })
}

/// An expression of type `::tc::core::ir::Function` equal to `f`.
pub fn function(f: &Function) -> TokenStream {
    let sig = signature(&f.sig);
    let body = f.body.iter().map(inst);
    let bindings = f.dim_bindings.iter().map(dim_binding);
    let ret = value(f.ret);
    let ret_span = span_id(f.ret_span);
    quote!({
        #[allow(unused_imports, clippy::all)]
        mod __tc {
            pub use ::tc::core::ctx::ShapeVar;
            pub use ::tc::core::diag::SpanId;
            pub use ::tc::core::dim::Dim;
            pub use ::tc::core::dtype::Dtype;
            pub use ::tc::core::ir::{
                BinaryOp, DimBinding, Function, Inst, Op, Param, PoolKind, ReduceOp, Scalar, Signature, Spanned,
                UnaryOp, Value, Window,
            };
            pub use ::tc::core::pred::{CmpOp, Pred};
            pub use ::tc::core::types::{FnType, TensorType, Type};
        }
        #[allow(clippy::all)]
        let f = __tc::Function {
            sig: #sig,
            body: ::std::vec![#(#body),*],
            dim_bindings: ::std::vec![#(#bindings),*],
            ret: #ret,
            ret_span: #ret_span,
        };
        f
    })
}
