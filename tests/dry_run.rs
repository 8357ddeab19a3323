//! `tc::llvm::dry_run` (issue #15, warm-up without arithmetic): inside it a
//! call compiles or links its kernels and its callees' (recursively, with
//! zero tensors of the planned shapes as their arguments) and returns
//! zeros of its planned result; a later real call with the same shapes
//! then compiles nothing and computes the right values. (`inner` is
//! spliced into `outer`; `sorted`, a `topk`, stays a call.)

use tc::{tensor_module, Tensor};

#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn inner(x: Tensor![f32; B, D], w: Tensor![f32; D, D]) -> Tensor![f32; B, D] {
        relu(matmul(x, w))
    }

    #[tensor_fn]
    pub fn sorted(x: Tensor![f32; B, D]) -> Tensor![f32; B, D] {
        topk(x, D, 1)
    }

    #[tensor_fn]
    pub fn outer(x: Tensor![f32; B, D], w: Tensor![f32; D, D]) -> Tensor![f32; B, D] {
        let h = inner(x, w);
        sorted(inner(h + x, w))
    }
}

#[test]
fn dry_run_prepares_every_kernel_and_computes_nothing() {
    let jit = tc::llvm::Jit::global();
    let x = Tensor::from_vec(&[4, 8], vec![1.0f32; 32]).unwrap();
    let w: Vec<f32> = (0..64)
        .map(|i| if i % 9 == 0 { 0.5 } else { 0.0 })
        .collect();
    let w = Tensor::from_vec(&[8, 8], w).unwrap();
    let before = jit.stats();
    let z = tc::llvm::dry_run(|| m::outer(x.clone(), w.clone())).unwrap();
    assert_eq!(z.shape(), &[4, 8]);
    assert!(
        z.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0),
        "nothing computed"
    );
    let mid = jit.stats();
    assert!(
        mid.compiles >= before.compiles + 2,
        "outer (with inner) and sorted were compiled"
    );
    // inner(x) = relu(0.5) = 0.5; outer = inner(0.5 + 1) = 0.75.
    let y = m::outer(x, w).unwrap();
    assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.75));
    let after = jit.stats();
    assert_eq!(
        after.compiles, mid.compiles,
        "the real call found every kernel"
    );
    assert_eq!(after.fallbacks, before.fallbacks);
}
