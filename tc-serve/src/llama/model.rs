//! SmolLM2-135M (the Llama architecture) as tensor fns over its GGUF
//! weights: block-quantized projections read by `qmatmul` (the weights stay
//! in their Q4_1 / Q8_0 blocks, Section 2 §18), RMSNorm, RoPE, SwiGLU,
//! grouped-query attention over an f32 KV cache, and the tied output head.
//!
//! RoPE: GGUF files store the Q and K projection rows permuted for
//! llama.cpp's rotation of *adjacent* pairs `(x[2i], x[2i+1])`; the model
//! applies that rotation to the weights as stored (no permutation is
//! undone at load). Hugging Face's checkpoints rotate the two halves
//! instead; `rope_halves` is that layout, for weights in that order.

use tc::{tensor_module, Tensor};

#[tensor_module]
pub mod llama {
    use tc::{Dim, Tensor};

    /// Model width.
    pub const D: usize = 576;
    /// Query heads.
    pub const H: usize = 9;
    /// Key/value heads (grouped-query attention: `H / KV` queries share one).
    pub const KV: usize = 3;
    /// Query heads per key/value head.
    pub const G: usize = 3;
    /// Head width.
    pub const HD: usize = 64;
    /// Half a head: RoPE's rotated pairs.
    pub const HALF: usize = 32;
    /// Key/value projection width (`KV · HD`).
    pub const KVD: usize = 192;
    /// Feed-forward width.
    pub const F: usize = 1536;

    /// The token embedding (also the output head: tied) and the final norm.
    #[tensor_params]
    pub struct Globals {
        #[tensor_name = "token_embd.weight"]
        pub embd: Tensor![q8_0; V, D],
        #[tensor_name = "output_norm.weight"]
        pub norm: Tensor![f32; D],
    }

    /// One decoder layer's weights, in GGUF's `[out, in]` row-major order.
    #[tensor_params]
    pub struct Layer {
        #[tensor_name = "attn_norm.weight"]
        pub attn_norm: Tensor![f32; D],
        #[tensor_name = "attn_q.weight"]
        pub wq: Tensor![q4_1; D, D],
        #[tensor_name = "attn_k.weight"]
        pub wk: Tensor![q4_1; KVD, D],
        #[tensor_name = "attn_v.weight"]
        pub wv: Tensor![q4_1; KVD, D],
        #[tensor_name = "attn_output.weight"]
        pub wo: Tensor![q4_1; D, D],
        #[tensor_name = "ffn_norm.weight"]
        pub ffn_norm: Tensor![f32; D],
        #[tensor_name = "ffn_gate.weight"]
        pub gate: Tensor![q4_1; F, D],
        #[tensor_name = "ffn_up.weight"]
        pub up: Tensor![q4_1; F, D],
        #[tensor_name = "ffn_down.weight"]
        pub down: Tensor![q4_1; D, F],
    }

    /// RMSNorm (ε = 1e-5): `x / √(mean(x²) + ε) · w`.
    #[tensor_fn]
    pub fn rms_norm(x: Tensor![f32; B, S, D], w: Tensor![f32; D]) -> Tensor![f32; B, S, D] {
        let inv = rsqrt(mean_keepdims(x * x, [2]) + 1e-5);
        x * broadcast(inv, [B, S, D]) * broadcast(w, [B, S, D])
    }

    /// RoPE on adjacent pairs (llama.cpp's layout, which GGUF's Q/K rows
    /// are permuted for): pair `i` of each head turns by the angle whose
    /// cosine and sine are `cos[s, i]`, `sin[s, i]`.
    #[tensor_fn]
    pub fn rope_pairs(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let p = reshape(x, [B, S, N, HALF, 2]);
        let x0 = slice(p, 4, 0, 1);
        let x1 = slice(p, 4, 1, 2);
        let c = broadcast(reshape(cos, [1, S, 1, HALF, 1]), [B, S, N, HALF, 1]);
        let s = broadcast(reshape(sin, [1, S, 1, HALF, 1]), [B, S, N, HALF, 1]);
        reshape(concat([x0 * c - x1 * s, x0 * s + x1 * c], 4), [B, S, N, HD])
    }

    /// RoPE on halves (Hugging Face's layout): element `i < HD/2` pairs
    /// with `i + HD/2`.
    #[tensor_fn]
    pub fn rope_halves(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let x0 = slice(x, 3, 0, HALF);
        let x1 = slice(x, 3, HALF, HD);
        let c = broadcast(reshape(cos, [1, S, 1, HALF]), [B, S, N, HALF]);
        let s = broadcast(reshape(sin, [1, S, 1, HALF]), [B, S, N, HALF]);
        concat([x0 * c - x1 * s, x0 * s + x1 * c], 3)
    }

