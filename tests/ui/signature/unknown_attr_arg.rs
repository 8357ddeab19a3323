use tc::{tensor_fn, Tensor};

#[tensor_fn(ensures(B >= 1))]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    x
}

fn main() {}
