use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn g(x: Tensor![f32; N]) -> Tensor![f32; N] {
        relu(x)
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![bf16; N]) -> Tensor![f32; N] {
        g(x)
    }
}

fn main() {}
