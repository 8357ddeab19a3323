//! Every worked example of Section 1 §7 and Section 3 §6.1, §8.1–§8.6, with
//! the exact verdict and, for rejections, the exact counterexample.
//!
//! Each example is exercised twice where that makes sense: directly through
//! the judgment (`subtype`, `entails`, `satisfiable`) and end to end through
//! `check_function` on an IR body built with `FnBuilder`.

use tc_core::build::FnBuilder;
use tc_core::check::{cex_string, check_function, check_signature, Checked};
use tc_core::diag::codes;
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, Signatures, Value};
use tc_core::solver::{self, Entailment, Satisfiability};
use tc_core::subtype::{subtype, SubtypeError};
use tc_core::{Ctx, Diagnostic, Dim, Dtype, FnType, Pred, TensorType, Type};

// ------------------------------------------------------------------ helpers

fn v(s: &str) -> Dim {
    Dim::var(s)
}

/// `"B, S, 4"` → `[B, S, 4]` (names are variables, integers constants).
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

fn ten(dt: Dtype, shape: Vec<Dim>) -> Type {
    Type::tensor(dt, shape)
}

fn tenr(dt: Dtype, shape: Vec<Dim>, refs: Vec<Pred>) -> Type {
    Type::Tensor(TensorType::new(dt, shape).with_refs(refs))
}

fn f32s(s: &str) -> Type {
    ten(Dtype::F32, sh(s))
}

fn ctx(vars: &[&str]) -> Ctx {
    let mut g = Ctx::new();
    for x in vars {
        g.declare(x);
    }
    g
}

/// A dim parameter `Dim![name]`: a variable the signature's tensors do not
/// carry is passed as a size, so a call binds it (Section 2 §17).
fn bind(b: &mut FnBuilder, name: &str) {
    b.param(&format!("dim_{name}"), Type::Dim(v(name)));
}

fn check(f: &Function, sigs: &Signatures) -> Result<Checked, Vec<Diagnostic>> {
    check_function(f, sigs)
}

fn ok(f: &Function, sigs: &Signatures) -> Checked {
    match check(f, sigs) {
        Ok(c) => c,
        Err(es) => panic!(
            "expected acceptance, got:\n{}",
            es.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// Exactly one diagnostic.
fn one_err(f: &Function, sigs: &Signatures) -> Diagnostic {
    match check(f, sigs) {
        Ok(_) => panic!("expected a rejection of\n{f}"),
        Err(mut es) => {
            assert_eq!(es.len(), 1, "expected one diagnostic, got {es:#?}");
            es.pop().unwrap()
        }
    }
}

fn ty_of(c: &Checked, val: Value) -> String {
    c.types[val].to_string()
}

// ------------------------------------------------------ Section 1 §7: matmul

/// `matmul : ∀ B, M, K, N. [B, M, K] → [B, K, N] → [B, M, N]`.
fn matmul_fn() -> (FnBuilder, Value) {
    let mut b = FnBuilder::new("matmul");
    let x = b.param("a", f32s("B, M, K"));
    let w = b.param("b", f32s("B, K, N"));
    b.returns(f32s("B, M, N"));
    let y = b.op(Op::Matmul(x, w));
    (b, y)
}

#[test]
fn s1_matmul_signature_checks() {
    let (b, y) = matmul_fn();
    let f = b.finish(y);
    let c = ok(&f, &Signatures::new());
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, M, N]");
}

#[test]
fn s1_matmul_called_with_instantiation() {
    let (b, y) = matmul_fn();
    let mut sigs = Signatures::new();
    sigs.insert("matmul".into(), b.finish(y).sig);

    // Accepted: K := D, contraction agrees; the result is [B, S, V].
    let mut c = FnBuilder::new("caller");
    let q = c.param("q", f32s("B, S, D"));
    let k = c.param("k", f32s("B, D, V"));
    c.returns(f32s("B, S, V"));
    let r = c.op(Op::Call("matmul".into(), vec![q, k]));
    let checked = ok(&c.clone().finish(r), &sigs);
    assert_eq!(ty_of(&checked, r), "Tensor[f32; B, S, V]");

    // Rejected: the second argument's contraction dim is E, not D.
    let mut c = FnBuilder::new("caller");
    let q = c.param("q", f32s("B, S, D"));
    let k = c.param("k", f32s("B, E, V"));
    c.returns(f32s("B, S, V"));
    let r = c.op(Op::Call("matmul".into(), vec![q, k]));
    let e = one_err(&c.clone().finish(r), &sigs);
    assert_eq!(e.code, codes::CALL);
    assert_eq!(e.span, c.inst(r).unwrap().arg_span(1));
    assert!(
        e.message
            .contains("parameter `b` of `matmul`: dimension 1: expected `D`, found `E`"),
        "{}",
        e.message
    );
    assert_eq!(cex_string(&e), "D = 1, E = 2");
}

// -------------------------------------------------- Section 1 §7: groupNorm

/// `groupNorm : ∀ B, S, H, G. requires H mod G = 0. [B, S, H] → [B, S, H]`.
/// G is bound through the `gamma : [G]` parameter so a call can instantiate it.
/// The body is the real computation in core ops: split H into G groups of
/// `H / G`, subtract the group mean, merge back.
fn group_norm(with_requires: bool) -> (FnBuilder, Value, Option<tc_core::SpanId>) {
    let mut b = FnBuilder::new("groupNorm");
    let x = b.param("x", f32s("B, S, H"));
    let _gamma = b.param("gamma", f32s("G"));
    let req = with_requires.then(|| b.requires(Pred::eq(v("H").rem(&v("G")), 0)));
    b.returns(f32s("B, S, H"));
    let hg = v("H").div(&v("G"));
    let grouped = vec![v("B"), v("S"), v("G"), hg];
    let r = b.op(Op::Reshape(grouped.clone(), x));
    let m = b.op(Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![3],
        keepdims: true,
        x: r,
    });
    let mb = b.op(Op::Broadcast(grouped, m));
    let c = b.op(Op::Binary(BinaryOp::Sub, r, mb));
    let y = b.op(Op::Reshape(sh("B, S, H"), c));
    (b, y, req)
}

#[test]
fn s1_group_norm_body_with_requires() {
    let (b, y, _) = group_norm(true);
    let f = b.clone().finish(y);
    let c = ok(&f, &Signatures::new());
    assert_eq!(ty_of(&c, Value::from_u32(2)), "Tensor[f32; B, S, G, H / G]");
    assert_eq!(ty_of(&c, Value::from_u32(3)), "Tensor[f32; B, S, G, 1]");
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, S, H]");
}

