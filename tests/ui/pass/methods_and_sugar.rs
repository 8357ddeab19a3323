// Method syntax, operator sugar, scalar forms and annotations all check.
use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn sugar(x: Tensor![f32; B, N], y: Tensor![f32; B, N], c: f32) -> Tensor![f32; B, N] {
    let a = x.relu().exp().scale(0.5);
    let b: Tensor![f32; B, N] = -(a * y) + x / y;
    let keep = gt(b, 0.0) & lt(x, c);
    let same: Tensor![f32; B, N where B >= 1] = x;
    select(keep, b.add_scalar(c), maximum(same, 1.0))
}

#[tensor_fn]
pub fn ints(x: Tensor![i32; N], y: Tensor![i32; N]) -> Tensor![i32; N] {
    (x % y + x * 3 - abs(y)).cast::<i64>().cast::<i32>()
}

#[tensor_fn]
pub fn reductions(x: Tensor![f32; B, S, D]) -> Tensor![i64; B] {
    let s = x.sum([1, 2]);
    let m = x.max_keepdims([2]);
    let p = prod(x, 2) + min(x, [2]) + mean(x, [2]) + sum(m, [2]);
    argmin(p, 1) + argmax(transpose(broadcast(s, [S, B]), [1, 0]), 1)
}

fn main() {
    let x = tc::Tensor::from_vec(&[1, 2], vec![1.0f32, -1.0]).unwrap();
    let y = tc::Tensor::from_vec(&[1, 2], vec![2.0f32, 4.0]).unwrap();
    let r = sugar(x, y, 3.0).unwrap();
    assert_eq!(r.shape(), &[1, 2]);
}
