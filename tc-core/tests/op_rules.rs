//! Every typing rule of Section 2 (§4–§17): for each, accepted cases with the
//! synthesised output type, and at least two rejected cases with the
//! diagnostic's code, primary span, the key part of its message and the exact
//! counterexample where the solver produces one.

use tc_core::build::FnBuilder;
use tc_core::check::{cex_string, check_function, Checked};
use tc_core::diag::codes;
use tc_core::ir::{BinaryOp, Op, ReduceOp, RopeLayout, Scalar, Signatures, UnaryOp, Value};
use tc_core::solver;
use tc_core::{Diagnostic, Dim, Dtype, Pred, SpanId, TensorType, Type};

// ------------------------------------------------------------------ helpers

fn v(s: &str) -> Dim {
    Dim::var(s)
}

fn c(n: i64) -> Dim {
    Dim::c(n)
}

/// `"B, S, 4"` → `[B, S, 4]`.
fn sh(s: &str) -> Vec<Dim> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| match x.parse::<i64>() {
            Ok(n) => Dim::c(n),
            Err(_) => Dim::var(x),
        })
        .collect()
}

fn t(dt: Dtype, s: &str) -> Type {
    Type::tensor(dt, sh(s))
}

fn f32s(s: &str) -> Type {
    t(Dtype::F32, s)
}

fn tr(dt: Dtype, s: &str, refs: Vec<Pred>) -> Type {
    Type::Tensor(TensorType::new(dt, sh(s)).with_refs(refs))
}

fn td(dt: Dtype, dims: Vec<Dim>) -> Type {
    Type::tensor(dt, dims)
}

/// A dim parameter `Dim![name]`: binds `name` at a call (Section 2 §17),
/// as a variable the body's rules may use but no tensor parameter has.
fn bind(b: &mut FnBuilder, name: &str) {
    b.param(&format!("dim_{name}"), Type::Dim(v(name)));
}

fn no_sigs() -> Signatures {
    Signatures::new()
}

fn render(es: &[Diagnostic]) -> String {
    es.iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Check `b` returning `y` (declared return type `ret`), expect acceptance and
/// return the synthesised type of `y` as displayed.
fn accept_with(mut b: FnBuilder, y: Value, ret: Type, sigs: &Signatures) -> String {
    b.returns(ret);
    let f = b.finish(y);
    match check_function(&f, sigs) {
        Ok(c) => c.types[y].to_string(),
        Err(es) => panic!("expected acceptance of\n{f}\ngot:\n{}", render(&es)),
    }
}

fn accept(b: FnBuilder, y: Value, ret: Type) -> String {
    accept_with(b, y, ret, &no_sigs())
}

fn checked(b: FnBuilder, y: Value, ret: Type) -> Checked {
    let mut b = b;
    b.returns(ret);
    let f = b.finish(y);
    check_function(&f, &no_sigs()).unwrap_or_else(|es| panic!("{}", render(&es)))
}

fn errors_with(b: &FnBuilder, y: Value, sigs: &Signatures) -> Vec<Diagnostic> {
    let f = b.clone().finish(y);
    match check_function(&f, sigs) {
        Ok(_) => panic!("expected a rejection of\n{f}"),
        Err(es) => es,
    }
}

/// Exactly one diagnostic; the return type is irrelevant because the failing
/// value is poisoned (its uses, including the return, are skipped).
fn reject_with(b: &FnBuilder, y: Value, sigs: &Signatures) -> Diagnostic {
    let mut es = errors_with(b, y, sigs);
    assert_eq!(
        es.len(),
        1,
        "expected one diagnostic, got:\n{}",
        render(&es)
    );
    es.pop().unwrap()
}

fn reject(b: &FnBuilder, y: Value) -> Diagnostic {
    reject_with(b, y, &no_sigs())
}

/// The expected shape of one rejection.
#[track_caller]
fn expect(d: &Diagnostic, code: &str, span: SpanId, msg: &str, cex: Option<&str>) {
    assert_eq!(d.code, code, "wrong code: {d}");
    assert_eq!(d.span, span, "wrong span: {d}");
    assert!(
        d.message.contains(msg),
        "message {:?} does not contain {msg:?}",
        d.message
    );
    match cex {
        Some(s) => assert_eq!(cex_string(d), s, "wrong counterexample: {d}"),
        None => assert!(
            !matches!(&d.counterexample, Some(c) if !c.0.is_empty()),
            "unexpected counterexample: {d}"
        ),
    }
}

fn arg(b: &FnBuilder, y: Value, i: usize) -> SpanId {
    b.inst(y).unwrap().arg_span(i)
}

fn attr(b: &FnBuilder, y: Value, i: usize) -> SpanId {
    b.inst(y).unwrap().attr_span(i)
}

fn whole(b: &FnBuilder, y: Value) -> SpanId {
    b.inst(y).unwrap().span
}

fn unary(b: &mut FnBuilder, op: UnaryOp, x: Value) -> Value {
    b.op(Op::Unary(op, x))
}

fn bin(b: &mut FnBuilder, op: BinaryOp, x: Value, y: Value) -> Value {
    b.op(Op::Binary(op, x, y))
}

fn reduce(b: &mut FnBuilder, op: ReduceOp, axes: &[usize], keepdims: bool, x: Value) -> Value {
    b.op(Op::Reduce {
        op,
        axes: axes.to_vec(),
        keepdims,
        x,
    })
}

fn fb() -> FnBuilder {
    FnBuilder::new("f")
}

// ------------------------------------------------------- §4 elementwise unary

#[test]
fn unary_accepted() {
    for (op, dt) in [
        (UnaryOp::Relu, Dtype::F32),
        (UnaryOp::Neg, Dtype::I32),
        (UnaryOp::Abs, Dtype::I4),
        (UnaryOp::Exp, Dtype::BF16),
        (UnaryOp::Gelu, Dtype::F8E4M3),
        (UnaryOp::Not, Dtype::Bool),
    ] {
        let mut b = fb();
        let x = b.param("x", t(dt, "B, S"));
        let y = unary(&mut b, op, x);
        assert_eq!(
            accept(b, y, t(dt, "B, S")),
            format!("Tensor[{dt}; B, S]"),
            "{op:?}"
        );
    }
    // Refinements flow through unchanged: Tensor[dt, s, R] → Tensor[dt, s, R].
    let mut b = fb();
    let x = b.param(
        "x",
        tr(Dtype::F32, "B, S", vec![Pred::eq(v("S").rem(&c(8)), 0)]),
    );
    let y = unary(&mut b, UnaryOp::Tanh, x);
    assert_eq!(
        accept(b, y, f32s("B, S")),
        "Tensor[f32; B, S where S % 8 == 0]"
    );
}

#[test]
fn unary_rejected() {
    // Float-only op on an int tensor.
    let mut b = fb();
    let x = b.param("x", t(Dtype::I32, "B"));
    let y = unary(&mut b, UnaryOp::Exp, x);
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`exp` expects a float tensor, found dtype i32 (class signed int)",
        None,
    );
    // Bool-only op on a float tensor.
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let y = unary(&mut b, UnaryOp::Not, x);
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`not` expects a bool tensor, found dtype f32 (class float)",
        None,
    );
    // Numeric-only op on bool.
    let mut b = fb();
    let x = b.param("x", t(Dtype::Bool, "B"));
    let y = unary(&mut b, UnaryOp::Relu, x);
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`relu` expects a numeric tensor, found dtype bool",
        None,
    );
    // A scalar is not a tensor.
    let mut b = fb();
    let x = b.param("s", Type::Scalar(Dtype::F32));
    let y = unary(&mut b, UnaryOp::Exp, x);
    expect(
        &reject(&b, y),
        codes::KIND_MISMATCH,
        arg(&b, y, 0),
        "expected a tensor, found a scalar",
        None,
    );
}

// ------------------------------------------------------------------- §5 cast

#[test]
fn cast_accepted() {
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, S", vec![Pred::ge("B", 2)]));
    let y = b.op(Op::Cast(Dtype::I4, x));
    assert_eq!(
        accept(b, y, t(Dtype::I4, "B, S")),
        "Tensor[i4; B, S where B >= 2]"
    );
    // Any dt₁ → dt₂, including to and from bool.
    for (from, to) in [
        (Dtype::Bool, Dtype::F32),
        (Dtype::F8E5M2, Dtype::Bool),
        (Dtype::I64, Dtype::BF16),
    ] {
        let mut b = fb();
        let x = b.param("x", t(from, "N"));
        let y = b.op(Op::Cast(to, x));
        assert_eq!(accept(b, y, t(to, "N")), format!("Tensor[{to}; N]"));
    }
}

#[test]
fn cast_rejected() {
    // Cast of a scalar parameter: not a tensor.
    let mut b = fb();
    let x = b.param("s", Type::Scalar(Dtype::I32));
    let y = b.op(Op::Cast(Dtype::F32, x));
    expect(
        &reject(&b, y),
        codes::KIND_MISMATCH,
        arg(&b, y, 0),
        "expected a tensor, found a scalar (Scalar[i32])",
        None,
    );
    // Cast changes the dtype: the old one no longer satisfies the return.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Cast(Dtype::F16, x));
    b.returns(f32s("B, S"));
    let f = b.finish(y);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1);
    expect(
        &es[0],
        codes::DTYPE_MISMATCH,
        f.ret_span,
        "the declared return type: expected dtype f32, found f16",
        None,
    );
}

// --------------------------------------------------------- §6 binary, select

#[test]
fn binary_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let w = b.param("w", f32s("B, S"));
    let y = bin(&mut b, BinaryOp::Add, x, w);
    assert_eq!(accept(b, y, f32s("B, S")), "Tensor[f32; B, S]");
    // Comparisons produce bool.
    let mut b = fb();
    let x = b.param("x", t(Dtype::I8, "B, S"));
    let w = b.param("w", t(Dtype::I8, "B, S"));
    let y = bin(&mut b, BinaryOp::Lt, x, w);
    assert_eq!(accept(b, y, t(Dtype::Bool, "B, S")), "Tensor[bool; B, S]");
    // Shapes equal under SMT (not syntactically): S == T from requires; R₁ ∧ R₂.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, S", vec![Pred::ge("B", 2)]));
    let w = b.param("w", tr(Dtype::F32, "B, T", vec![Pred::ge("T", 3)]));
    b.requires(Pred::eq("S", "T"));
    let y = bin(&mut b, BinaryOp::Mul, x, w);
    assert_eq!(
        accept(b, y, f32s("B, S")),
        "Tensor[f32; B, S where B >= 2, T >= 3]"
    );
    // pow (float), rem (int), xor (bool).
    for (op, dt) in [
        (BinaryOp::Pow, Dtype::F16),
        (BinaryOp::Rem, Dtype::I16),
        (BinaryOp::Xor, Dtype::Bool),
        (BinaryOp::Eq, Dtype::Bool),
    ] {
        let mut b = fb();
        let x = b.param("x", t(dt, "N"));
        let w = b.param("w", t(dt, "N"));
        let y = bin(&mut b, op, x, w);
        let out = op.result_dtype(dt);
        assert_eq!(accept(b, y, t(out, "N")), format!("Tensor[{out}; N]"));
    }
}

#[test]
fn binary_shape_mismatch() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let w = b.param("w", f32s("B, T"));
    let y = bin(&mut b, BinaryOp::Add, x, w);
    let d = reject(&b, y);
    expect(
        &d,
        codes::SHAPE_MISMATCH,
        arg(&b, y, 1),
        "dimension 1: expected `S` (the left operand), found `T`",
        Some("S = 1, T = 2"),
    );
    assert!(d
        .help
        .as_deref()
        .unwrap()
        .contains("no implicit broadcasting"));
}