#[test]
fn s1_group_norm_body_without_requires_is_rejected() {
    let (b, y, _) = group_norm(false);
    let f = b.clone().finish(y);
    let errs = check(&f, &Signatures::new()).unwrap_err();
    // The first reshape's `H / G` dim is unjustified; the values derived from
    // it are poisoned, so that is the only error.
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let e = &errs[0];
    assert_eq!(e.code, codes::DIV_BY_VAR);
    assert_eq!(e.span, b.inst(Value::from_u32(2)).unwrap().attr_span(3));
    assert!(e
        .message
        .contains("`H / G` divides by a shape variable, but `H % G == 0` is not implied"));
    assert_eq!(cex_string(e), "H = 1, G = 2");
}

fn group_norm_sigs() -> Signatures {
    let (b, y, _) = group_norm(true);
    let mut sigs = Signatures::new();
    sigs.insert("groupNorm".into(), b.finish(y).sig);
    sigs
}

/// A caller of groupNorm with hidden size `D`, `C` groups and the given facts.
fn gn_caller(requires: Vec<Pred>) -> (FnBuilder, Value) {
    let mut c = FnBuilder::new("caller");
    let x = c.param("x", f32s("N, T, D"));
    let g = c.param("g", f32s("C"));
    for r in requires {
        c.requires(r);
    }
    c.returns(f32s("N, T, D"));
    let y = c.op(Op::Call("groupNorm".into(), vec![x, g]));
    (c, y)
}

