use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B] {
    sum(x, [2])
}

fn main() {}
