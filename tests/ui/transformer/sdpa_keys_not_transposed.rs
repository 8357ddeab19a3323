//! tc-serve's SmolLM2-135M attention (tc-serve/src/llama/model.rs) with one
//! deliberate bug: the keys reach `sdpa` as the projection lays them out,
//! positions first (`[B, KV, T, HD]`), where the op takes them head dim
//! first (`[B, KV, HD, T]`, the scores being `q·k`). `cargo build` names
//! the keys, the dim that differs, and a counterexample.

use tc::tensor_module;

#[tensor_module]
pub mod llama {
    use tc::Tensor;

    pub const KV: usize = 3;
    pub const G: usize = 3;
    pub const HD: usize = 64;

    #[tensor_fn]
    pub fn attention(
        q: Tensor![f32; B, KV, G * S, HD],
        k: Tensor![f32; B, KV, T, HD],
        v: Tensor![f32; B, KV, T, HD],
        mask: Tensor![f32; B, KV, G * S, T],
    ) -> Tensor![f32; B, KV, G * S, HD] {
        sdpa(q, k, v, mask, 0.125)
    }
}

fn main() {}
