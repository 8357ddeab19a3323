use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![f32; M, K], b: Tensor![f32; N, P]) -> Tensor![f32; M, P] {
    matmul(a, b)
}

fn main() {}
