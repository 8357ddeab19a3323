use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn add(a: Tensor![f32; N], b: Tensor![f32; N]) -> Tensor![f32; N] {
        a + b
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![f32; N]) -> Tensor![f32; N] {
        add(x)
    }
}

fn main() {}
