use tc::{tensor_fn, Tensor};

// Section 2 §18: a Q4_1 weight needs whole blocks of 32 along its last axis,
// and nothing relates K to 32.
#[tensor_fn]
pub fn proj(x: Tensor![f32; M, K], w: Tensor![q4_1; N, K]) -> Tensor![f32; M, N] {
    qmatmul(x, w)
}

fn main() {}
