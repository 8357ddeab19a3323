//! Parses the real SmolLM2-135M Q4_1 file when it has been fetched
//! (`scripts/fetch-smollm2.sh`); skips otherwise.

use tc_quant::{dequantize, Format, GgmlType, Gguf};

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
);

#[test]
fn smollm2_q4_1_metadata_and_tensors() {
    let Ok(bytes) = std::fs::read(MODEL) else {
        println!("skipped: model not fetched");
        return;
    };
    let g = Gguf::parse(&bytes).expect("parses");
    assert_eq!(g.str("general.architecture").unwrap(), "llama");
    assert_eq!(g.u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.u32("llama.embedding_length").unwrap(), 576);
    assert!(g.tensors().len() >= 211, "{} tensors", g.tensors().len());
    let emb = g.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.kind, GgmlType::Q8_0);
    assert_eq!(emb.shape_row_major(), [49152, 576]);
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.kind, GgmlType::Q4_1);
    assert_eq!(q.shape_row_major(), [576, 576]);
    assert_eq!(g.tensor("output_norm.weight").unwrap().kind, GgmlType::F32);
    let tokens = g.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    // Every quantized tensor decodes to finite values.
    for t in g.tensors() {
        if let Some(f) = Format::from_ggml(t.kind) {
            let mut out = vec![0f32; t.n_elements() as usize];
            dequantize(f, g.tensor_data(t), &mut out).unwrap();
            assert!(out.iter().all(|v| v.is_finite()), "{}", t.name);
        }
    }
    let q41 = g
        .tensors()
        .iter()
        .filter(|t| t.kind == GgmlType::Q4_1)
        .count();
    println!(
        "{} tensors, {q41} Q4_1, data at {}",
        g.tensors().len(),
        g.data_offset()
    );
}
