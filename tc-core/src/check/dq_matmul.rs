//! The dynamically quantized int8 product (docs/syntax.md §7c): F32
//! activations whose last axis is the weight's `K` int8 channels then the
//! outlier weight's `J` F32 ones, an I8 `[K, N]` weight, its F32 scale per
//! column and the F32 `[J, N]` outlier rows.

use crate::diag::{codes, Diagnostic};
use crate::dtype::Dtype;
use crate::ir::Inst;
use crate::types::{shape_string, TensorType, Type};

use super::diags::dim_error_diag;
use super::{Checker, R_DQ_MATMUL};

/// The operands as the errors name them, in argument order, with their
/// dtype and rank (0: at least 2).
const OPERANDS: [(&str, Dtype, usize); 4] = [
    ("the activations", Dtype::F32, 0),
    ("the int8 weight", Dtype::I8, 2),
    ("the weight's scale", Dtype::F32, 1),
    ("the outlier weight", Dtype::F32, 2),
];

impl Checker<'_> {
    /// `dq_matmul x, w, scale, outliers`: `x : [p…, M, C]`, `w : [K, N]`
    /// (I8), `scale : [N]`, `outliers : [J, N]`, `Γ ⊨ C = K + J`; the
    /// result F32 `[p…, M, N]`.
    pub(super) fn dq_matmul(&mut self, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let mut ts = Vec::with_capacity(OPERANDS.len());
        for (i, t) in operands.iter().enumerate().take(OPERANDS.len()) {
            ts.push(self.tensor_arg(t, inst, i, R_DQ_MATMUL)?);
        }
        let [x, w, scale, outliers] = <[TensorType; 4]>::try_from(ts).ok()?;
        for (i, (t, (name, dtype, rank))) in [&x, &w, &scale, &outliers]
            .into_iter()
            .zip(OPERANDS)
            .enumerate()
        {
            if t.dtype != dtype {
                let help = if i == 1 {
                    "quantize the weight at load: i8 values with an f32 scale per column (`w ≈ q · scale`)"
                } else {
                    "insert an explicit `cast::<f32>(..)` (Section 3 §9: no implicit promotion)"
                };
                self.err(
                    Diagnostic::new(
                        codes::DTYPE_CLASS,
                        R_DQ_MATMUL,
                        inst.arg_span(i),
                        format!("{name}: expected dtype {dtype}, found dtype {}", t.dtype),
                    )
                    .help(help),
                );
                return None;
            }
            let ok = if rank == 0 {
                t.rank() >= 2
            } else {
                t.rank() == rank
            };
            if !ok {
                let want = if rank == 0 {
                    "at least 2".to_string()
                } else {
                    rank.to_string()
                };
                self.err(Diagnostic::new(
                    codes::RANK_MISMATCH,
                    R_DQ_MATMUL,
                    inst.arg_span(i),
                    format!(
                        "{name}: expected rank {want}, found rank {} ({})",
                        t.rank(),
                        shape_string(&t.shape)
                    ),
                ));
                return None;
            }
        }
        let (k, n) = (&w.shape[0], &w.shape[1]);
        let j = &outliers.shape[0];
        let checks = [
            (
                2,
                n,
                &scale.shape[0],
                "the scale's length must be the weight's columns (dim 1)",
            ),
            (
                3,
                n,
                &outliers.shape[1],
                "the outlier weight's columns (dim 1) must be the weight's",
            ),
        ];
        for (i, want, found, what) in checks {
            let rule = (codes::SHAPE_MISMATCH, R_DQ_MATMUL);
            self.dims_agree((want, found), inst.arg_span(i), rule, what)?;
        }
        let r = x.rank();
        let channels = match k.checked_add(j) {
            Ok(c) => c,
            Err(e) => {
                self.err(dim_error_diag(&e, inst.span));
                return None;
            }
        };
        if self
            .dims_agree(
                (&channels, &x.shape[r - 1]),
                inst.arg_span(0),
                (codes::CONTRACTION, R_DQ_MATMUL),
                "the activations' channels (their last dim) must be the int8 weight's rows then the outlier weight's",
            )
            .is_none()
        {
            if let Some(last) = self.diags.last_mut() {
                last.help = Some(format!(
                    "the last `{j}` channels of `x` go through the F32 outlier product; slice `x` or the weights to match"
                ));
            }
            return None;
        }
        let mut shape = x.shape[..r - 1].to_vec();
        shape.push(n.clone());
        let mut refs = x.refs.clone();
        for p in [&w, &scale, &outliers].into_iter().flat_map(|t| &t.refs) {
            if !refs.contains(p) {
                refs.push(p.clone());
            }
        }
        Some(Type::Tensor(TensorType {
            dtype: Dtype::F32,
            shape,
            refs,
        }))
    }
}