#[test]
fn binary_implicit_broadcast_attempted() {
    // Same rank, a 1 where B is expected: no implicit broadcast.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let w = b.param("w", f32s("1, S"));
    let y = bin(&mut b, BinaryOp::Sub, x, w);
    expect(
        &reject(&b, y),
        codes::SHAPE_MISMATCH,
        arg(&b, y, 1),
        "dimension 0: expected `B` (the left operand), found `1`",
        Some("B = 2"),
    );
    // Lower rank (NumPy would broadcast [S] against [B, S]).
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let w = b.param("w", f32s("S"));
    let y = bin(&mut b, BinaryOp::Add, x, w);
    let d = reject(&b, y);
    expect(
        &d,
        codes::RANK_MISMATCH,
        arg(&b, y, 1),
        "expected rank 2 (the left operand is [B, S]), found rank 1 ([S])",
        None,
    );
    assert!(d
        .help
        .as_deref()
        .unwrap()
        .contains("use `broadcast(x, [..])`"));
}

#[test]
fn binary_dtype_mismatch_without_cast() {
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let w = b.param("w", t(Dtype::BF16, "B"));
    let y = bin(&mut b, BinaryOp::Add, x, w);
    let d = reject(&b, y);
    expect(
        &d,
        codes::DTYPE_MISMATCH,
        arg(&b, y, 1),
        "expected dtype f32 (the left operand's), found bf16",
        None,
    );
    // The cast goes toward the expected dtype, on the operand that has the other.
    assert!(d
        .help
        .as_deref()
        .unwrap()
        .contains("cast the bf16 operand to f32: `cast::<f32>(…)`"));
    // With the explicit cast it checks.
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let w = b.param("w", t(Dtype::BF16, "B"));
    let wc = b.op(Op::Cast(Dtype::F32, w));
    let y = bin(&mut b, BinaryOp::Add, x, wc);
    assert_eq!(accept(b, y, f32s("B")), "Tensor[f32; B]");
    // int + int of different widths: no promotion either.
    let mut b = fb();
    let x = b.param("x", t(Dtype::I8, "B"));
    let w = b.param("w", t(Dtype::I32, "B"));
    let y = bin(&mut b, BinaryOp::Add, x, w);
    expect(
        &reject(&b, y),
        codes::DTYPE_MISMATCH,
        arg(&b, y, 1),
        "expected dtype i8 (the left operand's), found i32",
        None,
    );
}

#[test]
fn binary_dtype_class() {
    for (op, dt, msg) in [
        (BinaryOp::Pow, Dtype::I32, "`pow` expects a float tensor"),
        (
            BinaryOp::Rem,
            Dtype::F32,
            "`rem` expects a signed int tensor",
        ),
        (BinaryOp::And, Dtype::F32, "`and` expects a bool tensor"),
        (BinaryOp::Add, Dtype::Bool, "`add` expects a numeric tensor"),
    ] {
        let mut b = fb();
        let x = b.param("x", t(dt, "N"));
        let w = b.param("w", t(dt, "N"));
        let y = bin(&mut b, op, x, w);
        expect(&reject(&b, y), codes::DTYPE_CLASS, whole(&b, y), msg, None);
    }
}

#[test]
fn scalar_binary_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x,
        s: Scalar::Float(0.5),
        scalar_left: false,
    });
    assert_eq!(accept(b, y, f32s("B, S")), "Tensor[f32; B, S]");
    // A scalar parameter of the same dtype; comparison gives bool.
    let mut b = fb();
    let x = b.param("x", t(Dtype::I32, "N"));
    let _s = b.param("k", Type::Scalar(Dtype::I32));
    let y = b.op(Op::ScalarBinary {
        op: BinaryOp::Gt,
        x,
        s: Scalar::Param(1),
        scalar_left: true,
    });
    assert_eq!(accept(b, y, t(Dtype::Bool, "N")), "Tensor[bool; N]");
}

#[test]
fn scalar_binary_rejected() {
    // Integer literal against a float tensor.
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let y = b.op(Op::ScalarBinary {
        op: BinaryOp::Add,
        x,
        s: Scalar::Int(2),
        scalar_left: false,
    });
    expect(
        &reject(&b, y),
        codes::DTYPE_MISMATCH,
        arg(&b, y, 1),
        "expected a scalar of dtype f32 (class float), found the integer literal `2`",
        None,
    );
    // Scalar parameter of another dtype.
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let _s = b.param("k", Type::Scalar(Dtype::F16));
    let y = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x,
        s: Scalar::Param(1),
        scalar_left: false,
    });
    expect(
        &reject(&b, y),
        codes::DTYPE_MISMATCH,
        arg(&b, y, 1),
        "found `k: Scalar[f16]`",
        None,
    );
    // Op not admissible at the dtype.
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let y = b.op(Op::ScalarBinary {
        op: BinaryOp::Rem,
        x,
        s: Scalar::Float(2.0),
        scalar_left: false,
    });
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`rem` expects a signed int tensor, found dtype f32",
        None,
    );
}

#[test]
fn select_accepted() {
    let mut b = fb();
    let cnd = b.param("c", t(Dtype::Bool, "B, S"));
    let x = b.param("x", f32s("B, S"));
    let w = b.param("w", tr(Dtype::F32, "B, S", vec![Pred::ge("S", 4)]));
    let y = b.op(Op::Select(cnd, x, w));
    assert_eq!(accept(b, y, f32s("B, S")), "Tensor[f32; B, S where S >= 4]");
}

#[test]
fn select_rejected() {
    // Non-bool condition.
    let mut b = fb();
    let cnd = b.param("c", f32s("B"));
    let x = b.param("x", f32s("B"));
    let y = b.op(Op::Select(cnd, x, x));
    expect(
        &reject(&b, y),
        codes::DTYPE_MISMATCH,
        arg(&b, y, 0),
        "expected a bool condition, found dtype f32",
        None,
    );
    // Branch dtypes differ.
    let mut b = fb();
    let cnd = b.param("c", t(Dtype::Bool, "B"));
    let x = b.param("x", f32s("B"));
    let w = b.param("w", t(Dtype::F16, "B"));
    let y = b.op(Op::Select(cnd, x, w));
    expect(
        &reject(&b, y),
        codes::DTYPE_MISMATCH,
        arg(&b, y, 2),
        "expected dtype f32 (the `then` branch's), found f16",
        None,
    );
    // Condition shape differs.
    let mut b = fb();
    let cnd = b.param("c", t(Dtype::Bool, "C"));
    let x = b.param("x", f32s("B"));
    let y = b.op(Op::Select(cnd, x, x));
    expect(
        &reject(&b, y),
        codes::SHAPE_MISMATCH,
        arg(&b, y, 0),
        "dimension 0: expected `B` (the `then` branch), found `C`",
        Some("C = 1, B = 2"),
    );
}

// ----------------------------------------------------------------- §7 matmul

#[test]
fn matmul_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, M, K"));
    let w = b.param("w", f32s("B, K, N"));
    let y = b.op(Op::Matmul(x, w));
    assert_eq!(accept(b, y, f32s("B, M, N")), "Tensor[f32; B, M, N]");
    // Rank 2, contraction equal under a requires, refinements conjoined.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::I8, "M, K", vec![Pred::ge("M", 2)]));
    let w = b.param("w", t(Dtype::I8, "16, N"));
    b.requires(Pred::eq("K", 16));
    let y = b.op(Op::Matmul(x, w));
    assert_eq!(
        accept(b, y, t(Dtype::I8, "M, N")),
        "Tensor[i8; M, N where M >= 2]"
    );
}

/// docs/syntax.md §7b: `matmul_i32` takes §7's shapes over I8 operands
/// and gives I32; another dtype is E-class at the operand, and §7's
/// contraction obligation keeps its counterexample.
#[test]
fn matmul_i32_typing() {
    let mut b = fb();
    let x = b.param("x", t(Dtype::I8, "B, M, K"));
    let w = b.param("w", t(Dtype::I8, "B, K, N"));
    let y = b.op(Op::MatmulI32(x, w));
    assert_eq!(
        accept(b, y, t(Dtype::I32, "B, M, N")),
        "Tensor[i32; B, M, N]"
    );
    let mut b = fb();
    let x = b.param("x", t(Dtype::I8, "M, K"));
    let w = b.param("w", f32s("K, N"));
    let y = b.op(Op::MatmulI32(x, w));
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        arg(&b, y, 1),
        "`matmul_i32` expects an i8 tensor, found dtype f32",
        None,
    );
    let mut b = fb();
    let x = b.param("x", t(Dtype::I8, "M, K"));
    let w = b.param("w", t(Dtype::I8, "K2, N"));
    let y = b.op(Op::MatmulI32(x, w));
    expect(
        &reject(&b, y),
        codes::CONTRACTION,
        arg(&b, y, 1),
        "contraction dimension mismatch",
        Some("K = 1, K2 = 2"),
    );
}

/// docs/syntax.md §7c: `dq_matmul x w scale outliers` gives F32 over
/// `x`'s leading dims; each operand's dtype and rank is checked at it, the
/// scale's and the outliers' columns against the weight's, and `x`'s
/// channels against `K + J`, each with its counterexample.
#[test]
fn dq_matmul_typing() {
    let dq = |x: &str, w: (Dtype, &str), s: &str, o: &str| {
        let mut b = fb();
        let x = b.param("x", f32s(x));
        let w = b.param("w", t(w.0, w.1));
        let scale = b.param("s", f32s(s));
        let outliers = b.param("o", f32s(o));
        let y = b.op(Op::DqMatmul {
            x,
            w,
            scale,
            outliers,
        });
        (b, y)
    };
    let (b, y) = dq("B, M, 40", (Dtype::I8, "24, N"), "N", "16, N");
    assert_eq!(accept(b, y, f32s("B, M, N")), "Tensor[f32; B, M, N]");
    let (b, y) = dq("M, 40", (Dtype::F32, "24, N"), "N", "16, N");
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        arg(&b, y, 1),
        "the int8 weight: expected dtype i8, found dtype f32",
        None,
    );
    let (b, y) = dq("M, 40", (Dtype::I8, "24, N, 1"), "N", "16, N");
    expect(
        &reject(&b, y),
        codes::RANK_MISMATCH,
        arg(&b, y, 1),
        "the int8 weight: expected rank 2, found rank 3",
        None,
    );
    let (b, y) = dq("M, 40", (Dtype::I8, "24, N"), "P", "16, N");
    expect(
        &reject(&b, y),
        codes::SHAPE_MISMATCH,
        arg(&b, y, 2),
        "the scale's length must be the weight's columns (dim 1): expected `N`, found `P`",
        Some("N = 1, P = 2"),
    );
    let (b, y) = dq("M, I", (Dtype::I8, "K, N"), "N", "J, N");
    expect(
        &reject(&b, y),
        codes::CONTRACTION,
        arg(&b, y, 0),
        "the activations' channels (their last dim) must be the int8 weight's rows then the outlier weight's: expected `J + K`, found `I`",
        Some("I = 1, K = 1, J = 1"),
    );
}

