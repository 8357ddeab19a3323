//! Calls between tensor fns (Section 2 §17): unification of the callee's
//! bare-variable dims (θ), each argument against its parameter by subtyping
//! (Section 3 §3.3), then the callee's §16 defaults and `requires` as
//! obligations on the caller.

use std::collections::BTreeMap;

use crate::ctx::Ctx;
use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::{Dim, DimError};
use crate::invert;
use crate::ir::{Inst, Signature};
use crate::pred::{CmpOp, Pred};
use crate::subtype::subtype;
use crate::types::{shape_string, TensorType, Type};

use super::diags::{cast_help, dim_error_diag, sub_diag};
use super::{signature_ctx, Checker, R_CALL};

impl Checker<'_> {
    /// Section 2 §17: unify, discharge `requires` and argument subtyping.
    pub(super) fn call(&mut self, name: &str, inst: &Inst, operands: &[Type]) -> Option<Type> {
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
        self.infer_compound(name, sig, operands, inst, &mut theta)?;
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

    /// Section 2 §18 (last bullet): a callee variable that no bare dim
    /// bound is solved from a compound parameter dim invertible in it once
    /// that dim's other variables are in θ (`4 * F` against the caller's
    /// `8 * E` gives `F = 2 * E`). Each division the solution makes must be
    /// exact: an obligation on the caller, with a counterexample when it
    /// fails. The range (`F ≥ 1`) is the callee's default, checked with the
    /// other obligations; that the dim then matches is argument subtyping.
    fn infer_compound(
        &mut self,
        name: &str,
        sig: &Signature,
        operands: &[Type],
        inst: &Inst,
        theta: &mut BTreeMap<String, Dim>,
    ) -> Option<()> {
        let consts: BTreeMap<String, Dim> = sig
            .consts
            .iter()
            .map(|(n, v)| (n.clone(), Dim::c(*v)))
            .collect();
        let pairs = compound_pairs(sig, operands);
        let mut progress = true;
        while progress {
            progress = false;
            for &(i, param, pd, ad) in &pairs {
                // Module constants folded, so `N_EXPERTS * F` is `8 * F`.
                let Ok(folded) = pd.checked_subst(&consts) else {
                    continue;
                };
                let open: Vec<String> = folded
                    .vars()
                    .into_iter()
                    .filter(|v| !theta.contains_key(v))
                    .collect();
                let [var] = open.as_slice() else { continue };
                let Ok(layers) = invert::layers(&folded, var, &|x| theta.contains_key(x)) else {
                    continue;
                };
                let span = inst.arg_span(i);
                let n = self.dim_op(ad.checked_subst(&self.const_map()), span)?;
                let solved = match invert::solve(&layers, &n, theta) {
                    Ok(s) => s,
                    Err(e) => {
                        self.err(dim_error_diag(&e, span));
                        return None;
                    }
                };
                self.prove_multiples(&solved.multiples, span, |e, c| {
                    format!("argument `{param}` of `{name}`: binding `{var}` from the dim `{ad}` through the parameter's `{pd}` needs `{e}` to be a multiple of {c}")
                })?;
                theta.insert(var.clone(), solved.value);
                progress = true;
            }
        }
        Some(())
    }

    /// Each `(e, c)`: `e % c == 0` under the caller's facts, or E0401 with
    /// the counterexample and the `requires` that would make it hold.
    fn prove_multiples(
        &mut self,
        multiples: &[(Dim, i64)],
        span: SpanId,
        msg: impl Fn(&Dim, i64) -> String,
    ) -> Option<()> {
        for (e, c) in multiples {
            let rem = self.dim_op(e.checked_rem(&Dim::c(*c)), span)?;
            let ok = self.prove_cmp(
                &rem,
                CmpOp::Eq,
                &Dim::c(0),
                codes::CALL,
                R_CALL,
                span,
                || msg(e, *c),
            );
            if !ok {
                let help = format!("pass a tensor whose dim makes `{e}` a multiple of {c}, or add `requires({e} % {c} == 0)` to the caller");
                if let Some(last) = self.diags.last_mut() {
                    last.help = Some(help);
                }
                return None;
            }
        }
        Some(())
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

/// Every (argument index, parameter name, parameter dim, argument dim) of a
/// call whose parameter dim is compound: the dims §18 inference may solve.
fn compound_pairs<'s>(
    sig: &'s Signature,
    operands: &'s [Type],
) -> Vec<(usize, &'s str, &'s Dim, &'s Dim)> {
    let mut out = Vec::new();
    for (i, (p, a)) in sig.params.iter().zip(operands).enumerate() {
        let dims: Vec<(&Dim, &Dim)> = match (&p.ty, a) {
            (Type::Tensor(pt), Type::Tensor(at)) => pt.shape.iter().zip(&at.shape).collect(),
            (Type::Dim(pd), Type::Dim(ad)) => vec![(pd, ad)],
            _ => vec![],
        };
        out.extend(
            dims.into_iter()
                .filter(|(pd, _)| pd.as_var().is_none() && pd.as_const().is_none())
                .map(|(pd, ad)| (i, p.name.as_str(), pd, ad)),
        );
    }
    out
}
