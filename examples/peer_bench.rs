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

const WORKLOADS: [(usize, usize); 3] = [(1, 10), (32, 16), (8, 128)];

/// The ids `ort_bench.py` uses: [CLS] … [SEP] around a fixed spread.
fn batch(b: usize, s: usize) -> Batch {
    let mut ids = Vec::with_capacity(b * s);
    for i in 0..b {
        for j in 0..s {
            ids.push(match j {
                0 => 101,
                _ if j == s - 1 => 102,
                _ => 1000 + ((i * 7919 + j * 104729) % 28000) as u32,
            });
        }
    }
    Batch {
        b,
        s,
        ids,
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
