//! Typing cases from real models (issue #11, "Tests"), written as a new user
//! would: each is proven at compile time, then run on concrete shapes on
//! both backends (the Section 4 reference interpreter and the JIT) and
//! compared with a naive reference in plain Rust loops. The model each
//! comes from is named in its doc comment. Rejected real-model cases live in
//! `tests/ui/` with their messages and counterexamples pinned.

use tc::{tensor_module, Backend, Tensor};

#[tensor_module]
pub mod models {
    use tc::Tensor;

    /// ViT-style patch size (pixels per side) and grid (patches per side).
    pub const PATCH: usize = 2;
    /// Patches per image side.
    pub const GRID: usize = 3;
    /// Swin window side.
    pub const WS: usize = 2;
    /// T5 bidirectional relative-position buckets per direction.
    pub const HALF_BUCKETS: usize = 4;

    /// GPT-2: causal mask on attention scores, then softmax over keys.
    #[tensor_fn]
    pub fn gpt2_causal_softmax(scores: Tensor![f32; H, S, S]) -> Tensor![f32; H, S, S] {
        let i = iota::<i64>([S, S], 0);
        let j = iota::<i64>([S, S], 1);
        let keep = broadcast(le(j, i), [H, S, S]);
        let masked = select(keep, scores, full::<f32>([H, S, S], -1e9));
        let m = max_keepdims(masked, [2]);
        let e = exp(masked - broadcast(m, [H, S, S]));
        e / broadcast(sum_keepdims(e, [2]), [H, S, S])
    }

    /// Llama: RMSNorm with a learned gain and epsilon.
    #[tensor_fn]
    pub fn llama_rms_norm(
        x: Tensor![f32; S, D],
        g: Tensor![f32; D],
        eps: f32,
    ) -> Tensor![f32; S, D] {
        let ms = mean_keepdims(x * x, [1]);
        x * broadcast(rsqrt(ms.add_scalar(eps)), [S, D]) * broadcast(g, [S, D])
    }

    /// Llama: rotary embedding with `rotate_half` (slice + concat).
    #[tensor_fn(requires(D % 2 == 0))]
    pub fn llama_rope(
        x: Tensor![f32; S, D],
        cos: Tensor![f32; S, D],
        sin: Tensor![f32; S, D],
    ) -> Tensor![f32; S, D] {
        let x1 = slice(x, 1, 0, D / 2);
        let x2 = slice(x, 1, D / 2, D);
        let rotated = concat([-x2, x1], 1);
        x * cos + rotated * sin
    }

    /// Llama GQA: `repeat_kv`, each of `KV` key heads shared by `H / KV`
    /// query heads (broadcast + reshape).
    #[tensor_fn(requires(H % KV == 0))]
    pub fn llama_repeat_kv(
        k: Tensor![f32; KV, S, E],
        q: Tensor![f32; H, S, E],
    ) -> Tensor![f32; H, S, E] {
        let k1 = reshape(k, [KV, 1, S, E]);
        reshape(broadcast(k1, [KV, H / KV, S, E]), [H, S, E])
    }

    /// ViT: patchify an image into a sequence of flattened patches.
    #[tensor_fn]
    pub fn vit_patchify(
        img: Tensor![f32; B, C, GRID * PATCH, GRID * PATCH],
    ) -> Tensor![f32; B, GRID * GRID, C * PATCH * PATCH] {
        let p = reshape(img, [B, C, GRID, PATCH, GRID, PATCH]);
        let p = transpose(p, [0, 2, 4, 1, 3, 5]);
        reshape(p, [B, GRID * GRID, C * PATCH * PATCH])
    }

    /// ViT: prepend the class token to the patch sequence.
    #[tensor_fn]
    pub fn vit_prepend_cls(
        patches: Tensor![f32; B, N, D],
        cls: Tensor![f32; D],
    ) -> Tensor![f32; B, N + 1, D] {
        concat([broadcast(reshape(cls, [1, 1, D]), [B, 1, D]), patches], 1)
    }

