use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn(requires(S >= K))]
    pub fn conv(x: Tensor![f32; B, S], w: Tensor![f32; K]) -> Tensor![f32; B, S] {
        x
    }

    // The caller knows nothing relating S and K.
    #[tensor_fn]
    pub fn caller(x: Tensor![f32; B, S], w: Tensor![f32; K]) -> Tensor![f32; B, S] {
        conv(x, w)
    }
}

fn main() {}
