//! A dry run of a shape-generic compilation readies the GEMM kernels of
//! its products for later calls whose dims differ from the dry run's: a
//! decoder's attention reads a cache one position longer each step, the
//! column count of its scores and the depth of its weighted sum, and the
//! kernels those need (ragged column panels of either width, A packed
//! once the depth is large) were compiled, or linked from the kernel
//! cache, while the steps ran, after the warm-up had finished (and, in a
//! model, after its weights had become resident). Counted as the lookups
//! of a fresh persistent cache, one per module; alone in its binary, so no
//! other test has compiled a kernel before.
mod util;

use std::sync::atomic::Ordering;

use tc_core::ir::{Function, Op};
use tc_core::Dtype;
use tc_llvm::disk::Store;
use tc_llvm::{CacheConfig, Jit};
use tc_runtime::contract::Arg;
use util::*;

/// `q [H, S, E] · transpose(k [H, T, E])`: attention scores `[H, S, T]`.
fn scores() -> Function {
    let mut b = builder("scores");
    let q = b.param("q", tt(Dtype::F32, &["H", "S", "E"]));
    let k = b.param("k", tt(Dtype::F32, &["H", "T", "E"]));
    b.returns(tt(Dtype::F32, &["H", "S", "T"]));
    let kt = b.op(Op::Transpose(vec![0, 2, 1], k));
    let r = b.op(Op::Matmul(q, kt));
    b.finish(r)
}

/// `p [H, S, T] · v [H, T, E]`: the weighted sum of the values.
fn weighted() -> Function {
    let mut b = builder("weighted");
    let p = b.param("p", tt(Dtype::F32, &["H", "S", "T"]));
    let v = b.param("v", tt(Dtype::F32, &["H", "T", "E"]));
    b.returns(tt(Dtype::F32, &["H", "S", "E"]));
    let r = b.op(Op::Matmul(p, v));
    b.finish(r)
}

#[test]
fn steps_after_a_dry_run_compile_no_gemm_kernel() {
    let dir = std::env::temp_dir().join(format!("tc-gemm-generic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("TC_KERNEL_CACHE", &dir);
    let store = Store::global().expect("a kernel cache in a temporary directory");
    let compiled = || store.stats.misses.load(Ordering::Relaxed);
    // Shape-generic kernels only, on the pool, as a decoder runs them.
    let j = Jit::new(CacheConfig {
        capacity: 8,
        specialize_after: u32::MAX,
        options: tc_llvm::JitOptions {
            threads: 0,
            ..EXACT
        },
    });
    let mut rng = Rng(11);
    let mut arg = |shape: &[usize]| -> Arg { random(&mut rng, Dtype::F32, shape, false).into() };
    let (h, e) = (3, 64);
    // A prefill of 20 positions, then decode steps over 21.. positions.
    let prompt = 20;
    for (what, f, s) in [
        ("scores", scores(), prompt),
        ("weighted", weighted(), prompt),
        ("scores", scores(), 1),
        ("weighted", weighted(), 1),
    ] {
        let mut shapes = |t: usize| -> Vec<Arg> {
            if what == "scores" {
                vec![arg(&[h, s, e]), arg(&[h, t, e])]
            } else {
                vec![arg(&[h, s, t]), arg(&[h, t, e])]
            }
        };
        let first = if s == 1 { prompt + 1 } else { prompt };
        tc_llvm::dry_run(|| j.call(&f, &shapes(first), &|_| None)).expect("dry run");
        let prepared = compiled();
        assert!(prepared > 0, "{what}: the dry run compiled nothing");
        // Every ragged width of the last column panel, and depths far past
        // the dry run's.
        let lengths: Vec<usize> = if s == 1 {
            (first..first + 40).chain([300, 1000]).collect()
        } else {
            vec![first]
        };
        for t in lengths {
            let args = shapes(t);
            let got = j.call(&f, &args, &|_| None).expect("call");
            assert_eq!(
                compiled(),
                prepared,
                "{what} of {s} rows over {t} positions: a kernel compiled while it ran"
            );
            let want = interp(&f, &args).unwrap();
            assert_close(&format!("{what} {s} x {t}"), &got, &want, 1e-4, 1e-3);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
