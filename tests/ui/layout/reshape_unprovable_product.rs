use tc::{tensor_fn, Tensor};

// `P` is not known to be `B * S`: state it as an axiom.
#[tensor_fn]
pub fn f(x: Tensor![f32; B, S], p: Tensor![f32; P]) -> Tensor![f32; P] {
    reshape(x, [P])
}

fn main() {}
