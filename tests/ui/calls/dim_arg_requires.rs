use tc::tensor_module;

// GPT-2 splits d_model into heads; a caller that passes a head count its
// model dim is not known to be a multiple of breaks the callee's `requires`.
// The counterexample names the caller's variables, the dim parameter's too.
#[tensor_module]
mod m {
    use tc::{Dim, Tensor};

    #[tensor_fn(requires(D % H == 0))]
    pub fn split_heads(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, H, S, D / H] {
        transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3])
    }

    // GPT-2 small's 12 heads, with no fact about D.
    #[tensor_fn]
    pub fn twelve(x: Tensor![f32; B, S, D]) -> Tensor![f32; B, S, D] {
        let y = transpose(split_heads(x, 12), [0, 2, 1, 3]);
        reshape(y, [B, S, D])
    }

    // `D % H == 0` does not make `D` a multiple of `2 * H`.
    #[tensor_fn(requires(D % H == 0))]
    pub fn doubled(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, S, D] {
        let y = transpose(split_heads(x, 2 * H), [0, 2, 1, 3]);
        reshape(y, [B, S, D])
    }
}

fn main() {}
