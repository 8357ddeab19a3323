//! Bodies: Rust statements and expressions → the instructions of
//! [`tc_core::ir::Function`], with a [`SpanId`] for every instruction, operand
//! and static attribute.
//!
//! Lowering does no typing (that is the checker's job); it only rejects what
//! has no meaning in a tensor body. Errors do not stop it: a failed `let`
//! binds a poisoned name so later uses report nothing more, and every
//! unsupported construct in the body is reported in one build.

use std::collections::{BTreeSet, HashMap};

use proc_macro2::Ident;
use quote::ToTokens;
use syn::{BinOp, Block, Expr, GenericArgument, Lit, Pat, PathArguments, Stmt, UnOp};
use tc_core::ir::{
    BinaryOp, DimBinding, Function, Inst, Op, PoolKind, ReduceOp, RopeLayout, Scalar, Signature,
    Signatures, UnaryOp, Value,
};
use tc_core::{Dim, Dtype, SpanId, Type};

use crate::ctxt::Ctxt;
use crate::parse::{self, ident_of, int_lit, unparen, DimNames};

mod window;
use crate::spans::{err_at, SpanTable};
use tc_core::diag::codes;

/// What a name in the body refers to.
#[derive(Clone, Debug)]
enum Local {
    /// A tensor value (parameter or `let`).
    Tensor(Value),
    /// A scalar: a scalar parameter (`Scalar::Param`) or a `let` of a literal.
    Scalar(Scalar, Option<Value>),
    /// A local dim binding `let n = dim(&x, 0)`.
    Dim,
    /// A dim parameter `heads: Dim![H]`: its value (passed on to calls) and
    /// its dim as written (`H`), which is what a shape in the body names.
    DimParam(Value, String),
    /// A binding whose initialiser had an error.
    Poison,
}

/// The result of lowering an expression.
#[derive(Clone, Debug)]
enum Operand {
    Tensor(Value),
    /// A scalar; for a scalar parameter, also its value id (for calls).
    Scalar(Scalar, Option<Value>),
    Poison,
}

/// Why lowering could not finish.
pub enum LowerError {
    /// User errors, recorded in the caller's [`Ctxt`].
    Refused,
    /// A call to a tensor fn whose own signature failed: reported there; stay quiet here.
    BrokenCallee,
}

struct Lowerer<'a> {
    spans: &'a mut SpanTable,
    sigs: &'a Signatures,
    broken: &'a BTreeSet<String>,
    /// Inside a `#[tensor_module]` (calls to its fns resolve) or a
    /// standalone `#[tensor_fn]` (no other tensor fn is visible).
    in_module: bool,
    sig: &'a Signature,
    body: Vec<Inst>,
    dim_bindings: Vec<DimBinding>,
    env: HashMap<String, Local>,
    /// This body's errors, handed to the caller's sink unless a broken
    /// callee silences them.
    cx: Ctxt,
    broken_callee: bool,
    /// Current recursion depth of `expr`.
    depth: usize,
    /// The signature's shape variables and module constants: names that are
    /// dims, not values (for the error when one is passed for a tensor).
    dim_names: BTreeSet<String>,
}

/// Body dims: names of tensors and scalars are not dims.
struct BodyNames<'a>(&'a HashMap<String, Local>);

impl DimNames for BodyNames<'_> {
    fn check(&self, name: &Ident) -> Result<(), String> {
        match self.0.get(&name.to_string()) {
            Some(Local::Tensor(_)) => Err(format!(
                "`{name}` is a tensor, not a dim: bind one of its sizes with `let n = dim(&{name}, axis);`"
            )),
            Some(Local::Scalar(..)) => Err(format!("`{name}` is a scalar, not a dim")),
            // `H: Dim![H]`: the name is the very variable the parameter binds.
            Some(Local::DimParam(_, d)) if name == d.as_str() => Ok(()),
            Some(Local::DimParam(_, d)) => Err(format!(
                "`{name}` is a dim parameter; in a dim, write its dim `{d}` (the parameter binds it)"
            )),
            _ => Ok(()),
        }
    }
}

fn unsupported(e: &dyn ToTokens, what: &str) -> syn::Error {
    err_at(
        codes::UNSUPPORTED,
        e,
        format!("not supported in a tensor_fn body: {what}"),
    )
}

fn expr_kind(e: &Expr) -> &'static str {
    match e {
        Expr::Array(_) => "array literal (only as an axis list or shape argument)",
        Expr::Assign(_) => "assignment",
        Expr::Async(_) => "async block",
        Expr::Await(_) => "`.await`",
        Expr::Block(_) => "block expression",
        Expr::Break(_) => "`break`",
        Expr::Closure(_) => "closure",
        Expr::Const(_) => "const block",
        Expr::Continue(_) => "`continue`",
        Expr::Field(_) => "field access",
        Expr::ForLoop(_) => "`for` loop",
        Expr::If(_) => "`if` expression (use `select(cond, a, b)` for an elementwise choice)",
        Expr::Index(_) => "indexing (use `slice(x, axis, start, stop)`)",
        Expr::Infer(_) => "`_`",
        Expr::Let(_) => "`let` expression",
        Expr::Loop(_) => "`loop`",
        Expr::Macro(_) => "macro invocation",
        Expr::Match(_) => "`match`",
        Expr::Range(_) => "range expression",
        Expr::RawAddr(_) => "raw address",
        Expr::Repeat(_) => "array repeat expression",
        Expr::Return(_) => "`return` before the end of the body",
        Expr::Struct(_) => "struct literal",
        Expr::Try(_) => "`?` operator",
        Expr::TryBlock(_) => "try block",
        Expr::Tuple(_) => "tuple",
        Expr::Unsafe(_) => "unsafe block",
        Expr::While(_) => "`while` loop",
        Expr::Yield(_) => "`yield`",
        Expr::Cast(_) => "`as` cast (use `x.cast::<dtype>()`)",
        _ => "this expression",
    }
}

/// The one dtype generic argument of `name::<dt>`.
fn turbofish_dtype(
    args: Option<&syn::AngleBracketedGenericArguments>,
    at: &dyn ToTokens,
    name: &str,
) -> syn::Result<(Dtype, syn::Type)> {
    let Some(args) = args else {
        return Err(err_at(
            codes::OP_ARGUMENTS,
            at,
            format!("`{name}` needs its dtype: `{name}::<f32>(…)`"),
        ));
    };
    if args.args.len() != 1 {
        return Err(err_at(
            codes::OP_ARGUMENTS,
            args,
            format!("`{name}` takes exactly one dtype argument"),
        ));
    }
    match &args.args[0] {
        GenericArgument::Type(t) => match parse::scalar_dtype(t) {
            Some(d) => Ok((d, t.clone())),
            None => Err(err_at(
codes::UNKNOWN_DTYPE,
                t,
                "unknown dtype (expected one of f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i16, i8, i4, bool)",
            )),
        },
        other => Err(err_at(codes::UNKNOWN_DTYPE, other, "expected a dtype")),
    }
}

