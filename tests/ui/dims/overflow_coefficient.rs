// Issue 10 item 7: `N * 2^62 * 4` used to wrap to 0, so the return type
// normalised to `1` and the fn compiled. Dim coefficients are checked.
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N * 4611686018427387904 * 4 + 1] {
    x
}

fn main() {}
