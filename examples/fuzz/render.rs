//! A generated program (`gen::Program`: IR built with `FnBuilder`) as Rust
//! source in tc's surface syntax (docs/syntax.md): one `#[tensor_module]`
//! per program holding its callees and `f`, each a `#[tensor_fn]` with its
//! `requires`, refinements after `where`, `Dim![…]` parameters and a body of
//! one `let` per instruction. The macro front end must lower that source to
//! the very IR the builder made (`examples/fuzz_macro`), so every op is
//! written in the form the lowering maps to exactly that op: operand order,
//! axis order and literal bits included.
//!
//! What the syntax cannot say is refused with a reason (`Unrenderable`),
//! counted by the driver, never dropped silently.

use std::fmt::Write as _;

use tc_core::dim::Atom;
use tc_core::ir::{BinaryOp, Function, Op, PoolKind, Scalar, Value, ValueDef};
use tc_core::{CmpOp, Dim, Dtype, Pred, Type};

use crate::gen::Program;

/// Why a program has no surface form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unrenderable(pub String);

type R<T> = Result<T, Unrenderable>;

fn no<T>(why: &str) -> R<T> {
    Err(Unrenderable(why.to_string()))
}

/// One program's source: the module, and a Rust expression calling its `f`
/// with arguments read from `a: &[Arg]` (helpers of the harness:
/// `tensor(&a[i])`, `float(&a[i])`, `int8(&a[i])`, …).
#[derive(Clone, Debug)]
pub struct Rendered {
    /// `#[tc::tensor_module] pub mod name { … }`.
    pub module: String,
    /// `name::f(tensor(&a[0]), …)`.
    pub call: String,
}

/// The program as module `name`.
pub fn render(p: &Program, name: &str) -> R<Rendered> {
    let main = with_weights(&p.main);
    let fs: Vec<&Function> = p.callees.iter().chain([&main]).collect();
    let mut src = String::new();
    writeln!(src, "#[tc::tensor_module]").unwrap();
    writeln!(src, "pub mod {name} {{").unwrap();
    writeln!(src, "    #[allow(unused_imports)]").unwrap();
    writeln!(src, "    use tc::{{Dim, Tensor}};").unwrap();
    for (c, v) in module_consts(&fs)? {
        writeln!(src, "    pub const {c}: i64 = {v};").unwrap();
    }
    src.push_str(&weights_struct(&main)?);
    for f in &fs {
        src.push_str(&render_fn(f)?);
    }
    src.push_str("}\n");
    let call = call_expr(&main, name)?;
    Ok(Rendered { module: src, call })
}

/// The module's constants: one set, as every function of a module sees.
fn module_consts(fs: &[&Function]) -> R<Vec<(String, i64)>> {
    let mut all: Vec<(String, i64)> = Vec::new();
    for f in fs {
        for (c, v) in &f.sig.consts {
            match all.iter().find(|(n, _)| n == c) {
                Some((_, w)) if w != v => return no("two values for one module constant"),
                Some(_) => {}
                None => all.push((c.clone(), *v)),
            }
        }
    }
    Ok(all)
}

/// The weight struct's name, its parameter's, and the prefix of its fields
/// in the IR (the front end names a field `w.x1`, docs/syntax.md "Weight
/// structs").
const WEIGHTS: (&str, &str, &str) = ("W", "w", "w.");

/// `f` with its tensor parameters after the first grouped in a weight
/// struct, for half of the functions with at least two of them (they come
/// first, so they are contiguous, as a struct's fields are): renamed
/// `w.x1`, … as the front end names them.
fn with_weights(f: &Function) -> Function {
    let mut f = f.clone();
    let tensors = f
        .sig
        .params
        .iter()
        .take_while(|p| matches!(p.ty, Type::Tensor(_)))
        .count();
    // Half of them (by the parity of the body's length), so that plain
    // parameters stay covered as well.
    if tensors >= 3 && f.body.len() % 2 == 0 {
        for p in &mut f.sig.params[1..tensors] {
            p.name = format!("{}{}", WEIGHTS.2, p.name);
        }
    }
    f
}