#[test]
fn matmul_contraction_mismatch() {
    let mut b = fb();
    let x = b.param("x", f32s("B, M, K"));
    let w = b.param("w", f32s("B, K2, N"));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::CONTRACTION,
        arg(&b, y, 1),
        "contraction dimension mismatch: expected `K` (last dim of the left operand), found `K2` (dim 1 of the right operand)",
        Some("K = 1, K2 = 2"),
    );
    // Constant contraction dims that differ: no variable to show.
    let mut b = fb();
    let x = b.param("x", f32s("M, 4"));
    let w = b.param("w", f32s("3, N"));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::CONTRACTION,
        arg(&b, y, 1),
        "expected `4` (last dim of the left operand), found `3`",
        None,
    );
    // Off by one: `K = K + 1` normalises to false, so it fails for every K
    // and no variable is worth showing.
    let mut b = fb();
    let x = b.param("x", f32s("M, K"));
    let w = b.param("w", td(Dtype::F32, vec![v("K") + 1, v("N")]));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::CONTRACTION,
        arg(&b, y, 1),
        "found `K + 1`",
        None,
    );
}

#[test]
fn matmul_batch_rank_dtype() {
    // Batch dims are matched one to one.
    let mut b = fb();
    let x = b.param("x", f32s("B, M, K"));
    let w = b.param("w", f32s("C, K, N"));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::SHAPE_MISMATCH,
        arg(&b, y, 1),
        "batch dimension 0: expected `B`, found `C`",
        Some("B = 1, C = 2"),
    );
    // Ranks differ (no batch broadcasting).
    let mut b = fb();
    let x = b.param("x", f32s("B, M, K"));
    let w = b.param("w", f32s("K, N"));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::RANK_MISMATCH,
        arg(&b, y, 1),
        "expected rank 3 (the left operand is [B, M, K]), found rank 2 ([K, N])",
        None,
    );
    // Rank below 2.
    let mut b = fb();
    let x = b.param("x", f32s("K"));
    let w = b.param("w", f32s("K, N"));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::RANK_MISMATCH,
        arg(&b, y, 0),
        "expected rank at least 2, found rank 1 ([K])",
        None,
    );
    // Bool is not numeric.
    let mut b = fb();
    let x = b.param("x", t(Dtype::Bool, "M, K"));
    let w = b.param("w", t(Dtype::Bool, "K, N"));
    let y = b.op(Op::Matmul(x, w));
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`matmul` expects a numeric tensor, found dtype bool",
        None,
    );
}

// ----------------------------------------------------------------- §8 reduce

#[test]
fn reduce_accepted_with_keepdims_shapes() {
    let cases: [(ReduceOp, &[usize], bool, &str); 6] = [
        (ReduceOp::Sum, &[1], false, "B, D"),
        (ReduceOp::Sum, &[1], true, "B, 1, D"),
        (ReduceOp::Max, &[0, 2], false, "S"),
        (ReduceOp::Mean, &[2, 0], true, "1, S, 1"),
        (ReduceOp::Prod, &[0, 1, 2], false, ""),
        (ReduceOp::Min, &[0, 1, 2], true, "1, 1, 1"),
    ];
    for (op, axes, keep, out) in cases {
        let mut b = fb();
        let x = b.param("x", f32s("B, S, D"));
        let y = reduce(&mut b, op, axes, keep, x);
        let want = if out.is_empty() {
            "Tensor[f32]".to_string()
        } else {
            format!("Tensor[f32; {out}]")
        };
        assert_eq!(accept(b, y, f32s(out)), want, "{op:?} {axes:?} {keep}");
    }
    // any/all on bool; sum over an axis opted into ≥ 0 is fine (empty sum = 0).
    let mut b = fb();
    let x = b.param("x", t(Dtype::Bool, "B, S"));
    let y = reduce(&mut b, ReduceOp::Any, &[1], false, x);
    assert_eq!(accept(b, y, t(Dtype::Bool, "B")), "Tensor[bool; B]");
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, N", vec![Pred::ge("N", 0)]));
    let y = reduce(&mut b, ReduceOp::Sum, &[1], true, x);
    assert_eq!(accept(b, y, f32s("B, 1")), "Tensor[f32; B, 1 where N >= 0]");
}

#[test]
fn reduce_max_over_zero_admitting_dim() {
    for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean] {
        let mut b = fb();
        let x = b.param("x", f32s("B, N"));
        b.requires(Pred::ge("N", 0));
        let y = reduce(&mut b, op, &[1], false, x);
        let d = reject(&b, y);
        expect(
            &d,
            codes::EMPTY_REDUCTION,
            attr(&b, y, 0),
            &format!(
                "`{}` over axis 1 needs a non-empty axis, but `N` may be 0",
                op.name()
            ),
            Some("N = 0"),
        );
        assert_eq!(
            d.help.as_deref(),
            Some("`N` is opted into 0 (`N >= 0`): add `requires(N >= 1)`, or drop the opt-in so that the default `N >= 1` holds")
        );
    }
    // With N ≥ 0 but a requires N ≥ 1 as well, max is fine again.
    let mut b = fb();
    let x = b.param("x", f32s("B, N"));
    b.requires(Pred::ge("N", 0));
    b.requires(Pred::ge("N", 1));
    let y = reduce(&mut b, ReduceOp::Max, &[1], false, x);
    assert_eq!(accept(b, y, f32s("B")), "Tensor[f32; B]");
}

#[test]
fn reduce_rejected_axes_and_class() {
    for (axes, msg) in [
        (vec![3], "axis 3 is out of range for a tensor of rank 2"),
        (vec![1, 1], "axis 1 is listed twice"),
        (vec![], "expected at least one axis, found none"),
    ] {
        let mut b = fb();
        let x = b.param("x", f32s("B, S"));
        let y = reduce(&mut b, ReduceOp::Sum, &axes, false, x);
        expect(&reject(&b, y), codes::AXIS, attr(&b, y, 0), msg, None);
    }
    let mut b = fb();
    let x = b.param("x", t(Dtype::I32, "B, S"));
    let y = reduce(&mut b, ReduceOp::Mean, &[1], false, x);
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`mean` expects a float tensor, found dtype i32",
        None,
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = reduce(&mut b, ReduceOp::All, &[1], false, x);
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`all` expects a bool tensor, found dtype f32",
        None,
    );
}

#[test]
fn argmax_argmin_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S, D"));
    let y = b.op(Op::ArgReduce {
        max: true,
        axis: 1,
        keepdims: false,
        x,
    });
    assert_eq!(accept(b, y, t(Dtype::I64, "B, D")), "Tensor[i64; B, D]");
    let mut b = fb();
    let x = b.param("x", t(Dtype::I8, "B, S, D"));
    let y = b.op(Op::ArgReduce {
        max: false,
        axis: 2,
        keepdims: true,
        x,
    });
    assert_eq!(
        accept(b, y, t(Dtype::I64, "B, S, 1")),
        "Tensor[i64; B, S, 1]"
    );
}

#[test]
fn argmax_argmin_rejected() {
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, N", vec![Pred::ge("N", 0)]));
    let y = b.op(Op::ArgReduce {
        max: false,
        axis: 1,
        keepdims: false,
        x,
    });
    expect(
        &reject(&b, y),
        codes::EMPTY_REDUCTION,
        attr(&b, y, 0),
        "`argmin` over axis 1 needs a non-empty axis, but `N` may be 0",
        Some("N = 0"),
    );
    let mut b = fb();
    let x = b.param("x", t(Dtype::Bool, "B"));
    let y = b.op(Op::ArgReduce {
        max: true,
        axis: 0,
        keepdims: false,
        x,
    });
    expect(
        &reject(&b, y),
        codes::DTYPE_CLASS,
        whole(&b, y),
        "`argmax` expects a numeric tensor, found dtype bool",
        None,
    );
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let y = b.op(Op::ArgReduce {
        max: true,
        axis: 1,
        keepdims: false,
        x,
    });
    expect(
        &reject(&b, y),
        codes::AXIS,
        attr(&b, y, 0),
        "axis 1 is out of range for a tensor of rank 1",
        None,
    );
}

// -------------------------------------------------------------- §9 transpose

#[test]
fn transpose_accepted() {
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, S, D", vec![Pred::ge("D", 8)]));
    let y = b.op(Op::Transpose(vec![2, 0, 1], x));
    // Output axis j is input axis π(j).
    assert_eq!(
        accept(b, y, f32s("D, B, S")),
        "Tensor[f32; D, B, S where D >= 8]"
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Transpose(vec![0, 1], x));
    assert_eq!(accept(b, y, f32s("B, S")), "Tensor[f32; B, S]");
}

#[test]
fn transpose_non_permutation() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S, D"));
    let y = b.op(Op::Transpose(vec![0, 0, 1], x));
    expect(
        &reject(&b, y),
        codes::PERMUTATION,
        attr(&b, y, 0),
        "expected a permutation of 0..3 for a tensor of rank 3, found [0, 0, 1]",
        None,
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, S, D"));
    let y = b.op(Op::Transpose(vec![1, 0], x));
    expect(
        &reject(&b, y),
        codes::PERMUTATION,
        attr(&b, y, 0),
        "found [1, 0]",
        None,
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Transpose(vec![0, 2], x));
    expect(
        &reject(&b, y),
        codes::PERMUTATION,
        attr(&b, y, 0),
        "expected a permutation of 0..2 for a tensor of rank 2, found [0, 2]",
        None,
    );
}

// ---------------------------------------------------------------- §10 reshape

#[test]
fn reshape_accepted() {
    for (from, to) in [
        ("B, S, D", "S, B, D"),
        ("B, S, D", "B, S, D, 1"),
        ("2, 3, 4", "6, 4"),
        ("B, 4, S", "2, B, 2, S"),
    ] {
        let mut b = fb();
        let x = b.param("x", f32s(from));
        let y = b.op(Op::Reshape(sh(to), x));
        assert_eq!(accept(b, y, f32s(to)), format!("Tensor[f32; {to}]"));
    }
    // [B, S, 2] → [B, 2·S]: a constant multiple is still Presburger.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, S, 2", vec![Pred::ge("S", 3)]));
    let target = vec![v("B"), v("S") * 2];
    let y = b.op(Op::Reshape(target.clone(), x));
    assert_eq!(
        accept(b, y, td(Dtype::F32, target)),
        "Tensor[f32; B, 2 * S where S >= 3]"
    );
    // Step 2: Z3 with Γ's facts (S = 2·T).
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    bind(&mut b, "T");
    b.requires(Pred::eq(v("S"), v("T") * 2));
    let y = b.op(Op::Reshape(sh("B, T, 2"), x));
    assert_eq!(accept(b, y, f32s("B, T, 2")), "Tensor[f32; B, T, 2]");
}

#[test]
fn reshape_volume_unprovable() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Reshape(sh("B, S, 2"), x));
    let d = reject(&b, y);
    expect(
        &d,
        codes::RESHAPE_VOLUME,
        attr(&b, y, 3),
        "cannot prove the volumes equal: expected `B * S` (the volume of [B, S]), found `2 * B * S` (the volume of [B, S, 2])",
        Some("B = 1, S = 1"),
    );
    // `B * S == 2 * B * S` holds for no B, S >= 1: no axiom can help.
    assert!(d
        .help
        .as_deref()
        .unwrap()
        .contains("no `requires` or axiom can fix it"));
    // A fresh variable with no relationship to the source.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    bind(&mut b, "T");
    let y = b.op(Op::Reshape(sh("B, T"), x));
    let d = reject(&b, y);
    expect(
        &d,
        codes::RESHAPE_VOLUME,
        attr(&b, y, 2),
        "found `B * T` (the volume of [B, T])",
        Some("B = 1, S = 1, T = 2"),
    );
    // Equal for some sizes, and non-linear: the axiom to state, concretely.
    assert!(d
        .help
        .as_deref()
        .unwrap()
        .contains("`axiom(B * S == B * T)`"));
    // Constants that do not multiply out.
    let mut b = fb();
    let x = b.param("x", f32s("2, 3"));
    let y = b.op(Op::Reshape(sh("5"), x));
    let d = reject(&b, y);
    expect(
        &d,
        codes::RESHAPE_VOLUME,
        attr(&b, y, 1),
        "expected `6` (the volume of [2, 3]), found `5`",
        None,
    );
    // Two constants: no `requires` or axiom can help, and the help says so.
    let help = d.help.as_deref().unwrap();
    assert!(
        help.contains("the volumes are the constants 6 and 5"),
        "{help}"
    );
    assert!(!help.contains("axiom("), "{help}");
    // A target dim that multiplies variables is not formed (E0103) at that attribute.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Reshape(vec![v("B") * v("S")], x));
    expect(
        &reject(&b, y),
        codes::NON_LINEAR,
        attr(&b, y, 0),
        "`B * S` multiplies shape variables, which is outside Presburger arithmetic",
        None,
    );
}

