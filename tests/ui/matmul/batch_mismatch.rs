use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![f32; B, M, K], b: Tensor![f32; C, K, N]) -> Tensor![f32; B, M, N] {
    matmul(a, b)
}

fn main() {}
