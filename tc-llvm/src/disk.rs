//! The persistent kernel cache: object code on disk, so a new process (a
//! server replica, a CLI run) links its kernels instead of compiling them
//! (issue #15; in the spirit of JAX's persistent compilation cache).
//!
//! Identity. An entry is the object code of one LLVM IR text for one host:
//! its identity is the IR text itself (which already spells out everything
//! the kernel computes — σ literals, dtypes, fast-math flags, the
//! `target-cpu` / `target-features` attributes) plus a header naming the
//! code generator (tc-llvm's version and source fingerprint, the LLVM
//! version, the helper-opcode tables, the pipeline
//! [`crate::host::PIPELINE`], the code model) and the host (triple, CPU
//! name, CPU features). An object made by another pipeline (the quick
//! tier, `crate::jit::Tier::Quick`; the GEMM micro-kernels',
//! [`crate::host::UNROLLED_PIPELINE`]) is stored under the IR text after a
//! line naming that pipeline and its code generation, so it is an entry of
//! its own. The file
//! name is a 128-bit hash of both, but a load compares the *whole* stored
//! header and IR with the wanted ones, so a hash collision, a file copied
//! from another machine, or an entry of another tc version is a miss, never
//! foreign code.
//!
//! Integrity. An entry ends with a checksum of everything before it; a
//! truncated or corrupted file fails it and is recompiled and replaced.
//! Writes go to a private temporary file in the same directory, then are
//! renamed into place, so concurrent writers (threads or processes) and
//! readers only ever see whole entries; the last rename wins, and every
//! writer wrote the same bytes' worth of meaning.
//!
//! Trust. The directory is trusted like any build cache: whoever can write
//! to it can run code in processes that use it (as with `~/.cache/jax` or
//! `~/.cargo`). The checks above stop accidents, not an attacker with write
//! access to the user's cache directory. A lookup reads only a regular file
//! of bounded size at an entry's name, opened without following a symbolic
//! link and without blocking: a FIFO, a link to /dev/zero, a directory or
//! an oversized file there is a miss, never a hang or an unbounded read.
//!
//! Configuration: `TC_KERNEL_CACHE` = a directory, or `off` / `0` to
//! disable; unset, `$XDG_CACHE_HOME/tc/kernels` or `~/.cache/tc/kernels`.
//! `TC_KERNEL_CACHE_MAX_MB` caps its size (default 1024): after a write
//! that exceeds it, the oldest entries are removed.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::SystemTime;

use tc_core::ir::UnaryOp;
use tc_core::Dtype;

const MAGIC: &[u8] = b"TC-KERNEL-CACHE-1\n";

/// The largest entry a lookup reads (also bounded by the store's cap): an
/// entry is one kernel module's object code and IR, megabytes at most.
const MAX_ENTRY_BYTES: u64 = 256 << 20;

use tc_fingerprint::Entry;

/// Counters of one store (for tests, stats and the operator).
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Entries found and returned.
    pub hits: AtomicU64,
    /// Lookups that found no entry.
    pub misses: AtomicU64,
    /// Entries present but refused: wrong header or IR (foreign, collided),
    /// a failed checksum (truncated, corrupted), or not a regular file of
    /// at most the cap (a FIFO, a symbolic link, a directory, a device).
    pub rejected: AtomicU64,
    /// Entries written.
    pub writes: AtomicU64,
}

/// A kernel cache directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    identity: String,
    max_bytes: u64,
    /// Bytes this process has written since it last listed the folder
    /// (`None`: not listed yet), so that a save lists the folder only
    /// when an eviction may be due ([`Store::save`]).
    unlisted: std::sync::Mutex<Option<u64>>,
    /// Its counters.
    pub stats: DiskStats,
}

/// The code generator and host part of every entry's identity.
///
/// The generator is named by its source fingerprint (every file of
/// tc-llvm's `src/`, hashed by `build.rs`), the LLVM it links, and the
/// tables whose indices the IR passes to runtime helpers as opcodes
/// ([`generator_tables`]): an object compiled by a different generator, a
/// different LLVM, or against reordered tables is never loaded.
pub fn host_identity() -> String {
    let h = crate::host::host();
    format!(
        "tc-llvm {} source {}\nLLVM {} {} object, large code model, static relocations, options {}\n{}\n{}\n{}\n{}\n",
        env!("CARGO_PKG_VERSION"),
        env!("TC_LLVM_SOURCE_FINGERPRINT"),
        llvm_version(),
        crate::host::PIPELINE,
        crate::host::LLVM_OPTIONS.join(" "),
        generator_tables(&Dtype::ALL, &UnaryOp::ALL),
        h.triple,
        h.cpu,
        h.features
    )
}

