use tc::{tensor_fn, Tensor};

// A quantized tensor has no elements of its own: dequantize it first.
#[tensor_fn]
pub fn scale(w: Tensor![q8_0; N, 64]) -> Tensor![f32; N, 64] {
    w * 2.0
}

fn main() {}
