//! The core IR of a tensor function body (Section 2 §4–§13, §17).
//!
//! Cranelift-style: values are typed ids (`v12`); parameters are `v0 … vₙ₋₁`
//! and every instruction defines the next id. [`verify`] checks structural
//! well-formedness (the checker assigns types); [`Function`]'s `Display` is the
//! textual form used in tests and error notes.

use std::collections::BTreeMap;
use std::fmt;

use crate::ctx::ShapeVar;
use crate::diag::{codes, Diagnostic, SpanId};
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::pred::Pred;
use crate::types::{shape_string, Type};

/// An SSA value id. Opaque, as Cranelift's entity ids are: a function's
/// values are made by [`Function::param_value`] and [`Function::inst_value`],
/// told apart by [`Function::value_def`], and per-value data lives in a
/// [`ValueMap`]; no code does arithmetic on the number.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Value(u32);

impl Value {
    /// The value with this number, for hand-written fixtures that name a
    /// value outside any function (a verifier test's undefined `v7`).
    pub const fn from_u32(n: u32) -> Value {
        Value(n)
    }

    fn new(i: usize) -> Value {
        Value(u32::try_from(i).expect("more than u32::MAX values"))
    }

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// What defines a value: parameter `i` of the signature or instruction `j`
/// of the body (the numbering of [`Function::body`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueDef {
    /// `sig.params[i]`.
    Param(usize),
    /// `body[j]`.
    Inst(usize),
}

/// Data per value of a function, indexed by [`Value`] (Cranelift's
/// `SecondaryMap`, dense): parameters first, then one entry per
/// instruction, as the ids are numbered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ValueMap<T>(Vec<T>);

impl<T> ValueMap<T> {
    /// An empty map.
    pub fn new() -> ValueMap<T> {
        ValueMap(Vec::new())
    }

    /// An empty map with room for `n` values.
    pub fn with_capacity(n: usize) -> ValueMap<T> {
        ValueMap(Vec::with_capacity(n))
    }

    /// One entry per value of `func`, `f(v)` for each.
    pub fn from_fn(func: &Function, f: impl FnMut(Value) -> T) -> ValueMap<T> {
        func.values().map(f).collect()
    }

    /// `x` for every value of `func`.
    pub fn filled(func: &Function, x: T) -> ValueMap<T>
    where
        T: Clone,
    {
        ValueMap(vec![x; func.num_values()])
    }

    /// Appends the entry of the next value.
    pub fn push(&mut self, x: T) {
        self.0.push(x);
    }

    /// The entry of `v`, if the map has one.
    pub fn get(&self, v: Value) -> Option<&T> {
        self.0.get(v.index())
    }

    /// The entry of `v`, mutably, if the map has one.
    pub fn get_mut(&mut self, v: Value) -> Option<&mut T> {
        self.0.get_mut(v.index())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No entries?
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values that have an entry, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = Value> + ExactSizeIterator {
        (0..self.0.len()).map(Value::new)
    }

    /// `(value, entry)` in value order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (Value, &T)> + ExactSizeIterator {
        self.0.iter().enumerate().map(|(i, x)| (Value::new(i), x))
    }

    /// `(value, entry)` in value order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Value, &mut T)> {
        self.0
            .iter_mut()
            .enumerate()
            .map(|(i, x)| (Value::new(i), x))
    }

    /// The entries in value order.
    pub fn values(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// The entries in value order, mutably.
    pub fn values_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.0.iter_mut()
    }

    /// The entries in value order, by value.
    pub fn into_values(self) -> std::vec::IntoIter<T> {
        self.0.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a ValueMap<T> {
    type Item = (Value, &'a T);
    type IntoIter = std::iter::Map<
        std::iter::Enumerate<std::slice::Iter<'a, T>>,
        fn((usize, &'a T)) -> (Value, &'a T),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().enumerate().map(|(i, x)| (Value::new(i), x))
    }
}

impl<T> std::ops::Index<Value> for ValueMap<T> {
    type Output = T;
    fn index(&self, v: Value) -> &T {
        &self.0[v.index()]
    }
}

impl<T> std::ops::IndexMut<Value> for ValueMap<T> {
    fn index_mut(&mut self, v: Value) -> &mut T {
        &mut self.0[v.index()]
    }
}

impl<T> FromIterator<T> for ValueMap<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> ValueMap<T> {
        ValueMap(it.into_iter().collect())
    }
}

impl<T> From<Vec<T>> for ValueMap<T> {
    fn from(v: Vec<T>) -> ValueMap<T> {
        ValueMap(v)
    }
}

impl<T> Extend<T> for ValueMap<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, it: I) {
        self.0.extend(it)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// Elementwise unary operations (Section 2 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum UnaryOp {
    /// `-x` (Numeric)
    Neg,
    /// `|x|` (Numeric)
    Abs,
    /// `max(x, 0)` (Numeric)
    Relu,
    /// `eˣ` (Float)
    Exp,
    /// `ln x` (Float)
    Log,
    /// `√x` (Float)
    Sqrt,
    /// `1/√x` (Float)
    Rsqrt,
    /// `tanh x` (Float)
    Tanh,
    /// `1/(1+e⁻ˣ)` (Float)
    Sigmoid,
    /// `x·Φ(x)`, erf form (Float)
    Gelu,
    /// `sin x` (Float)
    Sin,
    /// `cos x` (Float)
    Cos,
    /// `erf x` (Float)
    Erf,
    /// `1/x` (Float)
    Recip,
    /// `⌊x⌋` (Float)
    Floor,
    /// `⌈x⌉` (Float)
    Ceil,
    /// round half to even (Float)
    Round,
    /// logical not (Bool)
    Not,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 18] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Erf,
        UnaryOp::Recip,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Not,
    ];

    /// The surface / IR name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Erf => "erf",
            UnaryOp::Recip => "recip",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Not => "not",
        }
    }

    /// Look up by name.
    pub fn from_name(s: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|o| o.name() == s)
    }

    /// Admissible at `dt`? (Section 2 §4.)
    pub fn admits(self, dt: Dtype) -> bool {
        match self {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => dt.is_numeric(),
            UnaryOp::Not => dt.is_bool(),
            _ => dt.is_float(),
        }
    }

    /// The class it needs, for diagnostics.
    pub fn class_name(self) -> &'static str {
        match self {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => "numeric",
            UnaryOp::Not => "bool",
            _ => "float",
        }
    }
}

