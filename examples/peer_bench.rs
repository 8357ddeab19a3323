//! tc side of the peer benchmark (`scripts/peer-bench.sh`, issue #15), one
//! JSON line per workload (median ms over `REPS` calls after three warm-up
//! calls, and a few output values, which the script compares across
//! systems):
//! - `minilm`: all-MiniLM-L6-v2 on the workloads of
//!   `benches/peers/ort_bench.py`, same token ids; the values are the first
//!   of the first embedding;
//! - `minilm-int8`: the same with int8 products (`Precision::Int8`: i8
//!   weights with a scale per output column, activations quantized per
//!   row, outlier channels in F32), reported as system `tc-int8`;
//! - `minilm-q8_0`: the same with `Q8_0` products (`Precision::Q8_0`:
//!   weights and activations in 32-element blocks), system `tc-q8_0`;
//! - `minilm-bf16`: the same with BF16 products (`Precision::Bf16`),
//!   reported as system `tc-bf16`;
//! - `gpt2-block`: block 0 of `models/gpt2-seed0` (`examples/gpt2_block`)
//!   on the inputs of `benches/peers/gpt2_block.py`; the values are the
//!   first four of the first and of the last token.
//!
//! `cargo run --release --example peer_bench -- REPS [minilm|minilm-int8|minilm-q8_0|minilm-bf16|gpt2-block]`
//! (default: `TC_PEER_MODEL`, else `minilm`; threads: the rayon pool,
//! `RAYON_NUM_THREADS`).

#[path = "../tc-serve/src/minilm.rs"]
mod model;

use std::time::Instant;

use tc::Tensor;

use model::{model_dir, Batch, BoxError, MiniLm, Precision};

#[path = "gpt2_block/model.rs"]
mod gpt2_block;

#[path = "../benches/peers/workloads.rs"]
mod workloads;

use workloads::{gpt2_input, ids, GPT2_WORKLOADS, WORKLOADS};

/// The batch of `ort_bench.py`'s ids ([`ids`]), no padding.
fn batch(b: usize, s: usize) -> Batch {
    Batch {
        b,
        s,
        ids: ids(b, s),
        mask: vec![1.0; b * s],
    }
}

/// Median of `reps` timed calls of `f` after three warm-up calls (and
/// every kernel they compiled raised to the optimized tier), and the last
/// call's result.
fn time<T>(reps: usize, mut f: impl FnMut() -> Result<T, BoxError>) -> Result<(f64, T), BoxError> {
    let mut out = f()?;
    for _ in 0..2 {
        out = f()?;
    }
    tc::llvm::Jit::global().finish_tiers();
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        out = f()?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], out))
}

/// `TC_PEER_WORKLOAD=BxS` runs that workload only (for profiling one).
fn wanted((b, s): (usize, usize)) -> bool {
    std::env::var("TC_PEER_WORKLOAD").map_or(true, |w| w == format!("{b}x{s}"))
}

fn print_row(system: &str, model: &str, (b, s): (usize, usize), ms: f64, values: &[f32]) {
    let threads = rayon::current_num_threads();
    println!(
        "{{\"system\": \"{system}\", \"model\": \"{model}\", \"threads\": {threads}, \"b\": {b}, \"s\": {s}, \"ms\": {ms:.4}, \"emb\": {values:?}}}"
    );
}

fn minilm(reps: usize, precision: Precision) -> Result<(), BoxError> {
    let system = match precision {
        Precision::F32 => "tc",
        Precision::Int8 => "tc-int8",
        Precision::Q8_0 => "tc-q8_0",
        Precision::Bf16 => "tc-bf16",
    };
    let m = MiniLm::load_with(&model_dir()?, precision)?;
    if reps == 0 {
        return cold(&m, system);
    }
    for (b, s) in WORKLOADS.into_iter().filter(|&w| wanted(w)) {
        let batch = batch(b, s);
        let (ms, out) = time(reps, || Ok(m.embed_batch(&batch)?))?;
        let emb: Vec<f32> = out.to_vec()?;
        print_row(system, "minilm", (b, s), ms, &emb[..4]);
    }
    Ok(())
}

/// `REPS = 0`: a cold start, what `scripts/peer-bench.sh` times from
/// outside (process start to exit): the model loaded, then one call of the
/// first workload, whose result is printed.
fn cold(m: &MiniLm, system: &str) -> Result<(), BoxError> {
    let (b, s) = WORKLOADS[0];
    let t0 = Instant::now();
    let out = m.embed_batch(&batch(b, s))?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let emb: Vec<f32> = out.to_vec()?;
    print_row(system, "minilm", (b, s), ms, &emb[..4]);
    Ok(())
}

fn gpt2(reps: usize) -> Result<(), BoxError> {
    let dir = std::env::var("TC_GPT2_DIR").unwrap_or_else(|_| "models/gpt2-seed0".into());
    let bytes = std::fs::read(format!("{dir}/model.safetensors"))?;
    let w = gpt2_block::Weights::from_safetensors(&bytes, 0)?;
    drop(bytes);
    for (b, s) in GPT2_WORKLOADS.into_iter().filter(|&w| wanted(w)) {
        let x = Tensor::from_vec(&[b, s, 768], gpt2_input(b, s))?;
        let (ms, out) = time(reps, || Ok(w.run(x.clone())?))?;
        let y: Vec<f32> = out.to_vec()?;
        let last = y.len() - 768;
        let values: Vec<f32> = y[..4].iter().chain(&y[last..last + 4]).copied().collect();
        print_row("tc", "gpt2-block", (b, s), ms, &values);
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map_or(Ok(10), |r| r.parse())?;
    let model = args.next().or_else(|| std::env::var("TC_PEER_MODEL").ok());
    match model.as_deref().unwrap_or("minilm") {
        "minilm" => minilm(reps, Precision::F32),
        "minilm-int8" => minilm(reps, Precision::Int8),
        "minilm-q8_0" => minilm(reps, Precision::Q8_0),
        "minilm-bf16" => minilm(reps, Precision::Bf16),
        "gpt2-block" => gpt2(reps),
        other => Err(format!(
            "unknown model `{other}` (minilm, minilm-int8, minilm-q8_0, minilm-bf16, gpt2-block)"
        )
        .into()),
    }
}
