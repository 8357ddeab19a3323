//! The typed LLVM IR text builder every emitter writes through: [`Ty`]
//! (the LLVM types a kernel uses, vectors included), [`V`] (an operand
//! that carries its LLVM type) and [`Builder`] (one function's entry block
//! and body, with one method per instruction form; its blocks, branches,
//! phis, parameters and loop metadata are in `flow`, its declared callees
//! and intrinsics in `calls`).
//!
//! The emitters write IR as text rather than through inkwell's builder:
//! text is cheap to build, hash, cache and print (a failing kernel can be
//! read as is), and LLVM parses each module once. What the builder API
//! would give — an instruction cannot be given an operand of the wrong
//! type — this layer gives instead: every method checks its operands'
//! types (a mismatch is a compiler bug and panics with a message naming
//! the instruction and both types) and derives its result type itself, so
//! no call site spells a type that could disagree with its operands. A
//! function built with block handles is also checked for its shape: no
//! instruction after a terminator, no block falling through, phis at the
//! head of their block, every branch target placed, every value named once.
//!
//! It imports nothing of the crate: the codegen (`crate::codegen`) and the
//! GEMM micro-kernels (`crate::kernels::gemm_common`) both sit above it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use tc_core::Dtype;

mod calls;
mod flow;
#[cfg(test)]
mod tests;

pub(crate) use calls::Decl;
pub(crate) use flow::{Block, LoopMd, Phi};

/// An LLVM type used by the kernels (typed pointers, as LLVM 14 needs and
/// later versions still parse).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ty {
    /// `i1`, Bool's computation type and every comparison's result.
    I1,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`, every index and shape quantity.
    I64,
    /// `half` (F16 encoding only).
    Half,
    /// `float`, every float dtype's computation type.
    Float,
    /// `double` (the exact rsqrt).
    Double,
    /// A pointer to the given type.
    Ptr(&'static Ty),
    /// `[n x T]`.
    Array(u32, &'static Ty),
    /// `<n x T>`, `T` an integer or float type.
    Vec(u32, &'static Ty),
}

/// `t` with a `'static` address: the scalars' constants, any other type
/// allocated once per process (a process meets a few dozen).
fn leak(t: Ty) -> &'static Ty {
    static TYPES: Mutex<Vec<&'static Ty>> = Mutex::new(Vec::new());
    match t {
        Ty::I1 => &Ty::I1,
        Ty::I8 => &Ty::I8,
        Ty::I16 => &Ty::I16,
        Ty::I32 => &Ty::I32,
        Ty::I64 => &Ty::I64,
        Ty::Half => &Ty::Half,
        Ty::Float => &Ty::Float,
        Ty::Double => &Ty::Double,
        _ => {
            // A panic while holding the lock leaves the list intact.
            let mut types = TYPES.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(s) = types.iter().find(|s| ***s == t) {
                return s;
            }
            let s: &'static Ty = Box::leak(Box::new(t));
            types.push(s);
            s
        }
    }
}

impl Ty {
    /// The width of an integer type.
    pub(crate) fn int_bits(self) -> Option<u32> {
        match self {
            Ty::I1 => Some(1),
            Ty::I8 => Some(8),
            Ty::I16 => Some(16),
            Ty::I32 => Some(32),
            Ty::I64 => Some(64),
            _ => None,
        }
    }

    /// The width of a floating-point type.
    pub(crate) fn float_bits(self) -> Option<u32> {
        match self {
            Ty::Half => Some(16),
            Ty::Float => Some(32),
            Ty::Double => Some(64),
            _ => None,
        }
    }

    /// Whether it is an integer type (`i1` included).
    pub(crate) fn is_int(self) -> bool {
        self.int_bits().is_some()
    }

    /// Whether it is a floating-point type.
    pub(crate) fn is_float(self) -> bool {
        self.float_bits().is_some()
    }

    /// The pointer to this type.
    pub(crate) fn ptr(self) -> Ty {
        Ty::Ptr(leak(self))
    }

