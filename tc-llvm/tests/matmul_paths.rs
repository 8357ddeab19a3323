//! The f32 matmul's two blockings: a single row block (m ≤ STREAM_MAX_M) streams B
//! panel by panel through an L1 buffer; larger m packs all of B per
//! K-block. Same micro-kernel, same K-blocking: bit-identical to each
//! other, on one thread and on the pool, and within the documented
//! tolerance of the interpreter.
mod util;

use tc_core::ir::Op;
use tc_core::Dtype;
use tc_llvm::kernels::matmul::{set_a_in_place, set_stream_b, sgemm, View};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

/// How a run of the product is set up.
#[derive(Clone, Copy, Debug)]
struct Path {
    threads: usize,
    /// The streamed path (for `m ≤ STREAM_MAX_M`), else the blocked one.
    stream: bool,
    /// The streamed path reads A in place where it may, else packs it.
    in_place: bool,
}

/// `a` is `m × k` at row stride `lda ≥ k` (the floats between rows are
/// NaN: a kernel reading past a row's `k` would poison C).
fn run(m: usize, n: usize, k: usize, lda: usize, a: &[f32], b: &[f32], path: Path) -> Vec<f32> {
    set_stream_b(path.stream);
    set_a_in_place(path.in_place);
    let mut c = vec![f32::NAN; m * n];
    // SAFETY: the views cover `a` (m × k at stride `lda`) and `b` (k × n);
    // `c` is m × n.
    unsafe {
        sgemm(
            m,
            n,
            k,
            View::new(a.as_ptr(), lda, 1),
            View::new(b.as_ptr(), n, 1),
            c.as_mut_ptr(),
            &tc_llvm::ctx::ExecCtx::on_this_thread(path.threads),
        )
        .unwrap();
    }
    set_stream_b(true);
    set_a_in_place(true);
    c
}

#[test]
fn streamed_and_blocked_paths_agree_bitwise() {
    let mut s = 7u64;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    };
    // Edges in every direction, K across several K-blocks, n across a
    // multiple of the panel width and beyond; a few rows with K across
    // more K-blocks than the streamed path packs into one group (A's
    // packing past 2^16 floats: 5000 rows of K at one row panel), so the
    // second group adds to C after the first.
    // A's row stride: its `k`, or wider (a view of columns of a larger
    // matrix, as attention's heads are), or 1024 floats (4 KiB: every row
    // in one L1 set, where A is packed, not read in place).
    for (m, n, k, lda) in [
        (1usize, 1usize, 1usize, 1usize),
        (13, 33, 257, 260),
        (128, 3072 / 8, 768, 768),
        (130, 100, 600, 600),
        (140, 64, 512, 517),
        (128, 128, 128, 128),
        (16, 16, 32, 384),
        (30, 40, 300, 1024),
        (1, 1000, 520, 520),
        (3, 70, 5000, 5000),
        // Several groups of panels packed together, the last one short
        // and ragged (`PACK_PANELS` = 4 panels of 32: 6 panels + 7).
        (5, 199, 600, 600),
        (32, 272, 770, 770),
    ] {
        let a: Vec<f32> = (0..m * lda)
            .map(|i| if i % lda < k { next() } else { f32::NAN })
            .collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let path = |threads, stream, in_place| Path {
            threads,
            stream,
            in_place,
        };
        let base = run(m, n, k, lda, &a, &b, path(1, false, false));
        for p in [
            path(1, true, false),
            path(1, true, true),
            path(0, true, false),
            path(0, true, true),
            path(0, false, true),
        ] {
            let c = run(m, n, k, lda, &a, &b, p);
            assert!(
                c.iter().zip(&base).all(|(x, y)| x.to_bits() == y.to_bits()),
                "m={m} n={n} k={k} lda={lda} {p:?}"
            );
        }
        // Against an f64 reference: |err| ≤ 2(k+2)·2⁻²⁴·Σ|ab| (Σ|ab| ≤ 4k).
        let tol = 2.0 * (k as f64 + 2.0) * 4.0 * k as f64 / 16777216.0;
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k)
                    .map(|p| a[i * lda + p] as f64 * b[p * n + j] as f64)
                    .sum();
                let d = (base[i * n + j] as f64 - r).abs();
                assert!(d <= tol, "m={m} n={n} k={k} at ({i},{j}): {d} > {tol}");
            }
        }
    }
}

/// Through the JIT: a linear-layer-sized matmul with a single row block
/// (the streamed path) and one with several (the blocked path), on one
/// thread and on the pool, against the interpreter.
#[test]
fn jit_matmul_both_blockings_match_interpreter() {
    let mut rng = Rng(23);
    for (m, k, n) in [(100usize, 300usize, 70usize), (150, 300, 70)] {
        let mut b = builder("mm");
        let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
        let y = b.param("y", tt(Dtype::F32, &["K", "N"]));
        b.returns(tt(Dtype::F32, &["M", "N"]));
        let r = b.op(Op::Matmul(x, y));
        let f = b.finish(r);
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::F32, &[m, k], false).into(),
            random(&mut rng, Dtype::F32, &[k, n], false).into(),
        ];
        let want = interp(&f, &args).unwrap();
        let atol = 2.0 * (k as f32 + 2.0) * 16.0 * k as f32 / 16777216.0;
        for threads in [1, 0] {
            let opts = JitOptions {
                threads,
                ..JitOptions::default()
            };
            let got = jit(&f, &args, opts);
            assert_close(
                &format!("matmul {m}x{k}x{n} threads={threads}"),
                &got,
                &want,
                0.0,
                atol,
            );
        }
    }
}

