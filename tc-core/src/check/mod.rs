//! Type formation (Section 1 §4), operation typing (Section 2 §4–§13, §17)
//! and the bidirectional checker (Section 3 §7) over the IR.
//!
//! Every instruction synthesises its type; annotated lets, the return and
//! call arguments are check boundaries where subsumption applies. All errors
//! are collected; a value whose instruction failed is *poisoned* and later
//! uses of it are skipped, so one mistake yields one diagnostic.
//!
//! One file per concern: `signature` (formation, Section 1 §4), `dims` (dim
//! and predicate formation, Section 2 §13, §16), `body` (the instruction
//! walk and operand checks, Section 3 §7), one file per op family
//! (`elementwise`, `matmul`, `reduce`, `reshape`, `layout`, `gather`, `topk`, `pad`), `call`
//! (Section 2 §17) and `diags` (diagnostics the rules share). This file holds
//! the entry points, the checker's state and the rule names.

mod body;
mod call;
mod diags;
mod dims;
mod dq_matmul;
mod elementwise;
mod gather;
mod layout;
mod matmul;
mod pad;
mod reduce;
mod reshape;
mod rope;
mod sdpa;
mod signature;
mod topk;
mod window;

pub use window::WINDOW_CONST_MAX;

use crate::ctx::{zero_opt_ins, Ctx};
use crate::diag::{Counterexample, Diagnostic, SpanId};
use crate::ir::{verify_structure, Function, Signature, Signatures, Value, ValueMap};
use crate::pred::Pred;
use crate::solver::{self, Entailment};
use crate::types::Type;

use diags::unknown_diag;

const R_FORM: &str = "type formation (Section 1 §4)";
const R_DIVVAR: &str = "division by a variable (Section 2 §13)";
const R_DIM: &str = "dimension formation (Section 2 §16)";
const R_DIVISOR: &str = "dim divisor (Section 2 §13)";
const R_SUB: &str = "subtyping (Section 3 §3.3)";
const R_UNARY: &str = "unary (Section 2 §4)";
const R_BINARY: &str = "binary (Section 2 §6)";
const R_SELECT: &str = "select (Section 2 §6)";
const R_MATMUL: &str = "matmul (Section 2 §7)";
const R_QMATMUL: &str = "qmatmul (Section 2 §18)";
const R_MATMUL_I32: &str = "matmul_i32 (docs/syntax.md §7b)";
const R_DQ_MATMUL: &str = "dq_matmul (docs/syntax.md §7c)";
const R_QUANT: &str = "block-quantized tensor formation (Section 2 §18)";
const R_CAST: &str = "cast (Section 2 §5)";
const R_REDUCE: &str = "reduce (Section 2 §8)";
const R_ARG: &str = "argmax/argmin (Section 2 §8)";
const R_TRANSPOSE: &str = "transpose (Section 2 §9)";
const R_RESHAPE: &str = "reshape (Section 2 §10)";
const R_BROADCAST: &str = "broadcast (Section 2 §11)";
const R_SLICE: &str = "slice (Section 2 §12)";
const R_CONCAT: &str = "concat (Section 2 §12)";
const R_GATHER: &str = "gather (Section 2 §12a, docs/syntax.md)";
const R_TOPK: &str = "topk (Section 2 §8a, docs/syntax.md)";
const R_CUMSUM: &str = "cumsum (Section 2 §8b, docs/syntax.md)";
const R_PAD: &str = "pad (Section 2 §12b, docs/syntax.md)";
const R_ROPE: &str = "rope (Section 2 §18, docs/syntax.md §12e)";
const R_SDPA: &str = "sdpa (docs/syntax.md §12f)";
const R_CONV: &str = "conv (Section 2 §12c, docs/syntax.md)";
const R_POOL: &str = "pool (Section 2 §12d, docs/syntax.md)";
const R_CALL: &str = "call (Section 2 §17)";
const R_LITERAL: &str = "literal (Section 2 §4)";
const R_BIND: &str = "dim binding (Section 1 §6)";

/// A function that passed the checker.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The function as given.
    pub func: Function,
    /// The type of every value, indexed by value id (parameters first).
    pub types: ValueMap<Type>,
    /// Γ after the body (signature facts, local dim bindings).
    pub ctx: Ctx,
}

/// Γ of a signature: its variables (with their `≥ 0` opt-ins), constants,
/// refinements, `requires` and axioms. No checking.
pub fn signature_ctx(sig: &Signature) -> Ctx {
    let mut ctx = Ctx::new();
    let mut preds: Vec<Pred> = sig.requires.iter().map(|r| r.node.clone()).collect();
    for p in &sig.params {
        if let Type::Tensor(t) = &p.ty {
            preds.extend(t.refs.iter().cloned());
        }
    }
    let zero = zero_opt_ins(&preds);
    for (n, v) in &sig.consts {
        ctx.constant(n, *v);
    }
    for v in &sig.vars {
        if v.allow_zero || zero.contains(&v.name) {
            ctx.declare_allow_zero(&v.name);
        } else {
            ctx.declare(&v.name);
        }
    }
    for p in preds {
        ctx.assume(p);
    }
    for a in &sig.axioms {
        ctx.axiom(a.node.clone());
    }
    ctx
}