    /// `<lanes x self>`, `self` an integer or float type.
    pub(crate) fn vec(self, lanes: usize) -> Ty {
        assert!(
            self.is_int() || self.is_float(),
            "ir: no vector of {self} is used"
        );
        let n = u32::try_from(lanes).ok().filter(|&n| n > 0);
        Ty::Vec(
            n.unwrap_or_else(|| panic!("ir: a vector of {lanes} lanes")),
            leak(self),
        )
    }

    /// A vector's lane count; `None` for any other type.
    pub(crate) fn lanes(self) -> Option<u32> {
        match self {
            Ty::Vec(n, _) => Some(n),
            _ => None,
        }
    }

    /// A vector's lane type; any other type itself (what a lane-wise
    /// instruction checks).
    pub(crate) fn elem(self) -> Ty {
        match self {
            Ty::Vec(_, e) => *e,
            t => t,
        }
    }

    /// `self` with as many lanes as `like` (a comparison's `i1` result).
    fn lanes_of(self, like: Ty) -> Ty {
        match like.lanes() {
            Some(n) => self.vec(n as usize),
            None => self,
        }
    }

    /// The width in bits of an integer, float or vector of them (what a
    /// `bitcast` keeps); `None` for pointers and arrays.
    pub(crate) fn bits(self) -> Option<u32> {
        match self {
            Ty::Vec(n, e) => e.bits().map(|b| n * b),
            t => t.int_bits().or(t.float_bits()),
        }
    }

    /// The type's spelling in an overloaded intrinsic's name (`f32`,
    /// `v16f32`, `p0v16f32`).
    pub(crate) fn mangle(self) -> String {
        match self {
            Ty::Half => "f16".into(),
            Ty::Float => "f32".into(),
            Ty::Double => "f64".into(),
            Ty::Ptr(t) => format!("p0{}", t.mangle()),
            Ty::Array(n, t) => format!("a{n}{}", t.mangle()),
            Ty::Vec(n, t) => format!("v{n}{}", t.mangle()),
            t => format!("i{}", t.int_bits().unwrap_or(0)),
        }
    }

    /// The computation type of `dt` (module doc of `codegen`): `float` for
    /// every float dtype, an int's own width (I4 in `i8`), Bool in `i1`.
    pub(crate) fn compute(dt: Dtype) -> Ty {
        match dt {
            Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F8E4M3 | Dtype::F8E5M2 => Ty::Float,
            Dtype::I64 => Ty::I64,
            Dtype::I32 => Ty::I32,
            Dtype::I16 => Ty::I16,
            Dtype::I8 | Dtype::I4 => Ty::I8,
            Dtype::Bool => Ty::I1,
            // A quantized value denotes F32 elements (Section 2 §18); no
            // kernel reads one (`plan::reads_quantized` makes its readers
            // host steps).
            Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => Ty::Float,
        }
    }

    /// The storage type of one element of `dt` (Section 2 §5; I4 packs two
    /// per `i8`).
    pub(crate) fn storage(dt: Dtype) -> Ty {
        match dt {
            Dtype::F32 => Ty::Float,
            Dtype::F16 | Dtype::BF16 => Ty::I16,
            Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::I8 | Dtype::I4 | Dtype::Bool => Ty::I8,
            Dtype::I64 => Ty::I64,
            Dtype::I32 => Ty::I32,
            Dtype::I16 => Ty::I16,
            // Block bytes; never loaded by a kernel (see `compute`).
            Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => Ty::I8,
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::I1 => f.write_str("i1"),
            Ty::I8 => f.write_str("i8"),
            Ty::I16 => f.write_str("i16"),
            Ty::I32 => f.write_str("i32"),
            Ty::I64 => f.write_str("i64"),
            Ty::Half => f.write_str("half"),
            Ty::Float => f.write_str("float"),
            Ty::Double => f.write_str("double"),
            Ty::Ptr(t) => write!(f, "{t}*"),
            Ty::Array(n, t) => write!(f, "[{n} x {t}]"),
            Ty::Vec(n, t) => write!(f, "<{n} x {t}>"),
        }
    }
}

