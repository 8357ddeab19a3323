use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(S > K, K > S))]
pub fn f(x: Tensor![f32; B, S], k: Tensor![f32; K]) -> Tensor![f32; B, S] {
    x
}

fn main() {}
