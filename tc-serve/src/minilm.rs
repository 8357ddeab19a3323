//! all-MiniLM-L6-v2 (a 6-layer BERT encoder, hidden 384, 12 heads, FFN 1536)
//! written as tensor fns, plus the host code that tokenizes and runs the
//! layers.
//!
//! It reproduces sentence-transformers' pipeline for this model step by step
//! (modules.json: Transformer → Pooling(mean) → Normalize):
//! * BertEmbeddings: word + position + token-type(0) embeddings, LayerNorm;
//! * 6 × BertLayer: self-attention with the additive mask `(1 - mask) · finfo(f32).min`,
//!   scores scaled by 1/√32, softmax, output dense + residual + LayerNorm,
//!   intermediate dense + GELU (erf form, `hidden_act: "gelu"`), output
//!   dense + residual + LayerNorm; every LayerNorm with `layer_norm_eps` from config.json;
//! * Pooling: `sum(h · mask) / clamp(sum(mask), min = 1e-9)` over tokens;
//! * Normalize: `x / max(‖x‖₂, 1e-12)`.
//!
//! The embedding lookup is `gather` inside the model (`bert::embeddings`):
//! a token id past the vocabulary, or a sequence longer than the position
//! table, is a typed `IndexOutOfRange` naming the id and its position.

#![allow(dead_code)]

use std::path::Path;

use rayon::prelude::*;

use tc::{tensor_module, Tensor};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

#[tensor_module]
pub mod bert {
    use tc::Tensor;

    /// Hidden size.
    pub const HIDDEN: usize = 384;
    /// Attention heads.
    pub const HEADS: usize = 12;
    /// Head width: HIDDEN / HEADS.
    pub const HEAD_DIM: usize = 32;
    /// Feed-forward width.
    pub const FFN: usize = 1536;
    /// The query, key and value projections side by side (`3 · HIDDEN`).
    pub const QKV: usize = 1152;
    /// Input channels of an int8 product kept in F32 ([`olinear`]): the
    /// outlier channels of its activations, found by calibration.
    pub const OUTLIERS: usize = 16;
    /// The int8 hidden channels: `HIDDEN - OUTLIERS`.
    pub const INT8_HIDDEN: usize = 368;
    /// The int8 feed-forward channels: `FFN - OUTLIERS`.
    pub const INT8_FFN: usize = 1520;

    /// `x · wᵀ + b` with a PyTorch-layout weight `[out, in]`.
    #[tensor_fn]
    pub fn linear(
        x: Tensor![f32; B, S, I],
        w: Tensor![f32; O, I],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        let wt = broadcast(transpose(w, [1, 0]), [B, I, O]);
        matmul(x, wt) + broadcast(b, [B, S, O])
    }

    /// `x · wᵀ + b` with an int8 weight (`Q8_0`, `[out, in]` blocks along
    /// `in`): Section 2 §18's `qmatmul`, whose numerics (F32 accumulation of
    /// the exactly dequantized weight, or activations quantized per
    /// 32-block and integer dots) the caller picks (`tc::with_quant_numerics`,
    /// else the JIT's `fast_quant`).
    #[tensor_fn(requires(I % 32 == 0))]
    pub fn qlinear(
        x: Tensor![f32; B, S, I],
        w: Tensor![q8_0; O, I],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        qmatmul(x, w) + broadcast(b, [B, S, O])
    }

    /// `x · w + b` with a BF16 weight `[in, out]`: the activations rounded
    /// to BF16 (Section 2 §5), one BF16 product (Section 2 §3: F32
    /// accumulation, one rounding at the end; AMX-BF16 tiles or
    /// `vdpbf16ps` where the CPU has them), widened back to F32 for the
    /// bias. The weight is
    /// broadcast, not copied: the sentences' rows are one GEMM.
    #[tensor_fn]
    pub fn blinear(
        x: Tensor![f32; B, S, I],
        w: Tensor![bf16; I, O],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        let y = matmul(cast::<bf16>(x), broadcast(w, [B, I, O]));
        cast::<f32>(y) + broadcast(b, [B, S, O])
    }

    /// `x · w` in int8 (Section 2 §7b's `matmul_i32`): each row of `x`
    /// quantized to i8 with its own scale (`max|x| / 127`, rounded to
    /// nearest), `w` an i8 `[in, out]` weight with a scale per output
    /// column; the exact i32 sums scaled back to F32 by both scales.
    #[tensor_fn]
    pub fn iproduct(
        x: Tensor![f32; B, S, I],
        w: Tensor![i8; I, O],
        w_scale: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        let x_scale = maximum(max_keepdims(abs(x), [2]) / 127.0, 1e-30);
        let xq = cast::<i8>(round(x / broadcast(x_scale, [B, S, I])));
        let sums = cast::<f32>(matmul_i32(xq, broadcast(w, [B, I, O])));
        sums * broadcast(x_scale, [B, S, O]) * broadcast(w_scale, [B, S, O])
    }

    /// `x · w + b` with an int8 product ([`iproduct`]).
    #[tensor_fn]
    pub fn ilinear(
        x: Tensor![f32; B, S, I],
        w: Tensor![i8; I, O],
        w_scale: Tensor![f32; O],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        iproduct(x, w, w_scale) + broadcast(b, [B, S, O])
    }

    /// `x · w + b` split as LLM.int8() splits it (docs/syntax.md §7c's
    /// `dq_matmul`): the last `J` input channels (the activations'
    /// outlier channels, which the model's channel order puts last)
    /// through an F32 product with their F32 weight rows `w_out`, the
    /// first `K` through an int8 one (each row quantized by its own scale,
    /// `w` with a scale per column). A few channels of 5–20× the others'
    /// magnitude would otherwise set the rows' scales and leave the other
    /// channels a few levels of 8 bits. One op: on AMX-INT8 tiles the
    /// quantization fills the tiles' packing and the scaling and the
    /// outliers' product happen as the tiles are stored.
    #[tensor_fn(requires(I == K + J))]
    pub fn olinear(
        x: Tensor![f32; B, S, I],
        w: Tensor![i8; K, O],
        w_scale: Tensor![f32; O],
        w_out: Tensor![f32; J, O],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        dq_matmul(x, w, w_scale, w_out) + broadcast(b, [B, S, O])
    }

