//! SmolLM2-135M's grouped-query attention over its KV cache (tc-serve's
//! `llama::attention`, tc-serve/src/llama/model.rs) written with the
//! fused op, beside the composition it replaces: the cache's first `T`
//! positions read in place, the `[G · S, T]` mask broadcast over batch and
//! key/value heads. Both give the same context.

use tc::{tensor_module, Tensor as T};

#[tensor_module]
pub mod llama {
    use tc::{Dim, Tensor};

    /// Key/value heads, query heads per key/value head, head width.
    pub const KV: usize = 3;
    pub const G: usize = 3;
    pub const HD: usize = 64;

    #[tensor_fn(requires(T <= C))]
    pub fn fused(
        q: Tensor![f32; B, KV, G * S, HD],
        kc: Tensor![f32; B, KV, HD, C],
        vc: Tensor![f32; B, KV, C, HD],
        t: Dim![T],
        mask: Tensor![f32; G * S, T],
    ) -> Tensor![f32; B, KV, G * S, HD] {
        let m = broadcast(reshape(mask, [1, 1, G * S, T]), [B, KV, G * S, T]);
        sdpa(q, slice(kc, 3, 0, T), slice(vc, 2, 0, T), m, 0.125)
    }

    #[tensor_fn(requires(T <= C))]
    pub fn composed(
        q: Tensor![f32; B, KV, G * S, HD],
        kc: Tensor![f32; B, KV, HD, C],
        vc: Tensor![f32; B, KV, C, HD],
        t: Dim![T],
        mask: Tensor![f32; G * S, T],
    ) -> Tensor![f32; B, KV, G * S, HD] {
        let m = broadcast(reshape(mask, [1, 1, G * S, T]), [B, KV, G * S, T]);
        let scores = matmul(q, slice(kc, 3, 0, T)) * 0.125 + m;
        let e = exp(scores - broadcast(max_keepdims(scores, [3]), [B, KV, G * S, T]));
        let p = e / broadcast(sum_keepdims(e, [3]), [B, KV, G * S, T]);
        matmul(p, slice(vc, 2, 0, T))
    }
}

fn main() {
    let (c, t) = (8, 5);
    let wave = |n: usize, k: f32| (0..n).map(|i| ((i as f32) * k).sin()).collect::<Vec<f32>>();
    let q = T::from_vec(&[1, 3, 3, 64], wave(3 * 3 * 64, 0.37)).unwrap();
    let kc = T::from_vec(&[1, 3, 64, c], wave(3 * 64 * c, 0.11)).unwrap();
    let vc = T::from_vec(&[1, 3, c, 64], wave(3 * c * 64, 0.53)).unwrap();
    let mask = T::from_vec(&[3, t], vec![0.0f32; 3 * t]).unwrap();
    let a = llama::fused(q.clone(), kc.clone(), vc.clone(), t, mask.clone()).unwrap();
    let b = llama::composed(q, kc, vc, t, mask).unwrap();
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-5, "fused and composed differ by {worst}");
}
