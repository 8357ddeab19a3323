use tc::{tensor_fn, Tensor};

// No broadcasting of batch dims: both operands must have the same rank.
#[tensor_fn]
pub fn f(a: Tensor![f32; B, M, K], b: Tensor![f32; K, N]) -> Tensor![f32; B, M, N] {
    matmul(a, b)
}

fn main() {}
