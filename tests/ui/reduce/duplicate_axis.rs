use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S, D]) -> Tensor![f32; B] {
    sum(x, [1, 1])
}

fn main() {}
