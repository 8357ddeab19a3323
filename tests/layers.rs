//! Real layers written with `#[tensor_fn]` / `#[tensor_module]`: checked at
//! compile time, then run through the generated fns (runtime contract +
//! reference interpreter) and compared with plain Rust computations.
//! The last section tests the runtime contract: wrong dims, dtype, rank,
//! violated `requires`, refinements and false axioms give the right `Err`.

use tc::{tensor_fn, tensor_module, Error, Tensor};

#[tensor_module]
pub mod nn {
    use tc::Tensor;

    /// Width of the MLP hidden layer (a module constant, Section 1 §6 site 3).
    pub const HIDDEN: usize = 8;
    /// Width of the conv1d kernel.
    pub const K: usize = 3;

    /// 1. Linear layer.
    #[tensor_fn]
    pub fn linear(
        x: Tensor![f32; B, I],
        w: Tensor![f32; I, O],
        b: Tensor![f32; O],
    ) -> Tensor![f32; B, O] {
        matmul(x, w) + broadcast(b, [B, O])
    }

    /// 2. Two-layer MLP with GELU, calling `linear` (Section 2 §17).
    #[tensor_fn]
    pub fn mlp(
        x: Tensor![f32; B, D],
        w1: Tensor![f32; D, HIDDEN],
        b1: Tensor![f32; HIDDEN],
        w2: Tensor![f32; HIDDEN, D],
        b2: Tensor![f32; D],
    ) -> Tensor![f32; B, D] {
        let h = gelu(linear(x, w1, b1));
        linear(h, w2, b2)
    }

    /// 3. Layer norm over the last axis with a scalar epsilon.
    #[tensor_fn]
    pub fn layer_norm(
        x: Tensor![f32; B, S, D],
        gamma: Tensor![f32; D],
        beta: Tensor![f32; D],
        eps: f32,
    ) -> Tensor![f32; B, S, D] {
        let mu = mean_keepdims(x, [2]);
        let xc = x - broadcast(mu, [B, S, D]);
        let var = mean_keepdims(xc * xc, [2]);
        let inv = rsqrt(var + eps);
        let y = xc * broadcast(inv, [B, S, D]);
        y * broadcast(gamma, [B, S, D]) + broadcast(beta, [B, S, D])
    }

    /// 4. Numerically stable softmax over the last axis.
    #[tensor_fn]
    pub fn softmax(x: Tensor![f32; B, N]) -> Tensor![f32; B, N] {
        let m = max_keepdims(x, [1]);
        let e = exp(x - broadcast(m, [B, N]));
        e / broadcast(sum_keepdims(e, [1]), [B, N])
    }

    /// 5. RMS norm.
    #[tensor_fn]
    pub fn rms_norm(x: Tensor![f32; B, D], g: Tensor![f32; D], eps: f32) -> Tensor![f32; B, D] {
        let ms = mean_keepdims(x * x, [1]);
        x * broadcast(rsqrt(ms.add_scalar(eps)), [B, D]) * broadcast(g, [B, D])
    }

    /// 6. Multi-head self-attention with a head split `D / H` (needs `D % H == 0`)
    /// and a per-head output gate.
    #[tensor_fn(requires(D % H == 0))]
    pub fn attention(
        x: Tensor![f32; B, S, D],
        wq: Tensor![f32; D, D],
        wk: Tensor![f32; D, D],
        wv: Tensor![f32; D, D],
        wo: Tensor![f32; D, D],
        gate: Tensor![f32; H],
        scale: f32,
    ) -> Tensor![f32; B, S, D] {
        let q = matmul(x, broadcast(wq, [B, D, D]));
        let k = matmul(x, broadcast(wk, [B, D, D]));
        let v = matmul(x, broadcast(wv, [B, D, D]));
        let qh = transpose(reshape(q, [B, S, H, D / H]), [0, 2, 1, 3]);
        let kt = transpose(reshape(k, [B, S, H, D / H]), [0, 2, 3, 1]);
        let vh = transpose(reshape(v, [B, S, H, D / H]), [0, 2, 1, 3]);
        let scores: Tensor![f32; B, H, S, S] = matmul(qh, kt).scale(scale);
        let m = max_keepdims(scores, [3]);
        let e = exp(scores - broadcast(m, [B, H, S, S]));
        let p = e / broadcast(sum_keepdims(e, [3]), [B, H, S, S]);
        let ctx = matmul(p, vh);
        let g = broadcast(reshape(gate, [H, 1, 1]), [B, H, S, D / H]);
        let merged = reshape(transpose(ctx * g, [0, 2, 1, 3]), [B, S, D]);
        matmul(merged, broadcast(wo, [B, D, D]))
    }

