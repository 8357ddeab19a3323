use tc::{tensor_fn, Tensor};

// A K-quant's super-block is 256: `K % 32 == 0` is not enough.
#[tensor_fn(requires(K % 32 == 0))]
pub fn proj(x: Tensor![f32; M, K], w: Tensor![q4_k; N, K]) -> Tensor![f32; M, N] {
    qmatmul(x, w)
}

fn main() {}