    /// LayerNorm over the hidden axis.
    #[tensor_fn]
    pub fn layer_norm(
        x: Tensor![f32; B, S, HIDDEN],
        gamma: Tensor![f32; HIDDEN],
        beta: Tensor![f32; HIDDEN],
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let mu = mean_keepdims(x, [2]);
        let xc = x - broadcast(mu, [B, S, HIDDEN]);
        let var = mean_keepdims(xc * xc, [2]);
        let inv = rsqrt(var + eps);
        let y = xc * broadcast(inv, [B, S, HIDDEN]);
        y * broadcast(gamma, [B, S, HIDDEN]) + broadcast(beta, [B, S, HIDDEN])
    }

    /// BertEmbeddings' weights (`embeddings.*` in model.safetensors).
    #[tensor_params]
    pub struct Embeddings {
        #[tensor_name = "word_embeddings.weight"]
        pub word: Tensor![f32; V, HIDDEN],
        #[tensor_name = "position_embeddings.weight"]
        pub position: Tensor![f32; P, HIDDEN],
        #[tensor_name = "token_type_embeddings.weight"]
        pub token_type: Tensor![f32; T, HIDDEN],
        #[tensor_name = "LayerNorm.weight"]
        pub ln_gamma: Tensor![f32; HIDDEN],
        #[tensor_name = "LayerNorm.bias"]
        pub ln_beta: Tensor![f32; HIDDEN],
    }

    /// Word + position + token-type embeddings (looked up by id), then
    /// LayerNorm.
    #[tensor_fn]
    pub fn embeddings(
        e: Embeddings,
        ids: Tensor![i64; B, S],
        position_ids: Tensor![i64; S],
        type_ids: Tensor![i64; S],
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let words = gather(e.word, ids);
        let positions = broadcast(gather(e.position, position_ids), [B, S, HIDDEN]);
        let types = broadcast(gather(e.token_type, type_ids), [B, S, HIDDEN]);
        layer_norm(words + positions + types, e.ln_gamma, e.ln_beta, eps)
    }

    /// One BertLayer's weights (`encoder.layer.N.*` in model.safetensors).
    #[tensor_params]
    pub struct Layer {
        #[tensor_name = "attention.self.query.weight"]
        pub wq: Tensor![f32; HIDDEN, HIDDEN],
        #[tensor_name = "attention.self.query.bias"]
        pub bq: Tensor![f32; HIDDEN],
        #[tensor_name = "attention.self.key.weight"]
        pub wk: Tensor![f32; HIDDEN, HIDDEN],
        #[tensor_name = "attention.self.key.bias"]
        pub bk: Tensor![f32; HIDDEN],
        #[tensor_name = "attention.self.value.weight"]
        pub wv: Tensor![f32; HIDDEN, HIDDEN],
        #[tensor_name = "attention.self.value.bias"]
        pub bv: Tensor![f32; HIDDEN],
        #[tensor_name = "attention.output.dense.weight"]
        pub wo: Tensor![f32; HIDDEN, HIDDEN],
        #[tensor_name = "attention.output.dense.bias"]
        pub bo: Tensor![f32; HIDDEN],
        #[tensor_name = "attention.output.LayerNorm.weight"]
        pub ln1_g: Tensor![f32; HIDDEN],
        #[tensor_name = "attention.output.LayerNorm.bias"]
        pub ln1_b: Tensor![f32; HIDDEN],
        #[tensor_name = "intermediate.dense.weight"]
        pub w1: Tensor![f32; FFN, HIDDEN],
        #[tensor_name = "intermediate.dense.bias"]
        pub b1: Tensor![f32; FFN],
        #[tensor_name = "output.dense.weight"]
        pub w2: Tensor![f32; HIDDEN, FFN],
        #[tensor_name = "output.dense.bias"]
        pub b2: Tensor![f32; HIDDEN],
        #[tensor_name = "output.LayerNorm.weight"]
        pub ln2_g: Tensor![f32; HIDDEN],
        #[tensor_name = "output.LayerNorm.bias"]
        pub ln2_b: Tensor![f32; HIDDEN],
    }

    /// The int8 weights of one BertLayer ([`encoder_layer_i8`],
    /// `MiniLm`'s `Precision::Int8`), made from [`Layer`]'s F32 ones at
    /// load, in the int8 model's channel orders: the hidden channels
    /// permuted so that the outliers of the products' inputs come last
    /// (one order for every layer, as the residual stream carries them),
    /// and this layer's feed-forward channels likewise. Every weight and
    /// parameter indexed by a hidden or feed-forward channel is permuted to
    /// match, so the layer computes the F32 layer's function in those
    /// orders. Weights are `[in, out]` i8 with a scale per output column;
    /// the rows of the outlier input channels stay F32 (`*_out`), the
    /// int8 weights hold the others'.
    #[tensor_params]
    pub struct IWeights {
        pub wqkv: Tensor![i8; INT8_HIDDEN, QKV],
        pub wqkv_scale: Tensor![f32; QKV],
        pub wqkv_out: Tensor![f32; OUTLIERS, QKV],
        pub bqkv: Tensor![f32; QKV],
        pub wo: Tensor![i8; HIDDEN, HIDDEN],
        pub wo_scale: Tensor![f32; HIDDEN],
        pub bo: Tensor![f32; HIDDEN],
        pub ln1_g: Tensor![f32; HIDDEN],
        pub ln1_b: Tensor![f32; HIDDEN],
        pub w1: Tensor![i8; INT8_HIDDEN, FFN],
        pub w1_scale: Tensor![f32; FFN],
        pub w1_out: Tensor![f32; OUTLIERS, FFN],
        pub b1: Tensor![f32; FFN],
        pub w2: Tensor![i8; INT8_FFN, HIDDEN],
        pub w2_scale: Tensor![f32; HIDDEN],
        pub w2_out: Tensor![f32; OUTLIERS, HIDDEN],
        pub b2: Tensor![f32; HIDDEN],
        pub ln2_g: Tensor![f32; HIDDEN],
        pub ln2_b: Tensor![f32; HIDDEN],
    }

