// Issue 10 item 7: `requires(N % 0 == 0)` compiled (Z3's mod is total).
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(N % 0 == 0))]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    x
}

fn main() {}
