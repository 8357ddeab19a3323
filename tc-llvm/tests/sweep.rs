//! Products of at most eight rows against a weight read where it lies
//! (`tc_llvm::kernels::sweep`, issue #15: a decoder's step and a short prompt, no
//! packing) give the bits of the tile path (`sgemm`, which packs) on the
//! same views. Over both layouts a weight can have (rows contiguous:
//! `[in, out]`; columns contiguous: a transposed `[out, in]`), row strides
//! wider than the row, every row count 1..=8, a last column chunk or group
//! short of 16, one and several K-blocks (C accumulated across them),
//! signed zeros, infinities and NaNs (a NaN's payload may differ), one
//! thread and the columns split across two inside a session; and, through
//! the cache of kept packings, the first call (swept), the second (packed
//! and kept) and the third (the kept packing) alike.

use proptest::prelude::*;
use tc_core::Dtype;
use tc_llvm::kernels::matmul::{matmul_strided, sgemm, View, KC};
use tc_runtime::Tensor;

/// Values with the specials every few elements when `specials`.
fn values(seed: u64, len: usize, specials: bool) -> Vec<f32> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match (specials, s % 97) {
                (true, 0) => f32::NAN,
                (true, 1) => -0.0,
                (true, 2) => f32::INFINITY,
                (true, 3) => -1e30,
                _ => ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0,
            }
        })
        .collect()
}

/// A `k × n` weight: rows contiguous (`[k, ld]`, `ld ≥ n`) or, when
/// `cols`, columns contiguous (`[n, ld]`, `ld ≥ k`); its strides.
struct Weight {
    data: Tensor,
    st: [isize; 2],
}

fn weight(k: usize, n: usize, pad: usize, cols: bool, seed: u64) -> Weight {
    let (outer, ld) = if cols { (n, k + pad) } else { (k, n + pad) };
    let data = Tensor::from_vec(
        &[outer * ld],
        values(seed, outer * ld, seed.is_multiple_of(3)),
    )
    .unwrap();
    let st = if cols {
        [1, ld as isize]
    } else {
        [ld as isize, 1]
    };
    Weight { data, st }
}

/// `x · w` by the JIT's matmul entry (`matmul_strided`, which sweeps these
/// products), with `w`'s kept packings when `keep`.
fn product(
    x: &[f32],
    (m, k, n): (usize, usize, usize),
    w: &Weight,
    threads: usize,
    keep: bool,
) -> Vec<f32> {
    let mut c = vec![f32::NAN; m * n];
    let owner = tc_llvm::kernels::prepack::Owner(&w.data);
    let cache: Option<&dyn tc_llvm::kernels::matmul::PackCache> =
        if keep { Some(&owner) } else { None };
    let b = w.data.as_slice::<f32>().unwrap();
    // SAFETY: `x` holds `m × k` row-major; `w`'s strides address only its
    // own elements (`k × n` inside `[outer, ld]`); `c` holds `m × n`.
    unsafe {
        matmul_strided(
            Dtype::F32,
            x.as_ptr().cast(),
            &[k as isize, 1],
            b.as_ptr().cast(),
            &w.st,
            c.as_mut_ptr().cast(),
            &[m, k],
            &[k, n],
            &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
            cache,
        )
        .unwrap();
    }
    c
}

/// The tile path on the same views.
fn tiled(x: &[f32], (m, k, n): (usize, usize, usize), w: &Weight) -> Vec<f32> {
    let mut c = vec![f32::NAN; m * n];
    let b = w.data.as_slice::<f32>().unwrap();
    // SAFETY: as in `product`.
    unsafe {
        sgemm(
            m,
            n,
            k,
            View::new(x.as_ptr(), k, 1),
            View::new(b.as_ptr(), w.st[0] as usize, w.st[1] as usize),
            c.as_mut_ptr(),
            &tc_llvm::ctx::ExecCtx::on_this_thread(1),
        )
        .unwrap();
    }
    c
}

fn same(what: &str, a: &[f32], b: &[f32]) {
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        assert!(
            p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
            "{what}: element {i}: {p:?} vs the tile path's {q:?}"
        );
    }
}

/// `x` (`[bt, m, k]`, contiguous) times the batch of `k × n` B's that `b`
/// addresses with strides `st_b`, by `matmul_strided` on `threads`.
///
/// # Safety
/// `b` with strides `st_b` must address readable floats over `[bt, k, n]`.
// SAFETY: (contract) met by its callers, which pass B's they own.
unsafe fn batched(
    x: &[f32],
    (bt, m, k, n): (usize, usize, usize, usize),
    b: *const f32,
    st_b: &[isize; 3],
    threads: usize,
) -> Vec<f32> {
    assert_eq!(x.len(), bt * m * k);
    let mut c = vec![f32::NAN; bt * m * n];
    // SAFETY: `x` is `[bt, m, k]` contiguous (asserted), B as the contract
    // says, `c` holds `[bt, m, n]`.
    unsafe {
        matmul_strided(
            Dtype::F32,
            x.as_ptr().cast(),
            &[(m * k) as isize, k as isize, 1],
            b.cast(),
            st_b,
            c.as_mut_ptr().cast(),
            &[bt, m, k],
            &[bt, k, n],
            &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
            None,
        )
        .unwrap();
    }
    c
}

