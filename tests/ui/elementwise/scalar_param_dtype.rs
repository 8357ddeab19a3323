use tc::{tensor_fn, Tensor};

// A bf16 scalar parameter does not scale an f32 tensor.
#[tensor_fn]
pub fn f(x: Tensor![f32; N], c: bf16) -> Tensor![f32; N] {
    x.scale(c)
}

fn main() {}
