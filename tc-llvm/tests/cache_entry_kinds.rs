//! The persistent kernel cache reads only a regular file of bounded size at
//! an entry's name: a FIFO (which blocks an open for reading until a writer
//! comes), a symbolic link (to a good entry, or to a device that never ends
//! such as /dev/zero), a directory, or a file larger than the cache's cap is
//! a miss, answered at once. Each lookup runs in a thread with a deadline,
//! so a lookup that hangs fails the test instead of hanging it.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use tc_llvm::disk::{host_identity, Store};

const IR: &str = "define i64 @f(i64 %x) {\n  ret i64 %x\n}\n";
const OBJECT: &[u8] = b"not object code, but the store does not look inside";

/// A fresh directory per test (removed when the guard drops).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tc-kinds-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn store(dir: &Path, max_bytes: u64) -> Store {
    Store::open(dir, host_identity(), max_bytes).expect("store")
}

/// `load(IR)` on a fresh store over `dir`, within 10 s: `(found, rejected)`.
fn lookup(dir: &Path, max_bytes: u64) -> (bool, u64) {
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let s = store(&dir, max_bytes);
        let found = s.load(IR).is_some();
        let _ = tx.send((found, s.stats.rejected.load(Ordering::Relaxed)));
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the lookup did not return within 10 s (it hangs)")
}

/// A good entry's bytes, written by `save` into a scratch store.
fn good_entry() -> Vec<u8> {
    let d = TempDir::new("good");
    let s = store(&d.0, 1 << 30);
    s.save(IR, OBJECT);
    assert_eq!(s.load(IR).as_deref(), Some(OBJECT));
    std::fs::read(s.path_of(IR)).unwrap()
}

#[test]
fn a_fifo_at_the_entry_name_is_a_miss_not_a_hang() {
    let d = TempDir::new("fifo");
    let path = store(&d.0, 1 << 30).path_of(IR);
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    assert_eq!(lookup(&d.0, 1 << 30), (false, 1));
}

#[test]
fn a_symlink_to_a_good_entry_is_not_followed() {
    let d = TempDir::new("link");
    let target = d.0.join("elsewhere");
    std::fs::write(&target, good_entry()).unwrap();
    let path = store(&d.0, 1 << 30).path_of(IR);
    std::os::unix::fs::symlink(&target, &path).unwrap();
    assert_eq!(lookup(&d.0, 1 << 30), (false, 1));
    // The same bytes as a regular file are a hit: the link alone is refused.
    std::fs::remove_file(&path).unwrap();
    std::fs::copy(&target, &path).unwrap();
    assert_eq!(lookup(&d.0, 1 << 30), (true, 0));
}

#[test]
fn a_symlink_to_dev_zero_is_a_miss_not_gigabytes() {
    let d = TempDir::new("zero");
    let path = store(&d.0, 1 << 30).path_of(IR);
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    assert_eq!(lookup(&d.0, 1 << 30), (false, 1));
}

#[test]
fn a_directory_at_the_entry_name_is_a_miss() {
    let d = TempDir::new("dir");
    let path = store(&d.0, 1 << 30).path_of(IR);
    std::fs::create_dir(&path).unwrap();
    assert_eq!(lookup(&d.0, 1 << 30), (false, 1));
}

#[test]
fn an_entry_larger_than_the_cap_is_a_miss_unread() {
    let d = TempDir::new("big");
    let entry = good_entry();
    let path = store(&d.0, 1 << 30).path_of(IR);
    std::fs::write(&path, &entry).unwrap();
    // Within the cap: a hit. Over a cap smaller than the entry (which
    // eviction would never have kept): refused without being read.
    assert_eq!(lookup(&d.0, 1 << 30), (true, 0));
    assert_eq!(lookup(&d.0, entry.len() as u64 - 1), (false, 1));
    // A sparse file far over any cap is refused by its size alone.
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(1 << 40).unwrap();
    drop(f);
    assert_eq!(lookup(&d.0, u64::MAX), (false, 1));
}

/// The cap holds: saves beyond it evict the oldest entries, the folder
/// listed on a store's first save and then after every sixteenth of the
/// cap written (so it exceeds the cap by at most that much and one entry),
/// and a store opened on an over-full folder evicts on its first save.
#[test]
fn saves_keep_the_folder_within_its_cap() {
    let d = TempDir::new("cap");
    let cap = 64 << 10;
    let object = vec![7u8; 4 << 10];
    let folder_bytes = || -> u64 {
        std::fs::read_dir(&d.0)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tck"))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    };
    let entry = {
        let s = store(&d.0, cap);
        for i in 0..40 {
            s.save(&format!("{IR}; {i}"), &object);
            assert!(
                folder_bytes() <= cap + cap / 16 + 2 * object.len() as u64,
                "after save {i}: {} bytes",
                folder_bytes()
            );
        }
        std::fs::metadata(s.path_of(&format!("{IR}; 39")))
            .unwrap()
            .len()
    };
    // Fill past the cap with a large cap, then reopen with the small one.
    let big = store(&d.0, 1 << 30);
    for i in 40..80 {
        big.save(&format!("{IR}; {i}"), &object);
    }
    assert!(folder_bytes() > cap + cap / 16 + entry);
    store(&d.0, cap).save(&format!("{IR}; 80"), &object);
    assert!(
        folder_bytes() <= cap,
        "{} bytes after the first save",
        folder_bytes()
    );
}