/// Elementwise binary operations (Section 2 §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinaryOp {
    /// `+` (Numeric)
    Add,
    /// `-` (Numeric)
    Sub,
    /// `*` (Numeric)
    Mul,
    /// `/` (Numeric; int: truncating, ÷0 = 0)
    Div,
    /// maximum (Numeric)
    Max,
    /// minimum (Numeric)
    Min,
    /// `aᵇ` (Float)
    Pow,
    /// remainder, truncating (signed int; ÷0 = 0)
    Rem,
    /// logical and (Bool)
    And,
    /// logical or (Bool)
    Or,
    /// logical xor (Bool)
    Xor,
    /// `==` → Bool (Numeric or Bool)
    Eq,
    /// `!=` → Bool
    Ne,
    /// `<` → Bool
    Lt,
    /// `<=` → Bool
    Le,
    /// `>` → Bool
    Gt,
    /// `>=` → Bool
    Ge,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 17] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Rem,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
    ];

    /// The surface / IR name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "maximum",
            BinaryOp::Min => "minimum",
            BinaryOp::Pow => "pow",
            BinaryOp::Rem => "rem",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
        }
    }

    /// Look up by name.
    pub fn from_name(s: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.into_iter().find(|o| o.name() == s)
    }

    /// Comparisons produce Bool.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// Admissible at operand dtype `dt`? (Section 2 §6.)
    pub fn admits(self, dt: Dtype) -> bool {
        match self {
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min => dt.is_numeric(),
            BinaryOp::Pow => dt.is_float(),
            BinaryOp::Rem => dt.is_int(),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => dt.is_bool(),
            _ => true,
        }
    }

    /// The class it needs, for diagnostics.
    pub fn class_name(self) -> &'static str {
        match self {
            BinaryOp::Pow => "float",
            BinaryOp::Rem => "signed int",
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => "bool",
            o if o.is_comparison() => "numeric or bool",
            _ => "numeric",
        }
    }

    /// Result dtype for operands of dtype `dt`.
    pub fn result_dtype(self, dt: Dtype) -> Dtype {
        if self.is_comparison() {
            Dtype::Bool
        } else {
            dt
        }
    }
}

/// The window of a convolution or a pooling over the operand's last `r`
/// axes, its spatial axes (`r` = 1 or 2, the length of every vector here):
/// constants, as in PyTorch (docs/syntax.md §12c). Along axis `i` the
/// output has `(S + 2·padding − dilation·(K − 1) − 1) / stride + 1`
/// elements (floor division, [`crate::concrete::window_len`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// Step between windows (≥ 1).
    pub stride: Vec<usize>,
    /// Elements added on each side (zeros for a convolution and an average,
    /// never chosen by a max).
    pub padding: Vec<usize>,
    /// Step between a window's taps (≥ 1).
    pub dilation: Vec<usize>,
}

impl Window {
    /// The number of spatial axes.
    pub fn rank(&self) -> usize {
        self.stride.len()
    }
}

/// Which elements of the rotated axis RoPE pairs (docs/syntax.md §12e,
/// Section 2 §18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RopeLayout {
    /// Element `2i` with `2i + 1` (GGUF's and Meta's layout).
    Pairs,
    /// Element `i` with `i + D/2` (Hugging Face's `rotate_half`).
    Halves,
}

impl RopeLayout {
    /// The surface name of the op in this layout.
    pub fn name(self) -> &'static str {
        match self {
            RopeLayout::Pairs => "rope_pairs",
            RopeLayout::Halves => "rope_halves",
        }
    }
}

/// The reduction of a pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PoolKind {
    /// IEEE 754-2019 `maximum` of the window's elements inside the input
    /// (the padding is never chosen), like `reduce.max`.
    Max,
    /// The window's sum over the zero-padded input, divided by the window's
    /// volume (PyTorch's `count_include_pad=True`), like `reduce.mean`.
    Avg,
}

/// Reductions (Section 2 §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReduceOp {
    /// Σ (Numeric; empty = 0)
    Sum,
    /// Π (Numeric; empty = 1)
    Prod,
    /// max (Numeric; non-empty axis)
    Max,
    /// min (Numeric; non-empty axis)
    Min,
    /// mean (Float; non-empty axis)
    Mean,
    /// ∃ (Bool)
    Any,
    /// ∀ (Bool)
    All,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 7] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Mean,
        ReduceOp::Any,
        ReduceOp::All,
    ];

    /// The surface / IR name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Mean => "mean",
            ReduceOp::Any => "any",
            ReduceOp::All => "all",
        }
    }

    /// Look up by name.
    pub fn from_name(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|o| o.name() == s)
    }

    /// Admissible at `dt`?
    pub fn admits(self, dt: Dtype) -> bool {
        match self {
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min => dt.is_numeric(),
            ReduceOp::Mean => dt.is_float(),
            ReduceOp::Any | ReduceOp::All => dt.is_bool(),
        }
    }

    /// The class it needs, for diagnostics.
    pub fn class_name(self) -> &'static str {
        match self {
            ReduceOp::Mean => "float",
            ReduceOp::Any | ReduceOp::All => "bool",
            _ => "numeric",
        }
    }

    /// Needs every reduced axis non-empty (`Γ ⊨ dᵢ ≥ 1`).
    pub fn needs_nonempty(self) -> bool {
        matches!(self, ReduceOp::Max | ReduceOp::Min | ReduceOp::Mean)
    }
}

