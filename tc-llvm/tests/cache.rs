//! The kernel cache: concurrency (≥ 16 threads, mixed σ, one compilation per
//! σ), LRU eviction, statistics, the shape-generic path and the explicit
//! interpreter fallback.
use crate::util;

use std::sync::Arc;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, UnaryOp};
use tc_core::{Dim, Dtype};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;
use util::*;

fn f() -> Function {
    let mut b = builder("cached");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    let y = b.param("y", tt(Dtype::F32, &["C"]));
    b.returns(tt(Dtype::F32, &["R"]));
    let yb = b.op(Op::Broadcast(vec![Dim::var("R"), Dim::var("C")], y));
    let p = b.op(Op::Binary(BinaryOp::Mul, x, yb));
    let t = b.op(Op::Unary(UnaryOp::Tanh, p));
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![1],
        keepdims: false,
        x: t,
    });
    b.finish(r)
}

fn case(seed: u64, r: usize, c: usize) -> (Vec<Arg>, Tensor) {
    let mut rng = Rng(seed);
    let args: Vec<Arg> = vec![
        random(&mut rng, Dtype::F32, &[r, c], false).into(),
        random(&mut rng, Dtype::F32, &[c], false).into(),
    ];
    let want = interp(&f(), &args).unwrap();
    (args, want)
}