// -------------------------------------------------------------- §11 broadcast

#[test]
fn broadcast_accepted() {
    for (from, to) in [("S", "B, S"), ("1, D", "B, S, D"), ("B, 1", "B, 7")] {
        let mut b = fb();
        let x = b.param("x", f32s(from));
        // The new leading dims are bound by dim parameters.
        for d in sh(to) {
            if let Some(n) = d.as_var().filter(|n| !sh(from).contains(&v(n))) {
                bind(&mut b, n);
            }
        }
        let y = b.op(Op::Broadcast(sh(to), x));
        assert_eq!(accept(b, y, f32s(to)), format!("Tensor[f32; {to}]"));
    }
    // N = 1 proven from the facts, and d = d' proven from the facts.
    let mut b = fb();
    let x = b.param("x", f32s("N, S"));
    bind(&mut b, "T");
    bind(&mut b, "B");
    b.requires(Pred::eq("N", 1));
    b.requires(Pred::eq("S", "T"));
    let y = b.op(Op::Broadcast(sh("B, T"), x));
    assert_eq!(accept(b, y, f32s("B, T")), "Tensor[f32; B, T]");
}

#[test]
fn broadcast_of_non_one_dim() {
    // S is neither 1 nor T: the counterexample must break both (S ≠ 1, S ≠ T).
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    bind(&mut b, "B");
    bind(&mut b, "T");
    let y = b.op(Op::Broadcast(sh("B, T"), x));
    expect(
        &reject(&b, y),
        codes::BROADCAST,
        attr(&b, y, 1),
        "cannot broadcast dimension 0 of the operand: expected `1` or `T`, found `S`",
        Some("S = 2, T = 1"),
    );
    // `S = 1 ∨ S = T` holds, but neither disjunct is provable on its own, so
    // the rule (Γ ⊨ d = 1 or Γ ⊨ d = d') rejects; no assignment breaks both,
    // so the witness is the one against `S = T`.
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    bind(&mut b, "T");
    b.requires(Pred::or([Pred::eq("S", 1), Pred::eq("S", "T")]));
    let y = b.op(Op::Broadcast(sh("T"), x));
    expect(
        &reject(&b, y),
        codes::BROADCAST,
        attr(&b, y, 0),
        "expected `1` or `T`, found `S`",
        Some("S = 1, T = 2"),
    );
    // A constant 3 onto 4.
    let mut b = fb();
    let x = b.param("x", f32s("B, 3"));
    let y = b.op(Op::Broadcast(sh("B, 4"), x));
    expect(
        &reject(&b, y),
        codes::BROADCAST,
        attr(&b, y, 1),
        "cannot broadcast dimension 1 of the operand: expected `1` or `4`, found `3`",
        None,
    );
    // B onto 7: fails unless B = 1 or B = 7; the smallest other B is 2.
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let y = b.op(Op::Broadcast(sh("7"), x));
    expect(
        &reject(&b, y),
        codes::BROADCAST,
        attr(&b, y, 0),
        "expected `1` or `7`, found `B`",
        Some("B = 2"),
    );
    // Target rank below the operand's.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Broadcast(sh("S"), x));
    expect(
        &reject(&b, y),
        codes::RANK_MISMATCH,
        attr(&b, y, 1),
        "expected a target of rank at least 2 (the operand is [B, S]), found rank 1",
        None,
    );
}

// ------------------------------------------------------- §12 slice and concat

fn slice(b: &mut FnBuilder, axis: usize, start: Dim, stop: Dim, x: Value) -> Value {
    b.op(Op::Slice {
        axis,
        start,
        stop,
        step: 1,
        x,
    })
}

#[test]
fn strided_slice() {
    let strided = |b: &mut FnBuilder, start: Dim, stop: Dim, step: usize, x: Value| {
        b.op(Op::Slice {
            axis: 1,
            start,
            stop,
            step,
            x,
        })
    };
    // Every other position of a length-S axis: ⌈S / 2⌉ = (S + 1) / 2.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = strided(&mut b, c(0), v("S"), 2, x);
    let out = td(Dtype::F32, vec![v("B"), (v("S") + 1).div(&c(2))]);
    assert_eq!(accept(b, y, out), "Tensor[f32; B, (S + 1) / 2]");
    // Constant bounds: ⌈(10 − 1) / 3⌉ = 3.
    let mut b = fb();
    let x = b.param("x", f32s("B, 10"));
    let y = strided(&mut b, c(1), c(10), 3, x);
    assert_eq!(accept(b, y, f32s("B, 3")), "Tensor[f32; B, 3]");
    // Step 0 is refused at the step.
    let mut b = fb();
    let x = b.param("x", f32s("B, 10"));
    let y = strided(&mut b, c(1), c(10), 0, x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 3),
        "the step must be between 1 and 9223372036854775807, found 0",
        None,
    );
}

#[test]
fn slice_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::ge("S", 4));
    let y = slice(&mut b, 1, c(0), c(4), x);
    assert_eq!(accept(b, y, f32s("B, 4")), "Tensor[f32; B, 4]");
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::ge("S", 2));
    let y = slice(&mut b, 1, c(1), v("S"), x);
    assert_eq!(
        accept(b, y, td(Dtype::F32, vec![v("B"), v("S") - 1])),
        "Tensor[f32; B, S - 1]"
    );
    // An empty slice is fine when the axis opted into ≥ 0.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "N", vec![Pred::ge("N", 0)]));
    let y = slice(&mut b, 0, c(0), v("N"), x);
    assert_eq!(accept(b, y, f32s("N")), "Tensor[f32; N where N >= 0]");
}

#[test]
fn slice_out_of_bounds() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = slice(&mut b, 1, c(0), v("S") + 1, x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "stop `S + 1` may exceed the dimension `S` of axis 1",
        // `S + 1 <= S` normalises to false, yet the error still shows a
        // concrete failing σ (issue 11 item 7): every S fails, S = 1 is least.
        Some("S = 1"),
    );
    // Out of bounds only for some S: 0..8 with S ≥ 4 fails at S = 4.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::ge("S", 4));
    let y = slice(&mut b, 1, c(0), c(8), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "stop `8` may exceed the dimension `S` of axis 1",
        Some("S = 4"),
    );
    // 0..4 on an unconstrained S.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = slice(&mut b, 1, c(0), c(4), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "stop `4` may exceed the dimension `S` of axis 1",
        Some("S = 1"),
    );
    // S ≥ 3 is not enough for 0..4: the witness is S = 3.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::ge("S", 3));
    let y = slice(&mut b, 1, c(0), c(4), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "may exceed",
        Some("S = 3"),
    );
    // Negative start.
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    let y = slice(&mut b, 0, c(-1), c(1), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 1),
        "start `-1` may be negative",
        None,
    );
    // Stop before start.
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    let y = slice(&mut b, 0, v("S"), v("S") - 1, x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "stop `S - 1` may be before start `S`",
        Some("S = 1"),
    );
    // Empty under the default discipline.
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    let y = slice(&mut b, 0, c(1), v("S"), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "the slice `1..S` may be empty; its length `S - 1` must be at least 1",
        Some("S = 1"),
    );
    // Bad axis.
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    let y = slice(&mut b, 1, c(0), c(1), x);
    expect(
        &reject(&b, y),
        codes::AXIS,
        attr(&b, y, 0),
        "axis 1 is out of range for a tensor of rank 1",
        None,
    );
}

#[test]
fn concat_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, D"));
    let w = b.param("w", f32s("C, D"));
    let y = b.op(Op::Concat(0, vec![x, w]));
    let out = td(Dtype::F32, vec![v("B") + v("C"), v("D")]);
    assert_eq!(accept(b, y, out), "Tensor[f32; B + C, D]");
    // Three operands on axis 1, with a dim equal by requires.
    let mut b = fb();
    let x = b.param("x", f32s("B, 2"));
    let w = b.param("w", f32s("E, S"));
    let z = b.param("z", f32s("B, 3"));
    b.requires(Pred::eq("E", "B"));
    let y = b.op(Op::Concat(1, vec![x, w, z]));
    let out = td(Dtype::F32, vec![v("B"), v("S") + 5]);
    assert_eq!(accept(b, y, out), "Tensor[f32; B, S + 5]");
}

#[test]
fn concat_rejected() {
    // Rank mismatch.
    let mut b = fb();
    let x = b.param("x", f32s("B, D"));
    let w = b.param("w", f32s("B, D, 1"));
    let y = b.op(Op::Concat(0, vec![x, w]));
    expect(
        &reject(&b, y),
        codes::CONCAT,
        arg(&b, y, 1),
        "expected rank 2 (the first operand is [B, D]), found rank 3 ([B, D, 1])",
        None,
    );
    // A non-concat dim that differs.
    let mut b = fb();
    let x = b.param("x", f32s("B, D"));
    let w = b.param("w", f32s("C, E"));
    let y = b.op(Op::Concat(0, vec![x, w]));
    expect(
        &reject(&b, y),
        codes::CONCAT,
        arg(&b, y, 1),
        "dimension 1: expected `D` (the first operand), found `E`",
        Some("D = 1, E = 2"),
    );
    // Dtype differs on the third operand.
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let w = b.param("w", f32s("C"));
    let z = b.param("z", t(Dtype::F16, "C"));
    let y = b.op(Op::Concat(0, vec![x, w, z]));
    expect(
        &reject(&b, y),
        codes::DTYPE_MISMATCH,
        arg(&b, y, 2),
        "expected dtype f32 (the first operand's), found f16",
        None,
    );
}

// --------------------------------------------------- §8a top-k

fn topk(b: &mut FnBuilder, k: Dim, axis: usize, indices: bool, x: Value) -> Value {
    b.op(Op::TopK {
        k,
        axis,
        indices,
        x,
    })
}

#[test]
fn topk_accepted() {
    // A sampler's top-k over the vocabulary, K ≤ V stated.
    let mut b = fb();
    let x = b.param("x", f32s("B, V"));
    bind(&mut b, "K");
    b.requires(Pred::le("K", "V"));
    let y = topk(&mut b, v("K"), 1, false, x);
    assert_eq!(accept(b, y, f32s("B, K")), "Tensor[f32; B, K]");
    let mut b = fb();
    let x = b.param("x", t(Dtype::BF16, "B, 8"));
    let y = topk(&mut b, c(3), 1, true, x);
    assert_eq!(accept(b, y, t(Dtype::I64, "B, 3")), "Tensor[i64; B, 3]");
}

