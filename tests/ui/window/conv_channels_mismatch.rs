use tc::{tensor_fn, Tensor};

// A ResNet basic block's 3×3 conv whose weights were declared for 64 input
// channels while the feature map has C.
#[tensor_fn]
pub fn block(x: Tensor![f32; B, C, H, W], w: Tensor![f32; 64, 64, 3, 3]) -> Tensor![f32; B, 64, H, W] {
    conv2d(x, w, 1, 1)
}

fn main() {}
