//! The concrete shape rule: each op's result dtype and shape from its
//! operands' concrete dtypes and shapes and its attributes evaluated under σ
//! (the run-time side of Section 2's typing rules, and the preconditions of
//! Section 4 §5's denotations).
//!
//! Written once, used by both backends: the interpreter's denotations
//! (`tc_runtime::interp::denote`) validate their operands and size their
//! output through these functions, and the JIT's planner
//! (`tc_llvm::plan::shapes`) sizes every buffer through [`infer`]. Before
//! this module each backend had its own copy, and the planner's copy trusted
//! what the interpreter checked (issue #14). `tests/concrete_rule.rs` in the
//! facade checks, for random well-typed programs and σ, that the rule gives
//! the checker's synthesised type evaluated under σ.
//!
//! Element-count caps are not part of the rule: every backend builds each
//! value through `crate::size`, which refuses shapes over the cap.

use crate::dim::{Dim, EvalError, Sigma};
use crate::dtype::Dtype;
use crate::ir::{
    check_axes, check_perm, BinaryOp, Op, PoolKind, ReduceOp, RopeLayout, UnaryOp, Value, Window,
};
use crate::size::SizeError;

/// An operand as the rule sees it: its dtype and concrete shape.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: &'a [usize],
}

/// A result: dtype and shape.
pub type Shaped = (Dtype, Vec<usize>);

