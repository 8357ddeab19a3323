use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn packed(x: Tensor![f32; B, D where D % 8 == 0]) -> Tensor![f32; B, D] {
        x
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![f32; B, D where D % 4 == 0]) -> Tensor![f32; B, D] {
        packed(x)
    }
}

fn main() {}
