//! Block-quantized tensors (Section 2 §18) through both backends, every
//! format: `qmatmul`, `dequantize` and a gather of block rows on the
//! interpreter (the reference denotation) against the JIT, in exact and
//! fast numerics, on random blocks. Exact dequantization and gathers are
//! compared bit for bit; a product within its stated bound, element by
//! element.

use std::sync::Mutex;

use tc::core::Dtype;
use tc::{tensor_module, Backend, Tensor};

#[tensor_module]
mod q {
    use tc::Tensor;

    #[tensor_fn(requires(K % 32 == 0))]
    pub fn proj_q8_0(x: Tensor![f32; B, M, K], w: Tensor![q8_0; N, K]) -> Tensor![f32; B, M, N] {
        qmatmul(x, w)
    }

    #[tensor_fn(requires(K % 32 == 0))]
    pub fn proj_q4_0(x: Tensor![f32; B, M, K], w: Tensor![q4_0; N, K]) -> Tensor![f32; B, M, N] {
        qmatmul(x, w)
    }

    #[tensor_fn(requires(K % 32 == 0))]
    pub fn proj_q4_1(x: Tensor![f32; B, M, K], w: Tensor![q4_1; N, K]) -> Tensor![f32; B, M, N] {
        qmatmul(x, w)
    }

    #[tensor_fn(requires(K % 256 == 0))]
    pub fn proj_q4_k(x: Tensor![f32; B, M, K], w: Tensor![q4_k; N, K]) -> Tensor![f32; B, M, N] {
        qmatmul(x, w)
    }

    #[tensor_fn(requires(K % 256 == 0))]
    pub fn proj_q6_k(x: Tensor![f32; B, M, K], w: Tensor![q6_k; N, K]) -> Tensor![f32; B, M, N] {
        qmatmul(x, w)
    }

    #[tensor_fn(requires(D % 32 == 0))]
    pub fn rows(table: Tensor![q4_1; V, D], ids: Tensor![i64; B, S]) -> Tensor![f32; B, S, D] {
        dequantize(gather(table, ids))
    }

    #[tensor_fn(requires(K % 256 == 0))]
    pub fn deq(w: Tensor![q6_k; N, K]) -> Tensor![f32; N, K] {
        dequantize(w)
    }
}

/// The JIT's numerics are process-wide: one test at a time sets them.
static NUMERICS: Mutex<()> = Mutex::new(());

fn set_fast_quant(fast: bool) {
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.options.fast_quant = fast;
    jit.set_config(cfg);
}

fn set_deterministic(on: bool) {
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.options.deterministic = on;
    jit.set_config(cfg);
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// The byte offsets of a block's f16 scales (random bytes there could be
/// NaN or infinite; the rest of a block is valid whatever its bytes).
fn scale_offsets(dt: Dtype) -> &'static [usize] {
    match dt {
        Dtype::Q8_0 | Dtype::Q4_0 => &[0],
        Dtype::Q4_1 | Dtype::Q4_K => &[0, 2],
        Dtype::Q6_K => &[208],
        _ => &[],
    }
}

/// A `[n, k]` tensor of random blocks with finite scales of either sign.
fn random_weight(rng: &mut Rng, dt: Dtype, n: usize, k: usize) -> Tensor {
    let (elems, bytes) = dt.block().expect("quantized");
    let blocks = n * k / elems;
    let mut raw: Vec<u8> = (0..blocks * bytes).map(|_| rng.next() as u8).collect();
    for b in 0..blocks {
        for &at in scale_offsets(dt) {
            let s = half::f16::from_f32(rng.unit() * 0.05)
                .to_bits()
                .to_le_bytes();
            raw[b * bytes + at..b * bytes + at + 2].copy_from_slice(&s);
        }
    }
    Tensor::from_raw(dt, &[n, k], raw).expect("whole blocks")
}

fn random_x(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    // Mostly small values, with an outlier channel as real activations have.
    let data = (0..n)
        .map(|i| rng.unit() * if i % 97 == 3 { 40.0 } else { 1.0 })
        .collect();
    Tensor::from_vec(shape, data).expect("x")
}

fn call(dt: Dtype, x: &Tensor, w: &Tensor) -> Result<Tensor, tc::Error> {
    let (x, w) = (x.clone(), w.clone());
    match dt {
        Dtype::Q8_0 => q::proj_q8_0(x, w),
        Dtype::Q4_0 => q::proj_q4_0(x, w),
        Dtype::Q4_1 => q::proj_q4_1(x, w),
        Dtype::Q4_K => q::proj_q4_k(x, w),
        _ => q::proj_q6_k(x, w),
    }
}

