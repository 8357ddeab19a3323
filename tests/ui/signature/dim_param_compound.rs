use tc::{tensor_fn, Dim, Tensor};

// A compound dim parameter binds like a compound tensor dim: with `W` bound
// by `x` it is compared at the call; `8 * F` would bind `F` (Section 2 §18),
// but `N + F % 8` does not determine `F`, so no call could infer it.
#[tensor_fn]
pub fn doubled(x: Tensor![f32; W], two_w: Dim![2 * W]) -> Tensor![f32; 2 * W] {
    concat([x, x], 0)
}

#[tensor_fn]
pub fn experts(x: Tensor![f32; N], width: Dim![N + F % 8]) -> Tensor![f32; N] {
    x
}

fn main() {}
