// The obligation also covers signature dims: `D / G` with G opted into >= 0.
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(G >= 0, D % G == 0))]
pub fn f(x: Tensor![f32; D], g: Tensor![f32; G]) -> Tensor![f32; D / G] {
    slice(x, 0, 0, D / G)
}

fn main() {}
