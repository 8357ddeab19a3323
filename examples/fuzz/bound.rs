//! Per-element error bounds for the JIT modes that may differ from the
//! interpreter (a [`Taint::Direct`] result): the oracle's one place that
//! says how far each op may be off, propagated through the program.
//!
//! A Direct value is a *tolerance source* (its operands exact) seen only
//! through layout ops and float casts. For such a program the oracle
//! appends to the checked function the computation of each Direct value's
//! bound, in f32, through the same ops with the same dims, and runs it on
//! the interpreter with the same arguments: the bound of the result, per
//! element. The bound per op (tc-llvm's crate docs, "Numerics"):
//!
//! | op | bound of one element |
//! |---|---|
//! | `sum`, `matmul`, `conv`, `qmatmul` of `n` terms | `2(n+2)·2⁻²⁴·Σ|terms|` |
//! | `mean` of `n` terms | `2(n+3)·2⁻²⁴·mean|x|` (the sum's bound, divided, plus the division's rounding) |
//! | fast `exp, log, tanh, sigmoid, erf, gelu` (f32) | `TOLERANCE.0·|y| + TOLERANCE.1` |
//! | a result rounded into a narrow float `d` (either side) | `+ 2^(2−p_d)·(|y| + B) + 2·denorm_d` |
//! | transpose, reshape, broadcast, slice, concat, pad | the operands' bounds moved as the values are (0 for an exact operand, 0 in the padding) |
//! | cast to f32 | unchanged (exact) |
//!
//! `n` counts the terms that can round: a convolution's taps in the
//! padding add exact zeros. `Σ|terms|` is computed in f32 on the
//! interpreter, within `γₙ` of itself, which the factor 2 above covers.
//! An element whose bound overflowed to ∞ is unbounded (the crate docs:
//! an overflowing partial sum may give ±∞ or NaN in one order and a finite
//! value in another).

use std::collections::HashMap;

use super::{is_tolerance_source, Taint};
use tc_core::check::Checked;
use tc_core::ir::{BinaryOp, Function, Inst, Op, ReduceOp, Scalar, UnaryOp, Value, ValueMap};
use tc_core::{Dim, Dtype, Type};
use tc_llvm::JitOptions;

/// The unit roundoff of f32.
const U: f64 = 1.0 / (1u64 << 24) as f64;

/// The checked function with its result replaced by the per-element bound
/// of that result's difference (an f32 tensor of the result's shape), or
/// `None` when the result is not [`Taint::Direct`] or a bound cannot be
/// built for one of its sources.
pub fn bound_program(ck: &Checked, taints: &ValueMap<Taint>, o: JitOptions) -> Option<Function> {
    let ret = ck.func.ret;
    if taints[ret] != Taint::Direct {
        return None;
    }
    let mut a = Appender::new(ck);
    let mut bound: HashMap<Value, Value> = HashMap::new();
    for inst in &ck.func.body {
        let v = inst.result;
        if taints[v] != Taint::Direct {
            continue;
        }
        let b = if is_tolerance_source(&inst.op, ck, o) {
            a.source(&inst.op, v)?
        } else {
            a.moved(&inst.op, v, &bound)?
        };
        bound.insert(v, b);
    }
    let b = *bound.get(&ret)?;
    let shape = ck.func.sig.ret.as_tensor()?.shape.clone();
    let mut f = a.f;
    f.sig.ret = Type::tensor(Dtype::F32, shape);
    f.ret = b;
    Some(f)
}

/// Appends instructions to a copy of the checked function.
struct Appender<'c> {
    ck: &'c Checked,
    f: Function,
    next: u32,
}

