use tc::{tensor_fn, Tensor};

// Section 3 §8.2 at the return: B >= 1 does not imply B >= 16.
#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S where B >= 16] {
    relu(x)
}

fn main() {}
