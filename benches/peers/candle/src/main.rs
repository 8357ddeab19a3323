//! candle side of the peer benchmark (`scripts/peer-bench.sh`, issue #15):
//! all-MiniLM-L6-v2 through `candle_transformers::models::bert::BertModel`
//! (CPU, f32) on the workloads of `examples/peer_bench.rs`, same token ids
//! (token type ids all zero, attention mask all ones), mean pooling with the
//! mask and L2 normalisation as sentence-transformers. One JSON line per
//! workload: median ms over `REPS` calls after three warm-up calls, and the
//! first values of the first embedding.
//!
//! `cargo run --release --manifest-path benches/peers/candle/Cargo.toml --
//! MODEL_DIR [REPS]` (threads: candle's, `RAYON_NUM_THREADS`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};

#[path = "../../workloads.rs"]
mod workloads;

use workloads::{ids, WORKLOADS};

fn load(dir: &Path, device: &Device) -> Result<BertModel> {
    let config: Config = serde_json::from_str(
        &std::fs::read_to_string(dir.join("config.json")).context("config.json")?,
    )?;
    let weights = dir.join("model.safetensors");
    // SAFETY: the file is not modified while mapped (a read-only model dir).
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, device)? };
    // This checkpoint's keys have no "bert." prefix ("embeddings.…",
    // "encoder.layer.N.…"); other BERT checkpoints have one. BertModel::load
    // probes for "bert" itself, but say plainly which layout we found.
    let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
        vb
    } else if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
        vb.pp("bert")
    } else {
        bail!("no BERT embeddings in {}", dir.display());
    };
    Ok(BertModel::load(vb, &config)?)
}

/// Mean pooling over the tokens with the mask, then L2 normalisation:
/// [b, s, h] -> [b, h].
fn embed(model: &BertModel, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let h = model.forward(ids, types, Some(mask))?;
    let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let summed = h.broadcast_mul(&m)?.sum(1)?;
    let count = m.sum(1)?.clamp(1e-9f32, f32::MAX)?;
    let pooled = summed.broadcast_div(&count)?;
    let norm = pooled.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?;
    Ok(pooled.broadcast_div(&norm.clamp(1e-12f32, f32::MAX)?)?)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .context("usage: candle-peer-bench MODEL_DIR [REPS]")?,
    );
    let reps: usize = args.next().map_or(Ok(10), |r| r.parse())?;
    let device = Device::Cpu;
    let model = load(&dir, &device)?;
    let threads = candle_core::utils::get_num_threads();
    // REPS = 0: a cold start (scripts/peer-bench.sh times the process):
    // one call of the first workload.
    let workloads = if reps == 0 { &WORKLOADS[..1] } else { &WORKLOADS[..] };
    for &(b, s) in workloads {
        let ids = Tensor::from_vec(ids(b, s), (b, s), &device)?;
        let types = ids.zeros_like()?;
        let mask = ids.ones_like()?;
        let t0 = Instant::now();
        let mut out = embed(&model, &ids, &types, &mask)?;
        let first = t0.elapsed().as_secs_f64() * 1e3;
        let mut times = vec![first];
        if reps > 0 {
            times.clear();
            for _ in 0..2 {
                out = embed(&model, &ids, &types, &mask)?;
            }
        }
        for _ in 0..reps {
            let t0 = Instant::now();
            out = embed(&model, &ids, &types, &mask)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let emb: Vec<f32> = out.get(0)?.to_vec1()?;
        println!(
            "{{\"system\": \"candle\", \"threads\": {threads}, \"b\": {b}, \"s\": {s}, \"ms\": {:.4}, \"emb\": {:?}}}",
            times[times.len() / 2],
            &emb[..4]
        );
    }
    Ok(())
}
