use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn f(x: Tensor![i64; S, S]) -> Tensor![i64; S, S] {
    x + iota::<i64>([S, S], 2)
}

fn main() {}
