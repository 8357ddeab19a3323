use tc::{tensor_fn, Tensor};

// `S >= K` allows `S == K`: the slice `K..S` may be empty (Section 2 §12).
#[tensor_fn(requires(S >= K))]
pub fn f(x: Tensor![f32; B, S], k: Tensor![f32; K]) -> Tensor![f32; B] {
    sum(slice(x, 1, K, S), [1])
}

fn main() {}
