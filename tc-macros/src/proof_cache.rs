//! Where `#[tensor_fn]` keeps tc-core's persistent proof cache
//! (`tc-core/src/solver/disk.rs`): under the build's `target/`, like the
//! kernel cache's test setting, so `cargo clean` removes it and nothing is
//! written outside the build.
//!
//! A proc macro is not told the target directory: cargo sets `OUT_DIR` only
//! for crates with a build script and `CARGO_TARGET_DIR` only when the user
//! does. In order:
//! 1. `TC_PROOF_CACHE`: `off` (or `0`, or empty) disables the cache; any
//!    other value is the directory (relative to the compiler's working
//!    directory, which cargo sets to the workspace root).
//! 2. rustc's own `--out-dir` (the macro runs inside rustc, so its command
//!    line is this process's): the nearest ancestor holding cargo's
//!    `CACHEDIR.TAG` is the target directory.
//! 3. `CARGO_TARGET_DIR`.
//! 4. Walking up from `CARGO_MANIFEST_DIR` to a `target/` holding
//!    `CACHEDIR.TAG` (rust-analyzer's proc-macro server, whose command line
//!    is not rustc's).
//!
//! Otherwise the cache is off. The directory is `<target>/tc-proof-cache`.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SUBDIR: &str = "tc-proof-cache";

fn is_target(dir: &Path) -> bool {
    dir.join("CACHEDIR.TAG").is_file()
}

fn from_out_dir(args: &[String]) -> Option<PathBuf> {
    let out = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--out-dir" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--out-dir=").map(str::to_string)
        }
    })?;
    let out = std::fs::canonicalize(out).ok()?;
    out.ancestors()
        .find(|d| is_target(d))
        .map(Path::to_path_buf)
}

/// The directory for this process (see the module doc), resolved once.
pub fn dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(v) = tc_core::env::TC_PROOF_CACHE.get() {
            return match v.as_str() {
                "" | "off" | "0" => None,
                d => Some(PathBuf::from(d)),
            };
        }
        let args: Vec<String> = std::env::args().collect();
        let target = from_out_dir(&args)
            .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
            .or_else(|| {
                let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
                manifest
                    .ancestors()
                    .map(|d| d.join("target"))
                    .find(|t| is_target(t))
            })?;
        Some(target.join(SUBDIR))
    })
    .as_deref()
}

thread_local! {
    static SET: Cell<bool> = const { Cell::new(false) };
}

/// Give this thread's checks the cache directory, once per thread (the
/// solver's configuration is per thread).
pub fn install() {
    if SET.with(|s| s.replace(true)) {
        return;
    }
    tc_core::solver::set_proof_cache(dir());
    // The macro checks one fn at a time, most of them cache hits that
    // never reach Z3: Z3's setup is paid once, on its own thread, beside
    // them (`tc_core::solver::use_worker`).
    tc_core::solver::use_worker();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_dir_names_the_target_directory() {
        let root = std::env::temp_dir().join(format!("tc-proof-cache-test-{}", std::process::id()));
        let deps = root.join("target/debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        std::fs::write(
            root.join("target/CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55",
        )
        .unwrap();
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let want = std::fs::canonicalize(root.join("target")).unwrap();
        let d = deps.to_string_lossy().into_owned();
        assert_eq!(
            from_out_dir(&args(&["rustc", "--out-dir", &d])),
            Some(want.clone())
        );
        assert_eq!(
            from_out_dir(&args(&["rustc", &format!("--out-dir={d}")])),
            Some(want)
        );
        assert_eq!(from_out_dir(&args(&["rustc", "--crate-name", "x"])), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