/// An operand: an SSA name, a global or a literal, with its LLVM type.
/// `Display` writes the operand alone (`%t3`, `7`, `true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct V {
    /// Its LLVM type.
    pub(crate) ty: Ty,
    /// Its spelling as an operand.
    pub(crate) name: String,
}

impl V {
    /// A named value of type `ty` defined outside the builder (a
    /// parameter, an alloca, a global).
    pub(crate) fn new(ty: Ty, name: impl Into<String>) -> V {
        V {
            ty,
            name: name.into(),
        }
    }

    /// An integer literal of type `ty` (`i1` takes 0 or 1).
    pub(crate) fn int(ty: Ty, v: i64) -> V {
        match ty {
            Ty::I1 => {
                assert!(v == 0 || v == 1, "ir: i1 literal {v}");
                V::bool(v == 1)
            }
            _ => {
                assert!(ty.is_int(), "ir: integer literal {v} of type {ty}");
                V::new(ty, v.to_string())
            }
        }
    }

    /// An `i1` literal.
    pub(crate) fn bool(b: bool) -> V {
        V::new(Ty::I1, if b { "true" } else { "false" })
    }

    /// A shape quantity (an `i64` literal or SSA name, as `shape.rs`
    /// passes them) as an operand.
    pub(crate) fn i64(s: &str) -> V {
        V::new(Ty::I64, s)
    }

    /// The all-zero vector or array of type `ty`.
    pub(crate) fn zeroinit(ty: Ty) -> V {
        assert!(
            matches!(ty, Ty::Vec(..) | Ty::Array(..)),
            "ir: zeroinitializer of {ty}"
        );
        V::new(ty, "zeroinitializer")
    }

    /// `undef` of type `ty` (the lanes a splat does not read).
    pub(crate) fn undef(ty: Ty) -> V {
        V::new(ty, "undef")
    }

    /// The constant vector of the integers `lanes`, of type `elem`.
    pub(crate) fn int_vec(elem: Ty, lanes: &[i64]) -> V {
        let lits: Vec<String> = lanes.iter().map(|&l| V::int(elem, l).typed()).collect();
        V::new(elem.vec(lanes.len()), format!("<{}>", lits.join(", ")))
    }

    /// Whether it is a constant (not an SSA value or a global's address):
    /// what an `immarg` parameter or a shuffle mask requires.
    pub(crate) fn is_const(&self) -> bool {
        !self.name.starts_with(['%', '@'])
    }

    /// `ty name`, the typed form of an argument or a phi's type.
    pub(crate) fn typed(&self) -> String {
        format!("{} {}", self.ty, self.name)
    }
}

impl fmt::Display for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Panic unless `a` and `b` have the same type (a codegen bug).
fn same(op: &str, a: &V, b: &V) {
    assert!(
        a.ty == b.ty,
        "ir: `{op}` operands differ in type: {} {} vs {} {}",
        a.ty,
        a.name,
        b.ty,
        b.name
    );
}

/// The integer comparison predicates.
const ICMP: [&str; 10] = [
    "eq", "ne", "ugt", "uge", "ult", "ule", "sgt", "sge", "slt", "sle",
];

/// The float comparison predicates the kernels use.
const FCMP: [&str; 14] = [
    "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une",
    "uno",
];

/// One kernel function's text under construction: the entry block
/// (allocas and loop-invariant values, memoized) and the body, the
/// function's control-flow state, and what the module around it must
/// hold (declarations, metadata), which outlives [`Self::reset`].
#[derive(Debug, Default)]
pub(crate) struct Builder {
    /// The entry block's instructions.
    pub(crate) pre: String,
    /// The body (every block after the entry block).
    pub(crate) body: String,
    n: usize,
    entry_memo: HashMap<String, V>,
    hoist: bool,
    f: flow::FnState,
    decls: Vec<Decl>,
    meta: Vec<String>,
}

