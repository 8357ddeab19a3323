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

use std::collections::BTreeMap;
use std::path::Path;

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

    /// Word + position + token-type embeddings (looked up by id), then
    /// LayerNorm.
    #[tensor_fn]
    pub fn embeddings(
        word_table: Tensor![f32; V, HIDDEN],
        position_table: Tensor![f32; P, HIDDEN],
        ids: Tensor![i64; B, S],
        position_ids: Tensor![i64; S],
        token_type: Tensor![f32; HIDDEN],
        gamma: Tensor![f32; HIDDEN],
        beta: Tensor![f32; HIDDEN],
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let words = gather(word_table, ids);
        let positions = gather(position_table, position_ids);
        let x =
            words + broadcast(positions, [B, S, HIDDEN]) + broadcast(token_type, [B, S, HIDDEN]);
        layer_norm(x, gamma, beta, eps)
    }

    /// Softmax over the last axis of attention scores.
    #[tensor_fn]
    pub fn softmax(x: Tensor![f32; B, H, S, T]) -> Tensor![f32; B, H, S, T] {
        let m = max_keepdims(x, [3]);
        let e = exp(x - broadcast(m, [B, H, S, T]));
        e / broadcast(sum_keepdims(e, [3]), [B, H, S, T])
    }

    /// BertSelfAttention + BertSelfOutput's dense (residual and norm are the caller's).
    #[tensor_fn]
    pub fn attention(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        wq: Tensor![f32; HIDDEN, HIDDEN],
        bq: Tensor![f32; HIDDEN],
        wk: Tensor![f32; HIDDEN, HIDDEN],
        bk: Tensor![f32; HIDDEN],
        wv: Tensor![f32; HIDDEN, HIDDEN],
        bv: Tensor![f32; HIDDEN],
        wo: Tensor![f32; HIDDEN, HIDDEN],
        bo: Tensor![f32; HIDDEN],
    ) -> Tensor![f32; B, S, HIDDEN] {
        let q = transpose(
            reshape(linear(x, wq, bq), [B, S, HEADS, HEAD_DIM]),
            [0, 2, 1, 3],
        );
        let k = transpose(
            reshape(linear(x, wk, bk), [B, S, HEADS, HEAD_DIM]),
            [0, 2, 3, 1],
        );
        let v = transpose(
            reshape(linear(x, wv, bv), [B, S, HEADS, HEAD_DIM]),
            [0, 2, 1, 3],
        );
        // 1/√HEAD_DIM, as BertSelfAttention divides by math.sqrt(attention_head_size).
        let scores = matmul(q, k) * 0.17677669529663687;
        // (1 - mask) · torch.finfo(float32).min, broadcast over heads and queries.
        let bias = (mask * -1.0 + 1.0) * -3.4028234663852886e38;
        let bias = broadcast(reshape(bias, [B, 1, 1, S]), [B, HEADS, S, S]);
        let probs = softmax(scores + bias);
        let ctx = transpose(matmul(probs, v), [0, 2, 1, 3]);
        linear(reshape(ctx, [B, S, HIDDEN]), wo, bo)
    }

    /// One BertLayer.
    #[tensor_fn]
    pub fn encoder_layer(
        x: Tensor![f32; B, S, HIDDEN],
        mask: Tensor![f32; B, S],
        wq: Tensor![f32; HIDDEN, HIDDEN],
        bq: Tensor![f32; HIDDEN],
        wk: Tensor![f32; HIDDEN, HIDDEN],
        bk: Tensor![f32; HIDDEN],
        wv: Tensor![f32; HIDDEN, HIDDEN],
        bv: Tensor![f32; HIDDEN],
        wo: Tensor![f32; HIDDEN, HIDDEN],
        bo: Tensor![f32; HIDDEN],
        ln1_g: Tensor![f32; HIDDEN],
        ln1_b: Tensor![f32; HIDDEN],
        w1: Tensor![f32; FFN, HIDDEN],
        b1: Tensor![f32; FFN],
        w2: Tensor![f32; HIDDEN, FFN],
        b2: Tensor![f32; HIDDEN],
        ln2_g: Tensor![f32; HIDDEN],
        ln2_b: Tensor![f32; HIDDEN],
        eps: f32,
    ) -> Tensor![f32; B, S, HIDDEN] {
        let a = attention(x, mask, wq, bq, wk, bk, wv, bv, wo, bo);
        let h = layer_norm(a + x, ln1_g, ln1_b, eps);
        let f = linear(gelu(linear(h, w1, b1)), w2, b2);
        layer_norm(f + h, ln2_g, ln2_b, eps)
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

/// The weights of one BertLayer, in `encoder_layer`'s parameter order.
pub struct Layer {
    tensors: Vec<Tensor>,
}

/// The loaded model.
pub struct MiniLm {
    tokenizer: Tokenizer,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    emb_ln: (Tensor, Tensor),
    layers: Vec<Layer>,
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

fn take(map: &mut BTreeMap<String, Tensor>, name: &str) -> Result<Tensor, BoxError> {
    map.remove(name)
        .ok_or_else(|| format!("model.safetensors lacks `{name}`").into())
}

impl MiniLm {
    /// Load weights, tokenizer and configs from a folder laid out like the
    /// model's Hugging Face repository (what `scripts/fetch-minilm.sh` makes).
    pub fn load(dir: &Path) -> Result<MiniLm, BoxError> {
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
        let eps = config["layer_norm_eps"]
            .as_f64()
            .ok_or("config.json lacks layer_norm_eps")? as f32;
        let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
            dir.join("sentence_bert_config.json"),
        )?)?;
        let max_len = st["max_seq_length"].as_u64().unwrap_or(256) as usize;
        let mut w = tc::runtime::load_safetensors(dir.join("model.safetensors"))?;
        let mut layers = Vec::new();
        for l in 0..6 {
            let p = |s: &str| format!("encoder.layer.{l}.{s}");
            let names = [
                "attention.self.query.weight",
                "attention.self.query.bias",
                "attention.self.key.weight",
                "attention.self.key.bias",
                "attention.self.value.weight",
                "attention.self.value.bias",
                "attention.output.dense.weight",
                "attention.output.dense.bias",
                "attention.output.LayerNorm.weight",
                "attention.output.LayerNorm.bias",
                "intermediate.dense.weight",
                "intermediate.dense.bias",
                "output.dense.weight",
                "output.dense.bias",
                "output.LayerNorm.weight",
                "output.LayerNorm.bias",
            ];
            let tensors = names
                .iter()
                .map(|n| take(&mut w, &p(n)))
                .collect::<Result<Vec<_>, _>>()?;
            layers.push(Layer { tensors });
        }
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| e.to_string())?;
        let token_type_all = take(&mut w, "embeddings.token_type_embeddings.weight")?;
        let tt: Vec<f32> = token_type_all.to_vec()?;
        Ok(MiniLm {
            tokenizer,
            word: take(&mut w, "embeddings.word_embeddings.weight")?,
            position: take(&mut w, "embeddings.position_embeddings.weight")?,
            token_type: Tensor::from_vec(&[384], tt[..384].to_vec())?,
            emb_ln: (
                take(&mut w, "embeddings.LayerNorm.weight")?,
                take(&mut w, "embeddings.LayerNorm.bias")?,
            ),
            layers,
            eps,
            max_len,
        })
    }

    /// Tokenize a batch, padded to its longest sentence.
    pub fn tokenize(&self, sentences: &[&str]) -> Result<Batch, BoxError> {
        if sentences.is_empty() {
            return Err("no sentences".into());
        }
        let enc = self.tokenizer.encode_batch(sentences.to_vec(), true)?;
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

    /// Token count of one sentence after truncation (with [CLS] and [SEP]).
    pub fn token_count(&self, sentence: &str) -> Result<usize, BoxError> {
        Ok(self.tokenizer.encode(sentence, true)?.get_ids().len())
    }

    /// The batch's token ids `[B, S]` and position ids `[S]` (i64).
    fn id_tensors(&self, batch: &Batch) -> Result<(Tensor, Tensor), BoxError> {
        let ids: Vec<i64> = batch.ids.iter().map(|&i| i64::from(i)).collect();
        let positions: Vec<i64> = (0..batch.s as i64).collect();
        Ok((
            Tensor::from_vec(&[batch.b, batch.s], ids)?,
            Tensor::from_vec(&[batch.s], positions)?,
        ))
    }

    /// Unit-norm sentence embeddings `[B, 384]` of a tokenized batch.
    pub fn embed_batch(&self, batch: &Batch) -> Result<Tensor, BoxError> {
        let (ids, positions) = self.id_tensors(batch)?;
        let mask = Tensor::from_vec(&[batch.b, batch.s], batch.mask.clone())?;
        let mut h = bert::embeddings(
            self.word.clone(),
            self.position.clone(),
            ids,
            positions,
            self.token_type.clone(),
            self.emb_ln.0.clone(),
            self.emb_ln.1.clone(),
            self.eps,
        )?;
        for layer in &self.layers {
            let t = &layer.tensors;
            h = bert::encoder_layer(
                h,
                mask.clone(),
                t[0].clone(),
                t[1].clone(),
                t[2].clone(),
                t[3].clone(),
                t[4].clone(),
                t[5].clone(),
                t[6].clone(),
                t[7].clone(),
                t[8].clone(),
                t[9].clone(),
                t[10].clone(),
                t[11].clone(),
                t[12].clone(),
                t[13].clone(),
                t[14].clone(),
                t[15].clone(),
                self.eps,
            )?;
        }
        Ok(bert::mean_pool_normalize(h, mask)?)
    }

    /// Embed sentences: one `Vec<f32>` of length 384 per sentence.
    pub fn embed(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>, BoxError> {
        let batch = self.tokenize(sentences)?;
        let e = self.embed_batch(&batch)?;
        let flat: Vec<f32> = e.to_vec()?;
        Ok(flat.chunks(384).map(|c| c.to_vec()).collect())
    }
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
    let dir = std::env::var_os("TC_MINILM_DIR")
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
