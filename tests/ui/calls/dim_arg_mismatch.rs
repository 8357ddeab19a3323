use tc::tensor_module;

// Llama's per-head gate: `heads` must equal the gate's length. A caller that
// passes a different dim for it gets the mismatch at that argument, with
// the callee's parameter named and a counterexample.
#[tensor_module]
mod m {
    use tc::{Dim, Tensor};

    #[tensor_fn]
    pub fn gate_heads(g: Tensor![f32; H], heads: Dim![H]) -> Tensor![f32; H] {
        sigmoid(g)
    }

    #[tensor_fn]
    pub fn caller(g: Tensor![f32; H], n_kv_heads: Dim![KV]) -> Tensor![f32; H] {
        gate_heads(g, KV)
    }
}

fn main() {}
