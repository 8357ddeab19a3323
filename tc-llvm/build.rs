//! Fingerprints the code generator's own source, so the persistent kernel
//! cache's identity changes whenever the code that writes the IR, chooses
//! helper opcodes or links the objects changes — not only when the crate
//! version does (see `src/disk.rs`).

fn main() {
    tc_fingerprint::emit_source_fingerprint("TC_LLVM_SOURCE_FINGERPRINT");
}
