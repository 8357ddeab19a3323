use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_params]
    pub struct Norm {
        pub gamma: Tensor![f32; D],
        pub beta: Tensor![f32; D],
    }

    #[tensor_fn]
    pub fn f(x: Tensor![f32; D], n: Norm) -> Tensor![f32; D] {
        x * n
    }
}

fn main() {}
