use tc::{tensor_fn, Tensor};

// Literals must fit the dtype they meet: i4 holds [-8, 7] (100 would wrap to
// 4), i8 holds [-128, 127], f16 rounds to infinity from 65520 up, and 1e400 is
// not even a finite f64.
#[tensor_fn]
pub fn fill_i4(x: Tensor![i4; N]) -> Tensor![i4; N] {
    x + full::<i4>([N], 100)
}

#[tensor_fn]
pub fn scale_i8(x: Tensor![i8; N]) -> Tensor![i8; N] {
    x * 300
}

#[tensor_fn]
pub fn compare_i8(x: Tensor![i8; N]) -> Tensor![bool; N] {
    x > -129
}

#[tensor_fn]
pub fn mask_f16(x: Tensor![f16; N]) -> Tensor![f16; N] {
    maximum(x, full::<f16>([N], -1e9))
}

#[tensor_fn]
pub fn add_inf(x: Tensor![f32; N]) -> Tensor![f32; N] {
    x + 1e400
}

#[tensor_fn]
pub fn beyond_i64(x: Tensor![i64; N]) -> Tensor![i64; N] {
    x - 99999999999999999999
}

fn main() {}
