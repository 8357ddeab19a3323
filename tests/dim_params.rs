//! Dim parameters (`heads: Dim![H]`, Section 1 §6 binding site 1): a size
//! passed at the call binds a shape variable exactly like a tensor dim does,
//! with no witness tensor. Each case runs on both backends (the Section 4
//! interpreter and the JIT) and is compared with a plain Rust reference.

use tc::core::concrete::RuleError;
use tc::{tensor_module, with_backend, Backend, Error, Tensor};

#[tensor_module]
pub mod heads {
    use tc::{Dim, Tensor};

    /// GPT-2 / Llama multi-head attention's head split: `n_head` is a plain
    /// size (GPT-2 small: 12 heads of 64 over d_model = 768).
    #[tensor_fn(requires(D % H == 0))]
    pub fn split_heads(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, H, S, D / H] {
        transpose(reshape(x, [B, S, H, D / H]), [0, 2, 1, 3])
    }

    /// The inverse, through a call that passes the dim parameter on.
    #[tensor_fn(requires(D % H == 0))]
    pub fn split_merge(x: Tensor![f32; B, S, D], heads: Dim![H]) -> Tensor![f32; B, S, D] {
        let y = split_heads(x, heads);
        reshape(transpose(y, [0, 2, 1, 3]), [B, S, D])
    }

    /// Llama-2 70B grouped-query attention: `n_kv_heads` (8) key/value heads
    /// repeated to `n_heads` (64) query heads; `H` comes from a dim argument.
    #[tensor_fn(requires(H % KV == 0))]
    pub fn repeat_kv(k: Tensor![f32; B, KV, S, E], n_heads: Dim![H]) -> Tensor![f32; B, H, S, E] {
        let k5 = reshape(k, [B, KV, 1, S, E]);
        reshape(broadcast(k5, [B, KV, H / KV, S, E]), [B, H, S, E])
    }

    /// A dim parameter alone sizes a fill (a causal mask's `[S, S]` ones).
    #[tensor_fn]
    pub fn ones(n: Dim![N]) -> Tensor![f32; N, N] {
        full::<f32>([N, N], 1.0)
    }

    /// `H` bound by the tensor first, then compared with the dim argument.
    #[tensor_fn]
    pub fn per_head(x: Tensor![f32; H, S], heads: Dim![H]) -> Tensor![f32; H, S] {
        relu(x)
    }

    /// `H` bound by the dim argument first, then compared with the tensor.
    #[tensor_fn]
    pub fn per_head_dim_first(heads: Dim![H], x: Tensor![f32; H, S]) -> Tensor![f32; H, S] {
        relu(x)
    }

    /// A compound dim parameter: checked at the call like a compound tensor
    /// dim (`W` is bound by `x`).
    #[tensor_fn]
    pub fn doubled(x: Tensor![f32; W], two_w: Dim![2 * W]) -> Tensor![f32; 2 * W] {
        concat([x, x], 0)
    }

    /// GPT-2 small's head count as a module constant.
    pub const N_HEAD: usize = 12;

    /// Calls with a dim argument (Section 2 §17): the callee's `H` is bound
    /// to the caller's dim expression. A module constant: GPT-2 small.
    #[tensor_fn(requires(D % N_HEAD == 0))]
    pub fn split_gpt2(x: Tensor![f32; B, S, D]) -> Tensor![f32; B, N_HEAD, S, D / N_HEAD] {
        split_heads(x, N_HEAD)
    }

    /// An integer literal.
    #[tensor_fn(requires(D % 4 == 0))]
    pub fn split_four(x: Tensor![f32; B, S, D]) -> Tensor![f32; B, 4, S, D / 4] {
        split_heads(x, 4)
    }

    /// A compound dim: twice the caller's heads.
    #[tensor_fn(requires(D % (2 * H) == 0))]
    pub fn split_double(
        x: Tensor![f32; B, S, D],
        heads: Dim![H],
    ) -> Tensor![f32; B, 2 * H, S, D / (2 * H)] {
        split_heads(x, 2 * H)
    }

    /// A shape variable bound by a tensor of the caller: the old
    /// witness-tensor style still calls the new signature.
    #[tensor_fn(requires(D % H == 0))]
    pub fn split_like(
        x: Tensor![f32; B, S, D],
        gate: Tensor![f32; H],
    ) -> Tensor![f32; B, H, S, D / H] {
        let a = split_heads(x, H);
        a + a
    }

