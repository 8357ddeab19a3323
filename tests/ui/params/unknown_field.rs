use tc::tensor_module;

// A typo in a weight struct's field: MiniLM's attention weights.
#[tensor_module]
mod bert {
    use tc::Tensor;

    #[tensor_params]
    pub struct Attention {
        pub wq: Tensor![f32; H, H],
        pub wk: Tensor![f32; H, H],
    }

    #[tensor_fn]
    pub fn scores(x: Tensor![f32; S, H], a: Attention) -> Tensor![f32; S, S] {
        let q = matmul(x, transpose(a.wq, [1, 0]));
        let k = matmul(x, transpose(a.wkk, [1, 0]));
        matmul(q, transpose(k, [1, 0]))
    }
}

fn main() {}
