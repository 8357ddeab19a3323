//! Diagnostics: what the checker reports, independent of `proc_macro`.
//!
//! Spans are opaque [`SpanId`]s chosen by whoever builds the IR (the macro maps
//! them back to token spans; tests use small integers), so the whole checker is
//! testable with plain `#[test]`.

use std::fmt;

/// An opaque source location handed in by the front end.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct SpanId(pub u32);

impl SpanId {
    /// Its position in the front end's table of spans (the ids are handed
    /// out in order from 0).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A concrete assignment of shape variables under which an obligation fails,
/// in declaration order, minimised per variable (Section 2 notation).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Counterexample(pub Vec<(String, i64)>);

impl Counterexample {
    /// Value of one variable, if the counterexample assigns it.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

impl fmt::Display for Counterexample {
    /// `B = 1, S = 2`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<_> = self.0.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        f.write_str(&parts.join(", "))
    }
}

/// A secondary message attached to a span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: SpanId,
    /// What about it.
    pub message: String,
}

/// One error found by the checker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable machine-readable code, e.g. `E0201`; see [`codes`].
    pub code: &'static str,
    /// The rule that was broken, e.g. `matmul (Section 2 §7)`.
    pub rule: &'static str,
    /// The primary span: the smallest offending tokens.
    pub span: SpanId,
    /// Lowercase, "expected … found …" style.
    pub message: String,
    /// Secondary spans.
    pub labels: Vec<Label>,
    /// Other tokens that are part of the same error (the rest of an unsat
    /// core): each is underlined. On stable Rust a proc macro cannot attach
    /// secondary spans, so the macro reports each as an error of its own.
    pub related: Vec<Label>,
    /// The failing assignment, when the solver produced one.
    pub counterexample: Option<Counterexample>,
    /// Extra facts worth knowing.
    pub notes: Vec<String>,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with only the required parts.
    pub fn new(
        code: &'static str,
        rule: &'static str,
        span: SpanId,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            code,
            rule,
            span,
            message: message.into(),
            labels: Vec::new(),
            related: Vec::new(),
            counterexample: None,
            notes: Vec::new(),
            help: None,
        }
    }

    /// Attach a counterexample.
    pub fn with_cex(mut self, cex: Option<Counterexample>) -> Self {
        self.counterexample = cex;
        self
    }

    /// Attach a note.
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.notes.push(n.into());
        self
    }

    /// Attach help.
    pub fn help(mut self, h: impl Into<String>) -> Self {
        self.help = Some(h.into());
        self
    }

    /// Attach a secondary label.
    pub fn label(mut self, span: SpanId, m: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: m.into(),
        });
        self
    }

    /// Underline `span` too, as part of this error.
    pub fn related(mut self, span: SpanId, m: impl Into<String>) -> Self {
        self.related.push(Label {
            span,
            message: m.into(),
        });
        self
    }

    /// The one-line headline: `[E0201] matmul (Section 2 §7): … ; fails when K = 1`.
    pub fn headline(&self) -> String {
        let mut s = format!("{}: {}", self.rule, self.message);
        if let Some(c) = &self.counterexample {
            if !c.0.is_empty() {
                s.push_str(&format!("\n  fails when {c}"));
            }
        }
        s
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.headline())?;
        for n in &self.notes {
            write!(f, "\n  note: {n}")?;
        }
        for r in &self.related {
            write!(f, "\n  note: {}", r.message)?;
        }
        if let Some(h) = &self.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

