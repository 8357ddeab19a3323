use tc::{tensor_fn, Tensor};

// Section 3 §8.5: rank is invariant; reshape explicitly.
#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S, 1] {
    x
}

fn main() {}
