//! Fingerprints tc-core's own source, so the persistent proof cache's
//! identity changes whenever the checker or the solver encoding changes —
//! not only when the crate version does (see `src/solver/disk.rs`).

fn main() {
    // Read at run time: a build-script binary reused for a checkout at
    // another path must hash that checkout's sources.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = std::path::Path::new(&manifest).join("src");
    let h = tc_fingerprint::source_fingerprint(&src).expect("tc-core build script: read src/");
    println!("cargo:rustc-env=TC_CORE_SOURCE_FINGERPRINT={h}");
    // A directory makes cargo rerun this script when any file below it changes.
    println!("cargo:rerun-if-changed=src");
}
