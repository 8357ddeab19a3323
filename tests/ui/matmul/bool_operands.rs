use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![bool; M, K], b: Tensor![bool; K, N]) -> Tensor![bool; M, N] {
    matmul(a, b)
}

fn main() {}
