//! Soundness of the JIT path against hostile but safe inputs (issue 10,
//! items 1–4): kernel-cache identity across modules whose callees differ,
//! a callee whose result contradicts the caller's plan, sizes over the
//! element cap, empty tensors with huge dims, and call cycles. Every case
//! runs on the interpreter and on every JIT mode, and the two must agree
//! (same value, or the same typed error).
use crate::util;

use tc_core::concrete::RuleError;
use tc_core::ir::{Function, Op, ReduceOp, UnaryOp};
use tc_core::{Dim, Dtype};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::interp::MAX_CALL_DEPTH;
use tc_runtime::{Error, Tensor};
use util::*;

/// The JIT configurations every case runs under.
fn modes() -> Vec<(&'static str, CacheConfig)> {
    let with = |options: JitOptions, specialize_after: u32| CacheConfig {
        capacity: 64,
        specialize_after,
        options,
    };
    let d = JitOptions::default();
    vec![
        ("default", with(d, 1)),
        (
            "deterministic",
            with(
                JitOptions {
                    deterministic: true,
                    ..d
                },
                1,
            ),
        ),
        (
            "exact math",
            with(
                JitOptions {
                    fast_math: false,
                    ..d
                },
                1,
            ),
        ),
        ("threads=1", with(JitOptions { threads: 1, ..d }, 1)),
        ("generic", with(d, 2)),
    ]
}

type Resolver<'a> = dyn Fn(&str) -> Option<&'a Function> + Sync + 'a;

/// Interpreter and every JIT mode on the same call: results bit-identical,
/// or the same error. Returns the interpreter's answer.
fn agree(f: &Function, args: &[Arg], resolve: &Resolver) -> Result<Tensor, Error> {
    let want = tc_runtime::exec::call(f, args, resolve);
    for (mode, cfg) in modes() {
        let jit = Jit::new(cfg);
        // Twice: the generic mode runs the shape-generic kernels first.
        for round in 0..2 {
            let got = jit.call(f, args, resolve);
            let what = format!("`{}` {mode} round {round}", f.sig.name);
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_bits(&what, g, w, false),
                _ => assert_eq!(got, want, "{what}"),
            }
        }
    }
    want
}

// ---------------------------------------------------------------------------
// Item 1: cache identity.

/// `g(x: [N]) -> [2·N] = concat(x, x)` or `g(x: [N]) -> [N] = -x`.
fn g(double: bool) -> Function {
    let mut b = builder("g");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    if double {
        b.returns(Type::tensor(Dtype::F32, vec![Dim::c(2) * Dim::var("N")]));
        let r = b.op(Op::Concat(0, vec![x, x]));
        b.finish(r)
    } else {
        b.returns(tt(Dtype::F32, &["N"]));
        let r = b.op(Op::Unary(UnaryOp::Neg, x));
        b.finish(r)
    }
}

use tc_core::Type;

/// [`g`] through a `topk` of all of `x` (the same values, sorted): a host
/// op, so the call is never inlined.
fn g_kept(double: bool) -> Function {
    let mut b = builder("g");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    let t = b.op(Op::TopK {
        k: Dim::var("N"),
        axis: 0,
        indices: false,
        x,
    });
    if double {
        b.returns(Type::tensor(Dtype::F32, vec![Dim::c(2) * Dim::var("N")]));
        let r = b.op(Op::Concat(0, vec![t, t]));
        b.finish(r)
    } else {
        b.returns(tt(Dtype::F32, &["N"]));
        let r = b.op(Op::Unary(UnaryOp::Neg, t));
        b.finish(r)
    }
}

/// `f(x: [N]) -> [] = sum(abs(g(x)), [0])`: the same text whichever `g`
/// the module has (2·N or N on ones).
fn f_calling_g() -> Function {
    let mut b = builder("f");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(Type::tensor(Dtype::F32, vec![]));
    let y = b.op(Op::Call("g".into(), vec![x]));
    let e = b.op(Op::Unary(UnaryOp::Abs, y));
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0],
        keepdims: false,
        x: e,
    });
    b.finish(r)
}

fn ones(n: usize) -> Vec<Arg> {
    vec![Tensor::from_vec(&[n], vec![1f32; n]).unwrap().into()]
}

