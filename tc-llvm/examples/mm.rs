//! Micro-benchmark of the f32 sgemm (1 thread), for tuning:
//! `cargo run --release -p tc-llvm --example mm` (TC_MM_KC/MC/NC/MR apply).
use tc_llvm::kernels::matmul::{set_stream_b, sgemm, View};

fn main() {
    // `TC_MM_BT=1` reads B as the transpose of
    // an [n, k] matrix (PyTorch-layout weights).
    let bt = std::env::var("TC_MM_BT").is_ok_and(|v| v != "0");
    let cold = std::env::var("MM_COLD").is_ok_and(|v| v != "0");
    let mut flush = vec![0u64; if cold { 8 << 20 } else { 0 }];
    // `MM_N=1024`: only the square case of that size.
    let only: Option<usize> = std::env::var("MM_N").ok().and_then(|v| v.parse().ok());
    let square = only.map(|n| [(n, n, n)]);
    let cases: &[(usize, usize, usize)] = if let Some(sq) = &square {
        sq
    } else {
        &[
            (512, 512, 512),
            (1024, 1024, 1024),
            (128, 3072, 768),
            (128, 768, 3072),
            (128, 128, 128),
            (16, 1536, 384),
            (32, 3072, 768),
        ]
    };
    for &(m, n, k) in cases {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0f32; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let budget: f64 = std::env::var("MM_GFLOP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2.0);
        let reps = ((budget * 1e9 / flops) as usize).clamp(3, 200);
        let mut times = [Vec::new(), Vec::new()];
        for r in 0..2 * reps {
            set_stream_b(r % 2 == 0);
            if cold {
                // Evict A and B from the caches, as another program's
                // work between two calls would (`MM_COLD=1`).
                for (i, x) in flush.iter_mut().enumerate() {
                    *x = x.wrapping_add(i as u64);
                }
                std::hint::black_box(&flush);
            }
            let t = std::time::Instant::now();
            // SAFETY: the views cover the allocations.
            unsafe {
                sgemm(
                    m,
                    n,
                    k,
                    View::new(a.as_ptr(), k, 1),
                    if bt {
                        View::new(b.as_ptr(), 1, k)
                    } else {
                        View::new(b.as_ptr(), n, 1)
                    },
                    c.as_mut_ptr(),
                    &tc_llvm::ctx::ExecCtx::on_this_thread(1),
                )
                .unwrap();
            }
            times[r % 2].push(t.elapsed().as_secs_f64());
        }
        for (name, t) in ["stream", "blocked"].iter().zip(times.iter_mut()) {
            t.sort_by(f64::total_cmp);
            let (best, med) = (t[0], t[t.len() / 2]);
            println!(
                "m={m} n={n} k={k} {name:8}: best {:.3} ms ({:.1} GFLOP/s), median {:.3} ms ({:.1} GFLOP/s)",
                best * 1e3,
                flops / best / 1e9,
                med * 1e3,
                flops / med / 1e9
            );
        }
    }
}