    /// 7. Grouped-query attention: `H` query heads share `KV` key/value heads.
    #[tensor_fn(requires(H % KV == 0))]
    pub fn gqa(
        q: Tensor![f32; B, H, S, E],
        k: Tensor![f32; B, KV, S, E],
        v: Tensor![f32; B, KV, S, E],
        scale: f32,
    ) -> Tensor![f32; B, H, S, E] {
        let kh = reshape(
            broadcast(reshape(k, [B, KV, 1, S, E]), [B, KV, H / KV, S, E]),
            [B, H, S, E],
        );
        let vh = reshape(
            broadcast(reshape(v, [B, KV, 1, S, E]), [B, KV, H / KV, S, E]),
            [B, H, S, E],
        );
        let scores = matmul(q, transpose(kh, [0, 1, 3, 2])).scale(scale);
        let m = max_keepdims(scores, [3]);
        let e = exp(scores - broadcast(m, [B, H, S, S]));
        let p = e / broadcast(sum_keepdims(e, [3]), [B, H, S, S]);
        matmul(p, vh)
    }

    /// 8. Causal mask with `iota` and `select`.
    #[tensor_fn]
    pub fn causal_mask(scores: Tensor![f32; B, S, S]) -> Tensor![f32; B, S, S] {
        let i = iota::<i64>([S, S], 0);
        let j = iota::<i64>([S, S], 1);
        let keep = broadcast(le(j, i), [B, S, S]);
        select(keep, scores, full::<f32>([B, S, S], -1e9))
    }

    /// 9. conv1d, "valid" padding, kernel width `K`, via slices: output `S - K + 1`.
    #[tensor_fn(requires(S >= K))]
    pub fn conv1d(x: Tensor![f32; B, S], w: Tensor![f32; K]) -> Tensor![f32; B, S - K + 1] {
        let w0 = broadcast(slice(w, 0, 0, 1), [B, S - K + 1]);
        let w1 = broadcast(slice(w, 0, 1, 2), [B, S - K + 1]);
        let w2 = broadcast(slice(w, 0, 2, 3), [B, S - K + 1]);
        slice(x, 1, 0, S - K + 1) * w0 + slice(x, 1, 1, S - K + 2) * w1 + slice(x, 1, 2, S) * w2
    }

    /// 10. Pre-norm residual block: `x + mlp(rms_norm(x))`.
    #[tensor_fn]
    pub fn residual(
        x: Tensor![f32; B, D],
        g: Tensor![f32; D],
        w1: Tensor![f32; D, HIDDEN],
        b1: Tensor![f32; HIDDEN],
        w2: Tensor![f32; HIDDEN, D],
        b2: Tensor![f32; D],
        eps: f32,
    ) -> Tensor![f32; B, D] {
        x + mlp(rms_norm(x, g, eps), w1, b1, w2, b2)
    }

    /// 11. Greedy decoding: argmax over the vocabulary logits.
    #[tensor_fn]
    pub fn greedy(h: Tensor![f32; B, D], w_vocab: Tensor![f32; D, V]) -> Tensor![i64; B] {
        argmax(matmul(h, w_vocab), 1)
    }

    /// 12a. Symmetric int8 quantization.
    #[tensor_fn]
    pub fn quantize(x: Tensor![f32; N], inv_scale: f32) -> Tensor![i8; N] {
        let q = round(x.scale(inv_scale));
        minimum(maximum(q, -128.0), 127.0).cast::<i8>()
    }

