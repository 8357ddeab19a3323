use tc::{tensor_fn, Tensor};

// `rem` is a signed-int op (Section 2 §6).
#[tensor_fn]
pub fn f(a: Tensor![f32; N], b: Tensor![f32; N]) -> Tensor![f32; N] {
    a % b
}

fn main() {}
