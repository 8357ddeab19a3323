//! Type formation (Section 1 §4), operation typing (Section 2 §4–§13, §17)
//! and the bidirectional checker (Section 3 §7) over the IR.
//!
//! Every instruction synthesises its type; annotated lets, the return and
//! call arguments are check boundaries where subsumption applies. All errors
//! are collected; a value whose instruction failed is *poisoned* and later
//! uses of it are skipped, so one mistake yields one diagnostic.

use std::collections::BTreeMap;

use crate::ctx::{zero_opt_ins, Ctx};
use crate::diag::{codes, Counterexample, Diagnostic, SpanId};
use crate::dim::{Atom, Dim, DimError};
use crate::dtype::Dtype;
use crate::ir::{
    check_axes, check_perm, verify_structure, BinaryOp, Function, Inst, Op, ReduceOp, Scalar,
    Signature, Signatures, Value,
};
use crate::pred::{CmpOp, Pred};
use crate::solver::{self, Entailment, Satisfiability};
use crate::subtype::{dims_equal, subtype, DimEq, SubtypeError};
use crate::types::{checked_volume, shape_string, TensorType, Type};

const R_FORM: &str = "type formation (Section 1 §4)";
const R_DIVVAR: &str = "division by a variable (Section 2 §13)";
const R_DIM: &str = "dimension formation (Section 2 §16)";
const R_DIVISOR: &str = "dim divisor (Section 2 §13)";
const R_SUB: &str = "subtyping (Section 3 §3.3)";
const R_UNARY: &str = "unary (Section 2 §4)";
const R_BINARY: &str = "binary (Section 2 §6)";
const R_SELECT: &str = "select (Section 2 §6)";
const R_MATMUL: &str = "matmul (Section 2 §7)";
const R_REDUCE: &str = "reduce (Section 2 §8)";
const R_ARG: &str = "argmax/argmin (Section 2 §8)";
const R_TRANSPOSE: &str = "transpose (Section 2 §9)";
const R_RESHAPE: &str = "reshape (Section 2 §10)";
const R_BROADCAST: &str = "broadcast (Section 2 §11)";
const R_SLICE: &str = "slice (Section 2 §12)";
const R_CONCAT: &str = "concat (Section 2 §12)";
const R_CALL: &str = "call (Section 2 §17)";
const R_LITERAL: &str = "literal (Section 2 §4)";
const R_BIND: &str = "dim binding (Section 1 §6)";