/// A weight struct's field, by its IR name.
fn field(p: &tc_core::ir::Param) -> Option<&str> {
    p.name.strip_prefix(WEIGHTS.2)
}

/// `#[tensor_params] pub struct W { … }` for `f`'s fields, if any.
fn weights_struct(f: &Function) -> R<String> {
    let mut fields = String::new();
    for p in &f.sig.params {
        if let Some(n) = field(p) {
            writeln!(fields, "        pub {n}: {},", ty(&p.ty)?).unwrap();
        }
    }
    if fields.is_empty() {
        return Ok(String::new());
    }
    Ok(format!(
        "    #[tensor_params]\n    pub struct {} {{\n{fields}    }}\n",
        WEIGHTS.0
    ))
}

fn call_expr(f: &Function, module: &str) -> R<String> {
    let mut args = Vec::new();
    let mut fields = Vec::new();
    for (i, p) in f.sig.params.iter().enumerate() {
        if let Some(n) = field(p) {
            fields.push(format!("{n}: tensor(&a[{i}])"));
            continue;
        }
        if !fields.is_empty() {
            args.push(format!(
                "&{module}::{} {{ {} }}",
                WEIGHTS.0,
                fields.join(", ")
            ));
            fields.clear();
        }
        let conv = match &p.ty {
            Type::Tensor(_) => "tensor",
            Type::Dim(_) => "size",
            Type::Scalar(dt) if dt.is_float() => "float",
            Type::Scalar(Dtype::I64) => "int64",
            Type::Scalar(Dtype::I32) => "int32",
            Type::Scalar(Dtype::I16) => "int16",
            Type::Scalar(Dtype::I8 | Dtype::I4) => "int8",
            Type::Scalar(Dtype::Bool) => "boolean",
            _ => return no("a parameter type with no Rust form"),
        };
        args.push(format!("{conv}(&a[{i}])"));
    }
    if !fields.is_empty() {
        args.push(format!(
            "&{module}::{} {{ {} }}",
            WEIGHTS.0,
            fields.join(", ")
        ));
    }
    Ok(format!("{module}::{}({})", f.sig.name, args.join(", ")))
}

/// One `#[tensor_fn]`.
pub fn render_fn(f: &Function) -> R<String> {
    if !f.dim_bindings.is_empty() {
        return no("local dim bindings");
    }
    if !f.sig.axioms.is_empty() {
        return no("axioms");
    }
    if !dims_in_place(f) {
        return no("a dim value away from its call");
    }
    let mut s = String::new();
    let req: Vec<String> = f.sig.requires.iter().map(|p| pred(&p.node)).collect();
    if req.is_empty() {
        writeln!(s, "    #[tensor_fn]").unwrap();
    } else {
        writeln!(s, "    #[tensor_fn(requires({}))]", req.join(", ")).unwrap();
    }
    let mut params = Vec::new();
    let mut grouped = false;
    for p in &f.sig.params {
        if field(p).is_some() {
            if !grouped {
                params.push(format!("{}: {}", WEIGHTS.1, WEIGHTS.0));
            }
            grouped = true;
            continue;
        }
        if p.name.starts_with('v') && p.name[1..].parse::<u32>().is_ok() {
            return no("a parameter named like a value");
        }
        params.push(format!("{}: {}", p.name, ty(&p.ty)?));
    }
    writeln!(
        s,
        "    pub fn {}({}) -> {} {{",
        f.sig.name,
        params.join(", "),
        ty(&f.sig.ret)?
    )
    .unwrap();
    for inst in &f.body {
        if inst.annot.is_some() {
            return no("a `let` annotation");
        }
        if matches!(inst.op, Op::Dim(_)) {
            continue; // written inline, as the argument of its call
        }
        let e = expr(f, &inst.op, inst.result)?;
        writeln!(s, "        let {} = {e};", inst.result).unwrap();
    }
    writeln!(s, "        {}", name(f, f.ret)).unwrap();
    s.push_str("    }\n");
    Ok(s)
}

