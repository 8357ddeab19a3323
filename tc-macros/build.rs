//! Fingerprints tc-macros' own source, so that the whole-fn cache
//! (`src/fn_cache.rs`) never serves an expansion that other macro code
//! made — not only when the crate version changes.

fn main() {
    // Read at run time: a build-script binary reused for a checkout at
    // another path must hash that checkout's sources.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = std::path::Path::new(&manifest).join("src");
    let h = tc_fingerprint::source_fingerprint(&src).expect("tc-macros build script: read src/");
    println!("cargo:rustc-env=TC_MACROS_SOURCE_FINGERPRINT={h}");
    // A directory makes cargo rerun this script when any file below it changes.
    println!("cargo:rerun-if-changed=src");
}