#[test]
fn identical_callers_of_different_callees_do_not_share_kernels() {
    let (g2, g1) = (g(true), g(false));
    let res_a = |n: &str| (n == "g").then_some(&g2);
    let res_b = |n: &str| (n == "g").then_some(&g1);
    // Two textually identical `f`s (two modules), and one `f` object used
    // with both resolvers (the by-address memo must notice the callee).
    let (fa, fb) = (f_calling_g(), f_calling_g());
    for n in [1usize, 1 << 16] {
        let args = ones(n);
        let want_a = tc_runtime::exec::call(&fa, &args, &res_a).unwrap();
        let want_b = tc_runtime::exec::call(&fb, &args, &res_b).unwrap();
        assert_ne!(want_a, want_b);
        for (mode, cfg) in modes() {
            let orders: [[(&Function, &Resolver, &Tensor); 2]; 4] = [
                [(&fa, &res_a, &want_a), (&fb, &res_b, &want_b)],
                [(&fb, &res_b, &want_b), (&fa, &res_a, &want_a)],
                [(&fa, &res_a, &want_a), (&fa, &res_b, &want_b)],
                [(&fa, &res_b, &want_b), (&fa, &res_a, &want_a)],
            ];
            for (o, order) in orders.iter().enumerate() {
                let jit = Jit::new(cfg);
                for round in 0..3 {
                    for (f, res, want) in order {
                        let got = jit.call(f, &args, *res).unwrap();
                        let what = format!("n={n} {mode} order {o} round {round}");
                        assert_bits(&what, &got, want, false);
                    }
                }
                assert_eq!(jit.stats().fallbacks, 0, "{:?}", jit.last_fallback());
            }
        }
    }
}

#[test]
fn static_callers_of_different_callees_do_not_share_kernels() {
    let leak = |f: Function| -> &'static Function { Box::leak(Box::new(f)) };
    let (g2, g1) = (leak(g(true)), leak(g(false)));
    let (fa, fb) = (leak(f_calling_g()), leak(f_calling_g()));
    let res_a = move |n: &str| (n == "g").then_some(g2);
    let res_b = move |n: &str| (n == "g").then_some(g1);
    let args = ones(1000);
    let want_a = tc_runtime::exec::call(fa, &args, &res_a).unwrap();
    let want_b = tc_runtime::exec::call(fb, &args, &res_b).unwrap();
    let jit = Jit::new(modes()[0].1);
    for _ in 0..3 {
        assert_bits(
            "a",
            &jit.call_static(fa, &args, &res_a).unwrap(),
            &want_a,
            false,
        );
        assert_bits(
            "b",
            &jit.call_static(fb, &args, &res_b).unwrap(),
            &want_b,
            false,
        );
        // The same static `f` with the other module's resolver.
        assert_bits(
            "a/b",
            &jit.call_static(fa, &args, &res_b).unwrap(),
            &want_b,
            false,
        );
    }
    let s = jit.stats();
    // One compilation per (computation, σ): f with g2, f with g1 (each `g`
    // is inlined into its `f`, so neither is compiled on its own).
    assert_eq!(s.compiles, 2, "{s:?}");
    assert!(s.hits >= 7, "{s:?}");
}

#[test]
fn a_callee_result_that_contradicts_the_plan_is_a_typed_error() {
    let (g2, g1) = (g(true), g(false));
    let f = f_calling_g();
    let args = ones(8);
    let bound = tc_runtime::contract::bind_args(&f.sig, &args).unwrap();
    // σ-specialised, `g` is inlined: run with another `g`, it refuses.
    let inlined = tc_llvm::compile_with(
        &f,
        &bound.sigma,
        &|n: &str| (n == "g").then_some(&g2),
        JitOptions::default(),
        false,
    )
    .unwrap();
    assert_eq!(inlined.inlined_levels(), 1);
    let e = inlined
        .run_with(&args, &|n: &str| (n == "g").then_some(&g1))
        .unwrap_err();
    assert!(e.to_string().contains("`g` inlined"), "{e}");
    // A `g` that stays a call (a `topk`, a host op, is never inlined),
    // planned against the one returning [2N], run where `g` returns [N].
    let (k2, k1) = (g_kept(true), g_kept(false));
    let compiled = tc_llvm::compile_with(
        &f,
        &bound.sigma,
        &|n: &str| (n == "g").then_some(&k2),
        JitOptions::default(),
        false,
    )
    .unwrap();
    assert_eq!(compiled.inlined_levels(), 0);
    let e = compiled
        .run_with(&args, &|n: &str| (n == "g").then_some(&k1))
        .unwrap_err();
    assert_eq!(
        e,
        Error::CallResult {
            callee: "g".into(),
            expected_dtype: Dtype::F32,
            expected_shape: vec![16],
            found_dtype: Dtype::F32,
            found_shape: vec![8],
        }
    );
    assert!(e.to_string().contains("`g`"), "{e}");
    // With the resolver it was planned for, it runs.
    let ok = compiled
        .run_with(&args, &|n: &str| (n == "g").then_some(&k2))
        .unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![16.0]);
    let ok = inlined
        .run_with(&args, &|n: &str| (n == "g").then_some(&g2))
        .unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![16.0]);
}

