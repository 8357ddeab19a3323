//! The surface of the window ops (docs/syntax.md §12c, §12d):
//! `conv1d/conv2d(x, w[, stride, padding[, dilation, groups]])` and
//! `max_pool1d/2d`, `avg_pool1d/2d(x, kernel[, stride, padding])`. Every
//! window attribute is an integer literal, or for the 2-d ops also
//! `[along H, along W]`; the checker proves the rest.

use proc_macro2::Ident;
use syn::Expr;
use tc_core::ir::{Op, PoolKind, Window};
use tc_core::SpanId;

use super::{Lowerer, Operand};
use crate::parse::{int_lit, unparen};
use crate::spans::err_at;
use tc_core::diag::codes;

impl Lowerer<'_> {
    /// `conv1d` / `conv2d`: arity 2, 4 or 6 (PyTorch's positional order
    /// without the bias: stride, padding, dilation, groups; defaults 1, 0,
    /// 1, 1). Attribute spans: stride, padding, dilation, groups.
    pub(super) fn conv_call(
        &mut self,
        r: usize,
        name: &Ident,
        args: &[&Expr],
        whole: &Expr,
    ) -> Operand {
        if ![2, 4, 6].contains(&args.len()) {
            let usage = format!("{name}(x, w)`, `{name}(x, w, stride, padding)` or `{name}(x, w, stride, padding, dilation, groups)");
            return self.fail(err_at(
                codes::OP_ARGUMENTS,
                whole,
                format!(
                    "`{name}` takes 2, 4 or 6 arguments (`{usage}`), found {}",
                    args.len()
                ),
            ));
        }
        let x = self.tensor(args[0]);
        let w = self.tensor(args[1]);
        let stride = self.window_attr(args.get(2).copied(), r, 1, "stride", whole);
        let padding = self.window_attr(args.get(3).copied(), r, 0, "padding", whole);
        let dilation = self.window_attr(args.get(4).copied(), r, 1, "dilation", whole);
        let groups = self.window_attr(args.get(5).copied(), 1, 1, "groups", whole);
        let (Some((x, xs)), Some((w, ws)), Some(st), Some(pa), Some(di), Some(gr)) =
            (x, w, stride, padding, dilation, groups)
        else {
            return Operand::Poison;
        };
        let window = Window {
            stride: st.0,
            padding: pa.0,
            dilation: di.0,
        };
        let op = Op::Conv {
            window,
            groups: gr.0[0],
            x,
            w,
        };
        self.push(op, whole, vec![xs, ws], vec![st.1, pa.1, di.1, gr.1])
    }

    /// `max_pool{r}d` / `avg_pool{r}d`: arity 2 or 4; the stride defaults
    /// to the kernel (PyTorch's default), the padding to 0. Attribute
    /// spans: kernel, stride, padding, dilation (always 1 here).
    pub(super) fn pool_call(
        &mut self,
        kind: PoolKind,
        r: usize,
        name: &Ident,
        args: &[&Expr],
        whole: &Expr,
    ) -> Operand {
        if args.len() != 2 && args.len() != 4 {
            let usage = format!("{name}(x, kernel)` or `{name}(x, kernel, stride, padding)");
            return self.fail(err_at(
                codes::OP_ARGUMENTS,
                whole,
                format!(
                    "`{name}` takes 2 or 4 arguments (`{usage}`), found {}",
                    args.len()
                ),
            ));
        }
        let x = self.tensor(args[0]);
        let kernel = self.window_attr(Some(args[1]), r, 1, "kernel", whole);
        let stride = match (args.get(2), &kernel) {
            (Some(e), _) => self.window_attr(Some(e), r, 1, "stride", whole),
            (None, Some(k)) => Some(k.clone()),
            (None, None) => None,
        };
        let padding = self.window_attr(args.get(3).copied(), r, 0, "padding", whole);
        let (Some((x, xs)), Some(k), Some(st), Some(pa)) = (x, kernel, stride, padding) else {
            return Operand::Poison;
        };
        let window = Window {
            stride: st.0,
            padding: pa.0,
            dilation: vec![1; r],
        };
        let op = Op::Pool {
            kind,
            kernel: k.0,
            window,
            x,
        };
        let one = self.spans.alloc(whole);
        self.push(op, whole, vec![xs], vec![k.1, st.1, pa.1, one])
    }

    /// A window attribute for `r` spatial axes: an integer literal (the
    /// same along every axis) or, when `r` is 2, `[along H, along W]`;
    /// `default` along every axis when absent (spanned at the call).
    fn window_attr(
        &mut self,
        e: Option<&Expr>,
        r: usize,
        default: usize,
        what: &str,
        whole: &Expr,
    ) -> Option<(Vec<usize>, SpanId)> {
        let Some(e) = e else {
            return Some((vec![default; r], self.spans.alloc(whole)));
        };
        let span = self.spans.alloc(e);
        if let Expr::Array(a) = unparen(e) {
            if r != 2 || a.elems.len() != 2 {
                let want = if r == 2 {
                    format!("`[{what} along H, {what} along W]`")
                } else {
                    "one integer literal (this op has one spatial axis)".to_string()
                };
                self.cx.push(err_at(
                    codes::OP_ARGUMENTS,
                    e,
                    format!("expected {want}, found {} entries", a.elems.len()),
                ));
                return None;
            }
            let vals: Vec<Option<usize>> =
                a.elems.iter().map(|x| self.window_int(x, what)).collect();
            return vals
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .map(|v| (v, span));
        }
        self.window_int(e, what).map(|v| (vec![v; r], span))
    }

    fn window_int(&mut self, e: &Expr, what: &str) -> Option<usize> {
        match int_lit(e).map(usize::try_from) {
            Some(Ok(v)) => Some(v),
            _ => {
                self.cx.push(err_at(
                    codes::OP_ARGUMENTS,
                    e,
                    format!("a {what} is a non-negative integer literal, e.g. `2`"),
                ));
                None
            }
        }
    }
}
