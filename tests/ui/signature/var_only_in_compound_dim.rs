// Mixtral experts: expert weights stored as [D, N_EXPERTS * F] with F bound
// nowhere else. Every call would fail to infer F, so the signature is refused.
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn experts(x: Tensor![f32; T, D], w: Tensor![f32; D, 8 * F]) -> Tensor![f32; T, 8 * F] {
    matmul(x, w)
}

fn main() {}
