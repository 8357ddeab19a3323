//! Gather (Section 2 §12a, written in docs/syntax.md in Section 2's style):
//! the typing half. An id's value is data, so the rule has no obligation
//! on it; both backends check every id against the table's axis before
//! reading (`concrete::gather_ids`).

use crate::diag::{codes, Diagnostic};
use crate::dtype::Dtype;
use crate::ir::Inst;
use crate::types::{TensorType, Type};

use super::diags::cast_help;
use super::{Checker, R_GATHER};

impl Checker<'_> {
    /// `gather[axis] table, ids`: `ids` is I64 and `axis` an axis of
    /// `table`; the result is `table`'s dtype and shape with axis `axis`
    /// replaced by `ids`' shape.
    pub(super) fn gather(&mut self, axis: usize, inst: &Inst, operands: &[Type]) -> Option<Type> {
        let table = self.tensor_arg_q(&operands[0], inst, 0, R_GATHER)?;
        let ids = self.tensor_arg(&operands[1], inst, 1, R_GATHER)?;
        self.axes_ok(&[axis], table.rank(), inst, R_GATHER)?;
        if table.dtype.is_quantized() && axis + 1 == table.rank() {
            self.err(
                Diagnostic::new(
                    codes::AXIS,
                    R_GATHER,
                    inst.arg_span(0),
                    format!(
                        "gather along axis {axis}, the block axis of a {} table",
                        table.dtype
                    ),
                )
                .help("a quantized table gathers whole rows: gather along an earlier axis, or `dequantize` first (Section 2 §18)"),
            );
            return None;
        }
        if ids.dtype != Dtype::I64 {
            self.err(
                Diagnostic::new(
                    codes::DTYPE_MISMATCH,
                    R_GATHER,
                    inst.arg_span(1),
                    format!("expected indices of dtype i64, found {}", ids.dtype),
                )
                .help(if ids.dtype.is_int() || ids.dtype == Dtype::Bool {
                    cast_help(ids.dtype, Dtype::I64, "indices")
                } else {
                    format!(
                        "indices are integers: round {} ids and cast them, `cast::<i64>(round(ids))`",
                        ids.dtype
                    )
                }),
            );
            return None;
        }
        let shape = [
            &table.shape[..axis],
            &ids.shape[..],
            &table.shape[axis + 1..],
        ]
        .concat();
        let mut refs = table.refs.clone();
        refs.extend(ids.refs.iter().filter(|p| !table.refs.contains(p)).cloned());
        Some(Type::Tensor(TensorType {
            dtype: table.dtype,
            shape,
            refs,
        }))
    }
}
