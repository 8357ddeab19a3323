//! The error index (docs/errors.md) documents every diagnostic code, and
//! every code written in the checker's and the macros' sources is a known
//! one (so a new code cannot ship undocumented).

use std::path::{Path, PathBuf};

use tc_core::diag::codes;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_code_has_an_entry_in_the_error_index() {
    let index = std::fs::read_to_string(root().join("docs/errors.md")).expect("docs/errors.md");
    for code in codes::ALL {
        let heading = format!("\n## {code}\n");
        assert!(
            index.contains(&heading),
            "docs/errors.md has no `## {code}` entry"
        );
        let anchor = codes::doc_anchor(code);
        assert!(
            anchor.ends_with(&format!("#{}", code.to_ascii_lowercase())),
            "{anchor}"
        );
    }
}

/// Every `E0nnn` in the sources of tc-core and tc-macros is in `codes::ALL`.
#[test]
fn every_code_in_the_sources_is_known() {
    let mut unknown = Vec::new();
    for dir in ["tc-core/src", "tc-macros/src"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("source dir") {
            let path = entry.expect("dir entry").path();
            if path.extension().map_or(true, |e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source file");
            let b = text.as_bytes();
            for i in 0..b.len().saturating_sub(4) {
                let is_code = b[i] == b'E'
                    && b[i + 1..i + 5].iter().all(u8::is_ascii_digit)
                    && b.get(i + 5).map_or(true, |c| !c.is_ascii_digit())
                    && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
                if !is_code {
                    continue;
                }
                // All ASCII (checked above), so a char boundary.
                let code = &text[i..i + 5];
                if !codes::ALL.contains(&code) {
                    unknown.push(format!("{}: {code}", path.display()));
                }
            }
        }
    }
    assert!(unknown.is_empty(), "codes not in codes::ALL: {unknown:?}");
}