    /// The int8 weights of one BertLayer's products, `Q8_0` blocks
    /// quantized from [`Layer`]'s F32 ones at load (`MiniLm`'s
    /// `Precision::Q8_0`); the norms and the other biases stay the F32
    /// layer's. The query, key and value weights are one `[QKV, HIDDEN]`
    /// matrix (their rows stacked, and their biases): one product whose
    /// activations are quantized once instead of three times. Each output
    /// is computed as it would be alone (a row's blocks and the
    /// activations' do not depend on the other rows).
    #[tensor_params]
    pub struct QWeights {
        pub wqkv: Tensor![q8_0; QKV, HIDDEN],
        pub bqkv: Tensor![f32; QKV],
        pub wo: Tensor![q8_0; HIDDEN, HIDDEN],
        pub w1: Tensor![q8_0; FFN, HIDDEN],
        pub w2: Tensor![q8_0; HIDDEN, FFN],
    }

    /// The BF16 weights of one BertLayer's products, rounded from
    /// [`Layer`]'s F32 ones at load (`MiniLm`'s `Precision::Bf16`) and
    /// stored `[in, out]` (a GEMM's right operand read row by row); the
    /// query, key and value ones side by side, as [`QWeights`] stacks them.
    #[tensor_params]
    pub struct BWeights {
        pub wqkv: Tensor![bf16; HIDDEN, QKV],
        pub bqkv: Tensor![f32; QKV],
        pub wo: Tensor![bf16; HIDDEN, HIDDEN],
        pub w1: Tensor![bf16; HIDDEN, FFN],
        pub w2: Tensor![bf16; FFN, HIDDEN],
    }

    /// BertSelfAttention's core over the projected queries, keys and values:
    /// the attention context, before the output dense.
    #[tensor_fn]
    pub fn self_attention(
        q: Tensor![f32; B, S, HIDDEN],
        k: Tensor![f32; B, S, HIDDEN],
        v: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
    ) -> Tensor![f32; B, S, HIDDEN] {
        let q = transpose(reshape(q, [B, S, HEADS, HEAD_DIM]), [0, 2, 1, 3]);
        let k = transpose(reshape(k, [B, S, HEADS, HEAD_DIM]), [0, 2, 3, 1]);
        let v = transpose(reshape(v, [B, S, HEADS, HEAD_DIM]), [0, 2, 1, 3]);
        // (1 - mask) · torch.finfo(float32).min, broadcast over heads and queries.
        let bias = (mask * -1.0 + 1.0) * -3.4028234663852886e38;
        let bias = broadcast(reshape(bias, [B, 1, 1, S]), [B, HEADS, S, S]);
        // softmax(q·k / √HEAD_DIM + bias)·v as one fused op (docs/syntax.md
        // §12f): no `[B, HEADS, S, S]` score or probability tensor is
        // written. The scale is BertSelfAttention's 1/math.sqrt(head size).
        let ctx = sdpa(q, k, v, bias, 0.17677669529663687);
        reshape(transpose(ctx, [0, 2, 1, 3]), [B, S, HIDDEN])
    }

    /// [`self_attention`] of the query, key and value projections side by
    /// side (`[B, S, QKV]`, one stacked product: [`QWeights`],
    /// [`BWeights`]).
    #[tensor_fn]
    pub fn stacked_attention(
        qkv: Tensor![f32; B, S, QKV],
        mask: Tensor![f32; B, S],
    ) -> Tensor![f32; B, S, HIDDEN] {
        self_attention(
            slice(qkv, 2, 0, HIDDEN),
            slice(qkv, 2, HIDDEN, 2 * HIDDEN),
            slice(qkv, 2, 2 * HIDDEN, QKV),
            mask,
        )
    }

    /// One BertLayer.
    #[tensor_fn]
    pub fn encoder_layer(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        l: Layer,
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let h = attention_half(x, mask, l, eps);
        ffn_half(h, ffn_activation(h, l), l, eps)
    }

    /// One BertLayer with int8 products ([`QWeights`]); the biases, norms
    /// and everything between the products as [`encoder_layer`].
    #[tensor_fn]
    pub fn encoder_layer_q8(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        l: Layer,
        w: QWeights,
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let ctx = stacked_attention(qlinear(x, w.wqkv, w.bqkv), mask);
        let h = layer_norm(qlinear(ctx, w.wo, l.bo) + x, l.ln1_g, l.ln1_b, eps);
        let f = qlinear(gelu(qlinear(h, w.w1, l.b1)), w.w2, l.b2);
        layer_norm(f + h, l.ln2_g, l.ln2_b, eps)
    }

    /// One BertLayer with int8 products ([`IWeights`]), in the int8
    /// model's channel orders: the attention's input and the feed-forward
    /// layer's two inputs split into int8 and F32 outlier channels
    /// ([`olinear`]); the attention context, whose channels are the heads'
    /// and carry no such outliers, quantized whole ([`ilinear`]).
    #[tensor_fn]
    pub fn encoder_layer_i8(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        w: IWeights,
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let qkv = olinear(x, w.wqkv, w.wqkv_scale, w.wqkv_out, w.bqkv);
        let ctx = stacked_attention(qkv, mask);
        let h = layer_norm(
            ilinear(ctx, w.wo, w.wo_scale, w.bo) + x,
            w.ln1_g,
            w.ln1_b,
            eps,
        );
        let g = gelu(olinear(h, w.w1, w.w1_scale, w.w1_out, w.b1));
        let f = olinear(g, w.w2, w.w2_scale, w.w2_out, w.b2);
        layer_norm(f + h, w.ln2_g, w.ln2_b, eps)
    }

