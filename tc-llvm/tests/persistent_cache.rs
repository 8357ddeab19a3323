//! The persistent kernel cache (`tc_llvm::disk`, issue #15): a second
//! compile of the same IR links stored object code instead of running LLVM;
//! a corrupted, truncated, foreign or collided entry is refused and
//! recompiled, never loaded; concurrent writers leave one whole entry; the
//! size cap evicts the oldest entries; a quick-tier object is an entry of
//! its own, loaded only where the optimized tier's is missing.
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use tc_llvm::disk::{host_identity, Store};
use tc_llvm::jit::{Build, JitModule, Tier};

/// A fresh directory per test (removed when the guard drops).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tc-kc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `f(x) = x * k + 1`, a distinct module per `k`.
fn ir(k: i64) -> String {
    format!("define i64 @f(i64 %x) {{\n  %y = mul i64 %x, {k}\n  %z = add i64 %y, 1\n  ret i64 %z\n}}\n")
}

fn store(dir: &TempDir) -> Store {
    Store::open(&dir.0, host_identity(), 1 << 30).expect("store")
}

/// Compile (or load) `ir(k)` and call `f(x)`.
fn run(k: i64, x: i64, store: &Store) -> (i64, bool) {
    let m = JitModule::compile_with(&ir(k), &[], &["f".to_string()], Some(store)).expect("compile");
    let a = m.addr("f").expect("export");
    // SAFETY: `a` is the address of `f`, defined by `ir` as
    // `i64 (i64)`, the C ABI of `extern "C" fn(i64) -> i64`; `m` (which
    // owns the code) outlives the call.
    let f = unsafe { std::mem::transmute::<usize, extern "C" fn(i64) -> i64>(a) };
    (f(x), m.from_disk)
}

fn entries(dir: &TempDir) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_second_compile_links_the_stored_object() {
    let d = TempDir::new("hit");
    let s = store(&d);
    assert_eq!(run(3, 5, &s), (16, false));
    assert_eq!(s.stats.writes.load(Ordering::Relaxed), 1);
    // A new store on the same directory stands for a new process.
    let s2 = store(&d);
    assert_eq!(run(3, 5, &s2), (16, true));
    assert_eq!(s2.stats.hits.load(Ordering::Relaxed), 1);
    assert_eq!(run(4, 5, &s2), (21, false), "other IR, other entry");
}

fn corrupt_and_check(name: &str, damage: impl Fn(&mut Vec<u8>)) {
    let d = TempDir::new(name);
    let s = store(&d);
    run(7, 2, &s);
    let path = s.path_of(&ir(7));
    let mut bytes = std::fs::read(&path).unwrap();
    damage(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let s2 = store(&d);
    assert_eq!(
        run(7, 2, &s2),
        (15, false),
        "{name}: recompiled, right answer"
    );
    assert_eq!(s2.stats.rejected.load(Ordering::Relaxed), 1, "{name}");
    // The damaged entry was replaced by a good one.
    assert_eq!(run(7, 2, &store(&d)), (15, true), "{name}");
}

#[test]
fn a_corrupted_entry_is_refused_and_replaced() {
    corrupt_and_check("flip", |b| {
        let mid = b.len() - 40;
        b[mid] ^= 0x10;
    });
    corrupt_and_check("truncate", |b| b.truncate(b.len() / 2));
    corrupt_and_check("empty", |b| b.clear());
    corrupt_and_check("extended", |b| b.extend_from_slice(&[0; 16]));
}

#[test]
fn an_entry_of_another_host_or_ir_is_never_loaded() {
    let d = TempDir::new("foreign");
    let here = store(&d);
    run(9, 1, &here);
    // The same IR compiled for a CPU with other features: copied to the
    // name this host would look under, it is refused by the header check.
    let other = Store::open(&d.0, host_identity().replace('+', "-"), 1 << 30).unwrap();
    std::fs::copy(here.path_of(&ir(9)), other.path_of(&ir(9))).unwrap();
    assert_eq!(run(9, 1, &other), (10, false));
    assert_eq!(other.stats.rejected.load(Ordering::Relaxed), 1);
    // Another IR's entry under this IR's name (a hash collision): refused.
    std::fs::copy(here.path_of(&ir(9)), here.path_of(&ir(10))).unwrap();
    assert_eq!(run(10, 1, &here), (11, false));
    assert_eq!(here.stats.rejected.load(Ordering::Relaxed), 1);
}

#[test]
fn concurrent_writers_leave_one_whole_entry() {
    let d = TempDir::new("race");
    std::thread::scope(|sc| {
        for t in 0..8 {
            let d = &d;
            sc.spawn(move || {
                // Each thread its own store: as separate processes would.
                let s = store(d);
                assert_eq!(run(11, t, &s).0, 11 * t + 1);
            });
        }
    });
    let names = entries(&d);
    assert_eq!(names.len(), 1, "one entry, no temporary files: {names:?}");
    assert_eq!(run(11, 3, &store(&d)), (34, true));
}

#[test]
fn the_size_cap_evicts_the_oldest_entries() {
    let d = TempDir::new("cap");
    let one = {
        let s = store(&d);
        run(1, 0, &s);
        std::fs::metadata(s.path_of(&ir(1))).unwrap().len()
    };
    let s = Store::open(&d.0, host_identity(), 2 * one + one / 2).unwrap();
    for k in 2..=4 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        run(k, 0, &s);
    }
    assert_eq!(entries(&d).len(), 2, "{:?}", entries(&d));
    assert!(!s.path_of(&ir(1)).exists() && !s.path_of(&ir(2)).exists());
    assert!(s.path_of(&ir(4)).exists());
}

/// A quick build stores its object under an entry of its own: a later
/// quick build loads it, an optimized build never does (it compiles and
/// stores the optimized entry), and from then on a quick build loads the
/// optimized one; an unrolled kernel's pipeline has entries of its own
/// too. Every module computes `f` alike.
#[test]
fn quick_tier_entries_are_their_own() {
    let d = TempDir::new("tiers");
    let s = store(&d);
    let build = |b: Build| {
        let m = JitModule::compile_built(&ir(9), &[], &["f".to_string()], Some(&s), b)
            .expect("compile");
        let a = m.addr("f").expect("export");
        // SAFETY: as in `run`: `f` is `i64 (i64)`, and `m` outlives the call.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(i64) -> i64>(a) };
        assert_eq!(f(5), 46);
        (m.from_disk, m.quick)
    };
    let quick = Build::Now(Tier::Quick);
    assert_eq!(build(quick), (false, true), "compiled quick");
    assert_eq!(build(quick), (true, true), "the quick entry loaded");
    assert_eq!(entries(&d).len(), 1);
    assert_eq!(
        build(Build::Now(Tier::Optimized)),
        (false, false),
        "not the quick entry"
    );
    assert_eq!(entries(&d).len(), 2);
    assert_eq!(build(quick), (true, false), "the optimized entry preferred");
    assert_eq!(build(Build::Background), (true, false));
    assert_eq!(s.stats.writes.load(Ordering::Relaxed), 2);
    // Another pipeline (the GEMM micro-kernels'): another entry.
    assert_eq!(build(Build::Unrolled), (false, false), "not the O3 entry");
    assert_eq!(build(Build::Unrolled), (true, false));
    assert_eq!(entries(&d).len(), 3);
}