#[test]
fn sixteen_threads_mixed_sigma_compile_once_per_sigma() {
    let jit = Arc::new(Jit::new(CacheConfig {
        capacity: 64,
        specialize_after: 1,
        options: JitOptions::default(),
    }));
    let func = Arc::new(f());
    let shapes = [(3usize, 5usize), (4, 9), (17, 2), (1, 64), (8, 8)];
    let cases: Arc<Vec<_>> = Arc::new(
        shapes
            .iter()
            .enumerate()
            .map(|(i, &(r, c))| case(i as u64 + 1, r, c))
            .collect(),
    );
    let barrier = Arc::new(std::sync::Barrier::new(20));
    let hs: Vec<_> = (0..20)
        .map(|t| {
            let (jit, func, cases, barrier) =
                (jit.clone(), func.clone(), cases.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..15 {
                    let (args, want) = &cases[(t + i) % cases.len()];
                    let got = jit.call(&func, args, &|_| None).unwrap();
                    assert_close("cached", &got, want, 1e-5, 1e-5);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let s = jit.stats();
    assert_eq!(s.compiles, shapes.len() as u64, "{s:?}");
    assert_eq!(s.misses, shapes.len() as u64, "{s:?}");
    assert_eq!(s.hits + s.misses, 300, "{s:?}");
    assert_eq!(s.fallbacks, 0);
    assert_eq!(s.evictions, 0);
    assert!(s.compile_ms > 0.0);
}

#[test]
fn lru_eviction() {
    let jit = Jit::new(CacheConfig {
        capacity: 2,
        specialize_after: 1,
        options: JitOptions::default(),
    });
    let func = f();
    let cs = [case(1, 2, 3), case(2, 3, 3), case(3, 4, 3)];
    for (args, want) in &cs {
        assert_close(
            "lru",
            &jit.call(&func, args, &|_| None).unwrap(),
            want,
            1e-5,
            1e-5,
        );
    }
    assert_eq!(jit.len(), 2);
    assert_eq!(jit.stats().evictions, 1);
    // σ₂ and σ₃ are cached; σ₁ was evicted and compiles again.
    jit.call(&func, &cs[2].0, &|_| None).unwrap();
    jit.call(&func, &cs[1].0, &|_| None).unwrap();
    assert_eq!(jit.stats().compiles, 3);
    jit.call(&func, &cs[0].0, &|_| None).unwrap();
    let s = jit.stats();
    assert_eq!(s.compiles, 4);
    assert_eq!(s.evictions, 2);
    assert_eq!(s.hits, 2);
}

#[test]
fn generic_path_serves_new_shapes_without_compiling() {
    let jit = Jit::new(CacheConfig {
        capacity: 16,
        specialize_after: 3,
        options: JitOptions::default(),
    });
    let func = f();
    let cs: Vec<_> = (0..6)
        .map(|i| case(10 + i as u64, 1 + i * 3, 2 + i * 5))
        .collect();
    for (args, want) in &cs {
        let got = jit.call(&func, args, &|_| None).unwrap();
        assert_close("generic", &got, want, 1e-5, 1e-5);
    }
    let s = jit.stats();
    assert_eq!(s.generic_compiles, 1, "{s:?}");
    assert_eq!(s.compiles, 0);
    assert_eq!(s.generic_runs, 6);
    // The third call with one σ specialises it.
    for _ in 0..2 {
        let got = jit.call(&func, &cs[2].0, &|_| None).unwrap();
        assert_close("generic→special", &got, &cs[2].1, 1e-5, 1e-5);
    }
    let s = jit.stats();
    assert_eq!(s.compiles, 1, "{s:?}");
    assert_eq!(s.generic_runs, 7);
    assert_eq!(s.misses, 1);
}

/// `specialize_after = u32::MAX` (a decoder's setting): one σ called again
/// and again stays on the generic kernels and compiles nothing more.
#[test]
fn never_specialising_runs_every_call_generic() {
    let jit = Jit::new(CacheConfig {
        capacity: 16,
        specialize_after: u32::MAX,
        options: JitOptions::default(),
    });
    let func = f();
    let (args, want) = case(21, 5, 7);
    for _ in 0..5 {
        let got = jit.call(&func, &args, &|_| None).unwrap();
        assert_close("never specialised", &got, &want, 1e-5, 1e-5);
    }
    let s = jit.stats();
    assert_eq!((s.compiles, s.generic_compiles), (0, 1), "{s:?}");
    assert_eq!((s.generic_runs, s.misses, s.hits), (5, 0, 0), "{s:?}");
    assert_eq!(jit.len(), 0);
}

/// A generic compilation remembers its plans for the last few σs: calls
/// cycling through more σs than it keeps, then through fewer (hits, moved
/// to the front), then back to the first ones (evicted, planned again),
/// each with the interpreter's result and shape; one compilation in all.
#[test]
fn generic_plans_remembered_per_sigma_give_each_sigmas_result() {
    let jit = Jit::new(CacheConfig {
        capacity: 16,
        specialize_after: u32::MAX,
        options: JitOptions::default(),
    });
    let func = f();
    let shapes: Vec<(usize, usize)> = (1..=11).map(|i| (i, 12 - i)).collect();
    let cases: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, &(r, c))| case(100 + i as u64, r, c))
        .collect();
    let order = (0..11)
        .chain([3, 4, 3, 5, 4, 3])
        .chain(0..11)
        .chain((0..11).rev());
    for i in order {
        let (args, want) = &cases[i];
        let got = jit.call(&func, args, &|_| None).unwrap();
        assert_eq!(got.shape(), want.shape(), "σ {i}");
        assert_close(&format!("σ {i}"), &got, want, 1e-5, 1e-5);
    }
    let s = jit.stats();
    assert_eq!((s.compiles, s.generic_compiles), (0, 1), "{s:?}");
}

#[test]
fn generic_kernels_every_op_kind() {
    // Layout ops, slices, concat and reductions with dims read at run time.
    let mut b = builder("g");
    let x = b.param("x", tt(Dtype::BF16, &["A", "B"]));
    let y = b.param("y", tt(Dtype::BF16, &["B"]));
    b.returns(tt(Dtype::BF16, &["B", "D"]));
    let t = b.op(Op::Transpose(vec![1, 0], x));
    let yr = b.op(Op::Reshape(vec![Dim::var("B"), Dim::c(1)], y));
    let yb = b.op(Op::Broadcast(vec![Dim::var("B"), Dim::var("A")], yr));
    let s = b.op(Op::Binary(BinaryOp::Add, t, yb));
    let sl = b.op(Op::Slice {
        axis: 1,
        start: Dim::c(1),
        stop: Dim::var("A"),
        step: 1,
        x: s,
    });
    let m = b.op(Op::Reduce {
        op: ReduceOp::Max,
        axes: vec![1],
        keepdims: true,
        x: s,
    });
    let c = b.op(Op::Concat(1, vec![sl, m, yr]));
    let func = b.finish(c);
    let jit = Jit::new(CacheConfig {
        capacity: 16,
        specialize_after: 100,
        options: JitOptions {
            fast_math: false,
            deterministic: true,
            threads: 0,
            fast_quant: false,
        },
    });
    let mut rng = Rng(77);
    for (a, bb) in [(2usize, 3usize), (5, 1), (1, 7), (9, 4)] {
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::BF16, &[a, bb], true).into(),
            random(&mut rng, Dtype::BF16, &[bb], true).into(),
        ];
        let want = interp(&func, &args).unwrap();
        let got = jit.call(&func, &args, &|_| None).unwrap();
        assert_bits(&format!("generic {a}x{bb}"), &got, &want, false);
    }
    assert_eq!(jit.stats().generic_compiles, 1);
    assert_eq!(jit.stats().compiles, 0);
}

