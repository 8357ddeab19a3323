use tc::{tensor_fn, Tensor};

// A literal 0 dim needs a variable opted into `>= 0` (Section 2 §16).
#[tensor_fn]
pub fn f(x: Tensor![f32; B, 0]) -> Tensor![f32; B, 0] {
    x
}

fn main() {}
