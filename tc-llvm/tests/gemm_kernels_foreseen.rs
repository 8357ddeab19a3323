//! A function's GEMM kernels are compiled with the function, foreseen from
//! its matmul steps (`matmul::prepare`), not one after another while its
//! first call runs: after a `dry_run` call (compile, no step run) the
//! real call compiles nothing more. Products of each kind: a weight read
//! by rows in place (MiniLM at batch 1), attention scores with a ragged
//! column panel (a batch of items, B transposed), and an A packed for the
//! host kernel with an edge row panel and a two-vector ragged panel.
//! Counted as the lookups of a fresh persistent cache, one per module;
//! alone in its binary, so no other test has compiled a kernel before.
mod util;

use std::sync::atomic::Ordering;

use tc_core::ir::{Function, Op};
use tc_core::Dtype;
use tc_llvm::disk::Store;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

/// `x [M, K] · transpose(w [N, K])`: a linear layer's weight.
fn linear() -> Function {
    let mut b = builder("linear");
    let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
    let w = b.param("w", tt(Dtype::F32, &["N", "K"]));
    b.returns(tt(Dtype::F32, &["M", "N"]));
    let wt = b.op(Op::Transpose(vec![1, 0], w));
    let r = b.op(Op::Matmul(x, wt));
    b.finish(r)
}

/// `q [H, S, E] · transpose(k [H, S, E])`: attention scores `[H, S, S]`.
fn scores() -> Function {
    let mut b = builder("scores");
    let q = b.param("q", tt(Dtype::F32, &["H", "S", "E"]));
    let k = b.param("k", tt(Dtype::F32, &["H", "S", "E"]));
    b.returns(tt(Dtype::F32, &["H", "S", "S"]));
    let kt = b.op(Op::Transpose(vec![0, 2, 1], k));
    let r = b.op(Op::Matmul(q, kt));
    b.finish(r)
}

/// `x [M, K] · y [K, N]`, both computed inputs' shapes as given.
fn plain() -> Function {
    let mut b = builder("plain");
    let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
    let y = b.param("y", tt(Dtype::F32, &["K", "N"]));
    b.returns(tt(Dtype::F32, &["M", "N"]));
    let r = b.op(Op::Matmul(x, y));
    b.finish(r)
}

#[test]
fn a_first_call_compiles_no_gemm_kernel_while_it_runs() {
    let dir = std::env::temp_dir().join(format!("tc-gemm-foreseen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("TC_KERNEL_CACHE", &dir);
    let store = Store::global().expect("a kernel cache in a temporary directory");
    let compiled = || store.stats.misses.load(Ordering::Relaxed);
    let mut rng = Rng(5);
    let mut arg = |shape: &[usize]| -> Arg { random(&mut rng, Dtype::F32, shape, false).into() };
    let cases: Vec<(&str, Function, Vec<Arg>)> = vec![
        (
            "linear 10 x 384 x 384",
            linear(),
            vec![arg(&[10, 384]), arg(&[384, 384])],
        ),
        (
            "scores 12 x 10 x 10",
            scores(),
            vec![arg(&[12, 10, 32]), arg(&[12, 10, 32])],
        ),
        // Rows 4 KiB apart: A is packed (host kernel, 6-row edge); n =
        // 440 leaves a ragged panel of 24 columns.
        (
            "plain 20 x 1024 x 440",
            plain(),
            vec![arg(&[20, 1024]), arg(&[1024, 440])],
        ),
    ];
    for (what, f, args) in &cases {
        let j = jit_with(JitOptions::default());
        let before = compiled();
        tc_llvm::dry_run(|| j.call(f, args, &|_| None)).expect("dry run");
        let prepared = compiled();
        assert!(prepared > before, "{what}: the dry run compiled its module");
        let got = j.call(f, args, &|_| None).expect("call");
        assert_eq!(
            compiled(),
            prepared,
            "{what}: a kernel compiled while the call ran"
        );
        let want = interp(f, args).unwrap();
        assert_close(what, &got, &want, 1e-4, 1e-3);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
