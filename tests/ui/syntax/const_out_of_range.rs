use tc::tensor_module;

// Module constants are evaluated in checked i64 arithmetic and must fit their
// type: none of these may silently become a shape variable or wrap.
#[tensor_module]
mod m {
    use tc::Tensor;

    const BIG: usize = 18446744073709551615;
    const HALF: i64 = 4611686018427387904;
    const TWICE: i64 = HALF * 2;
    const NEG: i64 = -3;
    const SHIFTED: usize = 1 << 4;

    #[tensor_fn]
    pub fn neg(x: Tensor![f32; NEG]) -> Tensor![f32; NEG] {
        relu(x)
    }

    #[tensor_fn]
    pub fn opaque(x: Tensor![f32; SHIFTED]) -> Tensor![f32; SHIFTED] {
        relu(x)
    }
}

fn main() {}
