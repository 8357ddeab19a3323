// Issue 10 item 9: with G >= 0 the divisor of `D % G` may be 0; every call
// at G = 0 failed at run time with BadDivisor. Now E0108, fails when G = 0.
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(G >= 0))]
pub fn f(x: Tensor![f32; D], g: Tensor![f32; G]) -> Tensor![f32; D] {
    let y = slice(x, 0, 0, D % G);
    x
}

fn main() {}