    /// Whisper front end: a kernel-2, stride-2 conv over time, the stride
    /// expressed as a reshape of the `L` frames into `[L / 2, 2]`.
    #[tensor_fn(requires(L % 2 == 0))]
    pub fn whisper_conv_stride2(
        x: Tensor![f32; C, L],
        w: Tensor![f32; 2],
    ) -> Tensor![f32; C, L / 2] {
        let pairs = reshape(x, [C, L / 2, 2]);
        let even = reshape(slice(pairs, 2, 0, 1), [C, L / 2]);
        let odd = reshape(slice(pairs, 2, 1, 2), [C, L / 2]);
        let w0 = broadcast(slice(w, 0, 0, 1), [C, L / 2]);
        let w1 = broadcast(slice(w, 0, 1, 2), [C, L / 2]);
        even * w0 + odd * w1
    }

    /// Swin: partition a feature map into non-overlapping `WS × WS` windows.
    #[tensor_fn(requires(HH % WS == 0, WW % WS == 0))]
    pub fn swin_window_partition(
        x: Tensor![f32; B, HH, WW, C],
    ) -> Tensor![f32; B, HH / WS, WW / WS, WS * WS, C] {
        let w = reshape(x, [B, HH / WS, WS, WW / WS, WS, C]);
        reshape(
            transpose(w, [0, 1, 3, 2, 4, 5]),
            [B, HH / WS, WW / WS, WS * WS, C],
        )
    }

    /// Decoder KV cache: append this step's keys along the sequence axis.
    #[tensor_fn]
    pub fn kv_cache_append(
        cache: Tensor![f32; H, S, E],
        k: Tensor![f32; H, 1, E],
    ) -> Tensor![f32; H, S + 1, E] {
        concat([cache, k], 1)
    }

    /// Mistral sliding-window attention: the last `W` keys.
    #[tensor_fn(requires(W <= S))]
    pub fn mistral_window(keys: Tensor![f32; S, E], window: Tensor![f32; W]) -> Tensor![f32; W, E] {
        slice(keys, 0, S - W, S)
    }

    /// BERT: the extended attention mask (`(mask - 1) * 10000`) added to the
    /// scores of every head.
    #[tensor_fn]
    pub fn bert_mask_add(
        scores: Tensor![f32; B, H, S, S],
        mask: Tensor![f32; B, S],
    ) -> Tensor![f32; B, H, S, S] {
        let additive = mask.add_scalar(-1.0).scale(10000.0);
        scores + broadcast(reshape(additive, [B, 1, 1, S]), [B, H, S, S])
    }

    /// T5: bidirectional relative-position buckets (exact range only):
    /// `HALF_BUCKETS` for keys after the query, plus `min(|j - i|, HALF_BUCKETS - 1)`.
    #[tensor_fn]
    pub fn t5_position_bucket(q: Tensor![f32; Q, D], k: Tensor![f32; K, D]) -> Tensor![i64; Q, K] {
        let rel = iota::<i64>([Q, K], 1) - iota::<i64>([Q, K], 0);
        let side = select(gt(rel, 0), full::<i64>([Q, K], 4), full::<i64>([Q, K], 0));
        side + minimum(abs(rel), full::<i64>([Q, K], 3))
    }

    /// Mixtral: top-1 routing, the chosen expert per token.
    #[tensor_fn]
    pub fn mixtral_top1(h: Tensor![f32; T, D], w_gate: Tensor![f32; D, E]) -> Tensor![i64; T] {
        argmax(matmul(h, w_gate), 1)
    }

    /// Mixtral: top-1 routing, the chosen expert's softmax weight.
    #[tensor_fn]
    pub fn mixtral_top1_weight(
        h: Tensor![f32; T, D],
        w_gate: Tensor![f32; D, E],
    ) -> Tensor![f32; T] {
        let logits = matmul(h, w_gate);
        let m = max_keepdims(logits, [1]);
        let e = exp(logits - broadcast(m, [T, E]));
        max(e / broadcast(sum_keepdims(e, [1]), [T, E]), [1])
    }

    /// BERT: post-LN residual block, `LayerNorm(x + h)` with epsilon.
    #[tensor_fn]
    pub fn bert_post_ln(
        x: Tensor![f32; S, D],
        h: Tensor![f32; S, D],
        gamma: Tensor![f32; D],
        beta: Tensor![f32; D],
        eps: f32,
    ) -> Tensor![f32; S, D] {
        let r = x + h;
        let mu = mean_keepdims(r, [1]);
        let c = r - broadcast(mu, [S, D]);
        let var = mean_keepdims(c * c, [1]);
        let y = c * broadcast(rsqrt(var.add_scalar(eps)), [S, D]);
        y * broadcast(gamma, [S, D]) + broadcast(beta, [S, D])
    }

