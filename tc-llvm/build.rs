//! Fingerprints the code generator's own source, so the persistent kernel
//! cache's identity changes whenever the code that writes the IR, chooses
//! helper opcodes or links the objects changes — not only when the crate
//! version does (see `src/disk.rs`).

fn main() {
    // Read at run time: a build-script binary can be reused for a checkout
    // at another path, and must hash that checkout's sources.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = std::path::Path::new(&dir).join("src");
    let h = tc_fingerprint::source_fingerprint(&src).expect("tc-llvm build script: read src/");
    println!("cargo:rustc-env=TC_LLVM_SOURCE_FINGERPRINT={h}");
    // A directory makes cargo rerun this script when any file below it changes.
    println!("cargo:rerun-if-changed=src");
}
