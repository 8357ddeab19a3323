//! Calls the tc-core checker and renders its diagnostics as `syn::Error`s at
//! the spans the front end recorded.

use tc_core::check::{check_formed_function, check_signature, Checked};
use tc_core::ir::{Function, Signature, Signatures};
use tc_core::Diagnostic;

use crate::ctxt::Ctxt;
use crate::spans::{help_line, SpanTable};

/// The message of one compile error: `[code] rule: message`, the
/// counterexample line, then notes, labels and help; the help ends with the
/// code's entry in the error index.
pub fn render(d: &Diagnostic) -> String {
    let mut s = format!("[{}] {}", d.code, d.headline());
    for n in &d.notes {
        s.push_str(&format!("\n  note: {n}"));
    }
    for l in &d.labels {
        s.push_str(&format!("\n  note: {}", l.message));
    }
    s.push_str(&help_line(d.help.as_deref(), d.code));
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
        // The other tokens of the same error (e.g. the rest of an unsat
        // core), each underlined by an error of its own: stable proc macros
        // have no secondary spans.
        for r in &d.related {
            let msg = format!("[{}] {}: {}", d.code, d.rule, r.message);
            out.push(spans.error(r.span, msg));
        }
    }
    out
}

/// Formation of one signature (Section 1 §4), before any body is checked:
/// whether it is well formed (its errors go to `cx`).
pub fn signature(sig: &Signature, spans: &SpanTable, cx: &Ctxt) -> bool {
    let ds = tc_core::profile::time("check.signature", || check_signature(sig));
    cx.extend(to_errors(&ds, spans));
    ds.is_empty()
}

/// Check one function whose signature passed [`signature`] against the
/// visible signatures (its errors go to `cx`).
pub fn function(
    func: &Function,
    sigs: &Signatures,
    spans: &SpanTable,
    cx: &Ctxt,
) -> Option<Checked> {
    tc_core::profile::time("check.function", || check_formed_function(func, sigs))
        .map_err(|ds| cx.extend(to_errors(&ds, spans)))
        .ok()
}