#[test]
fn topk_rejected() {
    // K not known to fit: counterexample.
    let mut b = fb();
    let x = b.param("x", f32s("B, V"));
    let _k = b.param("k", tc_core::Type::Dim(v("K")));
    let y = topk(&mut b, v("K"), 1, false, x);
    expect(
        &reject(&b, y),
        codes::TOPK,
        attr(&b, y, 1),
        "k `K` may exceed the dimension `V` of axis 1",
        Some("V = 1, K = 2"),
    );
    // A constant K past a constant axis.
    let mut b = fb();
    let x = b.param("x", f32s("B, 4"));
    let y = topk(&mut b, c(5), 1, false, x);
    let d = reject(&b, y);
    assert_eq!(d.code, codes::TOPK);
    // Bool operand.
    let mut b = fb();
    let x = b.param("x", t(Dtype::Bool, "B, 4"));
    let y = topk(&mut b, c(1), 1, false, x);
    assert_eq!(reject(&b, y).code, codes::DTYPE_CLASS);
}

#[test]
fn cumsum_rule() {
    let mut b = fb();
    let x = b.param("x", t(Dtype::I16, "B, S"));
    let y = b.op(Op::CumSum { axis: 1, x });
    assert_eq!(accept(b, y, t(Dtype::I16, "B, S")), "Tensor[i16; B, S]");
    let mut b = fb();
    let x = b.param("x", t(Dtype::Bool, "B, S"));
    let y = b.op(Op::CumSum { axis: 1, x });
    assert_eq!(reject(&b, y).code, codes::DTYPE_CLASS);
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::CumSum { axis: 2, x });
    assert_eq!(reject(&b, y).code, codes::AXIS);
}

#[test]
fn pad_rule() {
    let pad = |b: &mut FnBuilder, before: Dim, after: Dim, value: Scalar, x: Value| {
        b.op(Op::Pad {
            axis: 1,
            before,
            after,
            value,
            x,
        })
    };
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    bind(&mut b, "P");
    let y = pad(&mut b, c(1), v("P"), Scalar::Float(0.0), x);
    let out = td(Dtype::F32, vec![v("B"), v("S") + v("P") + 1]);
    assert_eq!(accept(b, y, out), "Tensor[f32; B, P + S + 1]");
    // A width that may be negative, with its counterexample.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = pad(&mut b, v("S") - 2, c(0), Scalar::Float(0.0), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 1),
        "the padding before `S - 2` may be negative",
        Some("S = 1"),
    );
    // The value's class must be the tensor's.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = pad(&mut b, c(1), c(1), Scalar::Int(0), x);
    assert_eq!(reject(&b, y).code, codes::DTYPE_MISMATCH);
}

// --------------------------------------------------- §12f sdpa

fn sdpa(b: &mut FnBuilder, [q, k, v, mask]: [Value; 4]) -> Value {
    b.op(Op::Sdpa {
        q,
        k,
        v,
        mask,
        scale: Scalar::Float(0.125),
    })
}

/// `q [s…, M, D]`, `k [s…, D, T]`, `v [s…, T, E]`, `mask [s…, M, T]`.
fn sdpa_params(b: &mut FnBuilder, shapes: [&str; 4]) -> [Value; 4] {
    let names = ["q", "k", "v", "mask"];
    [0, 1, 2, 3].map(|i| b.param(names[i], f32s(shapes[i])))
}

#[test]
fn sdpa_rule() {
    // The result is the queries' rows by the values' width.
    let mut b = fb();
    let ops = sdpa_params(
        &mut b,
        ["B, H, M, D", "B, H, D, T", "B, H, T, E", "B, H, M, T"],
    );
    let y = sdpa(&mut b, ops);
    assert_eq!(accept(b, y, f32s("B, H, M, E")), "Tensor[f32; B, H, M, E]");
    // Keys as the projection lays them out (positions first): E0204 at
    // the keys, with a counterexample and the transpose to write.
    let mut b = fb();
    let ops = sdpa_params(&mut b, ["B, M, 64", "B, T, 64", "B, T, 64", "B, M, T"]);
    let y = sdpa(&mut b, ops);
    let d = reject(&b, y);
    expect(
        &d,
        codes::SHAPE_MISMATCH,
        arg(&b, y, 1),
        "the keys' head dim (dim 1) must be the queries' width: expected `64`, found `T`",
        Some("T = 1"),
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("transpose(k, [0, 2, 1])")),
        "{d}"
    );
    // The values' positions, the mask's rows and columns, a leading dim:
    // each at its operand.
    for (shapes, at, msg) in [
        (
            ["M, D", "D, T", "S, E", "M, T"],
            2,
            "the values' positions (dim 0)",
        ),
        (
            ["M, D", "D, T", "T, E", "S, T"],
            3,
            "the mask's rows (dim 0)",
        ),
        (
            ["M, D", "D, T", "T, E", "M, S"],
            3,
            "the mask's columns (dim 1)",
        ),
        (
            ["B, M, D", "C, D, T", "B, T, E", "B, M, T"],
            1,
            "leading dimension 0 of the keys",
        ),
    ] {
        let mut b = fb();
        let ops = sdpa_params(&mut b, shapes);
        let y = sdpa(&mut b, ops);
        let d = reject(&b, y);
        assert_eq!(d.code, codes::SHAPE_MISMATCH, "{d}");
        assert_eq!(d.span, arg(&b, y, at), "{d}");
        assert!(d.message.contains(msg), "{d}");
    }
    // Ranks: below 2, or unequal (no implicit broadcasting).
    let mut b = fb();
    let ops = sdpa_params(&mut b, ["D", "D, T", "T, E", "1, T"]);
    let y = sdpa(&mut b, ops);
    assert_eq!(reject(&b, y).code, codes::RANK_MISMATCH);
    let mut b = fb();
    let ops = sdpa_params(&mut b, ["B, M, D", "B, D, T", "B, T, E", "M, T"]);
    let y = sdpa(&mut b, ops);
    let d = reject(&b, y);
    assert_eq!(
        (d.code, d.span),
        (codes::RANK_MISMATCH, arg(&b, y, 3)),
        "{d}"
    );
    // Keys that may be none: the softmax's max needs one (E0303).
    let mut b = fb();
    b.requires(Pred::ge(v("T"), c(0)));
    let ops = sdpa_params(&mut b, ["M, D", "D, T", "T, E", "M, T"]);
    let y = sdpa(&mut b, ops);
    let d = reject(&b, y);
    assert_eq!(
        (d.code, d.span),
        (codes::EMPTY_REDUCTION, arg(&b, y, 1)),
        "{d}"
    );
    // F32 queries and mask; keys and values in F32, F16 or BF16 (a
    // narrow KV cache, widened exactly as read).
    let operands = |b: &mut FnBuilder, dts: [Dtype; 4]| {
        let shapes = ["M, D", "D, T", "T, E", "M, T"];
        let names = ["q", "k", "v", "mask"];
        [0, 1, 2, 3].map(|i| b.param(names[i], t(dts[i], shapes[i])))
    };
    let (f32_, f16_, bf16_) = (Dtype::F32, Dtype::F16, Dtype::BF16);
    let mut b = fb();
    let ops = operands(&mut b, [f32_, f16_, bf16_, f32_]);
    let y = sdpa(&mut b, ops);
    assert_eq!(accept(b, y, f32s("M, E")), "Tensor[f32; M, E]");
    // Another query dtype is E0202 at the queries; a mask that is not the
    // queries' E0201 at the mask; integer keys E0202 at the keys.
    for (dts, code, at) in [
        ([bf16_, bf16_, bf16_, bf16_], codes::DTYPE_CLASS, 0),
        ([f32_, f32_, f32_, f16_], codes::DTYPE_MISMATCH, 3),
        ([f32_, Dtype::I32, f32_, f32_], codes::DTYPE_CLASS, 1),
    ] {
        let mut b = fb();
        let ops = operands(&mut b, dts);
        let y = sdpa(&mut b, ops);
        let d = reject(&b, y);
        assert_eq!((d.code, d.span), (code, arg(&b, y, at)), "{d}");
    }
}

// --------------------------------------------------- §12e rope

fn rope(b: &mut FnBuilder, layout: RopeLayout, (x, cos, sin): (Value, Value, Value)) -> Value {
    b.op(Op::Rope {
        layout,
        x,
        cos,
        sin,
    })
}

#[test]
fn rope_rule() {
    // Keeps the rotated type; `H + H` is `2·H`.
    for layout in [RopeLayout::Pairs, RopeLayout::Halves] {
        let mut b = fb();
        let rotated = td(Dtype::BF16, vec![v("S"), v("N"), v("H") + v("H")]);
        let x = b.param("x", rotated.clone());
        let cos = b.param("cos", t(Dtype::BF16, "S, N, H"));
        let sin = b.param("sin", t(Dtype::BF16, "S, N, H"));
        let y = rope(&mut b, layout, (x, cos, sin));
        assert_eq!(accept(b, y, rotated), "Tensor[bf16; S, N, 2 * H]");
    }
    // Nothing ties D to H: E0311 at the cosine table, with a counterexample.
    let mut b = fb();
    let x = b.param("x", f32s("S, D"));
    let cos = b.param("cos", f32s("S, H"));
    let sin = b.param("sin", f32s("S, H"));
    let y = rope(&mut b, RopeLayout::Pairs, (x, cos, sin));
    let d = reject(&b, y);
    expect(
        &d,
        codes::ROPE,
        arg(&b, y, 1),
        "the rotated axis `D` may not be twice the tables' last dim `H` (one angle per pair)",
        Some("D = 1, H = 1"),
    );
    // An odd axis is never twice a dim.
    let mut b = fb();
    let x = b.param("x", f32s("S, 7"));
    let cos = b.param("cos", f32s("S, 3"));
    let sin = b.param("sin", f32s("S, 3"));
    let y = rope(&mut b, RopeLayout::Halves, (x, cos, sin));
    assert_eq!(reject(&b, y).code, codes::ROPE);
    // Leading dims differ: the tables are not broadcast implicitly.
    let mut b = fb();
    let x = b.param("x", f32s("B, S, 8"));
    let cos = b.param("cos", f32s("1, S, 4"));
    let sin = b.param("sin", f32s("1, S, 4"));
    let y = rope(&mut b, RopeLayout::Pairs, (x, cos, sin));
    let d = reject(&b, y);
    assert_eq!(d.code, codes::SHAPE_MISMATCH, "{d}");
    assert_eq!(d.span, arg(&b, y, 1), "{d}");
    // The sine table disagrees with the cosine table.
    let mut b = fb();
    let x = b.param("x", f32s("S, 8"));
    let cos = b.param("cos", f32s("S, 4"));
    let sin = b.param("sin", f32s("S, 2"));
    let y = rope(&mut b, RopeLayout::Pairs, (x, cos, sin));
    assert_eq!(reject(&b, y).code, codes::SHAPE_MISMATCH);
    // A scalar has no axis to rotate.
    let mut b = fb();
    let x = b.param("x", f32s(""));
    let cos = b.param("cos", f32s(""));
    let sin = b.param("sin", f32s(""));
    let y = rope(&mut b, RopeLayout::Pairs, (x, cos, sin));
    let d = reject(&b, y);
    assert_eq!(d.code, codes::RANK_MISMATCH, "{d}");
    assert_eq!(d.span, arg(&b, y, 0), "{d}");
    // A float op: an int tensor is E0202, mixed dtypes E0201.
    let mut b = fb();
    let x = b.param("x", t(Dtype::I32, "S, 8"));
    let cos = b.param("cos", t(Dtype::I32, "S, 4"));
    let sin = b.param("sin", t(Dtype::I32, "S, 4"));
    let y = rope(&mut b, RopeLayout::Pairs, (x, cos, sin));
    assert_eq!(reject(&b, y).code, codes::DTYPE_CLASS);
    let mut b = fb();
    let x = b.param("x", f32s("S, 8"));
    let cos = b.param("cos", t(Dtype::F16, "S, 4"));
    let sin = b.param("sin", f32s("S, 4"));
    let y = rope(&mut b, RopeLayout::Pairs, (x, cos, sin));
    let d = reject(&b, y);
    assert_eq!(d.code, codes::DTYPE_MISMATCH, "{d}");
    assert_eq!(d.span, arg(&b, y, 1), "{d}");
}

