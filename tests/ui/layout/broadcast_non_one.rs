use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S], t: Tensor![f32; T]) -> Tensor![f32; B, T] {
    broadcast(x, [B, T])
}

fn main() {}