fn ty(t: &Type) -> R<String> {
    match t {
        Type::Tensor(t) => {
            let mut inner = t.dtype.name().to_string();
            if !t.shape.is_empty() {
                inner.push_str("; ");
                inner.push_str(&dims(&t.shape));
            }
            if !t.refs.is_empty() {
                if t.shape.is_empty() {
                    return no("a refinement on a rank-0 tensor");
                }
                let rs: Vec<String> = t.refs.iter().map(pred).collect();
                write!(inner, " where {}", rs.join(", ")).unwrap();
            }
            Ok(format!("Tensor![{inner}]"))
        }
        Type::Scalar(dt) => Ok(dt.name().to_string()),
        Type::Dim(d) => Ok(format!("Dim![{}]", dim(d))),
        _ => no("a function or unit type in a signature"),
    }
}

/// A dim in Rust's syntax, every division and remainder in parentheses.
/// Not `Dim`'s `Display`: it writes `2 * ((A + 1) / 2)` as
/// `2 * (A + 1) / 2`, which reads back as `A + 1` (seed 78).
pub fn dim(d: &Dim) -> String {
    let mut terms: Vec<(&[Atom], i64)> = d.terms().collect();
    if terms.is_empty() {
        return "0".into();
    }
    // Positive terms first, so a leading minus is rare; the constant last.
    terms.sort_by_key(|(m, c)| (m.is_empty(), *c < 0));
    let mut out = String::new();
    for (i, (m, c)) in terms.into_iter().enumerate() {
        let mag = c.unsigned_abs();
        let body = match (m.is_empty(), mag) {
            (true, _) => mag.to_string(),
            (false, 1) => product(m),
            (false, _) => format!("{mag} * {}", product(m)),
        };
        match (i, c < 0) {
            (0, false) => out.push_str(&body),
            (0, true) => write!(out, "-({body})").unwrap(),
            (_, false) => write!(out, " + {body}").unwrap(),
            (_, true) => write!(out, " - {body}").unwrap(),
        }
    }
    out
}

fn product(m: &[Atom]) -> String {
    let atom = |a: &Atom| match a {
        Atom::Var(v) => v.clone(),
        Atom::Div(x, y) => format!("(({}) / ({}))", dim(x), dim(y)),
        Atom::Mod(x, y) => format!("(({}) % ({}))", dim(x), dim(y)),
    };
    m.iter().map(atom).collect::<Vec<_>>().join(" * ")
}

fn dims(ds: &[Dim]) -> String {
    ds.iter().map(dim).collect::<Vec<_>>().join(", ")
}

/// A predicate in Rust's syntax, its dims through [`dim`].
fn pred(p: &Pred) -> String {
    let join = |ps: &[Pred], sep: &str| {
        let parts: Vec<String> = ps.iter().map(|q| format!("({})", pred(q))).collect();
        parts.join(sep)
    };
    match p {
        Pred::True => "true".into(),
        Pred::False => "false".into(),
        Pred::Cmp(a, op, b) => format!("{} {} {}", dim(a), cmp(*op), dim(b)),
        Pred::And(ps) => join(ps, " && "),
        Pred::Or(ps) => join(ps, " || "),
        Pred::Not(q) => format!("!({})", pred(q)),
    }
}

fn cmp(op: CmpOp) -> &'static str {
    op.symbol()
}

/// A value's Rust name: a parameter's own, else `v12`.
fn name(f: &Function, v: Value) -> String {
    match f.sig.value_def(v) {
        ValueDef::Param(i) => f.sig.params[i].name.clone(),
        ValueDef::Inst(_) => v.to_string(),
    }
}

