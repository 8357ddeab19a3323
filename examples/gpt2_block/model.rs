//! The GPT-2-small-sized decoder block shared by `examples/transformer.rs`
//! (random weights, compile vs cached time) and `examples/peer_bench.rs`
//! (block 0 of `models/gpt2-seed0`, against PyTorch's `GPT2Block` and an
//! ONNX Runtime export of it): D = 768, 12 heads, MLP 3072, causal mask via
//! `select`, layer norm, residuals, GPT-2's Conv1D `[in, out]` weights.

// Each including example uses part of this file.
#![allow(dead_code)]

use tc::{tensor_module, Tensor};

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
        let k = transpose(reshape(k, [B, S, HEADS, HEAD_DIM]), [0, 2, 3, 1]);
        let v = transpose(reshape(v, [B, S, HEADS, HEAD_DIM]), [0, 2, 1, 3]);
        // Position i attends to j ≤ i: 0 there, −1e30 beyond, added to
        // the scores inside the fused attention (docs/syntax.md §12f).
        let causal = le(iota::<i64>([S, S], 1), iota::<i64>([S, S], 0));
        let mask = select(causal, full::<f32>([S, S], 0.0), full::<f32>([S, S], -1e30));
        let heads = sdpa(q, k, v, broadcast(mask, [B, HEADS, S, S]), 0.125);
        let ctx = transpose(heads, [0, 2, 1, 3]);
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

/// One block's twelve weights, in `gpt2::block`'s parameter order.
pub struct Weights {
    /// `ln_1` g, b; `c_attn` w, b; `attn.c_proj` w, b; `ln_2` g, b;
    /// `c_fc` w, b; `mlp.c_proj` w, b.
    pub t: [Tensor; 12],
}

/// The safetensors names of [`Weights::t`] under `h.{layer}.`.
pub const NAMES: [&str; 12] = [
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
];

/// GPT-2's layer-norm epsilon.
pub const EPS: f32 = 1e-5;

impl Weights {
    /// Block `layer` of a GPT-2 safetensors file's bytes (`transformers`'
    /// names, without a `transformer.` prefix).
    pub fn from_safetensors(bytes: &[u8], layer: usize) -> Result<Self, tc::Error> {
        let load = |name: &str| {
            tc::runtime::safetensors_io::load_tensor_from_bytes(
                bytes,
                &format!("h.{layer}.{name}"),
                tc::core::Dtype::F32,
                None,
            )
        };
        let mut t = Vec::with_capacity(NAMES.len());
        for name in NAMES {
            t.push(load(name)?);
        }
        Ok(Weights {
            t: t.try_into().expect("one tensor per name"),
        })
    }

    /// The block on `x` (`[B, S, 768]`).
    pub fn run(&self, x: Tensor) -> Result<Tensor, tc::Error> {
        let [ln1_g, ln1_b, w_attn, b_attn, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out, b_out] =
            self.t.clone();
        gpt2::block(
            x, ln1_g, ln1_b, w_attn, b_attn, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out,
            b_out, EPS,
        )
    }
}
