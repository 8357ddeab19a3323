use tc::{tensor_fn, Dim, Tensor};

// GPT-2's top-k sampler step: the k best token ids per row, K ≤ V stated.
#[tensor_fn(requires(K <= V))]
pub fn candidates(logits: Tensor![f32; B, V], k: Dim![K]) -> Tensor![i64; B, K] {
    topk_indices(logits, K, 1)
}

fn main() {
    let logits = tc::Tensor::from_vec(&[1, 5], vec![0.5f32, 2.0, -1.0, 2.0, 7.0]).unwrap();
    let ids = candidates(logits.clone(), 3).unwrap();
    assert_eq!(ids.to_vec::<i64>().unwrap(), vec![4, 1, 3]);
    // K past V breaks the `requires`: a typed error, not a read.
    assert!(candidates(logits, 6).is_err());
}
