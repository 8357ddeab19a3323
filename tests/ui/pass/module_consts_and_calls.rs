// Module constants, calls in any order, scalar arguments passed on.
use tc::tensor_module;

#[tensor_module]
pub mod m {
    use tc::Tensor;

    pub const D: usize = 4;
    pub const D2: usize = 2 * D;

    #[tensor_fn]
    pub fn outer(x: Tensor![f32; B, D], w: Tensor![f32; D, D2], s: f32) -> Tensor![f32; B, D2] {
        inner(matmul(x, w), s)
    }

    #[tensor_fn]
    pub fn inner(h: Tensor![f32; B, N], s: f32) -> Tensor![f32; B, N] {
        tanh(h).scale(s)
    }
}

fn main() {
    let x = tc::Tensor::from_vec(&[1, 4], vec![0.0f32; 4]).unwrap();
    let w = tc::Tensor::from_vec(&[4, 8], vec![0.0f32; 32]).unwrap();
    assert_eq!(m::outer(x, w, 2.0).unwrap().shape(), &[1, 8]);
}
