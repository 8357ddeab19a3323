use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S, D]) -> Tensor![f32; B, S, D] {
    transpose(x, [0, 2, 2])
}

fn main() {}