/// A literal whose token reads back as the same value: a float through
/// Rust's shortest round-trip spelling, always with a `.` or an exponent so
/// it stays in the float class.
fn scalar(f: &Function, s: &Scalar) -> R<String> {
    Ok(match *s {
        Scalar::Float(x) if !x.is_finite() => return no("a non-finite float literal"),
        Scalar::Float(x) => {
            let t = format!("{x:?}");
            if t.contains(['.', 'e', 'E']) {
                t
            } else {
                format!("{t}.0")
            }
        }
        Scalar::Int(i) => i.to_string(),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Param(i) => f.sig.params[i].name.clone(),
    })
}

/// Binary ops written as Rust operators (for value `v`, half of them: both
/// spellings must lower alike).
fn operator(op: BinaryOp) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Rem => "%",
        BinaryOp::And => "&",
        BinaryOp::Or => "|",
        BinaryOp::Xor => "^",
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        _ => return None,
    })
}

fn binary(op: BinaryOp, a: &str, b: &str, v: Value) -> String {
    let odd = v.to_string()[1..].parse::<u32>().unwrap_or(0) % 2 == 1;
    match operator(op) {
        Some(o) if odd => format!("{a} {o} {b}"),
        _ => format!("{}({a}, {b})", op.name()),
    }
}