/// The AVX-512 16 × 16 transpose used to pack PyTorch-layout weights.
#[cfg(target_arch = "x86_64")]
#[test]
fn transpose16_is_a_transpose() {
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return;
    }
    let src: Vec<f32> = (0..16 * 21).map(|i| i as f32).collect();
    let mut dst = vec![-1f32; 16 * 40];
    // SAFETY: 16 rows at stride 21 inside `src`, 16 rows at stride 40 inside `dst`.
    unsafe { tc_llvm::kernels::matmul::transpose16(src.as_ptr(), 21, dst.as_mut_ptr(), 40) };
    for i in 0..16 {
        for c in 0..16 {
            assert_eq!(dst[i * 40 + c], src[c * 21 + i], "({i},{c})");
        }
        assert!(dst[i * 40 + 16..i * 40 + 40].iter().all(|&x| x == -1.0));
    }
}

/// Transposed B (a PyTorch-layout weight read through strides) on both
/// blockings: bit-identical to the same product with B materialized.
#[test]
fn transposed_b_packing_matches_contiguous() {
    let mut s = 99u64;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    };
    for (m, n, k) in [(20usize, 70usize, 300usize), (150, 48, 33), (128, 96, 272)] {
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let w: Vec<f32> = (0..n * k).map(|_| next()).collect(); // [n, k]
        let mut bt = vec![0f32; k * n]; // [k, n] = wᵀ
        for j in 0..n {
            for p in 0..k {
                bt[p * n + j] = w[j * k + p];
            }
        }
        let want = run(
            m,
            n,
            k,
            k,
            &a,
            &bt,
            Path {
                threads: 1,
                stream: true,
                in_place: true,
            },
        );
        for threads in [1, 0] {
            let mut c = vec![f32::NAN; m * n];
            // SAFETY: the views cover `a` and `w`; `c` is m × n.
            unsafe {
                sgemm(
                    m,
                    n,
                    k,
                    View::new(a.as_ptr(), k, 1),
                    View::new(w.as_ptr(), 1, k),
                    c.as_mut_ptr(),
                    &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
                )
                .unwrap();
            }
            assert!(
                c.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()),
                "m={m} n={n} k={k} threads={threads}"
            );
        }
    }
}

/// `len` floats that end where an inaccessible page begins: a read one
/// float past them faults.
struct Guarded {
    base: *mut libc::c_void,
    size: usize,
    data: *mut f32,
    len: usize,
}

impl Guarded {
    fn new(vals: &[f32]) -> Guarded {
        let page = 4096;
        let bytes = (vals.len() * 4).div_ceil(page) * page;
        let size = bytes + page;
        // SAFETY: a fresh anonymous private mapping; its last page is made
        // inaccessible, the floats copied to the end of the pages before it.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let guard = (base as *mut u8).add(bytes);
            assert_eq!(libc::mprotect(guard.cast(), page, libc::PROT_NONE), 0);
            let data = (guard as *mut f32).sub(vals.len());
            std::ptr::copy_nonoverlapping(vals.as_ptr(), data, vals.len());
            Guarded {
                base,
                size,
                data,
                len: vals.len(),
            }
        }
    }

    fn slice(&self) -> &[f32] {
        // SAFETY: `len` floats at `data`, written in `new`, mapped until
        // `drop`.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base, self.size) };
    }
}

/// The kernels that read A in place read exactly its `m` rows of `k`
/// (the last row panel's edge kernel no row past `m`, no kernel a column
/// past `k`): A and B end at an inaccessible page, so one float too far
/// faults; and the bits are those of the packed path.
#[test]
fn reads_stay_inside_the_operands() {
    let mut rng = Rng(41);
    for (m, n, k, lda) in [
        (1usize, 40usize, 7usize, 7usize),
        (2, 32, 16, 16),
        (15, 33, 30, 31),
        (16, 16, 32, 384),
        (128, 64, 128, 128),
        (131, 20, 600, 600),
        (150, 40, 300, 300),
        (300, 33, 70, 71),
        (3, 161, 40, 40),
    ] {
        let a: Vec<f32> = (0..(m - 1) * lda + k).map(|_| rng.unit() - 0.5).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.unit() - 0.5).collect();
        let (ga, gb) = (Guarded::new(&a), Guarded::new(&b));
        let [packed, in_place] = [false, true].map(|in_place| {
            let path = Path {
                threads: 1,
                stream: true,
                in_place,
            };
            run(m, n, k, lda, ga.slice(), gb.slice(), path)
        });
        assert!(
            packed
                .iter()
                .zip(&in_place)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "m={m} n={n} k={k} lda={lda}"
        );
    }
}
