use tc::{tensor_fn, Tensor};

// A grouped conv (ResNeXt-style, 4 groups) whose output channel count O is
// not known to split into the groups.
#[tensor_fn]
pub fn grouped(x: Tensor![f32; B, 32, H, W], w: Tensor![f32; O, 8, 3, 3]) -> Tensor![f32; B, O, H, W] {
    conv2d(x, w, 1, 1, 1, 4)
}

fn main() {}