    /// Eleven parameters of three kinds: the expansion passes them in
    /// nested tuples (8, then 3), which must keep their order.
    #[tensor_fn]
    pub fn eleven(
        a: Tensor![f32; N],
        b: Tensor![f32; N],
        c: Tensor![f32; N],
        s1: f32,
        d: Tensor![f32; N],
        e: Tensor![f32; N],
        n: Dim![N],
        f: Tensor![f32; N],
        g: Tensor![f32; N],
        s2: f32,
        h: Tensor![f32; N],
    ) -> Tensor![f32; N] {
        let x = a + b * 2.0 + c * 3.0 + d * 4.0 + e * 5.0 + f * 6.0 + g * 7.0 + h * 8.0;
        x * s1 - broadcast(full::<f32>([1], s2), [N])
    }

    /// A dim parameter that opts into 0 (`N >= 0`): an empty mask is legal.
    #[tensor_fn(requires(N >= 0))]
    pub fn maybe_empty(n: Dim![N]) -> Tensor![f32; N] {
        full::<f32>([N], 2.0)
    }
}

fn ramp(shape: &[usize], step: f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..n).map(|i| ((i as f32) * step).sin()).collect()).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Run `f` on both backends; they must agree bit for bit; returns the JIT's.
fn both(f: impl Fn() -> Result<Tensor, Error>) -> Result<Tensor, Error> {
    let i = with_backend(Backend::Interpreter, &f);
    let j = with_backend(Backend::Jit, &f);
    match (&i, &j) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(bits(a), bits(b), "interpreter and JIT disagree");
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "the backends report different errors"),
        _ => panic!("one backend failed: interpreter {i:?}, JIT {j:?}"),
    }
    j
}

/// Reference head split: out[b, h, s, e] = x[b, s, h * (D / H) + e].
fn split_ref(x: &Tensor, h: usize) -> Vec<f32> {
    let (b, s, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let xs = x.to_vec::<f32>().unwrap();
    let e = d / h;
    let mut out = Vec::with_capacity(xs.len());
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for ei in 0..e {
                    out.push(xs[(bi * s + si) * d + hi * e + ei]);
                }
            }
        }
    }
    out
}

#[test]
fn a_long_parameter_list_arrives_in_order() {
    let t: Vec<Tensor> = (0..8)
        .map(|k| Tensor::from_vec(&[2], vec![10f32.powi(k), 0.5]).unwrap())
        .collect();
    let call = |n: usize| {
        heads::eleven(
            t[0].clone(),
            t[1].clone(),
            t[2].clone(),
            2.0,
            t[3].clone(),
            t[4].clone(),
            n,
            t[5].clone(),
            t[6].clone(),
            0.25,
            t[7].clone(),
        )
    };
    let y = both(|| call(2)).unwrap();
    // Σ (k + 1)·10^k over k < 8, doubled, less 0.25: each tensor's weight
    // shows where it arrived.
    let digits: f32 = (0..8).map(|k| (k as f32 + 1.0) * 10f32.powi(k)).sum();
    let halves: f32 = (1..=8).map(|k| k as f32 * 0.5).sum();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        [digits * 2.0 - 0.25, halves * 2.0 - 0.25]
    );
    // The dim must agree with the tensors: 3 against N = 2 is refused.
    let err = call(3);
    assert!(err.is_err(), "{err:?}");
}

#[test]
fn split_heads_binds_h_from_the_dim_argument() {
    let x = ramp(&[2, 3, 12], 0.37);
    for h in [1, 2, 3, 4, 6, 12] {
        let y = both(|| heads::split_heads(x.clone(), h)).unwrap();
        assert_eq!(y.shape(), &[2, h, 3, 12 / h]);
        assert_eq!(y.to_vec::<f32>().unwrap(), split_ref(&x, h), "heads = {h}");
    }
}

