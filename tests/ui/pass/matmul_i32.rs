use tc::{tensor_fn, Tensor};

// docs/syntax.md §7b: a linear layer with int8 weights (a scale per output
// column) and its activations quantized per row as it runs: the integer
// product in `matmul_i32`, the scales applied in F32.
#[tensor_fn]
pub fn ilinear(
    x: Tensor![f32; B, S, I],
    w: Tensor![i8; I, O],
    w_scale: Tensor![f32; O],
) -> Tensor![f32; B, S, O] {
    let x_scale = maximum(max_keepdims(abs(x), [2]) / 127.0, 1e-30);
    let xq = cast::<i8>(round(x / broadcast(x_scale, [B, S, I])));
    let sums = cast::<f32>(matmul_i32(xq, broadcast(w, [B, I, O])));
    sums * broadcast(x_scale, [B, S, O]) * broadcast(w_scale, [B, S, O])
}

fn main() {}
