//! The help of each diagnostic is right for its case, checked over whole
//! families (issue #11, "Messages a newcomer can act on"), exhaustively over
//! small domains:
//! - a dtype mismatch's cast always points toward the expected dtype, at the
//!   operand that has the other one, at every site (binary, matmul, select,
//!   concat, return);
//! - an equation between constants never suggests an axiom or `requires`;
//! - a reduction that needs a non-empty axis never suggests `sum`;
//! - an empty type's diagnostic underlines exactly a minimal unsat core.

use tc_core::build::FnBuilder;
use tc_core::check::check_function;
use tc_core::ctx::Ctx;
use tc_core::diag::codes;
use tc_core::ir::{BinaryOp, Op, ReduceOp, Signatures, Value};
use tc_core::solver::{self, Satisfiability};
use tc_core::{Diagnostic, Dim, Dtype, Pred, SpanId, Type};

fn t(dt: Dtype, dims: &[Dim]) -> Type {
    Type::tensor(dt, dims.to_vec())
}

fn n() -> Dim {
    Dim::var("N")
}

fn errors(mut b: FnBuilder, y: Value, ret: Type) -> Vec<Diagnostic> {
    b.returns(ret);
    let f = b.finish(y);
    check_function(&f, &Signatures::new())
        .err()
        .unwrap_or_else(|| panic!("expected a rejection of\n{f}"))
}

fn one(b: FnBuilder, y: Value, ret: Type) -> Diagnostic {
    let mut es = errors(b, y, ret);
    assert_eq!(es.len(), 1, "{es:?}");
    es.pop().unwrap()
}

const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::BF16, Dtype::F16, Dtype::I32, Dtype::I64];

/// The dtype a mismatch must cast toward: the declared return dtype when it
/// is one of the two, else the first operand's.
fn target(a: Dtype, b: Dtype, ret: Dtype) -> Dtype {
    if ret == b {
        b
    } else {
        a
    }
}

#[track_caller]
fn assert_cast(d: &Diagnostic, to: Dtype, from: Dtype, span: SpanId) {
    assert_eq!(d.code, codes::DTYPE_MISMATCH, "{d}");
    let help = d.help.as_deref().unwrap_or_default();
    assert!(
        help.contains(&format!("cast the {from} ")) && help.contains(&format!("`cast::<{to}>(…)`")),
        "{d}"
    );
    assert_eq!(d.span, span, "the error sits at the operand to cast: {d}");
}

#[test]
fn cast_points_toward_the_expected_dtype_at_every_operand_site() {
    for &a in DTYPES {
        for &b in DTYPES.iter().filter(|&&b| b != a) {
            for &ret in DTYPES {
                let to = target(a, b, ret);
                let from = if to == a { b } else { a };
                // Binary and matmul: operands 0 and 1.
                for matmul in [false, true] {
                    let dims = if matmul { vec![n(), n()] } else { vec![n()] };
                    let mut fb = FnBuilder::new("f");
                    let x = fb.param("x", t(a, &dims));
                    let z = fb.param("z", t(b, &dims));
                    let y = if matmul {
                        fb.op(Op::Matmul(x, z))
                    } else {
                        fb.op(Op::Binary(BinaryOp::Add, x, z))
                    };
                    let span = fb.inst(y).unwrap().arg_span(if to == a { 1 } else { 0 });
                    assert_cast(&one(fb, y, t(ret, &dims)), to, from, span);
                }
                // Select: the branches are operands 1 and 2.
                let mut fb = FnBuilder::new("f");
                let c = fb.param("c", t(Dtype::Bool, &[n()]));
                let x = fb.param("x", t(a, &[n()]));
                let z = fb.param("z", t(b, &[n()]));
                let y = fb.op(Op::Select(c, x, z));
                let span = fb.inst(y).unwrap().arg_span(if to == a { 2 } else { 1 });
                assert_cast(&one(fb, y, t(ret, &[n()])), to, from, span);
                // Concat.
                let mut fb = FnBuilder::new("f");
                let x = fb.param("x", t(a, &[n()]));
                let z = fb.param("z", t(b, &[n()]));
                let y = fb.op(Op::Concat(0, vec![x, z]));
                let span = fb.inst(y).unwrap().arg_span(if to == a { 1 } else { 0 });
                assert_cast(
                    &one(fb, y, t(ret, &[n().checked_add(&n()).unwrap()])),
                    to,
                    from,
                    span,
                );
            }
            // The return: the value is cast to the declared dtype.
            let mut fb = FnBuilder::new("f");
            let x = fb.param("x", t(a, &[n()]));
            let y = fb.op(Op::Unary(tc_core::ir::UnaryOp::Neg, x));
            let d = one(fb, y, t(b, &[n()]));
            let help = d.help.as_deref().unwrap_or_default();
            assert!(help.contains(&format!("cast the {a} value to {b}")), "{d}");
        }
    }
}