/// A scalar operand of a scalar-parameterised elementwise op or a fill.
/// Equality and hashing are by identity of the literal: a float by its
/// bits, so `-0.0 != 0.0` and a NaN equals the same NaN (what a cache key
/// or a rewrite must preserve).
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// A float literal (class Float).
    Float(f64),
    /// An integer literal (class SignedInt).
    Int(i64),
    /// A bool literal.
    Bool(bool),
    /// The function's parameter with this index, of type `Scalar[dt]`.
    Param(usize),
}

impl Scalar {
    /// The literal's identity: a float by its bits.
    pub(crate) fn key(&self) -> (u8, u64) {
        match *self {
            Scalar::Float(x) => (0, x.to_bits()),
            Scalar::Int(i) => (1, i as u64),
            Scalar::Bool(b) => (2, b as u64),
            Scalar::Param(p) => (3, p as u64),
        }
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Scalar) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Scalar {}

impl std::hash::Hash for Scalar {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.key().hash(h);
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Float(x) => write!(f, "{x:?}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Param(i) => write!(f, "v{i}"),
        }
    }
}

/// One operation. Its fields are visited in one place each: the operands
/// by [`Op::operands`] and [`Op::try_map`], the dims and scalars by
/// [`Op::try_map`]; equality and hashing are derived (scalars by their
/// bits), so a pass that renames, substitutes or keys ops needs no match
/// of its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// §4 elementwise unary.
    Unary(UnaryOp, Value),
    /// §5 cast to a dtype.
    Cast(Dtype, Value),
    /// §6 elementwise binary on two tensors.
    Binary(BinaryOp, Value, Value),
    /// §4/§6 with a scalar operand: `op(x, s)` (or `op(s, x)` when `scalar_left`):
    /// `scale` = mul, `add_scalar` = add, comparison with a constant, …
    ScalarBinary {
        /// The operation.
        op: BinaryOp,
        /// The tensor operand.
        x: Value,
        /// The scalar operand.
        s: Scalar,
        /// `op(s, x)` instead of `op(x, s)`.
        scalar_left: bool,
    },
    /// §6 `select c a b`.
    Select(Value, Value, Value),
    /// §7 batched matmul.
    Matmul(Value, Value),
    /// §7b widening integer matmul (docs/syntax.md): `matmul (cast[i32] a)
    /// (cast[i32] b)` of two I8 operands, an I32 result; what a dynamically
    /// quantized product (int8 weights and activations, f32 scales applied
    /// after) computes on AMX-INT8 or VNNI without the widened copies.
    MatmulI32(Value, Value),
    /// §7c dynamically quantized int8 product (docs/syntax.md): `x` F32
    /// `[p…, M, K + J]`, `w` I8 `[K, N]` with an F32 scale per column,
    /// `outliers` F32 `[J, N]`; each row's first `K` channels quantized to
    /// i8 by its own scale and multiplied in i32 against `w`, scaled back,
    /// plus the last `J` channels' F32 product with `outliers` (LLM.int8()'s
    /// split). The result F32 `[p…, M, N]`.
    DqMatmul {
        /// The activations.
        x: Value,
        /// The int8 weight, `[K, N]`.
        w: Value,
        /// The weight's scale per output column, `[N]`.
        scale: Value,
        /// The F32 weight rows of the last `J` input channels, `[J, N]`.
        outliers: Value,
    },
    /// §18 `qmatmul x w = matmul x (transpose (dequantize w))`: `x` is F32
    /// `[p…, M, K]`, `w` a block-quantized `[N, K]` (a GGUF weight as
    /// stored), the result F32 `[p…, M, N]`.
    QMatmul(Value, Value),
    /// §8 reduce.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// Reduced axes (static, non-empty, distinct).
        axes: Vec<usize>,
        /// Keep reduced axes as size 1.
        keepdims: bool,
        /// Operand.
        x: Value,
    },
    /// §8 argmax / argmin → I64.
    ArgReduce {
        /// argmax when true, argmin otherwise.
        max: bool,
        /// The axis.
        axis: usize,
        /// Keep the axis as size 1.
        keepdims: bool,
        /// Operand.
        x: Value,
    },
    /// §9 transpose: output axis j is input axis `perm[j]`.
    Transpose(Vec<usize>, Value),
    /// §10 reshape.
    Reshape(Vec<Dim>, Value),
    /// §11 explicit broadcast.
    Broadcast(Vec<Dim>, Value),
    /// §12 slice along one axis.
    Slice {
        /// The axis.
        axis: usize,
        /// First index (inclusive).
        start: Dim,
        /// Last index (exclusive).
        stop: Dim,
        /// Every `step`-th index from `start` (≥ 1; 1 is the plain slice).
        step: usize,
        /// Operand.
        x: Value,
    },
    /// §12 concat (k ≥ 2).
    Concat(usize, Vec<Value>),
    /// §12b constant padding along `axis` (docs/syntax.md "pad"): `before`
    /// and `after` elements of `value` around the operand.
    Pad {
        /// The axis.
        axis: usize,
        /// Elements added in front (a dim, proven ≥ 0).
        before: Dim,
        /// Elements added behind (a dim, proven ≥ 0).
        after: Dim,
        /// The fill value, in the operand's dtype.
        value: Scalar,
        /// Operand.
        x: Value,
    },
    /// §12a gather along `axis` (docs/syntax.md "gather"): the result is
    /// `table`'s shape with axis `axis` replaced by `ids`' shape, and
    /// `out[p…, j…, q…] = table[p…, ids[j…], q…]`. `ids` is I64; an id
    /// outside `[0, dim(table, axis))` is a run-time error, never a read.
    Gather {
        /// The indexed axis of `table`.
        axis: usize,
        /// The tensor read.
        table: Value,
        /// The indices (I64).
        ids: Value,
    },
    /// §8a top-k along `axis` (docs/syntax.md "topk"): the `k` greatest
    /// elements of each lane in descending order (NaN greatest, ties by
    /// lower index: argmax's order), or their indices (I64) when `indices`.
    TopK {
        /// How many (a dim: `0 ≤ k ≤ dim(x, axis)`).
        k: Dim,
        /// The axis.
        axis: usize,
        /// The indices instead of the values.
        indices: bool,
        /// Operand.
        x: Value,
    },
    /// §8b running sum along `axis` (docs/syntax.md "cumsum"): each
    /// element is the `sum` of its lane's prefix up to it.
    CumSum {
        /// The axis.
        axis: usize,
        /// Operand.
        x: Value,
    },
    /// §12c convolution (docs/syntax.md "conv"): `x` is `[N, C, S…]`, `w`
    /// is `[O, C / groups, K…]`, the result `[N, O, S'…]`; a cross-
    /// correlation over the zero-padded input, as PyTorch's `conv1d` /
    /// `conv2d` (no bias: add one with a broadcast).
    Conv {
        /// Stride, padding and dilation per spatial axis.
        window: Window,
        /// Channel groups (≥ 1): output channel `o` reads input channels
        /// of group `o / (O / groups)` only.
        groups: usize,
        /// Input.
        x: Value,
        /// Weights.
        w: Value,
    },
    /// §12d pooling (docs/syntax.md "pool") over the last `kernel.len()`
    /// axes of `x`: each output element reduces one window.
    Pool {
        /// Max or average.
        kind: PoolKind,
        /// The window's extent per spatial axis (≥ 1).
        kernel: Vec<usize>,
        /// Stride, padding (at most half the kernel) and dilation.
        window: Window,
        /// Operand.
        x: Value,
    },
    /// §18 rotary position embedding (docs/syntax.md §12e): `x` is
    /// `[s…, D]`, the tables `cos` and `sin` are `[s…, D/2]` (one angle
    /// per pair, already broadcast), and pair `i` = `(a, b)` of the last
    /// axis becomes `(a·cos_i − b·sin_i, a·sin_i + b·cos_i)`, each product
    /// and sum rounded as the §6 binary ops round them.
    Rope {
        /// Which elements form pair `i`.
        layout: RopeLayout,
        /// The rotated tensor.
        x: Value,
        /// Each pair's cosine.
        cos: Value,
        /// Each pair's sine.
        sin: Value,
    },
    /// Fused scaled-dot-product attention (docs/syntax.md §12f): queries
    /// `q` `[s…, M, D]`, keys `k` `[s…, D, T]` (transposed: the scores are
    /// `q·k`), values `v` `[s…, T, E]` and an additive `mask` `[s…, M,
    /// T]`, all F32; the result `[s…, M, E]` denotes the composition it
    /// replaces, `matmul(softmax(matmul(q, k) · scale + mask), v)` with the
    /// softmax over the last axis written `e / sum(e)`, `e = exp(x − max
    /// x)`, so no score or probability tensor exists.
    Sdpa {
        /// Queries.
        q: Value,
        /// Keys, head dim first.
        k: Value,
        /// Values.
        v: Value,
        /// Added to the scaled scores (0 where allowed, a large negative
        /// value where not).
        mask: Value,
        /// The scores' factor: a float literal.
        scale: Scalar,
    },
    /// A tensor of one repeated scalar (a literal in tensor position).
    Fill(Dtype, Vec<Dim>, Scalar),
    /// Index along `axis` as a value (`iota`), for masks such as a causal one.
    Iota(Dtype, Vec<Dim>, usize),
    /// §17 call of another tensor fn.
    Call(String, Vec<Value>),
    /// A dim as a value, typed `Dim[d]` (Section 1 §6 site 1): the argument
    /// of a call for a dim parameter (`split_heads(x, 2 * H)`). It has no
    /// buffer; [`verify_structure`] admits a dim value only as an operand of
    /// a [`Op::Call`].
    Dim(Dim),
}

