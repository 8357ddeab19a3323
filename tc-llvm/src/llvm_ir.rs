//! The typed LLVM IR text builder the emitters write through: [`Ty`] (the
//! LLVM types a kernel uses), [`V`] (an operand that carries its LLVM
//! type) and [`Builder`] (one function's entry block and body, with one
//! method per instruction form).
//!
//! The codegen emits IR as text rather than through inkwell's builder:
//! text is cheap to build, hash, cache and print (a failing kernel can be
//! read as is), and LLVM parses each module once. What the builder API
//! would give — an instruction cannot be given an operand of the wrong
//! type — this layer gives instead: every method checks its operands'
//! types (a mismatch is a compiler bug and panics with a message naming
//! the instruction and both types) and derives its result type itself, so
//! no call site spells a type that could disagree with its operands.

use std::collections::HashMap;
use std::fmt;

use tc_core::Dtype;

/// An LLVM type used by the kernels (typed pointers: the JIT is LLVM 14).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ty {
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
}

impl Ty {
    /// The width of an integer type.
    pub(super) fn int_bits(self) -> Option<u32> {
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
    pub(super) fn float_bits(self) -> Option<u32> {
        match self {
            Ty::Half => Some(16),
            Ty::Float => Some(32),
            Ty::Double => Some(64),
            _ => None,
        }
    }

    /// Whether it is an integer type (`i1` included).
    pub(super) fn is_int(self) -> bool {
        self.int_bits().is_some()
    }

    /// Whether it is a floating-point type.
    pub(super) fn is_float(self) -> bool {
        self.float_bits().is_some()
    }

    /// The pointer to this (scalar) type.
    pub(super) fn ptr(self) -> Ty {
        Ty::Ptr(match self {
            Ty::I1 => &Ty::I1,
            Ty::I8 => &Ty::I8,
            Ty::I16 => &Ty::I16,
            Ty::I32 => &Ty::I32,
            Ty::I64 => &Ty::I64,
            Ty::Half => &Ty::Half,
            Ty::Float => &Ty::Float,
            Ty::Double => &Ty::Double,
            other => panic!("ir: no pointer type to {other} is used"),
        })
    }

    /// The computation type of `dt` (module doc of `codegen`): `float` for
    /// every float dtype, an int's own width (I4 in `i8`), Bool in `i1`.
    pub(super) fn compute(dt: Dtype) -> Ty {
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
    pub(super) fn storage(dt: Dtype) -> Ty {
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
        }
    }
}

/// An operand: an SSA name, a global or a literal, with its LLVM type.
/// `Display` writes the operand alone (`%t3`, `7`, `true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct V {
    /// Its LLVM type.
    pub(super) ty: Ty,
    /// Its spelling as an operand.
    pub(super) name: String,
}

impl V {
    /// A named value of type `ty` defined outside the builder (a
    /// parameter, an alloca, a global).
    pub(super) fn new(ty: Ty, name: impl Into<String>) -> V {
        V {
            ty,
            name: name.into(),
        }
    }

