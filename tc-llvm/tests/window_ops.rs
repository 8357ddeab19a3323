//! Convolution and pooling (docs/syntax.md §12c, §12d): the JIT against
//! the interpreter's denotation in every mode and dtype, on the edge cases
//! the issue lists (stride beyond the kernel, padding beyond the input,
//! dilation, groups, depthwise, empty batches and channels, an image large
//! enough to take the tiled im2col path), plus hand-computed values that
//! pin the semantics to PyTorch's (zero padding, `count_include_pad`).

use crate::util;

use tc_core::concrete::window_len;
use tc_core::ir::{Function, Op, PoolKind, Window};
use tc_core::{Dim, Dtype, Type};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::Tensor;
use util::*;

fn modes() -> Vec<(&'static str, JitOptions)> {
    let d = JitOptions::default();
    vec![
        ("default", d),
        (
            "deterministic",
            JitOptions {
                deterministic: true,
                ..d
            },
        ),
        (
            "exact",
            JitOptions {
                fast_math: false,
                ..d
            },
        ),
        ("threads1", JitOptions { threads: 1, ..d }),
    ]
}

fn consts(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::c(d as i64)).collect()
}

/// One convolution: input and weight shapes, window, groups.
struct ConvCase {
    x: Vec<usize>,
    w: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
}

impl ConvCase {
    fn window(&self) -> Window {
        Window {
            stride: self.stride.clone(),
            padding: self.padding.clone(),
            dilation: self.dilation.clone(),
        }
    }

    fn out_shape(&self) -> Vec<usize> {
        let w = self.window();
        let mut out = vec![self.x[0], self.w[0]];
        for i in 0..w.rank() {
            let n = window_len(
                self.x[2 + i],
                self.w[2 + i],
                w.stride[i],
                w.padding[i],
                w.dilation[i],
            );
            out.push(n.expect("a case that fits"));
        }
        out
    }

    fn func(&self, dt: Dtype) -> Function {
        let mut b = builder("conv");
        let x = b.param("x", Type::tensor(dt, consts(&self.x)));
        let w = b.param("w", Type::tensor(dt, consts(&self.w)));
        b.returns(Type::tensor(dt, consts(&self.out_shape())));
        let c = b.op(Op::Conv {
            window: self.window(),
            groups: self.groups,
            x,
            w,
        });
        b.finish(c)
    }
}

