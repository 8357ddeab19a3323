use tc::{tensor_fn, Tensor};

// Position ids from a padding mask (as RoBERTa computes them), without the
// cast: a bool mask has no sum.
#[tensor_fn]
pub fn positions(mask: Tensor![bool; B, S]) -> Tensor![i64; B, S] {
    cumsum(mask, 1)
}

fn main() {}