#[test]
fn a_resolver_that_changes_its_answer_mid_call_never_gives_a_wrong_buffer() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (g2, g1) = (g(true), g(false));
    let f = f_calling_g();
    let n = 64usize;
    let args = ones(n);
    let mut caught = 0;
    // The resolver answers the [2N] `g` for its first `k` lookups, then the
    // [N] one: wherever the switch falls (fingerprint, plan, run), the call
    // gives a consistent answer or the typed error.
    for k in 0..8 {
        for (mode, cfg) in modes() {
            let count = AtomicUsize::new(0);
            let resolve = |name: &str| {
                (name == "g").then(|| {
                    if count.fetch_add(1, Ordering::SeqCst) < k {
                        &g2
                    } else {
                        &g1
                    }
                })
            };
            match Jit::new(cfg).call(&f, &args, &resolve) {
                Ok(t) => {
                    let v = t.to_vec::<f32>().unwrap()[0];
                    assert!(v == n as f32 || v == 2.0 * n as f32, "k={k} {mode}: {v}");
                }
                Err(Error::CallResult { callee, .. }) => {
                    assert_eq!(callee, "g");
                    caught += 1;
                }
                Err(e) => panic!("k={k} {mode}: {e}"),
            }
        }
    }
    assert!(caught > 0, "no switch point fell between plan and run");
}

// ---------------------------------------------------------------------------
// Item 2: sizes over the cap.

/// `f(x: [1], n: [N]) = broadcast(x, [N; rank])`, optionally summed.
fn broadcast_fn(rank: usize, summed: bool) -> Function {
    let mut b = builder("big");
    let x = b.param("x", tt(Dtype::F32, &["1"]));
    let _n = b.param("n", tt(Dtype::I8, &["N"]));
    let dims = vec![Dim::var("N"); rank];
    if summed {
        b.returns(Type::tensor(Dtype::F32, vec![]));
    } else {
        b.returns(Type::tensor(Dtype::F32, dims.clone()));
    }
    let y = b.op(Op::Broadcast(dims, x));
    if !summed {
        return b.finish(y);
    }
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: (0..rank).collect(),
        keepdims: false,
        x: y,
    });
    b.finish(r)
}

#[test]
fn shapes_over_the_element_cap_are_a_typed_error_in_both_backends() {
    // 65536^4 wraps the element count to 0; (2^21)^3 f32 wraps the byte
    // count; 32768^4 f32 is a 4 EiB allocation.
    for (n, rank) in [(65536usize, 4usize), (1 << 21, 3), (32768, 4)] {
        for summed in [false, true] {
            let f = broadcast_fn(rank, summed);
            let args: Vec<Arg> = vec![
                Tensor::from_vec(&[1], vec![1f32]).unwrap().into(),
                Tensor::zeros(Dtype::I8, &[n]).into(),
            ];
            let e = agree(&f, &args, &|_| None).unwrap_err();
            match &e {
                Error::Rule(RuleError::Size(s)) => {
                    assert_eq!(s.cap, tc_core::size::MAX_ELEMS, "{e}")
                }
                other => panic!("N={n} rank {rank}: expected a size error, got {other}"),
            }
        }
    }
}

