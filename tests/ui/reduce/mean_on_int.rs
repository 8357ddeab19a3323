use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![i32; B, S]) -> Tensor![i32; B] {
    mean(x, [1])
}

fn main() {}
