use tc::{tensor_fn, Tensor};

// PyTorch's rule: pooling padding at most half the kernel, so no window is
// padding only.
#[tensor_fn]
pub fn pool(x: Tensor![f32; B, C, H, W]) -> Tensor![f32; B, C, (H + 1) / 2 + 1, (W + 1) / 2 + 1] {
    max_pool2d(x, 3, 2, 2)
}

fn main() {}
