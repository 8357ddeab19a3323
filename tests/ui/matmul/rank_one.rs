use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![f32; K], b: Tensor![f32; K, N]) -> Tensor![f32; N] {
    matmul(a, b)
}

fn main() {}
