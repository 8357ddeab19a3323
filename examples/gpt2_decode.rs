//! A GPT-2-small-shaped decoder generating tokens with a KV cache (issue #16,
//! first part): token + position `gather`, 12 pre-LN blocks as weight
//! structs, causal attention over a KV cache with room for every position
//! (written in place one step at a time by `Tensor::update_slice`, read
//! through a `slice` of its first T positions), the
//! tied LM head, greedy decoding by `argmax` and top-k candidates by
//! `topk_indices`. The weights are random (a fixed seed), so the text is
//! meaningless; what it shows is that every shape is proven at build time,
//! that T changes at every step without a recompile per step (decode steps
//! run the shape-generic kernels: `specialize_after` is set past the number
//! of steps), and the tokens/s.
//!
//! `cargo run --release --example gpt2_decode [-- TOKENS [--sample K]]`
//! (default 32 greedy tokens; `--sample K`: top-k sampling, seeded)

use std::time::Instant;

use tc::{tensor_module, Tensor};

#[tensor_module]
pub mod gpt2 {
    use tc::{Dim, Tensor};

    /// Model width.
    pub const D: usize = 768;
    /// Attention heads.
    pub const H: usize = 12;
    /// Head width.
    pub const HD: usize = 64;
    /// MLP width.
    pub const F: usize = 3072;
    /// The fused q, k, v projection's width.
    pub const QKV: usize = 2304;

    /// Token and position embeddings (`wte`, `wpe`) and the final norm.
    #[tensor_params]
    pub struct Embeddings {
        #[tensor_name = "wte.weight"]
        pub wte: Tensor![f32; V, D],
        #[tensor_name = "wpe.weight"]
        pub wpe: Tensor![f32; P, D],
        #[tensor_name = "ln_f.weight"]
        pub lnf_g: Tensor![f32; D],
        #[tensor_name = "ln_f.bias"]
        pub lnf_b: Tensor![f32; D],
    }

    /// One block's weights (GPT-2's Conv1D `[in, out]` layout).
    #[tensor_params]
    pub struct Block {
        #[tensor_name = "ln_1.weight"]
        pub ln1_g: Tensor![f32; D],
        #[tensor_name = "ln_1.bias"]
        pub ln1_b: Tensor![f32; D],
        #[tensor_name = "attn.c_attn.weight"]
        pub attn_w: Tensor![f32; D, QKV],
        #[tensor_name = "attn.c_attn.bias"]
        pub attn_b: Tensor![f32; QKV],
        #[tensor_name = "attn.c_proj.weight"]
        pub proj_w: Tensor![f32; D, D],
        #[tensor_name = "attn.c_proj.bias"]
        pub proj_b: Tensor![f32; D],
        #[tensor_name = "ln_2.weight"]
        pub ln2_g: Tensor![f32; D],
        #[tensor_name = "ln_2.bias"]
        pub ln2_b: Tensor![f32; D],
        #[tensor_name = "mlp.c_fc.weight"]
        pub fc_w: Tensor![f32; D, F],
        #[tensor_name = "mlp.c_fc.bias"]
        pub fc_b: Tensor![f32; F],
        #[tensor_name = "mlp.c_proj.weight"]
        pub out_w: Tensor![f32; F, D],
        #[tensor_name = "mlp.c_proj.bias"]
        pub out_b: Tensor![f32; D],
    }

    /// `x · w + b`.
    #[tensor_fn]
    pub fn linear(
        x: Tensor![f32; B, S, I],
        w: Tensor![f32; I, O],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, S, O] {
        matmul(x, broadcast(w, [B, I, O])) + broadcast(b, [B, S, O])
    }

    /// LayerNorm over the model axis (eps 1e-5).
    #[tensor_fn]
    pub fn layer_norm(
        x: Tensor![f32; B, S, D],
        g: Tensor![f32; D],
        b: Tensor![f32; D],
    ) -> Tensor![f32; B, S, D] {
        let xc = x - broadcast(mean_keepdims(x, [2]), [B, S, D]);
        let inv = rsqrt(mean_keepdims(xc * xc, [2]) + 1e-5);
        xc * broadcast(inv, [B, S, D]) * broadcast(g, [B, S, D]) + broadcast(b, [B, S, D])
    }

    /// Token + position embeddings of `ids` at positions `pos`.
    #[tensor_fn]
    pub fn embed(
        e: Embeddings,
        ids: Tensor![i64; B, S],
        pos: Tensor![i64; S],
    ) -> Tensor![f32; B, S, D] {
        gather(e.wte, ids) + broadcast(gather(e.wpe, pos), [B, S, D])
    }

