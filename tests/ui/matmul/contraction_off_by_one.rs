use tc::{tensor_fn, Tensor};

// The contraction dims differ by one for every K.
#[tensor_fn]
pub fn f(a: Tensor![f32; M, K + 1], b: Tensor![f32; K, N]) -> Tensor![f32; M, N] {
    matmul(a, b)
}

fn main() {}
