use tc::{tensor_fn, Tensor};

// Section 3 §8.3: dtype is invariant; cast explicitly.
#[tensor_fn]
pub fn f(x: Tensor![bf16; B, S]) -> Tensor![f32; B, S] {
    x
}

fn main() {}