// --------------------------------------------------- §12a gather

#[test]
fn gather_accepted() {
    // Axis 0: an embedding lookup [V, D] by [B, S] ids.
    let mut b = fb();
    let w = b.param("w", f32s("V, D"));
    let ids = b.param("ids", t(Dtype::I64, "B, S"));
    let y = b.op(Op::Gather {
        axis: 0,
        table: w,
        ids,
    });
    assert_eq!(accept(b, y, f32s("B, S, D")), "Tensor[f32; B, S, D]");
    // An inner axis of a bf16 table, scalar (rank-0) ids: the axis goes.
    let mut b = fb();
    let x = b.param("x", t(Dtype::BF16, "B, C, 4"));
    let ids = b.param("ids", t(Dtype::I64, ""));
    let y = b.op(Op::Gather {
        axis: 1,
        table: x,
        ids,
    });
    assert_eq!(accept(b, y, t(Dtype::BF16, "B, 4")), "Tensor[bf16; B, 4]");
}

#[test]
fn gather_rejected() {
    // Float ids.
    let mut b = fb();
    let w = b.param("w", f32s("V, D"));
    let ids = b.param("ids", f32s("S"));
    let y = b.op(Op::Gather {
        axis: 0,
        table: w,
        ids,
    });
    let d = reject(&b, y);
    expect(
        &d,
        codes::DTYPE_MISMATCH,
        arg(&b, y, 1),
        "expected indices of dtype i64, found f32",
        None,
    );
    assert!(
        d.help.as_deref().is_some_and(|h| h.contains("round")),
        "{:?}",
        d.help
    );
    // i32 ids: the help is a cast.
    let mut b = fb();
    let w = b.param("w", f32s("V, D"));
    let ids = b.param("ids", t(Dtype::I32, "S"));
    let y = b.op(Op::Gather {
        axis: 0,
        table: w,
        ids,
    });
    let d = reject(&b, y);
    expect(
        &d,
        codes::DTYPE_MISMATCH,
        arg(&b, y, 1),
        "expected indices of dtype i64, found i32",
        None,
    );
    assert!(
        d.help.as_deref().is_some_and(|h| h.contains("cast::<i64>")),
        "{:?}",
        d.help
    );
    // Axis past the table's rank.
    let mut b = fb();
    let w = b.param("w", f32s("V, D"));
    let ids = b.param("ids", t(Dtype::I64, "S"));
    let y = b.op(Op::Gather {
        axis: 2,
        table: w,
        ids,
    });
    let d = reject(&b, y);
    assert_eq!(d.code, codes::AXIS);
    assert_eq!(d.span, attr(&b, y, 0));
}

// --------------------------------------------------- §13 division by a variable

#[test]
fn division_by_variable_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("B, S, D"));
    bind(&mut b, "H");
    b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    let target = vec![v("B"), v("S"), v("H"), v("D").div(&v("H"))];
    let y = b.op(Op::Reshape(target.clone(), x));
    assert_eq!(
        accept(b, y, td(Dtype::F32, target)),
        "Tensor[f32; B, S, H, D / H]"
    );
    // The quotient is an ordinary dim afterwards: reshape back to D.
    let mut b = fb();
    let x = b.param("x", f32s("B, D"));
    bind(&mut b, "H");
    b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    let r = b.op(Op::Reshape(vec![v("B"), v("H"), v("D").div(&v("H"))], x));
    let y = b.op(Op::Reshape(sh("B, D"), r));
    assert_eq!(accept(b, y, f32s("B, D")), "Tensor[f32; B, D]");
    // A stronger fact (D = 8·H) proves divisibility through Z3.
    let mut b = fb();
    let x = b.param("x", f32s("D"));
    bind(&mut b, "H");
    b.requires(Pred::eq(v("D"), v("H") * 8));
    let target = vec![v("H"), v("D").div(&v("H"))];
    let y = b.op(Op::Reshape(target.clone(), x));
    assert_eq!(
        accept(b, y, td(Dtype::F32, target)),
        "Tensor[f32; H, D / H]"
    );
}

#[test]
fn division_by_variable_rejected() {
    // D / H without D % H == 0, in an op attribute.
    let mut b = fb();
    let x = b.param("x", f32s("B, S, D"));
    bind(&mut b, "H");
    let target = vec![v("B"), v("S"), v("H"), v("D").div(&v("H"))];
    let y = b.op(Op::Reshape(target, x));
    let d = reject(&b, y);
    expect(
        &d,
        codes::DIV_BY_VAR,
        attr(&b, y, 3),
        "`D / H` divides by a shape variable, but `D % H == 0` is not implied",
        Some("D = 1, H = 2"),
    );
    assert_eq!(
        d.help.as_deref(),
        Some("add `requires(D % H == 0)` or the refinement `where D % H == 0`")
    );
    // A weaker fact (D even) is not enough: D = 2, H = 3.
    let mut b = fb();
    let x = b.param("x", f32s("D"));
    bind(&mut b, "H");
    b.requires(Pred::eq(v("D").rem(&c(2)), 0));
    let y = b.op(Op::Reshape(vec![v("H"), v("D").div(&v("H"))], x));
    expect(
        &reject(&b, y),
        codes::DIV_BY_VAR,
        attr(&b, y, 1),
        "`D / H` divides by a shape variable",
        Some("D = 2, H = 3"),
    );
    // In a parameter type of the signature.
    let mut b = fb();
    // D and H get dims of their own, so a call can infer them (Section 2 §17).
    b.param("d", f32s("D"));
    b.param("h", f32s("H"));
    let x = b.param("x", td(Dtype::F32, vec![v("D").div(&v("H"))]));
    let f = b.clone().finish(x);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1, "{}", render(&es));
    expect(
        &es[0],
        codes::DIV_BY_VAR,
        f.sig.params[2].dim_spans[0],
        "`D / H` divides by a shape variable",
        Some("D = 1, H = 2"),
    );
}

// ----------------------------------------------------------------- §14 axioms

#[test]
fn axioms_accepted() {
    let mut b = fb();
    let x = b.param("x", f32s("X, Y"));
    bind(&mut b, "P");
    b.axiom(Pred::eq(v("P"), v("X") * v("Y")));
    let y = b.op(Op::Reshape(sh("P"), x));
    assert_eq!(accept(b, y, f32s("P")), "Tensor[f32; P]");
    // An axiom relating two products.
    let mut b = fb();
    let x = b.param("x", f32s("A, C"));
    bind(&mut b, "E");
    bind(&mut b, "F");
    b.axiom(Pred::eq(v("A") * v("C"), v("E") * v("F")));
    let y = b.op(Op::Reshape(sh("E, F"), x));
    assert_eq!(accept(b, y, f32s("E, F")), "Tensor[f32; E, F]");
}

#[test]
fn axioms_rejected() {
    // Without the axiom.
    let mut b = fb();
    let x = b.param("x", f32s("X, Y"));
    bind(&mut b, "P");
    let y = b.op(Op::Reshape(sh("P"), x));
    expect(
        &reject(&b, y),
        codes::RESHAPE_VOLUME,
        attr(&b, y, 1),
        "expected `X * Y` (the volume of [X, Y]), found `P` (the volume of [P])",
        Some("X = 1, Y = 1, P = 2"),
    );
    // An axiom that does not give the needed product.
    let mut b = fb();
    let x = b.param("x", f32s("X, Y"));
    bind(&mut b, "P");
    b.axiom(Pred::eq(v("P"), v("X") * v("Y") * 2));
    let y = b.op(Op::Reshape(sh("P"), x));
    expect(
        &reject(&b, y),
        codes::RESHAPE_VOLUME,
        attr(&b, y, 1),
        "cannot prove the volumes equal",
        Some("X = 1, Y = 1, P = 2"),
    );
    // The same product as a `requires` (not an axiom) is outside Presburger.
    let mut b = fb();
    let x = b.param("x", f32s("X, Y"));
    bind(&mut b, "P");
    let r = b.requires(Pred::eq(v("P"), v("X") * v("Y")));
    let y = b.op(Op::Reshape(sh("P"), x));
    let f = b.finish(y);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1, "{}", render(&es));
    expect(
        &es[0],
        codes::NON_LINEAR,
        r,
        "`X * Y` multiplies shape variables",
        None,
    );
    assert!(es[0].help.as_deref().unwrap().contains("axiom(P == X * Y)"));
    // A contradictory axiom set is an empty type.
    let mut b = fb();
    let x = b.param("x", f32s("X"));
    let a = b.axiom(Pred::eq(v("X") * v("X"), 2));
    b.requires(Pred::ge("X", 1));
    let f = b.finish(x);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1, "{}", render(&es));
    assert_eq!(es[0].code, codes::EMPTY_TYPE);
    let _ = a;
}

// ------------------------------------------------ §16 defaults and ≥ 0 opt-in

#[test]
fn defaults_and_opt_in_accepted() {
    // Under the default α ≥ 1, max over any variable axis is fine.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = reduce(&mut b, ReduceOp::Max, &[0, 1], false, x);
    assert_eq!(accept(b, y, f32s("")), "Tensor[f32]");
    // `S - 1` as a dim is fine once S ≥ 2 is known; `N - 1` with N ≥ 0 needs N ≥ 1.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::ge("S", 2));
    let y = b.op(Op::Fill(Dtype::F32, vec![v("S") - 1], Scalar::Float(0.0)));
    let _ = x;
    assert_eq!(
        accept(b, y, td(Dtype::F32, vec![v("S") - 1])),
        "Tensor[f32; S - 1]"
    );
    // The opt-in also admits a compound dim that can be 0.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "N", vec![Pred::ge("N", 0)]));
    let _ = x;
    let y = b.op(Op::Fill(Dtype::F32, vec![v("N") * 2], Scalar::Float(1.0)));
    assert_eq!(
        accept(b, y, td(Dtype::F32, vec![v("N") * 2])),
        "Tensor[f32; 2 * N]"
    );
}

#[test]
fn defaults_and_opt_in_rejected() {
    // A literal 0 dim.
    let mut b = fb();
    let x = b.param("x", f32s("B"));
    let _ = x;
    let y = b.op(Op::Fill(Dtype::F32, sh("0, B"), Scalar::Float(0.0)));
    expect(
        &reject(&b, y),
        codes::BAD_DIM,
        attr(&b, y, 0),
        "dimension `0` is not a valid size here; expected at least 1",
        None,
    );
    // `S - 3` may be < 1 under S ≥ 1.
    let mut b = fb();
    let x = b.param("x", f32s("S"));
    let _ = x;
    let y = b.op(Op::Fill(
        Dtype::F32,
        vec![c(2), v("S") - 3],
        Scalar::Float(0.0),
    ));
    expect(
        &reject(&b, y),
        codes::BAD_DIM,
        attr(&b, y, 1),
        "dimension `S - 3` may be smaller than 1: `S - 3 >= 1` is not implied",
        Some("S = 1"),
    );
    // With N ≥ 0, `N - 1` may be negative.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "N", vec![Pred::ge("N", 0)]));
    let _ = x;
    let y = b.op(Op::Fill(Dtype::F32, vec![v("N") - 1], Scalar::Float(0.0)));
    expect(
        &reject(&b, y),
        codes::BAD_DIM,
        attr(&b, y, 0),
        "dimension `N - 1` may be smaller than 0",
        Some("N = 0"),
    );
    // The opt-in replaces the default: `N >= 0` makes `N == 0` satisfiable,
    // so a callee needing N ≥ 1 (its default) rejects it; see calls below.
}