    /// A BertLayer's attention half in F32: the feed-forward layer's input
    /// `h`. With [`ffn_activation`], what the int8 model's calibration
    /// measures; with it and [`ffn_half`], [`encoder_layer`].
    #[tensor_fn]
    pub fn attention_half(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        l: Layer,
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let ctx = self_attention(
            linear(x, l.wq, l.bq),
            linear(x, l.wk, l.bk),
            linear(x, l.wv, l.bv),
            mask,
        );
        layer_norm(linear(ctx, l.wo, l.bo) + x, l.ln1_g, l.ln1_b, eps)
    }

    /// The feed-forward layer's activation in F32, the input of its
    /// second product.
    #[tensor_fn]
    pub fn ffn_activation(h: Tensor![f32; B, S, HIDDEN], l: Layer) -> Tensor![f32; B, S, FFN] {
        gelu(linear(h, l.w1, l.b1))
    }

    /// A BertLayer's feed-forward half in F32 over its input `h` and its
    /// activation `g` ([`ffn_activation`]): the layer's output.
    #[tensor_fn]
    pub fn ffn_half(
        h: Tensor![f32; B, S, HIDDEN],
        g: Tensor![f32; B, S, FFN],
        l: Layer,
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        layer_norm(linear(g, l.w2, l.b2) + h, l.ln2_g, l.ln2_b, eps)
    }

    /// One BertLayer with BF16 products ([`BWeights`]); the biases, norms
    /// and everything between the products as [`encoder_layer`].
    #[tensor_fn]
    pub fn encoder_layer_bf16(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        l: Layer,
        w: BWeights,
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let ctx = stacked_attention(blinear(x, w.wqkv, w.bqkv), mask);
        let h = layer_norm(blinear(ctx, w.wo, l.bo) + x, l.ln1_g, l.ln1_b, eps);
        let f = blinear(gelu(blinear(h, w.w1, l.b1)), w.w2, l.b2);
        layer_norm(f + h, l.ln2_g, l.ln2_b, eps)
    }

    /// sentence-transformers Pooling(mean) followed by Normalize.
    #[tensor_fn]
    pub fn mean_pool_normalize(
        h: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
    ) -> Tensor![f32; B, HIDDEN] {
        let m = broadcast(reshape(mask, [B, S, 1]), [B, S, HIDDEN]);
        let summed = sum(h * m, [1]);
        let count = maximum(sum_keepdims(mask, [1]), 1e-9);
        let pooled = summed / broadcast(count, [B, HIDDEN]);
        let norm = maximum(sqrt(sum_keepdims(pooled * pooled, [1])), 1e-12);
        pooled / broadcast(norm, [B, HIDDEN])
    }
}

/// Errors of the host side.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The precision of the model's products: a typed choice, made at load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// The file's F32 weights ([`bert::encoder_layer`]).
    #[default]
    F32,
    /// Int8 products with F32 outlier channels (LLM.int8()'s split,
    /// [`bert::encoder_layer_i8`]): every product's weight quantized at load
    /// to i8 with a scale per output column, its activations per row as it
    /// runs, and Section 2 §7b's `matmul_i32` (AMX-INT8 tiles where the CPU
    /// has them) on the exact integer sums. The 16 input channels of each
    /// product whose activations reach furthest beyond the others
    /// (calibrated at load on [`CALIBRATION`], sentences of their own) go
    /// through an F32 product instead: without that split, per-row scales
    /// leave the worst sentence of the accuracy corpus at cosine 0.9978 to
    /// the F32 embedding. The embeddings, norms, attention and pooling stay
    /// F32.
    Int8,
    /// Every product's weight quantized to `Q8_0` at load (ggml's blocks:
    /// a scale per 32 weights of a row), [`bert::encoder_layer_q8`], and
    /// its activations quantized per 32-block to 8 bits as it runs
    /// (`tc::with_quant_numerics(Fast)`: integer block dots on AVX-512
    /// VNNI `vpdpbusd`, or AMX-INT8 tiles where the CPU has them; Section
    /// 2 §18's fast numerics, whose per-element bound `tc_quant::quant`
    /// states). The embeddings, norms, attention and pooling stay F32.
    Q8_0,
    /// Every product's weight rounded to BF16 at load, and its activations
    /// as it runs ([`bert::encoder_layer_bf16`]): F32 accumulation on
    /// AVX512-BF16 `vdpbf16ps` where the CPU has it, else widened to F32
    /// (the same rounding of each element, a product order of its own:
    /// Section 2 §3). The embeddings, norms, attention and pooling stay
    /// F32.
    Bf16,
}

/// The layers' product weights at the model's [`Precision`].
enum Products {
    F32,
    Int8(Int8Model),
    Q8_0(Vec<bert::QWeights>),
    Bf16(Vec<bert::BWeights>),
}

/// The loaded model.
pub struct MiniLm {
    /// Read on first use (about 20 ms of JSON): a caller that passes token
    /// ids ([`MiniLm::embed_batch`]) never pays for it.
    tokenizer: std::sync::OnceLock<Tokenizer>,
    tokenizer_file: std::path::PathBuf,
    embeddings: bert::Embeddings,
    layers: Vec<bert::Layer>,
    /// The layers' product weights other than F32 ones.
    products: Products,
    eps: f32,
    /// Maximum tokens per sentence (sentence-transformers' `max_seq_length`).
    pub max_len: usize,
}

/// One tokenized batch: ids and mask, `[B, S]` row-major.
pub struct Batch {
    /// Sentences.
    pub b: usize,
    /// Padded length.
    pub s: usize,
    /// Token ids.
    pub ids: Vec<u32>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Vec<f32>,
}

impl MiniLm {
    /// Load weights, tokenizer and configs from a folder laid out like the
    /// model's Hugging Face repository (what `scripts/fetch-minilm.sh` makes).
    pub fn load(dir: &Path) -> Result<MiniLm, BoxError> {
        MiniLm::load_with(dir, Precision::F32)
    }

