// A negative constant divisor in `requires`.
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(D / -2 <= 0))]
pub fn f(x: Tensor![f32; D]) -> Tensor![f32; D] {
    x
}

fn main() {}