    /// 12b. Dequantization.
    #[tensor_fn]
    pub fn dequantize(q: Tensor![i8; N], scale: f32) -> Tensor![f32; N] {
        q.cast::<f32>().scale(scale)
    }

    /// 12c. The quantize/dequantize round trip.
    #[tensor_fn]
    pub fn fake_quant(x: Tensor![f32; N], scale: f32, inv_scale: f32) -> Tensor![f32; N] {
        dequantize(quantize(x, inv_scale), scale)
    }

    /// 13. SwiGLU feed-forward.
    #[tensor_fn]
    pub fn swiglu(
        x: Tensor![f32; B, D],
        wg: Tensor![f32; D, HIDDEN],
        wu: Tensor![f32; D, HIDDEN],
        wd: Tensor![f32; HIDDEN, D],
    ) -> Tensor![f32; B, D] {
        let g = matmul(x, wg);
        let silu = g * sigmoid(g);
        matmul(silu * matmul(x, wu), wd)
    }

    /// 14. Mean pooling over the sequence.
    #[tensor_fn]
    pub fn mean_pool(x: Tensor![f32; B, S, D]) -> Tensor![f32; B, D] {
        mean(x, [1])
    }

    /// 15. Concatenate two feature sets and project.
    #[tensor_fn]
    pub fn concat_project(
        a: Tensor![f32; B, P],
        b: Tensor![f32; B, Q],
        w: Tensor![f32; P + Q, O],
    ) -> Tensor![f32; B, O] {
        matmul(concat([a, b], 1), w)
    }

    /// 16. A local dim binding (Section 1 §6 site 2).
    #[tensor_fn]
    pub fn add_one(x: Tensor![f32; B, N]) -> Tensor![f32; B, N] {
        let n = dim(&x, 1);
        x + full::<f32>([B, n], 1.0)
    }

    /// 17. Rows containing a NaN (`any` over a bool tensor).
    #[tensor_fn]
    pub fn has_nan(x: Tensor![f32; B, N]) -> Tensor![bool; B] {
        any(ne(x, x), [1])
    }

    /// 18. Flatten with an axiom (Section 2 §14): `P == B * S` is assumed
    /// statically and checked at every call.
    #[tensor_fn(axiom(P == B * S))]
    pub fn flatten(x: Tensor![f32; B, S, D], positions: Tensor![i64; P]) -> Tensor![f32; P, D] {
        reshape(x, [P, D])
    }

    /// 19. A refinement on a parameter: packed rows of 8.
    #[tensor_fn]
    pub fn pack8(x: Tensor![f32; B, D where D % 8 == 0]) -> Tensor![f32; B, D / 8, 8] {
        reshape(x, [B, D / 8, 8])
    }

    /// 20. Zero-size batches admitted by `B >= 0` (Section 2 §16): `sum` is fine on empty axes.
    #[tensor_fn(requires(B >= 0))]
    pub fn batch_total(x: Tensor![f32; B, D]) -> Tensor![f32; D] {
        sum(x, [0])
    }
}

/// A standalone tensor fn (not in a module).
#[tensor_fn]
pub fn scaled_tanh(x: Tensor![f32; N], a: f32) -> Tensor![f32; N] {
    tanh(x).scale(a)
}

// ----------------------------------------------------------------- helpers

fn t(shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, data).unwrap()
}

fn ramp(shape: &[usize], step: f32) -> Tensor {
    let n: usize = shape.iter().product();
    t(shape, (0..n).map(|i| ((i as f32) * step).sin()).collect())
}

fn v(x: &Tensor) -> Vec<f32> {
    x.to_vec::<f32>().unwrap()
}

fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "lengths differ: {a:?} vs {b:?}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "index {i}: {x} vs {y}\n{a:?}\n{b:?}"
        );
    }
}

fn naive_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

// ------------------------------------------------------------------ layers

#[test]
fn linear_matches_naive() {
    let (x, w, b) = (ramp(&[2, 3], 0.3), ramp(&[3, 4], 0.7), ramp(&[4], 1.1));
    let y = nn::linear(x.clone(), w.clone(), b.clone()).unwrap();
    assert_eq!(y.shape(), &[2, 4]);
    let mut want = naive_matmul(&v(&x), &v(&w), 2, 3, 4);
    for (i, o) in want.iter_mut().enumerate() {
        *o += v(&b)[i % 4];
    }
    close(&v(&y), &want, 1e-5);
}