    /// GPT-2: the MLP, `4 * D` hidden units with GELU.
    #[tensor_fn]
    pub fn gpt2_mlp(
        x: Tensor![f32; S, D],
        w1: Tensor![f32; D, 4 * D],
        b1: Tensor![f32; 4 * D],
        w2: Tensor![f32; 4 * D, D],
        b2: Tensor![f32; D],
    ) -> Tensor![f32; S, D] {
        let h = gelu(matmul(x, w1) + broadcast(b1, [S, 4 * D]));
        matmul(h, w2) + broadcast(b2, [S, D])
    }

    /// GPT-2: `c_attn` produces `[S, 3 * D]`; split it into q, k, v.
    #[tensor_fn(requires(P % 3 == 0))]
    pub fn gpt2_qkv_split(qkv: Tensor![f32; S, P]) -> Tensor![f32; 3, S, P / 3] {
        let q = reshape(slice(qkv, 1, 0, P / 3), [1, S, P / 3]);
        let k = reshape(slice(qkv, 1, P / 3, 2 * (P / 3)), [1, S, P / 3]);
        let v = reshape(slice(qkv, 1, 2 * (P / 3), P), [1, S, P / 3]);
        concat([q, k, v], 0)
    }

    /// MiniLM (sentence-transformers): mean pooling over the tokens the
    /// attention mask keeps.
    #[tensor_fn]
    pub fn minilm_masked_mean(
        x: Tensor![f32; B, S, D],
        mask: Tensor![f32; B, S],
    ) -> Tensor![f32; B, D] {
        let m = broadcast(reshape(mask, [B, S, 1]), [B, S, D]);
        let total = sum(x * m, [1]);
        let count = broadcast(reshape(sum(mask, [1]), [B, 1]), [B, D]);
        total / count
    }
}

use models::*;

// ----------------------------------------------------------------- helpers

fn t(shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, data).unwrap()
}

/// Deterministic, varied values.
fn ramp(shape: &[usize], step: f32) -> Tensor {
    let n: usize = shape.iter().product();
    t(
        shape,
        (0..n).map(|i| ((i as f32 + 1.0) * step).sin()).collect(),
    )
}

fn v(x: &Tensor) -> Vec<f32> {
    x.to_vec::<f32>().unwrap()
}

/// Run `f` on the interpreter and on the JIT; both results, shape checked.
fn both(shape: &[usize], f: impl Fn() -> Tensor) -> [Tensor; 2] {
    let r = [
        tc::with_backend(Backend::Interpreter, &f),
        tc::with_backend(Backend::Jit, &f),
    ];
    for x in &r {
        assert_eq!(x.shape(), shape);
    }
    r
}

/// Both backends against the naive reference.
fn check_f32(shape: &[usize], want: &[f32], tol: f32, f: impl Fn() -> Tensor) {
    for (b, got) in ["interpreter", "jit"].iter().zip(both(shape, f)) {
        let got = v(&got);
        assert_eq!(got.len(), want.len(), "{b}");
        for (i, (x, y)) in got.iter().zip(want).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{b}, index {i}: {x} vs {y}"
            );
        }
    }
}

fn check_i64(shape: &[usize], want: &[i64], f: impl Fn() -> Tensor) {
    for (b, got) in ["interpreter", "jit"].iter().zip(both(shape, f)) {
        assert_eq!(got.to_vec::<i64>().unwrap(), want, "{b}");
    }
}

fn gelu(x: f32) -> f32 {
    let x = x as f64;
    (0.5 * x * (1.0 + libm_erf(x / std::f64::consts::SQRT_2))) as f32
}

/// erf by its Taylor series (|x| small here) summed until it stops changing.
fn libm_erf(x: f64) -> f64 {
    let (mut term, mut sum, mut n) = (x, x, 0.0f64);
    loop {
        n += 1.0;
        term *= -x * x / n;
        let next = sum + term / (2.0 * n + 1.0);
        if next == sum {
            return sum * 2.0 / std::f64::consts::PI.sqrt();
        }
        sum = next;
    }
}

