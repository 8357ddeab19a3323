use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn square(x: Tensor![f32; N, N]) -> Tensor![f32; N, N] {
        matmul(x, x)
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![f32; M, N]) -> Tensor![f32; M, N] {
        square(x)
    }
}

fn main() {}
