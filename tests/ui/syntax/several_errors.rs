use tc::{tensor_fn, Tensor};

// Every unsupported construct is reported in one build.
#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    let a = x.iter();
    let b = (x, x);
    let c = |t| t;
    x
}

fn main() {}
