//! tc side of the peer benchmark (`scripts/peer-bench.sh`, issue #15):
//! all-MiniLM-L6-v2 on the workloads of `benches/peers/ort_bench.py`, same
//! token ids, one JSON line per workload (median ms over `REPS` calls after
//! three warm-up calls, and the first values of the first embedding, which
//! the script compares across systems).
//!
//! `cargo run --release --example peer_bench -- REPS` (threads: the rayon
//! pool, `RAYON_NUM_THREADS`).

#[path = "minilm/model.rs"]
mod model;

use std::time::Instant;

use model::{model_dir, Batch, BoxError, MiniLm};

#[path = "../benches/peers/workloads.rs"]
mod workloads;

use workloads::{ids, WORKLOADS};

/// The batch of `ort_bench.py`'s ids ([`ids`]), no padding.
fn batch(b: usize, s: usize) -> Batch {
    Batch {
        b,
        s,
        ids: ids(b, s),
        mask: vec![1.0; b * s],
    }
}

fn main() -> Result<(), BoxError> {
    let reps: usize = std::env::args().nth(1).map_or(Ok(10), |r| r.parse())?;
    let m = MiniLm::load(&model_dir()?)?;
    let threads = rayon::current_num_threads();
    for (b, s) in WORKLOADS {
        let batch = batch(b, s);
        let mut out = m.embed_batch(&batch)?;
        for _ in 0..2 {
            out = m.embed_batch(&batch)?;
        }
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            out = m.embed_batch(&batch)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let emb: Vec<f32> = out.to_vec()?;
        println!(
            "{{\"system\": \"tc\", \"threads\": {threads}, \"b\": {b}, \"s\": {s}, \"ms\": {:.4}, \"emb\": {:?}}}",
            times[times.len() / 2],
            &emb[..4]
        );
    }
    Ok(())
}
