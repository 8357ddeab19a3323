use tc::{tensor_fn, Dim, Tensor};

// `D / H` needs `D % H == 0` (Section 2 §13).
#[tensor_fn]
pub fn f(x: Tensor![f32; B, D], heads: Dim![H], y: Tensor![f32; B, D / H]) -> Tensor![f32; B, D] {
    x
}

fn main() {}