/// A function that passed the checker.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The function as given.
    pub func: Function,
    /// The type of every value, indexed by value id (parameters first).
    pub types: Vec<Type>,
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
        let types = types.into_iter().map(|t| t.unwrap_or(Type::Unit)).collect();
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

    // ---------------------------------------------------------------- formation

    fn check_sig(&mut self, sig: &Signature) {
        let mut base = self.ctx.clone();
        let divides = |p: &Pred| p.dims().iter().any(|d| !d.variable_divisions().is_empty());
        base.facts.retain(|p| !divides(p));
        base.axioms.retain(|p| !divides(p));
        self.divisor_ctx = Some(base);
        self.check_sig_formed(sig);
        self.divisor_ctx = None;
    }

    /// Every shape variable of a signature must be inferable at a call
    /// (Section 2 §17: "each dimension of a parameter that is a bare variable
    /// binds it"). One that occurs only inside compound dims (`[D, 8 * F]`)
    /// would be accepted here and then make every call fail with an unbound
    /// variable: an accepted signature must be callable.
    fn check_vars_inferable(&mut self, sig: &Signature) {
        let tensor_dims = || {
            // Tensor dims and dim parameters (`heads: Dim![H]`) alike.
            sig.params.iter().flat_map(|p| {
                p.ty.param_dims()
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (d, p.dim_spans.get(i).copied().unwrap_or(p.span)))
                    .collect::<Vec<_>>()
            })
        };
        let bare: std::collections::BTreeSet<&str> =
            tensor_dims().filter_map(|(d, _)| d.as_var()).collect();
        for v in &sig.vars {
            let is_const = sig.consts.iter().any(|(c, _)| c == &v.name);
            if bare.contains(v.name.as_str()) || is_const {
                continue;
            }
            let Some((d, span)) = tensor_dims().find(|(d, _)| d.vars().contains(&v.name)) else {
                continue; // not in a parameter: `names_bound` reports it
            };
            self.err(
                Diagnostic::new(
                    codes::UNBOUND_VAR,
                    R_FORM,
                    span,
                    format!(
                        "shape variable `{}` occurs only inside the compound dim `{d}`, so a call cannot infer it",
                        v.name
                    ),
                )
                .help(format!(
                    "give `{}` a dim of its own in some parameter (for example a tensor whose dim is exactly `{}`), or write the dim with a variable of its own and relate the two in `requires`",
                    v.name, v.name
                )),
            );
        }
    }

    fn check_sig_formed(&mut self, sig: &Signature) {
        self.check_vars_inferable(sig);
        let rule_preds: Vec<(Pred, SpanId)> = sig
            .params
            .iter()
            .flat_map(|p| match &p.ty {
                Type::Tensor(t) => t
                    .refs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.clone(), p.ref_spans.get(i).copied().unwrap_or(p.span)))
                    .collect::<Vec<_>>(),
                _ => vec![],
            })
            .chain(sig.requires.iter().map(|r| (r.node.clone(), r.span)))
            .collect();
        for (p, span) in &rule_preds {
            self.pred_formed(p, *span, false);
        }
        for a in &sig.axioms {
            self.pred_formed(&a.node, a.span, true);
        }
        let before = self.diags.len();
        self.sig_satisfiable(sig);
        if self.diags.len() > before {
            return;
        }
        for p in &sig.params {
            for (i, d) in p.ty.param_dims().iter().enumerate() {
                let span = p.dim_spans.get(i).copied().unwrap_or(p.span);
                self.dim_formed(d, span);
            }
        }
        if let Type::Tensor(t) = &sig.ret {
            for (i, d) in t.shape.iter().enumerate() {
                let span = sig.ret_dim_spans.get(i).copied().unwrap_or(sig.ret_span);
                self.dim_formed(d, span);
            }
            for r in &t.refs {
                self.pred_formed(r, sig.ret_span, false);
            }
        }
    }

    /// `Sat(Γ)` of the signature (Section 1 §4: an unsatisfiable refinement
    /// set is an empty type). On failure every predicate of a minimal
    /// unsatisfiable subset is underlined: the contradiction lies between
    /// them, and which one to change is the user's call.
    fn sig_satisfiable(&mut self, sig: &Signature) {
        let preds = sig_preds(sig);
        let together = "the signature's refinements, requires and axioms together";
        match solver::satisfiable(&self.ctx, &[]) {
            Satisfiability::Sat => return,
            Satisfiability::Unsat => {}
            Satisfiability::Unknown => {
                let span = preds.first().map(|p| p.span).unwrap_or(sig.span);
                self.err(
                    Diagnostic::new(
                        codes::SOLVER_UNKNOWN,
                        R_FORM,
                        span,
                        format!("could not decide whether {together} are satisfiable within the solver budget ({})", solver::budget_note()),
                    )
                    .help("add a refinement or an axiom"),
                );
                return;
            }
        }
        let core: Vec<&SigPred> = self
            .unsat_core(&preds)
            .into_iter()
            .map(|i| &preds[i])
            .collect();
        let owner = core.first().and_then(|p| p.owner.clone());
        let what = match owner {
            Some(o) if core.iter().all(|p| p.owner.as_ref() == Some(&o)) => {
                format!("the refinements of `{o}`")
            }
            _ => together.to_string(),
        };
        let span = core.first().map(|p| p.span).unwrap_or(sig.span);
        let mut d = Diagnostic::new(
            codes::EMPTY_TYPE,
            R_FORM,
            span,
            format!("{what} are unsatisfiable: the type is empty"),
        )
        .note("with the default `α >= 1` for every shape variable not opted into `>= 0` (Section 2 §16)");
        if core.len() > 1 {
            let all: Vec<String> = core.iter().map(|p| format!("`{}`", p.pred)).collect();
            d = d.note(format!("contradictory together: {}", all.join(", ")));
            for p in &core[1..] {
                d = d.related(
                    p.span,
                    format!(
                        "`{}` is part of the same contradiction ({})",
                        p.pred,
                        all.join(", ")
                    ),
                );
            }
            d = d.help("remove or relax one of the contradictory predicates");
        } else {
            d = d.help("remove the contradictory predicate");
        }
        self.err(d);
    }

    /// A minimal unsatisfiable subset of the signature's predicates (with
    /// the §16 defaults, which always hold): drop each predicate, in
    /// declaration order, whose removal keeps the rest unsatisfiable. One
    /// solver query per predicate, deterministic; an `unknown` keeps the
    /// predicate (the core may then be larger, never wrong).
    fn unsat_core(&self, preds: &[SigPred]) -> Vec<usize> {
        let mut keep: Vec<usize> = (0..preds.len()).collect();
        let mut i = 0;
        while i < keep.len() {
            let trial: Vec<usize> = keep.iter().copied().filter(|&k| k != keep[i]).collect();
            let mut ctx = self.ctx.clone();
            ctx.facts.clear();
            ctx.axioms.clear();
            for &k in &trial {
                if preds[k].axiom {
                    ctx.axiom(preds[k].pred.clone());
                } else {
                    ctx.assume(preds[k].pred.clone());
                }
            }
            if matches!(solver::satisfiable(&ctx, &[]), Satisfiability::Unsat) {
                keep = trial;
            } else {
                i += 1;
            }
        }
        keep
    }

    /// Names bound, divisors at least 1, Presburger unless an axiom.
    fn pred_formed(&mut self, p: &Pred, span: SpanId, is_axiom: bool) {
        for d in p.dims() {
            if self.dim_wf(d, span) && !is_axiom {
                self.linear_or_error(d, span);
            }
        }
    }

    /// The check every dim the checker sees passes through, wherever it
    /// occurs (signature types, refinements, `requires`, axioms, op shapes,
    /// slice bounds, `let` annotations): its names are bound and every `/`
    /// and `%` in it divides by something provably at least 1 under Γ
    /// (Section 2 §13). Z3's `div`/`mod` are total, so without this the
    /// solver would prove obligations about `D % 0` that no σ can meet.
    fn dim_wf(&mut self, d: &Dim, span: SpanId) -> bool {
        if !self.names_bound(d, span) {
            return false;
        }
        for atom in d.divisions() {
            if let Atom::Div(_, y) | Atom::Mod(_, y) = &atom {
                if !self.divisor_ok(&atom, y, span) {
                    return false;
                }
            }
        }
        true
    }

    /// The obligation `y ≥ 1` of one quotient or remainder `x / y`, `x % y`.
    fn divisor_ok(&mut self, shown: &Atom, y: &Dim, span: SpanId) -> bool {
        // A module constant divisor is a known value (`D / HEADS`, HEADS = 0).
        let known = y
            .checked_subst(&self.const_map())
            .ok()
            .and_then(|d| d.as_const());
        match known {
            Some(k) if k >= 1 => return true,
            Some(0) => {
                self.err(
                    Diagnostic::new(
                        codes::DIV_BY_ZERO,
                        R_DIVISOR,
                        span,
                        format!("division by zero in a dim: `{shown}`"),
                    )
                    .note(format!(
                        "`{y}` is 0; Section 2 §13 requires every dim divisor to be at least 1"
                    )),
                );
                return false;
            }
            Some(k) => {
                self.err(
                    Diagnostic::new(
                        codes::DIVISOR,
                        R_DIVISOR,
                        span,
                        if y.as_const().is_some() {
                            format!("the divisor of `{shown}` is {k}, which is negative; a dim divisor must be at least 1")
                        } else {
                            format!("the divisor `{y}` of `{shown}` is {k}, which is negative; a dim divisor must be at least 1")
                        },
                    )
                    .help("divide by a positive constant or a shape variable known to be at least 1"),
                );
                return false;
            }
            None => {}
        }
        if let Some(v) = y.as_var() {
            if self
                .ctx
                .vars
                .iter()
                .any(|cv| cv.name == v && !cv.allow_zero)
            {
                // Γ's default `v ≥ 1` (Section 2 §16) discharges it.
                return true;
            }
        }
        // In the signature, prove it under Γ minus the dividing facts.
        let saved = self.divisor_ctx.take();
        let body_ctx = saved.clone().map(|c| std::mem::replace(&mut self.ctx, c));
        let ok = self.prove_cmp(
            y,
            CmpOp::Ge,
            &Dim::c(1),
            codes::DIVISOR,
            R_DIVISOR,
            span,
            || format!("the divisor `{y}` of `{shown}` may be smaller than 1"),
        );
        if let Some(c) = body_ctx {
            self.ctx = c;
        }
        self.divisor_ctx = saved;
        if !ok {
            if let Some(last) = self.diags.last_mut() {
                if last.code == codes::DIVISOR {
                    last.help = Some(format!(
                        "add `requires({y} >= 1)`: a dim divisor must be at least 1 (Section 2 §13)"
                    ));
                }
            }
        }
        ok
    }

    /// Prove `a op b`. When the comparison folds to `false` (its sides differ
    /// by a constant) the solver still gets the unfolded comparison, so the
    /// error carries a concrete counterexample over the variables the user
    /// wrote (`stop S + 1 > S`: fails when S = 1) instead of none.
    #[allow(clippy::too_many_arguments)]
    fn prove_cmp(
        &mut self,
        a: &Dim,
        op: CmpOp,
        b: &Dim,
        code: &'static str,
        rule: &'static str,
        span: SpanId,
        msg: impl FnOnce() -> String,
    ) -> bool {
        let goal = Pred::cmp(a.clone(), op, b.clone());
        let goal = if goal == Pred::False {
            Pred::Cmp(a.clone(), op, b.clone())
        } else {
            goal
        };
        self.prove(&goal, code, rule, span, msg)
    }

    /// A checked dim operation: its value, or an E0106/E0107 error at `span`.
    fn dim_op(&mut self, r: Result<Dim, DimError>, span: SpanId) -> Option<Dim> {
        match r {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(dim_error_diag(&e, span));
                None
            }
        }
    }

    /// Module constants as dims: their values are known, so a product with a
    /// constant factor is linear (`GRID * GRID * C` with `GRID = 14`).
    fn const_map(&self) -> BTreeMap<String, Dim> {
        self.ctx
            .consts
            .iter()
            .map(|(n, v)| (n.clone(), Dim::c(*v)))
            .collect()
    }

    fn names_bound(&mut self, d: &Dim, span: SpanId) -> bool {
        let unbound = self.ctx.unbound_in(d);
        if unbound.is_empty() {
            return true;
        }
        self.err(
            Diagnostic::new(
                codes::UNBOUND_VAR,
                R_FORM,
                span,
                format!("shape variable `{}` is not bound here", unbound[0]),
            )
            .help("shape variables are bound by the signature's tensor types, by `let n = dim(&x, axis)`, or by a module constant"),
        );
        false
    }

    /// Products of variables are outside Presburger (Section 1 §3); quotients
    /// by a variable are admitted through Section 2 §13.
    fn linear_or_error(&mut self, d: &Dim, span: SpanId) -> bool {
        let consts = self.const_map();
        let Some(d) = self.dim_op(d.checked_subst(&consts), span) else {
            return false;
        };
        for (m, _) in d.terms() {
            if m.len() > 1 {
                let prod: Vec<String> = m.iter().map(|a| a.to_string()).collect();
                self.err(
                    Diagnostic::new(
                        codes::NON_LINEAR,
                        R_FORM,
                        span,
                        format!("`{}` multiplies shape variables, which is outside Presburger arithmetic", prod.join(" * ")),
                    )
                    .help(format!(
                        "introduce a variable for the product and state it as an axiom, e.g. `axiom(P == {})`",
                        prod.join(" * ")
                    )),
                );
                return false;
            }
        }
        true
    }

    /// A dim in a type or op attribute: bound, Presburger, quotients by a
    /// variable exact (§13), and at least the least admitted size (§16).
    fn dim_formed(&mut self, d: &Dim, span: SpanId) -> bool {
        if !self.dim_wf(d, span) || !self.linear_or_error(d, span) {
            return false;
        }
        for atom in d.variable_divisions() {
            if let Atom::Div(x, y) = &atom {
                let Some(r) = self.dim_op(x.checked_rem(y), span) else {
                    return false;
                };
                let goal = Pred::eq(r, 0);
                let ok = self.prove(&goal, codes::DIV_BY_VAR, R_DIVVAR, span, || {
                    format!("`{atom}` divides by a shape variable, but `{goal}` is not implied")
                });
                if !ok {
                    if let Some(last) = self.diags.last_mut() {
                        last.help = Some(format!(
                            "add `requires({goal})` or the refinement `where {goal}`"
                        ));
                    }
                    return false;
                }
            }
        }
        if d.as_var().is_some() {
            // Variables carry their own default (α ≥ 1 or the opt-in α ≥ 0).
            return true;
        }
        let least = self.least_size(d);
        if let Some(c) = d.as_const() {
            if c < least {
                self.err(
                    Diagnostic::new(codes::BAD_DIM, R_DIM, span, format!("dimension `{c}` is not a valid size here; expected at least {least}"))
                        .note("a zero-sized dim is admitted only through a shape variable opted into `>= 0`"),
                );
                return false;
            }
            return true;
        }
        let goal = Pred::ge(d.clone(), least);
        self.prove_cmp(
            d,
            CmpOp::Ge,
            &Dim::c(least),
            codes::BAD_DIM,
            R_DIM,
            span,
            || format!("dimension `{d}` may be smaller than {least}: `{goal}` is not implied"),
        )
    }

    /// 0 when some variable of `d` is opted into `≥ 0`, else 1 (Section 2 §16).
    fn least_size(&self, d: &Dim) -> i64 {
        let vs = d.vars();
        if self
            .ctx
            .vars
            .iter()
            .any(|v| v.allow_zero && vs.contains(&v.name))
        {
            0
        } else {
            1
        }
    }

    // --------------------------------------------------------------------- body

    fn check_body(&mut self, func: &Function) -> Vec<Option<Type>> {
        self.ret = Some(func.sig.ret.clone());
        let mut types: Vec<Option<Type>> =
            func.sig.params.iter().map(|p| Some(p.ty.clone())).collect();
        for (i, inst) in func.body.iter().enumerate() {
            for b in func.dim_bindings.iter().filter(|b| b.before == i) {
                self.bind_dim(b, &types);
            }
            let synth = self.synth(func, inst, &types);
            let ty = match (synth, &inst.annot) {
                (Some(t), Some(annot)) => {
                    // Check boundary (Section 3 §7): the annotation is checked by
                    // subsumption and becomes the value's type.
                    let before = self.diags.len();
                    if self.annot_formed(annot, inst.annot_span) {
                        self.check_sub(
                            &t,
                            annot,
                            inst.annot_span,
                            "the annotated type of this `let`",
                        );
                    }
                    // A failed boundary poisons the value: one error, no cascade.
                    (self.diags.len() == before).then(|| annot.clone())
                }
                (t, _) => t,
            };
            types.push(ty);
        }
        for b in func
            .dim_bindings
            .iter()
            .filter(|b| b.before >= func.body.len())
        {
            self.bind_dim(b, &types);
        }
        if let Some(Some(t)) = types.get(func.ret.0 as usize) {
            let t = t.clone();
            self.check_sub(&t, &func.sig.ret, func.ret_span, "the declared return type");
        }
        types
    }

    fn annot_formed(&mut self, t: &Type, span: SpanId) -> bool {
        match t {
            Type::Tensor(tt) => {
                let mut ok = true;
                for d in &tt.shape {
                    ok &= self.dim_formed(d, span);
                }
                for r in &tt.refs {
                    ok &= self.names_bound_pred(r, span);
                }
                ok
            }
            _ => true,
        }
    }

    fn names_bound_pred(&mut self, p: &Pred, span: SpanId) -> bool {
        p.dims().into_iter().all(|d| self.dim_wf(d, span))
    }

    fn check_sub(&mut self, found: &Type, expected: &Type, span: SpanId, what: &str) {
        if let Err(e) = subtype(&self.ctx, found, expected) {
            self.err(sub_diag(&e, span, what, found, expected));
        }
    }

    fn bind_dim(&mut self, b: &crate::ir::DimBinding, types: &[Option<Type>]) {
        let Some(Some(t)) = types.get(b.of.0 as usize) else {
            return;
        };
        let Type::Tensor(t) = t else {
            self.err(Diagnostic::new(
                codes::KIND_MISMATCH,
                R_BIND,
                b.span,
                format!("`dim` needs a tensor, found a {}", t.kind_name()),
            ));
            return;
        };
        let Some(d) = t.shape.get(b.axis) else {
            self.err(Diagnostic::new(
                codes::AXIS,
                R_BIND,
                b.span,
                format!(
                    "axis {} is out of range for a tensor of rank {}",
                    b.axis,
                    t.rank()
                ),
            ));
            return;
        };
        if self.ctx.is_bound(&b.name) {
            self.err(Diagnostic::new(
                codes::UNBOUND_VAR,
                R_BIND,
                b.span,
                format!(
                    "`{}` is already a shape variable or constant; pick a fresh name",
                    b.name
                ),
            ));
            return;
        }
        let d = d.clone();
        let least = self.least_size(&d);
        if least == 0 {
            self.ctx.declare_allow_zero(&b.name);
        } else {
            self.ctx.declare(&b.name);
        }
        self.ctx.assume(Pred::eq(Dim::var(b.name.clone()), d));
    }

    /// Synthesise the type of one instruction (Section 3 §7: internal nodes synthesise).
    fn synth(&mut self, func: &Function, inst: &Inst, types: &[Option<Type>]) -> Option<Type> {
        // Poisoned operands: their error was already reported.
        let mut operands = Vec::new();
        for v in inst.op.operands() {
            operands.push(types.get(v.0 as usize)?.clone()?);
        }
        match &inst.op {
            Op::Unary(op, _) => {
                let t = self.tensor_arg(&operands[0], inst, 0, R_UNARY)?;
                if !op.admits(t.dtype) {
                    self.err(class_diag(
                        R_UNARY,
                        inst.span,
                        op.name(),
                        op.class_name(),
                        t.dtype,
                    ));
                    return None;
                }
                Some(Type::Tensor(t))
            }
            Op::Cast(dt, _) => {
                let t = self.tensor_arg(&operands[0], inst, 0, "cast (Section 2 §5)")?;
                Some(Type::Tensor(TensorType { dtype: *dt, ..t }))
            }
            Op::Binary(op, _, _) => self.binary(*op, inst, &operands),
            Op::ScalarBinary { op, s, .. } => {
                let t = self.tensor_arg(&operands[0], inst, 0, R_BINARY)?;
                if !op.admits(t.dtype) {
                    self.err(class_diag(
                        R_BINARY,
                        inst.span,
                        op.name(),
                        op.class_name(),
                        t.dtype,
                    ));
                    return None;
                }
                self.scalar_matches(func, s, t.dtype, inst.arg_span(1))?;
                Some(Type::Tensor(TensorType {
                    dtype: op.result_dtype(t.dtype),
                    ..t
                }))
            }
            Op::Select(..) => self.select(inst, &operands),
            Op::Matmul(..) => self.matmul(inst, &operands),
            Op::Reduce {
                op, axes, keepdims, ..
            } => self.reduce_op(*op, axes, *keepdims, inst, &operands),
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                ..
            } => self.arg_reduce_op(*max, *axis, *keepdims, inst, &operands),
            Op::Transpose(perm, _) => self.transpose(perm, inst, &operands),
            Op::Reshape(shape, _) => self.reshape(shape, inst, &operands),
            Op::Broadcast(shape, _) => self.broadcast(shape, inst, &operands),
            Op::Slice {
                axis, start, stop, ..
            } => self.slice(*axis, start, stop, inst, &operands),
            Op::Concat(axis, _) => self.concat(*axis, inst, &operands),
            Op::Fill(dt, shape, s) => {
                let mut ok = true;
                for (i, d) in shape.iter().enumerate() {
                    ok &= self.dim_formed(d, inst.attr_span(i));
                }
                self.scalar_matches(func, s, *dt, inst.arg_span(0))?;
                ok.then(|| Type::tensor(*dt, shape.clone()))
            }
            Op::Iota(dt, shape, axis) => {
                let mut ok = true;
                for (i, d) in shape.iter().enumerate() {
                    ok &= self.dim_formed(d, inst.attr_span(i));
                }
                if !dt.is_numeric() {
                    self.err(class_diag(R_LITERAL, inst.span, "iota", "numeric", *dt));
                    return None;
                }
                if let Err(e) = check_axes(&[*axis], shape.len()) {
                    let span = inst.attr_span(shape.len());
                    self.err(Diagnostic::new(codes::AXIS, R_LITERAL, span, e.to_string()));
                    return None;
                }
                ok.then(|| Type::tensor(*dt, shape.clone()))
            }
            Op::Call(name, _) => self.call(name, inst, &operands),
            // A call's dim argument: formed like any dim in a body.
            Op::Dim(d) => self
                .dim_formed(d, inst.arg_span(0))
                .then(|| Type::Dim(d.clone())),
        }
    }

    /// §8 reduce: an admissible dtype, valid distinct axes, and a non-empty
    /// reduced set for max/min/mean.
    fn reduce_op(
        &mut self,
        op: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_REDUCE)?;
        if !op.admits(t.dtype) {
            self.err(class_diag(
                R_REDUCE,
                inst.span,
                op.name(),
                op.class_name(),
                t.dtype,
            ));
            return None;
        }
        self.axes_ok(axes, t.rank(), inst, R_REDUCE)?;
        if op.needs_nonempty() {
            for &a in axes {
                self.nonempty_axis(&t.shape[a], a, inst, R_REDUCE, op.name())?;
            }
        }
        Some(Type::Tensor(reduced(&t, axes, keepdims, t.dtype)))
    }

    /// argmax / argmin: a numeric operand, a valid non-empty axis; I64.
    fn arg_reduce_op(
        &mut self,
        max: bool,
        axis: usize,
        keepdims: bool,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_ARG)?;
        let name = if max { "argmax" } else { "argmin" };
        if !t.dtype.is_numeric() {
            self.err(class_diag(R_ARG, inst.span, name, "numeric", t.dtype));
            return None;
        }
        self.axes_ok(&[axis], t.rank(), inst, R_ARG)?;
        self.nonempty_axis(&t.shape[axis], axis, inst, R_ARG, name)?;
        Some(Type::Tensor(reduced(&t, &[axis], keepdims, Dtype::I64)))
    }

    /// §9: `perm` must be a permutation of the operand's axes
    /// ([`check_perm`], the rule the verifier and interpreter share).
    fn transpose(&mut self, perm: &[usize], inst: &Inst, operands: &[Type]) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_TRANSPOSE)?;
        if let Err(e) = check_perm(perm, t.rank()) {
            let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
            if let (true, Some(annot)) = (identity, &inst.annot) {
                // `let y: T = x;` re-views `x` through an identity
                // transpose of T's rank. A rank mismatch is malformed
                // IR (the interpreter refuses it too), but the user's
                // mistake is the annotation: say so at its span.
                let found = Type::Tensor(t.clone());
                let e = SubtypeError::Rank {
                    found: t.rank(),
                    expected: perm.len(),
                };
                let what = "the annotated type of this `let`";
                self.err(sub_diag(&e, inst.annot_span, what, &found, annot));
                return None;
            }
            self.err(Diagnostic::new(
                codes::PERMUTATION,
                R_TRANSPOSE,
                inst.attr_span(0),
                e.to_string(),
            ));
            return None;
        }
        let shape = perm.iter().map(|&p| t.shape[p].clone()).collect();
        Some(Type::Tensor(TensorType { shape, ..t }))
    }

    fn tensor_arg(
        &mut self,
        t: &Type,
        inst: &Inst,
        i: usize,
        rule: &'static str,
    ) -> Option<TensorType> {
        match t {
            Type::Tensor(t) => Some(t.clone()),
            other => {
                self.err(Diagnostic::new(
                    codes::KIND_MISMATCH,
                    rule,
                    inst.arg_span(i),
                    format!("expected a tensor, found a {} ({other})", other.kind_name()),
                ));
                None
            }
        }
    }

    /// Literal class or scalar parameter dtype must match (no promotion, Section 3 §9).
    fn scalar_matches(
        &mut self,
        func: &Function,
        s: &Scalar,
        dt: Dtype,
        span: SpanId,
    ) -> Option<()> {
        let found: String = match s {
            Scalar::Float(_) if dt.is_float() => return Some(()),
            Scalar::Int(_) if dt.is_int() => return Some(()),
            Scalar::Bool(_) if dt.is_bool() => return Some(()),
            Scalar::Float(x) => format!("the float literal `{x:?}`"),
            Scalar::Int(x) => format!("the integer literal `{x}`"),
            Scalar::Bool(x) => format!("the bool literal `{x}`"),
            Scalar::Param(i) => match func.sig.params.get(*i).map(|p| &p.ty) {
                Some(Type::Scalar(sd)) if *sd == dt => return Some(()),
                Some(t) => format!("`{}: {t}`", func.sig.params[*i].name),
                None => format!("parameter {i}"),
            },
        };
        self.err(
            Diagnostic::new(
                codes::DTYPE_MISMATCH,
                R_LITERAL,
                span,
                format!(
                    "expected a scalar of dtype {dt} (class {}), found {found}",
                    dt.class()
                ),
            )
            .help(scalar_help(func, s, dt)),
        );
        None
    }

    /// Two operands must share a dtype (no promotion, Section 3 §9). The
    /// error sits at the operand to cast, and its help casts it toward the
    /// dtype the context expects ([`Self::wanted_dtype`]), else toward `a`'s:
    /// with `a: bf16`, `b: f32` in a fn returning f32, cast `a`, not `b`.
    fn same_dtype(
        &mut self,
        a: (&TensorType, SpanId, &str),
        b: (&TensorType, SpanId, &str),
        inst: &Inst,
        rule: &'static str,
    ) -> Option<()> {
        if a.0.dtype == b.0.dtype {
            return Some(());
        }
        let wanted = self.wanted_dtype(inst);
        let (to, from) = if wanted == Some(b.0.dtype) {
            (b, a)
        } else {
            (a, b)
        };
        let why = match wanted {
            Some(w) if w == to.0.dtype && inst.annot.is_some() => ", as the `let` annotation says",
            Some(w) if w == to.0.dtype => ", the fn's declared return dtype",
            _ => "",
        };
        self.err(
            Diagnostic::new(
                codes::DTYPE_MISMATCH,
                rule,
                from.1,
                format!(
                    "expected dtype {} ({}'s{why}), found {} ({})",
                    to.0.dtype, to.2, from.0.dtype, from.2
                ),
            )
            .help(cast_help(
                from.0.dtype,
                to.0.dtype,
                &format!("{} operand", from.0.dtype),
            )),
        );
        None
    }

    /// The dtype the value of `inst` is expected to have: its `let`
    /// annotation's, else the fn's declared return dtype (Section 3 §7:
    /// checking is bidirectional; these are the boundaries it flows to).
    fn wanted_dtype(&self, inst: &Inst) -> Option<Dtype> {
        match (&inst.annot, &self.ret) {
            (Some(Type::Tensor(t)), _) => Some(t.dtype),
            (_, Some(Type::Tensor(t))) => Some(t.dtype),
            _ => None,
        }
    }

    /// Dimension-wise `≡` with a rank check; `first` names the reference operand.
    fn same_shape(
        &mut self,
        a: &TensorType,
        b: &TensorType,
        span: SpanId,
        rule: &'static str,
        code: &'static str,
        first: &str,
        skip_axis: Option<usize>,
    ) -> Option<()> {
        if a.rank() != b.rank() {
            self.err(
                Diagnostic::new(
                    codes::RANK_MISMATCH,
                    rule,
                    span,
                    format!("expected rank {} ({first} is {}), found rank {} ({})", a.rank(), shape_string(&a.shape), b.rank(), shape_string(&b.shape)),
                )
                .help("no implicit broadcasting (Section 2 §11): use `broadcast(x, [..])` or `reshape`"),
            );
            return None;
        }
        for (axis, (da, db)) in a.shape.iter().zip(&b.shape).enumerate() {
            if Some(axis) == skip_axis {
                continue;
            }
            match dims_equal(&self.ctx, da, db) {
                Ok(()) => {}
                Err(DimEq::Differs(cex)) => {
                    let mut d = Diagnostic::new(
                        code,
                        rule,
                        span,
                        format!("dimension {axis}: expected `{da}` ({first}), found `{db}`"),
                    )
                    .with_cex(Some(cex));
                    if code == codes::SHAPE_MISMATCH {
                        d = d.help(self.dim_mismatch_help(da, db));
                    }
                    self.err(d);
                    return None;
                }
                Err(DimEq::Unknown(goal)) => {
                    self.err(unknown_diag(rule, span, &goal));
                    return None;
                }
            }
        }
        Some(())
    }

    /// Broadcasting is the fix only when one side may be 1; two different
    /// constants (`768` vs `384`) mean one of the shapes is wrong.
    fn dim_mismatch_help(&self, da: &Dim, db: &Dim) -> String {
        let consts = self.const_map();
        let value = |d: &Dim| d.checked_subst(&consts).ok().and_then(|d| d.as_const());
        match (value(da), value(db)) {
            (Some(a), Some(b)) if a != 1 && b != 1 => format!(
                "the dims are the constants {a} and {b}, which differ: change one of the shapes (`broadcast` only stretches a dim of size 1)"
            ),
            _ => "shapes must be provably equal: no implicit broadcasting (Section 2 §11); use `broadcast` explicitly".to_string(),
        }
    }

    fn binary(&mut self, op: BinaryOp, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let a = self.tensor_arg(&operands[0], inst, 0, R_BINARY)?;
        let b = self.tensor_arg(&operands[1], inst, 1, R_BINARY)?;
        self.same_dtype(
            (&a, inst.arg_span(0), "the left operand"),
            (&b, inst.arg_span(1), "the right operand"),
            inst,
            R_BINARY,
        )?;
        if !op.admits(a.dtype) {
            self.err(class_diag(
                R_BINARY,
                inst.span,
                op.name(),
                op.class_name(),
                a.dtype,
            ));
            return None;
        }
        self.same_shape(
            &a,
            &b,
            inst.arg_span(1),
            R_BINARY,
            codes::SHAPE_MISMATCH,
            "the left operand",
            None,
        )?;
        let mut refs = a.refs.clone();
        refs.extend(b.refs.iter().filter(|p| !a.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: op.result_dtype(a.dtype),
            shape: a.shape,
            refs,
        }))
    }

    fn select(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let c = self.tensor_arg(&operands[0], inst, 0, R_SELECT)?;
        let a = self.tensor_arg(&operands[1], inst, 1, R_SELECT)?;
        let b = self.tensor_arg(&operands[2], inst, 2, R_SELECT)?;
        if c.dtype != Dtype::Bool {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_MISMATCH,
                    R_SELECT,
                    inst.arg_span(0),
                    format!("expected a bool condition, found dtype {}", c.dtype),
                )
                .help("compare to get a bool tensor, e.g. `gt(x, 0.0)`"),
            );
            return None;
        }
        self.same_dtype(
            (&a, inst.arg_span(1), "the `then` branch"),
            (&b, inst.arg_span(2), "the `else` branch"),
            inst,
            R_SELECT,
        )?;
        self.same_shape(
            &a,
            &c,
            inst.arg_span(0),
            R_SELECT,
            codes::SHAPE_MISMATCH,
            "the `then` branch",
            None,
        )?;
        self.same_shape(
            &a,
            &b,
            inst.arg_span(2),
            R_SELECT,
            codes::SHAPE_MISMATCH,
            "the `then` branch",
            None,
        )?;
        let mut refs = a.refs.clone();
        for p in b.refs.iter().chain(&c.refs) {
            if !refs.contains(p) {
                refs.push(p.clone());
            }
        }
        Some(Type::Tensor(TensorType { refs, ..a }))
    }

    fn matmul(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let a = self.tensor_arg(&operands[0], inst, 0, R_MATMUL)?;
        let b = self.tensor_arg(&operands[1], inst, 1, R_MATMUL)?;
        for (i, t) in [&a, &b].into_iter().enumerate() {
            if t.rank() < 2 {
                self.err(Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_MATMUL,
                    inst.arg_span(i),
                    format!(
                        "expected rank at least 2, found rank {} ({})",
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
        }
        self.same_dtype(
            (&a, inst.arg_span(0), "the left operand"),
            (&b, inst.arg_span(1), "the right operand"),
            inst,
            R_MATMUL,
        )?;
        if !a.dtype.is_numeric() {
            self.err(class_diag(
                R_MATMUL, inst.span, "matmul", "numeric", a.dtype,
            ));
            return None;
        }
        if a.rank() != b.rank() {
            self.err(
                Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_MATMUL,
                    inst.arg_span(1),
                    format!(
                        "expected rank {} (the left operand is {}), found rank {} ({})",
                        a.rank(),
                        shape_string(&a.shape),
                        b.rank(),
                        shape_string(&b.shape)
                    ),
                )
                .help("batch dims are matched one to one; use `broadcast` to add them"),
            );
            return None;
        }
        let n = a.rank();
        for i in 0..n - 2 {
            match dims_equal(&self.ctx, &a.shape[i], &b.shape[i]) {
                Ok(()) => {}
                Err(DimEq::Differs(cex)) => {
                    self.err(
                        Diagnostic::new(
                            codes::SHAPE_MISMATCH,
                            R_MATMUL,
                            inst.arg_span(1),
                            format!(
                                "batch dimension {i}: expected `{}`, found `{}`",
                                a.shape[i], b.shape[i]
                            ),
                        )
                        .with_cex(Some(cex)),
                    );
                    return None;
                }
                Err(DimEq::Unknown(goal)) => {
                    self.err(unknown_diag(R_MATMUL, inst.arg_span(1), &goal));
                    return None;
                }
            }
        }
        let (k, k2) = (&a.shape[n - 1], &b.shape[n - 2]);
        match dims_equal(&self.ctx, k, k2) {
            Ok(()) => {}
            Err(DimEq::Differs(cex)) => {
                self.err(
                    Diagnostic::new(
                        codes::CONTRACTION,
                        R_MATMUL,
                        inst.arg_span(1),
                        format!(
                            "contraction dimension mismatch: expected `{k}` (last dim of the left operand), found `{k2}` (dim {} of the right operand)",
                            n - 2
                        ),
                    )
                    .with_cex(Some(cex)),
                );
                return None;
            }
            Err(DimEq::Unknown(goal)) => {
                self.err(unknown_diag(R_MATMUL, inst.arg_span(1), &goal));
                return None;
            }
        }
        let mut shape = a.shape[..n - 1].to_vec();
        shape.push(b.shape[n - 1].clone());
        let mut refs = a.refs.clone();
        refs.extend(b.refs.iter().filter(|p| !a.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: a.dtype,
            shape,
            refs,
        }))
    }

    fn axes_ok(
        &mut self,
        axes: &[usize],
        rank: usize,
        inst: &Inst,
        rule: &'static str,
    ) -> Option<()> {
        match check_axes(axes, rank) {
            Ok(()) => Some(()),
            Err(e) => {
                self.err(Diagnostic::new(
                    codes::AXIS,
                    rule,
                    inst.attr_span(0),
                    e.to_string(),
                ));
                None
            }
        }
    }

    fn nonempty_axis(
        &mut self,
        d: &Dim,
        axis: usize,
        inst: &Inst,
        rule: &'static str,
        op: &str,
    ) -> Option<()> {
        let goal = Pred::ge(d.clone(), 1);
        self.prove(
            &goal,
            codes::EMPTY_REDUCTION,
            rule,
            inst.attr_span(0),
            || format!("`{op}` over axis {axis} needs a non-empty axis, but `{d}` may be 0"),
        )
        .then_some(())
        .or_else(|| {
            // `max`, `min`, `argmax`, `argmin` and `mean` have no value on an
            // empty axis, and `sum` computes something else: the fix is
            // the fact that the axis is non-empty, stated where Γ gets it.
            let help = self.nonempty_help(d);
            if let Some(last) = self.diags.last_mut() {
                if last.code == codes::EMPTY_REDUCTION {
                    last.help = Some(help);
                }
            }
            None
        })
    }

    /// How to make the axis `d` provably non-empty: a variable opted into
    /// `>= 0` loses the opt-in or gains `requires(V >= 1)`; a compound dim
    /// gets `requires(d >= 1)` over the signature's variables.
    fn nonempty_help(&self, d: &Dim) -> String {
        let opted = d.as_var().filter(|v| {
            self.ctx
                .vars
                .iter()
                .any(|cv| cv.name == *v && cv.allow_zero)
        });
        match opted {
            Some(v) => format!(
                "`{v}` is opted into 0 (`{v} >= 0`): add `requires({v} >= 1)`, or drop the opt-in so that the default `{v} >= 1` holds"
            ),
            None => format!("add `requires({d} >= 1)` so that the axis is never empty"),
        }
    }

    fn reshape(&mut self, shape: &[Dim], inst: &Inst, operands: &[Type]) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_RESHAPE)?;
        let mut ok = true;
        for (i, d) in shape.iter().enumerate() {
            ok &= self.dim_formed(d, inst.attr_span(i));
        }
        if !ok {
            return None;
        }
        // Module constants are known values: substitute them so that
        // `B * S * HIDDEN` and `B * S * HEADS * HEAD_DIM` compare as polynomials.
        let consts = self.const_map();
        let vspan = inst.attr_span(shape.len());
        let v1 = checked_volume(&t.shape).and_then(|v| v.checked_subst(&consts));
        let v1 = self.dim_op(v1, inst.arg_span(0))?;
        let v2 = checked_volume(shape).and_then(|v| v.checked_subst(&consts));
        let v2 = self.dim_op(v2, vspan)?;
        // §10 step 1: equal polynomials over the shape atoms prove it; step 2: Z3
        // with Γ's non-linear facts; step 3: an error naming both volumes.
        if v1 != v2
            && !self.volumes_match_modulo_division(&v1, &v2)
            && !self.volumes_match_modulo_const_division(&v1, &v2)
        {
            let goal = Pred::eq(v1.clone(), v2.clone());
            match solver::entails(&self.ctx, &goal) {
                Entailment::Valid => {}
                Entailment::Invalid(cex) => {
                    self.err(
                        Diagnostic::new(
                            codes::RESHAPE_VOLUME,
                            R_RESHAPE,
                            inst.attr_span(shape.len()),
                            format!("cannot prove the volumes equal: expected `{v1}` (the volume of {}), found `{v2}` (the volume of {})", shape_string(&t.shape), shape_string(shape)),
                        )
                        .with_cex(Some(cex))
                        .help(self.volume_help(&v1, &v2)),
                    );
                    return None;
                }
                Entailment::Unknown => {
                    self.err(unknown_diag(R_RESHAPE, inst.attr_span(shape.len()), &goal));
                    return None;
                }
            }
        }
        Some(Type::Tensor(TensorType {
            shape: shape.to_vec(),
            ..t
        }))
    }

    /// Help for volumes `v1` (operand) and `v2` (target) that differ: an
    /// axiom or `requires` can only help when `v1 == v2` can hold at all
    /// (`768 ≠ 384` cannot be fixed by an axiom: change the shape).
    fn volume_help(&self, v1: &Dim, v2: &Dim) -> String {
        if let (Some(a), Some(b)) = (v1.as_const(), v2.as_const()) {
            return format!(
                "the volumes are the constants {a} and {b}, and no `requires` or axiom can make constants equal: change the target shape so that its dims multiply to {a}"
            );
        }
        let eq = Pred::eq(v1.clone(), v2.clone());
        if matches!(
            solver::satisfiable(&self.ctx, std::slice::from_ref(&eq)),
            Satisfiability::Unsat
        ) {
            return format!(
                "`{v1} == {v2}` holds for no sizes the signature admits, so no `requires` or axiom can fix it: change the target shape so that its volume is `{v1}`"
            );
        }
        // A quotient that is not known exact rounds down (Section 2 §13):
        // its divisibility is the fact to state, not the volumes' equality.
        let mut inexact: Vec<String> = Vec::new();
        for atom in v1.divisions().into_iter().chain(v2.divisions()) {
            let Atom::Div(x, y) = &atom else { continue };
            let Ok(r) = x.checked_rem(y) else { continue };
            let fact = Pred::eq(r, 0);
            let known = self.ctx.facts.contains(&fact)
                || matches!(solver::entails(&self.ctx, &fact), Entailment::Valid);
            if !known && !inexact.contains(&fact.to_string()) {
                inexact.push(fact.to_string());
            }
        }
        if !inexact.is_empty() {
            return format!(
                "`/` in a dim rounds down: if the division is exact by design, add `requires({})`; otherwise change the target shape",
                inexact.join(", ")
            );
        }
        let linear = [v1, v2]
            .iter()
            .all(|d| d.terms().all(|(m, _)| m.len() <= 1));
        if linear {
            format!("if the volumes are equal by design, add `requires({eq})`; otherwise change the target shape")
        } else {
            format!("if the volumes are equal by design, state it as an axiom, `axiom({eq})` (re-checked at every call); otherwise change the target shape")
        }
    }

    /// §10 step 1 extended by §13: with `x % y == 0` in Γ, `(x / y) * y` is `x`.
    /// Rewrites such products in both volumes and compares the polynomials.
    fn volumes_match_modulo_division(&self, v1: &Dim, v2: &Dim) -> bool {
        let Ok(diff) = v1.checked_sub(v2) else {
            return false;
        };
        let mut map = BTreeMap::new();
        let mut divs = diff.variable_divisions();
        for d in v1
            .variable_divisions()
            .into_iter()
            .chain(v2.variable_divisions())
        {
            if !divs.contains(&d) {
                divs.push(d);
            }
        }
        for atom in &divs {
            if let Atom::Div(x, y) = atom {
                let Ok(r) = x.checked_rem(y) else { continue };
                let fact = Pred::eq(r, 0);
                if self.ctx.facts.contains(&fact) || self.ctx.axioms.contains(&fact) {
                    if let Some(v) = y.as_var() {
                        map.insert(atom.clone(), (v.to_string(), (**x).clone()));
                    }
                }
            }
        }
        if map.is_empty() {
            return false;
        }
        // Substitute y := x / q for each justified quotient q = x / y by treating
        // q·y as x: expand each monomial, cancelling a y against a q.
        let rewrite = |d: &Dim| -> Result<Dim, DimError> {
            let mut out = Dim::c(0);
            for (m, c) in d.terms() {
                let mut atoms: Vec<Atom> = m.to_vec();
                let mut extra = Dim::c(1);
                loop {
                    let hit = atoms.iter().position(|a| {
                        map.get(a)
                            .is_some_and(|(y, _)| atoms.contains(&Atom::Var(y.clone())))
                    });
                    let Some(qi) = hit else { break };
                    let q = atoms.remove(qi);
                    let (y, x) = &map[&q];
                    if let Some(yi) = atoms.iter().position(|a| *a == Atom::Var(y.clone())) {
                        atoms.remove(yi);
                    }
                    extra = extra.checked_mul(x)?;
                }
                let mut term = extra.checked_scale(c)?;
                for a in atoms {
                    term = term.checked_mul(&atom_dim(a)?)?;
                }
                out = out.checked_add(&term)?;
            }
            Ok(out)
        };
        matches!((rewrite(v1), rewrite(v2)), (Ok(a), Ok(b)) if a == b)
    }

    /// §10 step 1 extended to constant divisors (§13): when Γ proves
    /// `x % k == 0`, the quotient `q = x / k` satisfies `k·q = x`, so after
    /// scaling both volumes by `k^p` (p the highest power of q) every
    /// monomial `c·q^j·m` becomes `(c·k^p / k^j)·x^j·m`. Equal polynomials then
    /// prove the volumes equal (scaling by `k^p ≠ 0` is injective); this keeps
    /// `[E, 2, E / 2]` from `[E, E]` out of non-linear Z3 queries.
    fn volumes_match_modulo_const_division(&mut self, v1: &Dim, v2: &Dim) -> bool {
        let mut atoms: Vec<(Atom, Dim, i64)> = Vec::new();
        for d in [v1, v2] {
            for (m, _) in d.terms() {
                for a in m {
                    if let Atom::Div(x, y) = a {
                        if let Some(k) = y.as_const().filter(|k| *k >= 2) {
                            if !atoms.iter().any(|(b, ..)| b == a) {
                                atoms.push((a.clone(), (**x).clone(), k));
                            }
                        }
                    }
                }
            }
        }
        let (mut a, mut b) = (v1.clone(), v2.clone());
        let mut changed = false;
        for (q, x, k) in atoms {
            let Ok(r) = x.checked_rem(&Dim::c(k)) else {
                continue;
            };
            if !matches!(
                solver::entails(&self.ctx, &Pred::eq(r, 0)),
                Entailment::Valid
            ) {
                continue;
            }
            match (
                cancel_quotient(&a, &q, &x, k),
                cancel_quotient(&b, &q, &x, k),
            ) {
                (Ok(na), Ok(nb)) => {
                    let p = power_of(&a, &q).max(power_of(&b, &q));
                    let (pa, pb) = (power_of(&a, &q), power_of(&b, &q));
                    // Bring both sides to the same scale k^p.
                    let sa = k
                        .checked_pow((p - pa) as u32)
                        .and_then(|s| na.checked_scale(s).ok());
                    let sb = k
                        .checked_pow((p - pb) as u32)
                        .and_then(|s| nb.checked_scale(s).ok());
                    let (Some(sa), Some(sb)) = (sa, sb) else {
                        return false;
                    };
                    a = sa;
                    b = sb;
                    changed = true;
                }
                _ => return false,
            }
        }
        changed && a == b
    }

    fn broadcast(&mut self, shape: &[Dim], inst: &Inst, operands: &[Type]) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_BROADCAST)?;
        let mut ok = true;
        for (i, d) in shape.iter().enumerate() {
            ok &= self.dim_formed(d, inst.attr_span(i));
        }
        if !ok {
            return None;
        }
        if t.rank() > shape.len() {
            self.err(Diagnostic::new(
                codes::RANK_MISMATCH,
                R_BROADCAST,
                inst.attr_span(shape.len()),
                format!(
                    "expected a target of rank at least {} (the operand is {}), found rank {}",
                    t.rank(),
                    shape_string(&t.shape),
                    shape.len()
                ),
            ));
            return None;
        }
        let off = shape.len() - t.rank();
        for (i, d) in t.shape.iter().enumerate() {
            let target = &shape[off + i];
            if d == target || d.as_const() == Some(1) {
                continue;
            }
            let eq = Pred::eq(d.clone(), target.clone());
            let one = Pred::eq(d.clone(), 1);
            match (
                solver::entails(&self.ctx, &eq),
                solver::entails(&self.ctx, &one),
            ) {
                (Entailment::Valid, _) | (_, Entailment::Valid) => {}
                (Entailment::Unknown, _) | (_, Entailment::Unknown) => {
                    self.err(unknown_diag(R_BROADCAST, inst.attr_span(off + i), &eq));
                    return None;
                }
                (Entailment::Invalid(cex), Entailment::Invalid(_)) => {
                    // Show an assignment that breaks both `d = 1` and `d = d'`
                    // (the eq witness alone may have d = 1, where broadcasting
                    // is fine); when none exists, fall back to the eq witness.
                    let either = Pred::or([eq.clone(), one.clone()]);
                    let cex = match solver::entails(&self.ctx, &either) {
                        Entailment::Invalid(both) => both,
                        _ => cex,
                    };
                    self.err(
                        Diagnostic::new(
                            codes::BROADCAST,
                            R_BROADCAST,
                            inst.attr_span(off + i),
                            format!("cannot broadcast dimension {i} of the operand: expected `1` or `{target}`, found `{d}`"),
                        )
                        .with_cex(Some(cex)),
                    );
                    return None;
                }
            }
        }
        Some(Type::Tensor(TensorType {
            shape: shape.to_vec(),
            ..t
        }))
    }

    fn slice(
        &mut self,
        axis: usize,
        start: &Dim,
        stop: &Dim,
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let t = self.tensor_arg(&operands[0], inst, 0, R_SLICE)?;
        self.axes_ok(&[axis], t.rank(), inst, R_SLICE)?;
        let (s_span, e_span) = (inst.attr_span(1), inst.attr_span(2));
        for (d, sp) in [(start, s_span), (stop, e_span)] {
            if !self.dim_wf(d, sp) || !self.linear_or_error(d, sp) {
                return None;
            }
        }
        let d = t.shape[axis].clone();
        let zero = Dim::c(0);
        let checks = [
            (
                (start, &zero),
                s_span,
                format!("start `{start}` may be negative"),
            ),
            (
                (stop, start),
                e_span,
                format!("stop `{stop}` may be before start `{start}`"),
            ),
            (
                (&d, stop),
                e_span,
                format!("stop `{stop}` may exceed the dimension `{d}` of axis {axis}"),
            ),
        ];
        for ((hi, lo), span, msg) in checks {
            if !self.prove_cmp(
                hi,
                CmpOp::Ge,
                lo,
                codes::SLICE_BOUNDS,
                R_SLICE,
                span,
                || msg,
            ) {
                return None;
            }
        }
        let len = self.dim_op(stop.checked_sub(start), e_span)?;
        let mut vs = len.vars();
        vs.extend(d.vars());
        let least = if self
            .ctx
            .vars
            .iter()
            .any(|v| v.allow_zero && vs.contains(&v.name))
        {
            0
        } else {
            1
        };
        if least == 1 {
            let one = Dim::c(1);
            if !self.prove_cmp(&len, CmpOp::Ge, &one, codes::SLICE_BOUNDS, R_SLICE, e_span, || {
                format!("the slice `{start}..{stop}` may be empty; its length `{len}` must be at least 1")
            }) {
                return None;
            }
        }
        let mut shape = t.shape.clone();
        shape[axis] = len;
        Some(Type::Tensor(TensorType { shape, ..t }))
    }

    fn concat(&mut self, axis: usize, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let mut ts = Vec::new();
        for (i, o) in operands.iter().enumerate() {
            ts.push(self.tensor_arg(o, inst, i, R_CONCAT)?);
        }
        let first = ts[0].clone();
        self.axes_ok(&[axis], first.rank(), inst, R_CONCAT)?;
        let mut total = first.shape[axis].clone();
        let mut refs = first.refs.clone();
        for (i, t) in ts.iter().enumerate().skip(1) {
            let nth = format!("operand {i}");
            self.same_dtype(
                (&first, inst.arg_span(0), "the first operand"),
                (t, inst.arg_span(i), &nth),
                inst,
                R_CONCAT,
            )?;
            if t.rank() != first.rank() {
                self.err(Diagnostic::new(
                    codes::CONCAT,
                    R_CONCAT,
                    inst.arg_span(i),
                    format!(
                        "expected rank {} (the first operand is {}), found rank {} ({})",
                        first.rank(),
                        shape_string(&first.shape),
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
            self.same_shape(
                &first,
                t,
                inst.arg_span(i),
                R_CONCAT,
                codes::CONCAT,
                "the first operand",
                Some(axis),
            )?;
            total = self.dim_op(total.checked_add(&t.shape[axis]), inst.arg_span(i))?;
            refs.extend(t.refs.iter().filter(|p| !first.refs.contains(p)).cloned());
        }
        let mut shape = first.shape.clone();
        shape[axis] = total;
        Some(Type::Tensor(TensorType {
            dtype: first.dtype,
            shape,
            refs,
        }))
    }

    /// Section 2 §17: unify, discharge `requires` and argument subtyping.
    fn call(&mut self, name: &str, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let Some(sig) = self.sigs.and_then(|s| s.get(name)).cloned() else {
            self.err(
                Diagnostic::new(
                    codes::UNKNOWN_NAME,
                    R_CALL,
                    inst.span,
                    format!("no tensor fn `{name}` is visible here"),
                )
                .help("calls between tensor fns are checked inside one `#[tensor_module]`"),
            );
            return None;
        };
        if sig.params.len() != operands.len() {
            self.err(Diagnostic::new(
                codes::CALL,
                R_CALL,
                inst.span,
                format!(
                    "`{name}` takes {} arguments, found {}",
                    sig.params.len(),
                    operands.len()
                ),
            ));
            return None;
        }
        let callee_ctx = signature_ctx(&sig);
        let theta = self.unify_args(name, &sig, operands, inst)?;
        // Each argument against its parameter by subtyping (Section 3 §3.3).
        for (i, (p, a)) in sig.params.iter().zip(operands).enumerate() {
            let expected = self.type_op(p.ty.checked_subst(&theta), inst.arg_span(i))?;
            if let Err(e) = subtype(&self.ctx, a, &expected) {
                let mut d = sub_diag(
                    &e,
                    inst.arg_span(i),
                    &format!("parameter `{}` of `{name}`", p.name),
                    a,
                    &expected,
                );
                d.rule = R_CALL;
                if !e.is_unknown() {
                    d.code = codes::CALL;
                }
                self.err(d);
                return None;
            }
        }
        self.call_obligations(name, &sig, &callee_ctx, &theta, inst)?;
        self.type_op(sig.ret.checked_subst(&theta), inst.span)
    }

    /// Section 2 §17 unification: each bare-variable dim of a parameter
    /// binds from the argument (θ); dtype, rank and kind must match; every
    /// callee variable must end up bound. Everything else is an obligation.
    fn unify_args(
        &mut self,
        name: &str,
        sig: &Signature,
        operands: &[Type],
        inst: &Inst,
    ) -> Option<BTreeMap<String, Dim>> {
        let mut theta: BTreeMap<String, Dim> = BTreeMap::new();
        for (n, v) in &sig.consts {
            theta.insert(n.clone(), Dim::c(*v));
        }
        for (i, (p, a)) in sig.params.iter().zip(operands).enumerate() {
            match (&p.ty, a) {
                (Type::Tensor(pt), Type::Tensor(at)) => {
                    self.unify_tensor_arg(name, i, &p.name, (pt, at), inst, &mut theta)?
                }
                (Type::Scalar(pd), Type::Scalar(ad)) if pd == ad => {}
                // A dim argument binds like one tensor dim (Section 1 §6 site 1).
                (Type::Dim(pd), Type::Dim(ad)) => {
                    if let Some(v) = pd.as_var() {
                        theta.entry(v.to_string()).or_insert_with(|| ad.clone());
                    }
                }
                (pt, at) if matches!(pt, Type::Dim(_)) || matches!(at, Type::Dim(_)) => {
                    self.err(
                        Diagnostic::new(
                            codes::KIND_MISMATCH,
                            R_CALL,
                            inst.arg_span(i),
                            format!(
                                "argument `{}` of `{name}`: expected a {} (`{pt}`), found a {} (`{at}`)",
                                p.name,
                                pt.kind_name(),
                                at.kind_name()
                            ),
                        )
                        .help(if matches!(pt, Type::Dim(_)) {
                            "a dim parameter takes a dim: a shape variable, a module constant, an integer literal or a dim expression such as `2 * H`"
                        } else {
                            "a dim is not a tensor: pass a tensor here, or make the parameter a `Dim![…]`"
                        }),
                    );
                    return None;
                }
                (pt, at) => {
                    self.err(Diagnostic::new(
                        codes::KIND_MISMATCH,
                        R_CALL,
                        inst.arg_span(i),
                        format!(
                            "argument `{}` of `{name}`: expected {pt}, found {at}",
                            p.name
                        ),
                    ));
                    return None;
                }
            }
        }
        for v in &sig.vars {
            if !theta.contains_key(&v.name) {
                self.err(Diagnostic::new(
                    codes::CALL,
                    R_CALL,
                    inst.span,
                    format!(
                        "cannot infer shape variable `{}` of `{name}` from the arguments",
                        v.name
                    ),
                ));
                return None;
            }
        }
        Some(theta)
    }

    /// One tensor argument against its parameter: dtype, rank, then its
    /// bare-variable dims into θ.
    fn unify_tensor_arg(
        &mut self,
        name: &str,
        i: usize,
        param: &str,
        (pt, at): (&TensorType, &TensorType),
        inst: &Inst,
        theta: &mut BTreeMap<String, Dim>,
    ) -> Option<()> {
        if pt.dtype != at.dtype {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_MISMATCH,
                    R_CALL,
                    inst.arg_span(i),
                    format!(
                        "argument `{}` of `{name}`: expected dtype {}, found {}",
                        param, pt.dtype, at.dtype
                    ),
                )
                .help(cast_help(
                    at.dtype,
                    pt.dtype,
                    &format!("{} argument", at.dtype),
                )),
            );
            return None;
        }
        if pt.rank() != at.rank() {
            self.err(Diagnostic::new(
                codes::RANK_MISMATCH,
                R_CALL,
                inst.arg_span(i),
                format!(
                    "argument `{}` of `{name}`: expected rank {} ({}), found rank {} ({})",
                    param,
                    pt.rank(),
                    pt,
                    at.rank(),
                    shape_string(&at.shape)
                ),
            ));
            return None;
        }
        for (pd, ad) in pt.shape.iter().zip(&at.shape) {
            if let Some(v) = pd.as_var() {
                if !theta.contains_key(v) {
                    theta.insert(v.to_string(), ad.clone());
                }
            }
        }
        Some(())
    }

    /// Section 2 §17 last step: the callee's §16 defaults and its `requires`,
    /// instantiated by θ, must follow from the caller's facts.
    fn call_obligations(
        &mut self,
        name: &str,
        sig: &Signature,
        callee_ctx: &Ctx,
        theta: &BTreeMap<String, Dim>,
        inst: &Inst,
    ) -> Option<()> {
        // The callee's defaults (α ≥ 1 unless opted in) and its requires.
        let defaults = callee_ctx
            .vars
            .iter()
            .filter(|v| !v.fresh)
            .map(|v| Pred::ge(Dim::var(v.name.clone()), if v.allow_zero { 0 } else { 1 }));
        let substituted: Result<Vec<Pred>, DimError> = defaults
            .chain(sig.requires.iter().map(|r| r.node.clone()))
            .map(|p| p.checked_subst(theta))
            .collect();
        let obligations = match substituted {
            Ok(o) => o,
            Err(e) => {
                self.err(dim_error_diag(&e, inst.span));
                return None;
            }
        };
        for (k, goal) in obligations.iter().enumerate() {
            let orig = if k >= callee_ctx.vars.len() {
                sig.requires[k - callee_ctx.vars.len()].node.clone()
            } else {
                let v = &callee_ctx.vars[k];
                Pred::ge(Dim::var(v.name.clone()), if v.allow_zero { 0 } else { 1 })
            };
            let fixed = self.is_fixed(goal);
            if !self.prove(goal, codes::CALL, R_CALL, inst.span, || {
                if fixed {
                    // Folded, `768 % 5 == 0` would read `3 == 0`: show the values.
                    let vals: Vec<String> = orig
                        .vars()
                        .iter()
                        .filter_map(|v| theta.get(v).map(|d| format!("{v} = {d}")))
                        .collect();
                    format!("`{name}` requires `{orig}`, which is false for these arguments ({})", vals.join(", "))
                } else {
                    format!("`{name}` requires `{orig}`, i.e. `{goal}` here, which the caller's facts do not imply")
                }
            }) {
                let help = self.requires_help(goal, &orig);
                if let Some(last) = self.diags.last_mut() {
                    last.help = Some(help);
                }
                return None;
            }
        }
        Some(())
    }

    /// Does `goal` mention no shape variable once module constants are known?
    fn is_fixed(&self, goal: &Pred) -> bool {
        goal.checked_subst(&self.const_map())
            .map(|g| g.vars().is_empty())
            .unwrap_or(false)
    }

    /// A callee's `requires` the call does not meet: the caller can state it
    /// only if it still mentions the caller's variables; once the arguments
    /// fix every size (`768 % 5 == 0`), only other shapes can help.
    fn requires_help(&self, goal: &Pred, orig: &Pred) -> String {
        if self.is_fixed(goal) {
            format!("the arguments' shapes are constants here, so no `requires` or axiom of the caller can help: pass tensors whose dims satisfy `{orig}`")
        } else {
            format!(
                "add `requires({goal})` to the caller, or pass tensors whose dims satisfy `{orig}`"
            )
        }
    }

    /// A checked type substitution: its value, or an E0106/E0107 error.
    fn type_op(&mut self, r: Result<Type, DimError>, span: SpanId) -> Option<Type> {
        match r {
            Ok(t) => Some(t),
            Err(e) => {
                self.err(dim_error_diag(&e, span));
                None
            }
        }
    }
}

/// How to make scalar `s` meet a tensor of dtype `dt`: the literal in the
/// tensor's class, or the parameter declared with the tensor's dtype.
fn scalar_help(func: &Function, s: &Scalar, dt: Dtype) -> String {
    let rule = "scalars take the tensor's dtype exactly: no implicit promotion (Section 3 §9)";
    match s {
        Scalar::Int(x) if dt.is_float() => format!("write the literal as a float, `{x}.0`: {rule}"),
        Scalar::Param(i) => match func.sig.params.get(*i) {
            Some(p) => format!("declare `{}: {dt}`: {rule}", p.name),
            None => rule.to_string(),
        },
        _ => rule.to_string(),
    }
}

/// One predicate a signature states, where, and whose it is.
struct SigPred {
    pred: Pred,
    span: SpanId,
    /// The tensor parameter it refines; `None` for `requires` and axioms.
    owner: Option<String>,
    axiom: bool,
}

/// Every predicate of a signature that Γ assumes (Section 1 §4): the
/// parameters' refinements, `requires`, then axioms, in source order.
fn sig_preds(sig: &Signature) -> Vec<SigPred> {
    let mut out = Vec::new();
    for p in &sig.params {
        if let Type::Tensor(t) = &p.ty {
            for (i, r) in t.refs.iter().enumerate() {
                out.push(SigPred {
                    pred: r.clone(),
                    span: p.ref_spans.get(i).copied().unwrap_or(p.span),
                    owner: Some(p.name.clone()),
                    axiom: false,
                });
            }
        }
    }
    for (list, axiom) in [(&sig.requires, false), (&sig.axioms, true)] {
        for r in list {
            out.push(SigPred {
                pred: r.node.clone(),
                span: r.span,
                owner: None,
                axiom,
            });
        }
    }
    out
}

fn atom_dim(a: Atom) -> Result<Dim, DimError> {
    match a {
        Atom::Var(v) => Ok(Dim::var(v)),
        Atom::Div(x, y) => x.checked_div(&y),
        Atom::Mod(x, y) => x.checked_rem(&y),
    }
}

/// The highest power of atom `q` in any monomial of `d`.
fn power_of(d: &Dim, q: &Atom) -> usize {
    d.terms()
        .map(|(m, _)| m.iter().filter(|a| *a == q).count())
        .max()
        .unwrap_or(0)
}

/// `k^p · d` with every `q^j` (q = x / k) replaced by `x^j / k^j`, p the
/// highest power of q in `d`: exact, since each coefficient is first scaled
/// by `k^p`. Overflow is an error (the caller then falls back to Z3).
fn cancel_quotient(d: &Dim, q: &Atom, x: &Dim, k: i64) -> Result<Dim, DimError> {
    let p = power_of(d, q) as u32;
    let over = || DimError::Overflow(format!("{d}"));
    let kp = k.checked_pow(p).ok_or_else(over)?;
    let mut out = Dim::c(0);
    for (m, c) in d.terms() {
        let j = m.iter().filter(|a| *a == q).count() as u32;
        let coeff = c.checked_mul(kp).ok_or_else(over)? / k.checked_pow(j).ok_or_else(over)?;
        let mut term = Dim::c(coeff);
        for a in m.iter().filter(|a| *a != q) {
            term = term.checked_mul(&atom_dim(a.clone())?)?;
        }
        for _ in 0..j {
            term = term.checked_mul(x)?;
        }
        out = out.checked_add(&term)?;
    }
    Ok(out)
}

/// An E0106/E0107 diagnostic for a dim operation that has no result.
fn dim_error_diag(e: &DimError, span: SpanId) -> Diagnostic {
    let d = Diagnostic::new(e.code(), e.rule(), span, e.to_string()).note(e.why());
    match e {
        DimError::Overflow(_) => d.help("use smaller sizes, or split the dim into several axes"),
        DimError::DivByZero(_) => d,
    }
}

fn reduced(t: &TensorType, axes: &[usize], keepdims: bool, dtype: Dtype) -> TensorType {
    let shape = crate::types::reduced_shape(&t.shape, axes, keepdims);
    TensorType {
        dtype,
        shape,
        refs: t.refs.clone(),
    }
}

fn class_diag(rule: &'static str, span: SpanId, op: &str, class: &str, found: Dtype) -> Diagnostic {
    Diagnostic::new(
        codes::DTYPE_CLASS,
        rule,
        span,
        format!(
            "`{op}` expects a {class} tensor, found dtype {found} (class {})",
            found.class()
        ),
    )
    .help("insert an explicit `.cast::<..>()` (Section 3 §9: no implicit promotion)")
}

fn unknown_diag(rule: &'static str, span: SpanId, goal: &Pred) -> Diagnostic {
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

fn sub_diag(
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
fn cast_help(from: Dtype, to: Dtype, what: &str) -> String {
    debug_assert_ne!(from, to);
    format!("cast the {what} to {to}: `cast::<{to}>(…)` (no implicit promotion, Section 3 §9)")
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
    (0..func.sig.params.len() as u32).map(Value).collect()
}