#[test]
fn s1_group_norm_call_site_must_prove_requires() {
    let sigs = group_norm_sigs();
    // Proven: D % C == 0 is a caller fact.
    let (c, y) = gn_caller(vec![Pred::eq(v("D").rem(&v("C")), 0)]);
    let checked = ok(&c.finish(y), &sigs);
    assert_eq!(ty_of(&checked, y), "Tensor[f32; N, T, D]");

    // Proven from different facts: D = 4·C.
    let (c, y) = gn_caller(vec![Pred::eq(v("D"), v("C") * 4)]);
    ok(&c.finish(y), &sigs);

    // Not provable: no facts at all.
    let (c, y) = gn_caller(vec![]);
    let e = one_err(&c.clone().finish(y), &sigs);
    assert_eq!(e.code, codes::CALL);
    assert_eq!(e.span, c.inst(y).unwrap().span);
    assert!(
        e.message
            .contains("`groupNorm` requires `H % G == 0`, i.e. `D % C == 0` here"),
        "{}",
        e.message
    );
    assert_eq!(cex_string(&e), "D = 1, C = 2");

    // Not provable: a weaker fact (D even does not make D divisible by C).
    let (c, y) = gn_caller(vec![Pred::eq(v("D").rem(&Dim::c(2)), 0)]);
    let e = one_err(&c.clone().finish(y), &sigs);
    assert_eq!(e.code, codes::CALL);
    assert_eq!(cex_string(&e), "D = 2, C = 3");
}

#[test]
fn s1_group_norm_with_constant_groups() {
    // G as a module constant (Section 1 §6 binding site 3): `const G = 32`.
    let mut b = FnBuilder::new("groupNorm32");
    b.constant("G", 32);
    let x = b.param("x", f32s("B, S, H"));
    b.requires(Pred::eq(v("H").rem(&v("G")), 0));
    b.returns(f32s("B, S, H"));
    let y = b.op(Op::Unary(tc_core::ir::UnaryOp::Relu, x));
    let mut sigs = Signatures::new();
    sigs.insert("groupNorm32".into(), b.finish(y).sig);

    let caller = |req: Option<Pred>| {
        let mut c = FnBuilder::new("caller");
        let x = c.param("x", f32s("N, T, D"));
        if let Some(r) = req {
            c.requires(r);
        }
        c.returns(f32s("N, T, D"));
        let y = c.op(Op::Call("groupNorm32".into(), vec![x]));
        (c, y)
    };
    let (c, y) = caller(Some(Pred::eq(v("D").rem(&Dim::c(64)), 0)));
    ok(&c.finish(y), &sigs);
    let (c, y) = caller(Some(Pred::eq(v("D").rem(&Dim::c(16)), 0)));
    let e = one_err(&c.finish(y), &sigs);
    assert_eq!(e.code, codes::CALL);
    assert!(
        e.message.contains("i.e. `D % 32 == 0` here"),
        "{}",
        e.message
    );
    assert_eq!(cex_string(&e), "D = 16");
    let (c, y) = caller(None);
    let e = one_err(&c.finish(y), &sigs);
    assert_eq!(cex_string(&e), "D = 1");
}

// ---------------------------------------------------- Section 1 §7: reshape

#[test]
fn s1_reshape_conservation_by_polynomial() {
    // vol [B, S, D] = vol [S, B, D] = vol [B, S, D, 1] as polynomials (§10 step 1).
    for target in ["S, B, D", "B, S, D, 1", "D, 1, S, B"] {
        let mut b = FnBuilder::new("r");
        let x = b.param("x", f32s("B, S, D"));
        b.returns(f32s(target));
        let y = b.op(Op::Reshape(sh(target), x));
        let c = ok(&b.finish(y), &Signatures::new());
        assert_eq!(ty_of(&c, y), format!("Tensor[f32; {target}]"));
    }
    // With constants: [B, 2, 3] → [B, 6].
    let mut b = FnBuilder::new("r");
    let x = b.param("x", f32s("B, 2, 3"));
    b.returns(f32s("B, 6"));
    let y = b.op(Op::Reshape(sh("B, 6"), x));
    ok(&b.finish(y), &Signatures::new());
}

/// Section 1 §7's workaround: fresh `P_in`, `P_out` for the products, the
/// product equalities as axioms, and the Presburger obligation `P_in = P_out`.
fn reshape_products(requires_eq: bool) -> (FnBuilder, Value) {
    let mut b = FnBuilder::new("reshape");
    let x = b.param("x", f32s("A, C"));
    bind(&mut b, "E");
    bind(&mut b, "F");
    bind(&mut b, "Pin");
    bind(&mut b, "Pout");
    b.axiom(Pred::eq(v("Pin"), v("A") * v("C")));
    b.axiom(Pred::eq(v("Pout"), v("E") * v("F")));
    if requires_eq {
        b.requires(Pred::eq(v("Pin"), v("Pout")));
    }
    b.returns(f32s("E, F"));
    let y = b.op(Op::Reshape(sh("E, F"), x));
    (b, y)
}

