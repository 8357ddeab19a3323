use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    // `N` appears only inside a compound dim that does not determine it
    // (`N` in two terms): a call cannot bind it.
    #[tensor_fn]
    pub fn shifted(x: Tensor![f32; N + N % 2]) -> Tensor![f32; N + N % 2] {
        x
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![f32; M]) -> Tensor![f32; M] {
        shifted(x)
    }
}

fn main() {}