/// The helper-opcode tables as compiled code sees them: the IR names a
/// dtype or a unary op to a runtime helper by its index in these tables
/// (`crate::rt`), so their order is part of what an object means.
pub fn generator_tables(dtypes: &[Dtype], unary: &[UnaryOp]) -> String {
    format!("dtypes {dtypes:?} unary {unary:?}")
}

/// The linked LLVM's version, `major.minor.patch`.
pub fn llvm_version() -> String {
    #[cfg(feature = "llvm14")]
    {
        "14".to_string()
    }
    #[cfg(not(feature = "llvm14"))]
    {
        let (mut major, mut minor, mut patch) = (0u32, 0u32, 0u32);
        // SAFETY: LLVMGetVersion only writes the three integers through the
        // pointers, which point at live locals.
        unsafe { llvm_sys::core::LLVMGetVersion(&mut major, &mut minor, &mut patch) };
        format!("{major}.{minor}.{patch}")
    }
}

fn hash128(parts: &[&[u8]]) -> u128 {
    let half = |seed: u8| {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        for p in parts {
            p.hash(&mut h);
        }
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl Store {
    /// The store the environment configures (see the module doc), created
    /// once per process; `None` when disabled or when no directory can be
    /// named or created.
    pub fn global() -> Option<&'static Store> {
        static GLOBAL: OnceLock<Option<Store>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let (dir, max_mb) = crate::ctx::kernel_cache();
                let dir = match dir {
                    Some(v) if v == "off" || v == "0" || v.is_empty() => return None,
                    Some(v) => PathBuf::from(v),
                    None => std::env::var_os("XDG_CACHE_HOME")
                        .map(PathBuf::from)
                        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?
                        .join("tc")
                        .join("kernels"),
                };
                let mb = max_mb.unwrap_or(1024);
                Store::open(&dir, host_identity(), mb.saturating_mul(1 << 20))
            })
            .as_ref()
    }

    /// The folder this store reads and writes.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A store in `dir` (created if missing) whose entries carry
    /// `identity` (normally [`host_identity`]); `None` if `dir` cannot be
    /// created.
    pub fn open(dir: &Path, identity: String, max_bytes: u64) -> Option<Store> {
        fs::create_dir_all(dir).ok()?;
        Some(Store {
            dir: dir.to_path_buf(),
            identity,
            max_bytes,
            unlisted: std::sync::Mutex::new(None),
            stats: DiskStats::default(),
        })
    }

    /// The file an entry for `ir` lives in.
    pub fn path_of(&self, ir: &str) -> PathBuf {
        let h = hash128(&[self.identity.as_bytes(), ir.as_bytes()]);
        self.dir.join(format!("{h:032x}.tck"))
    }

    fn encode(&self, ir: &str, object: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        for part in [self.identity.as_bytes(), ir.as_bytes(), object] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// The object code stored for `ir` by this identity, if a whole,
    /// matching entry exists.
    pub fn load(&self, ir: &str) -> Option<Vec<u8>> {
        let bytes = match self.read_entry(&self.path_of(ir)) {
            Entry::Absent => {
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Entry::Refused => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Entry::Read(bytes) => bytes,
        };
        match self.decode(&bytes, ir) {
            Some(obj) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(obj)
            }
            None => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The bytes at an entry's name, if it is a regular file no larger than
    /// an entry can be. Whatever else sits there is refused without being
    /// read, and without blocking: a FIFO (an open for reading would wait
    /// for a writer: `O_NONBLOCK`), a symbolic link, which could name
    /// /dev/zero or any file (`O_NOFOLLOW`), a directory or a device (the
    /// opened descriptor's own metadata, so nothing can be swapped in
    /// between the check and the read), a file over the cap (an entry that
    /// size is never kept: eviction removes it). The read itself is bounded
    /// too, should the file grow meanwhile.
    fn read_entry(&self, path: &Path) -> Entry {
        tc_fingerprint::read_entry(path, self.max_bytes.min(MAX_ENTRY_BYTES))
    }

    /// The object of a whole entry whose identity and IR equal ours.
    fn decode(&self, bytes: &[u8], ir: &str) -> Option<Vec<u8>> {
        let body_len = bytes.len().checked_sub(8)?;
        let (body, sum) = bytes.split_at(body_len);
        if checksum(body) != u64::from_le_bytes(sum.try_into().ok()?) {
            return None;
        }
        let mut rest = body.strip_prefix(MAGIC)?;
        let mut parts = Vec::with_capacity(3);
        for _ in 0..3 {
            let (len, tail) = rest.split_at_checked(8)?;
            let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
            let (part, tail) = tail.split_at_checked(len)?;
            parts.push(part);
            rest = tail;
        }
        let whole = rest.is_empty();
        (whole && parts[0] == self.identity.as_bytes() && parts[1] == ir.as_bytes())
            .then(|| parts[2].to_vec())
    }

    /// Store `object` as the code of `ir`. Failures (a full disk, a
    /// read-only directory) only mean the next process compiles again.
    pub fn save(&self, ir: &str, object: &[u8]) {
        let bytes = self.encode(ir, object);
        if tc_fingerprint::write_entry(&self.dir, &self.path_of(ir), &bytes).is_ok() {
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
            if self.eviction_due(bytes.len() as u64) {
                self.evict();
            }
        }
    }

    /// Whether to list the folder and evict after a save of `len` bytes:
    /// on this process's first save, and then once it has written a
    /// sixteenth of the cap since the last listing (other processes write
    /// too; each lists the folder on its own schedule). Listing it after
    /// every save (a `stat` per entry) had made a cold start's saves
    /// quadratic in the folder's size: 4.5 % of a SmolLM2 run's samples.
    fn eviction_due(&self, len: u64) -> bool {
        let mut unlisted = self.unlisted.lock().unwrap_or_else(|p| p.into_inner());
        let due = match *unlisted {
            None => true,
            Some(n) => n.saturating_add(len) > self.max_bytes / 16,
        };
        *unlisted = Some(if due { 0 } else { unlisted.unwrap_or(0) + len });
        due
    }

    /// Remove the oldest entries (and stale temporary files) until the
    /// directory is within its cap.
    fn evict(&self) {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut entries = Vec::new();
        let mut total = 0u64;
        for e in rd.flatten() {
            let (Ok(meta), name) = (e.metadata(), e.file_name()) else {
                continue;
            };
            let mtime = meta.modified().unwrap_or(now);
            let name = name.to_string_lossy();
            let old = now.duration_since(mtime).is_ok_and(|d| d.as_secs() > 3600);
            if name.starts_with(".tmp-") && old {
                let _ = fs::remove_file(e.path());
            } else if name.ends_with(".tck") {
                total = total.saturating_add(meta.len());
                entries.push((mtime, meta.len(), e.path()));
            }
        }
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(path).is_ok() {
                total -= len;
            }
        }
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    /// Reordering either opcode table changes the identity, so an object
    /// that passes opcodes by index is never linked against other tables.
    #[test]
    fn reordered_helper_tables_change_the_identity() {
        let base = generator_tables(&Dtype::ALL, &UnaryOp::ALL);
        let mut d = Dtype::ALL;
        d.swap(0, 1);
        assert_ne!(generator_tables(&d, &UnaryOp::ALL), base);
        let mut u = UnaryOp::ALL;
        u.swap(2, 5);
        assert_ne!(generator_tables(&Dtype::ALL, &u), base);
        assert!(host_identity().contains(&base));
    }

    /// The fingerprint built into the crate is the one of the source it was
    /// built from: every file under `src/` counts, and one changed byte
    /// anywhere changes it.
    #[test]
    fn the_identity_names_the_generator_source() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let files = tc_fingerprint::source_files(&src).unwrap();
        assert!(files.iter().any(|(p, _)| p == "codegen/kernels.rs"));
        let built = env!("TC_LLVM_SOURCE_FINGERPRINT");
        assert_eq!(tc_fingerprint::fingerprint(&files), built);
        assert!(host_identity().contains(built));
        for i in [0, files.len() / 2, files.len() - 1] {
            let mut changed = files.clone();
            let last = changed[i].1.len().saturating_sub(1);
            match changed[i].1.get_mut(last) {
                Some(b) => *b ^= 1,
                None => changed[i].1.push(b' '),
            }
            assert_ne!(
                tc_fingerprint::fingerprint(&changed),
                built,
                "{}",
                files[i].0
            );
        }
        assert!(host_identity().contains(&format!("LLVM {}", llvm_version())));
    }
}
