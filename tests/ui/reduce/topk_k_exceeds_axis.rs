use tc::{tensor_fn, Dim, Tensor};

// GPT-2's top-k sampler: the k best logits over the vocabulary. Without
// `requires(K <= V)` nothing says k fits.
#[tensor_fn]
pub fn candidates(logits: Tensor![f32; B, V], k: Dim![K]) -> Tensor![f32; B, K] {
    topk(logits, K, 1)
}

fn main() {}
