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

    // Whisper conv front end: the window must fit the frames. Over the
    // caller's own variables the help is the `requires` to add.
    #[tensor_fn(requires(W <= T))]
    pub fn window(x: Tensor![f32; T, C], w: Tensor![f32; W]) -> Tensor![f32; T, C] {
        x
    }

    #[tensor_fn]
    pub fn frames(x: Tensor![f32; N, C], k: Tensor![f32; K]) -> Tensor![f32; N, C] {
        window(x, k)
    }
}

fn main() {}