/// `[rows, cols]` row-wise layer norm / RMS norm helpers.
fn row_norm(x: &[f32], cols: usize, center: bool, eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let mu = if center {
            row.iter().sum::<f32>() / cols as f32
        } else {
            0.0
        };
        let var = row.iter().map(|a| (a - mu) * (a - mu)).sum::<f32>() / cols as f32;
        out.extend(row.iter().map(|a| (a - mu) / (var + eps).sqrt()));
    }
    out
}

fn matmul_naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

// ------------------------------------------------------------------- cases

#[test]
fn gpt2_causal_softmax_matches_naive() {
    let (h, s) = (2, 4);
    let x = ramp(&[h, s, s], 0.7);
    let xs = v(&x);
    let mut want = vec![0.0; h * s * s];
    for hh in 0..h {
        for i in 0..s {
            let row = &xs[(hh * s + i) * s..][..s];
            let m = row[..=i].iter().cloned().fold(f32::MIN, f32::max);
            let z: f32 = row[..=i].iter().map(|a| (a - m).exp()).sum();
            for j in 0..=i {
                want[(hh * s + i) * s + j] = (row[j] - m).exp() / z;
            }
        }
    }
    check_f32(&[h, s, s], &want, 1e-5, || {
        gpt2_causal_softmax(x.clone()).unwrap()
    });
}

#[test]
fn llama_rms_norm_matches_naive() {
    let (s, d) = (3, 8);
    let (x, g) = (ramp(&[s, d], 0.3), ramp(&[d], 0.9));
    let n = row_norm(&v(&x), d, false, 1e-6);
    let want: Vec<f32> = n
        .iter()
        .enumerate()
        .map(|(i, a)| a * v(&g)[i % d])
        .collect();
    check_f32(&[s, d], &want, 1e-5, || {
        llama_rms_norm(x.clone(), g.clone(), 1e-6).unwrap()
    });
}

#[test]
fn llama_rope_matches_naive() {
    let (s, d) = (3, 6);
    let (x, c, sn) = (ramp(&[s, d], 0.4), ramp(&[s, d], 0.8), ramp(&[s, d], 1.3));
    let (xs, cs, ss) = (v(&x), v(&c), v(&sn));
    let mut want = vec![0.0; s * d];
    for i in 0..s {
        for j in 0..d {
            let rot = if j < d / 2 {
                -xs[i * d + j + d / 2]
            } else {
                xs[i * d + j - d / 2]
            };
            want[i * d + j] = xs[i * d + j] * cs[i * d + j] + rot * ss[i * d + j];
        }
    }
    check_f32(&[s, d], &want, 1e-6, || {
        llama_rope(x.clone(), c.clone(), sn.clone()).unwrap()
    });
}

#[test]
fn llama_repeat_kv_matches_naive() {
    let (kv, h, s, e) = (2, 6, 3, 2);
    let (k, q) = (ramp(&[kv, s, e], 0.5), ramp(&[h, s, e], 0.1));
    let ks = v(&k);
    let mut want = Vec::new();
    for hh in 0..h {
        let g = hh / (h / kv);
        want.extend_from_slice(&ks[g * s * e..][..s * e]);
    }
    check_f32(&[h, s, e], &want, 0.0, || {
        llama_repeat_kv(k.clone(), q.clone()).unwrap()
    });
}

#[test]
fn vit_patchify_matches_naive() {
    let (b, c, p, g) = (2, 3, PATCH, GRID);
    let img = ramp(&[b, c, g * p, g * p], 0.2);
    let xs = v(&img);
    let side = g * p;
    let mut want = Vec::new();
    for bb in 0..b {
        for gy in 0..g {
            for gx in 0..g {
                for cc in 0..c {
                    for py in 0..p {
                        for px in 0..p {
                            let (y, x) = (gy * p + py, gx * p + px);
                            want.push(xs[((bb * c + cc) * side + y) * side + x]);
                        }
                    }
                }
            }
        }
    }
    check_f32(&[b, g * g, c * p * p], &want, 0.0, || {
        vit_patchify(img.clone()).unwrap()
    });
}

