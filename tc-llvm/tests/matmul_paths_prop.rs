//! Every way the f32 GEMM may compute one product gives the same bits
//! (issue #15): B packed per call, one panel or several per visit of its
//! rows (`matmul::pack_b_panels`); B kept packed (`matmul::PackedB`, packed
//! on the pool or not) and read by the streamed, blocked, swept or `gemv`
//! paths; A packed or read in place; one thread or the pool. Random shapes
//! (ragged row and column panels, one to three K-blocks), B row-major or
//! transposed with padded strides, A with a padded row stride; then two
//! fixed products of one row block with K past one group of packed A
//! (`matmul::streamed`'s groups, packed on the pool). Each
//! result also within the f32 bound of an f64 reference, so the paths
//! cannot agree on a wrong answer. A fixed seed keeps CI deterministic.
//!
//! The GEMM's path switches are process-wide: this binary holds this one
//! test.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tc_core::Dtype;
use tc_llvm::kernels::matmul::{
    matmul_strided, set_a_in_place, set_stream_b, Lookup, PackCache, PackedB, ViewKey, KC,
};

/// A pack cache that keeps every packing it is offered: the first call
/// packs B whole (`Lookup::Pack`), the later ones read it (`Hit`).
#[derive(Default)]
struct Keep(Mutex<HashMap<ViewKey, Arc<PackedB>>>);

impl PackCache for Keep {
    fn get(&self, key: &ViewKey) -> Lookup {
        match self.0.lock().unwrap().get(key) {
            Some(p) => Lookup::Hit(p.clone()),
            None => Lookup::Pack,
        }
    }

    fn put(&self, key: ViewKey, packed: Arc<PackedB>) {
        self.0.lock().unwrap().insert(key, packed);
    }
}

/// One product: `a` is `m × k` at row stride `lda`; B is `k × n` at
/// strides `(rs, cs)` in `b`; both drawn from `seed`.
#[derive(Clone)]
struct Case {
    seed: u64,
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    rs: usize,
    cs: usize,
    a: Vec<f32>,
    b: Vec<f32>,
}

fn case() -> impl Strategy<Value = Case> {
    let dims = (1usize..=40, 1usize..=200, 1usize..=2 * KC + 40);
    let pads = (0usize..3, 0usize..20, any::<bool>(), any::<u64>());
    (dims, pads).prop_map(|(dims, pads)| make(dims, pads))
}

/// The case of these dims, paddings, layout and seed.
fn make(
    (m, n, k): (usize, usize, usize),
    (apad, bpad, transposed, seed): (usize, usize, bool, u64),
) -> Case {
    let lda = k + apad;
    let (rs, cs) = if transposed {
        (1, k + bpad)
    } else {
        (n + bpad, 1)
    };
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let a = (0..m * lda).map(|_| next()).collect();
    let b = (0..(k - 1) * rs + (n - 1) * cs + 1)
        .map(|_| next())
        .collect();
    Case {
        seed,
        m,
        n,
        k,
        lda,
        rs,
        cs,
        a,
        b,
    }
}

impl std::fmt::Debug for Case {
    /// The shape, strides and seed (the floats follow from the seed).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Case {
            seed,
            m,
            n,
            k,
            lda,
            rs,
            cs,
            ..
        } = self;
        write!(
            f,
            "{m} × {k} (lda {lda}) · {k} × {n} (rs {rs}, cs {cs}), seed {seed:#x}"
        )
    }
}

/// The product by `matmul_strided`, with the path switches as given.
fn run(c: &Case, threads: usize, stream: bool, in_place: bool, cache: Option<&Keep>) -> Vec<f32> {
    set_stream_b(stream);
    set_a_in_place(in_place);
    let mut out = vec![f32::NAN; c.m * c.n];
    let st_a = [c.lda as isize, 1];
    let st_b = [c.rs as isize, c.cs as isize];
    // SAFETY: A's `m` rows of `k` at stride `lda` lie in `a`, B's
    // `(i, j)`, `i < k`, `j < n`, at `i·rs + j·cs < b.len()`; `out` holds
    // the `m·n` result, apart from both.
    let r = unsafe {
        matmul_strided(
            Dtype::F32,
            c.a.as_ptr().cast(),
            &st_a,
            c.b.as_ptr().cast(),
            &st_b,
            out.as_mut_ptr().cast(),
            &[c.m, c.k],
            &[c.k, c.n],
            &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
            cache.map(|k| k as &dyn PackCache),
        )
    };
    set_stream_b(true);
    set_a_in_place(true);
    r.unwrap();
    out
}

/// `|got − exact| ≤ 2(k + 2)·2⁻²⁴·Σ|a·b|` per element.
fn near_reference(c: &Case, got: &[f32]) -> Result<(), String> {
    for i in 0..c.m {
        for j in 0..c.n {
            let (mut exact, mut mag) = (0f64, 0f64);
            for p in 0..c.k {
                let t = c.a[i * c.lda + p] as f64 * c.b[p * c.rs + j * c.cs] as f64;
                exact += t;
                mag += t.abs();
            }
            let tol = 2.0 * (c.k as f64 + 2.0) * mag / 16777216.0 + 1e-30;
            let d = (got[i * c.n + j] as f64 - exact).abs();
            if d > tol {
                return Err(format!("({i}, {j}): {} vs {exact}", got[i * c.n + j]));
            }
        }
    }
    Ok(())
}

fn same_bits(x: &[f32], y: &[f32]) -> bool {
    x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits())
}

#[test]
fn every_gemm_path_gives_the_same_bits() {
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 48,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[0x15; 32]),
    );
    runner.run(&case(), |c| check(&c)).unwrap();
    // One row block at its largest with K past one group of packed A
    // (`matmul::streamed` splits K into groups of at most 2 MiB of packed
    // A, packed on the pool when large): groups, a short last K-block and
    // a ragged last panel, which the random cases (≤ 40 rows, K ≤ 2 KC +
    // 40) never reach.
    for (dims, pads) in [
        ((140, 70, 8 * KC + 100), (1, 3, false, 0x5eed)),
        ((128, 96, 6 * KC + 7), (0, 5, true, 0xfeed)),
    ] {
        let c = make(dims, pads);
        check(&c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    }
}

/// Every path of `c` against the first, and the first against the
/// reference.
fn check(c: &Case) -> Result<(), TestCaseError> {
    let base = run(c, 1, true, false, None);
    near_reference(c, &base).map_err(TestCaseError::fail)?;
    for threads in [1, 0] {
        for (stream, in_place) in [(true, true), (true, false), (false, true)] {
            let per_call = run(c, threads, stream, in_place, None);
            prop_assert!(
                same_bits(&per_call, &base),
                "per call, threads={threads} stream={stream} in_place={in_place}"
            );
        }
        let keep = Keep::default();
        let first = run(c, threads, true, true, Some(&keep));
        let kept = run(c, threads, true, true, Some(&keep));
        prop_assert!(same_bits(&first, &base), "packing call, threads={threads}");
        prop_assert!(same_bits(&kept, &base), "kept packing, threads={threads}");
    }
    Ok(())
}
