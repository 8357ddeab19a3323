//! Signature formation (Section 1 §4): every name bound, every shape
//! variable inferable at a call (Section 2 §17), each refinement and
//! `requires` well formed, and the refinement set satisfiable, with a
//! minimal unsatisfiable core underlined when it is not.

use std::collections::BTreeSet;

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::invert;
use crate::ir::Signature;
use crate::pred::Pred;
use crate::solver::{self, Entailment, Satisfiability};
use crate::types::Type;

use super::{Checker, R_FORM, R_QUANT};

impl Checker<'_> {
    pub(super) fn check_sig(&mut self, sig: &Signature) {
        let mut base = self.ctx.clone();
        let divides = |p: &Pred| p.dims().iter().any(|d| !d.variable_divisions().is_empty());
        base.facts.retain(|p| !divides(p));
        base.axioms.retain(|p| !divides(p));
        self.divisor_ctx = Some(base);
        self.check_sig_formed(sig);
        self.divisor_ctx = None;
    }

    /// Every shape variable of a signature must be inferable at a call:
    /// a bare parameter dim binds it (Section 2 §17), and so does a compound
    /// dim invertible in it once its other variables are bound (Section 2
    /// §18, last bullet: `8 * F`, `F + 2`, `K / 32` with `K % 32 == 0`).
    /// Any other variable would be accepted here and then make every call
    /// fail with an unbound variable: an accepted signature must be callable.
    fn check_vars_inferable(&mut self, sig: &Signature) {
        let consts = self.const_map();
        // Tensor dims and dim parameters (`heads: Dim![H]`) alike, with
        // module constants folded so `N_EXPERTS * F` reads `8 * F`.
        let dims: Vec<(Dim, Dim, SpanId)> = sig
            .params
            .iter()
            .flat_map(|p| {
                p.ty.param_dims()
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        let folded = d.checked_subst(&consts).unwrap_or_else(|_| d.clone());
                        (
                            d.clone(),
                            folded,
                            p.dim_spans.get(i).copied().unwrap_or(p.span),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut bound: BTreeSet<String> = dims
            .iter()
            .filter_map(|(_, d, _)| d.as_var().map(str::to_string))
            .chain(sig.consts.iter().map(|(c, _)| c.clone()))
            .collect();
        // Bind through compound dims until nothing changes (`F + G` after
        // `G / 2` bound `G`).
        let mut progress = true;
        while progress {
            progress = false;
            for v in &sig.vars {
                if bound.contains(&v.name) {
                    continue;
                }
                let binds = dims.iter().any(|(_, d, _)| {
                    d.vars().contains(&v.name) && self.inverts(d, &v.name, &bound).is_ok()
                });
                if binds {
                    bound.insert(v.name.clone());
                    progress = true;
                }
            }
        }
        for v in &sig.vars {
            if bound.contains(&v.name) {
                continue;
            }
            match dims.iter().find(|(_, d, _)| d.vars().contains(&v.name)) {
                Some((orig, d, span)) => {
                    let why = self.inverts(d, &v.name, &bound).err().unwrap_or_default();
                    self.err(not_inferable(&v.name, orig, &why, *span));
                }
                None => self.err(in_no_param(sig, &v.name)),
            }
        }
    }

    /// Can `d` bind `var` at a call, given the variables in `bound`? The
    /// reason it cannot otherwise. A quotient `x / k` inverts only when the
    /// signature implies `x % k == 0`: else `x` is known only up to `k`
    /// values, and the body could tell them apart.
    fn inverts(&self, d: &Dim, var: &str, bound: &BTreeSet<String>) -> Result<(), String> {
        let layers = invert::layers(d, var, &|x| bound.contains(x)).map_err(|e| e.reason(var))?;
        for (x, k) in layers.iter().filter_map(|l| l.quotient.as_ref()) {
            let exact = x
                .checked_rem(&Dim::c(*k))
                .map(|r| Pred::eq(r, 0))
                .map_err(|e| e.to_string())?;
            if !matches!(solver::entails(&self.ctx, &exact), Entailment::Valid) {
                let q = x.checked_div(&Dim::c(*k)).map_err(|e| e.to_string())?;
                return Err(format!(
                    "`{q}` gives `{x}` only up to a remainder, and the signature does not imply `{exact}`"
                ));
            }
        }
        Ok(())
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
            if let Type::Scalar(dt) = &p.ty {
                if dt.is_quantized() {
                    self.err(Diagnostic::new(
                        codes::DTYPE_CLASS,
                        R_QUANT,
                        p.span,
                        format!("a scalar of the block-quantized {dt}: a quantized format has blocks, not scalars (Section 2 §18)"),
                    ));
                }
            }
            let mut formed = true;
            for (i, d) in p.ty.param_dims().iter().enumerate() {
                let span = p.dim_spans.get(i).copied().unwrap_or(p.span);
                formed &= self.dim_formed(d, span);
            }
            if let (true, Type::Tensor(t)) = (formed, &p.ty) {
                let span = p.dim_spans.last().copied().unwrap_or(p.span);
                self.quantized_formed(t, span);
            }
        }
        if let Type::Tensor(t) = &sig.ret {
            let mut formed = true;
            for (i, d) in t.shape.iter().enumerate() {
                let span = sig.ret_dim_spans.get(i).copied().unwrap_or(sig.ret_span);
                formed &= self.dim_formed(d, span);
            }
            if formed {
                let span = sig.ret_dim_spans.last().copied().unwrap_or(sig.ret_span);
                self.quantized_formed(t, span);
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
}

/// E0102 for a variable whose only parameter dims cannot bind it.
fn not_inferable(var: &str, d: &Dim, why: &str, span: SpanId) -> Diagnostic {
    Diagnostic::new(
        codes::UNBOUND_VAR,
        R_FORM,
        span,
        format!("shape variable `{var}` occurs only inside the compound dim `{d}`, which cannot bind it at a call: {why}"),
    )
    .help(format!(
        "give `{var}` a dim of its own in some parameter, or write the dim so that it determines `{var}` (`c * {var}`, `{var} + k`, `{var} - k`, or `{var} / c` with `requires({var} % c == 0)`: Section 2 §18)"
    ))
}

/// E0102 for a variable in no parameter's dims. `names_bound` cannot
/// report it: Γ binds every name of `sig.vars`, and a builder
/// (`FnBuilder::declare`, `returns`) puts names there that only `requires`,
/// a refinement, an axiom or the return type mention. Section 2 §17 binds a
/// call's σ from the parameters alone, so no call could bind it.
fn in_no_param(sig: &Signature, var: &str) -> Diagnostic {
    Diagnostic::new(
        codes::UNBOUND_VAR,
        R_FORM,
        first_mention(sig, var),
        format!("shape variable `{var}` occurs in no parameter's dims, so a call cannot bind it"),
    )
    .help(format!(
        "bind `{var}` through a tensor parameter's dim or a dim parameter (`Dim![{var}]`), or remove it"
    ))
}

/// Where a signature first mentions `var` outside its parameters' dims:
/// a refinement, a `requires`, an axiom, the return type; else its name.
fn first_mention(sig: &Signature, var: &str) -> SpanId {
    let names = |p: &Pred| p.vars().contains(var);
    for p in &sig.params {
        if let Type::Tensor(t) = &p.ty {
            if let Some(i) = t.refs.iter().position(names) {
                return p.ref_spans.get(i).copied().unwrap_or(p.span);
            }
        }
    }
    if let Some(r) = sig
        .requires
        .iter()
        .chain(&sig.axioms)
        .find(|r| names(&r.node))
    {
        return r.span;
    }
    if let Type::Tensor(t) = &sig.ret {
        if let Some(i) = t.shape.iter().position(|d| d.vars().contains(var)) {
            return sig.ret_dim_spans.get(i).copied().unwrap_or(sig.ret_span);
        }
    }
    sig.span
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