#[test]
fn vit_prepend_cls_matches_naive() {
    let (b, n, d) = (2, 3, 4);
    let (x, cls) = (ramp(&[b, n, d], 0.6), ramp(&[d], 1.7));
    let (xs, cs) = (v(&x), v(&cls));
    let mut want = Vec::new();
    for bb in 0..b {
        want.extend_from_slice(&cs);
        want.extend_from_slice(&xs[bb * n * d..][..n * d]);
    }
    check_f32(&[b, n + 1, d], &want, 0.0, || {
        vit_prepend_cls(x.clone(), cls.clone()).unwrap()
    });
}

#[test]
fn whisper_conv_stride2_matches_naive() {
    let (c, tt) = (3, 5);
    let (x, w) = (ramp(&[c, 2 * tt], 0.35), t(&[2], vec![0.25, -1.5]));
    let xs = v(&x);
    let mut want = Vec::new();
    for cc in 0..c {
        for i in 0..tt {
            want.push(xs[cc * 2 * tt + 2 * i] * 0.25 + xs[cc * 2 * tt + 2 * i + 1] * -1.5);
        }
    }
    check_f32(&[c, tt], &want, 1e-6, || {
        whisper_conv_stride2(x.clone(), w.clone()).unwrap()
    });
}

#[test]
fn swin_window_partition_matches_naive() {
    let (b, nh, nw, c, ws) = (1, 2, 3, 2, WS);
    let x = ramp(&[b, nh * ws, nw * ws, c], 0.45);
    let xs = v(&x);
    let mut want = Vec::new();
    for i in 0..nh {
        for j in 0..nw {
            for wy in 0..ws {
                for wx in 0..ws {
                    let (y, xx) = (i * ws + wy, j * ws + wx);
                    want.extend_from_slice(&xs[(y * nw * ws + xx) * c..][..c]);
                }
            }
        }
    }
    check_f32(&[b, nh, nw, ws * ws, c], &want, 0.0, || {
        swin_window_partition(x.clone()).unwrap()
    });
}

#[test]
fn kv_cache_append_matches_naive() {
    let (h, s, e) = (2, 3, 2);
    let (cache, k) = (ramp(&[h, s, e], 0.3), ramp(&[h, 1, e], 2.1));
    let (cs, ks) = (v(&cache), v(&k));
    let mut want = Vec::new();
    for hh in 0..h {
        want.extend_from_slice(&cs[hh * s * e..][..s * e]);
        want.extend_from_slice(&ks[hh * e..][..e]);
    }
    check_f32(&[h, s + 1, e], &want, 0.0, || {
        kv_cache_append(cache.clone(), k.clone()).unwrap()
    });
}

#[test]
fn mistral_window_takes_the_last_keys() {
    let (s, e, w) = (5, 2, 3);
    let keys = ramp(&[s, e], 0.9);
    let want = v(&keys)[(s - w) * e..].to_vec();
    check_f32(&[w, e], &want, 0.0, || {
        mistral_window(keys.clone(), ramp(&[w], 1.0)).unwrap()
    });
    // The runtime contract refuses a window longer than the sequence.
    assert!(mistral_window(keys.clone(), ramp(&[s + 1], 1.0)).is_err());
}

#[test]
fn bert_mask_add_matches_naive() {
    let (b, h, s) = (2, 2, 3);
    let scores = ramp(&[b, h, s, s], 0.25);
    let mask = t(&[b, s], vec![1.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
    let (ss, ms) = (v(&scores), v(&mask));
    let want: Vec<f32> = ss
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (bb, j) = (i / (h * s * s), i % s);
            a + (ms[bb * s + j] - 1.0) * 10000.0
        })
        .collect();
    check_f32(&[b, h, s, s], &want, 1e-6, || {
        bert_mask_add(scores.clone(), mask.clone()).unwrap()
    });
}

#[test]
fn t5_position_bucket_matches_naive() {
    let (q, k, d) = (4, 6, 2);
    let want: Vec<i64> = (0..q * k)
        .map(|n| {
            let rel = (n % k) as i64 - (n / k) as i64;
            let side = if rel > 0 { HALF_BUCKETS as i64 } else { 0 };
            side + rel.abs().min(HALF_BUCKETS as i64 - 1)
        })
        .collect();
    check_i64(&[q, k], &want, || {
        t5_position_bucket(ramp(&[q, d], 1.0), ramp(&[k, d], 1.0)).unwrap()
    });
}

