use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; S] {
    broadcast(x, [S])
}

fn main() {}
