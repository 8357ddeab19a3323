use tc::{tensor_fn, Tensor};

// No implicit broadcasting (Section 2 §6, §11): `b` must be broadcast explicitly.
#[tensor_fn]
pub fn f(a: Tensor![f32; B, S], b: Tensor![f32; B, 1]) -> Tensor![f32; B, S] {
    a + b
}

fn main() {}