/// A literal as written (possibly negated), before any range check:
/// integers widened to i128 (`None` beyond it), floats as parsed to f64
/// (`1e400` parses to `inf`).
enum RawLit {
    Int(Option<i128>),
    Float(f64),
    Bool(bool),
}

fn raw_literal(e: &Expr) -> Option<RawLit> {
    match unparen(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Float(f) => f.base10_parse::<f64>().ok().map(RawLit::Float),
            Lit::Int(i) => Some(RawLit::Int(i.base10_parse::<i128>().ok())),
            Lit::Bool(b) => Some(RawLit::Bool(b.value)),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match raw_literal(&u.expr)? {
            RawLit::Float(x) => Some(RawLit::Float(-x)),
            RawLit::Int(i) => Some(RawLit::Int(i.and_then(i128::checked_neg))),
            RawLit::Bool(_) => None,
        },
        _ => None,
    }
}

/// A scalar literal operand: `None` when `e` is not a literal, an error when
/// it has no exact value in any dtype: an integer outside i64 (the widest
/// integer dtype) or a float that is not finite as an f64 (`1e400`). Whether
/// it fits the dtype it meets is checked after typing (`literals`).
fn scalar_literal(e: &Expr) -> Option<syn::Result<Scalar>> {
    Some(match raw_literal(e)? {
        RawLit::Bool(b) => Ok(Scalar::Bool(b)),
        RawLit::Int(Some(v)) if i64::try_from(v).is_ok() => Ok(Scalar::Int(v as i64)),
        RawLit::Int(_) => Err(err_at(
codes::LITERAL_RANGE,
            e,
            format!(
                "integer literal out of range: expected a value in [{}, {}] (i64, the widest integer dtype), found `{}`",
                i64::MIN,
                i64::MAX,
                e.to_token_stream()
            ),
        )),
        RawLit::Float(x) if x.is_finite() => Ok(Scalar::Float(x)),
        RawLit::Float(_) => Err(err_at(
codes::LITERAL_RANGE,
            e,
            format!(
                "float literal out of range: `{}` is not a finite number (expected a magnitude of at most {:e}, \
                 the largest f32; it would become infinity)",
                e.to_token_stream(),
                f32::MAX
            ),
        )),
    })
}

fn reduce_from(name: &str) -> Option<(ReduceOp, bool)> {
    let (base, keep) = match name.strip_suffix("_keepdims") {
        Some(b) => (b, true),
        None => (name, false),
    };
    ReduceOp::from_name(base).map(|r| (r, keep))
}

fn binary_from(name: &str) -> Option<BinaryOp> {
    Some(match name {
        "add" => BinaryOp::Add,
        "sub" => BinaryOp::Sub,
        "mul" => BinaryOp::Mul,
        "div" => BinaryOp::Div,
        "maximum" => BinaryOp::Max,
        "minimum" => BinaryOp::Min,
        other => return BinaryOp::from_name(other),
    })
}

