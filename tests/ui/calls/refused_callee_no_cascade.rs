use tc::tensor_module;

// Mixtral experts stored as one `[D, 8 * F]` weight: `F` occurs only inside a
// compound dim, so the signature is refused (E0102) at that dim. The caller
// gets no second, derived "cannot infer F" error; its own unrelated error is
// not derived and is still reported.
#[tensor_module]
mod mixtral {
    use tc::Tensor;

    #[tensor_fn]
    pub fn experts(x: Tensor![f32; T, D], w: Tensor![f32; D, 8 * F]) -> Tensor![f32; T, 8 * F] {
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