#[test]
fn different_heads_through_one_kernel_cache_never_share_a_kernel() {
    // Same function, same x, alternating `heads`, through a private cache:
    // σ-specialised kernels are keyed by σ, which holds H, so each distinct
    // `heads` compiles its own kernel and a repeated one hits its own entry.
    // With a late `specialize_after`, every call runs the one shape-generic
    // kernel, which must read H from the call's σ, not the first call's.
    let x = ramp(&[1, 2, 8], 0.21);
    let f = heads::tc_ir("split_heads").unwrap();
    let resolve = |n: &str| heads::tc_ir(n);
    for specialize_after in [1, 1000] {
        let jit = tc::llvm::Jit::new(tc::llvm::CacheConfig {
            specialize_after,
            ..Default::default()
        });
        let order = [2, 4, 2, 8, 4, 1, 2];
        for h in order {
            let y = jit
                .call(
                    f,
                    &[x.clone().into(), tc::runtime::contract::Arg::Dim(h)],
                    &resolve,
                )
                .unwrap();
            assert_eq!(y.shape(), &[1, h, 2, 8 / h]);
            assert_eq!(y.to_vec::<f32>().unwrap(), split_ref(&x, h), "heads = {h}");
        }
        let st = jit.stats();
        assert_eq!(st.fallbacks, 0, "{:?}", jit.last_fallback());
        if specialize_after == 1 {
            assert_eq!((st.compiles, st.misses, st.hits), (4, 4, 3), "{st:?}");
        } else {
            assert_eq!(
                (st.generic_compiles, st.generic_runs),
                (1, order.len() as u64),
                "{st:?}"
            );
        }
    }
}

#[test]
fn a_dim_parameter_passed_on_through_a_call() {
    let x = ramp(&[2, 2, 6], 0.5);
    for h in [1, 2, 3, 6] {
        let y = both(|| heads::split_merge(x.clone(), h)).unwrap();
        assert_eq!(bits(&y), bits(&x), "heads = {h}");
    }
}

#[test]
fn gqa_repeat_kv_from_n_heads() {
    let (b, kv, s, e, h) = (1, 2, 3, 2, 6);
    let k = ramp(&[b, kv, s, e], 0.3);
    let y = both(|| heads::repeat_kv(k.clone(), h)).unwrap();
    assert_eq!(y.shape(), &[b, h, s, e]);
    let ks = k.to_vec::<f32>().unwrap();
    let ys = y.to_vec::<f32>().unwrap();
    let group = h / kv;
    for hi in 0..h {
        let src = &ks[(hi / group) * s * e..][..s * e];
        assert_eq!(&ys[hi * s * e..][..s * e], src, "head {hi}");
    }
    // H = 5 is not a multiple of KV = 2: the `requires` is false.
    let err = both(|| heads::repeat_kv(k.clone(), 5)).unwrap_err();
    assert!(
        matches!(&err, Error::Predicate { kind, pred, .. } if kind == "requires" && pred.contains("KV")),
        "{err}"
    );
}

#[test]
fn a_dim_parameter_alone_sizes_a_fill() {
    for n in [1, 3, 5] {
        let y = both(|| heads::ones(n)).unwrap();
        assert_eq!(y.shape(), &[n, n]);
        assert!(y.to_vec::<f32>().unwrap().iter().all(|x| *x == 1.0));
    }
    let y = both(|| heads::maybe_empty(0)).unwrap();
    assert_eq!(y.shape(), &[0]);
}

