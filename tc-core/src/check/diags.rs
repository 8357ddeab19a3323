//! The diagnostics several rules build alike: a dim operation without a
//! result (overflow, division by zero), a dtype outside the op's class
//! (Section 2 §3), a solver `unknown`, a failed subsumption (Section 3 §3.3)
//! and the cast help (Section 3 §9: no implicit promotion).

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::DimError;
use crate::dtype::Dtype;
use crate::pred::Pred;
use crate::solver;
use crate::subtype::SubtypeError;
use crate::types::Type;

use super::R_SUB;

/// An E0106/E0107 diagnostic for a dim operation that has no result.
pub(super) fn dim_error_diag(e: &DimError, span: SpanId) -> Diagnostic {
    let d = Diagnostic::new(e.code(), e.rule(), span, e.to_string()).note(e.why());
    match e {
        DimError::Overflow(_) => d.help("use smaller sizes, or split the dim into several axes"),
        DimError::DivByZero(_) => d,
    }
}

pub(super) fn class_diag(
    rule: &'static str,
    span: SpanId,
    op: &str,
    class: &str,
    found: Dtype,
) -> Diagnostic {
    Diagnostic::new(
        codes::DTYPE_CLASS,
        rule,
        span,
        format!(
            "`{op}` expects a {class} tensor, found dtype {found} (class {})",
            found.class()
        ),
    )
    .help(class_help(class, found))
}

/// A cast toward the class the op expects: to f32 for a float op, to i64
/// (counts) for a numeric op given a bool, otherwise generic.
fn class_help(class: &str, found: Dtype) -> String {
    let target = match class {
        "float" => Some("f32"),
        "numeric" if found.is_bool() => Some("i64"),
        _ => None,
    };
    match target {
        Some(t) => {
            format!("insert `.cast::<{t}>()` on the operand (Section 3 §9: no implicit promotion)")
        }
        None => "insert an explicit `.cast::<..>()` (Section 3 §9: no implicit promotion)".into(),
    }
}

pub(super) fn unknown_diag(rule: &'static str, span: SpanId, goal: &Pred) -> Diagnostic {
    Diagnostic::new(
        codes::SOLVER_UNKNOWN,
        rule,
        span,
        format!(
            "could not prove `{goal}` within the solver budget ({})",
            solver::budget_note()
        ),
    )
    .help("add a refinement or an axiom that makes the obligation easier")
}

pub(super) fn sub_diag(
    e: &SubtypeError,
    span: SpanId,
    what: &str,
    found: &Type,
    expected: &Type,
) -> Diagnostic {
    if let SubtypeError::Unknown { goal } = e {
        return unknown_diag(R_SUB, span, goal);
    }
    let code = match e {
        SubtypeError::Kind { .. } => codes::KIND_MISMATCH,
        SubtypeError::Dtype { .. } => codes::DTYPE_MISMATCH,
        SubtypeError::Rank { .. } => codes::RANK_MISMATCH,
        SubtypeError::Dim { .. } => codes::SHAPE_MISMATCH,
        _ => codes::REFINEMENT,
    };
    let describe = match (e, expected) {
        // A dim value has one dim: no "dimension 0".
        (
            SubtypeError::Dim {
                found, expected, ..
            },
            Type::Dim(_),
        ) => format!("expected `{expected}`, found `{found}`"),
        _ => e.describe(),
    };
    let d = Diagnostic::new(code, R_SUB, span, format!("{what}: {describe}"))
        .with_cex(e.cex().cloned())
        .note(format!("expected `{expected}`\n     found `{found}`"));
    match e {
        SubtypeError::Dtype { found, expected } => {
            d.help(cast_help(*found, *expected, &format!("{found} value")))
        }
        _ => d,
    }
}

/// `cast the bf16 operand to f32: `cast::<f32>(…)``: always toward the
/// dtype that is expected, naming the thing to cast by its current dtype.
pub(super) fn cast_help(from: Dtype, to: Dtype, what: &str) -> String {
    debug_assert_ne!(from, to);
    format!("cast the {what} to {to}: `cast::<{to}>(…)` (no implicit promotion, Section 3 §9)")
}
