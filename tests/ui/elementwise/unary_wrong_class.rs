use tc::{tensor_fn, Tensor};

// `exp` is a float op (Section 2 §4).
#[tensor_fn]
pub fn f(x: Tensor![i32; B, S]) -> Tensor![i32; B, S] {
    exp(x)
}

fn main() {}