#[test]
fn contract_errors_and_explicit_fallback() {
    let jit = Jit::default();
    let func = f();
    // Contract violations are the runtime's errors, before any compilation.
    let bad: Vec<Arg> = vec![
        Tensor::from_vec(&[2, 3], vec![0f32; 6]).unwrap().into(),
        Tensor::from_vec(&[4], vec![0f32; 4]).unwrap().into(),
    ];
    let e = jit.call(&func, &bad, &|_| None).unwrap_err();
    assert_eq!(e, interp(&func, &bad).unwrap_err());
    assert_eq!(jit.stats().compiles, 0);
    // An ill-typed body (unchecked IR): planning fails, the interpreter reports the error.
    let mut b = builder("bad");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let r = b.op(Op::Broadcast(vec![Dim::c(3)], x));
    let g = b.finish(r);
    let args: Vec<Arg> = vec![Tensor::from_vec(&[2], vec![1f32, 2.0]).unwrap().into()];
    let e = jit.call(&g, &args, &|_| None).unwrap_err();
    assert_eq!(e, interp(&g, &args).unwrap_err());
    assert_eq!(jit.stats().fallbacks, 1);
    assert!(jit.last_fallback().is_some());
}

#[test]
fn threads_do_not_change_results() {
    let mut b = builder("big");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    b.returns(tt(Dtype::F32, &["R"]));
    let e = b.op(Op::Unary(UnaryOp::Exp, x));
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![1],
        keepdims: false,
        x: e,
    });
    let func = b.finish(r);
    let mut rng = Rng(8);
    let args: Vec<Arg> = vec![random(&mut rng, Dtype::F32, &[512, 300], false).into()];
    let one = Jit::new(CacheConfig {
        options: JitOptions {
            threads: 1,
            ..Default::default()
        },
        ..Default::default()
    });
    let all = Jit::new(CacheConfig::default());
    let a = one.call(&func, &args, &|_| None).unwrap();
    let b2 = all.call(&func, &args, &|_| None).unwrap();
    assert_bits("1 thread vs pool", &a, &b2, false);
}

