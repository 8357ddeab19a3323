use tc::tensor_module;

// A weight `[D, D + F % 8]`: `F` occurs only inside a compound dim that does
// not determine it, so the signature is refused (E0102) at that dim. The caller
// gets no second, derived "cannot infer F" error; its own unrelated error is
// not derived and is still reported.
#[tensor_module]
mod mixtral {
    use tc::Tensor;

    #[tensor_fn]
    pub fn experts(x: Tensor![f32; T, D], w: Tensor![f32; D, D + F % 8]) -> Tensor![f32; T, D + F % 8] {
        matmul(x, w)
    }

    #[tensor_fn]
    pub fn moe(x: Tensor![f32; T, D], w: Tensor![f32; D, E]) -> Tensor![f32; T, E] {
        experts(x, w)
    }

    #[tensor_fn]
    pub fn other(x: Tensor![f32; T, D]) -> Tensor![f32; D, T] {
        x
    }
}

fn main() {}