#[test]
fn mlp_and_residual_run() {
    let d = 4;
    let x = ramp(&[3, d], 0.2);
    let (w1, b1) = (ramp(&[d, nn::HIDDEN], 0.5), ramp(&[nn::HIDDEN], 0.9));
    let (w2, b2) = (ramp(&[nn::HIDDEN, d], 0.4), ramp(&[d], 0.1));
    let y = nn::mlp(x.clone(), w1.clone(), b1.clone(), w2.clone(), b2.clone()).unwrap();
    assert_eq!(y.shape(), &[3, d]);
    let g = t(&[d], vec![1.0; d]);
    let r = nn::residual(
        x.clone(),
        g.clone(),
        w1.clone(),
        b1.clone(),
        w2.clone(),
        b2.clone(),
        1e-5,
    )
    .unwrap();
    let normed = nn::rms_norm(x.clone(), g, 1e-5).unwrap();
    let inner = nn::mlp(normed, w1, b1, w2, b2).unwrap();
    let want: Vec<f32> = v(&x).iter().zip(v(&inner)).map(|(a, b)| a + b).collect();
    close(&v(&r), &want, 1e-5);
}

#[test]
fn layer_norm_normalises() {
    let (b, s, d) = (2, 3, 5);
    let x = ramp(&[b, s, d], 0.37);
    let y = nn::layer_norm(x, t(&[d], vec![1.0; d]), t(&[d], vec![0.0; d]), 1e-5).unwrap();
    for row in v(&y).chunks(d) {
        let mean: f32 = row.iter().sum::<f32>() / d as f32;
        let var: f32 = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / d as f32;
        assert!(mean.abs() < 1e-4, "{mean}");
        assert!((var - 1.0).abs() < 1e-2, "{var}");
    }
}

#[test]
fn softmax_rows_sum_to_one() {
    let y = nn::softmax(t(&[2, 3], vec![1.0, 2.0, 3.0, 1000.0, 1000.0, 1000.0])).unwrap();
    let y = v(&y);
    let e: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|x| (x - 3.0).exp()).collect();
    let z: f32 = e.iter().sum();
    close(&y[..3], &e.iter().map(|x| x / z).collect::<Vec<_>>(), 1e-5);
    close(&y[3..], &[1.0 / 3.0; 3], 1e-5);
}

#[test]
fn attention_runs_and_is_gated() {
    let (b, s, d, h) = (2, 3, 4, 2);
    let x = ramp(&[b, s, d], 0.31);
    let w = |st| ramp(&[d, d], st);
    let y = nn::attention(
        x.clone(),
        w(0.1),
        w(0.2),
        w(0.3),
        w(0.4),
        t(&[h], vec![1.0, 1.0]),
        0.5,
    )
    .unwrap();
    assert_eq!(y.shape(), &[b, s, d]);
    assert!(v(&y).iter().all(|x| x.is_finite()));
    // Gating every head by 0 zeroes the output.
    let z = nn::attention(
        x,
        w(0.1),
        w(0.2),
        w(0.3),
        w(0.4),
        t(&[h], vec![0.0, 0.0]),
        0.5,
    )
    .unwrap();
    assert!(v(&z).iter().all(|x| *x == 0.0));
}

#[test]
fn gqa_with_one_group_per_head_is_plain_attention() {
    let (b, h, s, e) = (1, 4, 3, 2);
    let q = ramp(&[b, h, s, e], 0.3);
    let k = ramp(&[b, 2, s, e], 0.5);
    let vv = ramp(&[b, 2, s, e], 0.7);
    let y = nn::gqa(q.clone(), k.clone(), vv.clone(), 0.5).unwrap();
    assert_eq!(y.shape(), &[b, h, s, e]);
    // Heads 0,1 share kv group 0; heads 2,3 share group 1: compare head 1 with a
    // KV = H call whose k/v repeat the groups explicitly.
    let kr: Vec<f32> = v(&k)
        .chunks(s * e)
        .flat_map(|c| [c.to_vec(), c.to_vec()].concat())
        .collect();
    let vr: Vec<f32> = v(&vv)
        .chunks(s * e)
        .flat_map(|c| [c.to_vec(), c.to_vec()].concat())
        .collect();
    let full = nn::gqa(q, t(&[b, h, s, e], kr), t(&[b, h, s, e], vr), 0.5).unwrap();
    close(&v(&y), &v(&full), 1e-6);
}