impl<'c> Appender<'c> {
    fn new(ck: &'c Checked) -> Appender<'c> {
        let next = (ck.func.sig.params.len() + ck.func.body.len()) as u32;
        Appender {
            ck,
            f: ck.func.clone(),
            next,
        }
    }

    fn op(&mut self, op: Op) -> Value {
        let v = Value::from_u32(self.next);
        self.next += 1;
        self.f.body.push(Inst::new(v, op, self.f.sig.span));
        v
    }

    fn dims(&self, v: Value) -> Option<Vec<Dim>> {
        self.ck.types[v].as_tensor().map(|t| t.shape.clone())
    }

    fn dtype(&self, v: Value) -> Option<Dtype> {
        self.ck.types[v].as_tensor().map(|t| t.dtype)
    }

    /// `|x|` in f32 (every float dtype widens exactly).
    fn abs32(&mut self, x: Value) -> Option<Value> {
        let x = match self.dtype(x)? {
            Dtype::F32 => x,
            d if d.is_float() => self.op(Op::Cast(Dtype::F32, x)),
            _ => return None,
        };
        Some(self.op(Op::Unary(UnaryOp::Abs, x)))
    }

    fn fill(&mut self, dims: Vec<Dim>, x: f64) -> Value {
        self.op(Op::Fill(Dtype::F32, dims, Scalar::Float(x)))
    }

    fn scale(&mut self, x: Value, c: f64) -> Value {
        self.scalar(BinaryOp::Mul, x, c)
    }

    fn scalar(&mut self, op: BinaryOp, x: Value, c: f64) -> Value {
        self.op(Op::ScalarBinary {
            op,
            x,
            s: Scalar::Float(c),
            scalar_left: false,
        })
    }

    /// `Σ|terms| · 2(counts + extra)·u`.
    fn gamma(&mut self, sum_abs: Value, counts: Value, extra: f64) -> Value {
        let n = self.scalar(BinaryOp::Add, counts, extra);
        let g = self.scale(n, 2.0 * U);
        self.op(Op::Binary(BinaryOp::Mul, sum_abs, g))
    }

    /// The bound of a tolerance source `v = op(…)`, operands exact.
    fn source(&mut self, op: &Op, v: Value) -> Option<Value> {
        let b = match op {
            Op::Reduce {
                op: rop @ (ReduceOp::Sum | ReduceOp::Mean),
                axes,
                keepdims,
                x,
            } => {
                let ax = self.abs32(*x)?;
                let s = self.op(Op::Reduce {
                    op: *rop,
                    axes: axes.clone(),
                    keepdims: *keepdims,
                    x: ax,
                });
                let ones = self.fill(self.dims(*x)?, 1.0);
                let n = self.op(Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: axes.clone(),
                    keepdims: *keepdims,
                    x: ones,
                });
                let extra = if *rop == ReduceOp::Mean { 3.0 } else { 2.0 };
                self.gamma(s, n, extra)
            }
            Op::Matmul(x, w) => {
                let (ax, aw) = (self.abs32(*x)?, self.abs32(*w)?);
                let s = self.op(Op::Matmul(ax, aw));
                let n = self.terms_of_rows(*x, v)?;
                self.gamma(s, n, 2.0)
            }
            Op::Conv {
                window,
                groups,
                x,
                w,
            } => {
                let (ax, aw) = (self.abs32(*x)?, self.abs32(*w)?);
                let conv = |x, w| Op::Conv {
                    window: window.clone(),
                    groups: *groups,
                    x,
                    w,
                };
                let s = self.op(conv(ax, aw));
                let (ox, ow) = (
                    self.fill(self.dims(*x)?, 1.0),
                    self.fill(self.dims(*w)?, 1.0),
                );
                let n = self.op(conv(ox, ow));
                self.gamma(s, n, 2.0)
            }
            Op::QMatmul(x, w) => self.qmatmul(*x, *w, v)?,
            Op::Unary(_, _) => {
                let ay = self.abs32(v)?;
                let rel = self.scale(ay, f64::from(tc_llvm::TOLERANCE.0));
                self.scalar(BinaryOp::Add, rel, f64::from(tc_llvm::TOLERANCE.1))
            }
            _ => return None,
        };
        self.rounded(v, b)
    }

