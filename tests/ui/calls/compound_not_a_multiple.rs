// The callee's `F` is solved from the caller's dim (Section 2 §18): `4 * F`
// against `N` gives `F = N / 4`, which needs `N % 4 == 0`; nothing implies
// it (`N >= 4` is not enough), so the call is refused with a counterexample.
use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn experts(w: Tensor![f32; D, 4 * F]) -> Tensor![f32; D, 4, F] {
        reshape(w, [D, 4, F])
    }

    #[tensor_fn(requires(N >= 4))]
    pub fn caller(w: Tensor![f32; D, N]) -> Tensor![f32; D, 4, N / 4] {
        experts(w)
    }
}

fn main() {}
