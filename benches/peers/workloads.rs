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
