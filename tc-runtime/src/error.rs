//! The runtime's one error type. Every failure on user input lands here;
//! nothing in tc-runtime panics on user data.

use tc_core::concrete::RuleError;
use tc_core::size::SizeError;
use tc_core::Dtype;

/// A runtime failure, naming the parameter, dimension, expected and actual values.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// Wrong number of arguments for a tensor fn.
    #[error("`{func}` takes {expected} arguments, found {found}")]
    Arity {
        /// The function.
        func: String,
        /// Parameters declared.
        expected: usize,
        /// Arguments given.
        found: usize,
    },
    /// A GGUF file is malformed, or holds what tc does not read.
    #[error("GGUF: {0}")]
    Gguf(String),
    /// A block-quantized tensor (Section 2 §18) asked for what its format
    /// cannot give.
    #[error("a {dtype} tensor of shape {shape:?}: {what} (Section 2 §18)")]
    Quantized {
        /// The format.
        dtype: Dtype,
        /// The shape asked for.
        shape: Vec<usize>,
        /// What cannot be done.
        what: &'static str,
    },
    /// An argument has the wrong dtype.
    #[error("parameter `{param}`: expected dtype {expected}, found {found}")]
    Dtype {
        /// The parameter.
        param: String,
        /// Declared dtype.
        expected: Dtype,
        /// Actual dtype.
        found: Dtype,
    },
    /// An argument has the wrong rank.
    #[error("parameter `{param}`: expected rank {expected}, found rank {found} (shape {shape:?})")]
    Rank {
        /// The parameter.
        param: String,
        /// Declared rank.
        expected: usize,
        /// Actual rank.
        found: usize,
        /// Actual shape.
        shape: Vec<usize>,
    },
    /// A tensor was given where a scalar was declared, or the reverse.
    #[error("parameter `{param}`: expected {expected}, found {found}")]
    Kind {
        /// The parameter.
        param: String,
        /// What the signature declares.
        expected: String,
        /// What was passed.
        found: String,
    },
    /// A dimension disagrees with the binding of σ so far.
    #[error("parameter `{param}`, dimension {axis} (`{dim}`): expected {expected}, found {found} (σ = {sigma})")]
    Dim {
        /// The parameter.
        param: String,
        /// The axis.
        axis: usize,
        /// The declared symbolic dim.
        dim: String,
        /// Its value under σ.
        expected: i64,
        /// The actual size.
        found: usize,
        /// The substitution bound so far.
        sigma: String,
    },
    /// A refinement, `requires` or axiom is false under σ.
    #[error("{kind} `{pred}` is false (σ = {sigma})")]
    Predicate {
        /// "refinement of parameter `x`", "requires", "axiom".
        kind: String,
        /// The predicate.
        pred: String,
        /// The substitution.
        sigma: String,
    },
    /// Data length does not match the shape's volume.
    #[error("shape {shape:?} holds {expected} elements, but {found} were given")]
    DataLength {
        /// The shape.
        shape: Vec<usize>,
        /// Its volume.
        expected: usize,
        /// Elements supplied.
        found: usize,
    },
    /// A typed accessor was used with the wrong element type.
    #[error("tensor has dtype {found}, but {expected} was requested")]
    WrongElementType {
        /// The requested dtype.
        expected: Dtype,
        /// The tensor's dtype.
        found: Dtype,
    },
    /// A safetensors file could not be read or a tensor in it does not match.
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// A weight struct's tensor is not in the map it is loaded from.
    #[error("no tensor named `{name}` to load")]
    MissingTensor {
        /// Its full name (prefix included).
        name: String,
    },
    /// A call of an unknown tensor fn.
    #[error("unknown tensor fn `{0}`")]
    UnknownFunction(String),
    /// Raw storage has the wrong number of bytes for the dtype and shape (Section 2 §5 layout).
    #[error("{dtype} tensor of shape {shape:?} needs {expected} bytes, but {found} were given")]
    ByteLength {
        /// The dtype.
        dtype: Dtype,
        /// The shape.
        shape: Vec<usize>,
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes supplied.
        found: usize,
    },
    /// Raw Bool storage holds a byte other than 0 or 1.
    #[error("bool element {index} is stored as byte {byte:#04x}; only 0 and 1 are valid")]
    InvalidBool {
        /// Flat index of the element.
        index: usize,
        /// The offending byte.
        byte: u8,
    },
    /// A failure of the concrete shape rule or of an op on concrete data:
    /// malformed IR, an op's precondition, a reshape's volumes, a dim that
    /// does not evaluate or is negative, a count over
    /// [`tc_core::size::MAX_ELEMS`], a gather id out of range. The rule's
    /// error held whole, so the interpreter and the JIT (which share the
    /// rule) report alike and a new rule error needs no runtime counterpart.
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// A buffer for a value within the element cap could not be allocated
    /// (the machine has less memory than the value needs); see
    /// [`crate::alloc`].
    #[error("out of memory: could not allocate {bytes} bytes for a tensor value")]
    OutOfMemory {
        /// The bytes requested.
        bytes: usize,
    },
    /// Calls nest deeper than [`crate::interp::MAX_CALL_DEPTH`] (a recursive
    /// call chain: Section 4 §7.3, reported the same way by both backends
    /// instead of overflowing the stack).
    #[error("call of `{callee}` nests deeper than {max} (recursion is not part of Phase 0)")]
    CallDepth {
        /// The call that would pass the limit.
        callee: String,
        /// The limit.
        max: usize,
    },
    /// A called tensor fn returned a value other than the one its caller was
    /// planned for (the JIT checks every nested call's result).
    #[error("call of `{callee}`: expected a {expected_dtype} result of shape {expected_shape:?}, the callee returned {found_dtype} of shape {found_shape:?}")]
    CallResult {
        /// The callee.
        callee: String,
        /// The dtype the caller was planned for.
        expected_dtype: Dtype,
        /// The shape the caller was planned for.
        expected_shape: Vec<usize>,
        /// The dtype returned.
        found_dtype: Dtype,
        /// The shape returned.
        found_shape: Vec<usize>,
    },
    /// A tensor's shape differs from the one the caller asked for.
    #[error("{context}: expected shape {expected:?}, found {found:?}")]
    ShapeMismatch {
        /// What was checked (e.g. the safetensors entry).
        context: String,
        /// The shape asked for.
        expected: Vec<usize>,
        /// The actual shape.
        found: Vec<usize>,
    },
    /// The storage layout of this dtype cannot be viewed in place as the requested element type
    /// (packed I4, or a big-endian host).
    #[error(
        "a {dtype} tensor cannot be viewed in place (its storage is not a plain array of elements)"
    )]
    NoZeroCopyView {
        /// The tensor's dtype.
        dtype: Dtype,
    },
    /// A shape variable that does not opt into `α ≥ 0` was bound to 0 (Section 2 §16).
    #[error("parameter `{param}`, dimension {axis}: shape variable `{var}` = 0, but `{var}` has the default `{var} >= 1` (opt in with `{var} >= 0`) (σ = {sigma})")]
    ZeroDim {
        /// The parameter.
        param: String,
        /// The axis.
        axis: usize,
        /// The shape variable bound to 0.
        var: String,
        /// The substitution bound so far.
        sigma: String,
    },
    /// A dim argument (`heads: Dim![H]`, Section 1 §6 site 1) disagrees with
    /// its dim under σ: `H` already bound by a tensor dim, or a compound dim.
    #[error(
        "parameter `{param}` (`Dim![{dim}]`): expected {expected}, found {found} (σ = {sigma})"
    )]
    DimArg {
        /// The parameter.
        param: String,
        /// The declared dim.
        dim: String,
        /// Its value under σ.
        expected: i64,
        /// The size passed.
        found: usize,
        /// The substitution bound so far.
        sigma: String,
    },
    /// A dim argument outside the sizes its dim admits: 0 for a variable with
    /// the default `α ≥ 1` (Section 2 §16), or above `i64::MAX` (the dim range).
    #[error("parameter `{param}` (`Dim![{dim}]`): expected a size in {min}..={max}, found {found} (σ = {sigma})")]
    DimArgRange {
        /// The parameter.
        param: String,
        /// The declared dim.
        dim: String,
        /// The least admitted size (0 or 1).
        min: i64,
        /// The greatest admitted size (`i64::MAX`).
        max: i64,
        /// The size passed.
        found: usize,
        /// The substitution bound so far.
        sigma: String,
    },
    /// A compound dim that binds a shape variable (Section 2 §18: `4 * F`,
    /// `F + 2`, `K / 32`) does not invert at the argument's size: the size
    /// is not a multiple, the value it gives is below the variable's least
    /// size (Section 2 §16), or it does not fit in an i64.
    #[error("parameter `{param}`{} (`{dim}`): size {found} cannot bind `{var}`: {why} (σ = {sigma})", axis_text(.axis))]
    Infer {
        /// The parameter.
        param: String,
        /// The tensor axis; `None` for a dim parameter.
        axis: Option<usize>,
        /// The declared compound dim.
        dim: String,
        /// The shape variable it was to bind.
        var: String,
        /// The argument's size.
        found: usize,
        /// Why no value of the variable gives that size.
        why: String,
        /// The substitution bound so far.
        sigma: String,
    },
    /// A scalar argument's value is not in its declared dtype's value set.
    #[error("parameter `{param}`: value {value} is not a {dtype} value")]
    ScalarValue {
        /// The parameter.
        param: String,
        /// The declared dtype.
        dtype: Dtype,
        /// The value passed.
        value: String,
    },
    /// The well-typed heap invariant (Section 4 §3.3) failed after a step: an interpreter bug, reported.
    #[error("heap invariant ({rule}) violated at handle τ{handle}: {message}")]
    HeapInvariant {
        /// The handle.
        handle: u32,
        /// Which clause: "coverage", "agreement" or "inhabitation".
        rule: String,
        /// What was found.
        message: String,
    },
}

/// `, dimension 2` for a tensor axis, nothing for a dim parameter.
fn axis_text(axis: &Option<usize>) -> String {
    axis.map(|a| format!(", dimension {a}")).unwrap_or_default()
}

/// Result with the runtime's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Size checks outside the rule (building a tensor, sizing a buffer) are the
/// rule's own size error, so both report a count over the cap alike.
impl From<SizeError> for Error {
    fn from(e: SizeError) -> Error {
        Error::Rule(RuleError::Size(e))
    }
}

impl Error {
    /// [`RuleError::Malformed`]: IR the runtime cannot run (a bug upstream,
    /// reported, not panicked).
    pub fn malformed(message: impl Into<String>) -> Error {
        Error::Rule(RuleError::Malformed(message.into()))
    }

    /// [`RuleError::Op`]: an op failed on concrete data.
    pub fn op(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Rule(RuleError::Op {
            op: op.into(),
            message: message.into(),
        })
    }
}
