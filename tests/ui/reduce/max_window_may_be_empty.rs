use tc::{tensor_fn, Tensor};

// Sliding-window max pooling (Longformer/Mistral-style local window): the
// window `S - W` may be 0 when `W` is opted into 0; the help states the fact
// over the compound dim, as a `requires`.
#[tensor_fn(requires(W <= S))]
pub fn window_max(x: Tensor![f32; B, S], w: Tensor![f32; W where W >= 0]) -> Tensor![f32; B] {
    max(slice(x, 1, W, S), [1])
}

fn main() {}