    /// An integer literal of type `ty` (`i1` takes 0 or 1).
    pub(super) fn int(ty: Ty, v: i64) -> V {
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
    pub(super) fn bool(b: bool) -> V {
        V::new(Ty::I1, if b { "true" } else { "false" })
    }

    /// A shape quantity (an `i64` literal or SSA name, as `shape.rs`
    /// passes them) as an operand.
    pub(super) fn i64(s: &str) -> V {
        V::new(Ty::I64, s)
    }

    /// `ty name`, the typed form of an argument or a phi's type.
    pub(super) fn typed(&self) -> String {
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
/// (allocas and loop-invariant values, memoized) and the body.
#[derive(Debug, Default)]
pub(super) struct Builder {
    /// The entry block's instructions.
    pub(super) pre: String,
    /// The body (every block after the entry block).
    pub(super) body: String,
    n: usize,
    entry_memo: HashMap<String, V>,
    hoist: bool,
}

macro_rules! int_binops {
    ($($(#[$doc:meta])* $name:ident = $op:literal;)*) => {$(
        $(#[$doc])*
        pub(super) fn $name(&mut self, a: &V, b: &V) -> V {
            self.int_binop($op, a, b)
        }
    )*};
}

macro_rules! float_binops {
    ($($(#[$doc:meta])* $name:ident = $op:literal;)*) => {$(
        $(#[$doc])*
        pub(super) fn $name(&mut self, a: &V, b: &V) -> V {
            self.float_binop($op, "", a, b)
        }
    )*};
}

macro_rules! casts {
    ($($(#[$doc:meta])* $name:ident = $op:literal, $ok:expr;)*) => {$(
        $(#[$doc])*
        pub(super) fn $name(&mut self, x: &V, to: Ty) -> V {
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

impl Builder {
    /// Forget the previous function (the value counter keeps counting).
    pub(super) fn reset(&mut self) {
        self.pre.clear();
        self.body.clear();
        self.entry_memo.clear();
        self.hoist = false;
    }

    /// A fresh SSA name `%tN`.
    pub(super) fn fresh(&mut self) -> String {
        self.n += 1;
        format!("%t{}", self.n)
    }

    /// Append one instruction line (a store, a branch) to the body.
    pub(super) fn emit(&mut self, line: &str) {
        self.body.push_str("  ");
        self.body.push_str(line);
        self.body.push('\n');
    }

    /// Append one line (an `alloca`) to the entry block.
    pub(super) fn entry_line(&mut self, line: &str) {
        self.pre.push_str("  ");
        self.pre.push_str(line);
        self.pre.push('\n');
    }

    /// `name = alloca ty` in the entry block: the stack slot's pointer.
    pub(super) fn alloca(&mut self, name: &str, ty: Ty, align: u32) -> V {
        self.entry_line(&format!("{name} = alloca {ty}, align {align}"));
        V::new(ty.ptr(), name)
    }

    /// Start block `name` in the body.
    pub(super) fn block(&mut self, name: &str) {
        self.body.push_str(name);
        self.body.push_str(":\n");
    }

    /// An instruction form with no method here (an aggregate `alloca`d
    /// row's address): the caller vouches that `rhs` has type `ty`.
    pub(super) fn def_text(&mut self, ty: Ty, rhs: String) -> V {
        self.def(ty, rhs)
    }

    /// Define a value of type `ty` as `rhs`: in the body, or, inside
    /// [`Self::hoisted`], once per function in the entry block.
    fn def(&mut self, ty: Ty, rhs: String) -> V {
        if self.hoist {
            if let Some(v) = self.entry_memo.get(&rhs) {
                assert!(v.ty == ty, "ir: `{rhs}` memoized as {} not {ty}", v.ty);
                return v.clone();
            }
            let v = V::new(ty, self.fresh());
            self.pre.push_str(&format!("  {v} = {rhs}\n"));
            self.entry_memo.insert(rhs, v.clone());
            return v;
        }
        let v = V::new(ty, self.fresh());
        self.emit(&format!("{v} = {rhs}"));
        v
    }

    /// Run `f` with every value it defines placed in the entry block,
    /// memoized (loop-invariant constants and shape quantities; their
    /// operands must be available there too).
    pub(super) fn hoisted<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let old = std::mem::replace(&mut self.hoist, true);
        let r = f(self);
        self.hoist = old;
        r
    }

    /// An `f32` constant by its bits (`bitcast i32 … to float` in the
    /// entry block: every payload of a NaN is kept exactly).
    pub(super) fn const_f32(&mut self, x: f32) -> V {
        let bits = V::int(Ty::I32, x.to_bits() as i32 as i64);
        self.hoisted(|b| b.bitcast(&bits, Ty::Float))
    }

    // ---- arithmetic --------------------------------------------------------

    fn int_binop(&mut self, op: &str, a: &V, b: &V) -> V {
        same(op, a, b);
        assert!(a.ty.is_int(), "ir: `{op}` on {} {}", a.ty, a.name);
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
    pub(super) fn float_binop(&mut self, op: &str, flags: &str, a: &V, b: &V) -> V {
        same(op, a, b);
        assert!(a.ty.is_float(), "ir: `{op}` on {} {}", a.ty, a.name);
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
    pub(super) fn fneg(&mut self, x: &V) -> V {
        assert!(x.ty.is_float(), "ir: `fneg` on {} {}", x.ty, x.name);
        self.def(x.ty, format!("fneg {}", x.typed()))
    }

    // ---- comparisons and selection ----------------------------------------

    /// Integer comparison `pred` (`eq`, `slt`, …): an `i1`.
    pub(super) fn icmp(&mut self, pred: &str, a: &V, b: &V) -> V {
        assert!(ICMP.contains(&pred), "ir: no icmp predicate `{pred}`");
        same("icmp", a, b);
        assert!(a.ty.is_int(), "ir: `icmp` on {} {}", a.ty, a.name);
        self.def(Ty::I1, format!("icmp {pred} {}, {b}", a.typed()))
    }

    /// Float comparison `pred` (`olt`, `uno`, …): an `i1`.
    pub(super) fn fcmp(&mut self, pred: &str, a: &V, b: &V) -> V {
        assert!(FCMP.contains(&pred), "ir: no fcmp predicate `{pred}`");
        same("fcmp", a, b);
        assert!(a.ty.is_float(), "ir: `fcmp` on {} {}", a.ty, a.name);
        self.def(Ty::I1, format!("fcmp {pred} {}, {b}", a.typed()))
    }

    /// `c ? a : b`.
    pub(super) fn select(&mut self, c: &V, a: &V, b: &V) -> V {
        assert!(c.ty == Ty::I1, "ir: `select` condition {} {}", c.ty, c.name);
        same("select", a, b);
        self.def(
            a.ty,
            format!("select {}, {}, {}", c.typed(), a.typed(), b.typed()),
        )
    }

    // ---- casts -------------------------------------------------------------

    casts! {
        /// Sign-extend to a wider int.
        sext = "sext", |f, t| widens(Ty::int_bits, f, t);
        /// Zero-extend to a wider int.
        zext = "zext", |f, t| widens(Ty::int_bits, f, t);
        /// Keep the low bits (a narrower int).
        trunc = "trunc", |f, t| widens(Ty::int_bits, t, f);
        /// Widen a float.
        fpext = "fpext", |f, t| widens(Ty::float_bits, f, t);
        /// Round to a narrower float.
        fptrunc = "fptrunc", |f, t| widens(Ty::float_bits, t, f);
        /// Signed int to float.
        sitofp = "sitofp", |f, t| f.is_int() && t.is_float();
        /// Unsigned int to float.
        uitofp = "uitofp", |f, t| f.is_int() && t.is_float();
        /// Float to signed int (poison out of range: callers saturate).
        fptosi = "fptosi", |f, t| f.is_float() && t.is_int();
        /// Reinterpret the bits (same width, or pointer to pointer).
        bitcast = "bitcast", |f, t| match (f, t) {
            (Ty::Ptr(_), Ty::Ptr(_)) => true,
            _ => {
                let w = |t: Ty| t.int_bits().or(t.float_bits());
                w(f).is_some() && w(f) == w(t)
            }
        };
    }

    // ---- memory ------------------------------------------------------------

    /// `*p` (at the type's ABI alignment, as an unannotated load is).
    pub(super) fn load(&mut self, p: &V) -> V {
        let Ty::Ptr(t) = p.ty else {
            panic!("ir: `load` from non-pointer {} {}", p.ty, p.name)
        };
        self.def(*t, format!("load {t}, {}", p.typed()))
    }

    /// `*p = x`.
    pub(super) fn store(&mut self, x: &V, p: &V) {
        assert!(
            matches!(p.ty, Ty::Ptr(t) if *t == x.ty),
            "ir: `store` of {} {} through {} {}",
            x.ty,
            x.name,
            p.ty,
            p.name
        );
        self.emit(&format!("store {}, {}", x.typed(), p.typed()));
    }

    /// `getelementptr inbounds`: `p` offset by `idx[0]` elements, then
    /// into arrays by the rest; every index is an `i64`.
    pub(super) fn gep(&mut self, p: &V, idx: &[&V]) -> V {
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
        self.def(
            Ty::Ptr(t),
            format!("getelementptr inbounds {base}, {}{ops}", p.typed()),
        )
    }

    // ---- calls and phis ----------------------------------------------------

    /// `call ret @callee(args…)` of an intrinsic or a runtime helper
    /// (`crate::rt::DECLS` declares them).
    pub(super) fn call(&mut self, ret: Ty, callee: &str, args: &[&V]) -> V {
        let args: Vec<String> = args.iter().map(|a| a.typed()).collect();
        self.def(ret, format!("call {ret} @{callee}({})", args.join(", ")))
    }

    /// A phi over `(value, predecessor label)` pairs, all of one type.
    pub(super) fn phi(&mut self, incoming: &[(V, String)]) -> V {
        let ty = incoming.first().expect("ir: empty phi").0.ty;
        let mut arms = Vec::new();
        for (v, l) in incoming {
            assert!(v.ty == ty, "ir: phi arm {} {} in a {ty} phi", v.ty, v.name);
            arms.push(format!("[ {v}, %{l} ]"));
        }
        self.def(ty, format!("phi {ty} {}", arms.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(b: &mut Builder, ty: Ty) -> V {
        V::new(ty, b.fresh())
    }

    #[test]
    fn result_types_are_derived() {
        let mut b = Builder::default();
        let x = reg(&mut b, Ty::Float);
        let i = reg(&mut b, Ty::I16);
        assert_eq!(b.fadd(&x, &x).ty, Ty::Float);
        assert_eq!(b.fcmp("uno", &x, &x).ty, Ty::I1);
        assert_eq!(b.icmp("slt", &i, &V::int(Ty::I16, 0)).ty, Ty::I1);
        assert_eq!(b.sext(&i, Ty::I64).ty, Ty::I64);
        assert_eq!(b.bitcast(&x, Ty::I32).ty, Ty::I32);
        let p = V::new(Ty::I16.ptr(), "%p");
        let q = b.gep(&p, &[&V::i64("3")]);
        assert_eq!(q.ty, Ty::Ptr(&Ty::I16));
        assert_eq!(b.load(&q).ty, Ty::I16);
        let tab = V::new(Ty::Ptr(&Ty::Array(256, &Ty::I32)), "@tab");
        let e = b.gep(&tab, &[&V::i64("0"), &V::i64("%k")]);
        assert_eq!(e.ty, Ty::Ptr(&Ty::I32));
        let c = b.fcmp("olt", &x, &x);
        assert_eq!(b.select(&c, &i, &i).ty, Ty::I16);
        assert!(b.body.contains("= fadd float %t1, %t1\n"));
        assert!(b.body.contains("= sext i16 %t2 to i64\n"));
        assert!(b
            .body
            .contains("= getelementptr inbounds [256 x i32], [256 x i32]* @tab, i64 0, i64 %k\n"));
    }

    #[test]
    fn hoisted_values_are_memoized_in_the_entry_block() {
        let mut b = Builder::default();
        let one = b.const_f32(1.0);
        assert_eq!(b.const_f32(1.0), one);
        assert_eq!(one.ty, Ty::Float);
        assert_eq!(
            b.pre,
            format!("  {one} = bitcast i32 1065353216 to float\n")
        );
        assert!(b.body.is_empty());
    }

    #[test]
    #[should_panic(expected = "`fadd` operands differ in type: float %t1 vs i32 %t2")]
    fn mismatched_binop_operands_panic() {
        let mut b = Builder::default();
        let x = reg(&mut b, Ty::Float);
        let i = reg(&mut b, Ty::I32);
        b.fadd(&x, &i);
    }

    #[test]
    #[should_panic(expected = "`add` on float")]
    fn int_op_on_floats_panics() {
        let mut b = Builder::default();
        let x = reg(&mut b, Ty::Float);
        b.add(&x, &x);
    }

    #[test]
    #[should_panic(expected = "`sext` from i64 %t1 to i32 is ill-typed")]
    fn narrowing_extension_panics() {
        let mut b = Builder::default();
        let i = reg(&mut b, Ty::I64);
        b.sext(&i, Ty::I32);
    }

    #[test]
    #[should_panic(expected = "`store` of i32 %t1 through float* %p")]
    fn store_through_wrong_pointer_panics() {
        let mut b = Builder::default();
        let i = reg(&mut b, Ty::I32);
        b.store(&i, &V::new(Ty::Float.ptr(), "%p"));
    }

    #[test]
    #[should_panic(expected = "`select` condition float")]
    fn non_i1_select_condition_panics() {
        let mut b = Builder::default();
        let x = reg(&mut b, Ty::Float);
        b.select(&x, &x, &x);
    }
}