impl Op {
    /// The values this op reads, in order.
    pub fn operands(&self) -> Vec<Value> {
        match self {
            Op::Unary(_, x)
            | Op::Cast(_, x)
            | Op::Transpose(_, x)
            | Op::Reshape(_, x)
            | Op::Broadcast(_, x) => {
                vec![*x]
            }
            Op::ScalarBinary { x, .. }
            | Op::Reduce { x, .. }
            | Op::ArgReduce { x, .. }
            | Op::Slice { x, .. }
            | Op::TopK { x, .. }
            | Op::CumSum { x, .. }
            | Op::Pad { x, .. } => {
                vec![*x]
            }
            Op::Binary(_, a, b)
            | Op::Matmul(a, b)
            | Op::MatmulI32(a, b)
            | Op::QMatmul(a, b)
            | Op::Conv { x: a, w: b, .. } => vec![*a, *b],
            Op::Pool { x, .. } => vec![*x],
            Op::Gather { table, ids, .. } => vec![*table, *ids],
            Op::Select(c, a, b) => vec![*c, *a, *b],
            Op::Rope { x, cos, sin, .. } => vec![*x, *cos, *sin],
            Op::Sdpa { q, k, v, mask, .. } => vec![*q, *k, *v, *mask],
            Op::DqMatmul {
                x,
                w,
                scale,
                outliers,
            } => vec![*x, *w, *scale, *outliers],
            Op::Concat(_, xs) | Op::Call(_, xs) => xs.clone(),
            Op::Fill(..) | Op::Iota(..) | Op::Dim(_) => vec![],
        }
    }

    /// A copy with every operand, dim and scalar passed through the maps
    /// (Cranelift's `map_values`): the one place, with [`Op::operands`],
    /// that knows where each variant keeps them. `None` when a dim or
    /// scalar map refuses.
    pub fn try_map(
        &self,
        v: &mut dyn FnMut(Value) -> Value,
        d: &mut dyn FnMut(&Dim) -> Option<Dim>,
        s: &mut dyn FnMut(&Scalar) -> Option<Scalar>,
    ) -> Option<Op> {
        let mut op = self.clone();
        let (values, dims, scalars) = op.fields_mut();
        for x in values {
            *x = v(*x);
        }
        for x in dims {
            *x = d(x)?;
        }
        for x in scalars {
            *x = s(x)?;
        }
        Some(op)
    }