/// Formation of a signature (Section 1 §4): every name bound, dims and
/// predicates Presburger (axioms excepted), divisions by a variable justified
/// (Section 2 §13), compound dims positive (§16), and every refinement set
/// satisfiable (an unsatisfiable one is an empty type).
pub fn check_signature(sig: &Signature) -> Vec<Diagnostic> {
    solver::scoped(|| check_signature_scoped(sig))
}

fn check_signature_scoped(sig: &Signature) -> Vec<Diagnostic> {
    let ctx = signature_ctx(sig);
    let mut ck = Checker::new(ctx, None);
    ck.check_sig(sig);
    ck.diags
}

/// Check a whole function against the visible signatures.
/// Its solver queries share one Z3 context, its own (`solver::scoped`).
pub fn check_function(func: &Function, sigs: &Signatures) -> Result<Checked, Vec<Diagnostic>> {
    solver::scoped(|| check_function_scoped(func, sigs))
}

/// Check a function whose signature already passed [`check_signature`]
/// (with no diagnostics): the body only. The macro forms every signature of
/// a module first, so that callers of a refused one stay quiet; this keeps
/// that one formation check the only one.
pub fn check_formed_function(
    func: &Function,
    sigs: &Signatures,
) -> Result<Checked, Vec<Diagnostic>> {
    solver::scoped(|| check_function_inner(func, sigs, false))
}

fn check_function_scoped(func: &Function, sigs: &Signatures) -> Result<Checked, Vec<Diagnostic>> {
    check_function_inner(func, sigs, true)
}

fn check_function_inner(
    func: &Function,
    sigs: &Signatures,
    form_sig: bool,
) -> Result<Checked, Vec<Diagnostic>> {
    if let Err(d) = verify_structure(func) {
        return Err(vec![d]);
    }
    let ctx = signature_ctx(&func.sig);
    let mut ck = Checker::new(ctx, Some(sigs));
    if form_sig {
        ck.check_sig(&func.sig);
    }
    if !ck.diags.is_empty() {
        // A malformed signature makes every body judgment meaningless.
        return Err(ck.diags);
    }
    let types = ck.check_body(func);
    if ck.diags.is_empty() {
        let types = types
            .into_values()
            .map(|t| t.unwrap_or(Type::Unit))
            .collect();
        Ok(Checked {
            func: func.clone(),
            types,
            ctx: ck.ctx,
        })
    } else {
        Err(ck.diags)
    }
}

/// The checker's state: Γ, the visible signatures and the errors so far.
struct Checker<'a> {
    ctx: Ctx,
    sigs: Option<&'a Signatures>,
    diags: Vec<Diagnostic>,
    /// While the signature is formed: Γ without the facts that divide by a
    /// non-constant. A divisor obligation of the signature must not be proven
    /// from the very predicate that contains the division (`D % G == 0`
    /// forces `G ≥ 1` under Z3's total `mod` when `D ≥ 1`).
    divisor_ctx: Option<Ctx>,
    /// The declared return type while a body is checked: where values flow.
    ret: Option<Type>,
}

impl<'a> Checker<'a> {
    fn new(ctx: Ctx, sigs: Option<&'a Signatures>) -> Self {
        Checker {
            ctx,
            sigs,
            diags: Vec::new(),
            divisor_ctx: None,
            ret: None,
        }
    }

    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Prove `goal` or report: `Invalid` → `code` with the counterexample,
    /// `Unknown` → the fixed budget message. Returns whether it was proven.
    fn prove(
        &mut self,
        goal: &Pred,
        code: &'static str,
        rule: &'static str,
        span: SpanId,
        msg: impl FnOnce() -> String,
    ) -> bool {
        match solver::entails(&self.ctx, goal) {
            Entailment::Valid => true,
            Entailment::Invalid(cex) => {
                self.err(Diagnostic::new(code, rule, span, msg()).with_cex(Some(cex)));
                false
            }
            Entailment::Unknown => {
                self.err(unknown_diag(rule, span, goal));
                false
            }
        }
    }
}

/// The counterexample of a diagnostic rendered as `fails when …` (for tests).
pub fn cex_string(d: &Diagnostic) -> String {
    d.counterexample
        .as_ref()
        .map(Counterexample::to_string)
        .unwrap_or_default()
}

/// Convenience for tests and the macro: the value ids of a function's parameters.
pub fn param_values(func: &Function) -> Vec<Value> {
    (0..func.sig.params.len())
        .map(|i| func.param_value(i))
        .collect()
}
