use tc::{tensor_fn, Tensor};

// A GPT-2 residual added to a half-width projection (768 vs 384): the dims are
// two different constants, so `broadcast` is no fix and the help says so.
#[tensor_fn]
pub fn residual(x: Tensor![f32; S, 768], proj: Tensor![f32; S, 384]) -> Tensor![f32; S, 768] {
    x + proj
}

fn main() {}
