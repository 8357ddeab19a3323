//! Calls spliced into their caller (`tc_llvm::inline`, σ-specialised
//! compilations): the result is the interpreter's, bit for bit in
//! deterministic mode and within the stated bound in the others, including where the callee's names mean other things than the
//! caller's, where scalars and dims are passed on, and where the callee's
//! contract fails (then the call is kept and fails as the interpreter
//! does). Host ops and call cycles keep their calls.
use crate::util;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, Scalar, UnaryOp};
use tc_core::{Dim, Dtype, Pred, Type};
use tc_llvm::plan::Step;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::{Error, Tensor};
use util::*;

fn calls(c: &tc_llvm::CompiledFn) -> usize {
    c.steps()
        .iter()
        .filter(|s| matches!(s, Step::Call { .. }))
        .count()
}

fn sigma(pairs: &[(&str, i64)]) -> tc_core::Sigma {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// `g(y: [A, B], s: f32) -> [A, B] = exp(y · s) + iota over axis 1`,
/// called on the caller's `[B, A]`: its `A`, `B` are the caller's `B`, `A`.
fn g_swapped() -> Function {
    let mut b = builder("g");
    let y = b.param("y", tt(Dtype::F32, &["A", "B"]));
    b.param("s", Type::Scalar(Dtype::F32));
    b.returns(tt(Dtype::F32, &["A", "B"]));
    let ys = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: y,
        s: Scalar::Param(1),
        scalar_left: false,
    });
    let e = b.op(Op::Unary(UnaryOp::Exp, ys));
    let i = b.op(Op::Iota(Dtype::F32, vec![Dim::var("A"), Dim::var("B")], 1));
    let r = b.op(Op::Binary(BinaryOp::Add, e, i));
    b.finish(r)
}

/// `f(x: [A, B], t: f32) -> [B] = sum(g(transpose(x), t), axis 1)`.
fn f_caller() -> Function {
    let mut b = builder("f");
    let x = b.param("x", tt(Dtype::F32, &["A", "B"]));
    let t = b.param("t", Type::Scalar(Dtype::F32));
    b.returns(tt(Dtype::F32, &["B"]));
    let xt = b.op(Op::Transpose(vec![1, 0], x));
    let c = b.op(Op::Call("g".into(), vec![xt, t]));
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![1],
        keepdims: false,
        x: c,
    });
    b.finish(r)
}

/// Every JIT mode against the interpreter, bit for bit (the generic mode
/// keeps the call: its structure must not depend on σ).
type Resolver<'a> = dyn Fn(&str) -> Option<&'a Function> + Sync + 'a;

fn agree(f: &Function, args: &[Arg], resolve: &Resolver) {
    let want = tc_runtime::exec::call(f, args, resolve).unwrap();
    for opts in [EXACT, DET] {
        let j = jit_with(opts);
        let got = j.call(f, args, resolve).expect("jit");
        let what = format!("{} {opts:?}", f.sig.name);
        if opts.deterministic {
            assert_bits(&what, &got, &want, false);
        } else {
            // A float sum over the last axis is in the lane order outside
            // deterministic mode (crate docs, "Numerics"): within the
            // bound there, 2·(n+2)·2⁻²⁴·Σ|terms| (about 2e-6 of the
            // result for these sums of at most 17 positive terms); an
            // inlining that mixed up names changes whole terms.
            assert_close(&what, &got, &want, 1e-5, 1e-5);
        }
        assert_eq!(j.stats().fallbacks, 0, "{:?}", j.last_fallback());
    }
    // The shape-generic kernels keep the call and sum in the same lane
    // order: the specialised kernels' bits exactly.
    let g = generic_jit().call(f, args, resolve).unwrap();
    let e = jit_with(EXACT).call(f, args, resolve).unwrap();
    assert_bits(&format!("{} generic", f.sig.name), &g, &e, false);
}

