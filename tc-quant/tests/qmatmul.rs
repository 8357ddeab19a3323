//! `qmatmul` against the bounds stated in `tc_quant::quant`'s docs, on
//! every kernel path the host has, and paths against the scalar one.

use crate::common;

use common::{adversarial_acts, extreme_blocks, random_acts, random_blocks, Rng};
use proptest::prelude::*;
use tc_quant::{
    available_paths, dequantize, qmatmul_packed, qmatmul_with, Format, Numerics, PackedWeights,
    Path, QuantError,
};

const U: f64 = 1.0 / (1u64 << 24) as f64;
/// 2⁻¹⁵⁰: the most one underflowing f32 operation can lose (module docs).
const ETA: f64 = 1.0 / (1u128 << 100) as f64 / (1u64 << 50) as f64;

fn gamma(n: usize) -> f64 {
    n as f64 * U / (1.0 - n as f64 * U)
}

struct Case {
    f: Format,
    rows: usize,
    k: usize,
    n_out: usize,
    x: Vec<f32>,
    w: Vec<u8>,
    wf: Vec<f32>,
}

fn case(f: Format, rows: usize, nblk: usize, n_out: usize, seed: u64) -> Case {
    case_with(f, rows, nblk, n_out, seed, false)
}

/// `adversarial`: extreme weight scales and [`adversarial_acts`].
fn case_with(
    f: Format,
    rows: usize,
    nblk: usize,
    n_out: usize,
    seed: u64,
    adversarial: bool,
) -> Case {
    let mut rng = Rng(seed);
    let k = nblk * f.block_elems();
    let w = if adversarial {
        extreme_blocks(&mut rng, f, n_out * nblk)
    } else {
        random_blocks(&mut rng, f, n_out * nblk)
    };
    let mut wf = vec![0f32; n_out * k];
    dequantize(f, &w, &mut wf).unwrap();
    let x = if adversarial {
        adversarial_acts(&mut rng, rows * k, k)
    } else {
        random_acts(&mut rng, rows * k)
    };
    Case {
        f,
        rows,
        k,
        n_out,
        x,
        w,
        wf,
    }
}

fn run(c: &Case, path: Path, num: Numerics) -> Vec<f32> {
    let mut y = vec![f32::NAN; c.rows * c.n_out];
    qmatmul_with(path, c.f, num, &c.x, c.rows, c.k, &c.w, c.n_out, &mut y).unwrap();
    y
}

/// Checks every output of `y` against `bound(m, j)` around the f64 dot.
fn check(c: &Case, y: &[f32], what: &str, bound: impl Fn(&[f32], &[f32]) -> f64) {
    for m in 0..c.rows {
        let x = &c.x[m * c.k..(m + 1) * c.k];
        for j in 0..c.n_out {
            let w = &c.wf[j * c.k..(j + 1) * c.k];
            let exact: f64 = x.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum();
            let err = (y[m * c.n_out + j] as f64 - exact).abs();
            let b = bound(x, w);
            assert!(
                err <= b,
                "{what} {:?} m={m} j={j}: err {err:e} > bound {b:e}",
                c.f
            );
        }
    }
}

fn exact_bound(x: &[f32], w: &[f32]) -> f64 {
    let s: f64 = x
        .iter()
        .zip(w)
        .map(|(&a, &b)| (a as f64 * b as f64).abs())
        .sum();
    gamma(x.len()) * s + (x.len() + 16) as f64 * ETA
}

fn fast_bound(f: Format) -> impl Fn(&[f32], &[f32]) -> f64 {
    let blk = f.block_elems();
    move |x: &[f32], w: &[f32]| {
        let g = gamma(x.len() / blk + 6);
        let mut total = 0.0;
        for (xb, wb) in x.chunks(blk).zip(w.chunks(blk)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
            let d = amax / 127.0 * (1.0 + 2.0 * U);
            for (&a, &b) in xb.iter().zip(wb) {
                total += (b as f64).abs()
                    * ((0.5 + 1.0 / 32768.0) * d + g * ((a as f64).abs() + d) + 127.0 * ETA);
            }
            // Underflow in the f32 scaling of the block term.
            total += (1u64 << 28) as f64 * ETA;
        }
        total
    }
}