    /// [`MiniLm::load`] with the products at `precision`.
    pub fn load_with(dir: &Path, precision: Precision) -> Result<MiniLm, BoxError> {
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
        let eps = config["layer_norm_eps"]
            .as_f64()
            .ok_or("config.json lacks layer_norm_eps")? as f32;
        let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
            dir.join("sentence_bert_config.json"),
        )?)?;
        let max_len = st["max_seq_length"].as_u64().unwrap_or(256) as usize;
        // Mapped, not read: the weights are used where the file lies (no
        // zeroed pages, no copy; 91 MB in 2–3 ms instead of 50–70).
        // SAFETY: the model directory is not written while the model is
        // loaded (a fetched, read-only model, as every peer assumes when
        // it maps its weights).
        let w = unsafe { tc::runtime::load_safetensors_mapped(dir.join("model.safetensors"))? };
        // Every weight's dtype and shape is checked here, by name.
        let layers = (0..6)
            .map(|l| bert::Layer::load(&w, &format!("encoder.layer.{l}")))
            .collect::<Result<Vec<_>, _>>()?;
        let embeddings = bert::Embeddings::load(&w, "embeddings")?;
        let tokenizer_file = dir.join("tokenizer.json");
        if !tokenizer_file.is_file() {
            return Err(format!("no tokenizer at {}", tokenizer_file.display()).into());
        }
        let products = match precision {
            Precision::F32 => Products::F32,
            // Calibrated below, on the F32 model.
            Precision::Int8 => Products::F32,
            Precision::Q8_0 => Products::Q8_0(
                layers
                    .iter()
                    .map(quantize_layer)
                    .collect::<Result<_, _>>()?,
            ),
            Precision::Bf16 => {
                Products::Bf16(layers.iter().map(bf16_layer).collect::<Result<_, _>>()?)
            }
        };
        let mut model = MiniLm {
            tokenizer: std::sync::OnceLock::new(),
            tokenizer_file,
            embeddings,
            layers,
            products,
            eps,
            max_len,
        };
        if precision == Precision::Int8 {
            model.products = Products::Int8(Int8Model::new(&model)?);
        }
        Ok(model)
    }

    /// The tokenizer, padding to the longest sentence and truncating at
    /// [`MiniLm::max_len`]; read from the model folder on first use.
    pub fn tokenizer(&self) -> Result<&Tokenizer, BoxError> {
        if let Some(t) = self.tokenizer.get() {
            return Ok(t);
        }
        let mut t = Tokenizer::from_file(&self.tokenizer_file)?;
        t.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        t.with_truncation(Some(TruncationParams {
            max_length: self.max_len,
            ..Default::default()
        }))
        .map_err(|e| e.to_string())?;
        // Two threads may both read it; the first one kept wins.
        Ok(self.tokenizer.get_or_init(|| t))
    }

    /// Tokenize a batch, padded to its longest sentence.
    pub fn tokenize(&self, sentences: &[&str]) -> Result<Batch, BoxError> {
        if sentences.is_empty() {
            return Err("no sentences".into());
        }
        let enc = self.tokenizer()?.encode_batch(sentences.to_vec(), true)?;
        let s = enc.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(enc.len() * s);
        let mut mask = Vec::with_capacity(enc.len() * s);
        for e in &enc {
            ids.extend_from_slice(e.get_ids());
            mask.extend(e.get_attention_mask().iter().map(|&m| m as f32));
        }
        Ok(Batch {
            b: enc.len(),
            s,
            ids,
            mask,
        })
    }

    /// Token count of one sentence after truncation (with `[CLS]` and `[SEP]`).
    pub fn token_count(&self, sentence: &str) -> Result<usize, BoxError> {
        Ok(self.tokenizer()?.encode(sentence, true)?.get_ids().len())
    }

    /// The batch's token ids `[B, S]`, position ids `[S]` and token-type
    /// ids `[S]` (all type 0, as sentence-transformers passes for one
    /// segment), i64.
    fn id_tensors(&self, batch: &Batch) -> Result<(Tensor, Tensor, Tensor), BoxError> {
        let ids: Vec<i64> = batch.ids.iter().map(|&i| i64::from(i)).collect();
        let positions: Vec<i64> = (0..batch.s as i64).collect();
        Ok((
            Tensor::from_vec(&[batch.b, batch.s], ids)?,
            Tensor::from_vec(&[batch.s], positions)?,
            Tensor::from_vec(&[batch.s], vec![0i64; batch.s])?,
        ))
    }

    /// Unit-norm sentence embeddings `[B, 384]` of a tokenized batch.
    ///
    /// The whole forward pass is one [`tc::session`]: one hop onto the
    /// thread pool, whose other workers stay awake for every step the
    /// layers split, instead of a hop per call.
    pub fn embed_batch(&self, batch: &Batch) -> Result<Tensor, BoxError> {
        let (ids, positions, types) = self.id_tensors(batch)?;
        let mask = Tensor::from_vec(&[batch.b, batch.s], batch.mask.clone())?;
        let run = || {
            tc::session(|| {
                let mut h = bert::embeddings(&self.embeddings, ids, positions, types, self.eps)?;
                if let Products::Int8(m) = &self.products {
                    return Ok(m.encode(h, mask, self.eps)?);
                }
                for (i, layer) in self.layers.iter().enumerate() {
                    let (m, eps) = (mask.clone(), self.eps);
                    h = match &self.products {
                        Products::Q8_0(q) => bert::encoder_layer_q8(h, m, layer, &q[i], eps)?,
                        Products::Bf16(b) => bert::encoder_layer_bf16(h, m, layer, &b[i], eps)?,
                        _ => bert::encoder_layer(h, m, layer, eps)?,
                    };
                }
                Ok(bert::mean_pool_normalize(h, mask)?)
            })
        };
        match self.products {
            Products::Q8_0(_) => tc::with_quant_numerics(tc::runtime::quant::Numerics::Fast, run),
            _ => run(),
        }
    }

    /// Embed sentences: one `Vec<f32>` of length 384 per sentence.
    pub fn embed(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>, BoxError> {
        let batch = self.tokenize(sentences)?;
        let e = self.embed_batch(&batch)?;
        let flat: Vec<f32> = e.to_vec()?;
        Ok(flat.chunks(384).map(|c| c.to_vec()).collect())
    }
}

