//! A rotation whose tables' last dim is a free variable: nothing ties the
//! rotated axis `D` to twice `H`, one angle per pair (E0311, the example of
//! docs/errors.md).

use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn rotate(x: Tensor![f32; S, D], cos: Tensor![f32; S, H], sin: Tensor![f32; S, H]) -> Tensor![f32; S, D] {
    rope_pairs(x, cos, sin)
}

fn main() {}
