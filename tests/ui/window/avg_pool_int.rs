use tc::{tensor_fn, Tensor};

// Smoothing quantized activations with an average pool: an average needs
// a float.
#[tensor_fn]
pub fn smooth(x: Tensor![i8; B, C, L]) -> Tensor![i8; B, C, L] {
    avg_pool1d(x, 3, 1, 1)
}

fn main() {}