#[test]
fn heads_contradicting_a_tensor_dim_is_a_typed_error() {
    let x = ramp(&[4, 3], 0.1);
    assert_eq!(
        both(|| heads::per_head(x.clone(), 4)).unwrap().shape(),
        &[4, 3]
    );
    let err = both(|| heads::per_head(x.clone(), 3)).unwrap_err();
    assert_eq!(
        err,
        Error::DimArg {
            param: "heads".into(),
            dim: "H".into(),
            expected: 4,
            found: 3,
            sigma: "H = 4, S = 3".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "parameter `heads` (`Dim![H]`): expected 4, found 3 (σ = H = 4, S = 3)"
    );
    // Dim argument first: it binds H, and the tensor's dim 0 is the mismatch.
    let err = both(|| heads::per_head_dim_first(3, x.clone())).unwrap_err();
    assert!(
        matches!(&err, Error::Dim { param, axis: 0, expected: 3, found: 4, .. } if param == "x"),
        "{err}"
    );
}

#[test]
fn split_heads_requires_is_checked_against_the_dim_argument() {
    // GPT-2's d_model = 768 does not split into 10 heads.
    let x = ramp(&[1, 1, 768], 0.01);
    assert_eq!(
        both(|| heads::split_heads(x.clone(), 12)).unwrap().shape(),
        &[1, 12, 1, 64]
    );
    let err = both(|| heads::split_heads(x.clone(), 10)).unwrap_err();
    assert_eq!(
        err,
        Error::Predicate {
            kind: "requires".into(),
            pred: "D % H == 0".into(),
            sigma: "B = 1, S = 1, D = 768, H = 10".into(),
        }
    );
}

#[test]
fn dim_arguments_outside_the_dim_range_are_typed_errors() {
    let x = ramp(&[1, 1, 4], 0.1);
    // The default `H >= 1` (Section 2 §16).
    let err = both(|| heads::split_heads(x.clone(), 0)).unwrap_err();
    assert!(
        matches!(&err, Error::DimArgRange { param, min: 1, found: 0, .. } if param == "heads"),
        "{err}"
    );
    // Beyond i64::MAX: never wrapped into a negative dim.
    for n in [usize::MAX, i64::MAX as usize + 1] {
        let err = both(|| heads::ones(n)).unwrap_err();
        assert!(
            matches!(&err, Error::DimArgRange { param, max, found, .. } if param == "n" && *max == i64::MAX && *found == n),
            "{err}"
        );
    }
    // In range but too big to build: the size cap, not a crash.
    let err = both(|| heads::ones(1 << 40)).unwrap_err();
    assert!(matches!(err, Error::Rule(RuleError::Size(_))), "{err}");
}

#[test]
fn a_compound_dim_parameter_is_checked_at_the_call() {
    let x = ramp(&[3], 0.4);
    let y = both(|| heads::doubled(x.clone(), 6)).unwrap();
    assert_eq!(y.shape(), &[6]);
    let err = both(|| heads::doubled(x.clone(), 5)).unwrap_err();
    assert!(
        matches!(&err, Error::DimArg { param, dim, expected: 6, found: 5, .. } if param == "two_w" && dim == "2 * W"),
        "{err}"
    );
}

#[test]
fn calls_bind_the_callee_dim_to_the_callers_dim_expression() {
    let x = ramp(&[2, 3, 24], 0.13);
    let y = both(|| heads::split_gpt2(x.clone())).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), split_ref(&x, 12));
    let y = both(|| heads::split_four(x.clone())).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), split_ref(&x, 4));
    for h in [1, 2, 3, 6] {
        let y = both(|| heads::split_double(x.clone(), h)).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            split_ref(&x, 2 * h),
            "heads = {h}"
        );
    }
    let gate = Tensor::from_vec(&[3], vec![0.0f32; 3]).unwrap();
    let y = both(|| heads::split_like(x.clone(), gate.clone())).unwrap();
    let twice: Vec<f32> = split_ref(&x, 3).iter().map(|v| v + v).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), twice);
    // The caller's own `requires` still guards its call: 24 % (2 * 5) != 0.
    let err = both(|| heads::split_double(x.clone(), 5)).unwrap_err();
    assert!(matches!(err, Error::Predicate { .. }), "{err}");
}

#[test]
fn dim_values_through_calls_on_specialised_and_generic_kernels() {
    // `split_double` passes `2 * H` to `split_heads`: the callee's σ comes
    // from the dim value, on σ-specialised plans and on the shape-generic
    // one (planned per call) alike.
    let x = ramp(&[1, 2, 12], 0.17);
    let f = heads::tc_ir("split_double").unwrap();
    let resolve = |n: &str| heads::tc_ir(n);
    for specialize_after in [1, 1000] {
        let jit = tc::llvm::Jit::new(tc::llvm::CacheConfig {
            specialize_after,
            ..Default::default()
        });
        for h in [1, 3, 2, 6, 3] {
            let args = [x.clone().into(), tc::runtime::contract::Arg::Dim(h)];
            let y = jit.call(f, &args, &resolve).unwrap();
            assert_eq!(
                y.to_vec::<f32>().unwrap(),
                split_ref(&x, 2 * h),
                "heads = {h}"
            );
        }
        assert_eq!(jit.stats().fallbacks, 0, "{:?}", jit.last_fallback());
    }
}
