//! What tc's on-disk caches (tc-core's proof cache, tc-llvm's kernel
//! cache) share:
//! - source fingerprints for their build scripts: an FNV-1a 128 over every
//!   `.rs` file under a directory, in sorted path order, each as its
//!   relative path, a 0 byte, its length and its bytes; each cache puts its
//!   crate's fingerprint in its entries' identity, so an entry made by other
//!   code is never trusted;
//! - [`emit_source_fingerprint`], their build scripts' one job;
//! - [`read_entry`], the one way they read an entry: whatever sits at an
//!   entry's name (a FIFO, a link to /dev/zero, a directory, a huge file)
//!   is refused, never waited on or read whole;
//! - [`write_entry`], the one way they write one: whole or not at all.

/// Every `.rs` file under `dir`, as (path relative to `dir` with `/`
/// separators, contents), sorted by path.
pub fn source_files(dir: &std::path::Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        out: &mut Vec<(String, Vec<u8>)>,
    ) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push((rel.join("/"), std::fs::read(&path)?));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// A build script's job for a crate whose on-disk cache keys its entries
/// by the crate's own code: the fingerprint of its `src/` as the
/// compile-time variable `var`, and a rerun whenever a file below `src/`
/// changes.
pub fn emit_source_fingerprint(var: &str) {
    // Read at run time: a build-script binary reused for a checkout at
    // another path must hash that checkout's sources.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = std::path::Path::new(&manifest).join("src");
    let h = source_fingerprint(&src)
        .unwrap_or_else(|e| panic!("build script: read {}: {e}", src.display()));
    println!("cargo:rustc-env={var}={h}");
    // A directory makes cargo rerun the script when any file below it changes.
    println!("cargo:rerun-if-changed=src");
}

/// Writes `bytes` as the entry `dest`: into a fresh temporary file of `dir`
/// (`.tmp-<pid>-<n>`; `create_new`, so never through a link or into what
/// already sits there), then renamed onto `dest`, so that concurrent
/// readers and writers (rustc processes, threads) see whole entries only.
/// On failure the temporary file is removed; callers ignore the error (a
/// cache only ever saves work).
pub fn write_entry(
    dir: &std::path::Path,
    dest: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, dest));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The fingerprint of every `.rs` file under `dir`.
pub fn source_fingerprint(dir: &std::path::Path) -> std::io::Result<String> {
    Ok(fingerprint(&source_files(dir)?))
}

/// FNV-1a 128 of the files, as 32 hex digits.
pub fn fingerprint(files: &[(String, Vec<u8>)]) -> String {
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u128::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    for (path, bytes) in files {
        eat(path.as_bytes());
        eat(&[0]);
        eat(&(bytes.len() as u64).to_le_bytes());
        eat(bytes);
    }
    format!("{h:032x}")
}

/// What a cache lookup found at an entry's name.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing.
    Absent,
    /// Something that is not an entry: not a regular file, a symbolic
    /// link, or larger than the limit.
    Refused,
    /// A regular file's bytes, to be decoded and verified by the cache.
    Read(Vec<u8>),
}

/// Reads the entry at `path`, refusing without blocking a symbolic link
/// (`O_NOFOLLOW`: a link to /dev/zero or to any file), a FIFO or device
/// (`O_NONBLOCK`, then the opened descriptor's own metadata, so nothing can
/// be swapped in between the check and the read), a directory, and a file
/// over `limit` bytes. The read itself is bounded too, should the file grow
/// meanwhile.
pub fn read_entry(path: &std::path::Path, limit: u64) -> Entry {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Absent,
        // A symbolic link (ELOOP under O_NOFOLLOW), no permission, …
        Err(_) => return Entry::Refused,
    };
    let Ok(meta) = file.metadata() else {
        return Entry::Refused;
    };
    if !meta.is_file() || meta.len() > limit {
        return Entry::Refused;
    }
    let mut bytes = Vec::new();
    // At most `limit + 1` bytes: one more than allowed means it grew.
    match file.take(limit.saturating_add(1)).read_to_end(&mut bytes) {
        Ok(n) if n as u64 <= limit => Entry::Read(bytes),
        _ => Entry::Refused,
    }
}
