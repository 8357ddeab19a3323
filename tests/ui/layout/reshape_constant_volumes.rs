use tc::tensor_module;

// GPT-2 small head split with a wrong module constant: 12 heads of 32 are
// 384 features, not 768. No `requires` or axiom can make 768 equal 384, so
// the help says to change the shape, not to add an axiom.
#[tensor_module]
mod gpt2 {
    use tc::Tensor;

    const D_MODEL: usize = 768;
    const N_HEAD: usize = 12;
    const HEAD_DIM: usize = 32;

    #[tensor_fn]
    pub fn split_one(x: Tensor![f32; D_MODEL]) -> Tensor![f32; N_HEAD, HEAD_DIM] {
        reshape(x, [N_HEAD, HEAD_DIM])
    }

    #[tensor_fn]
    pub fn split_seq(x: Tensor![f32; S, D_MODEL]) -> Tensor![f32; S, N_HEAD, HEAD_DIM] {
        reshape(x, [S, N_HEAD, HEAD_DIM])
    }
}

fn main() {}
