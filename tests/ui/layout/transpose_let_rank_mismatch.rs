// Issue 10 item 10: `let y: T = x;` lowers to an identity transpose of T's
// rank. With a rank mismatch that transpose is malformed (the interpreter
// refuses it); the checker now refuses it too, at the annotation.
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    let y: Tensor![f32; B] = x;
    x
}

fn main() {}