/// Why an op cannot run on these operands. The runtime's error holds it
/// whole (`tc_runtime::Error::Rule`), so both backends report alike.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// IR the verifier refuses (wrong dtypes, bad axes): a bug upstream.
    #[error("malformed IR: {0}")]
    Malformed(String),
    /// The operands' concrete shapes violate the op's rule.
    #[error("{op}: {message}")]
    Op {
        /// The op.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// A reshape whose volumes differ (Section 2 §10, re-checked: §7.0).
    #[error("reshape of shape {from:?} to {to:?}: volumes {from_volume} and {to_volume} differ")]
    ReshapeVolume {
        /// The operand's shape.
        from: Vec<usize>,
        /// The target, evaluated.
        to: Vec<i64>,
        /// Its volume (`i64::MAX` when it overflows).
        from_volume: i64,
        /// The target's volume (`i64::MAX` when it overflows).
        to_volume: i64,
    },
    /// An attribute dim could not be evaluated under σ.
    #[error("{context}: {source}")]
    Eval {
        /// Which attribute.
        context: String,
        /// Why.
        source: EvalError,
    },
    /// An attribute dim is negative under σ.
    #[error("{context}: dimension `{dim}` evaluates to {value}, which is negative")]
    NegativeDim {
        /// Which attribute.
        context: String,
        /// The dim expression.
        dim: String,
        /// Its value.
        value: i64,
    },
    /// A count past the cap the backends share.
    #[error("{0}")]
    Size(#[from] SizeError),
    /// An index tensor holds an id outside the indexed axis (`gather`): the
    /// first one in row-major order, with its position in the index tensor.
    #[error("{op}: index {index} at position {position:?} of the indices is out of range 0..{bound} (axis {axis} of the table)")]
    IndexOutOfRange {
        /// The op.
        op: String,
        /// The table's indexed axis.
        axis: usize,
        /// The id's position in the index tensor.
        position: Vec<usize>,
        /// The id.
        index: i64,
        /// The axis' size: valid ids are `0..bound`.
        bound: usize,
    },
}

/// Result of a rule.
pub type Result<T, E = RuleError> = std::result::Result<T, E>;

fn op_err(op: &str, message: String) -> RuleError {
    RuleError::Op {
        op: op.to_string(),
        message,
    }
}

fn malformed(op: &str, message: String) -> RuleError {
    RuleError::Malformed(format!("{op}: {message}"))
}

fn axes_ok(op: &str, axes: &[usize], rank: usize) -> Result<()> {
    check_axes(axes, rank).map_err(|e| malformed(op, e.to_string()))
}

// ------------------------------------------------------------ attributes

/// A dim evaluated under σ as a signed value (reshape targets, slice
/// bounds): `Eval` when it cannot be. `context` is formatted only for an
/// error (this runs per dim per compiled call: pass `format_args!`, not a
/// `String`).
pub fn eval_signed(d: &Dim, sigma: &Sigma, context: impl std::fmt::Display) -> Result<i64> {
    d.eval(sigma).map_err(|source| RuleError::Eval {
        context: context.to_string(),
        source,
    })
}

/// A dim evaluated under σ as a size: `Eval`, or `NegativeDim` below 0.
pub fn eval_size(d: &Dim, sigma: &Sigma, context: impl std::fmt::Display) -> Result<usize> {
    let v = eval_signed(d, sigma, &context)?;
    usize::try_from(v).map_err(|_| RuleError::NegativeDim {
        context: context.to_string(),
        dim: d.to_string(),
        value: v,
    })
}

/// A shape attribute (broadcast, fill, iota) evaluated under σ.
pub fn eval_shape(ds: &[Dim], sigma: &Sigma, what: &str) -> Result<Vec<usize>> {
    ds.iter()
        .enumerate()
        .map(|(i, d)| eval_size(d, sigma, format_args!("{what}, dimension {i}")))
        .collect()
}

/// A reshape target evaluated under σ (signed: a negative dim is a volume
/// mismatch, reported with the whole target).
pub fn eval_target(ds: &[Dim], sigma: &Sigma) -> Result<Vec<i64>> {
    ds.iter()
        .enumerate()
        .map(|(i, d)| eval_signed(d, sigma, format_args!("reshape, dimension {i}")))
        .collect()
}

/// A slice's `[start, stop)` evaluated under σ.
pub fn eval_bounds(start: &Dim, stop: &Dim, sigma: &Sigma) -> Result<(i64, i64)> {
    Ok((
        eval_signed(start, sigma, "slice start")?,
        eval_signed(stop, sigma, "slice stop")?,
    ))
}

// ------------------------------------------------------------- the rules

/// §5.1 elementwise unary: same dtype and shape; the op must admit it.
pub fn unary(op: UnaryOp, x: Operand) -> Result<Shaped> {
    if !op.admits(x.dtype) {
        return Err(malformed(
            op.name(),
            format!("not admissible at {}", x.dtype),
        ));
    }
    Ok((x.dtype, x.shape.to_vec()))
}

/// §5.2 cast: the target dtype, the same shape.
pub fn cast(to: Dtype, x: Operand) -> Result<Shaped> {
    // §18: a quantized tensor casts only to a float (its dequantization,
    // then §5 from F32); nothing casts to a quantized format.
    if to.is_quantized() || (x.dtype.is_quantized() && !to.is_float()) {
        return Err(malformed("cast", format!("from {} to {to}", x.dtype)));
    }
    Ok((to, x.shape.to_vec()))
}

/// §7b `matmul_i32`: §7's shapes over two I8 operands; the result I32.
pub fn matmul_i32(a: Operand, b: Operand) -> Result<Shaped> {
    if a.dtype != Dtype::I8 || b.dtype != Dtype::I8 {
        return Err(malformed(
            "matmul_i32",
            format!("operand dtypes {} and {}", a.dtype, b.dtype),
        ));
    }
    let (_, shape) = matmul(a, b)?;
    Ok((Dtype::I32, shape))
}

/// §7c `dq_matmul`: `x` F32 `[p…, M, K + J]`, `w` I8 `[K, N]`, `scale`
/// F32 `[N]`, `outliers` F32 `[J, N]`; the result F32 `[p…, M, N]`.
pub fn dq_matmul([x, w, scale, outliers]: [Operand; 4]) -> Result<Shaped> {
    let dtypes = [x.dtype, w.dtype, scale.dtype, outliers.dtype];
    if dtypes != [Dtype::F32, Dtype::I8, Dtype::F32, Dtype::F32] {
        return Err(malformed(
            "dq_matmul",
            format!("operand dtypes {dtypes:?}: expected F32, I8, F32, F32"),
        ));
    }
    let (sx, sw, ss, so) = (x.shape, w.shape, scale.shape, outliers.shape);
    let shapes = || format!("operand shapes {sx:?}, {sw:?}, {ss:?} and {so:?}");
    if sx.len() < 2 || sw.len() != 2 || ss.len() != 1 || so.len() != 2 {
        return Err(op_err(
            "dq_matmul",
            format!("{}: ranks ≥ 2, 2, 1 and 2", shapes()),
        ));
    }
    let (k, n, j) = (sw[0], sw[1], so[0]);
    if ss[0] != n || so[1] != n || k.checked_add(j) != Some(sx[sx.len() - 1]) {
        return Err(op_err(
            "dq_matmul",
            format!(
                "{}: x's last dim is K + J, the scale's and the outliers' columns N",
                shapes()
            ),
        ));
    }
    let mut out = sx[..sx.len() - 1].to_vec();
    out.push(n);
    Ok((Dtype::F32, out))
}

/// §18 `qmatmul`: `x` F32 `[p…, M, K]`, `w` quantized `[N, K]` with whole
/// blocks along `K`; the result F32 `[p…, M, N]`.
pub fn qmatmul(x: Operand, w: Operand) -> Result<Shaped> {
    if x.dtype != Dtype::F32 || !w.dtype.is_quantized() {
        return Err(malformed(
            "qmatmul",
            format!("operand dtypes {} and {}", x.dtype, w.dtype),
        ));
    }
    let (sx, sw) = (x.shape, w.shape);
    if sx.len() < 2 || sw.len() != 2 {
        return Err(op_err(
            "qmatmul",
            format!("operand shapes {sx:?} and {sw:?}: x has rank ≥ 2, w rank 2"),
        ));
    }
    quantized_shape_ok("qmatmul", w)?;
    let k = sx[sx.len() - 1];
    if k != sw[1] {
        return Err(op_err(
            "qmatmul",
            format!("contraction dimension K (={k}) ≠ K' (={})", sw[1]),
        ));
    }
    let mut out = sx[..sx.len() - 1].to_vec();
    out.push(sw[0]);
    Ok((Dtype::F32, out))
}

/// §18 formation, concretely: a quantized operand has rank ≥ 1 and whole
/// blocks along its last axis.
pub fn quantized_shape_ok(op: &str, x: Operand) -> Result<()> {
    let Some((block, _)) = x.dtype.block() else {
        return Ok(());
    };
    match x.shape.last() {
        Some(k) if k % block == 0 => Ok(()),
        _ => Err(op_err(
            op,
            format!(
                "a {} operand of shape {:?}: its last dim must be a multiple of {block}",
                x.dtype, x.shape
            ),
        )),
    }
}

fn same(op: &str, a: Operand, b: Operand) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(malformed(
            op,
            format!("operand dtypes {} and {} differ", a.dtype, b.dtype),
        ));
    }
    if a.shape != b.shape {
        return Err(op_err(
            op,
            format!("operand shapes {:?} and {:?} differ", a.shape, b.shape),
        ));
    }
    Ok(())
}

