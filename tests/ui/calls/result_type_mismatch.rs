use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn t(x: Tensor![f32; A, B]) -> Tensor![f32; B, A] {
        transpose(x, [1, 0])
    }

    // The callee's result is [S, B]; the caller promised [B, S].
    #[tensor_fn]
    pub fn caller(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
        t(x)
    }
}

fn main() {}