fn conv_cases() -> Vec<ConvCase> {
    let c = |x: &[usize], w: &[usize], s: &[usize], p: &[usize], d: &[usize], g| ConvCase {
        x: x.to_vec(),
        w: w.to_vec(),
        stride: s.to_vec(),
        padding: p.to_vec(),
        dilation: d.to_vec(),
        groups: g,
    };
    vec![
        // ResNet stem-shaped: 3 → 4 channels, 3×3, stride 1, padding 1.
        c(&[2, 3, 9, 7], &[4, 3, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1),
        // Stride beyond the kernel (windows skip input).
        c(&[1, 2, 11, 10], &[3, 2, 2, 2], &[3, 4], &[0, 0], &[1, 1], 1),
        // Padding beyond the input: windows of padding only give 0.
        c(&[1, 2, 2, 2], &[2, 2, 3, 3], &[1, 1], &[3, 3], &[1, 1], 1),
        // Dilation, asymmetric.
        c(&[1, 2, 12, 9], &[2, 2, 3, 2], &[1, 2], &[2, 0], &[2, 3], 1),
        // Groups, and depthwise (groups = channels).
        c(&[2, 4, 6, 6], &[6, 2, 3, 3], &[1, 1], &[1, 1], &[1, 1], 2),
        c(&[1, 4, 5, 5], &[4, 1, 3, 3], &[2, 2], &[1, 1], &[1, 1], 4),
        // 1×1 kernel (a per-pixel matmul).
        c(&[1, 5, 4, 3], &[2, 5, 1, 1], &[1, 1], &[0, 0], &[1, 1], 1),
        // Empty batch and empty channel groups.
        c(&[0, 3, 5, 5], &[2, 3, 3, 3], &[1, 1], &[0, 0], &[1, 1], 1),
        c(&[1, 0, 5, 5], &[2, 0, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1),
        // conv1d: wav2vec2-style feature extractor step (kernel 10, stride 5),
        // and a dilated, padded, grouped one.
        c(&[2, 1, 53], &[4, 1, 10], &[5], &[0], &[1], 1),
        c(&[1, 6, 17], &[3, 2, 3], &[2], &[4], &[3], 3),
    ]
}

/// Float convolutions are a GEMM in the JIT: within the matmul tolerance
/// and one rounding of the dtype; integer ones are bit for bit.
fn tolerance(dt: Dtype) -> (f32, f32) {
    match dt {
        Dtype::F32 => (1e-4, 1e-3),
        Dtype::F16 => (2e-3, 1e-2),
        Dtype::BF16 => (1.6e-2, 5e-2),
        Dtype::F8E4M3 => (0.26, 0.2),
        _ => (0.51, 0.5),
    }
}

#[test]
fn conv_matches_the_interpreter_in_every_mode_and_dtype() {
    let mut rng = Rng(0xC0);
    for case in conv_cases() {
        for dt in Dtype::ALL.into_iter().filter(|d| d.is_numeric()) {
            let f = case.func(dt);
            let args: Vec<Arg> = vec![
                tame(random(&mut rng, dt, &case.x, true)).into(),
                tame(random(&mut rng, dt, &case.w, true)).into(),
            ];
            let want = interp(&f, &args).unwrap();
            assert_eq!(want.shape(), case.out_shape().as_slice());
            for (name, o) in modes() {
                let got = jit(&f, &args, o);
                let what = format!("conv {:?} * {:?} ({name}, {dt})", case.x, case.w);
                // Deterministic mode sums in the denotation's order.
                if dt.is_float() && !o.deterministic {
                    let (r, a) = tolerance(dt);
                    assert_close(&what, &got, &want, r, a);
                } else {
                    assert_bits(&what, &got, &want, false);
                }
            }
        }
    }
}

/// NaN, ±inf and ±0 kept, the huge finite specials scaled down: a
/// product of two of them overflows, and whether partial sums overflow
/// depends on the order (the documented exception to the tolerance), while
/// sums of infinities and NaNs are the same in every order.
fn tame(t: Tensor) -> Tensor {
    let dt = t.dtype();
    let elems: Vec<Elem> = t
        .to_elems()
        .into_iter()
        .map(|e| match e {
            Elem::F(v) if v.is_finite() && v.abs() > 1e6 => Elem::F(v.signum() * 3.0),
            e => e,
        })
        .collect();
    Tensor::from_elems(dt, t.shape(), &elems).unwrap()
}

/// An image whose unfolded matrix exceeds `conv::TILE_FLOATS`: the tiled
/// path (several GEMMs per group, copied into place) against the
/// denotation.
#[test]
fn conv_of_a_large_image_takes_the_tiled_path() {
    let case = ConvCase {
        x: vec![1, 16, 173, 172],
        w: vec![2, 16, 3, 3],
        stride: vec![1, 1],
        padding: vec![1, 1],
        dilation: vec![1, 1],
        groups: 1,
    };
    let rows = 16 * 9;
    let cols: usize = case.out_shape()[2..].iter().product();
    assert!(
        rows * cols > tc_llvm::kernels::conv::TILE_FLOATS,
        "the case must tile"
    );
    let mut rng = Rng(0xC1);
    let f = case.func(Dtype::F32);
    let args: Vec<Arg> = vec![
        random(&mut rng, Dtype::F32, &case.x, false).into(),
        random(&mut rng, Dtype::F32, &case.w, false).into(),
    ];
    let want = interp(&f, &args).unwrap();
    let got = jit(&f, &args, JitOptions::default());
    assert_close("tiled conv", &got, &want, 1e-4, 1e-3);
    let det = JitOptions {
        deterministic: true,
        ..JitOptions::default()
    };
    assert_bits(
        "tiled conv (deterministic)",
        &jit(&f, &args, det),
        &want,
        false,
    );
}

/// Zero padding is part of the sum (PyTorch's semantics): a weight of +inf
/// over the padding gives 0 · inf = NaN at the border only, in both
/// backends.
#[test]
fn conv_padding_is_zeros_that_enter_the_sum() {
    let case = ConvCase {
        x: vec![1, 1, 3],
        w: vec![1, 1, 3],
        stride: vec![1],
        padding: vec![1],
        dilation: vec![1],
        groups: 1,
    };
    let f = case.func(Dtype::F32);
    let x = Tensor::from_vec(&[1, 1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let w = Tensor::from_vec(&[1, 1, 3], vec![f32::INFINITY, 1.0, 1.0]).unwrap();
    let args: Vec<Arg> = vec![x.into(), w.into()];
    let want = interp(&f, &args).unwrap().to_vec::<f32>().unwrap();
    assert!(want[0].is_nan(), "0 · inf at the left border: {want:?}");
    assert_eq!(&want[1..], &[f32::INFINITY, f32::INFINITY]);
    let got = jit(&f, &args, JitOptions::default())
        .to_vec::<f32>()
        .unwrap();
    assert!(
        got[0].is_nan() && got[0].to_bits() == f32::NAN.to_bits(),
        "{got:?}"
    );
    assert_eq!(&got[1..], &want[1..]);
}

fn pool_func(
    dt: Dtype,
    x: &[usize],
    kind: PoolKind,
    kernel: &[usize],
    window: &Window,
) -> Function {
    let lead = x.len() - kernel.len();
    let mut out = x[..lead].to_vec();
    for (i, &k) in kernel.iter().enumerate() {
        out.push(window_len(x[lead + i], k, window.stride[i], window.padding[i], 1).unwrap());
    }
    let mut b = builder("pool");
    let p = b.param("x", Type::tensor(dt, consts(x)));
    b.returns(Type::tensor(dt, consts(&out)));
    let v = b.op(Op::Pool {
        kind,
        kernel: kernel.to_vec(),
        window: window.clone(),
        x: p,
    });
    b.finish(v)
}

fn win(stride: &[usize], padding: &[usize]) -> Window {
    Window {
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: vec![1; stride.len()],
    }
}

#[test]
fn pooling_is_bit_identical_in_every_mode_and_dtype() {
    let mut rng = Rng(0xB0);
    let cases: Vec<(Vec<usize>, Vec<usize>, Window)> = vec![
        // ResNet's stem pool: 3×3, stride 2, padding 1.
        (vec![2, 3, 9, 8], vec![3, 3], win(&[2, 2], &[1, 1])),
        // Stride beyond the kernel.
        (vec![1, 2, 10, 11], vec![2, 2], win(&[3, 4], &[0, 1])),
        // Default stride (= kernel), rank 3 input, 1-d.
        (vec![2, 3, 9], vec![2], win(&[2], &[0])),
        (vec![4, 7], vec![3], win(&[1], &[1])),
        // Empty leading axis.
        (vec![0, 2, 5, 5], vec![2, 2], win(&[2, 2], &[1, 1])),
    ];
    for (x, kernel, window) in cases {
        for dt in Dtype::ALL.into_iter().filter(|d| d.is_numeric()) {
            for kind in [PoolKind::Max, PoolKind::Avg] {
                if kind == PoolKind::Avg && !dt.is_float() {
                    continue;
                }
                let f = pool_func(dt, &x, kind, &kernel, &window);
                let args: Vec<Arg> = vec![random(&mut rng, dt, &x, true).into()];
                let want = interp(&f, &args).unwrap();
                for (name, o) in modes() {
                    let what = format!("{kind:?} pool {x:?} k {kernel:?} ({name}, {dt})");
                    assert_bits(&what, &jit(&f, &args, o), &want, false);
                }
            }
        }
    }
}

/// PyTorch's values: `max_pool1d` never picks the padding; `avg_pool1d`
/// divides by the kernel size, padding included (`count_include_pad`).
#[test]
fn pooling_semantics_match_pytorch_by_hand() {
    let x = Tensor::from_vec(&[1, 4], vec![-1.0f32, -2.0, -3.0, -4.0]).unwrap();
    let w = win(&[2], &[1]);
    let max = pool_func(Dtype::F32, &[1, 4], PoolKind::Max, &[3], &w);
    let avg = pool_func(Dtype::F32, &[1, 4], PoolKind::Avg, &[3], &w);
    let args: Vec<Arg> = vec![x.into()];
    for (f, want) in [(&max, vec![-1.0f32, -2.0]), (&avg, vec![-1.0, -3.0])] {
        let i = interp(f, &args).unwrap();
        assert_eq!(i.to_vec::<f32>().unwrap(), want, "{}", f.body[0].op);
        let j = jit(f, &args, JitOptions::default());
        assert_eq!(j.to_vec::<f32>().unwrap(), want);
    }
    // A NaN in a window wins the max (IEEE maximum), canonical.
    let x = Tensor::from_vec(&[1, 4], vec![1.0f32, f32::NAN, -0.0, 0.0]).unwrap();
    let f = pool_func(Dtype::F32, &[1, 4], PoolKind::Max, &[2], &win(&[2], &[0]));
    let got = interp(&f, &[x.into()]).unwrap().to_elems();
    assert!(matches!(got[0], Elem::F(v) if v.to_bits() == f32::NAN.to_bits()));
    assert!(
        matches!(got[1], Elem::F(v) if v.to_bits() == 0.0f32.to_bits()),
        "max(-0, +0) = +0"
    );
}

/// Pooling is a kernel (not a host step) with its producer fused into the
/// window loop, in σ-specialised and shape-generic kernels alike, and
/// matches the denotation bit for bit on a σ with padding at both ends.
#[test]
fn pooling_is_a_fused_kernel_specialised_and_generic() {
    use tc_core::ir::UnaryOp;
    for (kind, dt) in [
        (PoolKind::Max, Dtype::F16),
        (PoolKind::Avg, Dtype::BF16),
        (PoolKind::Max, Dtype::I8),
    ] {
        let mut b = builder("relu_pool");
        let x = b.param("x", tt(dt, &["B", "C", "H", "W"]));
        let out = |d: &str| (Dim::var(d) + Dim::c(-1)).div(&Dim::c(2)) + Dim::c(1);
        b.returns(Type::tensor(
            dt,
            vec![Dim::var("B"), Dim::var("C"), out("H"), out("W")],
        ));
        let r = b.op(Op::Unary(UnaryOp::Relu, x));
        let p = b.op(Op::Pool {
            kind,
            kernel: vec![3, 3],
            window: win(&[2, 2], &[1, 1]),
            x: r,
        });
        let f = b.finish(p);
        let sigma: tc_core::Sigma = [("B", 2), ("C", 3), ("H", 7), ("W", 6)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let c = tc_llvm::exec::compile(&f, &sigma, JitOptions::default()).unwrap();
        assert!(
            c.steps()
                .iter()
                .all(|s| matches!(s, tc_llvm::plan::Step::Kernel { .. })),
            "one fused kernel: {:?}",
            c.steps()
        );
        let mut rng = Rng(0xB1);
        let args: Vec<Arg> = vec![random(&mut rng, dt, &[2, 3, 7, 6], true).into()];
        let want = interp(&f, &args).unwrap();
        assert_bits(
            "specialised",
            &jit(&f, &args, JitOptions::default()),
            &want,
            false,
        );
        let generic = tc_llvm::Jit::new(tc_llvm::CacheConfig {
            capacity: 8,
            specialize_after: 100,
            options: JitOptions::default(),
        });
        let g = generic.call(&f, &args, &|_| None).unwrap();
        assert_eq!(generic.stats().generic_runs, 1);
        assert_bits("generic", &g, &want, false);
    }
}

/// An empty operand may have a huge axis (a zero-element tensor is fine
/// whatever its other dims): a window's taps or a convolution's spatial
/// extent are index extents then, never sizes. Fuzz seed 104294972713: a
/// conv1d of an empty `[0, 0, 2^32 + 1]` input was a `Size` error in the
/// JIT and an empty result in the interpreter; seed 114294977020: a batch
/// of 2^63 − 1 empty items made the JIT's convolution loop over the batch.
#[test]
fn empty_operands_with_huge_axes_are_not_sized() {
    let huge = (1usize << 32) + 1;
    let convs = [
        // Empty batch: the output is empty too.
        (vec![0, 1, huge], vec![1, 1, 3], vec![1], 1),
        // No input channels: the output is zeros, 4097 of them.
        (vec![1, 0, huge], vec![1, 0, 3], vec![1 << 20], 1),
        // A batch of 2^63 − 1 empty items and no output channels (fuzz
        // seed 114294977020: the JIT looped over the batch, for ever).
        (vec![i64::MAX as usize, 0, 2], vec![0, 0, 1], vec![2], 1),
    ];
    for (x, w, stride, groups) in convs {
        let case = ConvCase {
            x: x.clone(),
            w: w.clone(),
            stride,
            padding: vec![0],
            dilation: vec![1],
            groups,
        };
        let f = case.func(Dtype::F32);
        let args: Vec<Arg> = vec![
            Tensor::zeros(Dtype::F32, &x).into(),
            Tensor::zeros(Dtype::F32, &w).into(),
        ];
        let want = interp(&f, &args).unwrap();
        assert_eq!(want.shape(), case.out_shape().as_slice());
        for (name, o) in modes() {
            assert_bits(
                &format!("conv {x:?} * {w:?} ({name})"),
                &jit(&f, &args, o),
                &want,
                false,
            );
        }
    }
    // A pooling whose kernel volume (2^31 · 4) is over the element cap, on
    // an empty operand.
    let x = [0, 1 << 31, 8];
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let f = pool_func(Dtype::F32, &x, kind, &[1 << 30, 4], &win(&[1, 1], &[0, 0]));
        let args: Vec<Arg> = vec![Tensor::zeros(Dtype::F32, &x).into()];
        let want = interp(&f, &args).unwrap();
        assert_eq!(want.numel(), 0);
        for (name, o) in modes() {
            assert_bits(
                &format!("{kind:?} pool of {x:?} ({name})"),
                &jit(&f, &args, o),
                &want,
                false,
            );
        }
    }
}