impl Lowerer<'_> {
    fn push(
        &mut self,
        op: Op,
        whole: &dyn ToTokens,
        arg_spans: Vec<SpanId>,
        attr_spans: Vec<SpanId>,
    ) -> Operand {
        let span = self.spans.alloc(whole);
        let result = self.sig.inst_value(self.body.len());
        let mut inst = Inst::new(result, op, span);
        inst.arg_spans = arg_spans;
        inst.attr_spans = attr_spans;
        self.body.push(inst);
        Operand::Tensor(result)
    }

    fn fail(&mut self, e: syn::Error) -> Operand {
        self.cx.push(e);
        Operand::Poison
    }

    /// Lower `e` and require a tensor.
    fn tensor(&mut self, e: &Expr) -> Option<(Value, SpanId)> {
        let span = self.spans.alloc(e);
        match self.expr(e) {
            Operand::Tensor(v) => Some((v, span)),
            Operand::Scalar(..) => {
                self.cx.push(err_at(
codes::KIND_MISMATCH,
                    e,
                    "expected a tensor, found a scalar (make a tensor with `full::<dtype>([dims], value)`)",
                ));
                None
            }
            Operand::Poison => None,
        }
    }

    fn dim(&mut self, e: &Expr) -> Option<(Dim, SpanId)> {
        let span = self.spans.alloc(e);
        match parse::dim_expr(e, &BodyNames(&self.env)) {
            Ok(d) => Some((d, span)),
            Err(err) => {
                self.cx.push(err);
                None
            }
        }
    }

    fn dim_list(&mut self, e: &Expr) -> Option<(Vec<Dim>, Vec<SpanId>)> {
        let Expr::Array(arr) = unparen(e) else {
            self.cx.push(err_at(
                codes::OP_ARGUMENTS,
                e,
                "expected a shape: `[d₀, d₁, …]`",
            ));
            return None;
        };
        let mut dims = Vec::new();
        let mut spans = Vec::new();
        let mut ok = true;
        for x in &arr.elems {
            match self.dim(x) {
                Some((d, s)) => {
                    dims.push(d);
                    spans.push(s);
                }
                None => ok = false,
            }
        }
        ok.then_some((dims, spans))
    }

    fn axis(&mut self, e: &Expr) -> Option<(usize, SpanId)> {
        let span = self.spans.alloc(e);
        match int_lit(e) {
            Some(v) if v >= 0 => Some((v as usize, span)),
            Some(_) => {
                self.cx.push(err_at(
                    codes::OP_ARGUMENTS,
                    e,
                    "an axis is a non-negative integer literal",
                ));
                None
            }
            None if matches!(raw_literal(e), Some(RawLit::Int(_))) => {
                self.cx.push(err_at(
codes::OP_ARGUMENTS,
                    e,
                    format!(
                        "axis out of range: expected a non-negative integer literal up to {}, found `{}`",
                        i64::MAX,
                        e.to_token_stream()
                    ),
                ));
                None
            }
            None => {
                self.cx.push(err_at(
                    codes::OP_ARGUMENTS,
                    e,
                    "expected an axis: a non-negative integer literal",
                ));
                None
            }
        }
    }

    fn axis_list(&mut self, e: &Expr) -> Option<(Vec<usize>, Vec<SpanId>)> {
        match unparen(e) {
            Expr::Array(arr) => {
                let mut axes = Vec::new();
                let mut spans = Vec::new();
                let mut ok = true;
                for x in &arr.elems {
                    match self.axis(x) {
                        Some((a, s)) => {
                            axes.push(a);
                            spans.push(s);
                        }
                        None => ok = false,
                    }
                }
                ok.then_some((axes, spans))
            }
            _ => self.axis(e).map(|(a, s)| (vec![a], vec![s])),
        }
    }

    fn expr(&mut self, e: &Expr) -> Operand {
        // Defence in depth behind `limits::check` (which bounds every
        // expression tree by its token count before `syn` parses it): the
        // lowering recurses once per level and must never reach the end of
        // the compiler's stack.
        if self.depth >= crate::limits::MAX_EXPR_TOKENS {
            return self.fail(err_at(
codes::INPUT_LIMIT,
                e,
                format!(
                    "expression nested too deeply: tc-macros accepts at most {} levels; split it with `let` bindings",
                    crate::limits::MAX_EXPR_TOKENS
                ),
            ));
        }
        self.depth += 1;
        let out = self.expr_at_depth(e);
        self.depth -= 1;
        out
    }

    fn expr_at_depth(&mut self, e: &Expr) -> Operand {
        match e {
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Reference(r) if r.mutability.is_none() => self.expr(&r.expr),
            Expr::Path(_) => {
                let Some(id) = ident_of(e) else {
                    return self.fail(err_at(codes::UNSUPPORTED, e, "expected a local name"));
                };
                match self.env.get(&id.to_string()).cloned() {
                    Some(Local::Tensor(v)) => Operand::Tensor(v),
                    Some(Local::Scalar(s, v)) => Operand::Scalar(s, v),
                    Some(Local::Poison) => Operand::Poison,
                    Some(Local::Dim) => self.fail(err_at(
codes::KIND_MISMATCH,
                        e,
                        format!("`{id}` is a dim, not a tensor (use it in a shape, e.g. `full::<f32>([{id}], 0.0)`)"),
                    )),
                    Some(Local::DimParam(_, d)) => self.fail(err_at(
codes::KIND_MISMATCH,
                        e,
                        format!("`{id}` is a dim parameter, not a tensor (use its dim `{d}` in a shape, e.g. `full::<f32>([{d}], 0.0)`, or pass `{id}` to a tensor fn's dim parameter)"),
                    )),
                    None => self.fail(err_at(codes::UNKNOWN_NAME, e, format!("unknown name `{id}` in a tensor_fn body"))),
                }
            }
            Expr::Lit(_) => match scalar_literal(e) {
                Some(Ok(s)) => Operand::Scalar(s, None),
                Some(Err(err)) => self.fail(err),
                None => self.fail(err_at(
                    codes::UNSUPPORTED,
                    e,
                    "not supported in a tensor_fn body: this literal",
                )),
            },
            Expr::Unary(u) => match u.op {
                UnOp::Neg(_) => match scalar_literal(e) {
                    Some(Ok(s)) => Operand::Scalar(s, None),
                    Some(Err(err)) => self.fail(err),
                    None => self.unary(UnaryOp::Neg, &u.expr, e),
                },
                UnOp::Not(_) => self.unary(UnaryOp::Not, &u.expr, e),
                _ => self.fail(unsupported(e, "dereference")),
            },
            Expr::Binary(b) => {
                let op = match b.op {
                    BinOp::Add(_) => BinaryOp::Add,
                    BinOp::Sub(_) => BinaryOp::Sub,
                    BinOp::Mul(_) => BinaryOp::Mul,
                    BinOp::Div(_) => BinaryOp::Div,
                    BinOp::Rem(_) => BinaryOp::Rem,
                    BinOp::And(_) | BinOp::BitAnd(_) => BinaryOp::And,
                    BinOp::Or(_) | BinOp::BitOr(_) => BinaryOp::Or,
                    BinOp::BitXor(_) => BinaryOp::Xor,
                    BinOp::Eq(_) => BinaryOp::Eq,
                    BinOp::Ne(_) => BinaryOp::Ne,
                    BinOp::Lt(_) => BinaryOp::Lt,
                    BinOp::Le(_) => BinaryOp::Le,
                    BinOp::Gt(_) => BinaryOp::Gt,
                    BinOp::Ge(_) => BinaryOp::Ge,
                    _ => return self.fail(unsupported(&b.op, "this operator")),
                };
                self.binary(op, &b.left, &b.right, e)
            }
            Expr::Call(c) => {
                let Expr::Path(p) = unparen(&c.func) else {
                    return self.fail(unsupported(&c.func, "call of a computed function"));
                };
                if p.qself.is_some() || p.path.segments.len() != 1 {
                    return self.fail(unsupported(
                        &c.func,
                        "path call (call ops and tensor fns of the same module by their bare name)",
                    ));
                }
                let seg = &p.path.segments[0];
                let generics = match &seg.arguments {
                    PathArguments::AngleBracketed(a) => Some(a),
                    PathArguments::None => None,
                    PathArguments::Parenthesized(x) => {
                        return self.fail(unsupported(x, "parenthesized arguments"))
                    }
                };
                let args: Vec<&Expr> = c.args.iter().collect();
                self.call(&seg.ident, generics, &args, e)
            }
            Expr::MethodCall(m) => {
                let generics = m.turbofish.as_ref();
                let mut args: Vec<&Expr> = vec![&m.receiver];
                args.extend(m.args.iter());
                if m.method == "clone" && m.args.is_empty() {
                    return self.expr(&m.receiver);
                }
                self.call(&m.method, generics, &args, e)
            }
            other => self.fail(unsupported(other, expr_kind(other))),
        }
    }

    fn unary(&mut self, op: UnaryOp, x: &Expr, whole: &Expr) -> Operand {
        let Some((v, s)) = self.tensor(x) else {
            return Operand::Poison;
        };
        self.push(Op::Unary(op, v), whole, vec![s], vec![])
    }

    fn binary(&mut self, op: BinaryOp, a: &Expr, b: &Expr, whole: &Expr) -> Operand {
        let sa = self.spans.alloc(a);
        let sb = self.spans.alloc(b);
        let la = self.expr(a);
        let lb = self.expr(b);
        match (la, lb) {
            (Operand::Tensor(x), Operand::Tensor(y)) => self.push(Op::Binary(op, x, y), whole, vec![sa, sb], vec![]),
            (Operand::Tensor(x), Operand::Scalar(s, _)) => {
                self.push(Op::ScalarBinary { op, x, s, scalar_left: false }, whole, vec![sa, sb], vec![])
            }
            (Operand::Scalar(s, _), Operand::Tensor(x)) => {
                self.push(Op::ScalarBinary { op, x, s, scalar_left: true }, whole, vec![sb, sa], vec![])
            }
            (Operand::Scalar(..), Operand::Scalar(..)) => self.fail(err_at(
codes::UNSUPPORTED,
                whole,
                "not supported in a tensor_fn body: arithmetic between two scalars (one operand must be a tensor)",
            )),
            _ => Operand::Poison,
        }
    }

    fn arity(&mut self, name: &Ident, args: &[&Expr], n: usize, whole: &Expr, usage: &str) -> bool {
        if args.len() == n {
            true
        } else {
            self.cx.push(err_at(
                codes::OP_ARGUMENTS,
                whole,
                format!(
                    "`{name}` takes {n} argument{} (`{usage}`), found {}",
                    if n == 1 { "" } else { "s" },
                    args.len()
                ),
            ));
            false
        }
    }

    fn call(
        &mut self,
        name: &Ident,
        generics: Option<&syn::AngleBracketedGenericArguments>,
        args: &[&Expr],
        whole: &Expr,
    ) -> Operand {
        let n = name.to_string();
        // Tensor fns of the module shadow the built-in ops.
        if self.sigs.contains_key(&n) || self.broken.contains(&n) {
            return self.module_call(name, args, whole);
        }
        if n != "cast" && n != "full" && n != "iota" {
            if let Some(g) = generics {
                return self.fail(err_at(
                    codes::OP_ARGUMENTS,
                    g,
                    format!("`{n}` takes no generic arguments"),
                ));
            }
        }
        if let Some(op) = UnaryOp::from_name(&n) {
            if !self.arity(name, args, 1, whole, &format!("{n}(x)` or `x.{n}()")) {
                return Operand::Poison;
            }
            return self.unary(op, args[0], whole);
        }
        if let Some(op) = binary_from(&n) {
            if !self.arity(name, args, 2, whole, &format!("{n}(a, b)")) {
                return Operand::Poison;
            }
            return self.binary(op, args[0], args[1], whole);
        }
        if let Some((op, keepdims)) = reduce_from(&n) {
            if !self.arity(name, args, 2, whole, &format!("{n}(x, [axes])")) {
                return Operand::Poison;
            }
            let x = self.tensor(args[0]);
            let axes = self.axis_list(args[1]);
            let (Some((x, xs)), Some((axes, _))) = (x, axes) else {
                return Operand::Poison;
            };
            // One attribute span: the whole axis list.
            let attr = vec![self.spans.alloc(args[1])];
            return self.push(
                Op::Reduce {
                    op,
                    axes,
                    keepdims,
                    x,
                },
                whole,
                vec![xs],
                attr,
            );
        }
        match n.as_str() {
            "transpose" | "reshape" | "broadcast" | "slice" | "concat" => {
                self.layout_call(&n, name, args, whole)
            }
            _ => self.builtin_call(&n, name, generics, args, whole),
        }
    }

    /// The layout ops (Section 2 §9–§12): `transpose`, `reshape`,
    /// `broadcast`, `slice`, `concat`.
    fn layout_call(&mut self, n: &str, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        match n {
            "transpose" => {
                if !self.arity(name, args, 2, whole, "transpose(x, [permutation])") {
                    return Operand::Poison;
                }
                let x = self.tensor(args[0]);
                let perm = match unparen(args[1]) {
                    Expr::Array(_) => self.axis_list(args[1]),
                    _ => {
                        self.cx.push(err_at(
                            codes::OP_ARGUMENTS,
                            args[1],
                            "expected a permutation: `[1, 0]`",
                        ));
                        None
                    }
                };
                let (Some((x, xs)), Some((perm, _))) = (x, perm) else {
                    return Operand::Poison;
                };
                let attr = vec![self.spans.alloc(args[1])];
                self.push(Op::Transpose(perm, x), whole, vec![xs], attr)
            }
            "reshape" | "broadcast" => {
                if !self.arity(name, args, 2, whole, &format!("{n}(x, [dims])")) {
                    return Operand::Poison;
                }
                let x = self.tensor(args[0]);
                let dims = self.dim_list(args[1]);
                let (Some((x, xs)), Some((dims, mut attr))) = (x, dims) else {
                    return Operand::Poison;
                };
                // Per-dim spans, then the whole shape list at index `dims.len()`.
                attr.push(self.spans.alloc(args[1]));
                let op = if n == "reshape" {
                    Op::Reshape(dims, x)
                } else {
                    Op::Broadcast(dims, x)
                };
                self.push(op, whole, vec![xs], attr)
            }
            "slice" => self.slice_call(name, args, whole),
            "concat" => {
                if !self.arity(name, args, 2, whole, "concat([a, b, …], axis)") {
                    return Operand::Poison;
                }
                let Expr::Array(arr) = unparen(args[0]) else {
                    return self.fail(err_at(
                        codes::OP_ARGUMENTS,
                        args[0],
                        "expected the tensors to concatenate: `[a, b, …]`",
                    ));
                };
                let mut xs = Vec::new();
                let mut ss = Vec::new();
                let mut ok = true;
                for t in &arr.elems {
                    match self.tensor(t) {
                        Some((v, s)) => {
                            xs.push(v);
                            ss.push(s);
                        }
                        None => ok = false,
                    }
                }
                let axis = self.axis(args[1]);
                let Some((axis, asp)) = axis else {
                    return Operand::Poison;
                };
                if !ok {
                    return Operand::Poison;
                }
                if xs.len() < 2 {
                    return self.fail(err_at(
                        codes::OP_ARGUMENTS,
                        args[0],
                        "concat needs at least two tensors",
                    ));
                }
                self.push(Op::Concat(axis, xs), whole, ss, vec![asp])
            }
            _ => Operand::Poison,
        }
    }

    /// `qmatmul(x, w)` and `dequantize(w)` (Section 2 §18; `dequantize` is
    /// the cast of a quantized tensor to F32), and the int8 product
    /// `dq_matmul` (docs/syntax.md §7c).
    fn quant_call(&mut self, n: &str, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        if n == "dq_matmul" {
            return self.dq_matmul_call(name, args, whole);
        }
        if n == "dequantize" {
            if !self.arity(name, args, 1, whole, "dequantize(w)") {
                return Operand::Poison;
            }
            let Some((x, xs)) = self.tensor(args[0]) else {
                return Operand::Poison;
            };
            let ts = self.spans.alloc(whole);
            return self.push(Op::Cast(Dtype::F32, x), whole, vec![xs], vec![ts]);
        }
        if !self.arity(name, args, 2, whole, "qmatmul(x, w)") {
            return Operand::Poison;
        }
        let x = self.tensor(args[0]);
        let w = self.tensor(args[1]);
        match (x, w) {
            (Some((x, sx)), Some((w, sw))) => {
                self.push(Op::QMatmul(x, w), whole, vec![sx, sw], vec![])
            }
            _ => Operand::Poison,
        }
    }

    /// `topk(x, K, axis)`, `topk_indices(x, K, axis)`, `cumsum(x, axis)`:
    /// the ops that look along a whole lane.
    fn scan_call(&mut self, n: &str, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        match n {
            "cumsum" => {
                if !self.arity(name, args, 2, whole, "cumsum(x, axis)") {
                    return Operand::Poison;
                }
                let x = self.tensor(args[0]);
                let axis = self.axis(args[1]);
                let (Some((x, xs)), Some((axis, asp))) = (x, axis) else {
                    return Operand::Poison;
                };
                self.push(Op::CumSum { axis, x }, whole, vec![xs], vec![asp])
            }
            "topk" | "topk_indices" => {
                if !self.arity(name, args, 3, whole, &format!("{n}(x, K, axis)")) {
                    return Operand::Poison;
                }
                let x = self.tensor(args[0]);
                let k = self.dim(args[1]);
                let axis = self.axis(args[2]);
                let (Some((x, xs)), Some((k, ks)), Some((axis, asp))) = (x, k, axis) else {
                    return Operand::Poison;
                };
                let indices = n == "topk_indices";
                self.push(
                    Op::TopK {
                        k,
                        axis,
                        indices,
                        x,
                    },
                    whole,
                    vec![xs],
                    vec![asp, ks],
                )
            }
            _ => Operand::Poison,
        }
    }

    /// `pad(x, axis, before, after, value)`: dims for the widths, a scalar
    /// (literal or scalar parameter) for the value.
    fn pad_call(&mut self, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        if !self.arity(name, args, 5, whole, "pad(x, axis, before, after, value)") {
            return Operand::Poison;
        }
        let x = self.tensor(args[0]);
        let axis = self.axis(args[1]);
        let before = self.dim(args[2]);
        let after = self.dim(args[3]);
        let vs = self.spans.alloc(args[4]);
        let value = match self.expr(args[4]) {
            Operand::Scalar(s, _) => Some(s),
            Operand::Tensor(_) => return self.fail(err_at(
                codes::KIND_MISMATCH,
                args[4],
                "`pad` takes a scalar fill value (a literal or a scalar parameter), found a tensor",
            )),
            Operand::Poison => None,
        };
        let (Some((x, xs)), Some((axis, a)), Some((before, s1)), Some((after, s2)), Some(value)) =
            (x, axis, before, after, value)
        else {
            return Operand::Poison;
        };
        let op = Op::Pad {
            axis,
            before,
            after,
            value,
            x,
        };
        self.push(op, whole, vec![xs, vs], vec![a, s1, s2])
    }

    /// `slice(x, axis, start, stop)` or, strided, `slice(x, axis, start,
    /// stop, step)` with `step` an integer literal.
    fn slice_call(&mut self, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        if args.len() != 4 && args.len() != 5 {
            let usage = "slice(x, axis, start, stop)` or `slice(x, axis, start, stop, step)";
            return self.fail(err_at(
                codes::OP_ARGUMENTS,
                whole,
                format!(
                    "`{name}` takes 4 or 5 arguments (`{usage}`), found {}",
                    args.len()
                ),
            ));
        }
        let x = self.tensor(args[0]);
        let axis = self.axis(args[1]);
        let start = self.dim(args[2]);
        let stop = self.dim(args[3]);
        let step = match args.get(4) {
            Some(e) => self.step(e),
            None => Some((1, self.spans.alloc(whole))),
        };
        let (Some((x, xs)), Some((axis, a)), Some((start, s1)), Some((stop, s2)), Some((step, s3))) =
            (x, axis, start, stop, step)
        else {
            return Operand::Poison;
        };
        let op = Op::Slice {
            axis,
            start,
            stop,
            step,
            x,
        };
        self.push(op, whole, vec![xs], vec![a, s1, s2, s3])
    }

    /// A slice step: an integer literal (the checker requires ≥ 1).
    fn step(&mut self, e: &Expr) -> Option<(usize, SpanId)> {
        let span = self.spans.alloc(e);
        match int_lit(e).map(usize::try_from) {
            Some(Ok(v)) => Some((v, span)),
            Some(Err(_)) => {
                self.cx.push(err_at(
                    codes::OP_ARGUMENTS,
                    e,
                    "a slice step is a positive integer literal",
                ));
                None
            }
            None => {
                self.cx.push(err_at(
                    codes::OP_ARGUMENTS,
                    e,
                    "a slice step is an integer literal, e.g. `2`",
                ));
                None
            }
        }
    }

    /// `gather(table, ids)` (axis 0: an embedding lookup) or
    /// `gather(table, ids, axis)`.
    fn gather_call(&mut self, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        if args.len() != 2 && args.len() != 3 {
            let usage = "gather(table, ids)` or `gather(table, ids, axis)";
            return self.fail(err_at(
                codes::OP_ARGUMENTS,
                whole,
                format!(
                    "`{name}` takes 2 or 3 arguments (`{usage}`), found {}",
                    args.len()
                ),
            ));
        }
        let table = self.tensor(args[0]);
        let ids = self.tensor(args[1]);
        let axis = match args.get(2) {
            Some(a) => self.axis(a),
            None => Some((0, self.spans.alloc(whole))),
        };
        let (Some((table, ts)), Some((ids, is)), Some((axis, asp))) = (table, ids, axis) else {
            return Operand::Poison;
        };
        self.push(
            Op::Gather { axis, table, ids },
            whole,
            vec![ts, is],
            vec![asp],
        )
    }

    /// `rope_pairs(x, cos, sin)` and `rope_halves(x, cos, sin)` (Section 2
    /// §18, docs/syntax.md §12e).
    fn rope_call(&mut self, n: &str, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        if !self.arity(name, args, 3, whole, &format!("{n}(x, cos, sin)")) {
            return Operand::Poison;
        }
        let x = self.tensor(args[0]);
        let cos = self.tensor(args[1]);
        let sin = self.tensor(args[2]);
        let (Some((x, xs)), Some((cos, cs)), Some((sin, ss))) = (x, cos, sin) else {
            return Operand::Poison;
        };
        let layout = if n == "rope_pairs" {
            RopeLayout::Pairs
        } else {
            RopeLayout::Halves
        };
        self.push(
            Op::Rope {
                layout,
                x,
                cos,
                sin,
            },
            whole,
            vec![xs, cs, ss],
            vec![],
        )
    }

    /// `sdpa(q, k, v, mask, scale)` (docs/syntax.md §12f): the scale is a
    /// float literal (an integer one is taken as its float).
    fn sdpa_call(&mut self, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        if !self.arity(name, args, 5, whole, "sdpa(q, k, v, mask, scale)") {
            return Operand::Poison;
        }
        let scale = match scalar_literal(args[4]) {
            Some(Ok(Scalar::Float(x))) => Scalar::Float(x),
            Some(Ok(Scalar::Int(i))) => Scalar::Float(i as f64),
            Some(Err(e)) => return self.fail(e),
            _ => {
                return self.fail(err_at(
                    codes::OP_ARGUMENTS,
                    args[4],
                    format!(
                        "`sdpa`'s scale is a float literal (`0.125` for a head width of 64), found `{}`",
                        args[4].to_token_stream()
                    ),
                ))
            }
        };
        let opds = [0, 1, 2, 3].map(|i| self.tensor(args[i]));
        let [Some((q, qs)), Some((k, ks)), Some((v, vs)), Some((mask, ms))] = opds else {
            return Operand::Poison;
        };
        self.push(
            Op::Sdpa {
                q,
                k,
                v,
                mask,
                scale,
            },
            whole,
            vec![qs, ks, vs, ms],
            vec![],
        )
    }

    /// `dq_matmul(x, w, w_scale, w_outliers)` (docs/syntax.md §7c).
    fn dq_matmul_call(&mut self, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        let form = "dq_matmul(x, w, w_scale, w_outliers)";
        if !self.arity(name, args, 4, whole, form) {
            return Operand::Poison;
        }
        let opds = [0, 1, 2, 3].map(|i| self.tensor(args[i]));
        let [Some((x, xs)), Some((w, ws)), Some((scale, ss)), Some((outliers, os))] = opds else {
            return Operand::Poison;
        };
        let op = Op::DqMatmul {
            x,
            w,
            scale,
            outliers,
        };
        self.push(op, whole, vec![xs, ws, ss, os], vec![])
    }

    /// The other built-ins (scalar forms, `cast`, `select`, `matmul`,
    /// arg-reductions, `full`, `iota`), or an unknown name.
    fn builtin_call(
        &mut self,
        n: &str,
        name: &Ident,
        generics: Option<&syn::AngleBracketedGenericArguments>,
        args: &[&Expr],
        whole: &Expr,
    ) -> Operand {
        match n {
            "scale" | "add_scalar" => {
                if !self.arity(name, args, 2, whole, &format!("x.{n}(c)")) {
                    return Operand::Poison;
                }
                let op = if n == "scale" { BinaryOp::Mul } else { BinaryOp::Add };
                let sx = self.spans.alloc(args[0]);
                let sc = self.spans.alloc(args[1]);
                let x = self.tensor(args[0]);
                let c = self.expr(args[1]);
                match (x, c) {
                    (Some((x, _)), Operand::Scalar(s, _)) => {
                        self.push(Op::ScalarBinary { op, x, s, scalar_left: false }, whole, vec![sx, sc], vec![])
                    }
                    (Some(_), Operand::Tensor(_)) => self.fail(err_at(
codes::KIND_MISMATCH,
                        args[1],
                        format!("`{n}` takes a scalar (a literal or a scalar parameter), found a tensor"),
                    )),
                    _ => Operand::Poison,
                }
            }
            "cast" => {
                if !self.arity(name, args, 1, whole, "x.cast::<dtype>()") {
                    return Operand::Poison;
                }
                let dt = turbofish_dtype(generics, name, "cast");
                let x = self.tensor(args[0]);
                match (dt, x) {
                    (Ok((dt, t)), Some((x, xs))) => {
                        let ts = self.spans.alloc(&t);
                        self.push(Op::Cast(dt, x), whole, vec![xs], vec![ts])
                    }
                    (Err(e), _) => self.fail(e),
                    _ => Operand::Poison,
                }
            }
            "select" => {
                if !self.arity(name, args, 3, whole, "select(cond, a, b)") {
                    return Operand::Poison;
                }
                let c = self.tensor(args[0]);
                let a = self.tensor(args[1]);
                let b = self.tensor(args[2]);
                match (c, a, b) {
                    (Some((c, cs)), Some((a, as_)), Some((b, bs))) => {
                        self.push(Op::Select(c, a, b), whole, vec![cs, as_, bs], vec![])
                    }
                    _ => Operand::Poison,
                }
            }
            "matmul" | "matmul_i32" => {
                if !self.arity(name, args, 2, whole, &format!("{n}(a, b)")) {
                    return Operand::Poison;
                }
                let a = self.tensor(args[0]);
                let b = self.tensor(args[1]);
                match (a, b) {
                    (Some((a, sa)), Some((b, sb))) => {
                        let op = if n == "matmul" { Op::Matmul(a, b) } else { Op::MatmulI32(a, b) };
                        self.push(op, whole, vec![sa, sb], vec![])
                    }
                    _ => Operand::Poison,
                }
            }
            "qmatmul" | "dequantize" | "dq_matmul" => self.quant_call(n, name, args, whole),
            "argmax" | "argmin" | "argmax_keepdims" | "argmin_keepdims" => {
                if !self.arity(name, args, 2, whole, &format!("{n}(x, axis)")) {
                    return Operand::Poison;
                }
                let x = self.tensor(args[0]);
                let axis = self.axis(args[1]);
                let (Some((x, xs)), Some((axis, asp))) = (x, axis) else { return Operand::Poison };
                let max = n.starts_with("argmax");
                let keepdims = n.ends_with("_keepdims");
                self.push(Op::ArgReduce { max, axis, keepdims, x }, whole, vec![xs], vec![asp])
            }
            "gather" => self.gather_call(name, args, whole),
            "topk" | "topk_indices" | "cumsum" => self.scan_call(n, name, args, whole),
            "pad" => self.pad_call(name, args, whole),
            "rope_pairs" | "rope_halves" => self.rope_call(n, name, args, whole),
            "sdpa" => self.sdpa_call(name, args, whole),
            "conv1d" => self.conv_call(1, name, args, whole),
            "conv2d" => self.conv_call(2, name, args, whole),
            "max_pool1d" => self.pool_call(PoolKind::Max, 1, name, args, whole),
            "max_pool2d" => self.pool_call(PoolKind::Max, 2, name, args, whole),
            "avg_pool1d" => self.pool_call(PoolKind::Avg, 1, name, args, whole),
            "avg_pool2d" => self.pool_call(PoolKind::Avg, 2, name, args, whole),
            "full" | "iota" => self.creation_call(n, name, generics, args, whole),
            "dim" => self.fail(err_at(
codes::OP_ARGUMENTS,
                whole,
                "`dim(&x, axis)` binds a shape variable: write `let n = dim(&x, axis);` and use `n` in shapes",
            )),
            _ if self.in_module => self.fail(err_at(
codes::UNKNOWN_NAME,
                name,
                format!(
                    "unknown function `{n}`: not a tensor op, and no `#[tensor_fn] fn {n}` in this `#[tensor_module]`"
                ),
            )),
            _ => self.fail(err_at(
codes::UNKNOWN_NAME,
                name,
                format!(
                    "unknown function `{n}`: not a tensor op (docs/syntax.md lists them), and a standalone `#[tensor_fn]` \
                     sees no other fns: to call another `#[tensor_fn]`, put both in one `#[tensor_module] mod m {{ … }}` \
                     (calls are checked against the callee's signature, Section 2 §17)"
                ),
            )),
        }
    }

    /// `full::<dt>(shape, value)` and `iota::<dt>(shape, axis)`: the
    /// built-ins that create a tensor from a shape.
    fn creation_call(
        &mut self,
        n: &str,
        name: &Ident,
        generics: Option<&syn::AngleBracketedGenericArguments>,
        args: &[&Expr],
        whole: &Expr,
    ) -> Operand {
        match n {
            "full" => {
                if !self.arity(name, args, 2, whole, "full::<dtype>([dims], value)") {
                    return Operand::Poison;
                }
                let dt = turbofish_dtype(generics, name, "full");
                let dims = self.dim_list(args[0]);
                let sv = self.spans.alloc(args[1]);
                let v = self.expr(args[1]);
                match (dt, dims, v) {
                    (Ok((dt, t)), Some((dims, mut attr)), Operand::Scalar(s, _)) => {
                        attr.push(self.spans.alloc(args[0]));
                        attr.push(self.spans.alloc(&t));
                        self.push(Op::Fill(dt, dims, s), whole, vec![sv], attr)
                    }
                    (Err(e), ..) => self.fail(e),
                    (_, _, Operand::Tensor(_)) => self.fail(err_at(
codes::KIND_MISMATCH,
                        args[1],
                        "`full` takes a scalar fill value (a literal or a scalar parameter), found a tensor",
                    )),
                    _ => Operand::Poison,
                }
            }
            "iota" => {
                if !self.arity(name, args, 2, whole, "iota::<dtype>([dims], axis)") {
                    return Operand::Poison;
                }
                let dt = turbofish_dtype(generics, name, "iota");
                let dims = self.dim_list(args[0]);
                let axis = self.axis(args[1]);
                match (dt, dims, axis) {
                    (Ok((dt, t)), Some((dims, mut attr)), Some((axis, asp))) => {
                        attr.push(asp);
                        attr.push(self.spans.alloc(&t));
                        self.push(Op::Iota(dt, dims, axis), whole, vec![], attr)
                    }
                    (Err(e), ..) => self.fail(e),
                    _ => Operand::Poison,
                }
            }
            _ => Operand::Poison,
        }
    }

    fn module_call(&mut self, name: &Ident, args: &[&Expr], whole: &Expr) -> Operand {
        let n = name.to_string();
        if self.broken.contains(&n) {
            self.broken_callee = true;
            for a in args {
                let _ = self.expr(a);
            }
            return Operand::Poison;
        }
        let mut vals = Vec::new();
        let mut ss = Vec::new();
        let mut ok = true;
        let callee_sig = self.sigs.get(&n);
        for (i, a) in args.iter().enumerate() {
            let s = self.spans.alloc(*a);
            let param = callee_sig.and_then(|sig| sig.params.get(i));
            let wants_dim = param.is_some_and(|p| matches!(p.ty, Type::Dim(_)));
            let what = param.map(|p| format!("argument `{}` of `{n}`", p.name));
            match self.dim_arg(a, wants_dim, what.as_deref()) {
                Some(Some(v)) => {
                    vals.push(v);
                    ss.push(s);
                    continue;
                }
                Some(None) => {
                    ok = false;
                    ss.push(s);
                    continue;
                }
                None => {}
            }
            match self.expr(a) {
                Operand::Tensor(v) => vals.push(v),
                Operand::Scalar(_, Some(v)) => vals.push(v),
                Operand::Scalar(_, None) => {
                    self.cx.push(err_at(
codes::CALL,
                        *a,
                        "a scalar argument of a tensor fn call must be a scalar parameter of the caller, not a literal",
                    ));
                    ok = false;
                }
                Operand::Poison => ok = false,
            }
            ss.push(s);
        }
        if !ok {
            return Operand::Poison;
        }
        // Attribute 0: the callee's name (where a recursive call is reported).
        let callee = vec![self.spans.alloc(name)];
        self.push(Op::Call(n, vals), whole, ss, callee)
    }

    /// A call argument as a dim value (Section 1 §6 site 1): a dim parameter
    /// of the caller is passed on as is; for a dim parameter of the callee,
    /// any other argument that is not a tensor or scalar name is a dim
    /// expression (`H`, `12`, `2 * H`, a module constant), lowered to an
    /// [`Op::Dim`]. `None`: not a dim, lower it as an expression (the checker
    /// then reports a kind mismatch against a dim parameter); `Some(None)`:
    /// a malformed dim, already reported.
    fn dim_arg(&mut self, a: &Expr, wants_dim: bool, what: Option<&str>) -> Option<Option<Value>> {
        let local = ident_of(a).and_then(|id| self.env.get(&id.to_string()));
        match local {
            Some(Local::DimParam(v, _)) => return Some(Some(*v)),
            Some(Local::Tensor(_) | Local::Scalar(..) | Local::Poison) => return None,
            Some(Local::Dim) | None => {}
        }
        if !wants_dim {
            let id = ident_of(a).map(|id| id.to_string());
            let what = what.filter(|_| local.is_none());
            if let (Some(id), Some(what)) = (id.filter(|id| self.dim_names.contains(id)), what) {
                // A shape variable or constant where the callee takes a tensor
                // or scalar: a kind mismatch, not an unknown name.
                self.cx.push(crate::spans::err_help(
                    codes::KIND_MISMATCH,
                    a,
                    format!("call (Section 2 §17): {what}: expected a tensor or scalar, found the dim `{id}`"),
                    "only a `Dim![…]` parameter takes a dim: pass a tensor, or make the callee's parameter a `Dim![…]`",
                ));
                return Some(None);
            }
            return None;
        }
        let Some((d, span)) = self.dim(a) else {
            return Some(None);
        };
        match self.push(Op::Dim(d), a, vec![span], vec![]) {
            Operand::Tensor(v) => Some(Some(v)),
            _ => Some(None),
        }
    }

    fn let_stmt(&mut self, l: &syn::Local) {
        let (pat, annot) = match &l.pat {
            Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            p => (p, None),
        };
        let name = match pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                if let Some(m) = &pi.mutability {
                    self.cx.push(unsupported(
                        m,
                        "`mut` binding (a tensor_fn body is single-assignment)",
                    ));
                }
                pi.ident.to_string()
            }
            other => {
                self.cx
                    .push(unsupported(other, "this pattern (bind one name per `let`)"));
                return;
            }
        };
        let Some(init) = &l.init else {
            self.cx.push(unsupported(l, "`let` without an initialiser"));
            self.env.insert(name, Local::Poison);
            return;
        };
        if let Some((_, diverge)) = &init.diverge {
            self.cx.push(unsupported(&**diverge, "`let … else`"));
        }
        // `let n = dim(&x, axis);`
        if let Expr::Call(c) = unparen(&init.expr) {
            if let Expr::Path(p) = unparen(&c.func) {
                if p.path.is_ident("dim") && !self.sigs.contains_key("dim") {
                    if let Some(t) = annot {
                        self.cx
                            .push(unsupported(t, "a type annotation on a dim binding"));
                    }
                    let args: Vec<&Expr> = c.args.iter().collect();
                    let id = if let Pat::Ident(pi) = pat {
                        pi.ident.clone()
                    } else {
                        return;
                    };
                    if !self.arity(&id, &args, 2, &init.expr, "let n = dim(&x, axis)") {
                        self.env.insert(name, Local::Poison);
                        return;
                    }
                    let x = self.tensor(args[0]);
                    let axis = self.axis(args[1]);
                    match (x, axis) {
                        (Some((of, _)), Some((axis, _))) => {
                            let sp = self.spans.alloc(&*init.expr);
                            self.dim_bindings.push(DimBinding {
                                name: name.clone(),
                                of,
                                axis,
                                before: self.body.len(),
                                span: sp,
                            });
                            self.env.insert(name, Local::Dim);
                        }
                        _ => {
                            self.env.insert(name, Local::Poison);
                        }
                    }
                    return;
                }
            }
        }
        let before = self.body.len();
        let v = self.expr(&init.expr);
        let local = match v {
            Operand::Tensor(v) => Local::Tensor(v),
            Operand::Scalar(s, v) => Local::Scalar(s, v),
            Operand::Poison => Local::Poison,
        };
        let local = match (annot, local) {
            (Some(t), Local::Tensor(v)) => Local::Tensor(self.annotate(v, before, t, &init.expr)),
            (_, l) => l,
        };
        if let (Some(t), Local::Scalar(..)) = (annot, &local) {
            if parse::scalar_dtype(t).is_none() {
                self.cx.push(err_at(
                    codes::UNSUPPORTED,
                    t,
                    "a scalar `let` may only be annotated with a scalar dtype",
                ));
            }
        }
        self.env.insert(name, local);
    }

    /// `let y: Tensor![…] = e;`: a check boundary on the instruction defining `v`.
    fn annotate(&mut self, v: Value, before: usize, ty: &syn::Type, init: &Expr) -> Value {
        let Some(toks) = parse::tensor_macro(ty) else {
            self.cx.push(err_at(
                codes::UNSUPPORTED,
                ty,
                "a tensor `let` may only be annotated with `Tensor![dtype; dims…]`",
            ));
            return v;
        };
        let env = std::mem::take(&mut self.env);
        let parsed = parse::tensor_type(toks, &BodyNames(&env), self.spans);
        self.env = env;
        let t = match parsed {
            Ok(t) => t,
            Err(e) => {
                self.cx.push(e);
                return v;
            }
        };
        let annot_span = self.spans.alloc(ty);
        let fresh = self.body.len() > before && self.body.last().is_some_and(|i| i.result == v);
        if !fresh {
            // `let y: T = x;` re-views an existing value: an identity transpose
            // carries the check boundary (no data movement after lowering).
            let rank = t.ty.shape.len();
            let xs = self.spans.alloc(init);
            let _ = self.push(
                Op::Transpose((0..rank).collect(), v),
                init,
                vec![xs],
                vec![],
            );
        }
        if let Some(inst) = self.body.last_mut() {
            inst.annot = Some(Type::Tensor(t.ty));
            inst.annot_span = annot_span;
        }
        self.body.last().map(|i| i.result).unwrap_or(v)
    }
}

