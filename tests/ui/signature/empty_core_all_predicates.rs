use tc::{tensor_fn, Tensor};

// Mistral sliding-window attention with contradictory requirements: the
// window must fit the sequence (`W <= S`) and also exceed it (`S < W`). Both
// are underlined; the unrelated `S % 2 == 0` is not.
#[tensor_fn(requires(W <= S, S % 2 == 0, S < W))]
pub fn window(x: Tensor![f32; S, D], w: Tensor![f32; W]) -> Tensor![f32; S, D] {
    x
}

fn main() {}
