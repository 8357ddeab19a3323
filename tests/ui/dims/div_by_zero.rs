// Issue 11: `N / 0` is its own error, never "may be smaller than 1".
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N / 0] {
    x
}

fn main() {}