/// Per output: `Σ|x·w|` (the exact mode's bound scale) and `Σ_blocks
/// (max|x_block| / 254) · Σ|w_block|` over 256-element blocks (an upper
/// bound of the fast mode's activation error, whose blocks are 32 or 256
/// long).
fn bounds(x: &[f32], w: &[f32], rows: usize, k: usize, n: usize) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let abs: f64 = xr.iter().zip(wr).map(|(a, b)| (a * b).abs() as f64).sum();
            let act: f64 = xr
                .chunks(256)
                .zip(wr.chunks(256))
                .map(|(xb, wb)| {
                    let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                    amax / 254.0 * wb.iter().map(|v| v.abs() as f64).sum::<f64>()
                })
                .sum();
            out.push((abs, act));
        }
    }
    out
}

#[test]
fn qmatmul_on_the_jit_agrees_with_the_interpreter_in_every_format() {
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(0x5eed_0f_b10c);
    for dt in Dtype::QUANTIZED {
        let k = if dt.block().unwrap().0 == 256 {
            512
        } else {
            96
        };
        for (b, m, n) in [(1, 1, 37), (2, 5, 64), (1, 9, 130)] {
            let w = random_weight(&mut rng, dt, n, k);
            let x = random_x(&mut rng, &[b, m, k]);
            let want =
                tc::with_backend(Backend::Interpreter, || call(dt, &x, &w)).expect("interpreter");
            let want = want.to_vec::<f32>().unwrap();
            let wf = w.cast(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
            let bound = bounds(&x.to_vec::<f32>().unwrap(), &wf, b * m, k, n);
            let gamma = 2.0 * k as f64 * f64::from(f32::EPSILON);
            for fast in [false, true] {
                set_fast_quant(fast);
                let got = call(dt, &x, &w).expect("jit").to_vec::<f32>().unwrap();
                if fast {
                    // The JIT reads a weight parameter packed (tc-llvm's
                    // prepack::quant, where the host packs the format):
                    // bit for bit the kernels' results on the raw blocks.
                    let fast = tc::runtime::quant::Numerics::Fast;
                    let raw = tc::runtime::quant::qmatmul(&x, &w, fast).unwrap();
                    let raw = raw.to_vec::<f32>().unwrap();
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&raw), "{dt} [{b}, {m}, {k}] × [{n}, {k}]");
                }
                for (i, ((g, r), (abs, act))) in got.iter().zip(&want).zip(&bound).enumerate() {
                    let tol = gamma * abs + if fast { act + gamma * abs } else { 0.0 } + 1e-6;
                    let err = (*g as f64 - *r as f64).abs();
                    assert!(
                        err <= tol,
                        "{dt} fast={fast} [{b}, {m}, {k}] × [{n}, {k}] element {i}: {g} vs {r} (error {err}, bound {tol})"
                    );
                }
            }
            set_fast_quant(false);
            // Deterministic mode sums in the reference's order: its result
            // bit for bit.
            set_deterministic(true);
            let got = call(dt, &x, &w).expect("jit");
            set_deterministic(false);
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got.to_vec::<f32>().unwrap()),
                bits(&want),
                "{dt} deterministic [{b}, {m}, {k}] × [{n}, {k}]"
            );
        }
    }
}

