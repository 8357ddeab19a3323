use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(Q > 1))]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    x
}

fn main() {}
