//! The f32 matmul's two blockings: a single row block (m ≤ STREAM_MAX_M) streams B
//! panel by panel through an L1 buffer; larger m packs all of B per
//! K-block. Same micro-kernel, same K-blocking: bit-identical to each
//! other, on one thread and on the pool, and within the documented
//! tolerance of the interpreter.
mod util;

use tc_core::ir::Op;
use tc_core::Dtype;
use tc_llvm::matmul::{set_stream_b, sgemm, View};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

fn run(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    threads: usize,
    stream: bool,
) -> Vec<f32> {
    set_stream_b(stream);
    let mut c = vec![f32::NAN; m * n];
    // SAFETY: the views cover `a` (m × k) and `b` (k × n); `c` is m × n.
    unsafe {
        sgemm(
            m,
            n,
            k,
            View::new(a.as_ptr(), k, 1),
            View::new(b.as_ptr(), n, 1),
            c.as_mut_ptr(),
            threads,
        )
        .unwrap();
    }
    set_stream_b(true);
    c
}

#[test]
fn streamed_and_blocked_paths_agree_bitwise() {
    let mut s = 7u64;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    };
    // Edges in every direction, K across several K-blocks, n across a
    // multiple of the panel width and beyond; a few rows with K across
    // more K-blocks than the streamed path packs into one group (A's
    // packing past 2^16 floats: 5000 rows of K at one row panel), so the
    // second group adds to C after the first.
    for (m, n, k) in [
        (1usize, 1usize, 1usize),
        (13, 33, 257),
        (128, 3072 / 8, 768),
        (130, 100, 600),
        (140, 64, 512),
        (1, 1000, 520),
        (3, 70, 5000),
    ] {
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let base = run(m, n, k, &a, &b, 1, false);
        for (threads, stream) in [(1, true), (0, true), (0, false)] {
            let c = run(m, n, k, &a, &b, threads, stream);
            assert!(
                c.iter().zip(&base).all(|(x, y)| x.to_bits() == y.to_bits()),
                "m={m} n={n} k={k} threads={threads} stream={stream}"
            );
        }
        // Against an f64 reference: |err| ≤ 2(k+2)·2⁻²⁴·Σ|ab| (Σ|ab| ≤ 4k).
        let tol = 2.0 * (k as f64 + 2.0) * 4.0 * k as f64 / 16777216.0;
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
                let d = (base[i * n + j] as f64 - r).abs();
                assert!(d <= tol, "m={m} n={n} k={k} at ({i},{j}): {d} > {tol}");
            }
        }
    }
}

/// Through the JIT: a linear-layer-sized matmul with a single row block
/// (the streamed path) and one with several (the blocked path), on one
/// thread and on the pool, against the interpreter.
#[test]
fn jit_matmul_both_blockings_match_interpreter() {
    let mut rng = Rng(23);
    for (m, k, n) in [(100usize, 300usize, 70usize), (150, 300, 70)] {
        let mut b = builder("mm");
        let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
        let y = b.param("y", tt(Dtype::F32, &["K", "N"]));
        b.returns(tt(Dtype::F32, &["M", "N"]));
        let r = b.op(Op::Matmul(x, y));
        let f = b.finish(r);
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::F32, &[m, k], false).into(),
            random(&mut rng, Dtype::F32, &[k, n], false).into(),
        ];
        let want = interp(&f, &args).unwrap();
        let atol = 2.0 * (k as f32 + 2.0) * 16.0 * k as f32 / 16777216.0;
        for threads in [1, 0] {
            let opts = JitOptions {
                threads,
                ..JitOptions::default()
            };
            let got = jit(&f, &args, opts);
            assert_close(
                &format!("matmul {m}x{k}x{n} threads={threads}"),
                &got,
                &want,
                0.0,
                atol,
            );
        }
    }
}

/// The AVX-512 16 × 16 transpose used to pack PyTorch-layout weights.
#[cfg(target_arch = "x86_64")]
#[test]
fn transpose16_is_a_transpose() {
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return;
    }
    let src: Vec<f32> = (0..16 * 21).map(|i| i as f32).collect();
    let mut dst = vec![-1f32; 16 * 40];
    // SAFETY: 16 rows at stride 21 inside `src`, 16 rows at stride 40 inside `dst`.
    unsafe { tc_llvm::matmul::transpose16(src.as_ptr(), 21, dst.as_mut_ptr(), 40) };
    for i in 0..16 {
        for c in 0..16 {
            assert_eq!(dst[i * 40 + c], src[c * 21 + i], "({i},{c})");
        }
        assert!(dst[i * 40 + 16..i * 40 + 40].iter().all(|&x| x == -1.0));
    }
}

/// Transposed B (a PyTorch-layout weight read through strides) on both
/// blockings: bit-identical to the same product with B materialized.
#[test]
fn transposed_b_packing_matches_contiguous() {
    let mut s = 99u64;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    };
    for (m, n, k) in [(20usize, 70usize, 300usize), (150, 48, 33), (128, 96, 272)] {
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let w: Vec<f32> = (0..n * k).map(|_| next()).collect(); // [n, k]
        let mut bt = vec![0f32; k * n]; // [k, n] = wᵀ
        for j in 0..n {
            for p in 0..k {
                bt[p * n + j] = w[j * k + p];
            }
        }
        let want = run(m, n, k, &a, &bt, 1, true);
        for threads in [1, 0] {
            let mut c = vec![f32::NAN; m * n];
            // SAFETY: the views cover `a` and `w`; `c` is m × n.
            unsafe {
                sgemm(
                    m,
                    n,
                    k,
                    View::new(a.as_ptr(), k, 1),
                    View::new(w.as_ptr(), 1, k),
                    c.as_mut_ptr(),
                    threads,
                )
                .unwrap();
            }
            assert!(
                c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()),
                "m={m} n={n} k={k} threads={threads}"
            );
        }
    }
}
