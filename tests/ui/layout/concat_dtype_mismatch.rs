use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(a: Tensor![f32; B, S], b: Tensor![f16; B, T]) -> Tensor![f32; B, S + T] {
    concat([a, b], 1)
}

fn main() {}