/// §5.3 elementwise binary: equal dtypes and shapes (no implicit
/// broadcasting, Section 2 §6); comparisons give Bool.
pub fn binary(op: BinaryOp, a: Operand, b: Operand) -> Result<Shaped> {
    same(op.name(), a, b)?;
    if !op.admits(a.dtype) {
        return Err(malformed(
            op.name(),
            format!("not admissible at {}", a.dtype),
        ));
    }
    Ok((op.result_dtype(a.dtype), a.shape.to_vec()))
}

/// A binary op with a scalar side: the tensor's shape.
pub fn scalar_binary(op: BinaryOp, x: Operand) -> Result<Shaped> {
    if !op.admits(x.dtype) {
        return Err(malformed(
            op.name(),
            format!("not admissible at {}", x.dtype),
        ));
    }
    Ok((op.result_dtype(x.dtype), x.shape.to_vec()))
}

/// `select c a b`: a Bool condition, branches alike, all one shape.
pub fn select(c: Operand, a: Operand, b: Operand) -> Result<Shaped> {
    if c.dtype != Dtype::Bool {
        return Err(malformed(
            "select",
            format!("condition has dtype {}", c.dtype),
        ));
    }
    same("select", a, b)?;
    if c.shape != a.shape {
        return Err(op_err(
            "select",
            format!("condition shape {:?} ≠ {:?}", c.shape, a.shape),
        ));
    }
    Ok((a.dtype, a.shape.to_vec()))
}

/// §5.4 batched matmul: `p ++ [M, K] × p ++ [K, N] → p ++ [M, N]`
/// (Section 2 §7: equal ranks ≥ 2, no batch broadcasting).
pub fn matmul(a: Operand, b: Operand) -> Result<Shaped> {
    let dt = a.dtype;
    if dt != b.dtype || !dt.is_numeric() {
        return Err(malformed(
            "matmul",
            format!("operand dtypes {} and {}", dt, b.dtype),
        ));
    }
    let (sa, sb) = (a.shape, b.shape);
    let r = sa.len();
    if r < 2 || sb.len() != r {
        return Err(op_err(
            "matmul",
            format!("operand shapes {sa:?} and {sb:?}: ranks must be equal and ≥ 2"),
        ));
    }
    if sa[..r - 2] != sb[..r - 2] {
        let (pa, pb) = (&sa[..r - 2], &sb[..r - 2]);
        return Err(op_err(
            "matmul",
            format!("batch dims {pa:?} and {pb:?} differ"),
        ));
    }
    let (k, k2) = (sa[r - 1], sb[r - 2]);
    if k != k2 {
        return Err(op_err(
            "matmul",
            format!("contraction dimension K (={k}) ≠ K' (={k2})"),
        ));
    }
    let mut out = sa[..r - 2].to_vec();
    out.extend([sa[r - 2], sb[r - 1]]);
    Ok((dt, out))
}

/// The shape left by reducing `axes` of `shape` (kept as 1 with
/// `keepdims`).
fn reduced(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    (0..shape.len())
        .filter(|i| keepdims || !axes.contains(i))
        .map(|i| if axes.contains(&i) { 1 } else { shape[i] })
        .collect()
}