#[test]
fn generic_kernels_refuse_a_later_sigma_over_the_cap() {
    let f = broadcast_fn(4, true);
    let jit = Jit::new(modes()[4].1);
    let arg = |n: usize| -> Vec<Arg> {
        vec![
            Tensor::from_vec(&[1], vec![2f32]).unwrap().into(),
            Tensor::zeros(Dtype::I8, &[n]).into(),
        ]
    };
    let small = jit.call(&f, &arg(3), &|_| None).unwrap();
    assert_eq!(small.to_vec::<f32>().unwrap(), vec![162.0]);
    assert_eq!(jit.stats().generic_compiles, 1);
    let e = jit.call(&f, &arg(65536), &|_| None).unwrap_err();
    assert!(matches!(e, Error::Rule(RuleError::Size(_))), "{e}");
    // A σ over the cap planned first does not poison the generic kernels.
    let jit = Jit::new(modes()[4].1);
    assert!(jit.call(&f, &arg(65536), &|_| None).is_err());
    let small = jit.call(&f, &arg(3), &|_| None).unwrap();
    assert_eq!(small.to_vec::<f32>().unwrap(), vec![162.0]);
    assert_eq!(jit.stats().generic_compiles, 1, "{:?}", jit.stats());
}

#[test]
fn tensors_over_the_cap_cannot_be_built() {
    let e = Tensor::try_zeros(Dtype::F32, &[65536; 4]).unwrap_err();
    assert!(matches!(e, Error::Rule(RuleError::Size(_))), "{e}");
    assert!(Tensor::try_zeros(Dtype::I4, &[(1 << 31) + 1]).is_err());
    assert_eq!(Tensor::zeros(Dtype::F32, &[1 << 40, 0]).bytes().len(), 0);
    assert_eq!(Tensor::zeros(Dtype::F32, &[0, 1 << 62]).numel(), 0);
}

// ---------------------------------------------------------------------------
// Item 3: empty inputs with huge dims.

/// `f(x: [A, B]) = op(x)` with `A, B ≥ 0`.
fn on_empty(name: &str, ret: &[&str], op: impl FnOnce(tc_core::ir::Value) -> Op) -> Function {
    on_empty_to(name, tt(Dtype::F32, ret), op)
}

fn on_empty_to(name: &str, ret: Type, op: impl FnOnce(tc_core::ir::Value) -> Op) -> Function {
    let mut b = builder(name);
    let x = b.param("x", tt(Dtype::F32, &["A", "B"]));
    b.returns(ret);
    let r = b.op(op(x));
    let mut f = b.finish(r);
    for v in &mut f.sig.vars {
        v.allow_zero = true;
    }
    f
}

fn sum_over(axis: usize) -> impl FnOnce(tc_core::ir::Value) -> Op {
    move |x| Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![axis],
        keepdims: false,
        x,
    }
}

#[test]
fn concatenated_dims_past_i64_are_refused_by_both_backends() {
    let ret = Type::tensor(Dtype::F32, vec![Dim::c(3) * Dim::var("A"), Dim::var("B")]);
    let f = on_empty_to("cat3", ret, |x| Op::Concat(0, vec![x, x, x]));
    let args: Vec<Arg> = vec![Tensor::zeros(Dtype::F32, &[1 << 62, 0]).into()];
    let e = agree(&f, &args, &|_| None).unwrap_err();
    assert!(
        matches!(&e, Error::Rule(RuleError::Op { op, .. }) if op == "concat"),
        "{e}"
    );
}

