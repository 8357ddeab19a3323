use tc::{tensor_fn, Tensor};

// A comparison yields bool; returning it as f32 needs a cast.
#[tensor_fn]
pub fn f(a: Tensor![f32; N], b: Tensor![f32; N]) -> Tensor![f32; N] {
    lt(a, b)
}

fn main() {}
