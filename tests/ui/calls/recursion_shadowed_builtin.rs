use tc::tensor_module;

// A tensor fn of the module shadows the built-in op of the same name, so
// `relu(x)` inside `fn relu` calls itself.
#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn relu(x: Tensor![f32; N]) -> Tensor![f32; N] {
        relu(x)
    }
}

fn main() {
    let _ = m::relu;
}
