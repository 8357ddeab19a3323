// A dim that does not determine its variable binds nothing (Section 2 §18
// binds only through invertible dims): `F % 2` has the same value for many
// `F`, and a floor quotient `K / 32` leaves `K` known only up to a remainder
// unless the signature states `K % 32 == 0`.
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn parity(n: Tensor![f32; N], x: Tensor![f32; N + F % 2]) -> Tensor![f32; N] {
    relu(n)
}

#[tensor_fn(requires(K >= 32))]
pub fn blocks(scales: Tensor![f32; N, K / 32]) -> Tensor![f32; N, K / 32] {
    relu(scales)
}

fn main() {}
