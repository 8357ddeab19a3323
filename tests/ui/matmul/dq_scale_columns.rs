use tc::{tensor_fn, Tensor};

// docs/syntax.md §7c: one scale per output column of the weight.
#[tensor_fn]
pub fn f(
    x: Tensor![f32; S, 48],
    w: Tensor![i8; 32, O],
    w_scale: Tensor![f32; P],
    w_out: Tensor![f32; 16, O],
) -> Tensor![f32; S, O] {
    dq_matmul(x, w, w_scale, w_out)
}

fn main() {}
