// The callee's return dim is fine on its own; substituting the caller's
// `4 * M` for N overflows the coefficient: E0106 at the call, not a wrap.
use tc::tensor_module;

#[tensor_module]
pub mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn big(x: Tensor![f32; N]) -> Tensor![f32; 4611686018427387904 * N] {
        broadcast(reshape(x, [N, 1]), [N, 4611686018427387904]).reshape([4611686018427387904 * N])
    }

    #[tensor_fn]
    pub fn caller(m: Tensor![f32; M], x: Tensor![f32; 4 * M]) -> Tensor![f32; 4 * M] {
        let y = big(x);
        x
    }
}

fn main() {}