    /// The attention input: the layer's normed residual stream.
    #[tensor_fn]
    pub fn attn_input(x: Tensor![f32; B, S, D], l: Layer) -> Tensor![f32; B, S, D] {
        rms_norm(x, l.attn_norm)
    }

    /// The rotated queries.
    #[tensor_fn]
    pub fn queries(
        xn: Tensor![f32; B, S, D],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
        l: Layer,
    ) -> Tensor![f32; B, S, D] {
        let q = reshape(qmatmul(xn, l.wq), [B, S, H, HD]);
        reshape(rope_pairs(q, cos, sin), [B, S, D])
    }

    /// The rotated keys, head-major as the cache holds them.
    #[tensor_fn]
    pub fn keys(
        xn: Tensor![f32; B, S, D],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
        l: Layer,
    ) -> Tensor![f32; B, KV, S, HD] {
        let k = reshape(qmatmul(xn, l.wk), [B, S, KV, HD]);
        transpose(rope_pairs(k, cos, sin), [0, 2, 1, 3])
    }

    /// The values, head-major.
    #[tensor_fn]
    pub fn values(xn: Tensor![f32; B, S, D], l: Layer) -> Tensor![f32; B, KV, S, HD] {
        transpose(reshape(qmatmul(xn, l.wv), [B, S, KV, HD]), [0, 2, 1, 3])
    }

    /// Causal grouped-query attention of the S new positions over the
    /// first T of the cache's C positions (`mask`: 0 where allowed, −1e30
    /// where not). Each key/value head serves its `G` query heads through
    /// a broadcast over the group axis, read in place by the matmul: the
    /// cache is never copied per query head.
    #[tensor_fn(requires(T <= C))]
    pub fn attention(
        q: Tensor![f32; B, S, D],
        kc: Tensor![f32; B, KV, C, HD],
        vc: Tensor![f32; B, KV, C, HD],
        t: Dim![T],
        mask: Tensor![f32; S, T],
    ) -> Tensor![f32; B, S, D] {
        let q5 = reshape(
            transpose(reshape(q, [B, S, H, HD]), [0, 2, 1, 3]),
            [B, KV, G, S, HD],
        );
        let k = broadcast(
            reshape(slice(kc, 2, 0, T), [B, KV, 1, T, HD]),
            [B, KV, G, T, HD],
        );
        let v = broadcast(
            reshape(slice(vc, 2, 0, T), [B, KV, 1, T, HD]),
            [B, KV, G, T, HD],
        );
        let m = broadcast(reshape(mask, [1, 1, 1, S, T]), [B, KV, G, S, T]);
        let scores = matmul(q5, transpose(k, [0, 1, 2, 4, 3])) * 0.125 + m;
        let e = exp(scores - broadcast(max_keepdims(scores, [4]), [B, KV, G, S, T]));
        let probs = e / broadcast(sum_keepdims(e, [4]), [B, KV, G, S, T]);
        let ctx = reshape(matmul(probs, v), [B, H, S, HD]);
        reshape(transpose(ctx, [0, 2, 1, 3]), [B, S, D])
    }

    /// The rest of a layer after attention: the output projection of the
    /// attention context `ctx` and its residual, then the SwiGLU
    /// feed-forward (`down(silu(gate(x)) · up(x))`) and its residual. Kept
    /// apart from attention so that a batched decode step runs it once over
    /// every sequence's row (the weight matmuls see all rows) while each
    /// sequence attends to its own cache.
    #[tensor_fn]
    pub fn mix(
        x: Tensor![f32; B, S, D],
        ctx: Tensor![f32; B, S, D],
        l: Layer,
    ) -> Tensor![f32; B, S, D] {
        let h = x + qmatmul(ctx, l.wo);
        let hn = rms_norm(h, l.ffn_norm);
        let g = qmatmul(hn, l.gate);
        h + qmatmul(g * sigmoid(g) * qmatmul(hn, l.up), l.down)
    }

    /// Token embeddings: rows of the Q8_0 table, gathered as blocks, then
    /// dequantized.
    #[tensor_fn]
    pub fn embed(g: Globals, ids: Tensor![i64; B, S]) -> Tensor![f32; B, S, D] {
        dequantize(gather(g.embd, ids))
    }