#[test]
fn empty_inputs_with_huge_dims() {
    let cases: Vec<(Vec<usize>, Function, bool)> = vec![
        // A result over the cap is an error, even from an empty input.
        (
            vec![1 << 40, 0],
            on_empty("sum1", &["A"], sum_over(1)),
            false,
        ),
        (
            vec![0, 1 << 62],
            on_empty("sum0", &["B"], sum_over(0)),
            false,
        ),
        // An empty result is fine, whatever its other dims.
        (
            vec![1 << 40, 0],
            on_empty("sum0e", &["B"], sum_over(0)),
            true,
        ),
        (
            vec![0, 1 << 62],
            on_empty("sum1e", &["A"], sum_over(1)),
            true,
        ),
        (
            vec![1 << 40, 0],
            on_empty("relu", &["A", "B"], |x| Op::Unary(UnaryOp::Relu, x)),
            true,
        ),
        (
            vec![0, 1 << 62],
            on_empty("t", &["B", "A"], |x| Op::Transpose(vec![1, 0], x)),
            true,
        ),
        // A small result from an empty reduced axis: zeros.
        (vec![5, 0], on_empty("sum1s", &["A"], sum_over(1)), true),
        // Concatenated empty operands: a dim up to i64::MAX is fine.
        (
            vec![1 << 61, 0],
            on_empty_to(
                "cat",
                Type::tensor(Dtype::F32, vec![Dim::c(2) * Dim::var("A"), Dim::var("B")]),
                |x| Op::Concat(0, vec![x, x]),
            ),
            true,
        ),
    ];
    for (shape, f, ok) in cases {
        let args: Vec<Arg> = vec![Tensor::zeros(Dtype::F32, &shape).into()];
        let r = agree(&f, &args, &|_| None);
        let what = format!("`{}` on {shape:?}", f.sig.name);
        if ok {
            let t = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(t.numel() <= 5, "{what}");
        } else {
            assert!(
                matches!(r, Err(Error::Rule(RuleError::Size(_)))),
                "{what}: {r:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Item 4: call cycles and deep chains.

/// `name(x: [N]) -> [N] = callee(x)`.
fn forward(name: &str, callee: &str) -> Function {
    let mut b = builder(name);
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let r = b.op(Op::Call(callee.into(), vec![x]));
    b.finish(r)
}

/// `name(x: [N]) -> [N] = relu(x)` (the built-in).
fn leaf(name: &str) -> Function {
    let mut b = builder(name);
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let r = b.op(Op::Unary(UnaryOp::Relu, x));
    b.finish(r)
}

fn run_module(fns: &[Function], entry: &str) -> Result<Tensor, Error> {
    let resolve = |n: &str| fns.iter().find(|f| f.sig.name == n);
    let args: Vec<Arg> = vec![Tensor::from_vec(&[3], vec![-1f32, 0.0, 2.0])
        .unwrap()
        .into()];
    agree(resolve(entry).unwrap(), &args, &resolve)
}

#[test]
fn call_cycles_stop_at_the_interpreter_depth_with_its_error() {
    // f → g → f, and a module fn named like the built-in calling itself.
    let cycle = [forward("f", "g"), forward("g", "f")];
    let e = run_module(&cycle, "f").unwrap_err();
    assert!(
        matches!(&e, Error::CallDepth { max, .. } if *max == MAX_CALL_DEPTH),
        "{e}"
    );
    let e = run_module(&[forward("relu", "relu")], "relu").unwrap_err();
    assert_eq!(
        e,
        Error::CallDepth {
            callee: "relu".into(),
            max: MAX_CALL_DEPTH
        }
    );
    // The same through `call_static` (the path `#[tensor_module]` code takes).
    let f: &'static Function = Box::leak(Box::new(forward("relu", "relu")));
    let resolve = move |n: &str| (n == "relu").then_some(f);
    let args: Vec<Arg> = vec![Tensor::from_vec(&[1], vec![1f32]).unwrap().into()];
    assert_eq!(tc_llvm::call_static(f, &args, &resolve).unwrap_err(), e);
}

#[test]
fn call_chains_run_up_to_the_depth_limit_and_stop_beyond() {
    let chain = |len: usize| -> Vec<Function> {
        let mut fns: Vec<Function> = (0..len - 1)
            .map(|i| forward(&format!("f{i}"), &format!("f{}", i + 1)))
            .collect();
        fns.push(leaf(&format!("f{}", len - 1)));
        fns
    };
    // `f0` at depth 0 calls down to depth len − 1.
    let ok = run_module(&chain(MAX_CALL_DEPTH), "f0").unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 2.0]);
    let e = run_module(&chain(MAX_CALL_DEPTH + 1), "f0").unwrap_err();
    assert_eq!(
        e,
        Error::CallDepth {
            callee: format!("f{}", MAX_CALL_DEPTH),
            max: MAX_CALL_DEPTH
        }
    );
}

#[test]
fn fingerprints_are_structural_and_cover_callees() {
    use tc_llvm::cache::{fingerprint, fingerprint_with};
    let (g2, g1) = (g(true), g(false));
    let f = f_calling_g();
    // Spans do not matter; ops, literals and callees do.
    let mut moved = f.clone();
    moved.body[0].span = tc_core::SpanId(999);
    assert_eq!(fingerprint(&f), fingerprint(&moved));
    let (a, ca) = fingerprint_with(&f, &|n: &str| (n == "g").then_some(&g2));
    let (b, cb) = fingerprint_with(&f, &|n: &str| (n == "g").then_some(&g1));
    assert_ne!(a, b);
    assert_eq!((ca.len(), cb.len()), (1, 1));
    assert_ne!(a, fingerprint(&f));
    // A cycle is covered once per name.
    let cycle = [forward("f", "g"), forward("g", "f")];
    let (_, c) = fingerprint_with(&cycle[0], &|n: &str| cycle.iter().find(|f| f.sig.name == n));
    let names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["g", "f"]);
    let fill = |x: f64| {
        let mut b = builder("fill");
        b.returns(tt(Dtype::F32, &["2"]));
        let r = b.op(Op::Fill(
            Dtype::F32,
            vec![Dim::c(2)],
            tc_core::ir::Scalar::Float(x),
        ));
        b.finish(r)
    };
    assert_ne!(fingerprint(&fill(0.0)), fingerprint(&fill(-0.0)));
}

/// The family behind items 2 and 3: random shapes mixing 0, small and huge
/// dims through reductions, broadcasts, transposes and elementwise ops.
/// Whatever the sizes, both backends give the same value or the same typed
/// error (never a wrapped count, an abort or a hang).
#[test]
fn random_shapes_with_zero_and_huge_dims_agree() {
    // Just over the cap, and far over it; no dim that makes a legal result
    // of gigabytes (a result within the cap is allocated by both backends).
    const POOL: [usize; 8] = [0, 1, 3, 1 << 16, 1 << 21, (1 << 31) + 1, 1 << 40, 1 << 62];
    let mut rng = Rng(0x5EED_0010);
    let mut pick = |n: u64| (rng.next() % n) as usize;
    let vars = ["A", "B", "C"];
    for case in 0..32 {
        // An input that can exist: a 0 dim, or small dims only.
        let mut shape: Vec<usize> = (0..3).map(|_| POOL[pick(8)]).collect();
        if !shape.contains(&0) && shape.iter().any(|&d| d > 3) {
            shape[pick(3)] = 0;
        }
        let mut b = builder(&format!("case{case}"));
        let x = b.param("x", tt(Dtype::F32, &vars));
        let d = POOL[1 + pick(4)];
        let _n = b.param("n", tt(Dtype::I8, &["D"]));
        let (op, ret): (Op, Vec<&str>) = match pick(5) {
            0 | 1 => {
                // Reducing the empty axes (and maybe others) leaves the
                // huge ones: a result over the cap from an empty input.
                let axes: Vec<usize> = (0..3).filter(|&i| shape[i] == 0 || pick(3) == 0).collect();
                let axes = if axes.is_empty() { vec![pick(3)] } else { axes };
                let keepdims = pick(2) == 0;
                let kept = (0..3)
                    .filter(|i| keepdims || !axes.contains(i))
                    .map(|i| if axes.contains(&i) { "1" } else { vars[i] })
                    .collect();
                let op = if pick(3) == 0 {
                    ReduceOp::Max
                } else {
                    ReduceOp::Sum
                };
                (
                    Op::Reduce {
                        op,
                        axes,
                        keepdims,
                        x,
                    },
                    kept,
                )
            }
            2 => {
                let to = vec![Dim::var("D"), Dim::var("A"), Dim::var("B"), Dim::var("C")];
                (Op::Broadcast(to, x), vec!["D", "A", "B", "C"])
            }
            3 => (Op::Transpose(vec![2, 0, 1], x), vec!["C", "A", "B"]),
            _ => (Op::Unary(UnaryOp::Neg, x), vars.to_vec()),
        };
        b.returns(tt(Dtype::F32, &ret));
        let r = b.op(op);
        let mut f = b.finish(r);
        for v in &mut f.sig.vars {
            v.allow_zero = true;
        }
        let args: Vec<Arg> = vec![
            Tensor::zeros(Dtype::F32, &shape).into(),
            Tensor::zeros(Dtype::I8, &[d]).into(),
        ];
        // `agree` asserts both backends match; any outcome is otherwise fine,
        // but a result must be within the cap.
        if let Ok(t) = agree(&f, &args, &|_| None) {
            assert!(t.numel() <= tc_core::size::MAX_ELEMS, "case {case}");
        }
    }
}

/// Kernels compiled under other options are not reused after
/// `set_config` (the options are part of the key).
#[test]
fn options_are_part_of_the_key() {
    let f = leaf("leaf");
    let args: Vec<Arg> = vec![Tensor::from_vec(&[2], vec![-1f32, 1.0]).unwrap().into()];
    let jit = Jit::new(modes()[0].1);
    jit.call(&f, &args, &|_| None).unwrap();
    jit.call(&f, &args, &|_| None).unwrap();
    assert_eq!((jit.stats().compiles, jit.stats().hits), (1, 1));
    jit.set_config(modes()[1].1);
    jit.call(&f, &args, &|_| None).unwrap();
    assert_eq!(jit.stats().compiles, 2, "{:?}", jit.stats());
    jit.set_config(modes()[0].1);
    jit.call(&f, &args, &|_| None).unwrap();
    assert_eq!((jit.stats().compiles, jit.stats().hits), (2, 2));
}

// ---------------------------------------------------------------------------
// A call's result dtype comes from the callee's signature (found by the
// fuzzer): the planner took every call result for f32 and let a strided
// view of an f16 call result reach the f32-only strided matmul, an error
// where the interpreter succeeds.

/// `f(x: f16 [N, N]) = y · yᵀ` with `y = g16(x) = -x`.
#[test]
fn matmul_of_a_narrow_call_result_and_its_transpose() {
    let mut g = builder("g16");
    let x = g.param("x", tt(Dtype::F16, &["N", "N"]));
    g.returns(tt(Dtype::F16, &["N", "N"]));
    let r = g.op(Op::Unary(UnaryOp::Neg, x));
    let g = g.finish(r);
    let mut b = builder("f");
    let x = b.param("x", tt(Dtype::F16, &["N", "N"]));
    b.returns(tt(Dtype::F16, &["N", "N"]));
    let y = b.op(Op::Call("g16".into(), vec![x]));
    let t = b.op(Op::Transpose(vec![1, 0], y));
    let r = b.op(Op::Matmul(y, t));
    let f = b.finish(r);
    let resolve = |n: &str| (n == "g16").then_some(&g);
    // Small integers: every product and sum is exact, so the backends agree
    // bit for bit whatever the summation order.
    let vals: Vec<f32> = (0..16).map(|i| (i % 3) as f32).collect();
    let x = Tensor::from_vec(&[4, 4], vals)
        .unwrap()
        .cast(Dtype::F16)
        .unwrap();
    let out = agree(&f, &[x.into()], &resolve).expect("runs on the interpreter");
    assert_eq!(out.dtype(), Dtype::F16);
}

// ---------------------------------------------------------------------------
// A value within the element cap but beyond the memory available.

const OOM_CHILD: &str = "TC_JIT_OOM_CHILD";

/// `broadcast(x, [N, N])` at N = 2^15 is 2^30 f32 (4 GiB; the interpreter's
/// decoded elements 16 GiB): within the element cap, so only the allocator
/// can refuse it. In a child whose address space is capped at 3 GiB both
/// backends must return `OutOfMemory`, not abort the process.
#[test]
fn a_value_the_machine_cannot_hold_is_out_of_memory_in_both_backends() {
    if std::env::var_os(OOM_CHILD).is_some() {
        oom_child();
        return;
    }
    // This test's name as the harness lists it: its module path without
    // the crate (the test binary holds several files, one module each).
    let path = concat!(
        module_path!(),
        "::a_value_the_machine_cannot_hold_is_out_of_memory_in_both_backends"
    );
    let name = path.split_once("::").map_or(path, |(_, name)| name);
    let out = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(OOM_CHILD, "1")
        .output()
        .expect("spawn the child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert_eq!(text.matches("OOM ok").count(), 1 + modes().len(), "{text}");
}

fn oom_child() {
    const CAP: u64 = 3 << 30;
    let lim = libc::rlimit {
        rlim_cur: CAP,
        rlim_max: CAP,
    };
    // SAFETY: `lim` is a valid rlimit alive across the call; it lowers this
    // (child) process's own limit only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
    let f = broadcast_fn(2, false);
    let args: Vec<Arg> = vec![
        Tensor::from_vec(&[1], vec![1f32]).unwrap().into(),
        Tensor::zeros(Dtype::I8, &[1 << 15]).into(),
    ];
    let check = |who: &str, r: Result<Tensor, Error>| match r {
        Err(Error::OutOfMemory { bytes }) if bytes >= 4 << 30 => println!("OOM ok: {who}"),
        Err(e) => panic!("{who}: expected OutOfMemory, got {e}"),
        Ok(_) => panic!("{who}: a 4 GiB result under a 3 GiB address space"),
    };
    check("interpreter", tc_runtime::exec::call(&f, &args, &|_| None));
    for (mode, cfg) in modes() {
        check(mode, Jit::new(cfg).call(&f, &args, &|_| None));
    }
}