    /// The op with its operands renamed by `v` (dims and scalars kept).
    pub fn map_operands(&self, v: &mut dyn FnMut(Value) -> Value) -> Op {
        let mut op = self.clone();
        for x in op.fields_mut().0 {
            *x = v(*x);
        }
        op
    }

    /// The operands, dims and scalars, mutably: the one match over every
    /// variant's mutable fields.
    #[allow(clippy::type_complexity)]
    fn fields_mut(&mut self) -> (Vec<&mut Value>, Vec<&mut Dim>, Vec<&mut Scalar>) {
        match self {
            Op::Unary(_, x) | Op::Cast(_, x) | Op::Transpose(_, x) => (vec![x], vec![], vec![]),
            Op::Reduce { x, .. }
            | Op::ArgReduce { x, .. }
            | Op::CumSum { x, .. }
            | Op::Pool { x, .. } => (vec![x], vec![], vec![]),
            Op::Binary(_, a, b)
            | Op::Matmul(a, b)
            | Op::MatmulI32(a, b)
            | Op::QMatmul(a, b)
            | Op::Conv { x: a, w: b, .. } => (vec![a, b], vec![], vec![]),
            Op::Gather { table, ids, .. } => (vec![table, ids], vec![], vec![]),
            Op::Select(c, a, b) => (vec![c, a, b], vec![], vec![]),
            Op::Rope { x, cos, sin, .. } => (vec![x, cos, sin], vec![], vec![]),
            Op::Sdpa {
                q,
                k,
                v,
                mask,
                scale,
            } => (vec![q, k, v, mask], vec![], vec![scale]),
            Op::DqMatmul {
                x,
                w,
                scale,
                outliers,
            } => (vec![x, w, scale, outliers], vec![], vec![]),
            Op::Concat(_, xs) | Op::Call(_, xs) => (xs.iter_mut().collect(), vec![], vec![]),
            Op::ScalarBinary { x, s, .. } => (vec![x], vec![], vec![s]),
            Op::Reshape(ds, x) | Op::Broadcast(ds, x) => (vec![x], ds.iter_mut().collect(), vec![]),
            Op::Slice { start, stop, x, .. } => (vec![x], vec![start, stop], vec![]),
            Op::Pad {
                before,
                after,
                value,
                x,
                ..
            } => (vec![x], vec![before, after], vec![value]),
            Op::TopK { k, x, .. } => (vec![x], vec![k], vec![]),
            Op::Fill(_, ds, sc) => (vec![], ds.iter_mut().collect(), vec![sc]),
            Op::Iota(_, ds, _) => (vec![], ds.iter_mut().collect(), vec![]),
            Op::Dim(d) => (vec![], vec![d], vec![]),
        }
    }

    /// Whether this op may read a block-quantized operand (Section 2 §18): a
    /// quantized tensor has no elements of its own, so only `dequantize` (a
    /// cast to a float), `qmatmul` and `gather` (whole rows of blocks) take
    /// one, and a call passes one on. The checker and the concrete rule both
    /// ask here.
    pub fn admits_quantized(&self) -> bool {
        matches!(
            self,
            Op::Cast(..) | Op::QMatmul(..) | Op::Gather { .. } | Op::Call(..)
        )
    }

    /// Scalar parameters this op reads.
    pub fn scalar_params(&self) -> Vec<usize> {
        match self {
            Op::ScalarBinary {
                s: Scalar::Param(i),
                ..
            }
            | Op::Fill(_, _, Scalar::Param(i))
            | Op::Pad {
                value: Scalar::Param(i),
                ..
            } => vec![*i],
            _ => vec![],
        }
    }
}

fn dims(s: &[Dim]) -> String {
    shape_string(s)
}