/// A layer's product weights as `Q8_0` ([`Precision::Q8_0`]), the query,
/// key and value ones stacked, packed now for the fast kernels (as the
/// first product would pack them: no request pays for it).
fn quantize_layer(l: &bert::Layer) -> Result<bert::QWeights, BoxError> {
    let q = |w: &Tensor| -> Result<Tensor, BoxError> {
        let t = tc::runtime::quant::quantize_q8_0(w)?;
        tc::llvm::kernels::prepack::quant::prepack(&t);
        Ok(t)
    };
    // Rows stacked: a `Q8_0` row's blocks are its own, so quantizing the
    // stacked matrix gives these bytes.
    let stack = |ts: [&Tensor; 3]| -> Result<Tensor, BoxError> {
        let mut rows = 0;
        let mut data = Vec::new();
        for t in ts {
            rows += t.shape()[0];
            data.extend_from_slice(t.as_slice::<f32>()?);
        }
        let mut shape = ts[0].shape().to_vec();
        shape[0] = rows;
        Ok(Tensor::from_vec(&shape, data)?)
    };
    Ok(bert::QWeights {
        wqkv: q(&stack([&l.wq, &l.wk, &l.wv])?)?,
        bqkv: stack([&l.bq, &l.bk, &l.bv])?,
        wo: q(&l.wo)?,
        w1: q(&l.w1)?,
        w2: q(&l.w2)?,
    })
}

/// Sentences [`Precision::Int8`] calibrates its outlier channels on (none
/// of them in the accuracy test's corpus): the F32 model's activations over
/// them rank each product's input channels by how far they reach.
pub const CALIBRATION: [&str; 16] = [
    "The committee will meet on Tuesday to review the budget proposal.",
    "A small dog barked at the mail carrier all morning.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "She bought three apples, a loaf of bread and some cheese at the market.",
    "How do I reset my password if I no longer have access to my email?",
    "The stock market fell sharply after the central bank raised interest rates.",
    "Rain is expected in the northern regions later this week.",
    "He has been learning to play the violin since he was seven years old.",
    "The new smartphone features a larger screen and a longer battery life.",
    "Ancient Rome built roads, aqueducts and bridges that still stand today.",
    "Please send the signed contract back to our office by Friday.",
    "The recipe calls for two cups of flour and one teaspoon of salt.",
    "Machine learning models can be biased if their training data is unbalanced.",
    "Our flight was delayed for four hours because of a snowstorm.",
    "The museum's new exhibit explores the history of early photography.",
    "Why does ice float on water while most solids sink in their liquids?",
];

/// [`Precision::Int8`]'s layers, and the hidden channel order they compute
/// in (`order[i]`: the file's channel at position `i`; the outliers last).
struct Int8Model {
    layers: Vec<bert::IWeights>,
    order: Vec<usize>,
}

/// Per layer, the largest magnitude each input channel of its products
/// reached over the calibration sentences' tokens: the attention's input
/// `x`, the feed-forward layer's `h` and its activation `g`.
struct Reach {
    x: Vec<Vec<f32>>,
    h: Vec<Vec<f32>>,
    g: Vec<Vec<f32>>,
}

impl Int8Model {
    fn new(m: &MiniLm) -> Result<Int8Model, BoxError> {
        let reach = calibrate(m)?;
        // One hidden order for every layer (the residual stream carries
        // the channels through them): a channel ranks by the most it
        // reached in any layer, relative to that layer's median channel.
        let hidden = outliers_last(
            bert::HIDDEN,
            reach
                .x
                .iter()
                .chain(&reach.h)
                .map(|v| relative(v))
                .reduce(max_each),
        );
        // The layers' weights quantized on the pool, one layer a task.
        let layers = m
            .layers
            .par_iter()
            .zip(&reach.g)
            .map(|(l, g)| int8_layer(l, &hidden, &outliers_last(bert::FFN, Some(relative(g)))))
            .collect::<Result<_, _>>()?;
        Ok(Int8Model {
            layers,
            order: hidden,
        })
    }

    /// The int8 layers over the embeddings `h` (the file's order), and the
    /// pooled, normalized embeddings `[B, HIDDEN]` in the file's order.
    fn encode(&self, h: Tensor, mask: Tensor, eps: f32) -> Result<Tensor, tc::Error> {
        let (rows, width) = (h.numel() / bert::HIDDEN, bert::HIDDEN);
        let x = h.as_slice::<f32>()?;
        let mut p = Vec::with_capacity(x.len());
        for r in 0..rows {
            p.extend(self.order.iter().map(|&c| x[r * width + c]));
        }
        let mut h = Tensor::from_vec(h.shape(), p)?;
        for l in &self.layers {
            h = bert::encoder_layer_i8(h, mask.clone(), l, eps)?;
        }
        let e = bert::mean_pool_normalize(h, mask)?;
        let y = e.as_slice::<f32>()?;
        let mut out = vec![0f32; y.len()];
        for (o, row) in out.chunks_mut(width).zip(y.chunks(width)) {
            for (i, &c) in self.order.iter().enumerate() {
                o[c] = row[i];
            }
        }
        Tensor::from_vec(e.shape(), out)
    }
}

/// The F32 model over [`CALIBRATION`], each product's input measured.
fn calibrate(m: &MiniLm) -> Result<Reach, BoxError> {
    let batch = m.tokenize(&CALIBRATION)?;
    let (ids, positions, types) = m.id_tensors(&batch)?;
    let mask = Tensor::from_vec(&[batch.b, batch.s], batch.mask.clone())?;
    let mut reach = Reach {
        x: Vec::new(),
        h: Vec::new(),
        g: Vec::new(),
    };
    let mut x = bert::embeddings(&m.embeddings, ids, positions, types, m.eps)?;
    for l in &m.layers {
        // The layer as `encoder_layer` computes it, in its three parts.
        let h = bert::attention_half(x.clone(), mask.clone(), l, m.eps)?;
        let g = bert::ffn_activation(h.clone(), l)?;
        reach.x.push(channel_reach(&x, &batch.mask)?);
        reach.h.push(channel_reach(&h, &batch.mask)?);
        reach.g.push(channel_reach(&g, &batch.mask)?);
        x = bert::ffn_half(h, g, l, m.eps)?;
    }
    Ok(reach)
}

