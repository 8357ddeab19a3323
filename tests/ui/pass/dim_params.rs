use tc::{tensor_fn, Dim, Tensor};

// GPT-2's head split with the head count as a plain size (Section 1 §6
// binding site 1): no witness tensor; `heads` binds `H`.
#[tensor_fn(requires(D % H == 0))]
pub fn split_heads(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, H, S, D / H] {
    transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3])
}

fn main() {
    let x = Tensor::from_vec(&[1, 2, 4], (0..8).map(|i| i as f32).collect()).unwrap();
    let y = split_heads(x.clone(), 2).unwrap();
    assert_eq!(y.shape(), &[1, 2, 2, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 4.0, 5.0, 2.0, 3.0, 6.0, 7.0]);
    // 4 % 3 != 0: the `requires`, re-checked at the call, is a typed error.
    assert!(matches!(split_heads(x, 3), Err(tc::Error::Predicate { .. })));
}
