use tc::{tensor_fn, Tensor};

// A tensor's name is not a dim: bind its size with `let n = dim(&x, 0);`.
#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    full::<f32>([x], 1.0)
}

fn main() {}