/// Values as the printer lists operands: `v1, v2`.
fn joined(xs: &[Value]) -> String {
    let xs: Vec<_> = xs.iter().map(|v| v.to_string()).collect();
    xs.join(", ")
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Unary(o, x) => write!(f, "{} {x}", o.name()),
            Op::Cast(d, x) => write!(f, "cast[{d}] {x}"),
            Op::Binary(o, a, b) => write!(f, "{} {a}, {b}", o.name()),
            Op::ScalarBinary {
                op,
                x,
                s,
                scalar_left,
            } => {
                if *scalar_left {
                    write!(f, "{}.scalar {s}, {x}", op.name())
                } else {
                    write!(f, "{}.scalar {x}, {s}", op.name())
                }
            }
            Op::Select(c, a, b) => write!(f, "select {c}, {a}, {b}"),
            Op::Matmul(a, b) => write!(f, "matmul {a}, {b}"),
            Op::MatmulI32(a, b) => write!(f, "matmul_i32 {a}, {b}"),
            Op::QMatmul(a, b) => write!(f, "qmatmul {a}, {b}"),
            Op::DqMatmul { .. } => write!(f, "dq_matmul {}", joined(&self.operands())),
            Op::Reduce {
                op,
                axes,
                keepdims,
                x,
            } => {
                write!(
                    f,
                    "reduce.{}[axes={axes:?}, keepdims={keepdims}] {x}",
                    op.name()
                )
            }
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                x,
            } => {
                write!(
                    f,
                    "{}[axis={axis}, keepdims={keepdims}] {x}",
                    if *max { "argmax" } else { "argmin" }
                )
            }
            Op::Transpose(p, x) => write!(f, "transpose{p:?} {x}"),
            Op::Reshape(s, x) => write!(f, "reshape{} {x}", dims(s)),
            Op::Broadcast(s, x) => write!(f, "broadcast{} {x}", dims(s)),
            Op::Slice {
                axis,
                start,
                stop,
                step,
                x,
            } if *step == 1 => write!(f, "slice[axis={axis}, {start}..{stop}] {x}"),
            Op::Slice {
                axis,
                start,
                stop,
                step,
                x,
            } => write!(f, "slice[axis={axis}, {start}..{stop}, step={step}] {x}"),
            Op::Concat(axis, xs) => write!(f, "concat[axis={axis}] {}", joined(xs)),
            Op::Gather { axis, table, ids } => write!(f, "gather[axis={axis}] {table}, {ids}"),
            Op::TopK {
                k,
                axis,
                indices,
                x,
            } => {
                let what = if *indices { "topk.indices" } else { "topk" };
                write!(f, "{what}[k={k}, axis={axis}] {x}")
            }
            Op::CumSum { axis, x } => write!(f, "cumsum[axis={axis}] {x}"),
            Op::Rope { layout, .. } => write!(f, "{} {}", layout.name(), joined(&self.operands())),
            Op::Sdpa { scale, .. } => write!(f, "sdpa[scale={scale}] {}", joined(&self.operands())),
            Op::Pad {
                axis,
                before,
                after,
                value,
                x,
            } => write!(f, "pad[axis={axis}, {before}, {after}, {value}] {x}"),
            Op::Conv {
                window,
                groups,
                x,
                w,
            } => write!(
                f,
                "conv{}d[{window}, groups={groups}] {x}, {w}",
                window.rank()
            ),
            Op::Pool {
                kind,
                kernel,
                window,
                x,
            } => {
                let k = match kind {
                    PoolKind::Max => "max",
                    PoolKind::Avg => "avg",
                };
                write!(
                    f,
                    "{k}_pool{}d[kernel={kernel:?}, {window}] {x}",
                    kernel.len()
                )
            }
            Op::Fill(d, s, v) => write!(f, "fill[{d}; {}] {v}", dims(s)),
            Op::Iota(d, s, a) => write!(f, "iota[{d}; {}, axis={a}]", dims(s)),
            Op::Call(n, xs) => write!(f, "call {n}({})", joined(xs)),
            Op::Dim(d) => write!(f, "dim.value {d}"),
        }
    }
}

/// One instruction: `result = op`, optionally checked against an annotation.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Inst {
    /// The value defined.
    pub result: Value,
    /// What computes it.
    pub op: Op,
    /// `let x: T = …`: a check boundary (Section 3 §7).
    pub annot: Option<Type>,
    /// The whole expression.
    pub span: SpanId,
    /// One span per operand/argument, for errors about a particular one.
    pub arg_spans: Vec<SpanId>,
    /// Spans of the static attributes (axis, shape dims, …), when the front end has them.
    pub attr_spans: Vec<SpanId>,
    /// Spans of the annotation's dims (for errors on a particular dim).
    pub annot_span: SpanId,
}

impl Inst {
    /// An instruction with all spans set to `span`.
    pub fn new(result: Value, op: Op, span: SpanId) -> Inst {
        Inst {
            result,
            op,
            annot: None,
            span,
            arg_spans: Vec::new(),
            attr_spans: Vec::new(),
            annot_span: span,
        }
    }

    /// Span of operand `i`, falling back to the instruction's.
    pub fn arg_span(&self, i: usize) -> SpanId {
        self.arg_spans.get(i).copied().unwrap_or(self.span)
    }

    /// Span of attribute `i`, falling back to the instruction's.
    pub fn attr_span(&self, i: usize) -> SpanId {
        self.attr_spans.get(i).copied().unwrap_or(self.span)
    }
}

/// A local dim binding `let n = dim(x, axis)` (Section 1 §6 binding site 2),
/// placed before instruction `before`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DimBinding {
    /// The new shape variable.
    pub name: String,
    /// Whose dim.
    pub of: Value,
    /// Which axis.
    pub axis: usize,
    /// Index of the first instruction that can see it.
    pub before: usize,
    /// Where.
    pub span: SpanId,
}

/// A parameter.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Param {
    /// Its Rust name.
    pub name: String,
    /// Its type (a tensor or a scalar).
    pub ty: Type,
    /// The whole type.
    pub span: SpanId,
    /// One span per dim of a tensor type.
    pub dim_spans: Vec<SpanId>,
    /// One span per refinement of a tensor type.
    pub ref_spans: Vec<SpanId>,
}

/// A predicate with where it was written.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spanned<T> {
    /// The thing.
    pub node: T,
    /// Where.
    pub span: SpanId,
}

/// A tensor function's signature: `∀ ᾱ. requires P. T₁ → … → Tₙ → U` (Section 2 §17).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Signature {
    /// Its name.
    pub name: String,
    /// Shape variables bound by the signature, in order of first appearance.
    pub vars: Vec<ShapeVar>,
    /// Module constants it may mention.
    pub consts: Vec<(String, i64)>,
    /// Parameters.
    pub params: Vec<Param>,
    /// `requires` predicates.
    pub requires: Vec<Spanned<Pred>>,
    /// Axioms (Section 2 §14).
    pub axioms: Vec<Spanned<Pred>>,
    /// Return type.
    pub ret: Type,
    /// Span of the return type.
    pub ret_span: SpanId,
    /// One span per dim of the return type.
    pub ret_dim_spans: Vec<SpanId>,
    /// Span of the name.
    pub span: SpanId,
}

/// A tensor function: signature plus body.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Function {
    /// The signature.
    pub sig: Signature,
    /// Instructions; `body[j].result` is [`Function::inst_value`]`(j)`.
    pub body: Vec<Inst>,
    /// Local dim bindings.
    pub dim_bindings: Vec<DimBinding>,
    /// The returned value.
    pub ret: Value,
    /// Span of the returned expression.
    pub ret_span: SpanId,
}

impl Signature {
    /// The value of parameter `i`.
    pub fn param_value(&self, i: usize) -> Value {
        Value::new(i)
    }

