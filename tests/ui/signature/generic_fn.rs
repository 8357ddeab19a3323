use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f<T>(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    x
}

fn main() {}