// ----------------------------------------------- local dims, module constants

#[test]
fn local_dim_binding_in_later_reshape() {
    // let n = dim(x, 1); reshape x to [n, B].
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let n = b.dim("n", x, 1);
    let y = b.op(Op::Reshape(vec![n.clone(), v("B")], x));
    let ck = checked(b, y, f32s("S, B"));
    assert_eq!(ck.types[y].to_string(), "Tensor[f32; n, B]");
    assert!(ck.ctx.facts.contains(&Pred::eq("n", "S")));
    // The binding's value is known: a reshape to [B, n, 2] fails with n shown.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let n = b.dim("n", x, 1);
    let y = b.op(Op::Reshape(vec![v("B"), n, c(2)], x));
    expect(
        &reject(&b, y),
        codes::RESHAPE_VOLUME,
        attr(&b, y, 3),
        "found `2 * B * n`",
        Some("B = 1, S = 1, n = 1"),
    );
    // Binding an axis that does not exist.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.dim("n", x, 5);
    let y = unary(&mut b, UnaryOp::Relu, x);
    b.returns(f32s("B, S"));
    let f = b.finish(y);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1, "{}", render(&es));
    expect(
        &es[0],
        codes::AXIS,
        f.dim_bindings[0].span,
        "axis 5 is out of range for a tensor of rank 2",
        None,
    );
    // Re-binding an existing name.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.dim("S", x, 0);
    let y = unary(&mut b, UnaryOp::Relu, x);
    b.returns(f32s("B, S"));
    let f = b.finish(y);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1, "{}", render(&es));
    expect(
        &es[0],
        codes::UNBOUND_VAR,
        f.dim_bindings[0].span,
        "`S` is already a shape variable or constant",
        None,
    );
}

#[test]
fn module_constants() {
    // const HIDDEN = 768: [B, HIDDEN] → [B, 12, 64].
    let mut b = fb();
    b.constant("HIDDEN", 768);
    let x = b.param("x", f32s("B, HIDDEN"));
    let y = b.op(Op::Reshape(sh("B, 12, 64"), x));
    assert_eq!(accept(b, y, f32s("B, 12, 64")), "Tensor[f32; B, 12, 64]");
    // 12 · 65 ≠ 768; constants are never shown in counterexamples.
    let mut b = fb();
    b.constant("HIDDEN", 768);
    let x = b.param("x", f32s("B, HIDDEN"));
    let y = b.op(Op::Reshape(sh("B, 12, 65"), x));
    expect(
        &reject(&b, y),
        codes::RESHAPE_VOLUME,
        attr(&b, y, 3),
        "expected `768 * B` (the volume of [B, HIDDEN]), found `780 * B` (the volume of [B, 12, 65])",
        Some("B = 1"),
    );
    // A constant is what it is: slicing 0..1000 of HIDDEN is out of bounds.
    let mut b = fb();
    b.constant("HIDDEN", 768);
    let x = b.param("x", f32s("HIDDEN"));
    let y = slice(&mut b, 0, c(0), c(1000), x);
    expect(
        &reject(&b, y),
        codes::SLICE_BOUNDS,
        attr(&b, y, 2),
        "stop `1000` may exceed the dimension `HIDDEN` of axis 0",
        None,
    );
}

// --------------------------------------------------------------- §17 calls

/// `callee[B, S](x: [B, S]) requires S % 8 == 0 -> [B, S]`.
fn callee_sigs() -> Signatures {
    let mut sigs = Signatures::new();

    let mut b = FnBuilder::new("pad8");
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::eq(v("S").rem(&c(8)), 0));
    b.returns(f32s("B, S"));
    let y = unary(&mut b, UnaryOp::Relu, x);
    sigs.insert("pad8".into(), b.finish(y).sig);

    // pair[B](a: [B], b: [B]) -> [B]
    let mut b = FnBuilder::new("pair");
    let p = b.param("a", f32s("B"));
    let q = b.param("b", f32s("B"));
    b.returns(f32s("B"));
    let y = bin(&mut b, BinaryOp::Add, p, q);
    sigs.insert("pair".into(), b.finish(y).sig);

    // twice[N](x: [N, 2·N]) -> [N]   (a compound parameter dim)
    let mut b = FnBuilder::new("twice");
    let x = b.param("x", td(Dtype::F32, vec![v("N"), v("N") * 2]));
    b.returns(f32s("N"));
    let y = reduce(&mut b, ReduceOp::Sum, &[1], false, x);
    sigs.insert("twice".into(), b.finish(y).sig);

    // big[B](x: [B] where B >= 4) -> [B]
    let mut b = FnBuilder::new("big");
    let x = b.param("x", tr(Dtype::F32, "B", vec![Pred::ge("B", 4)]));
    b.returns(f32s("B"));
    let y = unary(&mut b, UnaryOp::Exp, x);
    sigs.insert("big".into(), b.finish(y).sig);
    sigs
}

fn call(b: &mut FnBuilder, name: &str, args: Vec<Value>) -> Value {
    b.op(Op::Call(name.into(), args))
}

#[test]
fn calls_accepted() {
    let sigs = callee_sigs();
    // Unification B := N, S := 4·T... here S := D with D % 16 == 0 ⇒ D % 8 == 0.
    let mut b = fb();
    let x = b.param("x", f32s("N, D"));
    b.requires(Pred::eq(v("D").rem(&c(16)), 0));
    let y = call(&mut b, "pad8", vec![x]);
    assert_eq!(accept_with(b, y, f32s("N, D"), &sigs), "Tensor[f32; N, D]");
    // Constants instantiate too: [3, 24].
    let mut b = fb();
    let x = b.param("x", f32s("3, 24"));
    let y = call(&mut b, "pad8", vec![x]);
    assert_eq!(
        accept_with(b, y, f32s("3, 24"), &sigs),
        "Tensor[f32; 3, 24]"
    );
    // A compound parameter dim satisfied by the argument.
    let mut b = fb();
    let x = b.param("x", td(Dtype::F32, vec![v("M"), v("M") * 2]));
    let y = call(&mut b, "twice", vec![x]);
    assert_eq!(accept_with(b, y, f32s("M"), &sigs), "Tensor[f32; M]");
    // A parameter refinement proven from the caller's facts.
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    b.requires(Pred::ge("N", 8));
    let y = call(&mut b, "big", vec![x]);
    assert_eq!(accept_with(b, y, f32s("N"), &sigs), "Tensor[f32; N]");
}

#[test]
fn calls_requires_under_caller_facts() {
    let sigs = callee_sigs();
    let mut b = fb();
    let x = b.param("x", f32s("N, D"));
    let y = call(&mut b, "pad8", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        whole(&b, y),
        "`pad8` requires `S % 8 == 0`, i.e. `D % 8 == 0` here, which the caller's facts do not imply",
        Some("D = 1"),
    );
    // D % 4 == 0 is weaker: D = 4.
    let mut b = fb();
    let x = b.param("x", f32s("N, D"));
    b.requires(Pred::eq(v("D").rem(&c(4)), 0));
    let y = call(&mut b, "pad8", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        whole(&b, y),
        "i.e. `D % 8 == 0` here",
        Some("D = 4"),
    );
    // Constant instantiation that violates it: [3, 20].
    let mut b = fb();
    let x = b.param("x", f32s("3, 20"));
    let y = call(&mut b, "pad8", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        whole(&b, y),
        "`pad8` requires `S % 8 == 0`, which is false for these arguments (S = 20)",
        None,
    );
    // The callee's default N ≥ 1 against a caller dim opted into ≥ 0.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "Z", vec![Pred::ge("Z", 0)]));
    let y = call(&mut b, "big", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        arg(&b, y, 0),
        "parameter `x` of `big`: refinement `Z >= 4` is not implied",
        Some("Z = 0"),
    );
}

#[test]
fn calls_unification_failures() {
    let sigs = callee_sigs();
    // B bound by the first argument, then contradicted by the second.
    let mut b = fb();
    let p = b.param("p", f32s("N"));
    let q = b.param("q", f32s("M"));
    let y = call(&mut b, "pair", vec![p, q]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        arg(&b, y, 1),
        "parameter `b` of `pair`: dimension 0: expected `N`, found `M`",
        Some("N = 1, M = 2"),
    );
    // A compound parameter dim becomes an obligation.
    let mut b = fb();
    let x = b.param("x", f32s("M, K"));
    let y = call(&mut b, "twice", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        arg(&b, y, 0),
        "parameter `x` of `twice`: dimension 1: expected `2 * M`, found `K`",
        Some("M = 1, K = 1"),
    );
    // A parameter refinement not implied.
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let y = call(&mut b, "big", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        arg(&b, y, 0),
        "refinement `N >= 4` is not implied",
        Some("N = 1"),
    );
}

#[test]
fn calls_arity_dtype_rank_name() {
    let sigs = callee_sigs();
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let y = call(&mut b, "pair", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::CALL,
        whole(&b, y),
        "`pair` takes 2 arguments, found 1",
        None,
    );
    let mut b = fb();
    let x = b.param("x", t(Dtype::BF16, "N, D"));
    let y = call(&mut b, "pad8", vec![x]);
    let d = reject_with(&b, y, &sigs);
    expect(
        &d,
        codes::DTYPE_MISMATCH,
        arg(&b, y, 0),
        "argument `x` of `pad8`: expected dtype f32, found bf16",
        None,
    );
    assert_eq!(
        d.help.as_deref(),
        Some(
            "cast the bf16 argument to f32: `cast::<f32>(…)` (no implicit promotion, Section 3 §9)"
        )
    );
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let y = call(&mut b, "pad8", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::RANK_MISMATCH,
        arg(&b, y, 0),
        "argument `x` of `pad8`: expected rank 2",
        None,
    );
    let mut b = fb();
    let x = b.param("x", f32s("N"));
    let y = call(&mut b, "nope", vec![x]);
    expect(
        &reject_with(&b, y, &sigs),
        codes::UNKNOWN_NAME,
        whole(&b, y),
        "no tensor fn `nope` is visible here",
        None,
    );
}

// --------------------------------------------- check boundaries (Section 3 §7)

#[test]
fn annotated_let() {
    // Weakening at an annotation is fine; the annotation becomes the type.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, S", vec![Pred::ge("B", 16)]));
    let y = b.op_annot(
        Op::Unary(UnaryOp::Relu, x),
        tr(Dtype::F32, "B, S", vec![Pred::ge("B", 1)]),
    );
    let ck = checked(b, y, f32s("B, S"));
    assert_eq!(ck.types[y].to_string(), "Tensor[f32; B, S where B >= 1]");
    // Strengthening is rejected at the annotation.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op_annot(
        Op::Unary(UnaryOp::Relu, x),
        tr(Dtype::F32, "B, S", vec![Pred::ge("B", 16)]),
    );
    b.returns(f32s("B, S"));
    let d = reject(&b, y);
    expect(
        &d,
        codes::REFINEMENT,
        b.inst(y).unwrap().annot_span,
        "the annotated type of this `let`: refinement `B >= 16` is not implied",
        Some("B = 1"),
    );
    assert!(d.notes[0].contains("expected `Tensor[f32; B, S where B >= 16]`"));
    // A different shape at the annotation.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    bind(&mut b, "T");
    let y = b.op_annot(Op::Unary(UnaryOp::Relu, x), f32s("B, T"));
    b.returns(f32s("B, T"));
    expect(
        &reject(&b, y),
        codes::SHAPE_MISMATCH,
        b.inst(y).unwrap().annot_span,
        "dimension 1: expected `T`, found `S`",
        Some("S = 1, T = 2"),
    );
}