    /// The value instruction `j` of a body under this signature defines.
    pub fn inst_value(&self, j: usize) -> Value {
        Value::new(self.params.len() + j)
    }

    /// Which parameter `v` is, or which instruction of a body under this
    /// signature defines it (whether the body has it or not).
    pub fn value_def(&self, v: Value) -> ValueDef {
        match v.index().checked_sub(self.params.len()) {
            None => ValueDef::Param(v.index()),
            Some(j) => ValueDef::Inst(j),
        }
    }
}

impl Function {
    /// The id the next instruction will define.
    pub fn next_value(&self) -> Value {
        self.sig.inst_value(self.body.len())
    }

    /// The value of parameter `i`.
    pub fn param_value(&self, i: usize) -> Value {
        self.sig.param_value(i)
    }

    /// The value `body[j]` defines.
    pub fn inst_value(&self, j: usize) -> Value {
        self.sig.inst_value(j)
    }

    /// What defines `v`; `None` when the function has no such value.
    pub fn value_def(&self, v: Value) -> Option<ValueDef> {
        match self.sig.value_def(v) {
            ValueDef::Inst(j) if j >= self.body.len() => None,
            d => Some(d),
        }
    }

    /// The instruction defining `v`; `None` for a parameter or no value.
    pub fn inst(&self, v: Value) -> Option<&Inst> {
        match self.value_def(v)? {
            ValueDef::Inst(j) => self.body.get(j),
            ValueDef::Param(_) => None,
        }
    }

    /// The parameter `v` is; `None` for an instruction's value or no value.
    pub fn param(&self, v: Value) -> Option<&Param> {
        match self.value_def(v)? {
            ValueDef::Param(i) => self.sig.params.get(i),
            ValueDef::Inst(_) => None,
        }
    }

    /// Is `v` one of the function's values?
    pub fn has_value(&self, v: Value) -> bool {
        v.index() < self.num_values()
    }

    /// Number of values: parameters plus instructions.
    pub fn num_values(&self) -> usize {
        self.sig.params.len() + self.body.len()
    }

    /// Every value, parameters first.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = Value> + ExactSizeIterator {
        (0..self.num_values()).map(Value::new)
    }
}

/// A set of signatures visible to calls (a `#[tensor_module]`).
pub type Signatures = BTreeMap<String, Signature>;

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vars: Vec<_> = self
            .vars
            .iter()
            .map(|v| {
                if v.allow_zero {
                    format!("{} >= 0", v.name)
                } else {
                    v.name.clone()
                }
            })
            .collect();
        let params: Vec<_> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{} (v{i}): {}", p.name, p.ty))
            .collect();
        write!(
            f,
            "fn {}[{}]({}) -> {}",
            self.name,
            vars.join(", "),
            params.join(", "),
            self.ret
        )?;
        for r in &self.requires {
            write!(f, "\n  requires {}", r.node)?;
        }
        for a in &self.axioms {
            write!(f, "\n  axiom {}", a.node)?;
        }
        Ok(())
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {{", self.sig)?;
        for (i, inst) in self.body.iter().enumerate() {
            for b in self.dim_bindings.iter().filter(|b| b.before == i) {
                writeln!(f, "  {} = dim {}, {}", b.name, b.of, b.axis)?;
            }
            match &inst.annot {
                Some(t) => writeln!(f, "  {}: {} = {}", inst.result, t, inst.op)?,
                None => writeln!(f, "  {} = {}", inst.result, inst.op)?,
            }
        }
        writeln!(f, "  return {}", self.ret)?;
        f.write_str("}")
    }
}

/// Why an op's static axis attribute is malformed (Section 2 §8, §9, §12).
///
/// One rule, used by the checker (against the operand type's rank), by
/// [`verify`] (the rank-independent part) and by the interpreter (against the
/// run-time rank), so the three agree on what is well-formed. In particular a
/// transpose is well-formed only with a full permutation of its operand's
/// axes: no short "identity" permutations, not even for the `let y: T = x;`
/// re-view the front end lowers to an identity transpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisError {
    /// An axis set (reduce) is empty.
    NoAxes,
    /// An axis is not below the rank.
    OutOfRange {
        /// The axis.
        axis: usize,
        /// The operand's rank.
        rank: usize,
    },
    /// An axis occurs twice in an axis set.
    Repeated(usize),
    /// A transpose's permutation is not a permutation of `0..rank`.
    NotPermutation {
        /// The permutation as written.
        perm: Vec<usize>,
        /// The operand's rank.
        rank: usize,
    },
}

impl fmt::Display for AxisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AxisError::NoAxes => f.write_str("expected at least one axis, found none"),
            AxisError::OutOfRange { axis, rank } => {
                write!(f, "axis {axis} is out of range for a tensor of rank {rank}")
            }
            AxisError::Repeated(a) => write!(f, "axis {a} is listed twice"),
            AxisError::NotPermutation { perm, rank } => write!(
                f,
                "expected a permutation of 0..{rank} for a tensor of rank {rank}, found {perm:?}"
            ),
        }
    }
}

/// An axis set (reduce; a single axis for argmax/argmin, slice, concat,
/// iota): non-empty, every axis below `rank`, no axis twice.
pub fn check_axes(axes: &[usize], rank: usize) -> Result<(), AxisError> {
    if axes.is_empty() {
        return Err(AxisError::NoAxes);
    }
    if let Some(&axis) = axes.iter().find(|&&a| a >= rank) {
        return Err(AxisError::OutOfRange { axis, rank });
    }
    for (i, &a) in axes.iter().enumerate() {
        if axes[..i].contains(&a) {
            return Err(AxisError::Repeated(a));
        }
    }
    Ok(())
}

/// A transpose permutation: exactly the axes `0..rank`, each once.
pub fn check_perm(perm: &[usize], rank: usize) -> Result<(), AxisError> {
    let mut seen = vec![false; rank];
    let ok = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if ok {
        Ok(())
    } else {
        Err(AxisError::NotPermutation {
            perm: perm.to_vec(),
            rank,
        })
    }
}

