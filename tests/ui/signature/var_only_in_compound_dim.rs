// Expert weights stored as [D, F / 8] with F bound nowhere else: the floor
// quotient gives F only up to a remainder (no `requires(F % 8 == 0)`), so
// every call would fail to infer F and the signature is refused.
// (`[D, 8 * F]` binds F: Section 2 §18, tests/ui/pass/compound_dims.rs.)
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(F >= 8))]
pub fn experts(x: Tensor![f32; T, D], w: Tensor![f32; D, F / 8]) -> Tensor![f32; T, F / 8] {
    matmul(x, w)
}

fn main() {}
