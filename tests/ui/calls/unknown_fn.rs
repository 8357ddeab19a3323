use tc::{tensor_fn, Tensor};

// Calls are resolved among the tensor fns of one `#[tensor_module]`.
#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    helper(x)
}

fn main() {}
