use tc::{tensor_fn, Tensor};

// Section 2 §18: a quantized weight whose block divisibility follows from
// `requires`, read by qmatmul, dequantize and gather.
#[tensor_fn(requires(K % 32 == 0))]
pub fn proj(x: Tensor![f32; M, K], w: Tensor![q4_0; N, K]) -> Tensor![f32; M, N] {
    qmatmul(x, w)
}

#[tensor_fn]
pub fn rows(table: Tensor![q8_0; V, 64], ids: Tensor![i64; S]) -> Tensor![f32; S, 64] {
    dequantize(gather(table, ids))
}

fn main() {}