fn check(m: usize, k: usize, n: usize, pad: usize, cols: bool, seed: u64) {
    let w = weight(k, n, pad, cols, seed);
    let x = values(seed ^ 0x9e37, m * k, seed.is_multiple_of(2));
    let want = tiled(&x, (m, k, n), &w);
    let what =
        format!("m = {m}, k = {k}, n = {n}, pad {pad}, columns contiguous: {cols}, seed {seed}");
    same(
        &format!("{what}, 1 thread"),
        &product(&x, (m, k, n), &w, 1, false),
        &want,
    );
    let split = tc_llvm::session(|| product(&x, (m, k, n), &w, 2, false));
    same(&format!("{what}, 2 threads"), &split, &want);
    // First call swept, second packed and kept, third from the kept packing.
    for call in 0..3 {
        same(
            &format!("{what}, kept, call {call}"),
            &product(&x, (m, k, n), &w, 1, true),
            &want,
        );
    }
}

#[test]
fn swept_products_give_the_tile_paths_bits() {
    for cols in [false, true] {
        for m in 1..=8 {
            for (k, n, pad) in [
                (1, 1, 0),
                (7, 15, 3),
                (16, 17, 0),
                (33, 130, 5),
                (KC, 64, 0),
                (KC + 1, 200, 1),
                (2 * KC + KC / 2 + 3, 47, 0),
            ] {
                check(m, k, n, pad, cols, (m * 1000 + k * 31 + n) as u64);
            }
        }
    }
}

/// Large enough that the columns split across two threads in a session
/// (a quarter MiB of weight), with a chunk wider than one accumulator
/// chunk at one row (8192 columns) and at eight (1024).
#[test]
fn split_and_chunked_sweeps_give_the_same_bits() {
    for cols in [false, true] {
        check(1, 40, 9000, 0, cols, 11);
        check(8, 300, 2100, 16, cols, 12);
    }
}

/// A batch whose B is shared (stride 0 over the batch) folds into the rows:
/// 2 × 3 rows swept as one 6-row product.
#[test]
fn a_folded_batch_is_swept_as_one_product() {
    let (bt, m, k, n) = (2, 3, 70, 50);
    let w = weight(k, n, 0, false, 5);
    let x = values(6, bt * m * k, false);
    let b = w.data.as_slice::<f32>().unwrap();
    // SAFETY: B `70 × 50` repeated over the batch by a zero stride.
    let c = unsafe { batched(&x, (bt, m, k, n), b.as_ptr(), &[0, w.st[0], w.st[1]], 1) };
    same("folded batch", &c, &tiled(&x, (bt * m, k, n), &w));
}

/// A batch whose items have B's of their own (an attention's key/value
/// heads: a few query rows against each head's cached keys, read as a
/// strided slice of a longer cache) sweeps each item: every item's bits
/// are the tile path's on its own views, in both of B's layouts, at one
/// thread and at two.
#[test]
fn an_unfolded_batch_sweeps_each_item() {
    let (bt, m, k, n, room) = (3, 3, 64, 50, 77);
    for cols in [false, true] {
        // Per item a `k × room` (or `room × k`) block, of which the first
        // `n` positions are read: the slice of a cache with room to grow.
        let w: Vec<Weight> = (0..bt)
            .map(|i| weight(k, room, 0, cols, 40 + i as u64))
            .collect();
        let mut all = Vec::new();
        for wi in &w {
            all.extend_from_slice(wi.data.as_slice::<f32>().unwrap());
        }
        let item = all.len() / bt;
        let st = [item as isize, w[0].st[0], w[0].st[1]];
        let x = values(7, bt * m * k, true);
        for threads in [1, 2] {
            // SAFETY: item `p` of B is the first `n` positions of `w[p]`'s
            // block at `p · item` (strides `st`), inside `all`.
            let run = || unsafe { batched(&x, (bt, m, k, n), all.as_ptr(), &st, threads) };
            let c = if threads == 1 {
                run()
            } else {
                tc_llvm::session(run)
            };
            for (p, wp) in w.iter().enumerate() {
                let want = tiled(&x[p * m * k..(p + 1) * m * k], (m, k, n), wp);
                same(
                    &format!("item {p}, columns contiguous: {cols}, {threads} threads"),
                    &c[p * m * n..(p + 1) * m * n],
                    &want,
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn swept_products_agree_bitwise(
        m in 1usize..=8,
        k in 1usize..1300,
        n in 1usize..300,
        pad in 0usize..20,
        cols in any::<bool>(),
        seed in any::<u64>(),
    ) {
        check(m, k, n, pad, cols, seed);
    }
}
