// Section 2 §18 (last bullet): a variable bound at the call through a
// compound dim that determines it. Mixtral stores its experts' up
// projections as one `[D, N_EXPERTS * F]` weight: `F` is the column count
// divided by the module constant. `F + 2` (a halo of one on each side) and a
// block count `K / 32` (with `K % 32 == 0` stated) bind the same way.
use tc::tensor_module;

#[tensor_module]
pub mod mixtral {
    use tc::Tensor;

    pub const N_EXPERTS: usize = 8;

    #[tensor_fn]
    pub fn split_experts(w: Tensor![f32; D, N_EXPERTS * F]) -> Tensor![f32; D, N_EXPERTS, F] {
        reshape(w, [D, N_EXPERTS, F])
    }

    // The call solves `F = M / 8`; `requires` makes the division exact.
    #[tensor_fn(requires(M % 8 == 0))]
    pub fn caller(w: Tensor![f32; D, M]) -> Tensor![f32; D, N_EXPERTS, M / 8] {
        split_experts(w)
    }

    #[tensor_fn]
    pub fn interior(x: Tensor![f32; F + 2]) -> Tensor![f32; F] {
        slice(x, 0, 1, F + 1)
    }

    #[tensor_fn(requires(K % 32 == 0))]
    pub fn block_sums(scales: Tensor![f32; N, K / 32]) -> Tensor![f32; N, K / 32] {
        relu(scales)
    }
}

fn main() {
    let w = tc::Tensor::from_vec(&[2, 24], (0..48).map(|i| i as f32).collect()).unwrap();
    assert_eq!(mixtral::split_experts(w.clone()).unwrap().shape(), &[2, 8, 3]);
    assert_eq!(mixtral::caller(w).unwrap().shape(), &[2, 8, 3]);
    let x = tc::Tensor::from_vec(&[5], vec![1f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
    assert_eq!(mixtral::interior(x).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
    let s = tc::Tensor::from_vec(&[1, 2], vec![-1f32, 1.0]).unwrap();
    assert_eq!(mixtral::block_sums(s).unwrap().shape(), &[1, 2]);
    // 30 columns are not 8 experts of equal width: a typed error, no panic.
    let bad = tc::Tensor::from_vec(&[1, 30], vec![0f32; 30]).unwrap();
    assert!(matches!(mixtral::split_experts(bad), Err(tc::Error::Infer { .. })));
}
