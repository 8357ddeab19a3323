use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![bool; B, V]) -> Tensor![i64; B] {
    argmax(x, 1)
}

fn main() {}
