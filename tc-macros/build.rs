//! Fingerprints tc-macros' own source, so that the whole-fn cache
//! (`src/fn_cache.rs`) never serves an expansion that other macro code
//! made — not only when the crate version changes.

fn main() {
    tc_fingerprint::emit_source_fingerprint("TC_MACROS_SOURCE_FINGERPRINT");
}