#[test]
fn s1_reshape_with_product_axioms() {
    let (b, y) = reshape_products(true);
    let c = ok(&b.finish(y), &Signatures::new());
    assert_eq!(ty_of(&c, y), "Tensor[f32; E, F]");

    let (b, y) = reshape_products(false);
    let e = one_err(&b.clone().finish(y), &Signatures::new());
    assert_eq!(e.code, codes::RESHAPE_VOLUME);
    assert_eq!(e.span, b.inst(y).unwrap().attr_span(2));
    assert!(
        e.message
            .contains("cannot prove the volumes equal: expected `A * C` (the volume of [A, C]), found `E * F` (the volume of [E, F])"),
        "{}",
        e.message
    );
    // Only the obligation's own variables are shown (Pin, Pout are implied).
    assert_eq!(cex_string(&e), "A = 1, C = 1, E = 1, F = 2");
}

#[test]
fn s1_reshape_products_need_the_escape_hatch() {
    // Writing the product directly in a type is outside Presburger (E0103).
    let mut b = FnBuilder::new("reshape");
    let x = b.param("x", f32s("B, S, D"));
    let sd = v("S") * v("D");
    b.returns(ten(Dtype::F32, vec![v("B"), sd.clone()]));
    let y = b.op(Op::Reshape(vec![v("B"), sd], x));
    let f = b.clone().finish(y);
    let errs = check(&f, &Signatures::new()).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].code, codes::NON_LINEAR);
    assert_eq!(errs[0].span, f.sig.ret_dim_spans[1]);
    assert!(errs[0]
        .message
        .contains("`D * S` multiplies shape variables"));

    // With a fresh P and the axiom P = S·D, the same reshape checks.
    let mut b = FnBuilder::new("reshape");
    let x = b.param("x", f32s("B, S, D"));
    bind(&mut b, "P");
    b.axiom(Pred::eq(v("P"), v("S") * v("D")));
    b.returns(f32s("B, P"));
    let y = b.op(Op::Reshape(sh("B, P"), x));
    ok(&b.finish(y), &Signatures::new());

    // Without the axiom: the exact counterexample.
    let mut b = FnBuilder::new("reshape");
    let x = b.param("x", f32s("B, S, D"));
    bind(&mut b, "P");
    b.returns(f32s("B, P"));
    let y = b.op(Op::Reshape(sh("B, P"), x));
    let e = one_err(&b.finish(y), &Signatures::new());
    assert_eq!(e.code, codes::RESHAPE_VOLUME);
    assert_eq!(cex_string(&e), "B = 1, S = 1, D = 1, P = 2");
}

// ------------------------------------------------- Section 1 §7: splitHeads

/// `splitHeads : ∀ B, S, D, H. requires D mod H = 0. [B, S, D] → [B, H, S, D / H]`.
fn split_heads(with_requires: bool) -> (FnBuilder, Value) {
    let mut b = FnBuilder::new("splitHeads");
    let x = b.param("x", f32s("B, S, D"));
    bind(&mut b, "H");
    if with_requires {
        b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    }
    let dh = v("D").div(&v("H"));
    b.returns(ten(Dtype::F32, vec![v("B"), v("H"), v("S"), dh.clone()]));
    let r = b.op(Op::Reshape(vec![v("B"), v("S"), v("H"), dh], x));
    let y = b.op(Op::Transpose(vec![0, 2, 1, 3], r));
    (b, y)
}

#[test]
fn s1_split_heads_with_divisibility() {
    let (b, y) = split_heads(true);
    let c = ok(&b.finish(y), &Signatures::new());
    // v0 is x, v1 the dim parameter `H`, v2 the reshape.
    assert_eq!(ty_of(&c, Value::from_u32(2)), "Tensor[f32; B, S, H, D / H]");
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, H, S, D / H]");
}

#[test]
fn s1_split_heads_without_divisibility() {
    let (b, y) = split_heads(false);
    let f = b.finish(y);
    // The signature itself is ill-formed: its return type divides by H.
    let sig_errs = check_signature(&f.sig);
    assert_eq!(sig_errs.len(), 1, "{sig_errs:#?}");
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e, sig_errs[0]);
    assert_eq!(e.code, codes::DIV_BY_VAR);
    assert_eq!(e.span, f.sig.ret_dim_spans[3]);
    assert!(e
        .message
        .contains("`D / H` divides by a shape variable, but `D % H == 0` is not implied"));
    assert_eq!(
        e.help.as_deref(),
        Some("add `requires(D % H == 0)` or the refinement `where D % H == 0`")
    );
    assert_eq!(cex_string(&e), "D = 1, H = 2");
}