/// §5.5 reduce over an axis set (Section 2 §8): valid distinct axes; max,
/// min and mean need a non-empty reduced set.
pub fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool, x: Operand) -> Result<Shaped> {
    let name = format!("reduce.{}", op.name());
    if !op.admits(x.dtype) {
        return Err(malformed(&name, format!("not admissible at {}", x.dtype)));
    }
    let shape = x.shape;
    axes_ok(&name, axes, shape.len())?;
    if op.needs_nonempty() && axes.iter().any(|&a| shape[a] == 0) {
        return Err(op_err(
            &name,
            format!("reduced axes {axes:?} of shape {shape:?} are empty"),
        ));
    }
    Ok((x.dtype, reduced(shape, axes, keepdims)))
}

/// argmax / argmin along one non-empty axis → I64 indices.
pub fn arg_reduce(max: bool, axis: usize, keepdims: bool, x: Operand) -> Result<Shaped> {
    let name = if max { "argmax" } else { "argmin" };
    let shape = x.shape;
    axes_ok(name, &[axis], shape.len())?;
    if shape[axis] == 0 {
        return Err(op_err(
            name,
            format!("axis {axis} of shape {shape:?} is empty"),
        ));
    }
    Ok((Dtype::I64, reduced(shape, &[axis], keepdims)))
}

/// §5.6 transpose: output axis j is input axis `perm[j]` (Section 2 §9);
/// `perm` must be a permutation of the whole rank.
pub fn transpose(perm: &[usize], x: Operand) -> Result<Shaped> {
    check_perm(perm, x.shape.len()).map_err(|e| malformed("transpose", e.to_string()))?;
    Ok((x.dtype, perm.iter().map(|&p| x.shape[p]).collect()))
}

/// §5.7 reshape: equal volumes (Section 2 §10, re-checked at run time).
pub fn reshape(to: &[i64], x: Operand) -> Result<Shaped> {
    let from = x.shape;
    let in_i64 = |v: Option<i128>| v.and_then(|v| i64::try_from(v).ok());
    let from_volume = in_i64(crate::size::volume(from.iter().map(|&d| d as i128)));
    let to_volume = in_i64(crate::size::volume(to.iter().map(|&d| i128::from(d))));
    if to.iter().any(|&d| d < 0) || from_volume.is_none() || from_volume != to_volume {
        return Err(RuleError::ReshapeVolume {
            from: from.to_vec(),
            to: to.to_vec(),
            from_volume: from_volume.unwrap_or(i64::MAX),
            to_volume: to_volume.unwrap_or(i64::MAX),
        });
    }
    // Every `d` is ≥ 0 and at most i64::MAX (a 0 elsewhere may make the
    // volume fit when the dims' product would not), so each fits usize.
    Ok((x.dtype, to.iter().map(|&d| d as usize).collect()))
}

/// §5.8 broadcast to `target`, trailing dims aligned; each source dim is 1
/// or the target's (Section 2 §11).
pub fn broadcast(target: &[usize], x: Operand) -> Result<Shaped> {
    let shape = x.shape;
    let (n, m) = (shape.len(), target.len());
    if n > m {
        return Err(op_err(
            "broadcast",
            format!("cannot broadcast rank {n} {shape:?} to rank {m} {target:?}"),
        ));
    }
    for (i, &d) in shape.iter().enumerate() {
        let t = target[m - n + i];
        if d != 1 && d != t {
            return Err(op_err(
                "broadcast",
                format!(
                    "source dim {i} (={d}) is neither 1 nor the target's {} (={t})",
                    m - n + i
                ),
            ));
        }
    }
    Ok((x.dtype, target.to_vec()))
}

/// §5.9 slice `[start, stop)` along `axis`, every `step`-th index:
/// `0 ≤ start ≤ stop ≤ d`, `step ≥ 1`; the axis becomes
/// `⌈(stop − start) / step⌉` long (docs/syntax.md "Strided slice").
pub fn slice(axis: usize, start: i64, stop: i64, step: usize, x: Operand) -> Result<Shaped> {
    if step == 0 {
        return Err(malformed("slice", "step 0".into()));
    }
    let shape = x.shape;
    axes_ok("slice", &[axis], shape.len())?;
    let d = i64::try_from(shape[axis]).unwrap_or(i64::MAX);
    if !(0 <= start && start <= stop && stop <= d) {
        return Err(op_err(
            "slice",
            format!("range {start}..{stop} is not within 0..{d} on axis {axis}"),
        ));
    }
    let mut out = shape.to_vec();
    // 0 ≤ stop − start ≤ d, a size.
    out[axis] = ((stop - start) as usize).div_ceil(step);
    Ok((x.dtype, out))
}

