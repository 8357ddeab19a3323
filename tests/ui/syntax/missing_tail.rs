use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    let y = relu(x);
}

fn main() {}