/// `call_static` (the `#[tensor_fn]` path) identifies functions by address:
/// one compile per σ, hits afterwards, results equal to `call`'s; calls in
/// the body resolve to `'static` callees through the same path.
#[test]
fn call_static_hits_and_nested_calls() {
    let jit = Jit::new(CacheConfig::default());
    let callee: &'static Function = Box::leak(Box::new(f()));
    let mut b = builder("outer");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    let y = b.param("y", tt(Dtype::F32, &["C"]));
    b.returns(tt(Dtype::F32, &["R"]));
    let c = b.op(Op::Call("cached".into(), vec![x, y]));
    let r = b.op(Op::Unary(UnaryOp::Neg, c));
    let outer: &'static Function = Box::leak(Box::new(b.finish(r)));
    let resolve = |n: &str| (n == "cached").then_some(callee);
    let (args, want) = case(7, 5, 9);
    for _ in 0..3 {
        let got = jit.call_static(callee, &args, &resolve).unwrap();
        assert_close("static", &got, &want, 1e-5, 1e-5);
        let neg = jit.call_static(outer, &args, &resolve).unwrap();
        let back = jit.call(outer, &args, &resolve).unwrap();
        assert_bits("static vs compare", &neg, &back, false);
        let (n, w) = (neg.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        assert!(n
            .iter()
            .zip(&w)
            .all(|(a, b)| (a + b).abs() <= 1e-5 * b.abs().max(1.0)));
    }
    let s = jit.stats();
    // Two functions at one σ: two compiles; `call` finds the entries
    // `call_static` made (same fingerprint), so every other call hits.
    // `outer`'s σ-specialised compilation inlines `cached` (`inline`), so
    // its calls make no nested lookups: three per round.
    assert_eq!(s.compiles, 2, "{s:?}");
    assert_eq!(s.misses, 2, "{s:?}");
    assert_eq!(s.hits, 3 * 3 - 2, "{s:?}");
    assert_eq!(s.fallbacks, 0, "{s:?}");
    // An unknown callee is a typed error, not a panic.
    let none = |_: &str| None;
    let err = jit.call_static(outer, &args, &none).unwrap_err();
    assert!(err.to_string().contains("cached"), "{err}");
}

/// `call_static` reuses a recent call's binding when the arguments
/// bind the same (`bind_memo`): every change of a shape, a dim argument or
/// a scalar's bits must bind again. `-0.0` after `0.0` (equal as floats)
/// must give `-0.0`s; a contract failure must fail every time.
#[test]
fn call_static_binds_again_whenever_an_argument_changes() {
    use tc_core::ir::Scalar;
    use tc_core::{Pred, Type};
    let jit = Jit::new(CacheConfig::default());
    let mut b = builder("scaled");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.param("s", Type::Scalar(Dtype::F32));
    b.param("k", Type::Dim(Dim::var("K")));
    b.requires(Pred::eq(Dim::var("N").rem(&Dim::c(2)), 0));
    b.returns(tt(Dtype::F32, &["K"]));
    let i = b.op(Op::Iota(Dtype::F32, vec![Dim::var("K")], 0));
    let xs = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0],
        keepdims: false,
        x,
    });
    let xb = b.op(Op::Broadcast(vec![Dim::var("K")], xs));
    let p = b.op(Op::Binary(BinaryOp::Add, i, xb));
    let r = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: p,
        s: Scalar::Param(1),
        scalar_left: false,
    });
    let f: &'static Function = Box::leak(Box::new(b.finish(r)));
    let none = |_: &str| None;
    let call = |x: &[f32], s: f32, k: usize| {
        let args = vec![
            Tensor::from_slice(&[x.len()], x).unwrap().into(),
            Arg::Scalar(tc_runtime::Elem::F(s)),
            Arg::Dim(k),
        ];
        let got = jit.call_static(f, &args, &none);
        let want = interp(f, &args);
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_bits("memo", g, w, false),
            (Err(_), Err(_)) => {}
            _ => panic!("jit {got:?} vs interpreter {want:?}"),
        }
        got.map(|t| {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        })
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // (x, s, k) -> (sum x + i) · s for i < k.
    assert_eq!(call(&[0.0, 0.0], 0.0, 2).unwrap(), bits(&[0.0, 0.0]));
    assert_eq!(call(&[0.0, 0.0], -0.0, 2).unwrap(), bits(&[-0.0, -0.0]));
    assert_eq!(
        call(&[0.0, 0.0], -1.0, 3).unwrap(),
        bits(&[-0.0, -1.0, -2.0])
    );
    assert_eq!(
        call(&[1.0, 2.0, 3.0, 4.0], -0.0, 3).unwrap(),
        bits(&[-0.0, -0.0, -0.0])
    );
    assert_eq!(
        call(&[1.0, 2.0, 3.0, 4.0], 2.0, 3).unwrap(),
        bits(&[20.0, 22.0, 24.0])
    );
    for _ in 0..2 {
        assert!(
            call(&[1.0, 2.0, 3.0], 2.0, 3).is_err(),
            "N = 3 breaks `requires`"
        );
        assert_eq!(call(&[1.0, 2.0], 2.0, 1).unwrap(), bits(&[6.0]));
    }
    // Many bindings in turn, more than the memo keeps, then back: each
    // call its own σ's result (a server's sequences, each its own length).
    for round in 0..3 {
        for k in (1..=40).rev().step_by(round + 1) {
            let want: Vec<f32> = (0..k).map(|i| (3.0 + i as f32) * 2.0).collect();
            assert_eq!(call(&[1.0, 2.0], 2.0, k).unwrap(), bits(&want), "k = {k}");
        }
    }
    assert_eq!(call(&[1.0, 2.0], 2.0, 1).unwrap(), bits(&[6.0]));
    // Only the dim argument changes, then only the scalar.
    assert_eq!(call(&[1.0, 2.0], 2.0, 2).unwrap(), bits(&[6.0, 8.0]));
    assert_eq!(call(&[1.0, 2.0], 0.5, 2).unwrap(), bits(&[1.5, 2.0]));
}

