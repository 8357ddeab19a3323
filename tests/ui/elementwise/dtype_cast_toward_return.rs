use tc::{tensor_fn, Tensor};

// Llama mixed precision: a bf16 residual stream added to an f32 accumulator
// in a fn returning f32. The bf16 operand is the one to cast (to f32), even
// though it is on the left.
#[tensor_fn]
pub fn residual_f32(h: Tensor![bf16; S, D], acc: Tensor![f32; S, D]) -> Tensor![f32; S, D] {
    h + acc
}

fn main() {}
