// A constant term that leaves i64 in a body shape is E0106, not a wrap.
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    let y = full::<f32>([N + 9223372036854775807 + 1], 0.0);
    x
}

fn main() {}
