use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    let n = dim(&x, 3);
    x
}

fn main() {}
