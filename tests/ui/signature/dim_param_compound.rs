use tc::{tensor_fn, Dim, Tensor};

// A compound dim parameter binds nothing (like a compound tensor dim): with
// `W` bound by `x` it is compared at the call; with `F` bound nowhere else
// (Mixtral's `8 * F` expert width passed as a size) no call could infer `F`.
#[tensor_fn]
pub fn doubled(x: Tensor![f32; W], two_w: Dim![2 * W]) -> Tensor![f32; 2 * W] {
    concat([x, x], 0)
}

#[tensor_fn]
pub fn experts(x: Tensor![f32; N], width: Dim![8 * F]) -> Tensor![f32; N] {
    x
}

fn main() {}
