use tc::{tensor_fn, Tensor};

// A running sum over "the last axis" written as axis 2 of a rank-2 tensor.
#[tensor_fn]
pub fn running(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    cumsum(x, 2)
}

fn main() {}
