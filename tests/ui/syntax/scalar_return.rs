use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N], eps: f32) -> Tensor![f32; N] {
    eps
}

fn main() {}
