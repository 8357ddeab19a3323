use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    let y: Tensor![f32; B, B] = exp(x);
    y
}

fn main() {}
