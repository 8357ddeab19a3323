//! Fingerprints the code generator's own source, so the persistent kernel
//! cache's identity changes whenever the code that writes the IR, chooses
//! helper opcodes or links the objects changes — not only when the crate
//! version does (see `src/disk.rs`).

include!("src/fingerprint.rs");

fn main() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = source_files(&src).expect("tc-llvm build script: read src/");
    println!(
        "cargo:rustc-env=TC_LLVM_SOURCE_FINGERPRINT={}",
        fingerprint(&files)
    );
    // A directory makes cargo rerun this script when any file below it changes.
    println!("cargo:rerun-if-changed=src");
}