/// The stable diagnostic codes.
pub mod codes {
    /// A refinement set is unsatisfiable: the type is empty (Section 1 §4).
    pub const EMPTY_TYPE: &str = "E0101";
    /// A dim uses an unbound shape variable (Section 1 §4 var-shape).
    pub const UNBOUND_VAR: &str = "E0102";
    /// A dim or predicate leaves Presburger arithmetic (Section 1 §3).
    pub const NON_LINEAR: &str = "E0103";
    /// Division/mod by a variable without a proof of divisibility (Section 2 §13).
    pub const DIV_BY_VAR: &str = "E0104";
    /// A literal 0 dim, or a dim that may be negative or zero, where not admitted (Section 2 §16).
    pub const BAD_DIM: &str = "E0105";
    /// A dim's coefficients or constant leave i64 (Section 1 §2: dims are
    /// exact integers; a wrapped coefficient would be a different dim).
    pub const DIM_OVERFLOW: &str = "E0106";
    /// Division or remainder by the constant 0 in a dim (Section 2 §13).
    pub const DIV_BY_ZERO: &str = "E0107";
    /// A divisor of `/` or `%` in a dim is not provably at least 1 (Section 2 §13).
    pub const DIVISOR: &str = "E0108";
    /// A module constant used as a dim has no valid i64 value (out of range,
    /// overflow, division by zero, a wrapping cast, or below 1 as a dim).
    pub const MODULE_CONST: &str = "E0109";
    /// A block-quantized tensor's last dim is not provably a multiple of its
    /// format's block (Section 2 §18).
    pub const QUANT_BLOCK: &str = "E0110";
    /// Dtypes differ (Section 3 §3.3, §9).
    pub const DTYPE_MISMATCH: &str = "E0201";
    /// An operation is not admissible at a dtype class (Section 2 §3).
    pub const DTYPE_CLASS: &str = "E0202";
    /// Ranks differ (Section 3 §8.5).
    pub const RANK_MISMATCH: &str = "E0203";
    /// A dim cannot be proven equal (Section 2 §2).
    pub const SHAPE_MISMATCH: &str = "E0204";
    /// A refinement is not implied (Section 3 §3.3).
    pub const REFINEMENT: &str = "E0205";
    /// Kind mismatch: tensor vs scalar vs function (Section 3 §5 step 1).
    pub const KIND_MISMATCH: &str = "E0206";
    /// A literal does not fit the dtype it meets (Section 2 §3, §5).
    pub const LITERAL_RANGE: &str = "E0207";
    /// Matmul contraction dims differ (Section 2 §7).
    pub const CONTRACTION: &str = "E0301";
    /// Bad axis / axis set (Section 2 §8, §12).
    pub const AXIS: &str = "E0302";
    /// Reduction over a possibly-empty axis (Section 2 §8).
    pub const EMPTY_REDUCTION: &str = "E0303";
    /// Not a permutation (Section 2 §9).
    pub const PERMUTATION: &str = "E0304";
    /// Reshape volume not provable (Section 2 §10).
    pub const RESHAPE_VOLUME: &str = "E0305";
    /// Broadcast of a dim that is neither 1 nor equal (Section 2 §11).
    pub const BROADCAST: &str = "E0306";
    /// Slice bounds not provable (Section 2 §12).
    pub const SLICE_BOUNDS: &str = "E0307";
    /// Concat operands disagree (Section 2 §12).
    pub const CONCAT: &str = "E0308";
    /// A top-k count not provably within its axis (docs/syntax.md §8a).
    pub const TOPK: &str = "E0309";
    /// A convolution's or pooling's window not provably valid: a constant
    /// out of range, channels that do not split into the groups, a kernel
    /// that may not fit in the padded input (docs/syntax.md §12c, §12d).
    pub const WINDOW: &str = "E0310";
    /// A rope's rotated axis not provably twice its tables' last dim
    /// (Section 2 §18, docs/syntax.md §12e).
    pub const ROPE: &str = "E0311";
    /// A call's arity, unification or `requires` fails (Section 2 §17).
    pub const CALL: &str = "E0401";
    /// Unknown function or variable in a body.
    pub const UNKNOWN_NAME: &str = "E0402";
    /// A call-graph cycle in a module: recursion (Section 2 §17 has none).
    pub const RECURSION: &str = "E0403";
    /// The solver ran out of budget (Section 3 §5 step 4: unknown = reject).
    pub const SOLVER_UNKNOWN: &str = "E0501";
    /// The IR itself is malformed (verifier).
    pub const MALFORMED_IR: &str = "E0601";
    /// The macro itself failed (a bug in tc-macros, reported instead of a
    /// crash of rustc).
    pub const INTERNAL: &str = "E0602";
    /// Macro input nested too deeply or too long for the compiler's stack
    /// (docs/syntax.md, "Size limits").
    pub const INPUT_LIMIT: &str = "E0701";
    /// A Rust construct that is not part of the tensor_fn body language
    /// (docs/syntax.md): `if`, loops, indexing, macros, `mut`, statements.
    pub const UNSUPPORTED: &str = "E0702";
    /// A malformed tensor fn, module or attribute: qualifiers, generics,
    /// parameter and return types, `requires`/`axiom` syntax, dim syntax.
    pub const ITEM_FORM: &str = "E0703";
    /// A dtype name that is not one of tc's (Section 1 §1).
    pub const UNKNOWN_DTYPE: &str = "E0704";
    /// A built-in op called with the wrong number or form of arguments (an
    /// axis, shape, permutation or step that is not a literal list).
    pub const OP_ARGUMENTS: &str = "E0705";
    /// A `#[tensor_params]` struct or its use: field types, attributes,
    /// unknown fields, the struct used as a value.
    pub const PARAMS_STRUCT: &str = "E0706";

    /// Every code, in order: the error index (docs/errors.md) documents
    /// each one, which `tc-core/tests/error_index.rs` checks.
    pub const ALL: &[&str] = &[
        EMPTY_TYPE,
        UNBOUND_VAR,
        NON_LINEAR,
        DIV_BY_VAR,
        BAD_DIM,
        DIM_OVERFLOW,
        DIV_BY_ZERO,
        DIVISOR,
        MODULE_CONST,
        QUANT_BLOCK,
        DTYPE_MISMATCH,
        DTYPE_CLASS,
        RANK_MISMATCH,
        SHAPE_MISMATCH,
        REFINEMENT,
        KIND_MISMATCH,
        LITERAL_RANGE,
        CONTRACTION,
        AXIS,
        EMPTY_REDUCTION,
        PERMUTATION,
        RESHAPE_VOLUME,
        BROADCAST,
        SLICE_BOUNDS,
        CONCAT,
        TOPK,
        WINDOW,
        ROPE,
        CALL,
        UNKNOWN_NAME,
        RECURSION,
        SOLVER_UNKNOWN,
        MALFORMED_IR,
        INTERNAL,
        INPUT_LIMIT,
        UNSUPPORTED,
        ITEM_FORM,
        UNKNOWN_DTYPE,
        OP_ARGUMENTS,
        PARAMS_STRUCT,
    ];

    /// Where the error index documents `code` (`docs/errors.md#e0204`).
    pub fn doc_anchor(code: &str) -> String {
        format!("docs/errors.md#{}", code.to_ascii_lowercase())
    }
}
