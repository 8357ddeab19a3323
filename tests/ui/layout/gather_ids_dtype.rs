use tc::{tensor_fn, Tensor};

// An embedding lookup (MiniLM's word embeddings, [V, D]) with token ids
// passed as f32: gather's indices are i64.
#[tensor_fn]
pub fn embed(w: Tensor![f32; V, D], tokens: Tensor![f32; B, S]) -> Tensor![f32; B, S, D] {
    gather(w, tokens)
}

fn main() {}