#[test]
fn callee_names_are_not_captured_by_the_caller() {
    let g = g_swapped();
    let f = f_caller();
    let resolve = |n: &str| (n == "g").then_some(&g);
    let mut rng = Rng(1);
    for (a, b) in [(3, 5), (8, 2), (1, 17)] {
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::F32, &[a, b], false).into(),
            Arg::Scalar(tc_runtime::Elem::F(0.5)),
        ];
        let s = sigma(&[("A", a as i64), ("B", b as i64)]);
        let c = tc_llvm::compile_with(&f, &s, &resolve, EXACT, false).unwrap();
        assert_eq!(calls(&c), 0, "inlined: {:?}", c.steps());
        assert_eq!(c.inlined_levels(), 1);
        agree(&f, &args, &resolve);
    }
}

/// `h(x: [N], k: Dim![K]) -> [N] requires N % 2 == 0 = x · 2`, called
/// through `p(x: [N]) = h(x, 3)` (a dim argument).
fn h_requires() -> Function {
    let mut b = builder("h");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.param("k", Type::Dim(Dim::var("K")));
    b.requires(Pred::eq(Dim::var("N").rem(&Dim::c(2)), 0));
    b.returns(tt(Dtype::F32, &["N"]));
    let r = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x,
        s: Scalar::Float(2.0),
        scalar_left: false,
    });
    b.finish(r)
}

fn p_caller() -> Function {
    let mut b = builder("p");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let k = b.op(Op::Dim(Dim::c(3)));
    let r = b.op(Op::Call("h".into(), vec![x, k]));
    b.finish(r)
}

#[test]
fn a_failing_contract_keeps_the_call_and_its_error() {
    let h = h_requires();
    let p = p_caller();
    let resolve = |n: &str| (n == "h").then_some(&h);
    // N even: inlined, same bits.
    let args: Vec<Arg> = vec![Tensor::from_vec(&[4], vec![1f32, -2.0, 3.5, 0.0])
        .unwrap()
        .into()];
    let c = tc_llvm::compile_with(&p, &sigma(&[("N", 4)]), &resolve, EXACT, false).unwrap();
    assert_eq!(calls(&c), 0, "{:?}", c.steps());
    agree(&p, &args, &resolve);
    // N odd: `h`'s `requires` fails; the call is kept, and the JIT's error
    // is the interpreter's.
    let args: Vec<Arg> = vec![Tensor::from_vec(&[3], vec![1f32, 2.0, 3.0]).unwrap().into()];
    let c = tc_llvm::compile_with(&p, &sigma(&[("N", 3)]), &resolve, EXACT, false).unwrap();
    assert_eq!(calls(&c), 1, "{:?}", c.steps());
    let want = tc_runtime::exec::call(&p, &args, &resolve).unwrap_err();
    let got = jit_with(EXACT).call(&p, &args, &resolve).unwrap_err();
    assert_eq!(got, want);
    assert!(matches!(want, Error::Predicate { .. }), "{want}");
}

/// A callee with a `gather` (its ids are checked at run time, in the
/// callee's name) stays a call; the rest of the caller still fuses.
#[test]
fn a_callee_with_a_gather_stays_a_call() {
    let mut b = builder("lookup");
    let t = b.param("t", tt(Dtype::F32, &["V", "D"]));
    let ids = b.param("ids", tt(Dtype::I64, &["S"]));
    b.returns(tt(Dtype::F32, &["S", "D"]));
    let r = b.op(Op::Gather {
        axis: 0,
        table: t,
        ids,
    });
    let lookup = b.finish(r);
    let mut b = builder("embed");
    let t = b.param("t", tt(Dtype::F32, &["V", "D"]));
    let ids = b.param("ids", tt(Dtype::I64, &["S"]));
    b.returns(tt(Dtype::F32, &["S", "D"]));
    let c = b.op(Op::Call("lookup".into(), vec![t, ids]));
    let r = b.op(Op::Unary(UnaryOp::Neg, c));
    let embed = b.finish(r);
    let resolve = |n: &str| (n == "lookup").then_some(&lookup);
    let table = random(&mut Rng(4), Dtype::F32, &[5, 3], false);
    let good: Vec<Arg> = vec![
        table.clone().into(),
        Tensor::from_vec(&[2], vec![4i64, 0]).unwrap().into(),
    ];
    let s = sigma(&[("V", 5), ("D", 3), ("S", 2)]);
    let c = tc_llvm::compile_with(&embed, &s, &resolve, EXACT, false).unwrap();
    assert_eq!(calls(&c), 1, "{:?}", c.steps());
    agree(&embed, &good, &resolve);
    let bad: Vec<Arg> = vec![
        table.into(),
        Tensor::from_vec(&[2], vec![5i64, 0]).unwrap().into(),
    ];
    let want = tc_runtime::exec::call(&embed, &bad, &resolve).unwrap_err();
    assert_eq!(
        jit_with(EXACT).call(&embed, &bad, &resolve).unwrap_err(),
        want
    );
}

