use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn pick(x: Tensor![f32; B, C], ids: Tensor![i64; K]) -> Tensor![f32; B, K] {
    gather(x, ids, 2)
}

fn main() {}
