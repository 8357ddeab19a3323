use tc::{tensor_fn, Tensor};

// `T` is not bound by any parameter.
#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, T] {
    x
}

fn main() {}
