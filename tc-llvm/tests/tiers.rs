//! Tiered compilation (`tc_llvm::jit::Tier`, `tc_llvm::tier`): the quick
//! tier computes the optimized tier's bits, in every mode, on model
//! patterns (layer norm, softmax, products, the transcendentals, narrow
//! floats, reductions over every axis), specialised and shape-generic;
//! and a cache's quick kernels are raised to the optimized tier in the
//! background once they have run for `tc_llvm::tier::TIER_UP_AFTER`,
//! with the results unchanged.
//!
//! A binary of its own: it turns the persistent kernel cache off before
//! anything compiles, since a part found there is the optimized tier's and
//! a quick compilation would then compare the optimized code with itself.
mod util;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, UnaryOp};
use tc_core::Dtype;
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::Elem;
use util::*;

const MODES: [JitOptions; 3] = [
    JitOptions {
        fast_math: true,
        deterministic: false,
        threads: 0,
        fast_quant: false,
    },
    EXACT,
    DET,
];

fn cache(options: JitOptions, specialize_after: u32, tiered: bool) -> Jit {
    let j = Jit::new(CacheConfig {
        capacity: 8,
        specialize_after,
        options,
    });
    j.set_tiered(tiered);
    j
}

/// `f` on `args` at both tiers, specialised and shape-generic, in every
/// mode: the same bits (NaN payloads included), and the quick run was
/// quick.
fn same_bits(what: &str, f: &Function, args: &[Arg]) {
    for opts in MODES {
        for specialize_after in [1, u32::MAX] {
            let quick = cache(opts, specialize_after, true);
            let optimized = cache(opts, specialize_after, false);
            let q = quick.call(f, args, &|_| None).expect("quick tier");
            let o = optimized.call(f, args, &|_| None).expect("optimized tier");
            let how = format!("{what} {opts:?} specialize_after={specialize_after}");
            assert_eq!(
                quick.stats().fallbacks,
                0,
                "{how}: {:?}",
                quick.last_fallback()
            );
            assert_eq!(
                quick.stats().quick_compiles,
                1,
                "{how}: {:?}",
                quick.stats()
            );
            assert_eq!(optimized.stats().quick_compiles, 0, "{how}");
            assert_bits(&how, &q, &o, false);
        }
    }
}

fn f32s(rng: &mut Rng, shape: &[usize]) -> Arg {
    random(rng, Dtype::F32, shape, true).into()
}

/// `gelu(x · wᵀ + b)`: a product with its bias and activation fused after it.
fn mlp() -> Function {
    let mut b = builder("mlp");
    let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
    let w = b.param("w", tt(Dtype::F32, &["N", "K"]));
    let bias = b.param("b", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["M", "N"]));
    let wt = b.op(Op::Transpose(vec![1, 0], w));
    let y = b.op(Op::Matmul(x, wt));
    let full = vec![tc_core::Dim::var("M"), tc_core::Dim::var("N")];
    let bb = b.op(Op::Broadcast(full, bias));
    let z = b.op(Op::Binary(BinaryOp::Add, y, bb));
    let g = b.op(Op::Unary(UnaryOp::Gelu, z));
    b.finish(g)
}

/// A sum over axis 0 and a max over the last axis of `exp(x)`, as one
/// function's two reductions of one producer.
fn reductions() -> Function {
    let mut b = builder("reductions");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    b.returns(tt(Dtype::F32, &["C"]));
    let e = b.op(Op::Unary(UnaryOp::Exp, x));
    let cols = reduce(&mut b, ReduceOp::Sum, &[0], false, e);
    let m = reduce(&mut b, ReduceOp::Max, &[1], false, e);
    let one = reduce(&mut b, ReduceOp::Sum, &[0], false, m);
    let ob = b.op(Op::Broadcast(vec![tc_core::Dim::var("C")], one));
    let r = b.op(Op::Binary(BinaryOp::Add, cols, ob));
    b.finish(r)
}

fn quick_and_optimized_tiers_agree() {
    let mut rng = Rng(0x71e5);
    let eps = Arg::Scalar(Elem::F(1e-5));
    for (b, s, c) in [(1, 3, 17), (2, 9, 384)] {
        let args = vec![
            f32s(&mut rng, &[b, s, c]),
            f32s(&mut rng, &[c]),
            f32s(&mut rng, &[c]),
            eps.clone(),
        ];
        same_bits(
            &format!("layer norm [{b}, {s}, {c}]"),
            &layer_norm_fn(),
            &args,
        );
    }
    for t in [1, 13, 40] {
        let args = vec![f32s(&mut rng, &[2, 3, 5, t])];
        same_bits(&format!("softmax T={t}"), &softmax4_fn(), &args);
    }
    for (m, k, n) in [(1, 7, 5), (10, 384, 64)] {
        let args = vec![
            f32s(&mut rng, &[m, k]),
            f32s(&mut rng, &[n, k]),
            f32s(&mut rng, &[n]),
        ];
        same_bits(&format!("mlp {m}x{k}x{n}"), &mlp(), &args);
    }
    for (r, c) in [(1, 1), (5, 33), (64, 100)] {
        let args = vec![f32s(&mut rng, &[r, c])];
        same_bits(&format!("reductions [{r}, {c}]"), &reductions(), &args);
    }
    for op in FAST_MATH_OPS {
        for dt in [Dtype::F32, Dtype::BF16, Dtype::F16] {
            let args = vec![random(&mut rng, dt, &[3, 37], true).into()];
            same_bits(&format!("{op:?} {dt:?}"), &unary_fn(op, dt), &args);
        }
    }
}