#[test]
fn s1_split_heads_by_a_constant() {
    // Division by a constant stays in Presburger; `D / 8 >= 1` still needs proof.
    let build = |req: bool| {
        let mut b = FnBuilder::new("split8");
        let x = b.param("x", f32s("B, S, D"));
        if req {
            b.requires(Pred::eq(v("D").rem(&Dim::c(8)), 0));
        }
        let dh = v("D").div(&Dim::c(8));
        b.returns(ten(Dtype::F32, vec![v("B"), Dim::c(8), v("S"), dh.clone()]));
        let r = b.op(Op::Reshape(vec![v("B"), v("S"), Dim::c(8), dh], x));
        let y = b.op(Op::Transpose(vec![0, 2, 1, 3], r));
        (b, y)
    };
    let (b, y) = build(true);
    let c = ok(&b.finish(y), &Signatures::new());
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, 8, S, D / 8]");
    let (b, y) = build(false);
    let f = b.finish(y);
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e.code, codes::BAD_DIM);
    assert_eq!(e.span, f.sig.ret_dim_spans[3]);
    assert_eq!(cex_string(&e), "D = 1");
}

#[test]
fn s1_split_heads_call_site() {
    // Section 1 §7's signature as written, `H` bound by the ∀ alone: H
    // appears only in the result and `requires`, so no call can infer it
    // (Section 2 §17 unification binds bare parameter dims). Formation
    // refuses it (E0102; `split_heads` passes H as a dim parameter)...
    let mut b = FnBuilder::new("splitHeads");
    let x = b.param("x", f32s("B, S, D"));
    b.declare("H");
    b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    let dh = v("D").div(&v("H"));
    b.returns(ten(Dtype::F32, vec![v("B"), v("H"), v("S"), dh.clone()]));
    let r = b.op(Op::Reshape(vec![v("B"), v("S"), v("H"), dh], x));
    let y = b.op(Op::Transpose(vec![0, 2, 1, 3], r));
    let f = b.finish(y);
    let formed = check_signature(&f.sig);
    assert_eq!(formed.len(), 1, "{formed:#?}");
    assert_eq!(formed[0].code, codes::UNBOUND_VAR);
    assert!(formed[0]
        .message
        .contains("`H` occurs in no parameter's dims"));
    // ...and a caller that sees it anyway (signatures inserted unformed)
    // is refused at the call.
    let mut sigs = Signatures::new();
    sigs.insert("splitHeads".into(), f.sig);
    let mut c = FnBuilder::new("caller");
    let x = c.param("x", f32s("B, S, D"));
    c.returns(f32s("B, S, D"));
    let r = c.op(Op::Call("splitHeads".into(), vec![x]));
    let e = one_err(&c.clone().finish(r), &sigs);
    assert_eq!(e.code, codes::CALL);
    assert_eq!(e.span, c.inst(r).unwrap().span);
    assert_eq!(
        e.message,
        "cannot infer shape variable `H` of `splitHeads` from the arguments"
    );
}

// ----------------------------------------------- Section 1 §4: Sat(R), empty