/// Lower a whole function body against its (already built) signature; its
/// errors go to `cx`, unless it calls a fn whose signature was refused
/// (reported there: this body stays quiet).
pub fn function(
    sig: Signature,
    block: &Block,
    sigs: &Signatures,
    broken: &BTreeSet<String>,
    in_module: bool,
    spans: &mut SpanTable,
    cx: &Ctxt,
) -> Result<Function, LowerError> {
    let mut env = HashMap::new();
    for (i, p) in sig.params.iter().enumerate() {
        let local = match &p.ty {
            Type::Scalar(_) => Local::Scalar(Scalar::Param(i), Some(sig.param_value(i))),
            Type::Dim(d) => Local::DimParam(sig.param_value(i), d.to_string()),
            _ => Local::Tensor(sig.param_value(i)),
        };
        env.insert(p.name.clone(), local);
    }
    let mut lw = Lowerer {
        spans,
        sigs,
        broken,
        in_module,
        sig: &sig,
        body: Vec::new(),
        dim_bindings: Vec::new(),
        env,
        cx: Ctxt::new(),
        broken_callee: false,
        depth: 0,
        dim_names: sig
            .vars
            .iter()
            .map(|v| v.name.clone())
            .chain(sig.consts.iter().map(|(c, _)| c.clone()))
            .collect(),
    };
    let mut ret: Option<(Operand, SpanId, &Expr)> = None;
    let n = block.stmts.len();
    for (i, stmt) in block.stmts.iter().enumerate() {
        let last = i + 1 == n;
        match stmt {
            Stmt::Local(l) => lw.let_stmt(l),
            Stmt::Expr(e, semi) => {
                let e = match (e, last) {
                    (Expr::Return(r), true) => match &r.expr {
                        Some(x) => &**x,
                        None => {
                            lw.cx.push(err_at(
                                codes::KIND_MISMATCH,
                                r,
                                "a tensor_fn must return a tensor",
                            ));
                            continue;
                        }
                    },
                    (e, true) if semi.is_none() => e,
                    (e, _) => {
                        lw.cx.push(match e {
                            Expr::Return(_) => unsupported(e, expr_kind(e)),
                            _ if semi.is_some() => {
                                unsupported(e, "expression statement (bind it with `let`)")
                            }
                            _ => unsupported(e, expr_kind(e)),
                        });
                        continue;
                    }
                };
                let span = lw.spans.alloc(e);
                let v = lw.expr(e);
                ret = Some((v, span, e));
            }
            Stmt::Item(it) => lw.cx.push(unsupported(it, "item declaration")),
            Stmt::Macro(m) => lw.cx.push(unsupported(m, "macro invocation")),
        }
    }
    if lw.broken_callee {
        return Err(LowerError::BrokenCallee);
    }
    let (ret, ret_span) = match ret {
        Some((Operand::Tensor(v), s, _)) => (v, s),
        Some((Operand::Scalar(..), _, e)) => {
            lw.cx.push(err_at(
                codes::KIND_MISMATCH,
                e,
                "a tensor_fn must return a tensor, found a scalar",
            ));
            (Value::from_u32(0), SpanId(0))
        }
        Some((Operand::Poison, ..)) => (Value::from_u32(0), SpanId(0)),
        None => {
            let close = block.brace_token.span.close();
            lw.cx.push(crate::spans::err_span(
                codes::UNSUPPORTED,
                close,
                "a tensor_fn body must end with the tensor it returns",
            ));
            (Value::from_u32(0), SpanId(0))
        }
    };
    if !lw.cx.is_empty() {
        cx.absorb(lw.cx);
        return Err(LowerError::Refused);
    }
    let (body, dim_bindings) = (lw.body, lw.dim_bindings);
    Ok(Function {
        sig,
        body,
        dim_bindings,
        ret,
        ret_span,
    })
}
