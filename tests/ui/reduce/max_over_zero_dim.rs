use tc::{tensor_fn, Tensor};

// `B >= 0` opts B into empty dims: `max` over it is undefined (Section 2 §8).
#[tensor_fn(requires(B >= 0))]
pub fn f(x: Tensor![f32; B, S]) -> Tensor![f32; S] {
    max(x, [0])
}

fn main() {}
