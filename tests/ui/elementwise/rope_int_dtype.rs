use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn rotate(x: Tensor![i32; S, 8], cos: Tensor![i32; S, 4], sin: Tensor![i32; S, 4]) -> Tensor![i32; S, 8] {
    rope_halves(x, cos, sin)
}

fn main() {}
