use tc::{tensor_fn, Tensor};

// Whisper encoder input: at most 4 frames by refinement, at least 8 by
// `requires`. The contradiction spans a refinement and a `requires`; both are
// underlined.
#[tensor_fn(requires(T >= 8))]
pub fn frames(x: Tensor![f32; T, C where T <= 4]) -> Tensor![f32; T, C] {
    x
}

fn main() {}
