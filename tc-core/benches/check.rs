//! Checking time of a generated 200-op body and the solver cache's effect.
//!
//! The body is 20 blocks of 10 ops over symbolic dims `[B, S, D]` with
//! `D % H == 0`, `E == D`, `T == S`, `D >= 32`: matmul (contraction `D` vs
//! `E`, proven by Z3), add (`S` vs `T`), reduce(max, keepdims), broadcast,
//! sub, two slices `0..D-i` and `D-i..D` plus their concat (obligations that
//! differ per block), and either a split-heads reshape pair
//! `[B, S, H, D / H]` ↔ `[B, S, D]` or a transpose pair. Before timing, it
//! prints `solver::stats()` for one check from a cold cache, with the cache
//! on and off, and for a second check.
//!
//! Every `check_function` runs in its own Z3 context (`solver::scoped`, issue
//! #11 item 4) and the cache lives only as long as that scope, so a second
//! check of the same function starts cold: verdicts no longer depend on what
//! the thread checked before. Measured on the shared 2-core dev machine
//! (load ≈ 16, so absolute numbers are inflated several times), one check of
//! this body took ~25 ms warm / ~180 ms cold with the reused per-thread solver
//! and takes ~0.4–0.6 s with a context per check, the non-linear abstraction
//! and its lemmas (64 Z3 queries, every one with a `D / H` product).

use criterion::{criterion_group, criterion_main, Criterion};

use tc_core::build::FnBuilder;
use tc_core::check::check_function;
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, Signatures};
use tc_core::solver;
use tc_core::{Dim, Dtype, Pred, Type};

const BLOCKS: usize = 20;

fn v(s: &str) -> Dim {
    Dim::var(s)
}

/// The generated function: `BLOCKS × 10` instructions.
pub fn body_200() -> Function {
    let bsd = vec![v("B"), v("S"), v("D")];
    let mut b = FnBuilder::new("deep");
    let x = b.param("x", Type::tensor(Dtype::F32, bsd.clone()));
    let w = b.param("w", Type::tensor(Dtype::F32, vec![v("B"), v("E"), v("D")]));
    let y = b.param("y", Type::tensor(Dtype::F32, vec![v("B"), v("T"), v("D")]));
    // The head count is passed as a size, so a call binds it (Section 2 §17).
    b.param("heads", Type::Dim(v("H")));
    b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    b.requires(Pred::eq("E", "D"));
    b.requires(Pred::eq("T", "S"));
    b.requires(Pred::ge("D", 32));
    b.returns(Type::tensor(Dtype::F32, bsd.clone()));
    let split = vec![v("B"), v("S"), v("H"), v("D").div(&v("H"))];
    let mut cur = x;
    for i in 0..BLOCKS {
        let m = b.op(Op::Matmul(cur, w));
        let a = b.op(Op::Binary(BinaryOp::Add, m, y));
        let r = b.op(Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![2],
            keepdims: true,
            x: a,
        });
        let bc = b.op(Op::Broadcast(bsd.clone(), r));
        let s = b.op(Op::Binary(BinaryOp::Sub, a, bc));
        let cut = v("D") - (i as i64 + 1);
        let lo = b.op(Op::Slice {
            axis: 2,
            start: Dim::c(0),
            stop: cut.clone(),
            step: 1,
            x: s,
        });
        let hi = b.op(Op::Slice {
            axis: 2,
            start: cut,
            stop: v("D"),
            step: 1,
            x: s,
        });
        let cc = b.op(Op::Concat(2, vec![lo, hi]));
        cur = if i % 2 == 0 {
            let sp = b.op(Op::Reshape(split.clone(), cc));
            b.op(Op::Reshape(bsd.clone(), sp))
        } else {
            let tp = b.op(Op::Transpose(vec![1, 0, 2], cc));
            b.op(Op::Transpose(vec![1, 0, 2], tp))
        };
    }
    let f = b.finish(cur);
    assert_eq!(f.body.len(), BLOCKS * 10);
    f
}

fn check_once(f: &Function, sigs: &Signatures) {
    if let Err(es) = check_function(f, sigs) {
        panic!("the generated body must check: {es:?}");
    }
}

fn print_stats_table(f: &Function, sigs: &Signatures) {
    println!();
    println!(
        "solver::stats() for one check of a {}-op body (cold cache):",
        f.body.len()
    );
    println!(
        "{:<10} {:>8} {:>10} {:>11} {:>10} {:>9} {:>12} {:>11}",
        "cache",
        "queries",
        "syntactic",
        "cache_hits",
        "z3_checks",
        "unknowns",
        "escalations",
        "refinements"
    );
    for on in [true, false] {
        solver::set_cache_enabled(on);
        solver::reset();
        check_once(f, sigs);
        let s = solver::stats();
        println!(
            "{:<10} {:>8} {:>10} {:>11} {:>10} {:>9} {:>12} {:>11}",
            if on { "on" } else { "off" },
            s.queries,
            s.syntactic,
            s.cache_hits,
            s.z3_checks,
            s.unknowns,
            s.escalations,
            s.refinements
        );
    }
    // A second check: the cache does not outlive a check's solver scope.
    solver::set_cache_enabled(true);
    solver::reset();
    check_once(f, sigs);
    let before = solver::stats();
    check_once(f, sigs);
    let after = solver::stats();
    println!(
        "{:<10} {:>8} {:>10} {:>11} {:>10} {:>9} {:>12} {:>11}",
        "on (2nd)",
        after.queries - before.queries,
        after.syntactic - before.syntactic,
        after.cache_hits - before.cache_hits,
        after.z3_checks - before.z3_checks,
        after.unknowns - before.unknowns,
        after.escalations - before.escalations,
        after.refinements - before.refinements
    );
    println!();
}

fn bench_check(c: &mut Criterion) {
    let f = body_200();
    let sigs = Signatures::new();
    print_stats_table(&f, &sigs);

    let mut g = c.benchmark_group("check_200_ops");
    g.sample_size(10);
    solver::set_cache_enabled(true);
    g.bench_function("cache_on_cold", |bch| {
        bch.iter(|| {
            solver::reset();
            check_once(&f, &sigs)
        })
    });
    solver::reset();
    g.bench_function("cache_on_second", |bch| bch.iter(|| check_once(&f, &sigs)));
    solver::set_cache_enabled(false);
    g.bench_function("cache_off", |bch| {
        bch.iter(|| {
            solver::reset();
            check_once(&f, &sigs)
        })
    });
    solver::set_cache_enabled(true);
    g.finish();
}

criterion_group!(benches, bench_check);
criterion_main!(benches);
