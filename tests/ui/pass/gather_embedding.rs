use tc::{tensor_fn, Tensor};

// MiniLM's embedding layer: word + position embeddings looked up by id.
#[tensor_fn]
pub fn embed(
    words: Tensor![f32; V, D],
    positions: Tensor![f32; P, D],
    tokens: Tensor![i64; B, S],
    pos: Tensor![i64; S],
) -> Tensor![f32; B, S, D] {
    let w = gather(words, tokens);
    let p = broadcast(gather(positions, pos), [B, S, D]);
    w + p
}

fn main() {
    let words = tc::Tensor::from_vec(&[3, 2], vec![0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0]).unwrap();
    let positions = tc::Tensor::from_vec(&[2, 2], vec![0.5f32, 0.5, 0.25, 0.25]).unwrap();
    let tokens = tc::Tensor::from_vec(&[1, 2], vec![2i64, 0]).unwrap();
    let pos = tc::Tensor::from_vec(&[2], vec![0i64, 1]).unwrap();
    let out = embed(words.clone(), positions.clone(), tokens, pos.clone()).unwrap();
    assert_eq!(out.shape(), &[1, 2, 2]);
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![20.5, 21.5, 0.25, 1.25]);
    // An id past the vocabulary is a typed error naming it, not a read.
    let bad = tc::Tensor::from_vec(&[1, 2], vec![0i64, 3]).unwrap();
    let e = embed(words, positions, bad, pos).unwrap_err();
    assert!(matches!(e, tc::Error::Rule(tc::core::concrete::RuleError::IndexOutOfRange { index: 3, bound: 3, .. })), "{e}");
}
