use tc::{tensor_fn, Tensor};

// docs/syntax.md §7c: the weight is i8 (quantized by the caller, with its
// scale per column).
#[tensor_fn]
pub fn f(
    x: Tensor![f32; S, 48],
    w: Tensor![f32; 32, O],
    w_scale: Tensor![f32; O],
    w_out: Tensor![f32; 16, O],
) -> Tensor![f32; S, O] {
    dq_matmul(x, w, w_scale, w_out)
}

fn main() {}