/// Arguments of `layer_norm_fn` large enough that a call runs for about a
/// millisecond of quick code: `[8, 64, 384]` and its affine parameters.
fn layer_norm_args(seed: u64) -> Vec<Arg> {
    let mut rng = Rng(seed);
    vec![
        f32s(&mut rng, &[8, 64, 384]),
        f32s(&mut rng, &[384]),
        f32s(&mut rng, &[384]),
        Arg::Scalar(Elem::F(1e-5)),
    ]
}

/// A tiered cache: the first call compiles quick code; calls go on until
/// they have run `TIER_UP_AFTER`, then the background thread raises
/// the function to the optimized tier. Every call's result is the first
/// one's, bit for bit, before and after the switch.
fn a_cache_tiers_up_in_the_background() {
    let j = cache(MODES[0], 1, true);
    let args = layer_norm_args(0xb9);
    let f = layer_norm_fn();
    let first = j.call(&f, &args, &|_| None).unwrap();
    assert_eq!(j.stats().quick_compiles, 1, "{:?}", j.stats());
    let before = tc_llvm::tier_ups();
    let t0 = std::time::Instant::now();
    let mut calls = 1;
    while tc_llvm::tier_ups() == before {
        assert!(
            t0.elapsed().as_secs() < 60,
            "no tier-up after {calls} calls: {:?}",
            j.stats()
        );
        let again = j.call(&f, &args, &|_| None).unwrap();
        assert_bits(&format!("call {calls}"), &again, &first, false);
        calls += 1;
        if calls % 16 == 0 {
            tc_llvm::finish_tier_ups();
        }
    }
    // The optimized kernels now run: still the same bits.
    for k in 0..3 {
        let after = j.call(&f, &args, &|_| None).unwrap();
        assert_bits(
            &format!("after the tier-up, call {k}"),
            &after,
            &first,
            false,
        );
    }
    let st = j.stats();
    assert_eq!(
        (st.compiles, st.quick_compiles, st.fallbacks),
        (1, 1, 0),
        "{st:?}"
    );
    // Another cache with the same function compiles again (quick): the
    // optimized tier was never stored on disk here (the cache is off).
    let other = cache(MODES[0], 1, true);
    other.call(&f, &args, &|_| None).unwrap();
    assert_eq!(other.stats().quick_compiles, 1);
    // `finish_tiers` raises what a cache holds at the quick tier at once.
    let now = cache(MODES[0], 1, true);
    let q = now.call(&f, &args, &|_| None).unwrap();
    let ups = tc_llvm::tier_ups();
    now.finish_tiers();
    assert_eq!(tc_llvm::tier_ups(), ups + 1);
    assert_bits(
        "after finish_tiers",
        &now.call(&f, &args, &|_| None).unwrap(),
        &q,
        false,
    );
    // A tiered cache's dry run compiles the optimized tier at once.
    let dry = cache(MODES[0], 1, true);
    tc_llvm::dry_run(|| dry.call(&f, &args, &|_| None)).ok();
    assert_eq!(dry.stats().quick_compiles, 0, "{:?}", dry.stats());
}

/// A process that exits while a tier-up compiles exits cleanly: exit
/// waits for LLVM to finish (`tier::EXIT_WAIT`) before the C++ runtime
/// destroys LLVM's static objects. A real child process (this binary, its
/// ignored test below), its status and its stderr checked.
#[test]
fn exit_with_a_tier_up_in_flight_is_clean() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "exits_while_tiering_up",
            "--nocapture",
        ])
        .env("TC_KERNEL_CACHE", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child: {:?}\n{err}", out.status);
    assert!(err.contains("tier-up in flight at exit"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The child of `exit_with_a_tier_up_in_flight_is_clean`: calls until a
/// tier-up is compiling, then exits the process at once.
#[test]
#[ignore = "run as a child process by exit_with_a_tier_up_in_flight_is_clean"]
fn exits_while_tiering_up() {
    let j = cache(MODES[0], 1, true);
    let args = layer_norm_args(0xe7);
    let f = layer_norm_fn();
    let t0 = std::time::Instant::now();
    while tc_llvm::tier::pending() == 0 {
        assert!(t0.elapsed().as_secs() < 60, "no tier-up queued");
        j.call(&f, &args, &|_| None).unwrap();
    }
    eprintln!("tier-up in flight at exit");
    std::process::exit(0);
}

/// Calls of compiled functions start no threads of the compiler's
/// (`offpool`): a product's kernels compiled on parallel threads ahead of
/// its calls once did so at every call too, a thread per product, which
/// made MiniLM bf16 1 × 10 twice as slow. Products of several shapes
/// (whole, edge and ragged kernels), each warm, then called again.
fn warm_calls_start_no_threads() {
    let mut rng = Rng(0x5eed);
    let j = cache(MODES[0], 1, false);
    let shapes = [(10, 384, 64), (37, 96, 45), (1, 33, 17)];
    let args: Vec<Vec<Arg>> = shapes
        .iter()
        .map(|&(m, k, n)| {
            vec![
                f32s(&mut rng, &[m, k]),
                f32s(&mut rng, &[n, k]),
                f32s(&mut rng, &[n]),
            ]
        })
        .collect();
    let f = mlp();
    for a in &args {
        j.call(&f, a, &|_| None).unwrap();
    }
    let before = tc_llvm::compile_threads_started();
    for _ in 0..3 {
        for a in &args {
            j.call(&f, a, &|_| None).unwrap();
        }
    }
    assert_eq!(
        tc_llvm::compile_threads_started(),
        before,
        "{:?}",
        j.stats()
    );
}

#[test]
fn tiers() {
    std::env::set_var("TC_KERNEL_CACHE", "off");
    quick_and_optimized_tiers_agree();
    a_cache_tiers_up_in_the_background();
    warm_calls_start_no_threads();
}