/// The largest `|a|` of each channel (last axis) of `a` over the rows whose
/// `mask` is 1: the real tokens, not the padding.
fn channel_reach(a: &Tensor, mask: &[f32]) -> Result<Vec<f32>, BoxError> {
    let width = a.shape().last().copied().unwrap_or(0);
    let mut out = vec![0f32; width];
    for (row, _) in a
        .as_slice::<f32>()?
        .chunks(width.max(1))
        .zip(mask)
        .filter(|(_, &m)| m == 1.0)
    {
        for (o, v) in out.iter_mut().zip(row) {
            *o = o.max(v.abs());
        }
    }
    Ok(out)
}

/// Each channel's reach over the median channel's.
fn relative(v: &[f32]) -> Vec<f32> {
    let mut sorted = v.to_vec();
    sorted.sort_by(f32::total_cmp);
    let median = sorted
        .get(sorted.len() / 2)
        .copied()
        .unwrap_or(1.0)
        .max(f32::MIN_POSITIVE);
    v.iter().map(|x| x / median).collect()
}

fn max_each(a: Vec<f32>, b: Vec<f32>) -> Vec<f32> {
    a.iter().zip(&b).map(|(x, y)| x.max(*y)).collect()
}

/// An order of `n` channels with the [`bert::OUTLIERS`] of greatest
/// `score` last (ties to the lower channel), the others first, each group
/// in channel order. No score (no calibration): the channel order.
fn outliers_last(n: usize, score: Option<Vec<f32>>) -> Vec<usize> {
    let Some(score) = score.filter(|s| s.len() == n) else {
        return (0..n).collect();
    };
    let mut ranked: Vec<usize> = (0..n).collect();
    ranked.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
    let mut out: Vec<usize> = ranked[bert::OUTLIERS.min(n)..].to_vec();
    let mut top: Vec<usize> = ranked[..bert::OUTLIERS.min(n)].to_vec();
    out.sort_unstable();
    top.sort_unstable();
    out.extend(top);
    out
}

/// A product's weights for [`bert::olinear`] / [`bert::ilinear`]: the F32
/// weight `w` (`[out, in]` rows, PyTorch's layout) with its inputs read in
/// `inputs` order and its outputs in `outputs` order, as i8 `[in, out]`
/// with a scale per output column (`max |w| / 127` over the int8 rows, each
/// weight rounded to nearest, ties to even) for all but the last
/// `f32_rows` inputs, and those rows in F32 (`[f32_rows, out]`).
fn int8_product(
    w: &[f32],
    inputs: &[usize],
    outputs: &[usize],
    f32_rows: usize,
) -> Result<(Tensor, Tensor, Tensor), BoxError> {
    let (n_in, n_out) = (inputs.len(), outputs.len());
    let j = n_in
        .checked_sub(f32_rows)
        .ok_or("more F32 rows than inputs")?;
    if w.len() != n_in * n_out {
        return Err(format!("a weight of {} values for {n_out} × {n_in}", w.len()).into());
    }
    // Output by output: its weight row read once, in input order, then
    // scattered into the `[in, out]` layouts.
    let (mut q, mut f) = (vec![0i8; j * n_out], vec![0f32; f32_rows * n_out]);
    let mut scale = Vec::with_capacity(n_out);
    let mut row = vec![0f32; n_in];
    for (o, &src) in outputs.iter().enumerate() {
        let w_row = &w[src * n_in..(src + 1) * n_in];
        for (r, &i) in row.iter_mut().zip(inputs) {
            *r = w_row[i];
        }
        let m = row[..j].iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let s = if m > 0.0 { m } else { 1.0 };
        scale.push(s);
        for (i, &v) in row[..j].iter().enumerate() {
            q[i * n_out + o] = (v / s).round_ties_even().clamp(-127.0, 127.0) as i8;
        }
        for (i, &v) in row[j..].iter().enumerate() {
            f[i * n_out + o] = v;
        }
    }
    Ok((
        Tensor::from_vec(&[j, n_out], q)?,
        Tensor::from_vec(&[n_out], scale)?,
        Tensor::from_vec(&[f32_rows, n_out], f)?,
    ))
}

/// `v` read in `order`.
fn permuted(v: &Tensor, order: &[usize]) -> Result<Tensor, BoxError> {
    let x = v.as_slice::<f32>()?;
    let p = order
        .iter()
        .map(|&c| x.get(c).copied().ok_or("a channel past the vector"))
        .collect::<Result<Vec<f32>, _>>()?;
    Ok(Tensor::from_vec(&[p.len()], p)?)
}

/// A layer's [`bert::IWeights`] in the hidden order `hidden` and the
/// feed-forward order `ffn` (both outliers last).
fn int8_layer(
    l: &bert::Layer,
    hidden: &[usize],
    ffn: &[usize],
) -> Result<bert::IWeights, BoxError> {
    let f = |t: &Tensor| t.as_slice::<f32>().map(<[f32]>::to_vec);
    let qkv_w = [f(&l.wq)?, f(&l.wk)?, f(&l.wv)?].concat();
    let qkv_b = [f(&l.bq)?, f(&l.bk)?, f(&l.bv)?].concat();
    let ctx: Vec<usize> = (0..bert::HIDDEN).collect();
    let stacked: Vec<usize> = (0..bert::QKV).collect();
    let (wqkv, wqkv_scale, wqkv_out) = int8_product(&qkv_w, hidden, &stacked, bert::OUTLIERS)?;
    let (wo, wo_scale, _) = int8_product(&f(&l.wo)?, &ctx, hidden, 0)?;
    let (w1, w1_scale, w1_out) = int8_product(&f(&l.w1)?, hidden, ffn, bert::OUTLIERS)?;
    let (w2, w2_scale, w2_out) = int8_product(&f(&l.w2)?, ffn, hidden, bert::OUTLIERS)?;
    Ok(bert::IWeights {
        wqkv,
        wqkv_scale,
        wqkv_out,
        bqkv: Tensor::from_vec(&[bert::QKV], qkv_b)?,
        wo,
        wo_scale,
        bo: permuted(&l.bo, hidden)?,
        ln1_g: permuted(&l.ln1_g, hidden)?,
        ln1_b: permuted(&l.ln1_b, hidden)?,
        w1,
        w1_scale,
        w1_out,
        b1: permuted(&l.b1, ffn)?,
        w2,
        w2_scale,
        w2_out,
        b2: permuted(&l.b2, hidden)?,
        ln2_g: permuted(&l.ln2_g, hidden)?,
        ln2_b: permuted(&l.ln2_b, hidden)?,
    })
}

