use tc::{tensor_fn, Tensor};

// A float fill value for an int tensor: no implicit conversion.
#[tensor_fn]
pub fn f(x: Tensor![i32; N]) -> Tensor![i32; N] {
    x + full::<i32>([N], 0.5)
}

fn main() {}
