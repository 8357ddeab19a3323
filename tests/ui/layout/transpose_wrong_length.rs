use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S, D]) -> Tensor![f32; S, B] {
    transpose(x, [1, 0])
}

fn main() {}
