use tc::{tensor_fn, Tensor};

// `sum_keepdims` keeps the axis as 1: the result is [B, 1], not [B].
#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B] {
    sum_keepdims(x, [1])
}

fn main() {}
