use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![i64; N], b: Tensor![i64; N]) -> Tensor![i64; N] {
    pow(a, b)
}

fn main() {}
