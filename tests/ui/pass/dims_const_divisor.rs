// Issue 11 item 5 (Llama RoPE half-split): `[E, 2, E / 2]` from `[E, E]`
// under `E % 4 == 0`; constant divisors are linear, so the divisibility
// rewrite proves the volumes equal instead of a non-linear Z3 query (E0501).
use tc::{tensor_fn, Tensor};

#[tensor_fn(requires(E % 4 == 0))]
pub fn halves(x: Tensor![f32; E, E]) -> Tensor![f32; E, 2, E / 2] {
    reshape(x, [E, 2, E / 2])
}

fn main() {
    let x = tc::Tensor::from_vec(&[4, 4], (0..16).map(|i| i as f32).collect()).unwrap();
    assert_eq!(halves(x).unwrap().shape(), &[4, 2, 2]);
}
