use tc::{tensor_fn, Tensor};

// `P` occurs only in an axiom: no parameter dim carries it, so a call could
// never bind it (Section 2 §17). Refused at formation, not at every call.
#[tensor_fn(axiom(P == 4))]
pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
    x
}

fn main() {}
