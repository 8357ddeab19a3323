use tc::tensor_module;

// Llama's grouped-query attention repeats `n_kv_heads` groups up to
// `n_heads`. A tensor passed where the callee takes a dim, and a dim passed
// where it takes a tensor, are kind mismatches at the argument.
#[tensor_module]
mod m {
    use tc::{Dim, Tensor};

    #[tensor_fn(requires(H % KV == 0))]
    pub fn repeat_kv(k: Tensor![f32; B, KV, S, E], n_heads: Dim![H]) -> Tensor![f32; B, H, S, E] {
        let k5 = reshape(k, [B, KV, 1, S, E]);
        reshape(broadcast(k5, [B, KV, H / KV, S, E]), [B, H, S, E])
    }

    #[tensor_fn]
    pub fn tensor_for_dim(k: Tensor![f32; B, KV, S, E], q: Tensor![f32; B, H, S, E]) -> Tensor![f32; B, H, S, E] {
        repeat_kv(k, q)
    }

    #[tensor_fn]
    pub fn dim_for_tensor(k: Tensor![f32; B, KV, S, E], n_heads: Dim![H]) -> Tensor![f32; B, H, S, E] {
        repeat_kv(n_heads, k)
    }

    #[tensor_fn]
    pub fn var_for_tensor(k: Tensor![f32; B, KV, S, E], n_heads: Dim![H]) -> Tensor![f32; B, H, S, E] {
        repeat_kv(H, n_heads)
    }
}

fn main() {}