/// §5.10 concat along `axis`: one dtype, shapes equal off the axis, the
/// concatenated dim within i64 (what σ and the kernels' indices hold).
pub fn concat(axis: usize, xs: &[Operand]) -> Result<Shaped> {
    let Some(first) = xs.first() else {
        return Err(malformed("concat", "no operands".into()));
    };
    let shape = first.shape;
    axes_ok("concat", &[axis], shape.len())?;
    let mut total = 0usize;
    for t in xs {
        if t.dtype != first.dtype {
            return Err(malformed(
                "concat",
                format!("dtypes {} and {} differ", first.dtype, t.dtype),
            ));
        }
        let s = t.shape;
        let off_axis_differ = s.len() != shape.len()
            || s.iter()
                .zip(shape)
                .enumerate()
                .any(|(i, (a, b))| i != axis && a != b);
        if off_axis_differ {
            return Err(op_err(
                "concat",
                format!("shapes {shape:?} and {s:?} differ off axis {axis}"),
            ));
        }
        total = total
            .checked_add(s[axis])
            .filter(|&n| i64::try_from(n).is_ok())
            .ok_or_else(|| op_err("concat", "concatenated dimension overflows".into()))?;
    }
    let mut out = shape.to_vec();
    out[axis] = total;
    Ok((first.dtype, out))
}

/// §12a gather along `axis` (docs/syntax.md "gather"): `table`'s shape with
/// axis `axis` replaced by `ids`' shape; `ids` is I64. The ids' values are
/// checked by [`gather_ids`].
pub fn gather(axis: usize, table: Operand, ids: Operand) -> Result<Shaped> {
    axes_ok("gather", &[axis], table.shape.len())?;
    // §18: rows of whole blocks only; the blocks run along the last axis.
    if table.dtype.is_quantized() {
        quantized_shape_ok("gather", table)?;
        if axis + 1 == table.shape.len() {
            return Err(malformed(
                "gather",
                format!("along the block axis of a {} table", table.dtype),
            ));
        }
    }
    if ids.dtype != Dtype::I64 {
        return Err(malformed(
            "gather",
            format!("indices have dtype {}, expected i64", ids.dtype),
        ));
    }
    let t = table.shape;
    let shape = [&t[..axis], ids.shape, &t[axis + 1..]].concat();
    Ok((table.dtype, shape))
}

/// The run-time half of the gather rule, shared by both backends: every id
/// in `0..bound`, else the first bad one (row-major) with its position in
/// an index tensor of shape `ids_shape`.
pub fn gather_ids(
    axis: usize,
    bound: usize,
    ids_shape: &[usize],
    ids: impl IntoIterator<Item = i64>,
) -> Result<()> {
    let ok = |i: i64| usize::try_from(i).is_ok_and(|u| u < bound);
    let Some((flat, index)) = ids.into_iter().enumerate().find(|&(_, i)| !ok(i)) else {
        return Ok(());
    };
    let mut position = vec![0; ids_shape.len()];
    let mut rest = flat;
    for (p, &d) in position.iter_mut().zip(ids_shape).rev() {
        if d > 0 {
            *p = rest % d;
            rest /= d;
        }
    }
    Err(RuleError::IndexOutOfRange {
        op: "gather".into(),
        axis,
        position,
        index,
        bound,
    })
}

/// §8a top-k: `k ≤ dim(x, axis)`; the axis becomes `k` long; values keep
/// `x`'s dtype, indices are I64.
pub fn topk(k: usize, axis: usize, indices: bool, x: Operand) -> Result<Shaped> {
    axes_ok("topk", &[axis], x.shape.len())?;
    if x.dtype == Dtype::Bool {
        return Err(malformed("topk", "bool operand".into()));
    }
    let d = x.shape[axis];
    if k > d {
        return Err(op_err(
            "topk",
            format!("k = {k} exceeds axis {axis} of size {d}"),
        ));
    }
    let mut out = x.shape.to_vec();
    out[axis] = k;
    Ok((if indices { Dtype::I64 } else { x.dtype }, out))
}

/// §8b cumsum: a numeric operand and a valid axis; same dtype and shape.
pub fn cumsum(axis: usize, x: Operand) -> Result<Shaped> {
    axes_ok("cumsum", &[axis], x.shape.len())?;
    if !x.dtype.is_numeric() {
        return Err(malformed("cumsum", format!("{} operand", x.dtype)));
    }
    Ok((x.dtype, x.shape.to_vec()))
}

/// §12b pad: `before`, `after` ≥ 0 under σ; the axis becomes
/// `before + d + after` (within i64, what σ and the kernels' indices hold).
pub fn pad(axis: usize, before: i64, after: i64, x: Operand) -> Result<Shaped> {
    axes_ok("pad", &[axis], x.shape.len())?;
    let d = i64::try_from(x.shape[axis]).unwrap_or(i64::MAX);
    if before < 0 || after < 0 {
        return Err(op_err(
            "pad",
            format!("padding {before}, {after} on axis {axis} is negative"),
        ));
    }
    let total = before
        .checked_add(d)
        .and_then(|t| t.checked_add(after))
        .ok_or_else(|| op_err("pad", "the padded dimension overflows".into()))?;
    let mut out = x.shape.to_vec();
    // 0 ≤ total ≤ i64::MAX.
    out[axis] = total as usize;
    Ok((x.dtype, out))
}

