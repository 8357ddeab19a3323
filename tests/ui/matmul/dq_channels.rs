use tc::{tensor_fn, Tensor};

// docs/syntax.md §7c: `x`'s channels are the int8 weight's rows then the
// outlier weight's; nothing says `I = K + J` here.
#[tensor_fn]
pub fn f(
    x: Tensor![f32; S, I],
    w: Tensor![i8; K, O],
    w_scale: Tensor![f32; O],
    w_out: Tensor![f32; J, O],
) -> Tensor![f32; S, O] {
    dq_matmul(x, w, w_scale, w_out)
}

fn main() {}