#[test]
fn return_weakening_rejected() {
    // The body yields B ≥ 2; the signature promises B ≥ 3.
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B", vec![Pred::ge("B", 2)]));
    let y = unary(&mut b, UnaryOp::Exp, x);
    b.returns(tr(Dtype::F32, "B", vec![Pred::ge("B", 3)]));
    let f = b.finish(y);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1);
    expect(
        &es[0],
        codes::REFINEMENT,
        f.ret_span,
        "the declared return type: refinement `B >= 3` is not implied",
        Some("B = 2"),
    );
    // A return dim that differs.
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    let y = b.op(Op::Transpose(vec![1, 0], x));
    b.returns(f32s("B, S"));
    let f = b.finish(y);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1);
    expect(
        &es[0],
        codes::SHAPE_MISMATCH,
        f.ret_span,
        "the declared return type: dimension 0: expected `B`, found `S`",
        Some("B = 1, S = 2"),
    );
}

// ------------------------------------------------------ solver budget (E0501)

/// Restores the default budget even if an assertion fails.
struct BudgetGuard;

impl BudgetGuard {
    fn set(r: u32) -> BudgetGuard {
        solver::set_rlimit(r);
        BudgetGuard
    }
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        solver::set_rlimit(solver::DEFAULT_RLIMIT);
    }
}

/// A reshape whose volume equation needs non-linear reasoning under linear facts.
fn nonlinear_reshape() -> (FnBuilder, Value) {
    let mut b = fb();
    let x = b.param("x", f32s("X, Y, Z"));
    bind(&mut b, "P");
    bind(&mut b, "Q");
    b.requires(Pred::eq(v("X"), v("Y") * 3 + v("Z") * 5 + 7));
    b.requires(Pred::eq(v("P"), v("Y") * 3 + 7));
    b.requires(Pred::eq(v("Q"), v("Z") * 5));
    let target = vec![v("Y"), v("Z"), v("P") + v("Q")];
    let y = b.op(Op::Reshape(target.clone(), x));
    b.returns(td(Dtype::F32, target));
    (b, y)
}

#[test]
fn solver_budget_unknown_is_a_rejection() {
    // With the default budget the reshape is proven.
    let (b, y) = nonlinear_reshape();
    check_function(&b.finish(y), &no_sigs()).unwrap_or_else(|es| panic!("{}", render(&es)));

    // A budget that decides the linear signature but not the non-linear goal.
    let (b, y) = nonlinear_reshape();
    let d = {
        let _g = BudgetGuard::set(1_000);
        reject(&b, y)
    };
    assert_eq!(solver::rlimit(), solver::DEFAULT_RLIMIT);
    expect(
        &d,
        codes::SOLVER_UNKNOWN,
        attr(&b, y, 3),
        "could not prove `X * Y * Z == P * Y * Z + Q * Y * Z` within the solver budget",
        None,
    );
    assert_eq!(
        d.help.as_deref(),
        Some("add a refinement or an axiom that makes the obligation easier")
    );

    // A budget too small for anything: even Sat of the signature is unknown
    // (a signature whose satisfiability needs Z3: B = 1, the witness tried
    // before Z3, fails `B % 4 == 0`).
    let mut b = fb();
    let x = b.param("x", f32s("B, S"));
    b.requires(Pred::eq(Dim::var("B").rem(&Dim::c(4)), 0));
    let y = unary(&mut b, UnaryOp::Relu, x);
    b.returns(f32s("B, S"));
    let f = b.finish(y);
    let es = {
        let _g = BudgetGuard::set(1);
        check_function(&f, &no_sigs()).unwrap_err()
    };
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].code, codes::SOLVER_UNKNOWN);
    assert!(es[0].message.contains("within the solver budget"));
    // Restored: the same function checks.
    check_function(&f, &no_sigs()).unwrap();
}

// -------------------------------------------- all errors, no cascade (poison)

#[test]
fn all_errors_are_reported() {
    let mut b = fb();
    let x = b.param("x", f32s("B, M, K"));
    let w = b.param("w", f32s("B, K2, N"));
    let m = b.op(Op::Matmul(x, w)); // error 1: contraction
    let tp = b.op(Op::Transpose(vec![0, 0, 2], x)); // error 2: not a permutation
    let ok = unary(&mut b, UnaryOp::Exp, x); // fine
    b.returns(f32s("B, M, K"));
    let f = b.clone().finish(ok);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 2, "{}", render(&es));
    expect(
        &es[0],
        codes::CONTRACTION,
        arg(&b, m, 1),
        "contraction dimension mismatch",
        Some("K = 1, K2 = 2"),
    );
    expect(
        &es[1],
        codes::PERMUTATION,
        attr(&b, tp, 0),
        "found [0, 0, 2]",
        None,
    );
}

#[test]
fn poisoned_values_do_not_cascade() {
    let mut b = fb();
    let x = b.param("x", f32s("B, M, K"));
    let w = b.param("w", f32s("B, K2, N"));
    let m = b.op(Op::Matmul(x, w)); // the one error
    let r = unary(&mut b, UnaryOp::Relu, m);
    let s = bin(&mut b, BinaryOp::Add, r, x); // would be a shape error, but r is poisoned
    let t2 = reduce(&mut b, ReduceOp::Max, &[7], false, s); // would be an axis error
    b.returns(t(Dtype::I8, "N")); // would be a return error
    let f = b.clone().finish(t2);
    let es = check_function(&f, &no_sigs()).unwrap_err();
    assert_eq!(es.len(), 1, "{}", render(&es));
    assert_eq!(es[0].code, codes::CONTRACTION);
    assert_eq!(es[0].span, arg(&b, m, 1));
}

// ------------------------------------------------ §12c conv, §12d pool

fn window(s: &[usize], p: &[usize], d: &[usize]) -> tc_core::ir::Window {
    tc_core::ir::Window {
        stride: s.to_vec(),
        padding: p.to_vec(),
        dilation: d.to_vec(),
    }
}

#[test]
fn conv_accepted() {
    // Same-padding 3×3 keeps H × W; stride 2 gives (H − 1) / 2 + 1.
    let mut b = fb();
    let x = b.param("x", f32s("B, C, H, W"));
    let w = b.param("w", f32s("O, C, 3, 3"));
    let y = b.op(Op::Conv {
        window: window(&[1, 1], &[1, 1], &[1, 1]),
        groups: 1,
        x,
        w,
    });
    assert_eq!(accept(b, y, f32s("B, O, H, W")), "Tensor[f32; B, O, H, W]");
    let mut b = fb();
    let x = b.param("x", f32s("B, C, H, W"));
    let w = b.param("w", f32s("O, C, 3, 3"));
    let y = b.op(Op::Conv {
        window: window(&[2, 2], &[1, 1], &[1, 1]),
        groups: 1,
        x,
        w,
    });
    let down = td(
        Dtype::F32,
        vec![
            v("B"),
            v("O"),
            (v("H") + c(1)).div(&c(2)),
            (v("W") + c(1)).div(&c(2)),
        ],
    );
    assert_eq!(
        accept(b, y, down),
        "Tensor[f32; B, O, (H + 1) / 2, (W + 1) / 2]"
    );
    // Grouped 1-d with dilation: 8 channels in 4 groups of 2.
    let mut b = fb();
    let x = b.param("x", t(Dtype::I32, "B, 8, 20"));
    let w = b.param("w", t(Dtype::I32, "12, 2, 3"));
    let y = b.op(Op::Conv {
        window: window(&[1], &[0], &[2]),
        groups: 4,
        x,
        w,
    });
    assert_eq!(
        accept(b, y, t(Dtype::I32, "B, 12, 16")),
        "Tensor[i32; B, 12, 16]"
    );
}

#[test]
fn conv_rejected() {
    let mut b = fb();
    let x = b.param("x", f32s("B, C, T"));
    let w = b.param("w", f32s("O, 4, 3"));
    let y = b.op(Op::Conv {
        window: window(&[1], &[1], &[1]),
        groups: 1,
        x,
        w,
    });
    expect(
        &reject(&b, y),
        codes::WINDOW,
        arg(&b, y, 1),
        "input channels: expected `4` (dim 1 of the weights), found `C`",
        Some("C = 1"),
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, 4, T"));
    let w = b.param("w", f32s("O, 4, 5"));
    let y = b.op(Op::Conv {
        window: window(&[1], &[0], &[1]),
        groups: 1,
        x,
        w,
    });
    expect(
        &reject(&b, y),
        codes::WINDOW,
        arg(&b, y, 1),
        "the kernel `5` of spatial axis 0 may not fit in its `T` elements",
        Some("T = 1"),
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, 4, T"));
    let w = b.param("w", f32s("O, 2, 1"));
    let y = b.op(Op::Conv {
        window: window(&[1], &[0], &[1]),
        groups: 2,
        x,
        w,
    });
    expect(
        &reject(&b, y),
        codes::WINDOW,
        attr(&b, y, 3),
        "the output channels `O` (dim 0 of the weights) may not split into 2 groups",
        Some("O = 1"),
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, 4, T"));
    let w = b.param("w", f32s("O, 4, 1"));
    let y = b.op(Op::Conv {
        window: window(&[0], &[0], &[1]),
        groups: 1,
        x,
        w,
    });
    expect(
        &reject(&b, y),
        codes::WINDOW,
        attr(&b, y, 0),
        "the stride must be between 1 and 2147483647, found 0",
        None,
    );
}

#[test]
fn pool_accepted_and_rejected() {
    let mut b = fb();
    let x = b.param("x", f32s("B, C, H, W"));
    let y = b.op(Op::Pool {
        kind: tc_core::ir::PoolKind::Max,
        kernel: vec![3, 3],
        window: window(&[2, 2], &[1, 1], &[1, 1]),
        x,
    });
    let out = td(
        Dtype::F32,
        vec![
            v("B"),
            v("C"),
            (v("H") + c(1)).div(&c(2)),
            (v("W") + c(1)).div(&c(2)),
        ],
    );
    assert_eq!(
        accept(b, y, out),
        "Tensor[f32; B, C, (H + 1) / 2, (W + 1) / 2]"
    );
    let mut b = fb();
    let x = b.param("x", tr(Dtype::F32, "B, T", vec![Pred::ge("T", 0)]));
    let y = b.op(Op::Pool {
        kind: tc_core::ir::PoolKind::Max,
        kernel: vec![2],
        window: window(&[2], &[1], &[1]),
        x,
    });
    expect(
        &reject(&b, y),
        codes::WINDOW,
        arg(&b, y, 0),
        "`max_pool` needs a non-empty spatial axis 0, but `T` may be 0",
        Some("T = 0"),
    );
    let mut b = fb();
    let x = b.param("x", f32s("B, T"));
    let y = b.op(Op::Pool {
        kind: tc_core::ir::PoolKind::Avg,
        kernel: vec![3],
        window: window(&[1], &[2], &[1]),
        x,
    });
    expect(
        &reject(&b, y),
        codes::WINDOW,
        attr(&b, y, 2),
        "padding 2 exceeds half the kernel 3",
        None,
    );
}
