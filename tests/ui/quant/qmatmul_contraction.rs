use tc::{tensor_fn, Tensor};

// qmatmul contracts x's last dim with the weight's dim 1 (GGUF's [N, K]).
#[tensor_fn]
pub fn proj(x: Tensor![f32; M, 64], w: Tensor![q8_0; 64, 128]) -> Tensor![f32; M, 64] {
    qmatmul(x, w)
}

fn main() {}