#[test]
fn equations_between_constants_never_suggest_an_axiom() {
    for p in 1..=4i64 {
        for q in 1..=4i64 {
            for r in (1..=8i64).filter(|r| *r != p * q) {
                // Constant volumes, and the same with a variable factor.
                for with_var in [false, true] {
                    let mut src = vec![Dim::c(p), Dim::c(q)];
                    let mut dst = vec![Dim::c(r)];
                    if with_var {
                        src.insert(0, n());
                        dst.insert(0, n());
                    }
                    let mut fb = FnBuilder::new("f");
                    let x = fb.param("x", t(Dtype::F32, &src));
                    let y = fb.op(Op::Reshape(dst.clone(), x));
                    let d = one(fb, y, t(Dtype::F32, &dst));
                    assert_eq!(d.code, codes::RESHAPE_VOLUME, "{d}");
                    let help = d.help.as_deref().unwrap_or_default();
                    assert!(
                        !help.contains("axiom(") && !help.contains("requires("),
                        "{d}"
                    );
                    assert!(help.contains("change the target shape"), "{d}");
                }
            }
            // Two constant dims that differ, neither 1: not a broadcast.
            if p != q && p != 1 && q != 1 {
                let mut fb = FnBuilder::new("f");
                let x = fb.param("x", t(Dtype::F32, &[n(), Dim::c(p)]));
                let z = fb.param("z", t(Dtype::F32, &[n(), Dim::c(q)]));
                let y = fb.op(Op::Binary(BinaryOp::Add, x, z));
                let d = one(fb, y, t(Dtype::F32, &[n(), Dim::c(p)]));
                let help = d.help.as_deref().unwrap_or_default();
                assert!(!help.contains("use `broadcast` explicitly"), "{d}");
                assert!(help.contains(&format!("constants {p} and {q}")), "{d}");
            }
        }
    }
}

#[test]
fn nonempty_reductions_never_suggest_sum() {
    let ops: Vec<Box<dyn Fn(Value) -> Op>> = vec![
        Box::new(|x| Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![0],
            keepdims: false,
            x,
        }),
        Box::new(|x| Op::Reduce {
            op: ReduceOp::Min,
            axes: vec![0],
            keepdims: false,
            x,
        }),
        Box::new(|x| Op::Reduce {
            op: ReduceOp::Mean,
            axes: vec![0],
            keepdims: false,
            x,
        }),
        Box::new(|x| Op::ArgReduce {
            max: true,
            axis: 0,
            keepdims: false,
            x,
        }),
        Box::new(|x| Op::ArgReduce {
            max: false,
            axis: 0,
            keepdims: false,
            x,
        }),
    ];
    for mk in &ops {
        let mut fb = FnBuilder::new("f");
        let x = fb.param("x", t(Dtype::F32, &[n()]));
        fb.requires(Pred::ge("N", 0));
        let y = fb.op(mk(x));
        let ret = if matches!(mk(x), Op::ArgReduce { .. }) {
            Dtype::I64
        } else {
            Dtype::F32
        };
        let d = one(fb, y, t(ret, &[]));
        assert_eq!(d.code, codes::EMPTY_REDUCTION, "{d}");
        let help = d.help.as_deref().unwrap_or_default();
        assert!(!help.contains("sum"), "{d}");
        assert!(help.contains("requires(N >= 1)"), "{d}");
    }
}

