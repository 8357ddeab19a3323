use tc::{tensor_fn, Tensor};

// Position ids from an attention mask, as Hugging Face's RoBERTa and GPT-2
// (with left padding) compute them: cumsum(mask) · mask − 1 over tokens.
#[tensor_fn]
pub fn position_ids(mask: Tensor![i64; B, S]) -> Tensor![i64; B, S] {
    cumsum(mask, 1) * mask - 1
}

fn main() {
    let mask = tc::Tensor::from_vec(&[1, 5], vec![0i64, 0, 1, 1, 1]).unwrap();
    let p = position_ids(mask).unwrap();
    assert_eq!(p.to_vec::<i64>().unwrap(), vec![-1, -1, 0, 1, 2]);
}
