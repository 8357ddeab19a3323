use tc::{tensor_fn, Tensor};

#[tensor_fn]
pub fn linear(x: Tensor![f32; B, I], w: Tensor![f32; I, O], b: Tensor![f32; O]) -> Tensor![f32; B, O] {
    matmul(x, w) + broadcast(b, [B, O])
}

fn main() {
    let x = tc::Tensor::from_vec(&[1, 2], vec![1.0f32, 2.0]).unwrap();
    let w = tc::Tensor::from_vec(&[2, 1], vec![1.0f32, 1.0]).unwrap();
    let b = tc::Tensor::from_vec(&[1], vec![0.5f32]).unwrap();
    assert_eq!(linear(x, w, b).unwrap().to_vec::<f32>().unwrap(), vec![3.5]);
}
