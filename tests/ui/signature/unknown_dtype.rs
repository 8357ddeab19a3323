use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f64; B, S]) -> Tensor![f64; B, S] {
    x
}

fn main() {}