#[test]
fn causal_mask_keeps_the_lower_triangle() {
    let y = nn::causal_mask(t(&[1, 3, 3], vec![1.0; 9])).unwrap();
    let y = v(&y);
    for i in 0..3 {
        for j in 0..3 {
            let want = if j <= i { 1.0 } else { -1e9 };
            assert_eq!(y[i * 3 + j], want, "({i}, {j})");
        }
    }
}

#[test]
fn conv1d_valid() {
    let x = t(&[1, 5], vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    let w = t(&[3], vec![1.0, 0.0, -1.0]);
    let y = nn::conv1d(x, w).unwrap();
    assert_eq!(y.shape(), &[1, 3]);
    assert_eq!(v(&y), vec![-2.0, -2.0, -2.0]);
}

#[test]
fn greedy_picks_the_first_maximum() {
    let h = t(&[2, 2], vec![1.0, 0.0, 0.0, 1.0]);
    let w = t(&[2, 3], vec![0.0, 5.0, 5.0, 7.0, 1.0, 2.0]);
    let y = nn::greedy(h, w).unwrap();
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 0]);
}

#[test]
fn int8_round_trip() {
    let x = t(&[5], vec![-3.0, -0.26, 0.0, 0.26, 300.0]);
    let q = nn::quantize(x.clone(), 10.0).unwrap();
    assert_eq!(q.to_vec::<i8>().unwrap(), vec![-30, -3, 0, 3, 127]);
    let back = nn::dequantize(q, 0.1).unwrap();
    close(&v(&back), &[-3.0, -0.3, 0.0, 0.3, 12.7], 1e-6);
    let fq = nn::fake_quant(x, 0.1, 10.0).unwrap();
    close(&v(&fq), &v(&back), 0.0);
}

#[test]
fn swiglu_pool_concat_and_friends() {
    let d = 4;
    let x = ramp(&[2, d], 0.4);
    let w = |st, r, c| ramp(&[r, c], st);
    let y = nn::swiglu(
        x,
        w(0.1, d, nn::HIDDEN),
        w(0.2, d, nn::HIDDEN),
        w(0.3, nn::HIDDEN, d),
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, d]);

    let p = nn::mean_pool(t(&[1, 2, 2], vec![1.0, 2.0, 3.0, 4.0])).unwrap();
    assert_eq!(v(&p), vec![2.0, 3.0]);

    let a = t(&[1, 2], vec![1.0, 2.0]);
    let b = t(&[1, 1], vec![3.0]);
    let wcat = t(&[3, 1], vec![1.0, 10.0, 100.0]);
    assert_eq!(v(&nn::concat_project(a, b, wcat).unwrap()), vec![321.0]);

    assert_eq!(
        v(&nn::add_one(t(&[1, 2], vec![1.0, 2.0])).unwrap()),
        vec![2.0, 3.0]
    );

    let nan = nn::has_nan(t(&[2, 2], vec![1.0, f32::NAN, 2.0, 3.0])).unwrap();
    assert_eq!(nan.to_vec::<bool>().unwrap(), vec![true, false]);

    let flat = nn::flatten(
        ramp(&[2, 3, 2], 0.1),
        Tensor::from_vec(&[6], vec![0i64; 6]).unwrap(),
    )
    .unwrap();
    assert_eq!(flat.shape(), &[6, 2]);

    let packed = nn::pack8(ramp(&[1, 16], 0.1)).unwrap();
    assert_eq!(packed.shape(), &[1, 2, 8]);

    let empty = nn::batch_total(t(&[0, 3], vec![])).unwrap();
    assert_eq!(v(&empty), vec![0.0; 3]);

    let st = scaled_tanh(t(&[2], vec![0.0, 100.0]), 2.0).unwrap();
    close(&v(&st), &[0.0, 2.0], 1e-6);
}

