use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn frame(x: Tensor![f32; B, S]) -> Tensor![f32; B, S + 2] {
    pad(x, 1, 1, 1, 0)
}

fn main() {}
