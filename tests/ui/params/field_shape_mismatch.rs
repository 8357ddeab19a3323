use tc::tensor_module;

// GPT-2's MLP with the two projections swapped: `c_proj` is [D, F], so
// `x · c_projᵀ` needs x's last dim to be F, not D.
#[tensor_module]
mod gpt2 {
    use tc::Tensor;

    #[tensor_params]
    pub struct Mlp {
        pub c_fc: Tensor![f32; F, D],
        pub c_proj: Tensor![f32; D, F],
    }

    #[tensor_fn]
    pub fn mlp(x: Tensor![f32; B, D], p: Mlp) -> Tensor![f32; B, D] {
        let h = matmul(x, transpose(p.c_proj, [1, 0]));
        matmul(h, transpose(p.c_fc, [1, 0]))
    }
}

fn main() {}