/// The part of [`check_axes`]/[`check_perm`] that holds at every rank: a
/// permutation of its own length, a non-empty duplicate-free axis set.
impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stride={:?}, padding={:?}, dilation={:?}",
            self.stride, self.padding, self.dilation
        )
    }
}

/// A window's vectors (and a pooling's kernel) have one entry per spatial
/// axis, and there are 1 or 2 of those: the verifier's structural rule for
/// [`Op::Conv`] and [`Op::Pool`] (values are the checker's, with spans).
fn window_shape_ok(op: &Op) -> Result<(), String> {
    let (w, kernel) = match op {
        Op::Conv { window, .. } => (window, None),
        Op::Pool { kernel, window, .. } => (window, Some(kernel.len())),
        _ => return Ok(()),
    };
    let r = w.rank();
    let lens = [w.padding.len(), w.dilation.len(), kernel.unwrap_or(r)];
    if !(1..=2).contains(&r) || lens.iter().any(|&l| l != r) {
        return Err(format!(
            "a window needs 1 or 2 spatial axes and one entry per axis in each attribute, found {w}{}",
            kernel.map(|k| format!(", kernel of {k}")).unwrap_or_default()
        ));
    }
    Ok(())
}

fn rank_free_axes(op: &Op) -> Result<(), AxisError> {
    match op {
        Op::Transpose(perm, _) => check_perm(perm, perm.len()),
        Op::Reduce { axes, .. } => check_axes(axes, usize::MAX),
        _ => Ok(()),
    }
}

/// Structural well-formedness: [`verify_structure`], and every axis
/// attribute well-formed at any rank ([`AxisError`]: a transpose permutation
/// of its own length, a non-empty duplicate-free reduce axis set). Checking an
/// axis against the operand's actual rank needs types: the checker does it
/// with the same [`check_axes`]/[`check_perm`], and the interpreter does it
/// against run-time ranks, so an accepted function is never "malformed" later.
pub fn verify(func: &Function) -> Result<(), Diagnostic> {
    verify_structure(func)?;
    for inst in &func.body {
        if let Err(e) = rank_free_axes(&inst.op) {
            let code = match inst.op {
                Op::Transpose(..) => codes::PERMUTATION,
                _ => codes::AXIS,
            };
            let msg = format!("{}: {e}", inst.result);
            return Err(Diagnostic::new(code, "IR verifier", inst.attr_span(0), msg));
        }
    }
    Ok(())
}

/// The part of [`verify`] the checker needs before it can type anything:
/// sequential ids, operands defined before use, scalar operands are scalar
/// parameters, dim bindings refer to defined values, the returned value
/// exists. (The checker then reports axis errors per instruction, with their
/// types, so that one bad transpose does not hide the body's other errors.)
pub fn verify_structure(func: &Function) -> Result<(), Diagnostic> {
    let bad = |span: SpanId, msg: String| {
        Err(Diagnostic::new(
            codes::MALFORMED_IR,
            "IR verifier",
            span,
            msg,
        ))
    };
    for (i, inst) in func.body.iter().enumerate() {
        let expect = func.inst_value(i);
        if inst.result != expect {
            return bad(
                inst.span,
                format!(
                    "instruction {i} defines {} but should define {expect}",
                    inst.result
                ),
            );
        }
        for v in inst.op.operands() {
            if v >= inst.result {
                return bad(
                    inst.span,
                    format!("{} uses {v} before it is defined", inst.result),
                );
            }
        }
        for p in inst.op.scalar_params() {
            match func.sig.params.get(p) {
                Some(Param {
                    ty: Type::Scalar(_),
                    ..
                }) => {}
                _ => {
                    return bad(
                        inst.span,
                        format!(
                            "{} reads v{p} as a scalar, but it is not a scalar parameter",
                            inst.result
                        ),
                    )
                }
            }
        }
        if !matches!(inst.op, Op::Call(..)) {
            if let Some(v) = inst
                .op
                .operands()
                .into_iter()
                .find(|v| is_dim_value(func, *v))
            {
                return bad(
                    inst.span,
                    format!(
                        "{} reads the dim value {v}; only a call takes a dim",
                        inst.result
                    ),
                );
            }
        }
        if let Err(m) = window_shape_ok(&inst.op) {
            return bad(inst.span, format!("{}: {m}", inst.result));
        }
        if let Op::Sdpa { scale, .. } = &inst.op {
            if !matches!(scale, Scalar::Float(_)) {
                return bad(
                    inst.span,
                    format!(
                        "{}: sdpa's scale is a float literal, found {scale}",
                        inst.result
                    ),
                );
            }
        }
        if let Op::Concat(_, xs) = &inst.op {
            if xs.len() < 2 {
                return bad(
                    inst.span,
                    format!("concat needs at least 2 operands, found {}", xs.len()),
                );
            }
        }
    }
    for b in &func.dim_bindings {
        if b.of >= func.sig.inst_value(b.before) || b.before > func.body.len() {
            return bad(
                b.span,
                format!(
                    "dim binding `{}` reads {} before it is defined",
                    b.name, b.of
                ),
            );
        }
    }
    if !func.has_value(func.ret) {
        return bad(
            func.ret_span,
            format!("return of undefined value {}", func.ret),
        );
    }
    if is_dim_value(func, func.ret) {
        return bad(
            func.ret_span,
            format!("return of the dim value {}", func.ret),
        );
    }
    Ok(())
}

/// Is `v` a dim value (a dim parameter or an [`Op::Dim`]), which has no
/// buffer and may only be passed to a call?
pub fn is_dim_value(func: &Function, v: Value) -> bool {
    match func.value_def(v) {
        Some(ValueDef::Param(i)) => matches!(func.sig.params[i].ty, Type::Dim(_)),
        Some(ValueDef::Inst(j)) => matches!(func.body[j].op, Op::Dim(_)),
        None => false,
    }
}
