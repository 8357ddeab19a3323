//! The NaN of a matmul (and of a reduction) is the canonical NaN on both
//! backends. Section 4 §5.4 leaves a matmul's summation order unspecified
//! (§6), exactly as a reduction's fold order, so which NaN operand or which
//! partial sum made a NaN is not observable, and its payload must not
//! depend on it either: the result is `cast::CANONICAL_NAN` (Section 2 §3
//! rule, `tc_runtime::cast`), rounded into the dtype, whatever NaN, `∞ · 0`
//! or `∞ − ∞` produced it. Checked for f32 and every narrow float, NaNs in
//! A's rows, B's columns, both, and made from infinities, at shapes that
//! take the small, gemv, packed and threaded paths, through a strided
//! (transposed) right operand, in every JIT mode, bit for bit.
use crate::util;

use tc_core::ir::{Function, Op, ReduceOp};
use tc_core::Dtype;
use tc_llvm::JitOptions;
use tc_runtime::cast;
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::Tensor;
use util::*;

const FLOATS: [Dtype; 5] = [
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F8E4M3,
    Dtype::F8E5M2,
];

/// The JIT modes: exact, deterministic, fast (the default), one thread.
fn modes() -> [(&'static str, JitOptions); 4] {
    [
        ("exact", EXACT),
        ("deterministic", DET),
        ("default", JitOptions::default()),
        (
            "threads1",
            JitOptions {
                threads: 1,
                ..JitOptions::default()
            },
        ),
    ]
}

/// The storage bits of element `i`.
fn raw(t: &Tensor, i: usize) -> u32 {
    let w = t.dtype().storage_bytes(1);
    let b = &t.bytes()[i * w..(i + 1) * w];
    b.iter()
        .rev()
        .fold(0u32, |acc, &byte| (acc << 8) | byte as u32)
}

/// The storage bits of the canonical NaN at `dt`.
fn canonical(dt: Dtype) -> u32 {
    if dt == Dtype::F32 {
        cast::CANONICAL_NAN.to_bits()
    } else {
        cast::encode_bits(cast::CANONICAL_NAN, dt).expect("a float dtype") as u32
    }
}

/// A tensor of `dt` from f32 values; f32 keeps NaN payloads bit for bit.
fn tensor(dt: Dtype, shape: &[usize], xs: Vec<f32>) -> Tensor {
    if dt == Dtype::F32 {
        return Tensor::from_vec(shape, xs).unwrap();
    }
    // `store_bits`, not the saturating cast: F8E5M2 keeps its ±∞.
    let w = dt.storage_bytes(1);
    let bytes: Vec<u8> = xs
        .into_iter()
        .flat_map(|x| {
            let r = if x.is_infinite() {
                x
            } else {
                cast::round_to(x, dt)
            };
            let b = cast::store_bits(r, dt).expect("a narrow float");
            b.to_le_bytes().into_iter().take(w)
        })
        .collect();
    Tensor::from_raw(dt, shape, bytes).unwrap()
}

/// Every element: the interpreter's bits on every JIT mode, and every NaN
/// the canonical one.
fn check(what: &str, f: &Function, args: &[Arg]) -> usize {
    let want = interp(f, args).unwrap();
    let dt = want.dtype();
    let mut nans = 0;
    for i in 0..want.numel() {
        let w = want.get(i).and_then(Elem::as_f32).unwrap();
        if w.is_nan() {
            nans += 1;
            assert_eq!(
                raw(&want, i),
                canonical(dt),
                "{what}: interpreter element {i} is NaN {:#x}, not the canonical {:#x}",
                raw(&want, i),
                canonical(dt)
            );
        }
    }
    for (name, opts) in modes() {
        let got = jit(f, args, opts);
        for i in 0..want.numel() {
            assert_eq!(
                raw(&got, i),
                raw(&want, i),
                "{what} ({name}): element {i}: jit {:?} vs interpreter {:?}",
                got.get(i),
                want.get(i)
            );
        }
    }
    nans
}

fn matmul_fn(dt: Dtype, batched: bool) -> Function {
    let dims = |a: &'static str, b: &'static str| {
        if batched {
            vec!["P", a, b]
        } else {
            vec![a, b]
        }
    };
    let mut b = builder("mm");
    let x = b.param("a", tt(dt, &dims("M", "K")));
    let w = b.param("b", tt(dt, &dims("K", "N")));
    b.returns(tt(dt, &dims("M", "N")));
    let r = b.op(Op::Matmul(x, w));
    b.finish(r)
}

/// `x · wᵀ` with `w: [N, K]`: the right operand read through strides.
fn linear_fn(dt: Dtype) -> Function {
    let mut b = builder("linear");
    let x = b.param("x", tt(dt, &["M", "K"]));
    let w = b.param("w", tt(dt, &["N", "K"]));
    b.returns(tt(dt, &["M", "N"]));
    let t = b.op(Op::Transpose(vec![1, 0], w));
    let r = b.op(Op::Matmul(x, t));
    b.finish(r)
}

/// Small finite values (exact in every narrow float).
fn finite(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| ((rng.next() % 7) as f32 - 3.0) * 0.25)
        .collect()
}

