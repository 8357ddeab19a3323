//! Source fingerprints for tc's build scripts: an FNV-1a 128 over every
//! `.rs` file under a directory, in sorted path order, each as its relative
//! path, a 0 byte, its length and its bytes. tc-core's proof cache and
//! tc-llvm's kernel cache put their crate's fingerprint in their entries'
//! identity, so an entry made by other code is never trusted.

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