/// The predicates, each a candidate `requires`; some subsets contradict.
fn pool() -> Vec<Pred> {
    let (s, k, d) = (Dim::var("S"), Dim::var("K"), Dim::var("D"));
    vec![
        Pred::ge(s.clone(), k.clone()),
        Pred::eq(Dim::var("D").rem(&Dim::c(2)), 0),
        Pred::gt(k.clone(), s.clone()),
        Pred::le(d.clone(), 1),
        Pred::ge(d.clone(), 2),
        Pred::le(s.clone(), 3),
        Pred::ge(k.clone(), 5),
    ]
}

fn sat(preds: &[Pred]) -> Satisfiability {
    let mut ctx = Ctx::new();
    for v in ["S", "K", "D"] {
        ctx.declare(v);
    }
    for p in preds {
        ctx.assume(p.clone());
    }
    solver::satisfiable(&ctx, &[])
}

#[test]
fn an_empty_type_underlines_exactly_a_minimal_unsat_core() {
    let pool = pool();
    let mut unsat_seen = 0;
    for mask in 1u32..(1 << pool.len()) {
        let chosen: Vec<Pred> = (0..pool.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| pool[i].clone())
            .collect();
        let mut fb = FnBuilder::new("f");
        let x = fb.param(
            "x",
            t(Dtype::F32, &[Dim::var("S"), Dim::var("K"), Dim::var("D")]),
        );
        let spans: Vec<SpanId> = chosen.iter().map(|p| fb.requires(p.clone())).collect();
        let ret = t(Dtype::F32, &[Dim::var("S"), Dim::var("K"), Dim::var("D")]);
        let whole_sat = sat(&chosen);
        let mut b2 = fb;
        b2.returns(ret);
        let f = b2.finish(x);
        let res = check_function(&f, &Signatures::new());
        if whole_sat == Satisfiability::Sat {
            assert!(res.is_ok(), "{f}");
            continue;
        }
        unsat_seen += 1;
        let es = res.err().unwrap();
        assert_eq!(es.len(), 1, "{es:?}");
        let d = &es[0];
        assert_eq!(d.code, codes::EMPTY_TYPE);
        let underlined: Vec<SpanId> = std::iter::once(d.span)
            .chain(d.related.iter().map(|l| l.span))
            .collect();
        let core: Vec<Pred> = underlined
            .iter()
            .map(|s| chosen[spans.iter().position(|x| x == s).expect("a requires span")].clone())
            .collect();
        assert_eq!(
            sat(&core),
            Satisfiability::Unsat,
            "the core {core:?} of {chosen:?}"
        );
        for drop in 0..core.len() {
            let mut rest = core.clone();
            rest.remove(drop);
            assert_eq!(sat(&rest), Satisfiability::Sat, "{core:?} is not minimal");
        }
    }
    assert!(
        unsat_seen > 20,
        "the pool exercises few contradictions: {unsat_seen}"
    );
}

#[test]
fn an_inexact_quotient_asks_for_divisibility_not_an_axiom() {
    // Swin patch merging without `W % 2 == 0`: [W] → [W / 2, 2].
    let w = Dim::var("W");
    let half = w.checked_div(&Dim::c(2)).unwrap();
    let mut fb = FnBuilder::new("f");
    let x = fb.param("x", t(Dtype::F32, std::slice::from_ref(&w)));
    fb.requires(Pred::ge("W", 2));
    let y = fb.op(Op::Reshape(vec![half.clone(), Dim::c(2)], x));
    let d = one(fb, y, t(Dtype::F32, &[half, Dim::c(2)]));
    assert_eq!(d.code, codes::RESHAPE_VOLUME, "{d}");
    let help = d.help.as_deref().unwrap_or_default();
    assert!(help.contains("add `requires(W % 2 == 0)`"), "{d}");
    assert!(!help.contains("axiom("), "{d}");
}
