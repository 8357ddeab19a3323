use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S + 1] {
    slice(x, 1, 0, S + 1)
}

fn main() {}
