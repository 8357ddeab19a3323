use tc::{tensor_fn, Tensor};

// conv2d on an unbatched image [C, H, W]: the batch axis is missing.
#[tensor_fn]
pub fn stem(x: Tensor![f32; 3, H, W], w: Tensor![f32; 8, 3, 3, 3]) -> Tensor![f32; 8, H, W] {
    conv2d(x, w, 1, 1)
}

fn main() {}