#[test]
fn s1_empty_type_is_rejected() {
    // Direct judgment.
    let mut g = ctx(&["B"]);
    g.assume(Pred::ge("B", 1));
    assert_eq!(
        solver::satisfiable(&g, &[Pred::eq("B", 0)]),
        Satisfiability::Unsat
    );
    assert_eq!(solver::satisfiable(&g, &[]), Satisfiability::Sat);

    // Tensor[f32, [B], [B ≥ 1, B = 0]] as a parameter type.
    let mut b = FnBuilder::new("empty");
    let x = b.param(
        "x",
        tenr(
            Dtype::F32,
            sh("B"),
            vec![Pred::ge("B", 1), Pred::eq("B", 0)],
        ),
    );
    b.returns(f32s("B"));
    let f = b.finish(x);
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e.code, codes::EMPTY_TYPE);
    // The minimal unsat core is `B == 0` with the default `B >= 1`: the
    // error sits at that refinement, the redundant `B >= 1` is not blamed.
    assert_eq!(e.span, f.sig.params[0].ref_spans[1]);
    assert!(e.related.is_empty());
    assert_eq!(
        e.message,
        "the refinements of `x` are unsatisfiable: the type is empty"
    );

    // A contradiction between requires clauses is an empty type too.
    let mut b = FnBuilder::new("empty2");
    let x = b.param("x", f32s("B, S"));
    let r0 = b.requires(Pred::gt("B", "S"));
    b.requires(Pred::ge("S", 1));
    let r2 = b.requires(Pred::gt("S", "B"));
    b.returns(f32s("B, S"));
    let f = b.finish(x);
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e.code, codes::EMPTY_TYPE);
    // Every predicate of the unsat core is underlined, and only those.
    assert_eq!(e.span, r0);
    let related: Vec<_> = e.related.iter().map(|l| l.span).collect();
    assert_eq!(related, vec![r2]);

    // The default B ≥ 1 alone makes `B == 0` empty; the opt-in `B >= 0` does not.
    let mut b = FnBuilder::new("zero");
    let x = b.param("x", tenr(Dtype::F32, sh("B"), vec![Pred::eq("B", 0)]));
    b.returns(f32s("B"));
    assert_eq!(
        one_err(&b.finish(x), &Signatures::new()).code,
        codes::EMPTY_TYPE
    );
    let mut b = FnBuilder::new("zero_ok");
    let x = b.param(
        "x",
        tenr(
            Dtype::F32,
            sh("B"),
            vec![Pred::ge("B", 0), Pred::eq("B", 0)],
        ),
    );
    b.returns(f32s("B"));
    ok(&b.finish(x), &Signatures::new());
}

// ------------------------------------------------------- Section 3 §8 direct

fn bsd_ctx() -> Ctx {
    ctx(&["B", "S", "D"])
}

#[test]
fn s3_8_1_refinement_strengthening() {
    let t1 = tenr(
        Dtype::F32,
        sh("B, S, D"),
        vec![Pred::ge("B", 16), Pred::eq(v("D").rem(&Dim::c(8)), 0)],
    );
    let t2 = tenr(Dtype::F32, sh("B, S, D"), vec![Pred::ge("B", 1)]);
    assert_eq!(subtype(&bsd_ctx(), &t1, &t2), Ok(()));
    // And not the other way round: B = 1 breaks B ≥ 16.
    match subtype(&bsd_ctx(), &t2, &t1) {
        Err(SubtypeError::Refinement { pred, cex }) => {
            assert_eq!(pred, Pred::ge("B", 16));
            assert_eq!(cex.to_string(), "B = 1");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_8_2_refinement_weakening_rejected() {
    let t1 = tenr(Dtype::F32, sh("B, S, D"), vec![Pred::ge("B", 1)]);
    let t2 = tenr(Dtype::F32, sh("B, S, D"), vec![Pred::ge("B", 16)]);
    let e = subtype(&bsd_ctx(), &t1, &t2).unwrap_err();
    assert_eq!(
        e,
        SubtypeError::Refinement {
            pred: Pred::ge("B", 16),
            cex: tc_core::Counterexample(vec![("B".into(), 1)]),
        }
    );
    assert_eq!(e.describe(), "refinement `B >= 16` is not implied");

    // End to end: returning a B ≥ 1 tensor where B ≥ 16 is promised.
    let mut b = FnBuilder::new("weaken");
    let x = b.param("x", t1);
    b.returns(t2);
    let y = b.op(Op::Unary(tc_core::ir::UnaryOp::Relu, x));
    let f = b.finish(y);
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e.code, codes::REFINEMENT);
    assert_eq!(e.span, f.ret_span);
    assert_eq!(cex_string(&e), "B = 1");
    assert_eq!(
        e.message,
        "the declared return type: refinement `B >= 16` is not implied"
    );
}

#[test]
fn s3_8_3_dtype_mismatch_requires_cast() {
    let t1 = ten(Dtype::BF16, sh("B, S"));
    let t2 = ten(Dtype::F32, sh("B, S"));
    assert_eq!(
        subtype(&bsd_ctx(), &t1, &t2),
        Err(SubtypeError::Dtype {
            found: Dtype::BF16,
            expected: Dtype::F32
        })
    );
    // Without cast: rejected at the return.
    let mut b = FnBuilder::new("nocast");
    let x = b.param("x", t1.clone());
    b.returns(t2.clone());
    let f = b.finish(x);
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e.code, codes::DTYPE_MISMATCH);
    assert!(e.message.contains("expected dtype f32, found bf16"));
    assert!(e.counterexample.is_none());
    // With cast[F32] x : Tensor[F32, [B, S], []].
    let mut b = FnBuilder::new("cast");
    let x = b.param("x", t1);
    b.returns(t2);
    let y = b.op(Op::Cast(Dtype::F32, x));
    let c = ok(&b.finish(y), &Signatures::new());
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, S]");
}

