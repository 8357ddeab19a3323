// Issue 10 item 9: a negative constant divisor type-checked (`D / -2`).
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; D]) -> Tensor![f32; D] {
    let y = full::<f32>([D % -2 + 1], 0.0);
    x
}

fn main() {}
