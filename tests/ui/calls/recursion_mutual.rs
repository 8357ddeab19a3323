use tc::tensor_module;

// Section 2 §17 has no recursion: a cycle of calls is an error at each call
// that closes it, naming the cycle.
#[tensor_module]
mod m {
    use tc::Tensor;

    #[tensor_fn]
    pub fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
        relu(g(x))
    }

    #[tensor_fn]
    pub fn g(x: Tensor![f32; N]) -> Tensor![f32; N] {
        let y = exp(x);
        f(y)
    }
}

fn main() {
    let _ = m::f;
}