macro_rules! int_binops {
    ($($(#[$doc:meta])* $name:ident = $op:literal;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(&mut self, a: &V, b: &V) -> V {
            self.int_binop($op, a, b)
        }
    )*};
}

macro_rules! float_binops {
    ($($(#[$doc:meta])* $name:ident = $op:literal;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(&mut self, a: &V, b: &V) -> V {
            self.float_binop($op, "", a, b)
        }
    )*};
}

macro_rules! casts {
    ($($(#[$doc:meta])* $name:ident = $op:literal, $ok:expr;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(&mut self, x: &V, to: Ty) -> V {
            let ok: fn(Ty, Ty) -> bool = $ok;
            assert!(ok(x.ty, to), "ir: `{}` from {} {} to {to} is ill-typed", $op, x.ty, x.name);
            self.def(to, format!("{} {} to {to}", $op, x.typed()))
        }
    )*};
}

/// `from` narrower than `to`, both of the kind `bits` measures.
fn widens(bits: fn(Ty) -> Option<u32>, from: Ty, to: Ty) -> bool {
    matches!((bits(from), bits(to)), (Some(a), Some(b)) if a < b)
}

/// A lane-wise cast from `f` to `t`: both scalars, or vectors of as many
/// lanes, whose lane types `ok` accepts.
fn lanewise(f: Ty, t: Ty, ok: fn(Ty, Ty) -> bool) -> bool {
    f.lanes() == t.lanes() && ok(f.elem(), t.elem())
}

impl Builder {
    /// Forget the previous function (the value counter keeps counting;
    /// the module's declarations and metadata stay).
    pub(crate) fn reset(&mut self) {
        self.pre.clear();
        self.body.clear();
        self.entry_memo.clear();
        self.hoist = false;
        self.f = flow::FnState::default();
    }

    /// A fresh SSA name `%tN`.
    pub(crate) fn fresh(&mut self) -> String {
        self.n += 1;
        format!("%t{}", self.n)
    }

    /// Append one line (an `alloca`) to the entry block.
    pub(crate) fn entry_line(&mut self, line: &str) {
        self.pre.push_str("  ");
        self.pre.push_str(line);
        self.pre.push('\n');
    }

    /// `name = alloca ty` in the entry block: the stack slot's pointer.
    pub(crate) fn alloca(&mut self, name: &str, ty: Ty, align: u32) -> V {
        self.entry_line(&format!("{name} = alloca {ty}, align {align}"));
        V::new(ty.ptr(), name)
    }

    /// An instruction form with no method here (an aggregate `alloca`d
    /// row's address): the caller vouches that `rhs` has type `ty`.
    pub(crate) fn def_text(&mut self, ty: Ty, rhs: String) -> V {
        self.def(ty, rhs)
    }

    /// Define a value of type `ty` as `rhs`: in the current block, or,
    /// inside [`Self::hoisted`], once per function in the entry block.
    fn def(&mut self, ty: Ty, rhs: String) -> V {
        if self.hoist {
            return self.def_hoisted(ty, rhs);
        }
        let v = V::new(ty, self.next_name());
        let out = self.out(false);
        out.push_str(&format!("  {v} = {rhs}\n"));
        v
    }

    /// [`Self::def`] inside [`Self::hoisted`].
    fn def_hoisted(&mut self, ty: Ty, rhs: String) -> V {
        self.f.check_hoist();
        if let Some(v) = self.entry_memo.get(&rhs) {
            assert!(v.ty == ty, "ir: `{rhs}` memoized as {} not {ty}", v.ty);
            return v.clone();
        }
        let v = V::new(ty, self.fresh());
        self.pre.push_str(&format!("  {v} = {rhs}\n"));
        self.entry_memo.insert(rhs, v.clone());
        v
    }

