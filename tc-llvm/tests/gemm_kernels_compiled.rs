//! A product compiles only the GEMM kernels it runs (a cold start without
//! a kernel cache pays about 20 ms per kernel): one that reads A in place
//! compiles its in-place kernel and nothing else; one that packs A, the
//! host kernel and the edge kernel of its last row panel. Counted as the
//! lookups of a fresh persistent cache, one per module compiled; alone in
//! its binary, so no other test has compiled a kernel before.
use std::sync::atomic::Ordering;

use tc_llvm::disk::Store;
use tc_llvm::kernels::matmul::{sgemm, View};

/// `m × n × k` with A's rows `lda` floats apart; returns C.
fn product(m: usize, n: usize, k: usize, lda: usize) -> Vec<f32> {
    let a: Vec<f32> = (0..m * lda).map(|i| (i % 7) as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32).collect();
    let mut c = vec![0f32; m * n];
    // SAFETY: A holds `m` rows of `lda ≥ k` floats, B `k × n`, C `m × n`,
    // all live and disjoint for the call.
    unsafe {
        sgemm(
            m,
            n,
            k,
            View::new(a.as_ptr(), lda, 1),
            View::new(b.as_ptr(), n, 1),
            c.as_mut_ptr(),
            &tc_llvm::ctx::ExecCtx::on_this_thread(1),
        )
    }
    .expect("sgemm");
    c
}

fn compiled(store: &Store) -> u64 {
    store.stats.misses.load(Ordering::Relaxed)
}

#[test]
fn a_product_compiles_only_the_kernels_it_runs() {
    // The counts are those of a 14-row host kernel (AVX-512).
    if !tc_llvm::jit::host().has_avx512() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tc-gemm-kernels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("TC_KERNEL_CACHE", &dir);
    std::env::remove_var("TC_MM_IN_PLACE");
    let store = Store::global().expect("a kernel cache in a temporary directory");
    assert_eq!(compiled(store), 0);
    // MiniLM's batch-1 product: ten rows, read in place by a 10-row kernel.
    let c = product(10, 384, 384, 384);
    assert_eq!(compiled(store), 1, "10 × 384 × 384, A in place");
    // Rows 4 KiB apart share one L1 set: A is packed, for the 14-row kernel
    // and a 6-row edge.
    let packed = product(20, 384, 384, 1024);
    assert_eq!(compiled(store), 3, "20 × 384 × 384, A packed");
    // The same kernels again: nothing new.
    product(20, 384, 384, 1024);
    assert_eq!(compiled(store), 3);
    // What they computed: row 0 of A is the same in both products.
    assert_eq!(c[..384], packed[..384]);
    let _ = std::fs::remove_dir_all(&dir);
}
