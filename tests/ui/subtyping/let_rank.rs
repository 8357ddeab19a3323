use tc::{tensor_fn, Tensor};

// `let y: T = x;` with an annotation of another rank: a subtyping (rank)
// error at the annotation, and no second error at the return.
#[tensor_fn]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
    let y: Tensor![f32; B, S, 1] = x;
    y
}

fn main() {}