    /// Logits of the last position through the tied head (the embedding).
    #[tensor_fn]
    pub fn logits(x: Tensor![f32; B, S, D], g: Globals) -> Tensor![f32; B, V] {
        let last = slice(rms_norm(x, g.norm), 1, S - 1, S);
        qmatmul(reshape(last, [B, D]), g.embd)
    }
}

/// The model's weights: globals and layers, views of the mapped GGUF file.
pub struct Model {
    /// Embedding / output head and final norm.
    pub globals: llama::Globals,
    /// The decoder layers.
    pub layers: Vec<llama::Layer>,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Positions the model was trained for.
    pub context: usize,
}

/// Hyper-parameters the tensor fns fix as constants, checked against the
/// file's metadata so another Llama's GGUF is refused, not misread.
fn check_hparams(
    g: &tc::runtime::gguf::GgufFile,
) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    let p = g.parse()?;
    let arch = p.str("general.architecture")?;
    if arch != "llama" {
        return Err(format!("architecture `{arch}`: this model is a llama").into());
    }
    let want = [
        ("llama.embedding_length", llama::D),
        ("llama.feed_forward_length", llama::F),
        ("llama.attention.head_count", llama::H),
        ("llama.attention.head_count_kv", llama::KV),
    ];
    for (key, v) in want {
        let found = p.u32(key)? as usize;
        if found != v {
            return Err(format!("{key} = {found}; the tensor fns are written for {v}").into());
        }
    }
    let eps = p.f32("llama.attention.layer_norm_rms_epsilon")?;
    if eps != 1e-5 {
        return Err(format!("RMSNorm ε = {eps}; the tensor fns use 1e-5").into());
    }
    let theta = p.f32("llama.rope.freq_base").unwrap_or(10000.0) as f64;
    let context = p.u32("llama.context_length")? as usize;
    Ok((theta, context))
}

impl Model {
    /// Load from a GGUF file (mapped: the tensors are views of the file).
    pub fn load(
        path: &std::path::Path,
    ) -> Result<(Model, tc::runtime::gguf::GgufFile), Box<dyn std::error::Error>> {
        // SAFETY: model files are not written while a model is loaded
        // (scripts/fetch-smollm2.sh publishes the file once, atomically).
        let file = unsafe { tc::runtime::gguf::GgufFile::map(path)? };
        let (rope_theta, context) = check_hparams(&file)?;
        let w = file.tensors()?;
        let globals = llama::Globals::load(&w, "")?;
        let layers = (0..)
            .take_while(|l| w.contains_key(&format!("blk.{l}.attn_norm.weight")))
            .map(|l| llama::Layer::load(&w, &format!("blk.{l}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            Model {
                globals,
                layers,
                rope_theta,
                context,
            },
            file,
        ))
    }

