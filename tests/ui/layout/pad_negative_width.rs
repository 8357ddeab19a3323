use tc::{tensor_fn, Tensor};

// Padding a sequence up to a window K: `K - S` is negative when the
// sequence is already longer than the window.
#[tensor_fn]
pub fn to_window(x: Tensor![f32; B, S], w: Tensor![f32; K]) -> Tensor![f32; B, K] {
    pad(x, 1, 0, K - S, 0.0)
}

fn main() {}
