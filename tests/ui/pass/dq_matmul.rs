use tc::{tensor_fn, Tensor};

// docs/syntax.md §7c: LLM.int8()'s split as one op: the first `K` channels
// of `x` quantized per row to i8 against an int8 weight with a scale per
// column, the last `J` (the outlier channels) through their F32 rows.
#[tensor_fn(requires(I == K + J))]
pub fn olinear(
    x: Tensor![f32; B, S, I],
    w: Tensor![i8; K, O],
    w_scale: Tensor![f32; O],
    w_out: Tensor![f32; J, O],
    b: Tensor![f32; O],
) -> Tensor![f32; B, S, O] {
    dq_matmul(x, w, w_scale, w_out) + broadcast(b, [B, S, O])
}

fn main() {}