#[test]
fn dequantize_and_block_gathers_are_bit_exact_across_backends() {
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(0xdeadbeef);
    let table = random_weight(&mut rng, Dtype::Q4_1, 50, 64);
    let ids = Tensor::from_vec(&[2, 3], vec![0i64, 49, 7, 7, 13, 1]).unwrap();
    let jit = q::rows(table.clone(), ids.clone()).expect("jit");
    let interp = tc::with_backend(Backend::Interpreter, || q::rows(table.clone(), ids.clone()))
        .expect("interpreter");
    assert_eq!(jit, interp);
    // Row 7 of the table, dequantized, is output [1, 0].
    let deq = table.cast(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(
        &jit.to_vec::<f32>().unwrap()[3 * 64..4 * 64],
        &deq[7 * 64..8 * 64]
    );
    let bad = Tensor::from_vec(&[1, 1], vec![50i64]).unwrap();
    assert!(
        q::rows(table.clone(), bad).is_err(),
        "an id past the table is an error"
    );

    let w = random_weight(&mut rng, Dtype::Q6_K, 3, 512);
    let jit = q::deq(w.clone()).expect("jit");
    let interp = tc::with_backend(Backend::Interpreter, || q::deq(w.clone())).expect("interpreter");
    assert_eq!(jit, interp);
}

#[test]
fn quantized_shapes_that_break_blocks_are_typed_errors() {
    let raw = vec![0u8; 20];
    assert!(matches!(
        Tensor::from_raw(Dtype::Q4_1, &[1, 16], raw.clone()),
        Err(tc::Error::Quantized { .. })
    ));
    let t = Tensor::from_raw(Dtype::Q4_1, &[1, 32], raw).unwrap();
    assert!(matches!(
        t.reshape(&[2, 16]),
        Err(tc::Error::Quantized { .. })
    ));
    assert!(matches!(
        t.cast(Dtype::I32),
        Err(tc::Error::Quantized { .. })
    ));
    assert!(Tensor::full(Dtype::Q8_0, &[1, 32], tc::runtime::Elem::F(1.0)).is_err());
}

#[tensor_module]
mod empty {
    use tc::Tensor;

    /// A contraction that may be empty (opted in with `K >= 0`).
    #[tensor_fn(requires(K >= 0, K % 32 == 0))]
    pub fn proj(x: Tensor![f32; M, K], w: Tensor![q8_0; N, K]) -> Tensor![f32; M, N] {
        qmatmul(x, w)
    }
}

#[test]
fn an_empty_contraction_gives_zeros_on_both_backends() {
    let x = Tensor::from_vec(&[3, 0], Vec::<f32>::new()).unwrap();
    let w = Tensor::from_raw(Dtype::Q8_0, &[2, 0], Vec::new()).unwrap();
    let want = Tensor::from_vec(&[3, 2], vec![0f32; 6]).unwrap();
    let interp = tc::with_backend(Backend::Interpreter, || empty::proj(x.clone(), w.clone()));
    assert_eq!(interp.expect("interpreter"), want);
    assert_eq!(empty::proj(x, w).expect("jit"), want);
}

/// `tc::with_quant_numerics` decides a call's numerics on its thread,
/// whatever the process-wide option says, and goes with the call onto the
/// pool through `tc::session` (as `tc::with_backend` does), or to any
/// thread through a `tc::CallContext`: the fast
/// result bit for bit from the kernels, the exact one from the other
/// numerics.
#[test]
fn quant_numerics_are_the_callers_and_cross_a_session() {
    use tc::runtime::quant::Numerics::{Exact, Fast};
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(0x5e55_10b);
    let (x, w) = (
        random_x(&mut rng, &[1, 4, 96]),
        random_weight(&mut rng, Dtype::Q8_0, 48, 96),
    );
    let bits = |t: Tensor| {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    let kernels = bits(tc::runtime::quant::qmatmul(&x, &w, Fast).unwrap());
    for process_wide in [false, true] {
        set_fast_quant(process_wide);
        let run = |n| bits(tc::with_quant_numerics(n, || call(Dtype::Q8_0, &x, &w)).unwrap());
        let hop = |n| {
            bits(tc::with_quant_numerics(n, || tc::session(|| call(Dtype::Q8_0, &x, &w))).unwrap())
        };
        assert_eq!(
            run(Fast),
            kernels,
            "process-wide fast_quant = {process_wide}"
        );
        assert_eq!(
            hop(Fast),
            kernels,
            "process-wide fast_quant = {process_wide}"
        );
        assert_ne!(run(Exact), kernels);
        assert_eq!(hop(Exact), run(Exact));
    }
    set_fast_quant(false);
    // The backend goes with the session too: the interpreter's reference.
    let interp = |f: &dyn Fn() -> Tensor| tc::with_backend(Backend::Interpreter, f);
    let reference = bits(interp(&|| call(Dtype::Q8_0, &x, &w).unwrap()));
    assert_eq!(
        bits(interp(
            &|| tc::session(|| call(Dtype::Q8_0, &x, &w)).unwrap()
        )),
        reference
    );
    // Any other hop carries both through a `CallContext`, and only then
    // (without it, the other thread has the process-wide backend).
    let process = tc::backend();
    let (outside, carried) = tc::with_backend(Backend::Interpreter, || {
        tc::with_quant_numerics(Fast, || {
            let cx = tc::CallContext::here();
            std::thread::scope(|s| {
                let outside = s.spawn(|| (tc::backend(), tc::llvm::quant_numerics()));
                let carried =
                    s.spawn(move || cx.enter(|| (tc::backend(), tc::llvm::quant_numerics())));
                (outside.join().unwrap(), carried.join().unwrap())
            })
        })
    });
    assert_eq!(outside, (process, None));
    assert_eq!(carried, (Backend::Interpreter, Some(Fast)));
}

/// A warm-up (`tc::llvm::dry_run`) goes with the calls a model hands to
/// other threads through a `tc::CallContext`, as the backend and numerics
/// do: there they are compiled, not computed (zeros); without it they
/// compute (and, outside a warm-up, compile at the quick tier, to be
/// compiled again once setup is over).
#[test]
fn a_dry_run_goes_with_a_call_context() {
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(0xd12e_4e);
    let (x, w) = (
        random_x(&mut rng, &[1, 4, 96]),
        random_weight(&mut rng, Dtype::Q8_0, 48, 96),
    );
    let run = || call(Dtype::Q8_0, &x, &w).unwrap().to_vec::<f32>().unwrap();
    let computed = run();
    assert!(computed.iter().any(|v| *v != 0.0));
    let (outside, carried) = tc::llvm::dry_run(|| {
        let cx = tc::CallContext::here();
        std::thread::scope(|s| {
            let outside = s.spawn(|| (tc::llvm::in_dry_run(), run()));
            let carried = s.spawn(move || cx.enter(|| (tc::llvm::in_dry_run(), run())));
            (outside.join().unwrap(), carried.join().unwrap())
        })
    });
    assert_eq!(outside, (false, computed.clone()));
    assert_eq!(carried, (true, vec![0.0; computed.len()]));
    assert!(!tc::llvm::in_dry_run());
}
