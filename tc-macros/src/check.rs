//! Calls the tc-core checker and renders its diagnostics as `syn::Error`s at
//! the spans the front end recorded.

use tc_core::check::{check_function, Checked};
use tc_core::ir::{Function, Signatures};
use tc_core::Diagnostic;

use crate::spans::SpanTable;

/// The message of one compile error: `[code] rule: message`, the
/// counterexample line, then notes, labels and help.
pub fn render(d: &Diagnostic) -> String {
    let mut s = format!("[{}] {}", d.code, d.headline());
    for n in &d.notes {
        s.push_str(&format!("\n  note: {n}"));
    }
    for l in &d.labels {
        s.push_str(&format!("\n  note: {}", l.message));
    }
    if let Some(h) = &d.help {
        s.push_str(&format!("\n  help: {h}"));
    }
    s
}

/// Diagnostics → errors, de-duplicated, in the checker's order.
pub fn to_errors(diags: &[Diagnostic], spans: &SpanTable) -> Vec<syn::Error> {
    let mut seen: Vec<(u32, String)> = Vec::new();
    let mut out = Vec::new();
    for d in diags {
        let msg = render(d);
        let key = (d.span.0, msg.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        out.push(spans.error(d.span, msg));
    }
    out
}

/// Check one function against the visible signatures.
pub fn function(
    func: &Function,
    sigs: &Signatures,
    spans: &SpanTable,
) -> Result<Checked, Vec<syn::Error>> {
    check_function(func, sigs).map_err(|ds| to_errors(&ds, spans))
}
