//! Products of one to four rows against a kept weight (`tc_llvm::kernels::gemv`,
//! issue #15: a decoder's step, a row per sequence) give the bits of the
//! tile path on the same packing: the per-call packing of the same weight,
//! read through the register-tile kernel. Over the shapes where the two
//! could part: each row count (and five rows, the first past the path), a
//! last group of fewer panels than a group holds, a last panel of fewer
//! than 32 columns, one and several K-blocks (C accumulated across them),
//! signed zeros, infinities and NaNs (a NaN's payload may differ:
//! `nan_any`), one thread and the columns split across the pool inside a
//! session.

use crate::util;

use proptest::prelude::*;
use tc_core::Dtype;
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

fn check(m: usize, k: usize, n: usize, seed: u64, threads: usize) {
    let mut rng = Rng(seed | 1);
    let (f, g) = (linear(false), linear(true));
    let jit = jit_with(JitOptions {
        threads,
        ..Default::default()
    });
    let w = random(&mut rng, Dtype::F32, &[n, k], seed % 3 == 0);
    let x = random(&mut rng, Dtype::F32, &[m, k], seed % 2 == 0);
    let args: Vec<Arg> = vec![x.into(), w.into()];
    // The first call sees the weight once (packed per call), the second
    // packs it and keeps it, the third reads the kept packing.
    let run = || {
        tc_llvm::session(|| {
            let _ = jit.call(&f, &args, &|_| None).unwrap();
            let _ = jit.call(&f, &args, &|_| None).unwrap();
            let kept = jit.call(&f, &args, &|_| None).unwrap();
            let per_call = jit.call(&g, &args, &|_| None).unwrap();
            (kept, per_call)
        })
    };
    let (kept, per_call) = run();
    let what = format!("m = {m}, k = {k}, n = {n}, seed {seed}, {threads} thread(s)");
    assert_bits(&what, &kept, &per_call, true);
}

#[test]
fn a_kept_weight_row_product_gives_the_tile_paths_bits() {
    let kc = tc_llvm::kernels::matmul::KC;
    // Panels: 1, 3 (a short group of four, a group of two and one), 4, 5,
    // 9 and 10 of them, the last one partial or whole; one K-block, one
    // plus a row, two and a half.
    for (k, n) in [
        (1, 1),
        (7, 96),
        (64, 128),
        (kc, 130),
        (kc + 1, 300),
        (2 * kc + kc / 2, 320),
        (768, 2304),
    ] {
        for (m, threads) in (1..=5).flat_map(|m| [(m, 1), (m, 2)]) {
            check(m, k, n, (k * 31 + n + m) as u64, threads);
        }
    }
}

/// Large enough that the columns split across two threads in a session
/// (`matmul::splits`: 2^20 multiply-adds).
#[test]
fn a_split_row_product_gives_the_same_bits() {
    for m in 1..=4 {
        check(m, 1024, 1100, 7, 2);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn row_products_agree_bitwise(m in 1usize..=5, k in 1usize..1200, n in 1usize..400, seed in any::<u64>(), two in any::<bool>()) {
        check(m, k, n, seed, if two { 2 } else { 1 });
    }
}
