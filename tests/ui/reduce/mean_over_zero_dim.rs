use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S where S >= 0]) -> Tensor![f32; B] {
    x.mean([1])
}

fn main() {}
