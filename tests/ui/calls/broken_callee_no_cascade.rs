use tc::tensor_module;

// One error in `bad`'s signature; `caller` reports nothing more.
#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn bad(x: Tensor![f32; B, S], n: String) -> Tensor![f32; B, S] {
        x
    }

    #[tensor_fn]
    pub fn caller(x: Tensor![f32; B, S]) -> Tensor![f32; B, S] {
        bad(x, x)
    }
}

fn main() {
    let _ = m::caller;
}
