use tc::{tensor_fn, Tensor};

// KV-cache append in a fn returning bf16: the cache is f32, the new keys
// bf16; the cast goes toward the declared bf16, i.e. cast the f32 cache.
#[tensor_fn]
pub fn append(cache: Tensor![f32; H, S, E], k: Tensor![bf16; H, 1, E]) -> Tensor![bf16; H, S + 1, E] {
    concat([cache, k], 1)
}

fn main() {}
