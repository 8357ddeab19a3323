use tc::{tensor_fn, Tensor};

// Mixtral router, top-1 expert per token: the expert count `E` is opted into
// 0, so `argmax` may run over an empty axis. The help asks for `E >= 1`; it
// does not suggest `sum`, which computes something else.
#[tensor_fn]
pub fn route(h: Tensor![f32; T, D], w_gate: Tensor![f32; D, E where E >= 0]) -> Tensor![i64; T] {
    argmax(matmul(h, w_gate), 1)
}

fn main() {}