/// A layer's product weights as BF16 `[in, out]` ([`Precision::Bf16`]):
/// each F32 weight rounded to nearest even (Section 2 §5), transposed;
/// the query, key and value ones side by side.
fn bf16_layer(l: &bert::Layer) -> Result<bert::BWeights, BoxError> {
    // `[out, in]` F32 matrices, stacked along `out`, as BF16 `[in, out]`.
    let t = |ws: &[&Tensor]| -> Result<Tensor, BoxError> {
        let cols = ws[0].shape()[1];
        let mut rows = Vec::new();
        for w in ws {
            rows.extend(w.as_slice::<f32>()?.chunks(cols));
        }
        let mut data = Vec::with_capacity(rows.len() * cols);
        for i in 0..cols {
            data.extend(rows.iter().map(|r| r[i]));
        }
        Ok(Tensor::from_vec(&[cols, rows.len()], data)?.cast(tc::core::Dtype::BF16)?)
    };
    let stack = |ts: [&Tensor; 3]| -> Result<Tensor, BoxError> {
        let data: Vec<f32> = ts
            .iter()
            .map(|t| t.as_slice::<f32>().map(<[f32]>::to_vec))
            .collect::<Result<Vec<_>, _>>()?
            .concat();
        Ok(Tensor::from_vec(&[data.len()], data)?)
    };
    Ok(bert::BWeights {
        wqkv: t(&[&l.wq, &l.wk, &l.wv])?,
        bqkv: stack([&l.bq, &l.bk, &l.bv])?,
        wo: t(&[&l.wo])?,
        w1: t(&[&l.w1])?,
        w2: t(&[&l.w2])?,
    })
}

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb).max(1e-12)
}

/// Where the model lives: `$TC_MINILM_DIR` or `models/all-MiniLM-L6-v2`,
/// fetched with `scripts/fetch-minilm.sh` when absent.
pub fn model_dir() -> Result<std::path::PathBuf, BoxError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tc::core::env::TC_MINILM_DIR
        .get_os()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("models/all-MiniLM-L6-v2"));
    // One fetch at a time in this process (the tests call this from
    // parallel threads); the script itself publishes the folder atomically,
    // so other processes see it complete or not at all.
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    if !dir.join("model.safetensors").exists() {
        let status = std::process::Command::new("bash")
            .arg(root.join("scripts/fetch-minilm.sh"))
            .status()?;
        if !status.success() {
            return Err("scripts/fetch-minilm.sh failed".into());
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod int8_tests {
    use super::*;

    /// The channels of greatest score come last, in channel order, the
    /// others first in channel order; equal scores keep the lower channel
    /// among the first.
    #[test]
    fn outliers_last_orders_by_reach() {
        let n = 40;
        let mut score = vec![1f32; n];
        let top: Vec<usize> = (0..bert::OUTLIERS).map(|i| (i * 7 + 3) % n).collect();
        for (r, &c) in top.iter().enumerate() {
            score[c] = 10.0 + r as f32;
        }
        let order = outliers_last(n, Some(score));
        let mut want_last = top.clone();
        want_last.sort_unstable();
        assert_eq!(&order[n - bert::OUTLIERS..], &want_last[..]);
        let first: Vec<usize> = (0..n).filter(|c| !top.contains(c)).collect();
        assert_eq!(&order[..n - bert::OUTLIERS], &first[..]);
        assert_eq!(outliers_last(n, None), (0..n).collect::<Vec<_>>());
    }

    /// Each int8 weight is its F32 weight within half a step of its
    /// column's scale, read in the given orders; the int8 weight holds the
    /// other rows, the F32 rows are exact.
    #[test]
    fn int8_product_quantizes_within_half_a_step() {
        let (n_in, n_out, f32_rows) = (24usize, 5usize, 4usize);
        let w: Vec<f32> = (0..n_in * n_out)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let inputs: Vec<usize> = (0..n_in).map(|i| (i * 5) % n_in).collect();
        let outputs: Vec<usize> = vec![3, 0, 4, 1, 2];
        let (q, scale, f) = int8_product(&w, &inputs, &outputs, f32_rows).unwrap();
        assert_eq!(q.shape(), &[n_in - f32_rows, n_out]);
        let (q, scale, f) = (
            q.as_slice::<i8>().unwrap(),
            scale.as_slice::<f32>().unwrap(),
            f.as_slice::<f32>().unwrap(),
        );
        for i in 0..n_in {
            for o in 0..n_out {
                let orig = w[outputs[o] * n_in + inputs[i]];
                if i < n_in - f32_rows {
                    let qv = q[i * n_out + o];
                    let err = (f32::from(qv) * scale[o] - orig).abs();
                    assert!(err <= scale[o] / 2.0 * (1.0 + 1e-6), "({i}, {o}): {err}");
                } else {
                    assert_eq!(f[(i - (n_in - f32_rows)) * n_out + o], orig);
                }
            }
        }
        assert!(int8_product(&w, &inputs, &outputs, n_in + 1).is_err());
        assert!(int8_product(&w[1..], &inputs, &outputs, 0).is_err());
    }
}
