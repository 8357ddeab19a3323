use tc::{tensor_fn, Tensor};

// An integer literal does not scale a float tensor: no implicit promotion.
#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    x * 2
}

fn main() {}
