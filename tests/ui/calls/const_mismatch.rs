use tc::tensor_module;

#[tensor_module]
mod m {
    use tc::Tensor;

    const HIDDEN: usize = 64;

    #[tensor_fn]
    pub fn proj(x: Tensor![f32; B, HIDDEN]) -> Tensor![f32; B, HIDDEN] {
        x
    }

    // D is not known to be HIDDEN.
    #[tensor_fn]
    pub fn caller(x: Tensor![f32; B, D]) -> Tensor![f32; B, D] {
        proj(x)
    }
}

fn main() {}
