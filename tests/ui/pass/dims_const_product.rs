// Issue 11 item 1 (ViT patchify): a product in which all factors but one are
// module constants is linear; `GRID * GRID` used to be E0103.
use tc::tensor_module;

#[tensor_module]
pub mod vit {
    use tc::Tensor;

    pub const GRID: usize = 2;
    pub const PATCH_DIM: usize = 3;
    pub const N_EXPERTS: usize = 2;

    #[tensor_fn]
    pub fn patches(x: Tensor![f32; B, GRID, GRID, PATCH_DIM]) -> Tensor![f32; B, GRID * GRID, PATCH_DIM] {
        reshape(x, [B, GRID * GRID, PATCH_DIM])
    }

    // Mixtral-style stacked expert weights: `N_EXPERTS * F` in a signature
    // (F is bound by `bias`: binding it from a compound dim is issue 11 item 2).
    #[tensor_fn]
    pub fn experts(w: Tensor![f32; D, N_EXPERTS * F], bias: Tensor![f32; F]) -> Tensor![f32; D, N_EXPERTS, F] {
        reshape(w, [D, N_EXPERTS, F])
    }
}

fn main() {
    let x = tc::Tensor::from_vec(&[1, 2, 2, 3], (0..12).map(|i| i as f32).collect()).unwrap();
    let y = vit::patches(x).unwrap();
    assert_eq!(y.shape(), &[1, 4, 3]);
    let w = tc::Tensor::from_vec(&[2, 6], (0..12).map(|i| i as f32).collect()).unwrap();
    let bias = tc::Tensor::from_vec(&[3], vec![0.0f32; 3]).unwrap();
    assert_eq!(vit::experts(w, bias).unwrap().shape(), &[2, 2, 3]);
}
