//! examples/transformer.rs's GPT-2 block with one deliberate shape bug: the
//! keys are not transposed before `q · kᵀ`. `cargo build` rejects it with
//! the contraction mismatch and a counterexample.

use tc::tensor_module;

#[tensor_module]
pub mod gpt2 {
    use tc::Tensor;

    /// Model width.
    pub const D_MODEL: usize = 768;
    /// Attention heads.
    pub const HEADS: usize = 12;
    /// Head width.
    pub const HEAD_DIM: usize = 64;
    /// MLP width.
    pub const MLP: usize = 3072;

    /// `x · w + b` with GPT-2's `[in, out]` weight layout.
    #[tensor_fn]
    pub fn linear(
        x: Tensor![f32; B, S, I],
        w: Tensor![f32; I, O],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        matmul(x, broadcast(w, [B, I, O])) + broadcast(b, [B, S, O])
    }

    /// LayerNorm over the model axis.
    #[tensor_fn]
    pub fn layer_norm(
        x: Tensor![f32; B, S, D_MODEL],
        g: Tensor![f32; D_MODEL],
        b: Tensor![f32; D_MODEL],
        eps: f32,
    ) -> Tensor![f32; B, S, D_MODEL] {
        let mu = mean_keepdims(x, [2]);
        let xc = x - broadcast(mu, [B, S, D_MODEL]);
        let inv = rsqrt(mean_keepdims(xc * xc, [2]) + eps);
        xc * broadcast(inv, [B, S, D_MODEL]) * broadcast(g, [B, S, D_MODEL])
            + broadcast(b, [B, S, D_MODEL])
    }

    /// Causal softmax: position i attends to j ≤ i only.
    #[tensor_fn]
    pub fn causal_softmax(scores: Tensor![f32; B, H, S, S]) -> Tensor![f32; B, H, S, S] {
        let row = iota::<i64>([B, H, S, S], 2);
        let col = iota::<i64>([B, H, S, S], 3);
        let masked = select(le(col, row), scores, full::<f32>([B, H, S, S], -1e30));
        let m = max_keepdims(masked, [3]);
        let e = exp(masked - broadcast(m, [B, H, S, S]));
        e / broadcast(sum_keepdims(e, [3]), [B, H, S, S])
    }

    /// Causal multi-head self-attention with GPT-2's fused `c_attn` projection,
    /// split into q, k, v by slices of the last axis.
    #[tensor_fn]
    pub fn attention(
        x: Tensor![f32; B, S, D_MODEL],
        w_attn: Tensor![f32; D_MODEL, 3 * D_MODEL],
        b_attn: Tensor![f32; 3 * D_MODEL],
        w_proj: Tensor![f32; D_MODEL, D_MODEL],
        b_proj: Tensor![f32; D_MODEL],
    ) -> Tensor![f32; B, S, D_MODEL] {
        let qkv = linear(x, w_attn, b_attn);
        let q = slice(qkv, 2, 0, D_MODEL);
        let k = slice(qkv, 2, D_MODEL, 2 * D_MODEL);
        let v = slice(qkv, 2, 2 * D_MODEL, 3 * D_MODEL);
        let q = transpose(reshape(q, [B, S, HEADS, HEAD_DIM]), [0, 2, 1, 3]);
        // The bug: k is left as [B, HEADS, S, HEAD_DIM] instead of being
        // transposed to [B, HEADS, HEAD_DIM, S] for q · kᵀ.
        let k = transpose(reshape(k, [B, S, HEADS, HEAD_DIM]), [0, 2, 1, 3]);
        let v = transpose(reshape(v, [B, S, HEADS, HEAD_DIM]), [0, 2, 1, 3]);
        let probs = causal_softmax(matmul(q, k) * 0.125);
        let ctx = transpose(matmul(probs, v), [0, 2, 1, 3]);
        linear(reshape(ctx, [B, S, D_MODEL]), w_proj, b_proj)
    }

    /// The decoder block: pre-norm attention and MLP, each with a residual.
    #[tensor_fn]
    pub fn block(
        x: Tensor![f32; B, S, D_MODEL],
        ln1_g: Tensor![f32; D_MODEL],
        ln1_b: Tensor![f32; D_MODEL],
        w_attn: Tensor![f32; D_MODEL, 3 * D_MODEL],
        b_attn: Tensor![f32; 3 * D_MODEL],
        w_proj: Tensor![f32; D_MODEL, D_MODEL],
        b_proj: Tensor![f32; D_MODEL],
        ln2_g: Tensor![f32; D_MODEL],
        ln2_b: Tensor![f32; D_MODEL],
        w_fc: Tensor![f32; D_MODEL, MLP],
        b_fc: Tensor![f32; MLP],
        w_out: Tensor![f32; MLP, D_MODEL],
        b_out: Tensor![f32; D_MODEL],
        eps: f32,
    ) -> Tensor![f32; B, S, D_MODEL] {
        let h = x + attention(
            layer_norm(x, ln1_g, ln1_b, eps),
            w_attn,
            b_attn,
            w_proj,
            b_proj,
        );
        let m = linear(
            gelu(linear(layer_norm(h, ln2_g, ln2_b, eps), w_fc, b_fc)),
            w_out,
            b_out,
        );
        h + m
    }
}

fn main() {}