fn fn_ty(lo_in: i64, lo_out: i64) -> Type {
    Type::Fn(FnType {
        params: vec![tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", lo_in)])],
        ret: Box::new(tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", lo_out)])),
    })
}

#[test]
fn s3_8_4_function_subtyping() {
    let f1 = fn_ty(1, 16);
    let f2 = fn_ty(16, 1);
    let g = ctx(&["B", "S"]);
    assert_eq!(subtype(&g, &f1, &f2), Ok(()));
    // F₂ <: F₁ fails on the (contravariant) parameter first.
    let e = subtype(&g, &f2, &f1).unwrap_err();
    match &e {
        SubtypeError::InFn {
            param: Some(0),
            inner,
        } => assert!(matches!(**inner, SubtypeError::Refinement { .. })),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.cex().unwrap().to_string(), "B = 1");
    assert_eq!(
        e.describe(),
        "parameter 0: refinement `B >= 16` is not implied"
    );
    // Same parameter, weaker result: fails covariantly on the result.
    let e = subtype(&g, &fn_ty(1, 1), &fn_ty(1, 16)).unwrap_err();
    assert_eq!(e.describe(), "result: refinement `B >= 16` is not implied");
    assert_eq!(e.cex().unwrap().to_string(), "B = 1");
    // Arity.
    let f3 = Type::Fn(FnType {
        params: vec![],
        ret: Box::new(Type::Unit),
    });
    assert_eq!(
        subtype(&g, &f1, &f3),
        Err(SubtypeError::Arity {
            found: 1,
            expected: 0
        })
    );
}

#[test]
fn s3_8_4_function_subtyping_at_a_call() {
    // Calling an F₁-typed fn where the caller holds F₂'s facts: the argument
    // (B ≥ 16) satisfies the parameter (B ≥ 1), the result (B ≥ 16) satisfies
    // the caller's expectation (B ≥ 1).
    let mut b = FnBuilder::new("f1");
    let x = b.param("x", tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 1)]));
    b.requires(Pred::ge("S", 1));
    b.returns(tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 1)]));
    let y = b.op(Op::Unary(tc_core::ir::UnaryOp::Relu, x));
    let mut sig = b.finish(y).sig;
    // Pretend f1's body establishes B ≥ 16 on its result (declared type only).
    sig.ret = tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 16)]);
    let mut sigs = Signatures::new();
    sigs.insert("f1".into(), sig);

    let caller = |lo_in: i64, lo_out: i64| {
        let mut c = FnBuilder::new("caller");
        let x = c.param(
            "x",
            tenr(Dtype::F32, sh("N, T"), vec![Pred::ge("N", lo_in)]),
        );
        c.returns(tenr(Dtype::F32, sh("N, T"), vec![Pred::ge("N", lo_out)]));
        let y = c.op(Op::Call("f1".into(), vec![x]));
        (c, y)
    };
    let (c, y) = caller(16, 1);
    let checked = ok(&c.finish(y), &Signatures::clone(&sigs));
    assert_eq!(ty_of(&checked, y), "Tensor[f32; N, T where N >= 16]");
    // The result promises only N ≥ 16: asking for N ≥ 17 fails at N = 16.
    let (c, y) = caller(16, 17);
    let f = c.finish(y);
    let e = one_err(&f, &sigs);
    assert_eq!(e.code, codes::REFINEMENT);
    assert_eq!(e.span, f.ret_span);
    assert_eq!(cex_string(&e), "N = 16");
}

#[test]
fn s3_8_5_rank_difference_rejected() {
    let t1 = f32s("B, S");
    let t2 = f32s("B, S, 1");
    assert_eq!(
        subtype(&bsd_ctx(), &t1, &t2),
        Err(SubtypeError::Rank {
            found: 2,
            expected: 3
        })
    );
    let mut b = FnBuilder::new("rank");
    let x = b.param("x", t1.clone());
    b.returns(t2.clone());
    let f = b.finish(x);
    let e = one_err(&f, &Signatures::new());
    assert_eq!(e.code, codes::RANK_MISMATCH);
    assert_eq!(
        e.message,
        "the declared return type: expected rank 3, found rank 2"
    );
    // To convert: reshape[[B, S, 1]] x.
    let mut b = FnBuilder::new("unsqueeze");
    let x = b.param("x", t1);
    b.returns(t2);
    let y = b.op(Op::Reshape(sh("B, S, 1"), x));
    let c = ok(&b.finish(y), &Signatures::new());
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, S, 1]");
}

