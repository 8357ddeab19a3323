use tc::{tensor_fn, Tensor};

// docs/syntax.md §7b: `matmul_i32` multiplies I8 operands only.
#[tensor_fn]
pub fn f(a: Tensor![i8; M, K], b: Tensor![f32; K, N]) -> Tensor![i32; M, N] {
    matmul_i32(a, b)
}

fn main() {}
