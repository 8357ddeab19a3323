use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S where B >= 1 && B == 0]) -> Tensor![f32; B, S] {
    x
}

fn main() {}
