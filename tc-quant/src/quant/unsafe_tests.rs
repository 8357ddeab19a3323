//! The kernels' `unsafe` (the AVX2 and AVX-512 intrinsics paths, the VNNI
//! tiles, a packed weight) run on small inputs against the scalar path,
//! bit for bit, so that Miri (`scripts/miri.sh`) checks every access they
//! make: every format and both numerics, one row and a 4-row tile plus
//! one, 16-column and 4-column tiles plus a ragged column.
//!
//! Which paths run is the host's (under Miri: the build's target
//! features). [`Path::Amx`] is never asked for: its availability test
//! executes CPUID, which Miri cannot run, and its tiles are instructions
//! Miri does not implement. Neither does it implement the 512-bit forms
//! of `vmaxps` (the AVX-512 activation quantizer, which fast numerics use
//! on every path of an AVX-512 host), `vcvtph2ps` and `vpgatherdd` (the
//! VNNI tiles): under Miri with AVX-512 enabled only the exact numerics
//! run, and a weight is packed for the VNNI tiles but not multiplied; the
//! AVX2 build runs the fast numerics (`scripts/miri.sh`).

use super::*;

/// SplitMix64, as the integration tests' helpers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// `n` blocks of `f`: arbitrary quants, modest finite f16 scales.
fn blocks(rng: &mut Rng, f: Format, n: usize) -> Vec<u8> {
    let mut b: Vec<u8> = (0..n * f.block_bytes()).map(|_| rng.next() as u8).collect();
    let scales: &[usize] = match f {
        Format::Q8_0 | Format::Q4_0 => &[0],
        Format::Q4_1 | Format::Q4_K => &[0, 2],
        Format::Q6_K => &[208],
    };
    for blk in b.chunks_exact_mut(f.block_bytes()) {
        for &at in scales {
            // Sign, an exponent for 2^-6..2^-2 and any mantissa, as bits:
            // with F16C enabled at build time `half` rounds f32 to f16 by
            // an instruction Miri does not implement.
            let r = rng.next();
            let v = (r as u16 & 0x83ff) | ((9 + (r >> 16) % 5) as u16) << 10;
            blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// `f` on a pool of two threads joined before this returns (Miri reports
/// threads still running at exit, as the global pool's would be).
fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_scoped(|t| t.run(), |pool| pool.install(f))
        .expect("a pool of two threads")
}

#[test]
fn every_path_and_a_packed_weight_match_the_scalar_kernels() {
    let mut rng = Rng(0x5eed);
    let numerics: &[Numerics] = if cfg!(all(miri, target_feature = "avx512f")) {
        &[Numerics::Exact]
    } else {
        &[Numerics::Exact, Numerics::Fast]
    };
    let paths: Vec<Path> = [Path::Avx2, Path::Avx512]
        .into_iter()
        .filter(|p| p.is_available())
        .collect();
    for f in Format::ALL {
        // Two blocks of the 32-element formats, one super-block of the
        // K-quants.
        let k = if f.block_elems() == 32 { 64 } else { 256 };
        let n_out = 16 + 4 + 1;
        let w = blocks(&mut rng, f, n_out * k / f.block_elems());
        for rows in [1, 5] {
            let x: Vec<f32> = (0..rows * k).map(|_| rng.unit() * 3.0).collect();
            for &numerics in numerics {
                let run = |path: Path| {
                    let mut y = vec![f32::NAN; rows * n_out];
                    on_pool(|| qmatmul_with(path, f, numerics, &x, rows, k, &w, n_out, &mut y))
                        .unwrap();
                    y
                };
                let want = run(Path::Scalar);
                assert!(want.iter().all(|v| v.is_finite()), "{f:?} {numerics:?}");
                for &path in &paths {
                    let got = run(path);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{f:?} {numerics:?} {path:?} rows={rows}");
                }
            }
            // `qmatmul_packed`'s work with AMX off (see the module doc).
            let Some(p) = PackedWeights::new(f, &w, n_out, k).unwrap() else {
                continue;
            };
            let tiles = n_out.div_ceil(16);
            assert_eq!(p.bytes(), tiles * p.tile_bytes);
            assert!((0..tiles).all(|t| p.tile(t).len() == p.tile_bytes));
            if !numerics.contains(&Numerics::Fast) {
                continue;
            }
            let mut y = vec![f32::NAN; rows * n_out];
            on_pool(|| {
                let acts = quantize(f, &x, rows, k, false);
                let job = kernels::Job {
                    path: Path::Avx512,
                    amx: false,
                    f,
                    x: &x,
                    acts: Some(&acts),
                    rows,
                    k,
                    w: &[],
                    row_bytes: k / f.block_elems() * f.block_bytes(),
                    packed: Some(&p),
                };
                run_columns(&job, &mut y, n_out);
            });
            let mut want = vec![0f32; rows * n_out];
            on_pool(|| {
                qmatmul_with(
                    Path::Scalar,
                    f,
                    Numerics::Fast,
                    &x,
                    rows,
                    k,
                    &w,
                    n_out,
                    &mut want,
                )
            })
            .unwrap();
            let same = y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{f:?} packed rows={rows}");
        }
    }
}
