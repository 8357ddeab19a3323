//! The MiniLM peer benchmark's workloads and token ids, one definition for
//! every Rust side (`examples/peer_bench.rs` for tc, `benches/peers/candle`
//! for candle; `ort_bench.py` and `torch_bench.py` compute the same ids).

/// `(sentences, tokens per sentence)`.
pub const WORKLOADS: [(usize, usize); 3] = [(1, 10), (32, 16), (8, 128)];

/// Row-major `[b, s]` ids: [CLS] … [SEP] around a fixed spread.
pub fn ids(b: usize, s: usize) -> Vec<u32> {
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
    ids
}

/// `(batch, tokens)` of the GPT-2-small block rows (tc, PyTorch and ONNX
/// Runtime; `benches/peers/gpt2_block.py` has the same list).
#[allow(dead_code)] // candle has no GPT-2 block row
pub const GPT2_WORKLOADS: [(usize, usize); 3] = [(1, 32), (1, 128), (8, 128)];

/// Row-major `[b, s, 768]` block input: `((i · 7919) mod 2001 − 1000) / 1000`
/// for flat index `i`, computed in f64 and rounded once to f32, so NumPy
/// makes the same bits.
#[allow(dead_code)]
pub fn gpt2_input(b: usize, s: usize) -> Vec<f32> {
    (0..b * s * 768)
        .map(|i| (((i * 7919) % 2001) as f64 - 1000.0) / 1000.0)
        .map(|v| v as f32)
        .collect()
}
