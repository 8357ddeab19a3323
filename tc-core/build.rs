//! Fingerprints tc-core's own source, so the persistent proof cache's
//! identity changes whenever the checker or the solver encoding changes —
//! not only when the crate version does (see `src/solver/disk.rs`).

fn main() {
    tc_fingerprint::emit_source_fingerprint("TC_CORE_SOURCE_FINGERPRINT");
}