    /// The fused q, k, v projection of the normed input.
    #[tensor_fn]
    pub fn qkv(x: Tensor![f32; B, S, D], l: Block) -> Tensor![f32; B, S, QKV] {
        linear(layer_norm(x, l.ln1_g, l.ln1_b), l.attn_w, l.attn_b)
    }

    /// Part `k` (0: q, 1: k, 2: v) of the projection, split into heads.
    #[tensor_fn(requires(K >= 0, K <= 2))]
    pub fn heads(t: Tensor![f32; B, S, QKV], k: Dim![K]) -> Tensor![f32; B, H, S, HD] {
        let part = slice(t, 2, K * D, K * D + D);
        transpose(reshape(part, [B, S, H, HD]), [0, 2, 1, 3])
    }

    /// Attention of the S new positions over the first T of the cache's C
    /// positions (`mask`: 0 where allowed, −1e30 where not), the
    /// projection, the MLP, and both residuals. The slices are read where
    /// they lie: each head's T positions are contiguous in the cache.
    #[tensor_fn(requires(T <= C))]
    pub fn attend(
        x: Tensor![f32; B, S, D],
        q: Tensor![f32; B, H, S, HD],
        kc: Tensor![f32; B, H, C, HD],
        vc: Tensor![f32; B, H, C, HD],
        t: Dim![T],
        mask: Tensor![f32; S, T],
        l: Block,
    ) -> Tensor![f32; B, S, D] {
        let k = transpose(slice(kc, 2, 0, T), [0, 1, 3, 2]);
        let v = slice(vc, 2, 0, T);
        // softmax(q·kᵀ / 8 + mask)·v, fused (docs/syntax.md §12f).
        let heads = sdpa(q, k, v, broadcast(mask, [B, H, S, T]), 0.125);
        let ctx = reshape(transpose(heads, [0, 2, 1, 3]), [B, S, D]);
        let h = x + linear(ctx, l.proj_w, l.proj_b);
        let m = linear(layer_norm(h, l.ln2_g, l.ln2_b), l.fc_w, l.fc_b);
        // GPT-2's tanh GELU ("gelu_new").
        let g = m * 0.5 * (tanh((m + m * m * m * 0.044715) * 0.7978845608028654) + 1.0);
        h + linear(g, l.out_w, l.out_b)
    }

    /// Logits of the last position, with the tied LM head (`wte`ᵀ).
    #[tensor_fn]
    pub fn logits(x: Tensor![f32; B, S, D], e: Embeddings) -> Tensor![f32; B, V] {
        let last = slice(layer_norm(x, e.lnf_g, e.lnf_b), 1, S - 1, S);
        matmul(reshape(last, [B, D]), transpose(e.wte, [1, 0]))
    }

    /// Greedy choice and the top-k candidates of each row.
    #[tensor_fn(requires(K <= V))]
    pub fn candidates(logits: Tensor![f32; B, V], k: Dim![K]) -> Tensor![i64; B, K] {
        topk_indices(logits, K, 1)
    }
}

/// xorshift64*, so runs are reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
                (((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
            })
            .collect();
        Tensor::from_vec(shape, data).expect("shape matches data")
    }
}

pub(crate) fn weights(layers: usize, vocab: usize) -> (gpt2::Embeddings, Vec<gpt2::Block>) {
    let mut r = Rng(0x5eed_6d2);
    let ones = |n| Tensor::from_vec(&[n], vec![1.0f32; n]).expect("ones");
    let zeros = |n| Tensor::from_vec(&[n], vec![0.0f32; n]).expect("zeros");
    let e = gpt2::Embeddings {
        wte: r.tensor(&[vocab, 768], 0.02),
        wpe: r.tensor(&[1024, 768], 0.01),
        lnf_g: ones(768),
        lnf_b: zeros(768),
    };
    let blocks = (0..layers)
        .map(|_| gpt2::Block {
            ln1_g: ones(768),
            ln1_b: zeros(768),
            attn_w: r.tensor(&[768, 2304], 0.02),
            attn_b: zeros(2304),
            proj_w: r.tensor(&[768, 768], 0.02),
            proj_b: zeros(768),
            ln2_g: ones(768),
            ln2_b: zeros(768),
            fc_w: r.tensor(&[768, 3072], 0.02),
            fc_b: zeros(3072),
            out_w: r.tensor(&[3072, 768], 0.02),
            out_b: zeros(768),
        })
        .collect();
    (e, blocks)
}

