use tc::{tensor_fn, Tensor};

// Grouped-query attention splits H query heads into KV groups: without
// `requires(H % KV == 0)` the group size `H / KV` is not a dim.
#[tensor_fn]
pub fn groups(q: Tensor![f32; B, H, S, D], k: Tensor![f32; B, KV, T, D]) -> Tensor![f32; B, KV, H / KV, S, D] {
    reshape(q, [B, KV, H / KV, S, D])
}

fn main() {}