#[test]
fn s3_8_6_canonicalisation_both_directions() {
    let t1 = tenr(
        Dtype::F32,
        sh("B"),
        vec![Pred::ge("B", 1), Pred::ge("B", 0)],
    );
    let t2 = tenr(Dtype::F32, sh("B"), vec![Pred::ge("B", 1)]);
    // Even with B opted into ≥ 0 in Γ, the two sets are equivalent.
    let mut g = Ctx::new();
    g.declare_allow_zero("B");
    assert_eq!(subtype(&g, &t1, &t2), Ok(()));
    assert_eq!(subtype(&g, &t2, &t1), Ok(()));
    assert_eq!(subtype(&ctx(&["B"]), &t1, &t2), Ok(()));
    assert_eq!(subtype(&ctx(&["B"]), &t2, &t1), Ok(()));
    // Reordered sets are equivalent too.
    let t3 = tenr(
        Dtype::F32,
        sh("B"),
        vec![Pred::ge("B", 0), Pred::ge("B", 1)],
    );
    assert_eq!(subtype(&g, &t1, &t3), Ok(()));
    assert_eq!(subtype(&g, &t3, &t1), Ok(()));
    // Check boundary in both directions.
    for (from, to) in [(t1.clone(), t2.clone()), (t2, t1)] {
        let mut b = FnBuilder::new("canon");
        let x = b.param("x", from);
        b.returns(to);
        ok(&b.finish(x), &Signatures::new());
    }
}

// ---------------------------------------------------- Section 3 §6.1 f and g

#[test]
fn s3_6_1_f_identity_with_weakening() {
    // let f (x : Tensor[F32, [B, S], [B ≥ 1]]) : Tensor[F32, [B, S], [B ≥ 0]] = x
    let mut b = FnBuilder::new("f");
    let x = b.param("x", tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 1)]));
    b.returns(tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 0)]));
    let f = b.finish(x);
    let c = ok(&f, &Signatures::new());
    // No IR operation: the body is empty and the value flows by subsumption.
    assert!(f.body.is_empty());
    assert_eq!(ty_of(&c, x), "Tensor[f32; B, S where B >= 1]");
    // The entailment behind it, directly.
    let g = ctx(&["B", "S"]);
    assert_eq!(
        solver::entails_with(&g, &[Pred::ge("B", 1)], &Pred::ge("B", 0)),
        Entailment::Valid
    );
    // The converse (strengthening at the boundary) is rejected with B = 1.
    let mut b = FnBuilder::new("f_bad");
    let x = b.param("x", tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 1)]));
    b.returns(tenr(Dtype::F32, sh("B, S"), vec![Pred::ge("B", 2)]));
    let e = one_err(&b.finish(x), &Signatures::new());
    assert_eq!(e.code, codes::REFINEMENT);
    assert_eq!(cex_string(&e), "B = 1");
}

#[test]
fn s3_6_1_g_reshape_is_a_coercion() {
    // let g (x : Tensor[F32, [B, S, D]]) : Tensor[F32, [B, S, D, 1]] = reshape[[B, S, D, 1]] x
    let mut b = FnBuilder::new("g");
    let x = b.param("x", f32s("B, S, D"));
    b.returns(f32s("B, S, D, 1"));
    let y = b.op(Op::Reshape(sh("B, S, D, 1"), x));
    let f = b.finish(y);
    let c = ok(&f, &Signatures::new());
    assert_eq!(f.body.len(), 1);
    assert_eq!(ty_of(&c, y), "Tensor[f32; B, S, D, 1]");
    assert!(f.to_string().contains("reshape[B, S, D, 1] v0"), "{f}");
    // Returning x itself is not subtyping: rank is invariant.
    let mut b = FnBuilder::new("g_bad");
    let x = b.param("x", f32s("B, S, D"));
    b.returns(f32s("B, S, D, 1"));
    let e = one_err(&b.finish(x), &Signatures::new());
    assert_eq!(e.code, codes::RANK_MISMATCH);
}
