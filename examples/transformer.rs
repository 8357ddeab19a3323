//! A GPT-2-small-sized decoder block (D = 768, 12 heads, MLP 3072, causal mask
//! via `select`, layer norm, residuals) written as tensor fns. `cargo build`
//! proved every shape in it; this program runs it on random weights for a
//! few batch sizes and sequence lengths and reports first-call (compile) vs
//! cached-call time and the kernel-cache statistics.
//!
//! `cargo run --release --example transformer [-- B:S B:S …]` (default 1:32 2:64 1:128)
//!
//! Run it twice to see a warm start: the second process links the kernels
//! from the persistent kernel cache (`TC_KERNEL_CACHE`, default
//! `~/.cache/tc/kernels`) instead of compiling them.

use std::time::Instant;

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

/// A small deterministic PRNG (xorshift64*) so runs are reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| self.next_f32() * scale).collect();
        Tensor::from_vec(shape, data).expect("shape matches data")
    }
}

struct Weights {
    t: Vec<Tensor>,
}

fn weights(rng: &mut Rng) -> Weights {
    let (d, m) = (768, 3072);
    let ones = Tensor::from_vec(&[d], vec![1.0f32; d]).expect("ones");
    let zeros = Tensor::from_vec(&[d], vec![0.0f32; d]).expect("zeros");
    Weights {
        t: vec![
            ones.clone(),
            zeros.clone(),
            rng.tensor(&[d, 3 * d], 0.02),
            rng.tensor(&[3 * d], 0.02),
            rng.tensor(&[d, d], 0.02),
            rng.tensor(&[d], 0.02),
            ones,
            zeros,
            rng.tensor(&[d, m], 0.02),
            rng.tensor(&[m], 0.02),
            rng.tensor(&[m, d], 0.02),
            rng.tensor(&[d], 0.02),
        ],
    }
}

fn run(w: &Weights, x: Tensor) -> Result<Tensor, tc::Error> {
    let t = &w.t;
    gpt2::block(
        x,
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
        1e-5,
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cases: Vec<(usize, usize)> = Vec::new();
    for a in std::env::args().skip(1) {
        let (b, s) = a.split_once(':').ok_or("cases are B:S, e.g. 2:64")?;
        cases.push((b.parse()?, s.parse()?));
    }
    if cases.is_empty() {
        cases = vec![(1, 32), (2, 64), (1, 128)];
    }
    println!("Proven at compile time (the checked signatures; every shape variable also");
    println!("carries the default refinement `α >= 1`, Section 2 §16):\n");
    for name in ["block", "attention", "causal_softmax"] {
        if let Some(f) = gpt2::tc_ir(name) {
            println!("{}\n", f.sig);
        }
    }
    println!("  backend: {:?}\n", tc::backend());

    let mut rng = Rng(0x5EED);
    let w = weights(&mut rng);
    println!(
        "{:>3} {:>5} {:>14} {:>14} {:>10}",
        "B", "S", "first call ms", "cached ms", "tokens/s"
    );
    for (b, s) in cases {
        let x = rng.tensor(&[b, s, 768], 1.0);
        let t0 = Instant::now();
        let y1 = run(&w, x.clone())?;
        let first = t0.elapsed().as_secs_f64() * 1e3;
        let reps = 3;
        let t1 = Instant::now();
        let mut y2 = y1.clone();
        for _ in 0..reps {
            y2 = run(&w, x.clone())?;
        }
        let cached = t1.elapsed().as_secs_f64() * 1e3 / reps as f64;
        assert_eq!(y1, y2, "cached kernels give the same bits");
        println!(
            "{b:>3} {s:>5} {first:>14.1} {cached:>14.1} {:>10.0}",
            (b * s) as f64 / (cached / 1e3)
        );
    }
    let st = tc::kernel_cache_stats();
    println!(
        "\nkernel cache: {} hits, {} misses, {} compiles ({} from the persistent cache; {:.0} ms compiling), {} evictions, {} interpreter fallbacks",
        st.hits, st.misses, st.compiles, st.disk_loads, st.compile_ms, st.evictions, st.fallbacks
    );
    Ok(())
}
