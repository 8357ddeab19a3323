use tc::{tensor_fn, Dim, Tensor};

// A dim parameter names one dim; its refinements go in `requires`; its name
// is a size, not a tensor, and a shape names its variable, not the parameter.
#[tensor_fn]
pub fn two(x: Tensor![f32; N], hw: Dim![H, W]) -> Tensor![f32; N] {
    x
}

#[tensor_fn]
pub fn refined(x: Tensor![f32; N], heads: Dim![H where H % 2 == 0]) -> Tensor![f32; N] {
    x
}

#[tensor_fn]
pub fn as_tensor(x: Tensor![f32; N], heads: Dim![H]) -> Tensor![f32; N] {
    relu(heads)
}

#[tensor_fn]
pub fn as_dim(x: Tensor![f32; N], heads: Dim![H]) -> Tensor![f32; N, H] {
    broadcast(reshape(x, [N, 1]), [N, heads])
}

fn main() {}
