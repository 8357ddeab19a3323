//! A GPT-2-small-sized decoder block (D = 768, 12 heads, MLP 3072, causal mask
//! via `select`, layer norm, residuals) written as tensor fns. `cargo build`
//! proved every shape in it; this program runs it on random weights for a
//! few batch sizes and sequence lengths and reports first-call (compile) vs
//! cached-call time and the kernel-cache statistics.
//!
//! `cargo run --release --example transformer [-- B:S B:S …]` (default 1:32 2:64 1:128)
//!
//! Run it twice to see a warm start: the second process links the kernels
//! from the persistent kernel cache (`TC_KERNEL_CACHE`, default
//! `~/.cache/tc/kernels`) instead of compiling them.

use std::time::Instant;

#[path = "gpt2_block/model.rs"]
mod model;

use model::{gpt2, Weights};
use tc::Tensor;

/// A small deterministic PRNG (xorshift64*) so runs are reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| self.next_f32() * scale).collect();
        Tensor::from_vec(shape, data).expect("shape matches data")
    }
}

fn weights(rng: &mut Rng) -> Weights {
    let (d, m) = (768, 3072);
    let ones = Tensor::from_vec(&[d], vec![1.0f32; d]).expect("ones");
    let zeros = Tensor::from_vec(&[d], vec![0.0f32; d]).expect("zeros");
    Weights {
        t: [
            ones.clone(),
            zeros.clone(),
            rng.tensor(&[d, 3 * d], 0.02),
            rng.tensor(&[3 * d], 0.02),
            rng.tensor(&[d, d], 0.02),
            rng.tensor(&[d], 0.02),
            ones,
            zeros,
            rng.tensor(&[d, m], 0.02),
            rng.tensor(&[m], 0.02),
            rng.tensor(&[m, d], 0.02),
            rng.tensor(&[d], 0.02),
        ],
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cases: Vec<(usize, usize)> = Vec::new();
    for a in std::env::args().skip(1) {
        let (b, s) = a.split_once(':').ok_or("cases are B:S, e.g. 2:64")?;
        cases.push((b.parse()?, s.parse()?));
    }
    if cases.is_empty() {
        cases = vec![(1, 32), (2, 64), (1, 128)];
    }
    println!("Proven at compile time (the checked signatures; every shape variable also");
    println!("carries the default refinement `α >= 1`, Section 2 §16):\n");
    for name in ["block", "attention", "causal_softmax"] {
        if let Some(f) = gpt2::tc_ir(name) {
            println!("{}\n", f.sig);
        }
    }
    println!("  backend: {:?}\n", tc::backend());

    let mut rng = Rng(0x5EED);
    let w = weights(&mut rng);
    // "cached": the median of five calls after the first two (the second
    // call of a process also packs the weights once, `tc_llvm::kernels::prepack`).
    println!(
        "{:>3} {:>5} {:>14} {:>14} {:>10}",
        "B", "S", "first call ms", "cached ms", "tokens/s"
    );
    for (b, s) in cases {
        let x = rng.tensor(&[b, s, 768], 1.0);
        let time = |f: &mut dyn FnMut() -> Result<Tensor, tc::Error>| {
            let t0 = Instant::now();
            f().map(|y| (y, t0.elapsed().as_secs_f64() * 1e3))
        };
        let (y1, first) = time(&mut || w.run(x.clone()))?;
        w.run(x.clone())?;
        let mut times = Vec::new();
        for _ in 0..5 {
            let (y, ms) = time(&mut || w.run(x.clone()))?;
            assert_eq!(y1, y, "cached kernels give the same bits");
            times.push(ms);
        }
        times.sort_by(f64::total_cmp);
        let cached = times[2];
        println!(
            "{b:>3} {s:>5} {first:>14.1} {cached:>14.1} {:>10.0}",
            (b * s) as f64 / (cached / 1e3)
        );
    }
    let st = tc::kernel_cache_stats();
    println!(
        "\nkernel cache: {} hits, {} misses, {} compiles ({} from the persistent cache; {:.0} ms compiling), {} evictions, {} interpreter fallbacks",
        st.hits, st.misses, st.compiles, st.disk_loads, st.compile_ms, st.evictions, st.fallbacks
    );
    Ok(())
}
