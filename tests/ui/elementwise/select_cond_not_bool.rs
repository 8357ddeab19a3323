use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(c: Tensor![f32; N], a: Tensor![f32; N], b: Tensor![f32; N]) -> Tensor![f32; N] {
    select(c, a, b)
}

fn main() {}
