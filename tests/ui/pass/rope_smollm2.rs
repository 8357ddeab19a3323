//! SmolLM2-135M's rotation as tc-serve's model writes it (`rotate_pairs`,
//! tc-serve/src/llama/model.rs): `[S, HALF]` tables broadcast over batch
//! and heads, then `rope_pairs`; and Hugging Face's halves layout. Run on
//! a quarter turn, where every rotated value is exact.

use tc::{tensor_module, Tensor as T};

#[tensor_module]
pub mod llama {
    use tc::Tensor;

    /// Head width.
    pub const HD: usize = 4;
    /// Half a head: RoPE's rotated pairs.
    pub const HALF: usize = 2;

    #[tensor_fn]
    pub fn rotate_pairs(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let c = broadcast(reshape(cos, [1, S, 1, HALF]), [B, S, N, HALF]);
        let s = broadcast(reshape(sin, [1, S, 1, HALF]), [B, S, N, HALF]);
        rope_pairs(x, c, s)
    }

    #[tensor_fn]
    pub fn rotate_halves(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let c = broadcast(reshape(cos, [1, S, 1, HALF]), [B, S, N, HALF]);
        let s = broadcast(reshape(sin, [1, S, 1, HALF]), [B, S, N, HALF]);
        rope_halves(x, c, s)
    }
}

fn main() {
    let x = T::from_vec(&[1, 1, 1, 4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let cos = T::from_vec(&[1, 2], vec![0.0f32, 1.0]).unwrap();
    let sin = T::from_vec(&[1, 2], vec![1.0f32, 0.0]).unwrap();
    // Pair (1, 2) turns a quarter, pair (3, 4) stays.
    let r = llama::rotate_pairs(x.clone(), cos.clone(), sin.clone()).unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![-2.0, 1.0, 3.0, 4.0]);
    // Pairs (1, 3) and (2, 4): the first turns, the second stays.
    let r = llama::rotate_halves(x, cos, sin).unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![-3.0, 2.0, 1.0, 4.0]);
}
