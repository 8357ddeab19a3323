use tc::{tensor_fn, Dim, Tensor};

// Splitting heads needs `D % H == 0` (Section 2 §13).
#[tensor_fn]
pub fn f(x: Tensor![f32; B, D], heads: Dim![H]) -> Tensor![f32; B, D] {
    let y = reshape(x, [B, H, D / H]);
    reshape(y, [B, D])
}

fn main() {}