// --------------------------------------------------------- runtime contract

#[test]
fn wrong_dim_is_an_error() {
    let e = nn::linear(ramp(&[2, 3], 0.1), ramp(&[4, 1], 0.1), ramp(&[1], 0.1)).unwrap_err();
    assert!(
        matches!(e, Error::Dim { ref param, axis: 0, expected: 3, found: 4, .. } if param == "w"),
        "{e}"
    );
}

#[test]
fn wrong_dtype_is_an_error() {
    let x = Tensor::from_vec(&[2, 3], vec![1i32; 6]).unwrap();
    let e = nn::linear(x, ramp(&[3, 1], 0.1), ramp(&[1], 0.1)).unwrap_err();
    assert!(
        matches!(e, Error::Dtype { ref param, .. } if param == "x"),
        "{e}"
    );
}

#[test]
fn wrong_rank_is_an_error() {
    let e = nn::softmax(ramp(&[2, 3, 4], 0.1)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rank {
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn violated_requires_is_an_error() {
    // D = 6 is not a multiple of H = 4.
    let w = ramp(&[6, 6], 0.1);
    let e = nn::attention(
        ramp(&[1, 2, 6], 0.1),
        w.clone(),
        w.clone(),
        w.clone(),
        w,
        ramp(&[4], 0.1),
        1.0,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Predicate { ref kind, .. } if kind.contains("requires")),
        "{e}"
    );
    // conv1d needs S >= K = 3.
    let e = nn::conv1d(ramp(&[1, 2], 0.1), ramp(&[3], 0.1)).unwrap_err();
    assert!(matches!(e, Error::Predicate { .. }), "{e}");
}

#[test]
fn false_axiom_is_an_error() {
    let e = nn::flatten(
        ramp(&[2, 3, 2], 0.1),
        Tensor::from_vec(&[5], vec![0i64; 5]).unwrap(),
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Predicate { ref kind, .. } if kind.contains("axiom")),
        "{e}"
    );
}

#[test]
fn violated_refinement_is_an_error() {
    let e = nn::pack8(ramp(&[1, 12], 0.1)).unwrap_err();
    assert!(
        matches!(e, Error::Predicate { ref kind, .. } if kind.contains("refinement")),
        "{e}"
    );
}

#[test]
fn zero_dim_without_opt_in_is_an_error() {
    let e = nn::softmax(t(&[0, 3], vec![])).unwrap_err();
    assert!(
        matches!(e, Error::ZeroDim { ref var, .. } if var == "B"),
        "{e}"
    );
}

#[test]
fn wrong_module_constant_is_an_error() {
    // w1 must be [D, HIDDEN] = [D, 8].
    let d = 4;
    let e = nn::mlp(
        ramp(&[1, d], 0.1),
        ramp(&[d, 7], 0.1),
        ramp(&[7], 0.1),
        ramp(&[7, d], 0.1),
        ramp(&[d], 0.1),
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Dim { ref param, expected: 8, found: 7, .. } if param == "w1"),
        "{e}"
    );
}

#[test]
fn errors_never_panic_on_garbage() {
    // Every combination of small shapes on a three-parameter fn: Ok or Err, no panic.
    for a in 0..3usize {
        for b in 0..3usize {
            for c in 0..3usize {
                let _ = nn::linear(
                    t(&[a, b], vec![0.0; a * b]),
                    t(&[b, c], vec![0.0; b * c]),
                    t(&[c + a % 2], vec![0.0; c + a % 2]),
                );
            }
        }
    }
}

#[allow(dead_code)]
fn uses_tensor_fn_import() {
    // `tensor_fn` is imported for `scaled_tanh`; keep `tensor_module` used too.
    let _ = (scaled_tanh as fn(Tensor, f32) -> Result<Tensor, Error>,);
}

#[allow(unused_imports)]
use tensor_module as _;
