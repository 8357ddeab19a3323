//! An AVX2-only host, emulated on any x86-64 machine (`TC_HOST_AVX2=1`:
//! the kernels compiled without AVX-512, 256-bit vectors, 6 × 16 GEMM
//! tiles, none of the Rust AVX-512 paths): what such a host runs is what
//! these tests check, so it is not only compiled for but run in CI. The
//! GEMM's paths agree bit for bit (both blockings, A packed or in place,
//! ragged columns by masked kernels or a scratch tile, edge rows, two
//! K-blocks, threads) and with an f64 reference; every unary op at every
//! dtype and a linear layer through the JIT match the interpreter. One
//! test: the host is described once per process, before anything else.
//! (The whole suite also passes under `TC_HOST_AVX2=1`; see
//! docs/architecture.md.)
mod util;

use tc_core::ir::UnaryOp;
use tc_core::Dtype;
use tc_llvm::kernels::matmul::{set_a_in_place, set_column_kernels, set_stream_b};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

/// Every path of an `m × n × k` product against the blocked one with a
/// scratch tile for ragged columns, bit for bit, and that against f64.
fn gemm_paths_agree(m: usize, n: usize, k: usize, seed: u64) {
    set_stream_b(false);
    set_a_in_place(false);
    set_column_kernels(false);
    let (base, a, b) = guarded_sgemm(m, n, k, seed, 1);
    for threads in [1, 0] {
        for (stream, in_place, cols) in [
            (false, false, true),
            (true, false, true),
            (true, true, true),
            (true, true, false),
        ] {
            set_stream_b(stream);
            set_a_in_place(in_place);
            set_column_kernels(cols);
            let (c, ..) = guarded_sgemm(m, n, k, seed, threads);
            let same = c.iter().zip(&base).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "m={m} n={n} k={k} threads={threads} stream={stream} in_place={in_place} cols={cols}");
        }
    }
    set_stream_b(true);
    set_a_in_place(true);
    set_column_kernels(true);
    // |err| ≤ 2(k+2)·2⁻²⁴·Σ|ab|, Σ|ab| ≤ k/4.
    let tol = 2.0 * (k as f64 + 2.0) * (k as f64 / 4.0) / 16777216.0;
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

#[test]
fn an_avx2_host_runs_its_own_kernels_correctly() {
    std::env::set_var("TC_HOST_AVX2", "1");
    // A cache of its own: AVX2 kernels are other entries anyway (the
    // host's features are in their identity), kept apart from other runs.
    let dir = std::env::temp_dir().join(format!("tc-avx2-host-{}", std::process::id()));
    std::env::set_var("TC_KERNEL_CACHE", &dir);
    let host = tc_llvm::jit::host();
    assert!(!host.has_avx512() && !tc_llvm::host::avx512());
    assert!(!host.has("+avx512f") && host.features.split(',').all(|f| !f.starts_with("+avx512")));
    // n: whole 16-wide tiles, one and two vectors of 8 with a ragged
    // one; m: one row, an edge of the 6-row tile, in-place row counts,
    // the blocked path; k across two K-blocks.
    let ns = (1..=20).chain([31, 33, 47, 100]);
    for (i, n) in ns.enumerate() {
        for (j, &(m, k)) in [(1usize, 9usize), (7, 40), (16, 520), (150, 33)]
            .iter()
            .enumerate()
        {
            gemm_paths_agree(m, n, k, (i * 10 + j) as u64);
        }
    }
    let mut rng = Rng(23);
    for op in UnaryOp::ALL {
        for dt in Dtype::ALL.into_iter().filter(|&dt| op.admits(dt)) {
            let f = unary_fn(op, dt);
            let args: Vec<Arg> = vec![random(&mut rng, dt, &[3, 37], true).into()];
            let want = interp(&f, &args).unwrap();
            let got = jit(&f, &args, EXACT);
            assert_bits(
                &format!("{} at {dt} (exact)", op.name()),
                &got,
                &want,
                false,
            );
        }
    }
    let f = linear(false);
    for (m, kk, n) in [(1usize, 64usize, 40usize), (10, 384, 100), (33, 200, 64)] {
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::F32, &[m, kk], false).into(),
            random(&mut rng, Dtype::F32, &[n, kk], false).into(),
        ];
        let got = jit(&f, &args, JitOptions::default());
        let want = interp(&f, &args).unwrap();
        assert_close(&format!("linear {m} × {kk} × {n}"), &got, &want, 1e-4, 1e-3);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
