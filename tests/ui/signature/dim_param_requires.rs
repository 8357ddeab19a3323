use tc::{tensor_fn, Dim, Tensor};

// Llama's head split without `requires(D % H == 0)`: `D / H` divides by the
// dim parameter's variable, which appears in the counterexample.
#[tensor_fn]
pub fn split_heads(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, H, S, D / H] {
    transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3])
}

fn main() {}
