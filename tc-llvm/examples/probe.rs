//! Developer probe: print the optimised IR / assembly of generated kernels
//! and time their pieces. `cargo run --release -p tc-llvm --example probe -- asm-ukr`.
use std::time::Instant;

fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    match what.as_str() {
        "asm-ukr" => {
            let ir = tc_llvm::matmul::ukernel_ir(16);
            println!("{}", tc_llvm::jit::assembly(&ir).unwrap());
        }
        "sgemm" => {
            let n: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(512);
            let a = vec![1.0f32; n * n];
            let b = vec![1.0f32; n * n];
            let mut c = vec![0f32; n * n];
            for _ in 0..3 {
                let t0 = Instant::now();
                unsafe {
                    tc_llvm::matmul::sgemm(n, n, n, tc_llvm::matmul::View::new(a.as_ptr(), n, 1), tc_llvm::matmul::View::new(b.as_ptr(), n, 1), c.as_mut_ptr(), 1).unwrap();
                }
                let t = t0.elapsed().as_secs_f64();
                println!("n={n}: {:.2} ms, {:.1} GFLOP/s", t * 1e3, 2.0 * (n as f64).powi(3) / t / 1e9);
            }
        }
        _ => eprintln!("asm-ukr | sgemm N"),
    }
}
