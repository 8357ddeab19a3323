// A module constant divisor whose value is 0 is a division by zero.
use tc::tensor_module;

#[tensor_module]
pub mod m {
    use tc::Tensor;

    pub const Z: usize = 0;

    #[tensor_fn]
    pub fn f(x: Tensor![f32; D]) -> Tensor![f32; D] {
        let y = full::<f32>([D / Z + 1], 0.0);
        x
    }
}

fn main() {}