    /// Packs every quantized weight for fast numerics now (the JIT would
    /// on its first product with each): load time, not the first
    /// request, pays for it. Returns how many weights were packed; 0 on a
    /// host without the packed kernels, where products read the blocks as
    /// they lie.
    pub fn prepack_quantized(&self) -> usize {
        let globals = [&self.globals.embd];
        let layers = self
            .layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]);
        globals
            .into_iter()
            .chain(layers)
            .filter(|t| tc::llvm::prepack::quant::prepack(t))
            .count()
    }

    /// cos and sin `[S, HD/2]` of positions `start..start + s`: the angles
    /// in f64 (`pos · θ^(−2i/HD)`), rounded once to f32.
    fn rope_tables(&self, start: usize, s: usize) -> Result<(Tensor, Tensor), tc::Error> {
        let half = llama::HALF;
        let mut cos = Vec::with_capacity(s * half);
        let mut sin = Vec::with_capacity(s * half);
        for p in start..start + s {
            for i in 0..half {
                let inv = 1.0 / self.rope_theta.powf((2 * i) as f64 / llama::HD as f64);
                let a = p as f64 * inv;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        Ok((
            Tensor::from_vec(&[s, half], cos)?,
            Tensor::from_vec(&[s, half], sin)?,
        ))
    }

    /// An empty f32 KV cache for `capacity` positions: one (keys, values)
    /// pair per layer, `[1, KV, capacity, HD]` each.
    pub fn cache(&self, capacity: usize) -> Result<Vec<(Tensor, Tensor)>, tc::Error> {
        let room = [1, llama::KV, capacity, llama::HD];
        (0..self.layers.len())
            .map(|_| {
                Ok((
                    Tensor::try_zeros(tc::core::Dtype::F32, &room)?,
                    Tensor::try_zeros(tc::core::Dtype::F32, &room)?,
                ))
            })
            .collect()
    }

    /// One forward pass of `ids` at positions `start..`, writing their keys
    /// and values into `cache`; the logits `[1, V]` of the last position.
    pub fn forward(
        &self,
        cache: &mut [(Tensor, Tensor)],
        ids: &[u32],
        start: usize,
    ) -> Result<Tensor, tc::Error> {
        tc::session(|| self.forward_pass(cache, ids, start))
    }

    fn forward_pass(
        &self,
        cache: &mut [(Tensor, Tensor)],
        ids: &[u32],
        start: usize,
    ) -> Result<Tensor, tc::Error> {
        let s = ids.len();
        let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        let mut x = llama::embed(&self.globals, Tensor::from_vec(&[1, s], ids)?)?;
        let (cos, sin) = self.rope_tables(start, s)?;
        let m = mask(s, start + s)?;
        for (l, (kc, vc)) in self.layers.iter().zip(cache.iter_mut()) {
            let xn = llama::attn_input(x.clone(), l)?;
            let q = llama::queries(xn.clone(), cos.clone(), sin.clone(), l)?;
            let k = llama::keys(xn.clone(), cos.clone(), sin.clone(), l)?;
            let v = llama::values(xn, l)?;
            // In place: the clones `attend` gets are dropped before the next step.
            kc.update_slice(2, start, &k)?;
            vc.update_slice(2, start, &v)?;
            let ctx = llama::attention(q, kc.clone(), vc.clone(), start + s, m.clone())?;
            x = llama::mix(x, ctx, l)?;
        }
        llama::logits(x, &self.globals)
    }
}

/// One sequence's part in a batched decode step ([`Model::step`]).
pub struct StepSeq<'a> {
    /// Its KV cache (one `(keys, values)` pair per layer), room for `pos + 1`.
    pub cache: &'a mut [(Tensor, Tensor)],
    /// The token to feed.
    pub token: u32,
    /// Its position (the number of positions already in the cache).
    pub pos: usize,
}