/// The weights in transformers' GPT-2 layout (`wte.weight`,
/// `h.N.attn.c_attn.weight`, …) from `dir/model.safetensors`, every tensor's
/// shape checked by name.
pub(crate) fn load(
    dir: &std::path::Path,
) -> Result<(gpt2::Embeddings, Vec<gpt2::Block>), tc::Error> {
    // SAFETY: the file is never modified in place: examples/gpt2_weights.rs
    // writes a new one and renames it over the old, which leaves a mapping
    // of the old one intact.
    let w = unsafe { tc::runtime::load_safetensors_mapped(dir.join("model.safetensors"))? };
    let e = gpt2::Embeddings::load(&w, "")?;
    let layers = (0..)
        .take_while(|l| w.contains_key(&format!("h.{l}.ln_1.weight")))
        .map(|l| gpt2::Block::load(&w, &format!("h.{l}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((e, layers))
}

/// Top-k sampling: one of the candidates (best first), drawn with the
/// softmax of their logits.
fn sample(logits: &Tensor, cands: &Tensor, rng: &mut Rng) -> Result<i64, tc::Error> {
    let (l, c) = (logits.to_vec::<f32>()?, cands.to_vec::<i64>()?);
    let top = l[c[0] as usize];
    let w: Vec<f32> = c.iter().map(|&i| (l[i as usize] - top).exp()).collect();
    let u = (rng.tensor(&[1], 1.0).to_vec::<f32>()?[0] * 0.5 + 0.5) * w.iter().sum::<f32>();
    let mut acc = 0.0;
    for (i, wi) in c.iter().zip(&w) {
        acc += wi;
        if u <= acc {
            return Ok(*i);
        }
    }
    Ok(c[c.len() - 1])
}

/// Positions a KV cache has room for: GPT-2's context (its position
/// table's rows). A step past it is refused (`update_slice`'s error).
pub(crate) const CONTEXT: usize = 1024;

/// `[S, T]` additive mask: query i (at position T − S + i) sees keys ≤ it.
fn mask(s: usize, t: usize) -> Result<Tensor, tc::Error> {
    let data = (0..s * t)
        .map(|k| if k % t <= t - s + k / t { 0.0 } else { -1e30 })
        .collect();
    Tensor::from_vec(&[s, t], data)
}

/// One forward pass of `ids` at positions `start..`, growing the caches:
/// one [`tc::session`] (one hop onto the pool, its other workers awake for
/// every split) instead of a hop per call.
pub(crate) fn forward(
    e: &gpt2::Embeddings,
    blocks: &[gpt2::Block],
    cache: &mut [(Tensor, Tensor)],
    ids: &[i64],
    start: usize,
) -> Result<Tensor, tc::Error> {
    tc::session(|| forward_pass(e, blocks, cache, ids, start))
}

fn forward_pass(
    e: &gpt2::Embeddings,
    blocks: &[gpt2::Block],
    cache: &mut [(Tensor, Tensor)],
    ids: &[i64],
    start: usize,
) -> Result<Tensor, tc::Error> {
    let s = ids.len();
    let pos: Vec<i64> = (start..start + s).map(|p| p as i64).collect();
    let mut x = gpt2::embed(
        e,
        Tensor::from_vec(&[1, s], ids.to_vec())?,
        Tensor::from_vec(&[s], pos)?,
    )?;
    let m = mask(s, start + s)?;
    for (l, (ck, cv)) in blocks.iter().zip(cache.iter_mut()) {
        let t = gpt2::qkv(x.clone(), l)?;
        let (q, k, v) = (
            gpt2::heads(t.clone(), 0)?,
            gpt2::heads(t.clone(), 1)?,
            gpt2::heads(t, 2)?,
        );
        let room = [1, gpt2::H, CONTEXT, gpt2::HD];
        for c in [&mut *ck, &mut *cv] {
            if c.shape() != room {
                *c = Tensor::try_zeros(tc::core::Dtype::F32, &room)?;
            }
        }
        // In place: the clones `attend` gets are dropped before the next step.
        ck.update_slice(2, start, &k)?;
        cv.update_slice(2, start, &v)?;
        x = gpt2::attend(x, q, ck.clone(), cv.clone(), start + s, m.clone(), l)?;
    }
    gpt2::logits(x, e)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tokens: usize = args.first().map_or(Ok(32), |a| a.parse())?;
    // `--sample K`: top-k sampling (seeded) instead of greedy.
    let sample_k: Option<usize> = match args.iter().position(|a| a == "--sample") {
        Some(i) => Some(args.get(i + 1).ok_or("--sample K")?.parse()?),
        None => None,
    };
    let mut rng = Rng(0x5a3e_91);
    let (layers, vocab) = (12, 50257);
    // Decode steps see each T once: run them on the shape-generic kernels
    // instead of compiling a σ-specialised set per step.
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.specialize_after = u32::MAX;
    jit.set_config(cfg);
    // The timings are of the optimized kernels, as the peers' are of
    // theirs: no quick tier to tier up from while decoding is timed.
    jit.set_tiered(false);
    let t0 = Instant::now();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/gpt2-seed0");
    let (e, blocks) = if dir.join("model.safetensors").exists() {
        let w = load(&dir)?;
        println!(
            "GPT-2-small weights (examples/gpt2_weights.rs, seed 0) from {} in {:.1} s",
            dir.display(),
            t0.elapsed().as_secs_f64()
        );
        w
    } else {
        let w = weights(layers, vocab);
        println!(
            "random GPT-2-small weights ({layers} layers, vocab {vocab}) in {:.1} s \
             (scripts/fetch-gpt2.sh writes transformers-style ones to models/gpt2-seed0)",
            t0.elapsed().as_secs_f64()
        );
        w
    };
    let layers = blocks.len();
    let prompt: Vec<i64> = vec![464, 2068, 7586, 21831, 18045, 625, 262, 16931];
    let mut cache: Vec<(Tensor, Tensor)> = (0..layers)
        .map(|_| {
            (
                Tensor::zeros(tc::core::Dtype::F32, &[1]),
                Tensor::zeros(tc::core::Dtype::F32, &[1]),
            )
        })
        .collect();
    // Cold: the first call in the process (kernels loaded from the disk
    // cache or compiled, every weight read where it lies).
    let t1 = Instant::now();
    forward(&e, &blocks, &mut cache, &prompt, 0)?;
    let cold = t1.elapsed();
    let after_prefill = tc::kernel_cache_stats();
    // Warm-up: the one-time work the peers also do outside their timings
    // (ONNX Runtime prepacks weights when it creates the session, then runs
    // one untimed pass; PyTorch runs one untimed pass). The prompt again:
    // each weight, seen a second time, is packed and kept (none with
    // `TC_PACK_CACHE_MB=0`), so decoding's first step no longer does it.
    let tw = Instant::now();
    forward(&e, &blocks, &mut cache, &prompt, 0)?;
    let warmup = tw.elapsed();
    // Warm: what each later prompt of this length costs.
    let t1 = Instant::now();
    let mut logits = forward(&e, &blocks, &mut cache, &prompt, 0)?;
    let prefill = t1.elapsed();
    let mut out = Vec::new();
    let t2 = Instant::now();
    for step in 0..tokens {
        let next = match sample_k {
            None => gpt2::candidates(logits.clone(), 1)?.to_vec::<i64>()?[0],
            Some(k) => sample(&logits, &gpt2::candidates(logits.clone(), k)?, &mut rng)?,
        };
        out.push(next);
        logits = forward(&e, &blocks, &mut cache, &[next], prompt.len() + step)?;
    }
    let decode = t2.elapsed();
    let s = tc::kernel_cache_stats();
    // The cache is an optimisation, not a different model: one pass over the
    // whole sequence must give the logits the last cached step gave.
    let mut all = prompt.clone();
    all.extend(&out);
    let mut fresh: Vec<(Tensor, Tensor)> = cache.clone();
    let full = forward(&e, &blocks, &mut fresh, &all, 0)?.to_vec::<f32>()?;
    let stepped = logits.to_vec::<f32>()?;
    let diff = full
        .iter()
        .zip(&stepped)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!(
        "prompt {} tokens: prefill {:.1} ms warm, {:.1} ms on the first call; \
         warm-up pass (packs and keeps the weights) {:.1} ms",
        prompt.len(),
        prefill.as_secs_f64() * 1e3,
        cold.as_secs_f64() * 1e3,
        warmup.as_secs_f64() * 1e3
    );
    println!(
        "{tokens} {} tokens: {:.1} ms, {:.1} tokens/s; ids {:?}",
        if sample_k.is_some() {
            "sampled (top-k)"
        } else {
            "greedy"
        },
        decode.as_secs_f64() * 1e3,
        tokens as f64 / decode.as_secs_f64(),
        out
    );
    println!(
        "kernel compiles: {} specialised + {} generic after prefill, {} + {} after {tokens} steps \
         (bounded by the number of tensor fns: no compile per step)",
        after_prefill.compiles, after_prefill.generic_compiles, s.compiles, s.generic_compiles
    );
    println!(
        "KV-cache check: the last step's logits vs one pass over all {} tokens: max |diff| {diff:.2e}",
        all.len()
    );
    println!(
        "RESULT system=tc threads={} tokens={tokens} prefill_ms={:.2} cold_prefill_ms={:.2} warmup_ms={:.2} decode_ms={:.2} tokens_per_s={:.2} compiles={}",
        rayon::current_num_threads(),
        prefill.as_secs_f64() * 1e3,
        cold.as_secs_f64() * 1e3,
        warmup.as_secs_f64() * 1e3,
        decode.as_secs_f64() * 1e3,
        tokens as f64 / decode.as_secs_f64(),
        s.compiles + s.generic_compiles
    );
    if diff > 1e-3 {
        return Err(format!("the cached decode disagrees with the full pass ({diff})").into());
    }
    Ok(())
}
