use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(logits: Tensor![f32; B, V where V >= 0]) -> Tensor![i64; B] {
    argmax(logits, 1)
}

fn main() {}
