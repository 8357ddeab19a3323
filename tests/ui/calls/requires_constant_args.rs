use tc::tensor_module;

// BERT-base attention split into 5 heads: the callee requires `D % H == 0`,
// and the caller's shapes are constants (768 features, 5 heads), so no
// `requires` of the caller can help: the help says to change the shapes.
#[tensor_module]
mod bert {
    use tc::Tensor;

    #[tensor_fn(requires(D % H == 0))]
    pub fn heads(x: Tensor![f32; S, D], gate: Tensor![f32; H]) -> Tensor![f32; S, H, D / H] {
        reshape(x, [S, H, D / H])
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![f32; S, 768], gate: Tensor![f32; 5]) -> Tensor![f32; S, 5, 153] {
        heads(x, gate)
    }

    // The same requires over the caller's own variables: the caller can state it.
    #[tensor_fn]
    pub fn generic_caller(x: Tensor![f32; S, E], gate: Tensor![f32; G]) -> Tensor![f32; S, G, E / G] {
        heads(x, gate)
    }
}

fn main() {}
