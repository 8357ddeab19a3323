// Issue 10 item 9: `full::<f32>([D % G], 0.0)` with G >= 0.
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(G >= 0))]
pub fn f(x: Tensor![f32; D], g: Tensor![f32; G]) -> Tensor![f32; D] {
    let y = full::<f32>([D % G + 1], 0.0);
    x
}

fn main() {}
