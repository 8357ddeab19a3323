use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    let y = x[0];
    y
}

fn main() {}
