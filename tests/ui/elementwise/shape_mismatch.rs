use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![f32; B, S], b: Tensor![f32; B, T]) -> Tensor![f32; B, S] {
    a * b
}

fn main() {}
