//! Row-major B operands, rows a page or more apart (GPT-2's `[768, 3072]`
//! weights) or less (its `[3072, 768]` weight, whose 24 panels split on
//! the pool into visits of fewer than four; a narrow ragged one): packing
//! them prefetches rows ahead (`matmul::PACK_AHEAD`), at any stride, on
//! every path that packs B per call. The
//! products must be those of an f64 reference within the documented f32
//! tolerance, with the ragged last panel masked and nothing written past
//! C, at K-block counts that leave fewer rows than the prefetch distance,
//! exactly that many, and more (two K-blocks).
mod util;

use tc_llvm::kernels::matmul::{set_stream_b, KC};
use util::guarded_sgemm;

/// `|c − ref| ≤ 1e-5 · Σ|a·b|` per element (the f32 products' bound used
/// throughout the matmul tests).
fn check(m: usize, n: usize, k: usize, c: &[f32], a: &[f32], b: &[f32], what: &str) {
    for i in 0..m {
        for j in 0..n {
            let (mut exact, mut mag) = (0f64, 0f64);
            for p in 0..k {
                let t = a[i * k + p] as f64 * b[p * n + j] as f64;
                exact += t;
                mag += t.abs();
            }
            let got = c[i * n + j] as f64;
            assert!(
                (got - exact).abs() <= 1e-5 * mag + 1e-30,
                "{what}: m={m} n={n} k={k} ({i}, {j}): {got} vs {exact}"
            );
        }
    }
}

#[test]
fn wide_row_major_b_packs_exactly() {
    // n: exactly a page per row, a ragged last panel of one vector and of
    // two, 3 KiB rows, a narrow ragged B; k: no row ahead, exactly the
    // distance, past it, two K-blocks.
    let ns = [1024usize, 1041, 1055, 768, 100];
    let ks = [3usize, 8, 9, 40, KC + 5];
    let ms = [1usize, 10, 14, 32, 150];
    for (si, &n) in ns.iter().enumerate() {
        for &k in &ks {
            for &m in &ms {
                if m * k > 32 * (KC + 5) {
                    continue;
                }
                for stream in [true, false] {
                    for threads in [1, 0] {
                        set_stream_b(stream);
                        let seed = (si * 10_000 + k * 10 + m) as u64;
                        let (c, a, b) = guarded_sgemm(m, n, k, seed, threads);
                        set_stream_b(true);
                        let what = format!("stream={stream} threads={threads}");
                        check(m, n, k, &c, &a, &b, &what);
                    }
                }
            }
        }
    }
}
