//! Decode-step cost by batch size: prefills N copies of a prompt, then
//! times batched `Model::step`s and prints ms per step and per row.
//!
//!   cargo run --release -p tc-serve --example step_bench -- --help
use std::time::Instant;

// The server's allocator (src/main.rs says why), so the steps cost what
// they cost there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use tc_serve::llama::model::{Model, StepSeq};

/// Decode-step cost by batch size.
#[derive(clap::Parser)]
struct Args {
    /// Fast numerics (8-bit activations, packed weights).
    #[arg(long)]
    fast: bool,
    /// Pool threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Timed steps per batch size (the first four are not counted).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(5..))]
    steps: u64,
    /// KV-cache element type: f32 or f16.
    #[arg(long, default_value = "f32")]
    kv_cache: tc_serve::llama::model::KvDtype,
    /// Batch sizes (rows per step).
    #[arg(default_values_t = [1usize, 4, 16])]
    rows: Vec<usize>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        fast,
        threads,
        steps,
        kv_cache,
        rows: ns,
    } = clap::Parser::parse();
    let steps = steps as usize;
    // Read by rayon when the pool is built: set before any thread exists.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    tc::llvm::threads::init();
    let jit = tc::llvm::Jit::global();
    // Steps time the optimized kernels: no quick tier to tier up from
    // while the timed steps run.
    jit.set_tiered(false);
    let mut cfg = jit.config();
    cfg.options.fast_quant = fast;
    // As the server and the example run: the shape-generic kernels (a
    // decoder's T changes every step).
    cfg.specialize_after = u32::MAX;
    jit.set_config(cfg);
    let (mut m, _file) = Model::load(&tc_serve::llama::model::default_model_path())?;
    m.kv_dtype = kv_cache;
    if fast {
        m.prepack_quantized();
    }
    let prompt: Vec<u32> = (0..40).map(|i| 100 + i * 7).collect();
    println!("| rows | ms/step (median) | min–max | ms/row |");
    println!("|---|---|---|---|");
    for &n in &ns {
        let mut caches = Vec::new();
        for _ in 0..n {
            let mut c = m.cache(prompt.len() + steps + 8)?;
            m.forward(&mut c, &prompt, 0)?;
            caches.push(c);
        }
        let mut times = Vec::new();
        for s in 0..steps {
            let mut batch: Vec<StepSeq<'_>> = caches
                .iter_mut()
                .map(|c| StepSeq {
                    cache: c,
                    tokens: &[200],
                    pos: prompt.len() + s,
                })
                .collect();
            let t0 = Instant::now();
            m.step(&mut batch)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let warm = &mut times[4..];
        warm.sort_by(f64::total_cmp);
        let med = warm[warm.len() / 2];
        println!(
            "| {n} | {med:.2} | {:.2}–{:.2} | {:.2} |",
            warm[0],
            warm[warm.len() - 1],
            med / n as f64
        );
    }
    Ok(())
}
