//! Fingerprints tc-core's own source, so the persistent proof cache's
//! identity changes whenever the checker or the solver encoding changes —
//! not only when the crate version does (see `src/solver/disk.rs`).

use std::path::Path;

/// Every `.rs` file under `dir`, as (path relative to `dir` with `/`
/// separators, contents).
fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
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

fn main() {
    // Read at run time: a build-script binary reused for a checkout at
    // another path must hash that checkout's sources.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = Path::new(&manifest).join("src");
    let mut files = Vec::new();
    walk(&src, &src, &mut files).expect("tc-core build script: read src/");
    files.sort();
    // FNV-1a 128 over each file's path, a 0 byte, its length and its bytes.
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for (path, bytes) in &files {
        let len = (bytes.len() as u64).to_le_bytes();
        for b in path
            .bytes()
            .chain([0])
            .chain(len)
            .chain(bytes.iter().copied())
        {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000000001000000000000000000013b);
        }
    }
    println!("cargo:rustc-env=TC_CORE_SOURCE_FINGERPRINT={h:032x}");
    // A directory makes cargo rerun this script when any file below it changes.
    println!("cargo:rerun-if-changed=src");
}