/// §12e rope: float `x` of shape `s ++ [D]`, tables of its dtype and shape
/// `s ++ [H]` with `D = 2·H`; the result is `x`'s type.
pub fn rope(layout: RopeLayout, x: Operand, cos: Operand, sin: Operand) -> Result<Shaped> {
    let name = layout.name();
    if !x.dtype.is_float() || cos.dtype != x.dtype || sin.dtype != x.dtype {
        return Err(malformed(
            name,
            format!(
                "operand dtypes {}, {} and {}",
                x.dtype, cos.dtype, sin.dtype
            ),
        ));
    }
    let (s, c) = (x.shape, cos.shape);
    let halved = s.split_last().map(|(d, lead)| (d / 2, d % 2, lead));
    let fits = matches!(halved, Some((h, 0, lead)) if c.split_last() == Some((&h, lead)));
    if !fits || sin.shape != c {
        return Err(op_err(
            name,
            format!(
                "shapes {s:?}, {c:?} and {:?}: the tables must be the rotated shape with its last dim halved",
                sin.shape
            ),
        ));
    }
    Ok((x.dtype, s.to_vec()))
}

/// §12f sdpa: F32 `q [s…, M, D]` and `mask [s…, M, T]`, `k [s…, D, T]` and
/// `v [s…, T, E]` in F32, F16 or BF16, with `T ≥ 1` (the softmax's `max`
/// needs a key, Section 2 §8); the result `[s…, M, E]`.
pub fn sdpa(q: Operand, k: Operand, v: Operand, mask: Operand) -> Result<Shaped> {
    let dts = [q.dtype, k.dtype, v.dtype, mask.dtype];
    let widens = |d: Dtype| matches!(d, Dtype::F32 | Dtype::F16 | Dtype::BF16);
    if q.dtype != Dtype::F32 || mask.dtype != Dtype::F32 || !widens(k.dtype) || !widens(v.dtype) {
        return Err(malformed("sdpa", format!("operand dtypes {dts:?}")));
    }
    let (sq, sk, sv, sm) = (q.shape, k.shape, v.shape, mask.shape);
    let n = sq.len();
    let lead = n.checked_sub(2).map(|l| &sq[..l]);
    let fits = |x: &[usize], rows: usize, cols: usize| {
        x.len() == n && lead == Some(&x[..n - 2]) && x[n - 2] == rows && x[n - 1] == cols
    };
    let ok = n >= 2 && {
        let (m, d, t) = (sq[n - 2], sq[n - 1], sk.get(n - 1).copied().unwrap_or(0));
        fits(sk, d, t) && sv.len() == n && fits(sv, t, sv[n - 1]) && fits(sm, m, t)
    };
    if !ok {
        return Err(op_err(
            "sdpa",
            format!("shapes {sq:?}, {sk:?}, {sv:?} and {sm:?} are not [s…, M, D], [s…, D, T], [s…, T, E], [s…, M, T]"),
        ));
    }
    if sk[n - 1] == 0 {
        return Err(op_err(
            "sdpa",
            format!("keys {sk:?} hold no position: the softmax's max needs one"),
        ));
    }
    let mut out = sq[..n - 1].to_vec();
    out.push(sv[n - 1]);
    Ok((Dtype::F32, out))
}

/// One spatial axis of a window op (§12c): `(s + 2·pad − dil·(k − 1) − 1)
/// / stride + 1` elements, or `None` when the dilated kernel does not fit
/// in the padded input (or `k`, `stride` or `dil` is 0, or a count
/// overflows). The checker's symbolic rule is the same formula over dims.
pub fn window_len(s: usize, k: usize, stride: usize, pad: usize, dil: usize) -> Option<usize> {
    if k == 0 || stride == 0 || dil == 0 {
        return None;
    }
    let padded = pad.checked_mul(2)?.checked_add(s)?;
    let span = dil.checked_mul(k - 1)?.checked_add(1)?;
    Some(padded.checked_sub(span)? / stride + 1)
}

/// The input index along spatial axis `a` of output position `p` and kernel
/// tap `k` (`p·stride + k·dilation − padding`), or `None` in the padding.
/// In i128: no product of two `usize` overflows it, whatever hand-built IR
/// holds. Both backends' convolution and pooling index through this.
pub fn window_tap(w: &Window, a: usize, p: usize, k: usize, len: usize) -> Option<usize> {
    let pos =
        p as i128 * w.stride[a] as i128 + k as i128 * w.dilation[a] as i128 - w.padding[a] as i128;
    usize::try_from(pos).ok().filter(|&i| i < len)
}

