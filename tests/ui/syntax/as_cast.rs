use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![i32; N] {
    x as i32
}

fn main() {}
