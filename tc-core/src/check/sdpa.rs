//! Fused scaled-dot-product attention (docs/syntax.md §12f): F32 queries
//! and mask, keys and values in F32, F16 or BF16, over one leading shape, the queries' width equal to the keys'
//! head dim, the keys' positions equal to the values' and to the mask's
//! columns, the mask's rows equal to the queries', and a non-empty key
//! axis (the softmax takes a `max` over it, Section 2 §8).

use crate::diag::{codes, Diagnostic};
use crate::dtype::Dtype;
use crate::ir::Inst;
use crate::types::{shape_string, TensorType, Type};

use super::diags::class_diag;
use super::{Checker, R_SDPA};

/// The operands as the errors name them, in argument order.
const NAMES: [&str; 4] = ["the queries", "the keys", "the values", "the mask"];

impl Checker<'_> {
    /// `sdpa q, k, v, mask`: `q : [s…, M, D]`, `k : [s…, D, T]`, `v : [s…,
    /// T, E]`, `mask : [s…, M, T]`, `Γ ⊨ T ≥ 1`; the result `[s…, M, E]`.
    pub(super) fn sdpa(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let mut ts = Vec::with_capacity(NAMES.len());
        for (i, t) in operands.iter().enumerate().take(NAMES.len()) {
            ts.push(self.tensor_arg(t, inst, i, R_SDPA)?);
        }
        let [q, k, v, mask] = <[TensorType; 4]>::try_from(ts).ok()?;
        if q.dtype != Dtype::F32 {
            self.err(class_diag(R_SDPA, inst.arg_span(0), "sdpa", "f32", q.dtype));
            return None;
        }
        let first = (&q, inst.arg_span(0), NAMES[0]);
        self.same_dtype(first, (&mask, inst.arg_span(3), NAMES[3]), inst, R_SDPA)?;
        // Keys and values may be kept narrow (a KV cache in f16 or bf16):
        // every such value is an f32, widened exactly as read.
        for (i, t) in [(1, &k), (2, &v)] {
            if !matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                self.err(class_diag(
                    R_SDPA,
                    inst.arg_span(i),
                    "sdpa",
                    "f32, f16 or bf16",
                    t.dtype,
                ));
                return None;
            }
        }
        self.sdpa_ranks(&[&q, &k, &v, &mask], inst)?;
        let n = q.rank();
        let (m, d) = (&q.shape[n - 2], &q.shape[n - 1]);
        let t = &k.shape[n - 1];
        // Each operand's leading dims are the queries'; then each matrix
        // dim against the operand that fixes it.
        for (i, x) in [(1, &k), (2, &v), (3, &mask)] {
            for a in 0..n - 2 {
                let what = format!("leading dimension {a} of {}", NAMES[i]);
                let dims = (&q.shape[a], &x.shape[a]);
                self.dims_agree(
                    dims,
                    inst.arg_span(i),
                    (codes::SHAPE_MISMATCH, R_SDPA),
                    &what,
                )?;
            }
        }
        let (rows, cols) = (n - 2, n - 1);
        let matrix = [
            (
                1,
                d,
                &k.shape[rows],
                format!("the keys' head dim (dim {rows}) must be the queries' width"),
            ),
            (
                2,
                t,
                &v.shape[rows],
                format!("the values' positions (dim {rows}) must be the keys' (their last dim)"),
            ),
            (
                3,
                m,
                &mask.shape[rows],
                format!("the mask's rows (dim {rows}) must be the queries' rows"),
            ),
            (
                3,
                t,
                &mask.shape[cols],
                format!("the mask's columns (dim {cols}) must be the keys' positions"),
            ),
        ];
        for (i, want, found, what) in matrix {
            if self
                .dims_agree(
                    (want, found),
                    inst.arg_span(i),
                    (codes::SHAPE_MISMATCH, R_SDPA),
                    &what,
                )
                .is_none()
            {
                if i == 1 {
                    self.shape_help(format!(
                        "the keys are head dim first, `[s…, D, T]` (the scores are `q·k`): pass keys stored `[s…, T, D]` as `transpose(k, [{}])`",
                        swap_last(n)
                    ));
                }
                return None;
            }
        }
        self.nonempty_axis(
            t,
            n - 1,
            inst.arg_span(1),
            R_SDPA,
            "sdpa (its softmax's max)",
        )?;
        let mut shape = q.shape[..n - 1].to_vec();
        shape.push(v.shape[n - 1].clone());
        let mut refs = q.refs.clone();
        for p in [&k, &v, &mask].into_iter().flat_map(|x| &x.refs) {
            if !refs.contains(p) {
                refs.push(p.clone());
            }
        }
        Some(Type::Tensor(TensorType {
            dtype: q.dtype,
            shape,
            refs,
        }))
    }

    /// Every operand has rank at least 2, and the queries' rank.
    fn sdpa_ranks(&mut self, ts: &[&TensorType; 4], inst: &Inst) -> Option<()> {
        let want = ts[0].rank().max(2);
        for (i, t) in ts.iter().enumerate() {
            if t.rank() == want {
                continue;
            }
            let msg = if i == 0 || t.rank() < 2 {
                format!(
                    "expected rank at least 2 (a matrix per leading index), found rank {} ({})",
                    t.rank(),
                    shape_string(&t.shape)
                )
            } else {
                format!(
                    "expected rank {want} ({} are {}), found rank {} ({})",
                    NAMES[0],
                    shape_string(&ts[0].shape),
                    t.rank(),
                    shape_string(&t.shape)
                )
            };
            self.err(
                Diagnostic::new(codes::RANK_MISMATCH, R_SDPA, inst.arg_span(i), msg)
                    .help("leading dims are matched one to one (no implicit broadcasting, Section 2 §11): use `broadcast` or `reshape`"),
            );
            return None;
        }
        Some(())
    }

    /// `help` for the shape error just reported (a solver `unknown` keeps
    /// its budget help).
    fn shape_help(&mut self, help: String) {
        if let Some(last) = self
            .diags
            .last_mut()
            .filter(|d| d.code == codes::SHAPE_MISMATCH)
        {
            last.help = Some(help);
        }
    }
}

/// The permutation that swaps the last two of `n` axes, as a list.
fn swap_last(n: usize) -> String {
    let mut p: Vec<usize> = (0..n).collect();
    p.swap(n - 2, n - 1);
    p.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