/// A window's output extents over the spatial `dims` with kernel extents
/// `kernel`, or an error naming the first axis that does not fit.
fn window_out(op: &str, dims: &[usize], kernel: &[usize], w: &Window) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for (i, (&s, &k)) in dims.iter().zip(kernel).enumerate() {
        let (st, p, d) = (w.stride[i], w.padding[i], w.dilation[i]);
        let n = window_len(s, k, st, p, d).ok_or_else(|| {
            op_err(
                op,
                format!(
                    "spatial axis {i}: a kernel of {k} (dilation {d}) does not fit in {s} elements padded by {p} on each side (stride {st})"
                ),
            )
        })?;
        out.push(n);
    }
    Ok(out)
}

fn window_attrs_ok(op: &str, w: &Window, r: usize) -> Result<()> {
    let ok = w.stride.len() == r && w.padding.len() == r && w.dilation.len() == r;
    if !ok || !(1..=2).contains(&r) {
        return Err(malformed(op, format!("window {w} for {r} spatial axes")));
    }
    Ok(())
}

/// §12c conv: `x: [N, C, S…]`, `w: [O, C / groups, K…]` of one numeric
/// dtype, `O` a multiple of `groups`; the result is `[N, O, S'…]` with
/// `S'` from [`window_len`].
pub fn conv(window: &Window, groups: usize, x: Operand, w: Operand) -> Result<Shaped> {
    let r = window.rank();
    window_attrs_ok("conv", window, r)?;
    if x.dtype != w.dtype || !x.dtype.is_numeric() {
        return Err(malformed(
            "conv",
            format!("operand dtypes {} and {}", x.dtype, w.dtype),
        ));
    }
    let (sx, sw) = (x.shape, w.shape);
    if sx.len() != r + 2 || sw.len() != r + 2 {
        return Err(op_err(
            "conv",
            format!(
                "input {sx:?} and weights {sw:?} for {r} spatial axes: both need rank {}",
                r + 2
            ),
        ));
    }
    let per_group = sw[1];
    if groups == 0 || sx[1] != per_group.checked_mul(groups).unwrap_or(usize::MAX) {
        return Err(op_err(
            "conv",
            format!(
                "the input's {} channels are not {groups} groups of the weights' {per_group}",
                sx[1]
            ),
        ));
    }
    if !sw[0].is_multiple_of(groups) {
        return Err(op_err(
            "conv",
            format!(
                "{} output channels do not split into {groups} groups",
                sw[0]
            ),
        ));
    }
    let mut out = vec![sx[0], sw[0]];
    out.extend(window_out("conv", &sx[2..], &sw[2..], window)?);
    Ok((x.dtype, out))
}

/// §12d pooling over the last `kernel.len()` axes: a numeric operand (a
/// float one for an average), dilation 1, padding at most half the kernel
/// and, for a max, non-empty spatial axes, so every max window holds an
/// input element; those axes get [`window_len`] elements.
pub fn pool(kind: PoolKind, kernel: &[usize], window: &Window, x: Operand) -> Result<Shaped> {
    let r = kernel.len();
    window_attrs_ok("pool", window, r)?;
    let numeric = match kind {
        PoolKind::Max => x.dtype.is_numeric(),
        PoolKind::Avg => x.dtype.is_float(),
    };
    if !numeric {
        return Err(malformed("pool", format!("{} operand", x.dtype)));
    }
    if x.shape.len() < r {
        return Err(op_err(
            "pool",
            format!("{r} spatial axes in a tensor of rank {}", x.shape.len()),
        ));
    }
    if window.dilation.iter().any(|&d| d != 1) {
        return Err(malformed(
            "pool",
            format!("dilation {:?} (pooling has none)", window.dilation),
        ));
    }
    if let Some(i) = (0..r).find(|&i| window.padding[i] > kernel[i] / 2) {
        return Err(op_err(
            "pool",
            format!(
                "spatial axis {i}: padding {} exceeds half the kernel {}",
                window.padding[i], kernel[i]
            ),
        ));
    }
    let lead = x.shape.len() - r;
    if kind == PoolKind::Max {
        if let Some(i) = (0..r).find(|&i| x.shape[lead + i] == 0) {
            return Err(op_err(
                "max_pool",
                format!("spatial axis {i} is empty: a window would hold padding only"),
            ));
        }
    }
    let mut out = x.shape[..lead].to_vec();
    out.extend(window_out("pool", &x.shape[lead..], kernel, window)?);
    Ok((x.dtype, out))
}

/// `fill`: the given dtype and shape.
pub fn fill(dt: Dtype, shape: &[usize]) -> Result<Shaped> {
    Ok((dt, shape.to_vec()))
}

