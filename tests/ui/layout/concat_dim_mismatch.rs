use tc::{tensor_fn, Tensor};

// Every dim but the concatenation axis must agree.
#[tensor_fn]
pub fn f(a: Tensor![f32; B, S], b: Tensor![f32; C, T]) -> Tensor![f32; B, S + T] {
    concat([a, b], 1)
}

fn main() {}