#[test]
fn mixtral_top1_routing_matches_naive() {
    let (tt, d, e) = (5, 3, 4);
    let (h, w) = (ramp(&[tt, d], 0.7), ramp(&[d, e], 1.9));
    let logits = matmul_naive(&v(&h), &v(&w), tt, d, e);
    let mut idx = Vec::new();
    let mut weight = Vec::new();
    for row in logits.chunks(e) {
        // argmax keeps the first maximum (Section 4).
        let best = (0..e).fold(0, |b, j| if row[j] > row[b] { j } else { b });
        let z: f32 = row.iter().map(|a| (a - row[best]).exp()).sum();
        idx.push(best as i64);
        weight.push(1.0 / z);
    }
    check_i64(&[tt], &idx, || mixtral_top1(h.clone(), w.clone()).unwrap());
    check_f32(&[tt], &weight, 1e-5, || {
        mixtral_top1_weight(h.clone(), w.clone()).unwrap()
    });
}

#[test]
fn bert_post_ln_matches_naive() {
    let (s, d) = (3, 5);
    let (x, h) = (ramp(&[s, d], 0.3), ramp(&[s, d], 1.1));
    let (g, b) = (ramp(&[d], 0.5), ramp(&[d], 2.3));
    let r: Vec<f32> = v(&x).iter().zip(v(&h)).map(|(a, c)| a + c).collect();
    let n = row_norm(&r, d, true, 1e-5);
    let want: Vec<f32> = n
        .iter()
        .enumerate()
        .map(|(i, a)| a * v(&g)[i % d] + v(&b)[i % d])
        .collect();
    check_f32(&[s, d], &want, 1e-4, || {
        bert_post_ln(x.clone(), h.clone(), g.clone(), b.clone(), 1e-5).unwrap()
    });
}

#[test]
fn gpt2_mlp_matches_naive() {
    let (s, d) = (2, 3);
    let x = ramp(&[s, d], 0.4);
    let (w1, b1) = (ramp(&[d, 4 * d], 0.3), ramp(&[4 * d], 0.8));
    let (w2, b2) = (ramp(&[4 * d, d], 0.6), ramp(&[d], 1.4));
    let mut h = matmul_naive(&v(&x), &v(&w1), s, d, 4 * d);
    for (i, a) in h.iter_mut().enumerate() {
        *a = gelu(*a + v(&b1)[i % (4 * d)]);
    }
    let mut want = matmul_naive(&h, &v(&w2), s, 4 * d, d);
    for (i, a) in want.iter_mut().enumerate() {
        *a += v(&b2)[i % d];
    }
    check_f32(&[s, d], &want, 1e-4, || {
        gpt2_mlp(x.clone(), w1.clone(), b1.clone(), w2.clone(), b2.clone()).unwrap()
    });
}

#[test]
fn gpt2_qkv_split_matches_naive() {
    let (s, d) = (2, 3);
    let qkv = ramp(&[s, 3 * d], 0.55);
    let xs = v(&qkv);
    let mut want = Vec::new();
    for part in 0..3 {
        for i in 0..s {
            want.extend_from_slice(&xs[i * 3 * d + part * d..][..d]);
        }
    }
    check_f32(&[3, s, d], &want, 0.0, || {
        gpt2_qkv_split(qkv.clone()).unwrap()
    });
}

#[test]
fn minilm_masked_mean_matches_naive() {
    let (b, s, d) = (2, 3, 4);
    let x = ramp(&[b, s, d], 0.65);
    let mask = t(&[b, s], vec![1.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
    let (xs, ms) = (v(&x), v(&mask));
    let mut want = Vec::new();
    for bb in 0..b {
        let count: f32 = ms[bb * s..][..s].iter().sum();
        for j in 0..d {
            let total: f32 = (0..s)
                .map(|i| xs[(bb * s + i) * d + j] * ms[bb * s + i])
                .sum();
            want.push(total / count);
        }
    }
    check_f32(&[b, d], &want, 1e-6, || {
        minilm_masked_mean(x.clone(), mask.clone()).unwrap()
    });
}