/// `iota` along a valid axis of its shape.
pub fn iota(dt: Dtype, shape: &[usize], axis: usize) -> Result<Shaped> {
    axes_ok("iota", &[axis], shape.len())?;
    Ok((dt, shape.to_vec()))
}

/// The rule for any op but a call (a call's result is its callee's, which
/// each backend obtains its own way and checks against the signature):
/// attributes evaluated under σ, operands looked up with `operand`.
pub fn infer<'a>(
    op: &Op,
    operand: &dyn Fn(Value) -> Result<Operand<'a>>,
    sigma: &Sigma,
) -> Result<Shaped> {
    if !op.admits_quantized() {
        for v in op.operands() {
            let x = operand(v)?;
            if x.dtype.is_quantized() {
                return Err(malformed(
                    &op.to_string(),
                    format!("a {} operand: only dequantize, qmatmul and gather read one (Section 2 §18)", x.dtype),
                ));
            }
        }
    }
    match op {
        Op::Unary(o, x) => unary(*o, operand(*x)?),
        Op::Cast(dt, x) => cast(*dt, operand(*x)?),
        Op::Binary(o, a, b) => binary(*o, operand(*a)?, operand(*b)?),
        Op::ScalarBinary { op, x, .. } => scalar_binary(*op, operand(*x)?),
        Op::Select(c, a, b) => select(operand(*c)?, operand(*a)?, operand(*b)?),
        Op::Matmul(a, b) => matmul(operand(*a)?, operand(*b)?),
        Op::MatmulI32(a, b) => matmul_i32(operand(*a)?, operand(*b)?),
        Op::DqMatmul {
            x,
            w,
            scale,
            outliers,
        } => dq_matmul([
            operand(*x)?,
            operand(*w)?,
            operand(*scale)?,
            operand(*outliers)?,
        ]),
        Op::QMatmul(x, w) => qmatmul(operand(*x)?, operand(*w)?),
        Op::Reduce {
            op,
            axes,
            keepdims,
            x,
        } => reduce(*op, axes, *keepdims, operand(*x)?),
        Op::ArgReduce {
            max,
            axis,
            keepdims,
            x,
        } => arg_reduce(*max, *axis, *keepdims, operand(*x)?),
        Op::Transpose(perm, x) => transpose(perm, operand(*x)?),
        Op::Reshape(s, x) => reshape(&eval_target(s, sigma)?, operand(*x)?),
        Op::Broadcast(s, x) => broadcast(&eval_shape(s, sigma, "broadcast")?, operand(*x)?),
        Op::Slice {
            axis,
            start,
            stop,
            step,
            x,
        } => {
            let (a, b) = eval_bounds(start, stop, sigma)?;
            slice(*axis, a, b, *step, operand(*x)?)
        }
        Op::Concat(axis, xs) => {
            let ops = xs.iter().map(|v| operand(*v)).collect::<Result<Vec<_>>>()?;
            concat(*axis, &ops)
        }
        Op::Gather { axis, table, ids } => gather(*axis, operand(*table)?, operand(*ids)?),
        Op::TopK {
            k,
            axis,
            indices,
            x,
        } => topk(eval_size(k, sigma, "topk")?, *axis, *indices, operand(*x)?),
        Op::CumSum { axis, x } => cumsum(*axis, operand(*x)?),
        Op::Rope {
            layout,
            x,
            cos,
            sin,
        } => rope(*layout, operand(*x)?, operand(*cos)?, operand(*sin)?),
        Op::Sdpa { q, k, v, mask, .. } => {
            sdpa(operand(*q)?, operand(*k)?, operand(*v)?, operand(*mask)?)
        }
        Op::Pad {
            axis,
            before,
            after,
            x,
            ..
        } => pad(
            *axis,
            eval_signed(before, sigma, "pad before")?,
            eval_signed(after, sigma, "pad after")?,
            operand(*x)?,
        ),
        Op::Conv {
            window,
            groups,
            x,
            w,
        } => conv(window, *groups, operand(*x)?, operand(*w)?),
        Op::Pool {
            kind,
            kernel,
            window,
            x,
        } => pool(*kind, kernel, window, operand(*x)?),
        Op::Fill(dt, s, _) => fill(*dt, &eval_shape(s, sigma, "fill")?),
        Op::Iota(dt, s, axis) => iota(*dt, &eval_shape(s, sigma, "iota")?, *axis),
        Op::Call(name, _) => Err(RuleError::Malformed(format!(
            "call of `{name}`: a call's result is its callee's, not a rule's"
        ))),
        // A dim value is a call argument, never a tensor (the verifier's
        // rule); the backends bind it before any rule runs.
        Op::Dim(d) => Err(RuleError::Malformed(format!(
            "`dim.value {d}` has no tensor shape"
        ))),
    }
}
