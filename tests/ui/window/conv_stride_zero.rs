use tc::{tensor_fn, Tensor};

// A stride of 0 (and a dilation of 0) would never advance: refused as
// constants, each at its own token.
#[tensor_fn]
pub fn stem(x: Tensor![f32; B, 3, H, W], w: Tensor![f32; 8, 3, 3, 3]) -> Tensor![f32; B, 8, H, W] {
    conv2d(x, w, [1, 0], 1, 0, 1)
}

fn main() {}
