use tc::{tensor_fn, Tensor};

// Type errors in a body are all reported, not just the first.
#[tensor_fn]
pub fn f(a: Tensor![f32; M, K], b: Tensor![f32; N, P], c: Tensor![i32; M]) -> Tensor![f32; M, P] {
    let d = exp(c);
    let e = transpose(a, [0, 0]);
    matmul(a, b)
}

fn main() {}