/// Two levels: `outer → mid → leaf`, all spliced into `outer` (levels 2);
/// run 63 calls deep it would pass the interpreter's depth limit, so the
/// cache runs the interpreter there and fails as it does.
#[test]
fn nested_callees_splice_and_respect_the_depth_limit() {
    let leaf = {
        let mut b = builder("leaf");
        let x = b.param("x", tt(Dtype::F32, &["N"]));
        b.returns(tt(Dtype::F32, &["N"]));
        let r = b.op(Op::Unary(UnaryOp::Tanh, x));
        b.finish(r)
    };
    let mid = {
        let mut b = builder("mid");
        let x = b.param("x", tt(Dtype::F32, &["M"]));
        b.returns(tt(Dtype::F32, &["M"]));
        let c = b.op(Op::Call("leaf".into(), vec![x]));
        let r = b.op(Op::Binary(BinaryOp::Mul, c, x));
        b.finish(r)
    };
    let outer = {
        let mut b = builder("outer");
        let x = b.param("x", tt(Dtype::F32, &["N"]));
        b.returns(tt(Dtype::F32, &["N"]));
        let c = b.op(Op::Call("mid".into(), vec![x]));
        let r = b.op(Op::Unary(UnaryOp::Neg, c));
        b.finish(r)
    };
    let fns = [leaf, mid, outer];
    let resolve = |n: &str| fns.iter().find(|f| f.sig.name == n);
    let args: Vec<Arg> = vec![random(&mut Rng(9), Dtype::F32, &[33], true).into()];
    let c = tc_llvm::compile_with(&fns[2], &sigma(&[("N", 33)]), &resolve, EXACT, false).unwrap();
    assert_eq!((calls(&c), c.inlined_levels()), (0, 2), "{:?}", c.steps());
    agree(&fns[2], &args, &resolve);
    // A chain of forwarding functions ending in `outer`, 62 deep: `outer`
    // runs 62 calls deep, its body stands for calls 63 and 64 deep.
    let mut chain: Vec<Function> = (0..62)
        .map(|i| {
            let mut b = builder(&format!("c{i}"));
            let x = b.param("x", tt(Dtype::F32, &["N"]));
            b.returns(tt(Dtype::F32, &["N"]));
            let next = if i == 61 {
                "outer".to_string()
            } else {
                format!("c{}", i + 1)
            };
            let r = b.op(Op::Call(next, vec![x]));
            b.finish(r)
        })
        .collect();
    chain.extend(fns.iter().cloned());
    let resolve = |n: &str| chain.iter().find(|f| f.sig.name == n);
    let want = tc_runtime::exec::call(&chain[0], &args, &resolve);
    let j = jit_with(EXACT);
    let got = j.call(&chain[0], &args, &resolve);
    assert_eq!(got, want);
    assert!(matches!(want, Err(Error::CallDepth { .. })), "{want:?}");
}

/// A call cycle is never spliced (its bodies are never call-free): the
/// depth error is the interpreter's.
#[test]
fn call_cycles_are_not_spliced() {
    let mut b = builder("r");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let c = b.op(Op::Call("r".into(), vec![x]));
    let r = b.op(Op::Unary(UnaryOp::Relu, c));
    let rec = b.finish(r);
    let resolve = |n: &str| (n == "r").then_some(&rec);
    let args: Vec<Arg> = vec![Tensor::from_vec(&[2], vec![1f32, -1.0]).unwrap().into()];
    let c = tc_llvm::compile_with(&rec, &sigma(&[("N", 2)]), &resolve, EXACT, false).unwrap();
    assert_eq!((calls(&c), c.inlined_levels()), (1, 0));
    let want = tc_runtime::exec::call(&rec, &args, &resolve).unwrap_err();
    assert_eq!(
        jit_with(JitOptions::default())
            .call(&rec, &args, &resolve)
            .unwrap_err(),
        want
    );
}