/// A function with several steps that split across the pool runs, when
/// called from outside the pool, on a pool worker (one hop per call, not
/// one per step); small ones and 1-thread compilations stay on the caller.
/// The results do not depend on where it ran.
#[test]
fn large_multi_step_calls_run_on_a_pool_worker() {
    let mut b = builder("two_steps");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    let w = b.param("w", tt(Dtype::F32, &["C", "C"]));
    b.returns(tt(Dtype::F32, &["R", "C"]));
    let m = b.op(Op::Matmul(x, w));
    let t = b.op(Op::Unary(UnaryOp::Tanh, m));
    let m2 = b.op(Op::Matmul(t, w));
    let r = b.op(Op::Unary(UnaryOp::Exp, m2));
    let func = b.finish(r);
    let mut rng = Rng(9);
    let big: Vec<Arg> = vec![
        random(&mut rng, Dtype::F32, &[256, 256], false).into(),
        random(&mut rng, Dtype::F32, &[256, 256], false).into(),
    ];
    let small: Vec<Arg> = vec![
        random(&mut rng, Dtype::F32, &[4, 8], false).into(),
        random(&mut rng, Dtype::F32, &[8, 8], false).into(),
    ];
    let sigma = |args: &[Arg]| {
        tc_runtime::contract::bind_args(&func.sig, args)
            .unwrap()
            .sigma
    };
    let pool_opts = JitOptions::default();
    let one_opts = JitOptions {
        threads: 1,
        ..Default::default()
    };
    let c = tc_llvm::exec::compile(&func, &sigma(&big), pool_opts).unwrap();
    assert!(c.wants_worker(), "two matmuls and two large kernels");
    let c1 = tc_llvm::exec::compile(&func, &sigma(&big), one_opts).unwrap();
    assert!(!c1.wants_worker(), "a 1-thread compilation never hops");
    let cs = tc_llvm::exec::compile(&func, &sigma(&small), pool_opts).unwrap();
    assert!(!cs.wants_worker(), "tiny steps stay on the caller");
    // Same results from a plain thread (hops), a pool worker (no hop) and
    // one thread.
    let pool = Jit::new(CacheConfig::default());
    let one = Jit::new(CacheConfig {
        options: one_opts,
        ..Default::default()
    });
    let hopped = pool.call(&func, &big, &|_| None).unwrap();
    let on_worker = rayon::join(|| pool.call(&func, &big, &|_| None).unwrap(), || ()).0;
    let serial = one.call(&func, &big, &|_| None).unwrap();
    assert_bits("hop vs worker", &hopped, &on_worker, false);
    assert_bits("hop vs 1 thread", &hopped, &serial, false);
    // In a session (other workers awake, smaller split thresholds: the
    // small products split too), nested or not: the same bits.
    for args in [&big, &small] {
        let plain = one.call(&func, args, &|_| None).unwrap();
        let in_session = tc_llvm::session(|| {
            assert!(
                tc_llvm::team::in_session() || rayon::current_num_threads() == 1,
                "inside its closure"
            );
            pool.call(&func, args, &|_| None).unwrap()
        });
        let nested =
            tc_llvm::session(|| tc_llvm::session(|| pool.call(&func, args, &|_| None))).unwrap();
        assert_bits("session vs 1 thread", &in_session, &plain, false);
        assert_bits("nested session vs 1 thread", &nested, &plain, false);
    }
    assert!(
        !tc_llvm::team::in_session(),
        "a session ends with its closure"
    );
}

/// A panic inside a session propagates to its caller, ends the session
/// (its helpers stop: no hang) and leaves the pool usable.
#[test]
fn a_panic_in_a_session_propagates_and_ends_it() {
    let r = std::panic::catch_unwind(|| tc_llvm::session(|| -> u32 { panic!("inside") }));
    assert!(r.is_err());
    assert!(!tc_llvm::team::in_session());
    assert_eq!(tc_llvm::session(|| 7), 7);
    let sum: u64 = tc_llvm::session(|| {
        use rayon::prelude::*;
        (0..100_000u64).into_par_iter().sum()
    });
    assert_eq!(sum, 4_999_950_000);
}

/// A kernel's elements weigh what its fused expression costs when the
/// split thresholds count them: a plain add counts each element once, a
/// SwiGLU-like `x · sigmoid(x) · y` (a transcendental per element) more
/// than once, so that it splits across the pool from fewer elements. Results
/// never depend on the split (threads split only output rows).
#[test]
fn transcendental_kernels_weigh_more_when_split() {
    let planned = |with_sigmoid: bool| {
        let mut b = builder("weighted");
        let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
        let y = b.param("y", tt(Dtype::F32, &["R", "C"]));
        b.returns(tt(Dtype::F32, &["R", "C"]));
        let r = if with_sigmoid {
            let s = b.op(Op::Unary(UnaryOp::Sigmoid, x));
            let g = b.op(Op::Binary(BinaryOp::Mul, x, s));
            b.op(Op::Binary(BinaryOp::Mul, g, y))
        } else {
            b.op(Op::Binary(BinaryOp::Add, x, y))
        };
        let f = b.finish(r);
        let st = tc_llvm::plan::structure(&f, &|v| tc_llvm::plan::operand_dtype(&f, v), None);
        tc_llvm::plan::split_weight(&st, r)
    };
    assert_eq!(planned(false), 1, "a plain add counts once");
    let w = planned(true);
    assert!(w >= 2, "a sigmoid per element weighs {w}");
}