    /// Run `f` with every value it defines placed in the entry block,
    /// memoized (loop-invariant constants and shape quantities; their
    /// operands must be available there too).
    pub(crate) fn hoisted<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let old = std::mem::replace(&mut self.hoist, true);
        let r = f(self);
        self.hoist = old;
        r
    }

    /// An `f32` constant by its bits (`bitcast i32 … to float` in the
    /// entry block: every payload of a NaN is kept exactly).
    pub(crate) fn const_f32(&mut self, x: f32) -> V {
        let bits = V::int(Ty::I32, x.to_bits() as i32 as i64);
        self.hoisted(|b| b.bitcast(&bits, Ty::Float))
    }

    // ---- arithmetic (scalars, or vectors lane by lane) --------------------

    fn int_binop(&mut self, op: &str, a: &V, b: &V) -> V {
        same(op, a, b);
        assert!(a.ty.elem().is_int(), "ir: `{op}` on {} {}", a.ty, a.name);
        self.def(a.ty, format!("{op} {}, {b}", a.typed()))
    }

    int_binops! {
        /// `a + b`, wrapping.
        add = "add";
        /// `a − b`, wrapping.
        sub = "sub";
        /// `a · b`, wrapping.
        mul = "mul";
        /// `a + b`, no signed overflow (index arithmetic).
        add_nsw = "add nsw";
        /// `a + b`, no signed or unsigned overflow (a counter from 0).
        add_nuw_nsw = "add nuw nsw";
        /// `a − b`, no signed overflow (index arithmetic).
        sub_nsw = "sub nsw";
        /// `a · b`, no signed overflow (index arithmetic).
        mul_nsw = "mul nsw";
        /// Signed quotient (the caller excludes ÷0 and MIN ÷ −1).
        sdiv = "sdiv";
        /// Signed remainder (as `sdiv`).
        srem = "srem";
        /// Unsigned quotient.
        udiv = "udiv";
        /// Unsigned remainder.
        urem = "urem";
        /// Bitwise and.
        and = "and";
        /// Bitwise or.
        or = "or";
        /// Bitwise xor.
        xor = "xor";
        /// Shift left.
        shl = "shl";
        /// Arithmetic shift right.
        ashr = "ashr";
        /// Logical shift right.
        lshr = "lshr";
    }

    /// A float binop with fast-math `flags` (`""` or e.g. `"reassoc "`).
    pub(crate) fn float_binop(&mut self, op: &str, flags: &str, a: &V, b: &V) -> V {
        same(op, a, b);
        assert!(a.ty.elem().is_float(), "ir: `{op}` on {} {}", a.ty, a.name);
        self.def(a.ty, format!("{op} {flags}{}, {b}", a.typed()))
    }

    float_binops! {
        /// `a + b`.
        fadd = "fadd";
        /// `a − b`.
        fsub = "fsub";
        /// `a · b`.
        fmul = "fmul";
        /// `a / b`.
        fdiv = "fdiv";
    }

    /// `−x` (sign flip only; a NaN keeps its payload).
    pub(crate) fn fneg(&mut self, x: &V) -> V {
        assert!(x.ty.elem().is_float(), "ir: `fneg` on {} {}", x.ty, x.name);
        self.def(x.ty, format!("fneg {}", x.typed()))
    }

    // ---- comparisons and selection ----------------------------------------

    /// Integer comparison `pred` (`eq`, `slt`, …): an `i1`, or `<n x i1>`
    /// of vectors.
    pub(crate) fn icmp(&mut self, pred: &str, a: &V, b: &V) -> V {
        assert!(ICMP.contains(&pred), "ir: no icmp predicate `{pred}`");
        same("icmp", a, b);
        assert!(a.ty.elem().is_int(), "ir: `icmp` on {} {}", a.ty, a.name);
        self.def(
            Ty::I1.lanes_of(a.ty),
            format!("icmp {pred} {}, {b}", a.typed()),
        )
    }

    /// Float comparison `pred` (`olt`, `uno`, …): an `i1`, or `<n x i1>`
    /// of vectors.
    pub(crate) fn fcmp(&mut self, pred: &str, a: &V, b: &V) -> V {
        assert!(FCMP.contains(&pred), "ir: no fcmp predicate `{pred}`");
        same("fcmp", a, b);
        assert!(a.ty.elem().is_float(), "ir: `fcmp` on {} {}", a.ty, a.name);
        self.def(
            Ty::I1.lanes_of(a.ty),
            format!("fcmp {pred} {}, {b}", a.typed()),
        )
    }

    /// `c ? a : b`: one `i1` for the whole value, or an `<n x i1>` picking
    /// each lane of `n`-lane vectors.
    pub(crate) fn select(&mut self, c: &V, a: &V, b: &V) -> V {
        let ok = match c.ty {
            Ty::I1 => true,
            Ty::Vec(n, &Ty::I1) => a.ty.lanes() == Some(n),
            _ => false,
        };
        assert!(
            ok,
            "ir: `select` condition {} {} for {} {}",
            c.ty, c.name, a.ty, a.name
        );
        same("select", a, b);
        self.def(
            a.ty,
            format!("select {}, {}, {}", c.typed(), a.typed(), b.typed()),
        )
    }

    // ---- casts -------------------------------------------------------------

    casts! {
        /// Sign-extend to a wider int.
        sext = "sext", |f, t| lanewise(f, t, |f, t| widens(Ty::int_bits, f, t));
        /// Zero-extend to a wider int.
        zext = "zext", |f, t| lanewise(f, t, |f, t| widens(Ty::int_bits, f, t));
        /// Keep the low bits (a narrower int).
        trunc = "trunc", |f, t| lanewise(f, t, |f, t| widens(Ty::int_bits, t, f));
        /// Widen a float.
        fpext = "fpext", |f, t| lanewise(f, t, |f, t| widens(Ty::float_bits, f, t));
        /// Round to a narrower float.
        fptrunc = "fptrunc", |f, t| lanewise(f, t, |f, t| widens(Ty::float_bits, t, f));
        /// Signed int to float.
        sitofp = "sitofp", |f, t| lanewise(f, t, |f, t| f.is_int() && t.is_float());
        /// Unsigned int to float.
        uitofp = "uitofp", |f, t| lanewise(f, t, |f, t| f.is_int() && t.is_float());
        /// Float to signed int (poison out of range: callers saturate).
        fptosi = "fptosi", |f, t| lanewise(f, t, |f, t| f.is_float() && t.is_int());
        /// Reinterpret the bits: pointer to pointer, or between scalars
        /// and vectors of the same width (`<8 x i32>` to `<16 x i16>`).
        bitcast = "bitcast", |f, t| match (f, t) {
            (Ty::Ptr(_), Ty::Ptr(_)) => true,
            _ => f.bits().is_some() && f.bits() == t.bits(),
        };
    }

    // ---- vector lanes ------------------------------------------------------

    /// Lane `idx` of the vector `v`.
    // No kernel reads a single lane yet; the vector forms come as a set.
    #[allow(dead_code)]
    pub(crate) fn extractelement(&mut self, v: &V, idx: &V) -> V {
        let Ty::Vec(_, e) = v.ty else {
            panic!("ir: `extractelement` from non-vector {} {}", v.ty, v.name)
        };
        assert!(idx.ty.is_int(), "ir: lane index {} {}", idx.ty, idx.name);
        self.def(*e, format!("extractelement {}, {}", v.typed(), idx.typed()))
    }

    /// `v` with lane `idx` replaced by `x` (of `v`'s lane type).
    pub(crate) fn insertelement(&mut self, v: &V, x: &V, idx: &V) -> V {
        assert!(
            v.ty.lanes().is_some() && x.ty == v.ty.elem(),
            "ir: `insertelement` of {} {} into {} {}",
            x.ty,
            x.name,
            v.ty,
            v.name
        );
        assert!(idx.ty.is_int(), "ir: lane index {} {}", idx.ty, idx.name);
        self.def(
            v.ty,
            format!(
                "insertelement {}, {}, {}",
                v.typed(),
                x.typed(),
                idx.typed()
            ),
        )
    }

    /// The lanes of `a` and `b` (one type) picked by the constant `<m x
    /// i32>` `mask`: an `m`-lane vector (`zeroinitializer` splats lane 0).
    pub(crate) fn shufflevector(&mut self, a: &V, b: &V, mask: &V) -> V {
        same("shufflevector", a, b);
        let Ty::Vec(_, e) = a.ty else {
            panic!("ir: `shufflevector` of non-vector {} {}", a.ty, a.name)
        };
        let m = match mask.ty {
            Ty::Vec(m, &Ty::I32) if mask.is_const() => m,
            _ => panic!("ir: shuffle mask {} {}", mask.ty, mask.name),
        };
        self.def(
            e.vec(m as usize),
            format!(
                "shufflevector {}, {}, {}",
                a.typed(),
                b.typed(),
                mask.typed()
            ),
        )
    }

    // ---- memory ------------------------------------------------------------

    /// The pointee of `p`, which `op` reads or writes through.
    fn pointee(op: &str, p: &V) -> Ty {
        match p.ty {
            Ty::Ptr(t) => *t,
            _ => panic!("ir: `{op}` through non-pointer {} {}", p.ty, p.name),
        }
    }

    /// `*p` (at the type's ABI alignment, as an unannotated load is).
    pub(crate) fn load(&mut self, p: &V) -> V {
        let t = Self::pointee("load", p);
        self.def(t, format!("load {t}, {}", p.typed()))
    }

    /// `*p`, promising `p` aligned to `align` bytes (a vector through an
    /// element pointer promises the element's).
    pub(crate) fn load_align(&mut self, p: &V, align: u32) -> V {
        assert!(align.is_power_of_two(), "ir: alignment {align}");
        let t = Self::pointee("load", p);
        self.def(t, format!("load {t}, {}, align {align}", p.typed()))
    }

    /// Panic unless `p` points to `x`'s type.
    fn check_store(x: &V, p: &V) {
        assert!(
            matches!(p.ty, Ty::Ptr(t) if *t == x.ty),
            "ir: `store` of {} {} through {} {}",
            x.ty,
            x.name,
            p.ty,
            p.name
        );
    }

    /// `*p = x`.
    pub(crate) fn store(&mut self, x: &V, p: &V) {
        Self::check_store(x, p);
        self.line(&format!("store {}, {}", x.typed(), p.typed()));
    }

    /// `*p = x`, promising `p` aligned to `align` bytes.
    pub(crate) fn store_align(&mut self, x: &V, p: &V, align: u32) {
        assert!(align.is_power_of_two(), "ir: alignment {align}");
        Self::check_store(x, p);
        self.line(&format!(
            "store {}, {}, align {align}",
            x.typed(),
            p.typed()
        ));
    }

    /// `getelementptr inbounds`: `p` offset by `idx[0]` elements, then
    /// into arrays by the rest; every index is an `i64`.
    pub(crate) fn gep(&mut self, p: &V, idx: &[&V]) -> V {
        self.gep_as("getelementptr inbounds", p, idx)
    }

    /// [`Self::gep`] without `inbounds`: an address that may lie outside
    /// `p`'s object (a prefetch hint, never dereferenced).
    pub(crate) fn gep_any(&mut self, p: &V, idx: &[&V]) -> V {
        self.gep_as("getelementptr", p, idx)
    }

    fn gep_as(&mut self, op: &str, p: &V, idx: &[&V]) -> V {
        let Ty::Ptr(mut t) = p.ty else {
            panic!("ir: `getelementptr` on non-pointer {} {}", p.ty, p.name)
        };
        let base = *t;
        let mut ops = String::new();
        for (k, i) in idx.iter().enumerate() {
            assert!(i.ty == Ty::I64, "ir: gep index {} {}", i.ty, i.name);
            if k > 0 {
                let Ty::Array(_, e) = t else {
                    panic!("ir: gep index {k} into non-array {t}")
                };
                t = e;
            }
            ops.push_str(&format!(", {}", i.typed()));
        }
        self.def(Ty::Ptr(t), format!("{op} {base}, {}{ops}", p.typed()))
    }
}