/// The NaN sources one product plants, as `(a index, value)` and
/// `(b index, value)` lists, for A `[m, k]` and B `[k, n]` (row-major).
fn plants(
    dt: Dtype,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<(&'static str, Vec<(usize, f32)>, Vec<(usize, f32)>)> {
    let nan = |bits: u32| f32::from_bits(bits);
    let mut v = vec![
        // A signalling NaN with a payload in A's row 0.
        ("signalling NaN in A", vec![(0, nan(0x7FA0_0005))], vec![]),
        // A negative quiet NaN with a payload in B's last column.
        (
            "negative NaN in B",
            vec![],
            vec![((k - 1) * n + (n - 1), nan(0xFFC0_0123))],
        ),
        // Different NaNs meeting in one output element.
        (
            "NaNs in A and B",
            vec![(((m - 1) * k), nan(0xFFC0_0001))],
            vec![(n - 1, nan(0x7FC0_0042))],
        ),
    ];
    if dt != Dtype::F8E4M3 {
        // No NaN operand: ∞ · 0, and ∞ − ∞ across the sum.
        v.push(("inf times zero", vec![(0, f32::INFINITY)], vec![(0, 0.0)]));
        if k >= 2 {
            v.push((
                "inf minus inf",
                vec![(0, f32::INFINITY), (1, f32::INFINITY)],
                vec![(0, 1.0), (n, -1.0)],
            ));
        }
    }
    v
}

#[test]
fn matmul_nans_are_canonical_on_both_backends() {
    let mut rng = Rng(0x4A4E);
    // Small, gemv (m = 1), K-blocked, threaded-size, and ragged shapes.
    let shapes = [
        (1usize, 7usize, 5usize),
        (3, 5, 4),
        (1, 300, 64),
        (20, 70, 40),
        (33, 200, 64),
        (150, 40, 96),
    ];
    for dt in FLOATS {
        let plain = matmul_fn(dt, false);
        let lin = linear_fn(dt);
        for &(m, k, n) in &shapes {
            for (what, in_a, in_b) in plants(dt, m, k, n) {
                let mut a = finite(&mut rng, m * k);
                let mut b = finite(&mut rng, k * n);
                if what == "inf times zero" {
                    // Only the planted zero meets the infinity: row 0 of B
                    // is otherwise non-zero.
                    for x in b.iter_mut().take(n) {
                        *x = 1.0;
                    }
                }
                for &(i, x) in &in_a {
                    a[i] = x;
                }
                for &(i, x) in &in_b {
                    b[i] = x;
                }
                let label = format!("{what}, {dt} [{m}, {k}] × [{k}, {n}]");
                let args: Vec<Arg> = vec![
                    tensor(dt, &[m, k], a.clone()).into(),
                    tensor(dt, &[k, n], b.clone()).into(),
                ];
                let nans = check(&label, &plain, &args);
                assert!(nans > 0, "{label}: no NaN was produced");
                // The same product with B stored transposed ([n, k]).
                let mut bt = vec![0f32; k * n];
                for l in 0..k {
                    for j in 0..n {
                        bt[j * k + l] = b[l * n + j];
                    }
                }
                let args: Vec<Arg> = vec![
                    tensor(dt, &[m, k], a).into(),
                    tensor(dt, &[n, k], bt).into(),
                ];
                check(&format!("{label} (B transposed)"), &lin, &args);
            }
        }
        // Batched: a NaN in the second item only.
        let (p, m, k, n) = (2usize, 4usize, 6usize, 3usize);
        let mut a = finite(&mut rng, p * m * k);
        a[m * k + 1] = f32::from_bits(0x7F80_0007);
        let b = finite(&mut rng, p * k * n);
        let args: Vec<Arg> = vec![
            tensor(dt, &[p, m, k], a).into(),
            tensor(dt, &[p, k, n], b).into(),
        ];
        let nans = check(&format!("batched {dt}"), &matmul_fn(dt, true), &args);
        assert!(nans > 0);
    }
}

/// The reductions' NaN is the canonical one too (the rule the matmul's
/// follows), whatever NaN the input held and wherever.
#[test]
fn reduction_nans_are_canonical_on_both_backends() {
    let mut rng = Rng(0x5ED);
    for dt in FLOATS {
        for op in [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
        ] {
            for axis in [0usize, 1] {
                let (r, c) = (5usize, 9usize);
                let mut xs = finite(&mut rng, r * c);
                xs[2] = f32::from_bits(0xFFC0_0099);
                xs[c + 4] = f32::from_bits(0x7FA0_0001);
                xs[3 * c + 8] = f32::from_bits(0x7FC0_0033);
                let mut b = builder("red");
                let x = b.param("x", tt(dt, &["R", "C"]));
                let out = if axis == 0 { "C" } else { "R" };
                b.returns(tt(dt, &[out]));
                let y = b.op(Op::Reduce {
                    op,
                    axes: vec![axis],
                    keepdims: false,
                    x,
                });
                let f = b.finish(y);
                let args: Vec<Arg> = vec![tensor(dt, &[r, c], xs).into()];
                let nans = check(
                    &format!("{} over axis {axis} at {dt}", op.name()),
                    &f,
                    &args,
                );
                assert!(nans > 0);
            }
        }
    }
}