fn list(xs: &[usize]) -> String {
    format!(
        "[{}]",
        xs.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A window attribute: one literal for a 1-d window, `[h, w]` for 2-d.
fn attr(xs: &[usize]) -> String {
    if xs.len() == 1 {
        xs[0].to_string()
    } else {
        list(xs)
    }
}

/// The right-hand side of `let v = …;` for one instruction.
fn expr(f: &Function, op: &Op, v: Value) -> R<String> {
    let n = |x: &Value| name(f, *x);
    Ok(match op {
        Op::Unary(u, x) => format!("{}({})", u.name(), n(x)),
        Op::Cast(dt, x) => format!("cast::<{}>({})", dt.name(), n(x)),
        Op::Binary(o, a, b) => binary(*o, &n(a), &n(b), v),
        Op::ScalarBinary {
            op,
            x,
            s,
            scalar_left,
        } => {
            let c = scalar(f, s)?;
            if *scalar_left {
                binary(*op, &c, &n(x), v)
            } else {
                binary(*op, &n(x), &c, v)
            }
        }
        Op::Select(c, a, b) => format!("select({}, {}, {})", n(c), n(a), n(b)),
        Op::Rope {
            layout,
            x,
            cos,
            sin,
        } => format!("{}({}, {}, {})", layout.name(), n(x), n(cos), n(sin)),
        Op::Sdpa {
            q,
            k,
            v,
            mask,
            scale,
        } => format!(
            "sdpa({}, {}, {}, {}, {})",
            n(q),
            n(k),
            n(v),
            n(mask),
            scalar(f, scale)?
        ),
        Op::Matmul(a, b) => format!("matmul({}, {})", n(a), n(b)),
        Op::MatmulI32(a, b) => format!("matmul_i32({}, {})", n(a), n(b)),
        Op::DqMatmul {
            x,
            w,
            scale,
            outliers,
        } => format!(
            "dq_matmul({}, {}, {}, {})",
            n(x),
            n(w),
            n(scale),
            n(outliers)
        ),
        Op::QMatmul(a, b) => format!("qmatmul({}, {})", n(a), n(b)),
        Op::Reduce {
            op,
            axes,
            keepdims,
            x,
        } => {
            let k = if *keepdims { "_keepdims" } else { "" };
            format!("{}{k}({}, {})", op.name(), n(x), list(axes))
        }
        Op::ArgReduce {
            max,
            axis,
            keepdims,
            x,
        } => {
            let m = if *max { "argmax" } else { "argmin" };
            let k = if *keepdims { "_keepdims" } else { "" };
            format!("{m}{k}({}, {axis})", n(x))
        }
        Op::Transpose(p, x) => format!("transpose({}, {})", n(x), list(p)),
        Op::Reshape(s, x) => format!("reshape({}, [{}])", n(x), dims(s)),
        Op::Broadcast(s, x) => format!("broadcast({}, [{}])", n(x), dims(s)),
        Op::Fill(dt, s, c) => format!("full::<{}>([{}], {})", dt.name(), dims(s), scalar(f, c)?),
        Op::Iota(dt, s, axis) => format!("iota::<{}>([{}], {axis})", dt.name(), dims(s)),
        Op::Call(callee, args) => call(f, callee, args)?,
        Op::Dim(_) => return no("a dim value outside a call"),
        _ => return layout_expr(f, op),
    })
}

/// Slices, concat, pad, gather, top-k, cumsum and the window ops.
fn layout_expr(f: &Function, op: &Op) -> R<String> {
    let n = |x: &Value| name(f, *x);
    Ok(match op {
        Op::Slice {
            axis,
            start,
            stop,
            step,
            x,
        } => {
            let st = if *step == 1 {
                String::new()
            } else {
                format!(", {step}")
            };
            format!("slice({}, {axis}, {}, {}{st})", n(x), dim(start), dim(stop))
        }
        Op::Concat(axis, xs) => {
            let xs: Vec<String> = xs.iter().map(n).collect();
            format!("concat([{}], {axis})", xs.join(", "))
        }
        Op::Pad {
            axis,
            before,
            after,
            value,
            x,
        } => format!(
            "pad({}, {axis}, {}, {}, {})",
            n(x),
            dim(before),
            dim(after),
            scalar(f, value)?
        ),
        Op::Gather { axis, table, ids } => format!("gather({}, {}, {axis})", n(table), n(ids)),
        Op::TopK {
            k,
            axis,
            indices,
            x,
        } => {
            let t = if *indices { "topk_indices" } else { "topk" };
            format!("{t}({}, {}, {axis})", n(x), dim(k))
        }
        Op::CumSum { axis, x } => format!("cumsum({}, {axis})", n(x)),
        Op::Conv {
            window,
            groups,
            x,
            w,
        } => format!(
            "conv{}d({}, {}, {}, {}, {}, {groups})",
            window.rank(),
            n(x),
            n(w),
            attr(&window.stride),
            attr(&window.padding),
            attr(&window.dilation)
        ),
        Op::Pool {
            kind,
            kernel,
            window,
            x,
        } => {
            if window.dilation.iter().any(|&d| d != 1) {
                return no("a dilated pooling");
            }
            let k = if *kind == PoolKind::Max { "max" } else { "avg" };
            format!(
                "{k}_pool{}d({}, {}, {}, {})",
                kernel.len(),
                n(x),
                attr(kernel),
                attr(&window.stride),
                attr(&window.padding)
            )
        }
        _ => return no("an op with no surface form"),
    })
}

/// `g0(x, y, 2 * A)`: a dim argument is its `Op::Dim`'s dim, written in
/// place, which is where the lowering creates that instruction again. So it
/// must be the instruction right before the call's other new values, in
/// argument order: checked here, a program built otherwise has no source.
fn call(f: &Function, callee: &str, args: &[Value]) -> R<String> {
    let mut out = Vec::new();
    for a in args {
        match f.sig.value_def(*a) {
            ValueDef::Inst(j) => match &f.body[j].op {
                Op::Dim(d) => out.push(dim(d)),
                _ => out.push(name(f, *a)),
            },
            ValueDef::Param(_) => out.push(name(f, *a)),
        }
    }
    Ok(format!("{callee}({})", out.join(", ")))
}

/// Is every `Op::Dim` of `f` used once, by the call right after it (the
/// order the lowering creates them in)?
pub fn dims_in_place(f: &Function) -> bool {
    for (j, inst) in f.body.iter().enumerate() {
        if !matches!(inst.op, Op::Dim(_)) {
            continue;
        }
        let users: Vec<usize> = (0..f.body.len())
            .filter(|&k| f.body[k].op.operands().contains(&inst.result))
            .collect();
        let Some(&k) = users.first() else {
            return false;
        };
        let between_are_dims = (j + 1..k).all(|m| matches!(f.body[m].op, Op::Dim(_)));
        if users.len() != 1 || !matches!(f.body[k].op, Op::Call(..)) || !between_are_dims {
            return false;
        }
    }
    true
}