/// Checks exact and fast numerics on every path; paths match scalar bits.
fn check_all(c: &Case) {
    for num in [Numerics::Exact, Numerics::Fast] {
        let reference = run(c, Path::Scalar, num);
        match num {
            Numerics::Exact => check(c, &reference, "exact", exact_bound),
            Numerics::Fast => check(c, &reference, "fast", fast_bound(c.f)),
        }
        if num == Numerics::Exact {
            check_vs_naive(c, &reference);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for path in available_paths() {
            let y = run(c, path, num);
            assert_eq!(
                bits(&y),
                bits(&reference),
                "{path:?} {num:?} {:?} rows={} n_out={}",
                c.f,
                c.rows,
                c.n_out
            );
        }
        if num == Numerics::Fast {
            check_packed(c, &bits(&reference));
        }
    }
}

/// The packed weight gives the raw one's fast results bit for bit, where
/// the host packs the format at all (VNNI, a 32-element format).
fn check_packed(c: &Case, reference: &[u32]) {
    let Some(p) = PackedWeights::new(c.f, &c.w, c.n_out, c.k).unwrap() else {
        return;
    };
    assert_eq!((p.format(), p.n_out(), p.k()), (c.f, c.n_out, c.k));
    // Never smaller than the raw weight, and at most a partial tile's
    // padding plus each tile's rounding to 64 bytes more.
    let tile_raw = 16 * c.w.len() / c.n_out;
    assert!(
        p.bytes() >= c.w.len() && p.bytes() <= c.w.len() + tile_raw + 64 * c.n_out.div_ceil(16)
    );
    let mut y = vec![f32::NAN; c.rows * c.n_out];
    qmatmul_packed(&p, &c.x, c.rows, &mut y).unwrap();
    let got: Vec<u32> = y.iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        got, reference,
        "packed {:?} rows={} n_out={}",
        c.f, c.rows, c.n_out
    );
}

/// Exact mode within 2·γ_K·Σ|x w| of a naive sequential f32 dot.
fn check_vs_naive(c: &Case, y: &[f32]) {
    for m in 0..c.rows {
        let x = &c.x[m * c.k..(m + 1) * c.k];
        for j in 0..c.n_out {
            let w = &c.wf[j * c.k..(j + 1) * c.k];
            let naive: f32 = x.iter().zip(w).fold(0.0, |s, (&a, &b)| s + a * b);
            let err = (y[m * c.n_out + j] as f64 - naive as f64).abs();
            assert!(
                err <= 2.0 * exact_bound(x, w),
                "naive {:?} m={m} j={j}",
                c.f
            );
        }
    }
}

#[test]
fn every_format_rows_and_ragged_columns() {
    for f in Format::ALL {
        // 16 and 48: whole groups of the AMX tiles' 16 rows; 33: two
        // groups and one row left over for the VNNI tile.
        for (i, rows) in [1, 2, 3, 7, 16, 33, 48].into_iter().enumerate() {
            let nblk = if f.block_elems() == 32 { 5 } else { 2 };
            // 37 and 13 are no multiple of the 4-column tiles or the chunks.
            let n_out = [37, 13, 5, 1, 16, 19, 21][i];
            check_all(&case(f, rows, nblk, n_out, 1000 + i as u64));
        }
    }
}

/// The AMX kernel's pipeline (three blocks in flight) at its edges: one,
/// two, three and four blocks per row, for one and two groups of 16 rows,
/// and for last groups padded to 16 (8 rows or more left over: 8, 15,
/// 25) or left to the VNNI tiles (7, 23).
#[test]
fn amx_pipeline_edges() {
    for f in Format::ALL.into_iter().filter(|f| f.block_elems() == 32) {
        for nblk in 1..=4 {
            for rows in [7, 8, 15, 16, 23, 25, 32] {
                check_all(&case(f, rows, nblk, 21, 2000 + (nblk * rows) as u64));
            }
        }
    }
}

/// Every path the host has is tested: a CPU that reports AMX-INT8 in
/// /proc/cpuinfo must be offered the AMX path (the OS grants the tile
/// state on every Linux since 5.16), so its kernels cannot silently drop
/// out of the comparisons above.
#[test]
fn amx_is_offered_where_the_cpu_has_it() {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    if has("amx_int8") && has("amx_tile") && has("avx512_vnni") {
        assert!(Path::Amx.is_available(), "AMX-INT8 CPU, but no AMX path");
        assert!(available_paths().contains(&Path::Amx));
    }
}

