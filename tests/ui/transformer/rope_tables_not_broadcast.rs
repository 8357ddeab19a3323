//! tc-serve's SmolLM2-135M rotation (`rotate_pairs` in
//! tc-serve/src/llama/model.rs) with one deliberate bug: the `[S, HALF]`
//! tables are reshaped to `[1, S, 1, HALF]` but reach `rope_pairs` without
//! their broadcast over batch and heads. The op broadcasts nothing
//! implicitly, so `cargo build` names the first dimension that differs,
//! with its counterexample.

use tc::tensor_module;

#[tensor_module]
pub mod llama {
    use tc::Tensor;

    /// Head width.
    pub const HD: usize = 64;
    /// Half a head: RoPE's rotated pairs.
    pub const HALF: usize = 32;

    #[tensor_fn]
    pub fn rotate_pairs(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let c = reshape(cos, [1, S, 1, HALF]);
        let s = reshape(sin, [1, S, 1, HALF]);
        rope_pairs(x, c, s)
    }
}

fn main() {}