impl Model {
    /// One decode step of several sequences at once: each feeds one token at
    /// its own position. The sequences' rows are stacked as the `S` axis of
    /// one `[1, N, D]` activation, so every weight matmul (`qmatmul`) sees
    /// all N rows; RoPE takes each row's own position (the cos/sin tables
    /// are per row); attention runs per sequence against its own cache,
    /// over exactly its own length (no padding to the longest). Returns the
    /// logits `[N, V]`, row i for sequence i.
    ///
    /// Each row is computed as a one-sequence step computes it: the
    /// row-wise ops are independent of the row count, and the quantized
    /// matmul's exact path computes every row with the same kernel
    /// sequence whatever the number of rows (`tests/batching.rs` checks
    /// the bits).
    pub fn step(&self, seqs: &mut [StepSeq<'_>]) -> Result<Tensor, tc::Error> {
        tc::session(|| self.step_pass(seqs))
    }

    fn step_pass(&self, seqs: &mut [StepSeq<'_>]) -> Result<Tensor, tc::Error> {
        use llama::{D, HALF, HD, KV};
        let n = seqs.len();
        let ids: Vec<i64> = seqs.iter().map(|q| q.token as i64).collect();
        let mut x = llama::embed(&self.globals, Tensor::from_vec(&[1, n], ids)?)?;
        let mut cos = Vec::with_capacity(n * HALF);
        let mut sin = Vec::with_capacity(n * HALF);
        for q in seqs.iter() {
            let (c, s) = self.rope_tables(q.pos, 1)?;
            cos.extend_from_slice(c.as_slice::<f32>()?);
            sin.extend_from_slice(s.as_slice::<f32>()?);
        }
        let cos = Tensor::from_vec(&[n, HALF], cos)?;
        let sin = Tensor::from_vec(&[n, HALF], sin)?;
        // A decode query sees every key of its own sequence: an all-zero mask.
        let masks = seqs
            .iter()
            .map(|q| Tensor::from_vec(&[1, q.pos + 1], vec![0f32; q.pos + 1]))
            .collect::<Result<Vec<_>, _>>()?;
        for (li, l) in self.layers.iter().enumerate() {
            let xn = llama::attn_input(x.clone(), l)?;
            let q = llama::queries(xn.clone(), cos.clone(), sin.clone(), l)?;
            let k = llama::keys(xn.clone(), cos.clone(), sin.clone(), l)?;
            let v = llama::values(xn, l)?;
            // `[1, KV, N, HD]`: sequence i's key is head h's row i.
            let (kd, vd, qd) = (
                k.as_slice::<f32>()?,
                v.as_slice::<f32>()?,
                q.as_slice::<f32>()?,
            );
            let mut ctx = Vec::with_capacity(n * D);
            for (i, sq) in seqs.iter_mut().enumerate() {
                let row = |d: &[f32]| {
                    let mut out = Vec::with_capacity(KV * HD);
                    for h in 0..KV {
                        out.extend_from_slice(&d[(h * n + i) * HD..(h * n + i + 1) * HD]);
                    }
                    Tensor::from_vec(&[1, KV, 1, HD], out)
                };
                let (kc, vc) = sq
                    .cache
                    .get_mut(li)
                    .ok_or_else(|| tc::Error::Malformed("a cache without this layer".into()))?;
                kc.update_slice(2, sq.pos, &row(kd)?)?;
                vc.update_slice(2, sq.pos, &row(vd)?)?;
                let qi = Tensor::from_slice(&[1, 1, D], &qd[i * D..(i + 1) * D])?;
                let c = llama::attention(qi, kc.clone(), vc.clone(), sq.pos + 1, masks[i].clone())?;
                ctx.extend_from_slice(c.as_slice::<f32>()?);
            }
            x = llama::mix(x, Tensor::from_vec(&[1, n, D], ctx)?, l)?;
        }
        // `[N, 1, D]`: the logits of every row (each its own last position).
        llama::logits(x.reshape(&[n, 1, D])?, &self.globals)
    }

    /// Bytes of a KV cache with room for `capacity` positions.
    pub fn cache_bytes(&self, capacity: usize) -> usize {
        2 * self.layers.len() * llama::KV * capacity * llama::HD * std::mem::size_of::<f32>()
    }

    /// `cache` moved into a larger one with room for `capacity` positions
    /// (its first positions copied over).
    pub fn grow_cache(
        &self,
        cache: &[(Tensor, Tensor)],
        capacity: usize,
    ) -> Result<Vec<(Tensor, Tensor)>, tc::Error> {
        let mut bigger = self.cache(capacity)?;
        for ((nk, nv), (k, v)) in bigger.iter_mut().zip(cache) {
            nk.update_slice(2, 0, k)?;
            nv.update_slice(2, 0, v)?;
        }
        Ok(bigger)
    }
}

/// `[S, T]` additive mask: query i (at position T − S + i) sees keys ≤ it.
fn mask(s: usize, t: usize) -> Result<Tensor, tc::Error> {
    let data = (0..s * t)
        .map(|k| if k % t <= t - s + k / t { 0.0 } else { -1e30 })
        .collect();
    Tensor::from_vec(&[s, t], data)
}

/// The fetched model file (scripts/fetch-smollm2.sh), under the workspace
/// root: this file is compiled into the facade's example and test (whose
/// manifest is the root) and into tc-serve (whose manifest is a folder
/// below it), so the folder holding `models/` is searched upwards.
pub fn default_model_path() -> std::path::PathBuf {
    const REL: &str = "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| d.join("scripts/fetch-smollm2.sh").exists())
        .unwrap_or(here)
        .join(REL)
}

/// The tokenizer's parts from the GGUF metadata (`tokenizer.ggml.*`).
pub fn tokenizer_parts(
    file: &tc::runtime::gguf::GgufFile,
) -> Result<super::tokenizer::TokenizerParts, Box<dyn std::error::Error>> {
    let p = file.parse()?;
    let strings = |key: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
        Ok(p.str_array(key)?.into_iter().map(str::to_string).collect())
    };
    let add_bos = matches!(
        p.get("tokenizer.ggml.add_bos_token"),
        Some(tc::runtime::gguf::MetaValue::Bool(true))
    );
    Ok(super::tokenizer::TokenizerParts {
        tokens: strings("tokenizer.ggml.tokens")?,
        merges: strings("tokenizer.ggml.merges")?,
        token_types: p.i32_array("tokenizer.ggml.token_type")?,
        bos: p.u32("tokenizer.ggml.bos_token_id")?,
        eos: p.u32("tokenizer.ggml.eos_token_id")?,
        pre: p.str("tokenizer.ggml.pre").unwrap_or("default").to_string(),
        chat_template: p.str("tokenizer.chat_template").ok().map(str::to_string),
        add_bos,
    })
}