/// A packed product large enough to split its rows over a pool of two
/// (the last share ragged, and a row left to the VNNI tiles in it) gives
/// the bits of the same product on one thread, which splits nothing,
/// for every 32-element format.
#[test]
fn packed_rows_split_over_threads_are_the_same_bits() {
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let (one, two) = (pool(1), pool(2));
    for f in Format::ALL.into_iter().filter(|f| f.block_elems() == 32) {
        let c = case(f, 289, 3, 40, 4000);
        let Some(p) = PackedWeights::new(c.f, &c.w, c.n_out, c.k).unwrap() else {
            return;
        };
        let on = |pool: &rayon::ThreadPool| {
            let mut y = vec![f32::NAN; c.rows * c.n_out];
            pool.install(|| qmatmul_packed(&p, &c.x, c.rows, &mut y))
                .unwrap();
            y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        assert_eq!(on(&two), on(&one), "{f:?}");
    }
}

/// A weight with no columns to contract over has nothing to pack: no
/// packing (it panicked on a tile of no bytes), for every format.
#[test]
fn an_empty_contraction_packs_nothing() {
    for f in Format::ALL {
        assert!(PackedWeights::new(f, &[], 4, 0).unwrap().is_none(), "{f:?}");
    }
}

#[test]
fn many_columns_cross_chunk_boundaries() {
    for f in [Format::Q4_1, Format::Q8_0] {
        check_all(&case(f, 2, 18, 1003, 7));
    }
}

#[test]
fn zero_activations_give_zero() {
    let mut c = case(Format::Q4_1, 2, 2, 9, 3);
    c.x.fill(0.0);
    for num in [Numerics::Exact, Numerics::Fast] {
        assert!(run(&c, Path::Scalar, num).iter().all(|&v| v == 0.0));
    }
}

#[test]
fn rejects_bad_arguments() {
    let mut y = [0f32; 2];
    let err = qmatmul_with(
        Path::Scalar,
        Format::Q8_0,
        Numerics::Exact,
        &[0.0; 30],
        1,
        30,
        &[],
        2,
        &mut y,
    );
    assert!(matches!(
        err,
        Err(QuantError::NotBlockMultiple { len: 30, .. })
    ));
    let err = qmatmul_with(
        Path::Scalar,
        Format::Q8_0,
        Numerics::Fast,
        &[0.0; 32],
        1,
        32,
        &[0; 34],
        2,
        &mut y,
    );
    assert!(matches!(
        err,
        Err(QuantError::BadLength {
            what: "w",
            expected: 68,
            found: 34
        })
    ));
    let err = qmatmul_with(
        Path::Scalar,
        Format::Q8_0,
        Numerics::Fast,
        &[0.0; 32],
        usize::MAX,
        32,
        &[],
        2,
        &mut y,
    );
    assert!(matches!(err, Err(QuantError::Overflow { .. })));
    for p in [Path::Avx2, Path::Avx512] {
        if !available_paths().contains(&p) {
            let err = qmatmul_with(
                p,
                Format::Q8_0,
                Numerics::Fast,
                &[0.0; 32],
                1,
                32,
                &[0; 68],
                2,
                &mut y,
            );
            assert_eq!(err, Err(QuantError::PathUnavailable(p)));
        }
    }
}

/// Regression: a block whose `max|x| / 127` is a subnormal f32 made
/// `x / d` overshoot ±127; the scalar path saturated it to −128, which the
/// SIMD Q8_0 kernels' `sign_epi8` trick cannot negate, so paths disagreed
/// (and the scalar result missed the bound). Every path must agree and
/// stay within the (underflow-aware) bound.
#[test]
fn subnormal_activation_scale_agrees_across_paths() {
    for f in Format::ALL {
        let mut c = case(f, 3, 256 / f.block_elems() * 2, 9, 77);
        for (i, xb) in c.x.chunks_mut(32).enumerate() {
            // max|x| = 190..~300 ulps of the smallest subnormal: d ≈ 1.5..2.4 ulps.
            let amax = f32::from_bits(190 + 7 * i as u32);
            for (l, v) in xb.iter_mut().enumerate() {
                *v = amax * (l as f32 - 16.0) / 16.0;
            }
            xb[0] = -amax;
        }
        // Weights whose Q8_0 values include −128 and other negatives, with
        // scales large enough that `d_w · d_x` does not underflow to 0.
        if f == Format::Q8_0 {
            for (j, blk) in c.w.chunks_exact_mut(34).enumerate() {
                let dw = half::f16::from_f32([1.0, -3.0, 100.0][j % 3]);
                blk[..2].copy_from_slice(&dw.to_bits().to_le_bytes());
                for (l, q) in blk[2..].iter_mut().enumerate() {
                    *q = if l % 2 == 0 { 0x80 } else { 0xC1 };
                }
            }
            dequantize(f, &c.w, &mut c.wf).unwrap();
        }
        check_all(&c);
    }
}

#[test]
fn adversarial_activations_every_format() {
    for f in Format::ALL {
        for (i, rows) in [1, 2, 37].into_iter().enumerate() {
            let nblk = if f.block_elems() == 32 { 18 } else { 3 };
            check_all(&case_with(f, rows, nblk, 23, 500 + i as u64, true));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes_within_bounds(
        fi in 0usize..5,
        rows in prop::sample::select(vec![1usize, 2, 3, 7, 16, 33]),
        nblk in 1usize..6,
        n_out in 1usize..40,
        seed in any::<u64>(),
        adversarial in any::<bool>(),
    ) {
        let f = Format::ALL[fi];
        let nblk = if f.block_elems() == 256 { nblk.min(3) } else { nblk };
        check_all(&case_with(f, rows, nblk, n_out, seed, adversarial));
    }
}
