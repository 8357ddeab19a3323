//! Sentence embeddings with all-MiniLM-L6-v2 written as tensor fns.
//!
//! `cargo run --release --example minilm -- "sentence one" "sentence two" …`
//! prints the embedding dimension, the cosine-similarity matrix (4 decimals)
//! and the time per sentence. The weights are fetched on first use by
//! `scripts/fetch-minilm.sh` into `models/all-MiniLM-L6-v2/`.

#[path = "../tc-serve/src/minilm.rs"]
mod model;

use std::time::Instant;

use model::{cosine, model_dir, BoxError, MiniLm};

fn main() -> Result<(), BoxError> {
    let mut sentences: Vec<String> = std::env::args().skip(1).collect();
    if sentences.is_empty() {
        sentences = [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
            "A woman is playing violin.",
        ]
        .map(String::from)
        .to_vec();
    }
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let t = Instant::now();
    let model = MiniLm::load(&model_dir()?)?;
    let load = t.elapsed();

    // The first call reads the tokenizer and loads (or compiles) the
    // kernels; the second packs the weights and keeps them (once per
    // process, as ONNX Runtime prepacks at session creation); later calls
    // are the steady state.
    let t = Instant::now();
    let emb = model.embed(&refs)?;
    let first = t.elapsed();
    let t = Instant::now();
    let again = model.embed(&refs)?;
    let second = t.elapsed();
    assert_eq!(emb, again, "embedding is deterministic");
    let mut steady = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let e = model.embed(&refs)?;
        steady.push(t.elapsed());
        assert_eq!(emb, e, "embedding is deterministic");
    }
    steady.sort();

    println!("embedding dimension: {}", emb[0].len());
    println!("cosine similarity:");
    for (i, a) in emb.iter().enumerate() {
        let row: Vec<String> = emb
            .iter()
            .map(|b| format!("{:7.4}", cosine(a, b)))
            .collect();
        println!("  [{i}] {}   {}", row.join(" "), refs[i]);
    }
    let n = refs.len() as f64;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3 / n;
    println!(
        "time per sentence: {:.1} ms first call (reads the tokenizer, loads or compiles the kernels), {:.1} ms second \
         (packs the weights, once per process), {:.1} ms after (median of 5); model load {:.0} ms",
        ms(first),
        ms(second),
        ms(steady[2]),
        load.as_secs_f64() * 1e3
    );
    Ok(())
}
