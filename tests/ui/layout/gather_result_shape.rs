use tc::{tensor_fn, Tensor};

// Gathering along axis 1 keeps axis 0: the result is [B, K], not [K, C].
#[tensor_fn]
pub fn pick(x: Tensor![f32; B, C], ids: Tensor![i64; K]) -> Tensor![f32; K, C] {
    gather(x, ids, 1)
}

fn main() {}
