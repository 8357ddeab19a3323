//! Convolution and pooling (docs/syntax.md §12c, §12d, beyond Section 2 in
//! its style). Their window attributes are constants, as in PyTorch, so the
//! output extent `(S + 2P − D·(K − 1) − 1) / stride + 1` divides by a
//! constant and stays Presburger. Obligations, each with a counterexample:
//! the kernel is at least 1 and fits in the padded input; for a
//! convolution, the input's channels are the weights' times `groups` and
//! the output channels split into `groups`.

use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::ir::{Inst, PoolKind, Window};
use crate::pred::CmpOp;
use crate::subtype::{dims_equal, DimEq};
use crate::types::{shape_string, TensorType, Type};

use super::diags::{class_diag, unknown_diag};
use super::{Checker, R_CONV, R_POOL};

/// The largest stride, padding, dilation, groups or pooling kernel: dim
/// coefficients built from them (`2·P`, `D·K`) stay far inside i64.
pub const WINDOW_CONST_MAX: usize = i32::MAX as usize;

impl Checker<'_> {
    /// `conv{r}d[window, groups] x, w`.
    pub(super) fn conv(
        &mut self,
        (window, groups): (&Window, usize),
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let x = self.tensor_arg(&operands[0], inst, 0, R_CONV)?;
        let w = self.tensor_arg(&operands[1], inst, 1, R_CONV)?;
        let r = window.rank();
        let consts = self.window_consts(window, inst, R_CONV, 0);
        let g_ok = self.const_in(groups, 1, "groups", inst.attr_span(3), R_CONV);
        let layout = if r == 1 { "[N, C, L]" } else { "[N, C, H, W]" };
        let wlayout = if r == 1 {
            "[O, C / groups, K]"
        } else {
            "[O, C / groups, KH, KW]"
        };
        for (i, (t, what)) in [(&x, layout), (&w, wlayout)].into_iter().enumerate() {
            if t.rank() != r + 2 {
                self.err(Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_CONV,
                    inst.arg_span(i),
                    format!(
                        "expected rank {} ({what}), found rank {} ({})",
                        r + 2,
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
        }
        if !(consts && g_ok) {
            return None;
        }
        self.same_dtype(
            (&x, inst.arg_span(0), "the input"),
            (&w, inst.arg_span(1), "the weights"),
            inst,
            R_CONV,
        )?;
        if !x.dtype.is_numeric() {
            self.err(class_diag(R_CONV, inst.span, "conv", "numeric", x.dtype));
            return None;
        }
        self.conv_channels(&x, &w, groups, inst)?;
        let mut shape = vec![x.shape[0].clone(), w.shape[0].clone()];
        for i in 0..r {
            let k = &w.shape[2 + i];
            shape.push(self.window_len(&x.shape[2 + i], k, window, i, inst.arg_span(1), R_CONV)?);
        }
        let mut refs = x.refs.clone();
        refs.extend(w.refs.iter().filter(|p| !x.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: x.dtype,
            shape,
            refs,
        }))
    }

    /// `C = (C / groups) · groups` between the input and the weights, and
    /// `O % groups == 0`.
    fn conv_channels(
        &mut self,
        x: &TensorType,
        w: &TensorType,
        groups: usize,
        inst: &Inst,
    ) -> Option<()> {
        let g = groups as i64;
        let want = self.dim_op(w.shape[1].checked_scale(g), inst.arg_span(1))?;
        let c = &x.shape[1];
        match dims_equal(&self.ctx, c, &want) {
            Ok(()) => {}
            Err(DimEq::Differs(cex)) => {
                let expected = if groups == 1 {
                    format!("`{want}` (dim 1 of the weights)")
                } else {
                    format!("`{want}` (dim 1 of the weights times {groups} groups)")
                };
                self.err(
                    Diagnostic::new(
                        codes::WINDOW,
                        R_CONV,
                        inst.arg_span(1),
                        format!(
                            "input channels: expected {expected}, found `{c}` (dim 1 of the input)"
                        ),
                    )
                    .with_cex(Some(cex))
                    .help(if groups == 1 {
                        format!("declare the weights as `[O, {c}, …]`, or feed an input of `{want}` channels")
                    } else {
                        format!("the weights' dim 1 is the input channels per group: `{c}` / {groups}")
                    }),
                );
                return None;
            }
            Err(DimEq::Unknown(goal)) => {
                self.err(unknown_diag(R_CONV, inst.arg_span(1), &goal));
                return None;
            }
        }
        if groups > 1 {
            let o = &w.shape[0];
            let rem = self.dim_op(o.checked_rem(&Dim::c(g)), inst.arg_span(1))?;
            let msg = || {
                format!("the output channels `{o}` (dim 0 of the weights) may not split into {groups} groups")
            };
            if !self.prove_cmp(
                &rem,
                CmpOp::Eq,
                &Dim::c(0),
                codes::WINDOW,
                R_CONV,
                inst.attr_span(3),
                msg,
            ) {
                self.help_last(format!("add `requires({o} % {groups} == 0)`, or use a multiple of {groups} output channels"));
                return None;
            }
        }
        Some(())
    }

    /// `{max,avg}_pool{r}d[kernel, window] x`.
    pub(super) fn pool(
        &mut self,
        (kind, kernel, window): (PoolKind, &[usize], &Window),
        inst: &Inst,
        operands: &[Type],
    ) -> Option<Type> {
        let x = self.tensor_arg(&operands[0], inst, 0, R_POOL)?;
        let r = kernel.len();
        let mut ok = self.window_consts(window, inst, R_POOL, 1);
        if window.dilation.iter().any(|&d| d != 1) {
            self.err(Diagnostic::new(
                codes::WINDOW,
                R_POOL,
                inst.attr_span(3),
                format!(
                    "a pooling has no dilation: expected 1, found {:?}",
                    window.dilation
                ),
            ));
            ok = false;
        }
        ok &= self.consts_in(kernel, 1, "kernel", inst.attr_span(0), R_POOL);
        // One error for the attribute (both axes share its token).
        if let Some(i) = (0..r).find(|&i| kernel[i] >= 1 && window.padding[i] > kernel[i] / 2) {
            let (p, k) = (window.padding[i], kernel[i]);
            self.err(
                Diagnostic::new(
                    codes::WINDOW,
                    R_POOL,
                    inst.attr_span(2),
                    format!("padding {p} exceeds half the kernel {k} (spatial axis {i}): a window could hold padding only"),
                )
                .help(format!("use a padding of at most {}", k / 2)),
            );
            ok = false;
        }
        let (class, fits) = match kind {
            PoolKind::Max => ("numeric", x.dtype.is_numeric()),
            PoolKind::Avg => ("float", x.dtype.is_float()),
        };
        if !fits {
            let name = if kind == PoolKind::Max {
                "max_pool"
            } else {
                "avg_pool"
            };
            self.err(class_diag(R_POOL, inst.span, name, class, x.dtype));
            return None;
        }
        if x.rank() < r {
            self.err(Diagnostic::new(
                codes::RANK_MISMATCH,
                R_POOL,
                inst.arg_span(0),
                format!(
                    "expected rank at least {r} (the pooled axes last), found rank {} ({})",
                    x.rank(),
                    shape_string(&x.shape)
                ),
            ));
            return None;
        }
        if !ok {
            return None;
        }
        let lead = x.rank() - r;
        if kind == PoolKind::Max && !self.pooled_axes_nonempty(&x.shape[lead..], inst) {
            return None;
        }
        let mut shape = x.shape[..lead].to_vec();
        for (i, &k) in kernel.iter().enumerate() {
            shape.push(self.window_len(
                &x.shape[lead + i],
                &Dim::c(k as i64),
                window,
                i,
                inst.attr_span(0),
                R_POOL,
            )?);
        }
        Some(Type::Tensor(TensorType { shape, ..x }))
    }

    /// A max pool's spatial axes are non-empty: with padding at most half
    /// the kernel, every window then holds an input element (an empty axis
    /// would give windows of padding only, whose max does not exist, as
    /// for `reduce.max`).
    fn pooled_axes_nonempty(&mut self, dims: &[Dim], inst: &Inst) -> bool {
        let one = Dim::c(1);
        dims.iter().enumerate().all(|(i, s)| {
            let msg =
                || format!("`max_pool` needs a non-empty spatial axis {i}, but `{s}` may be 0");
            self.prove_cmp(
                s,
                CmpOp::Ge,
                &one,
                codes::WINDOW,
                R_POOL,
                inst.arg_span(0),
                msg,
            ) || self.help_last(format!(
                "add `requires({s} >= 1)` so that the axis is never empty"
            ))
        })
    }

    /// Attach `help` to the error just reported when it is this rule's own
    /// (a solver `unknown` keeps its budget help). Returns false, the
    /// verdict of the failed proof it follows.
    fn help_last(&mut self, help: String) -> bool {
        if let Some(d) = self.diags.pop() {
            let d = if d.code == codes::WINDOW {
                d.help(help)
            } else {
                d
            };
            self.diags.push(d);
        }
        false
    }

    /// Stride and dilation in `1..=WINDOW_CONST_MAX`, padding in
    /// `0..=WINDOW_CONST_MAX`; attribute spans from `first` on (stride,
    /// padding, dilation). Reports every bad one.
    fn window_consts(&mut self, w: &Window, inst: &Inst, rule: &'static str, first: usize) -> bool {
        let mut ok = true;
        let lists = [
            (&w.stride, 1, "stride"),
            (&w.padding, 0, "padding"),
            (&w.dilation, 1, "dilation"),
        ];
        for (j, (vals, least, what)) in lists.into_iter().enumerate() {
            ok &= self.consts_in(vals, least, what, inst.attr_span(first + j), rule);
        }
        ok
    }

    /// An attribute's constants (one per axis, one token) in
    /// `least..=WINDOW_CONST_MAX`, else one E0310 at `span` for the first
    /// bad one.
    fn consts_in(
        &mut self,
        vals: &[usize],
        least: usize,
        what: &str,
        span: SpanId,
        rule: &'static str,
    ) -> bool {
        match vals
            .iter()
            .find(|v| !(least..=WINDOW_CONST_MAX).contains(*v))
        {
            Some(&v) => self.const_in(v, least, what, span, rule),
            None => true,
        }
    }

    /// A window constant in `least..=WINDOW_CONST_MAX`, else E0310 at `span`.
    fn const_in(
        &mut self,
        v: usize,
        least: usize,
        what: &str,
        span: SpanId,
        rule: &'static str,
    ) -> bool {
        if (least..=WINDOW_CONST_MAX).contains(&v) {
            return true;
        }
        self.err(Diagnostic::new(
            codes::WINDOW,
            rule,
            span,
            format!("the {what} must be between {least} and {WINDOW_CONST_MAX}, found {v}"),
        ));
        false
    }

    /// Spatial axis `i`: prove `K ≥ 1` and `S + 2P ≥ D·(K − 1) + 1`, then
    /// `(S + 2P − D·(K − 1) − 1) / stride + 1` (the concrete rule's
    /// `window_len`, over dims).
    fn window_len(
        &mut self,
        s: &Dim,
        k: &Dim,
        w: &Window,
        i: usize,
        span: SpanId,
        rule: &'static str,
    ) -> Option<Dim> {
        let (st, p, d) = (
            w.stride[i] as i64,
            w.padding[i] as i64,
            w.dilation[i] as i64,
        );
        if !self.dim_wf(k, span) || !self.linear_or_error(k, span) {
            return None;
        }
        let one = Dim::c(1);
        let kmsg = || format!("the kernel `{k}` of spatial axis {i} may be smaller than 1");
        if !self.prove_cmp(k, CmpOp::Ge, &one, codes::WINDOW, rule, span, kmsg) {
            self.help_last(format!("add `requires({k} >= 1)`"));
            return None;
        }
        let padded = self.dim_op(s.checked_add(&Dim::c(2 * p)), span)?;
        let dk = self.dim_op(k.checked_scale(d), span)?;
        let reach = self.dim_op(dk.checked_sub(&Dim::c(d - 1)), span)?;
        let msg = || {
            let dil = if d == 1 {
                String::new()
            } else {
                format!(" (dilation {d}, reaching {reach})")
            };
            let pad = if p == 0 {
                String::new()
            } else {
                format!(" padded by {p} on each side")
            };
            format!(
                "the kernel `{k}`{dil} of spatial axis {i} may not fit in its `{s}` elements{pad}"
            )
        };
        if !self.prove_cmp(&padded, CmpOp::Ge, &reach, codes::WINDOW, rule, span, msg) {
            self.help_last(format!(
                "add `requires({padded} >= {reach})`, or pad the input (a larger padding)"
            ));
            return None;
        }
        let room = self.dim_op(padded.checked_sub(&reach), span)?;
        let q = self.dim_op(room.checked_div(&Dim::c(st)), span)?;
        self.dim_op(q.checked_add(&one), span)
    }
}