    /// Per element of `out` (a product of `x`'s rows), the count of terms:
    /// `x`'s last dim, by a sum of ones over it, broadcast.
    fn terms_of_rows(&mut self, x: Value, out: Value) -> Option<Value> {
        let dx = self.dims(x)?;
        let last = dx.len().checked_sub(1)?;
        let ones = self.fill(dx, 1.0);
        let k = self.op(Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![last],
            keepdims: true,
            x: ones,
        });
        Some(self.op(Op::Broadcast(self.dims(out)?, k)))
    }

    /// `qmatmul x w` (`x: [p…, K]`, `w: [N, K]` quantized): `Σ|terms|` as
    /// `|x| · |dequantize w|ᵀ`, `x`'s leading dims folded into rows.
    fn qmatmul(&mut self, x: Value, w: Value, v: Value) -> Option<Value> {
        let dx = self.dims(x)?;
        let k = dx.last()?.clone();
        let rows = dx[..dx.len() - 1]
            .iter()
            .cloned()
            .fold(Dim::c(1), |a, d| a * d);
        let ax = self.abs32(x)?;
        let x2 = self.op(Op::Reshape(vec![rows, k], ax));
        let wf = self.op(Op::Cast(Dtype::F32, w));
        let aw = self.op(Op::Unary(UnaryOp::Abs, wf));
        let wt = self.op(Op::Transpose(vec![1, 0], aw));
        let s2 = self.op(Op::Matmul(x2, wt));
        let s = self.op(Op::Reshape(self.dims(v)?, s2));
        let n = self.terms_of_rows(x, v)?;
        Some(self.gamma(s, n, 2.0))
    }

    /// `b` plus the rounding of `v` into its dtype, where narrow.
    fn rounded(&mut self, v: Value, b: Value) -> Option<Value> {
        let Some((p, denorm)) = precision(self.dtype(v)?) else {
            return Some(b);
        };
        let ay = self.abs32(v)?;
        let m = self.op(Op::Binary(BinaryOp::Add, ay, b));
        let r = self.scale(m, 2f64.powi(2 - p));
        let r = self.scalar(BinaryOp::Add, r, 2.0 * denorm);
        Some(self.op(Op::Binary(BinaryOp::Add, b, r)))
    }

    /// The bound of a layout op or float cast over Direct operands: the
    /// same op on their bounds (0 for an exact operand, 0 in padding).
    fn moved(&mut self, op: &Op, v: Value, bound: &HashMap<Value, Value>) -> Option<Value> {
        match op {
            Op::Transpose(..)
            | Op::Reshape(..)
            | Op::Broadcast(..)
            | Op::Slice { .. }
            | Op::Concat(..)
            | Op::Pad { .. } => {}
            Op::Cast(d, x) if d.is_float() => {
                let bx = *bound.get(x)?;
                return if *d == Dtype::F32 {
                    Some(bx)
                } else {
                    self.rounded(v, bx)
                };
            }
            _ => return None,
        }
        let mut of = HashMap::new();
        for u in op.operands() {
            let b = match bound.get(&u) {
                Some(b) => *b,
                None => self.fill(self.dims(u)?, 0.0),
            };
            of.insert(u, b);
        }
        let mut moved = op.map_operands(&mut |u| of.get(&u).copied().unwrap_or(u));
        if let Op::Pad { value, .. } = &mut moved {
            *value = Scalar::Float(0.0);
        }
        Some(self.op(moved))
    }
}

/// A narrow float's precision (significand bits) and least subnormal;
/// `None` for f32 (no further rounding).
fn precision(d: Dtype) -> Option<(i32, f64)> {
    match d {
        Dtype::F16 => Some((11, 2f64.powi(-24))),
        Dtype::BF16 => Some((8, 2f64.powi(-133))),
        Dtype::F8E4M3 => Some((4, 2f64.powi(-9))),
        Dtype::F8E5M2 => Some((3, 2f64.powi(-16))),
        _ => None,
    }
}
