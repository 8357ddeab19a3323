use tc::{tensor_fn, Tensor};

// The parameter's refinement `D % 8 == 0` does not give `D % 16 == 0`.
#[tensor_fn]
pub fn f(x: Tensor![f32; B, D where D % 8 == 0]) -> Tensor![f32; B, D where D % 16 == 0] {
    x
}

fn main() {}
