//! The Section 4 reference interpreter.
//!
//! A configuration is `(H, e)` (Section 4 §4): a grow-only [`Heap`] of
//! handles `τ` → typed tensor data (§3.2) and the rest of a function body.
//! Evaluation is call-by-value, left to right: each instruction of a
//! [`Function`] body is one `op-apply` step (§4.2) whose operands are already
//! values; it applies the operation's denotation ⟦op⟧ (§5) and allocates a
//! fresh handle. [`Machine::step`] is exactly that step.
//!
//! Denotations are written as *index functions* (§5): each output element is
//! computed from its multi-index by reading the input elements it denotes; no
//! blocking, no clever kernels. The public [`denote`] module exposes each one
//! on plain [`Tensor`]s, so compiled kernels can be compared against it.
//!
//! Numerics follow Section 2 §3 (see [`denote`] for the exact choices): F32
//! computes in f32; F16/BF16/F8 compute as F32 and round after every op;
//! matmul and sum/prod/mean accumulate in f32 and round once; integer
//! arithmetic wraps at the dtype's width, `x / 0 = x % 0 = 0`.
//!
//! The well-typed heap invariant of §3.3 (coverage, agreement, inhabitation)
//! is checked after every step when [`Interpreter::check_heap`] is on (the
//! default when the environment variable `TC_CHECK_HEAP` is set to anything
//! but `0`; the test suite turns it on explicitly).

use tc_core::concrete::{self, RuleError};
use tc_core::ir::{DimBinding, Function, Op, Scalar, Value, ValueMap};
use tc_core::{Dim, Dtype, Sigma, TensorType, Type};

use crate::cast;
use crate::contract::{self, format_sigma, Arg};
use crate::elem::Elem;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The reference interpreter refuses tensors with more elements than this
/// (it holds every element decoded); larger requests are a [`RuleError::Size`].
/// The one cap of both backends: the JIT's planner checks the same constant.
pub use tc_core::size::MAX_ELEMS;

/// Calls nest at most this deep (Phase 0 has no recursion, Section 4 §7.3: a
/// recursive call chain is reported as [`Error::CallDepth`], not a stack
/// overflow). The JIT's nested calls stop at the same depth with the same
/// error.
pub const MAX_CALL_DEPTH: usize = 64;

/// An opaque tensor handle `τ` (Section 4 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u32);

impl Handle {
    /// Its position in the heap's cells (handles are allocated in order).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "τ{}", self.0)
    }
}

/// A value (Section 4 §3.1): a tensor handle or a scalar literal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    /// `〈τ : T〉`.
    Tensor(Handle),
    /// A scalar of a dtype (always in that dtype's value set).
    Scalar(Elem, Dtype),
    /// A dim parameter's size (Section 1 §6 site 1): already bound into σ by
    /// the contract, kept only to be passed on to calls; it has no handle.
    Dim(usize),
}

/// `H(τ) = (T_τ, f_τ)`: the metadata stored beside the data, and the data.
#[derive(Clone, Debug)]
pub struct Cell {
    /// `dtype(T_τ)`.
    pub dtype: Dtype,
    /// `shape(T_τ)` under σ.
    pub shape: Vec<usize>,
    /// `f_τ`, as a row-major tensor.
    pub data: Tensor,
}

/// `Γ_heap(τ)`: the type the static context assigns to a handle (Section 4
/// §3.3 clause 1), kept apart from the heap so agreement can be checked.
#[derive(Clone, Debug)]
pub struct CellType {
    /// The dtype the operation's typing rule gives.
    pub dtype: Dtype,
    /// The concrete shape the typing rule gives under σ.
    pub shape: Vec<usize>,
    /// The declared type, when there is one: a parameter's type or an
    /// instruction's `let x: T` annotation (dims and refinements under `sigma`).
    pub declared: Option<TensorType>,
    /// The σ of the frame that allocated the handle.
    pub sigma: Sigma,
}

/// The grow-only heap `H` (Section 4 §3.2) with its `Γ_heap`.
#[derive(Clone, Debug, Default)]
pub struct Heap {
    cells: Vec<Cell>,
    types: Vec<CellType>,
}

impl Heap {
    /// The empty heap.
    pub fn new() -> Heap {
        Heap::default()
    }

    /// Number of handles allocated so far.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// True when nothing was allocated.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// `H(τ)`.
    pub fn get(&self, h: Handle) -> Option<&Cell> {
        self.cells.get(h.index())
    }

    /// `Γ_heap(τ)`.
    pub fn type_of(&self, h: Handle) -> Option<&CellType> {
        self.types.get(h.index())
    }

    /// Every handle, in allocation order.
    pub fn handles(&self) -> impl Iterator<Item = Handle> + '_ {
        (0..self.cells.len() as u32).map(Handle)
    }

    /// Allocate a fresh handle (never reused: the heap is grow-only).
    pub fn alloc(
        &mut self,
        data: Tensor,
        declared: Option<TensorType>,
        sigma: &Sigma,
    ) -> Result<Handle> {
        let Ok(id) = u32::try_from(self.cells.len()) else {
            return Err(Error::op("alloc", "heap exhausted (2³² handles)"));
        };
        let shape = data.shape().to_vec();
        let dtype = data.dtype();
        self.types.push(CellType {
            dtype,
            shape: shape.clone(),
            declared,
            sigma: sigma.clone(),
        });
        self.cells.push(Cell { dtype, shape, data });
        Ok(Handle(id))
    }

    /// The whole well-typed-heap predicate of Section 4 §3.3, cell by cell.
    pub fn check(&self) -> Result<()> {
        if self.cells.len() != self.types.len() {
            return Err(Error::HeapInvariant {
                handle: self.cells.len().min(self.types.len()) as u32,
                rule: "coverage".into(),
                message: format!(
                    "{} cells but {} recorded types",
                    self.cells.len(),
                    self.types.len()
                ),
            });
        }
        for h in self.handles() {
            self.check_cell(h)?;
        }
        Ok(())
    }

    /// §3.3 for one handle: coverage, agreement, inhabitation.
    pub fn check_cell(&self, h: Handle) -> Result<()> {
        let bad = |rule: &str, message: String| Error::HeapInvariant {
            handle: h.0,
            rule: rule.into(),
            message,
        };
        // 1. Coverage: the context records a type for τ.
        let (Some(cell), Some(ty)) = (self.get(h), self.type_of(h)) else {
            return Err(bad("coverage", "no recorded type".into()));
        };
        // 2. Agreement: metadata = data = recorded type (= declared type under σ).
        if cell.dtype != ty.dtype || cell.shape != ty.shape {
            return Err(bad(
                "agreement",
                format!(
                    "stored {} {:?}, context says {} {:?}",
                    cell.dtype, cell.shape, ty.dtype, ty.shape
                ),
            ));
        }
        if cell.data.dtype() != cell.dtype || cell.data.shape() != cell.shape.as_slice() {
            return Err(bad(
                "agreement",
                format!(
                    "metadata {} {:?}, data {} {:?}",
                    cell.dtype,
                    cell.shape,
                    cell.data.dtype(),
                    cell.data.shape()
                ),
            ));
        }
        if let Some(decl) = &ty.declared {
            if decl.dtype != ty.dtype || decl.shape.len() != ty.shape.len() {
                return Err(bad(
                    "agreement",
                    format!("declared {decl}, found {} {:?}", ty.dtype, ty.shape),
                ));
            }
            for (axis, (d, &n)) in decl.shape.iter().zip(&ty.shape).enumerate() {
                match d.eval(&ty.sigma) {
                    Ok(v) if v >= 0 && v as u64 == n as u64 => {}
                    Ok(v) => {
                        return Err(bad(
                            "agreement",
                            format!(
                            "declared dim {axis} `{d}` = {v} under σ, found {n} (declared {decl})"
                        ),
                        ))
                    }
                    // A dim over a variable the frame never bound (a fresh
                    // variable of Section 2 §13) cannot be evaluated; skip it.
                    Err(tc_core::dim::EvalError::Unbound(_)) => {}
                    Err(e) => {
                        return Err(bad("agreement", format!("declared dim {axis} `{d}`: {e}")))
                    }
                }
            }
        }
        // 3. Inhabitation: f_τ is total on ⟦shape⟧_σ, lands in ⟦dtype⟧, σ ⊨ R.
        let vol = tc_core::size::volume(cell.shape.iter().map(|&d| d as i128));
        if vol != Some(cell.data.numel() as i128) {
            return Err(bad(
                "inhabitation",
                format!(
                    "shape {:?} has volume {vol:?}, data holds {}",
                    cell.shape,
                    cell.data.numel()
                ),
            ));
        }
        let elems = cell.data.try_to_elems()?;
        if elems.len() != cell.data.numel() {
            return Err(bad(
                "inhabitation",
                format!(
                    "{} elements decoded, {} expected",
                    elems.len(),
                    cell.data.numel()
                ),
            ));
        }
        for (i, e) in elems.iter().enumerate() {
            if !in_dtype(*e, cell.dtype) {
                return Err(bad(
                    "inhabitation",
                    format!("element {i} = {e:?} is not a {} value", cell.dtype),
                ));
            }
        }
        if let Some(decl) = &ty.declared {
            for r in &decl.refs {
                match r.eval(&ty.sigma) {
                    Ok(true) | Err(tc_core::dim::EvalError::Unbound(_)) => {}
                    Ok(false) => {
                        return Err(bad(
                            "inhabitation",
                            format!("refinement `{r}` is false under σ"),
                        ))
                    }
                    Err(e) => return Err(bad("inhabitation", format!("refinement `{r}`: {e}"))),
                }
            }
        }
        Ok(())
    }
}

/// `e ∈ ⟦dt⟧` (Section 4 §2.1): the right kind of element, in range, and for
/// a narrow float exactly representable (NaN allowed; F8E4M3 has no ±∞).
pub fn in_dtype(e: Elem, dt: Dtype) -> bool {
    match e {
        Elem::F(x) => {
            dt.is_float()
                && (x.is_nan()
                    || dt == Dtype::F32
                    || (!(dt == Dtype::F8E4M3 && x.is_infinite())
                        && cast::round_to(x, dt).to_bits() == x.to_bits()))
        }
        Elem::I(x) => dt.int_range().is_some_and(|(lo, hi)| lo <= x && x <= hi),
        Elem::B(_) => dt.is_bool(),
    }
}

/// How a run went: the value, the final heap and σ, and the number of steps.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The returned tensor.
    pub value: Tensor,
    /// Its handle (`None` when a scalar parameter was returned as a rank-0 tensor).
    pub handle: Option<Handle>,
    /// The final heap.
    pub heap: Heap,
    /// The final σ of the called function (with its local dim bindings).
    pub sigma: Sigma,
    /// `op-apply` steps taken, nested calls' steps included.
    pub steps: usize,
}

/// The interpreter's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interpreter {
    /// Check the well-typed heap invariant (Section 4 §3.3) after every step.
    pub check_heap: bool,
}

impl Default for Interpreter {
    /// [`Interpreter::from_env`].
    fn default() -> Interpreter {
        Interpreter::from_env()
    }
}

impl Interpreter {
    /// `check_heap` on when `TC_CHECK_HEAP` is set to anything but `0` or empty.
    pub fn from_env() -> Interpreter {
        let on = tc_core::env::TC_CHECK_HEAP.on_if_set();
        Interpreter { check_heap: on }
    }

    /// An interpreter that checks the heap invariant after every step.
    pub fn checked() -> Interpreter {
        Interpreter { check_heap: true }
    }

    /// Bind the contract, interpret to a value, return it.
    pub fn run<'f>(
        &self,
        func: &Function,
        args: &[Arg],
        resolve: &dyn Fn(&str) -> Option<&'f Function>,
    ) -> Result<Tensor> {
        self.run_outcome(func, args, resolve).map(|o| o.value)
    }

    /// [`Interpreter::run`] for a call already nested `depth` deep (a
    /// backend that hands a nested call to the interpreter keeps counting
    /// toward [`MAX_CALL_DEPTH`] instead of starting over).
    pub fn run_at_depth<'f>(
        &self,
        func: &Function,
        args: &[Arg],
        resolve: &dyn Fn(&str) -> Option<&'f Function>,
        depth: usize,
    ) -> Result<Tensor> {
        let mut m = self.machine(func, args, resolve)?;
        m.depth = depth;
        while m.step()? {}
        m.finish().map(|o| o.value)
    }

    /// [`Interpreter::run`], also returning the heap, σ and the step count.
    pub fn run_outcome<'f>(
        &self,
        func: &Function,
        args: &[Arg],
        resolve: &dyn Fn(&str) -> Option<&'f Function>,
    ) -> Result<Outcome> {
        let mut m = self.machine(func, args, resolve)?;
        while m.step()? {}
        m.finish()
    }

    /// The initial configuration `(H₀, body)`: the contract is bound and each
    /// tensor argument is allocated a handle carrying its parameter's type.
    pub fn machine<'a, 'f>(
        &self,
        func: &'a Function,
        args: &[Arg],
        resolve: &'a dyn Fn(&str) -> Option<&'f Function>,
    ) -> Result<Machine<'a, 'f>> {
        tc_core::ir::verify(func)
            .map_err(|d| Error::malformed(format!("`{}`: {}", func.sig.name, d.message)))?;
        let bound = contract::bind_args(&func.sig, args)?;
        let mut heap = Heap::new();
        let mut env = ValueMap::with_capacity(func.num_values());
        for ((p, a), s) in func.sig.params.iter().zip(args).zip(&bound.scalars) {
            match (a, s) {
                (_, Some((e, dt))) => env.push(Val::Scalar(*e, *dt)),
                (Arg::Tensor(t), None) => {
                    let h = heap.alloc(t.clone(), p.ty.as_tensor().cloned(), &bound.sigma)?;
                    env.push(Val::Tensor(h));
                }
                (Arg::Dim(n), None) => env.push(Val::Dim(*n)),
                (Arg::Scalar(_), None) => {
                    return Err(Error::malformed("scalar argument without a binding"))
                }
            }
        }
        let m = Machine {
            interp: *self,
            func,
            resolve,
            heap,
            sigma: bound.sigma,
            env,
            pc: 0,
            depth: 0,
            steps: 0,
        };
        if self.check_heap {
            m.check()?;
        }
        Ok(m)
    }
}

/// Bind the contract and interpret `func` on `args` (with the heap check of
/// [`Interpreter::from_env`]); calls resolve through `resolve`.
pub fn run<'f>(
    func: &Function,
    args: &[Arg],
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
) -> Result<Tensor> {
    Interpreter::from_env().run(func, args, resolve)
}

/// A resolver with no functions (for bodies without calls).
pub fn no_calls<'f>(_: &str) -> Option<&'f Function> {
    None
}

/// A configuration `(H, e)` mid-evaluation: the heap, σ, the values bound so
/// far (`v0 … v_{pc+n-1}`) and the instructions still to reduce.
pub struct Machine<'a, 'f> {
    interp: Interpreter,
    func: &'a Function,
    resolve: &'a dyn Fn(&str) -> Option<&'f Function>,
    heap: Heap,
    sigma: Sigma,
    env: ValueMap<Val>,
    pc: usize,
    depth: usize,
    steps: usize,
}

impl<'a, 'f> Machine<'a, 'f> {
    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The current σ (signature variables, constants, local dim bindings so far).
    pub fn sigma(&self) -> &Sigma {
        &self.sigma
    }

    /// The values bound so far: parameters, then one per reduced instruction.
    pub fn values(&self) -> &ValueMap<Val> {
        &self.env
    }

    /// Index of the next instruction to reduce.
    pub fn pc(&self) -> usize {
        self.pc
    }

    /// True when the body is fully reduced (the expression is a value).
    pub fn is_value(&self) -> bool {
        self.pc >= self.func.body.len()
    }

    /// §3.3 for this configuration: the heap predicate, plus coverage of
    /// every value bound in the frame.
    pub fn check(&self) -> Result<()> {
        self.heap.check()?;
        for v in self.env.values() {
            match v {
                Val::Tensor(h) if self.heap.get(*h).is_none() => {
                    return Err(Error::HeapInvariant {
                        handle: h.0,
                        rule: "coverage".into(),
                        message: "a bound value refers to an unallocated handle".into(),
                    })
                }
                Val::Scalar(e, dt) if !in_dtype(*e, *dt) => {
                    return Err(Error::HeapInvariant {
                        handle: u32::MAX,
                        rule: "inhabitation".into(),
                        message: format!("scalar {e:?} is not a {dt} value"),
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// One `op-apply` step (Section 4 §4.2): apply the dim bindings placed
    /// before the next instruction, compute ⟦op⟧ of its (already evaluated)
    /// operands, allocate a fresh handle. Returns `false` when there was
    /// nothing left to reduce.
    pub fn step(&mut self) -> Result<bool> {
        let Some(inst) = self.func.body.get(self.pc) else {
            return Ok(false);
        };
        self.apply_dim_bindings(self.pc)?;
        if let Op::Dim(d) = &inst.op {
            // A call's dim argument: its size under σ, no handle (Section 1 §6 site 1).
            let n = concrete::eval_size(d, &self.sigma, format_args!("dim argument `{d}`"))?;
            self.env.push(Val::Dim(n));
            self.pc += 1;
            self.steps += 1;
            return Ok(true);
        }
        let (data, callee_steps) = match &inst.op {
            Op::Call(name, xs) => self.call(name, xs)?,
            op => (self.apply(op)?, 0),
        };
        let declared = match &inst.annot {
            Some(Type::Tensor(t)) => Some(t.clone()),
            _ => None,
        };
        let h = self.heap.alloc(data, declared, &self.sigma)?;
        self.env.push(Val::Tensor(h));
        self.pc += 1;
        self.steps += 1 + callee_steps;
        if self.interp.check_heap {
            self.check()?;
        }
        Ok(true)
    }

    /// Reduce to the end and return the outcome; the result is checked
    /// against the signature's return type under σ.
    pub fn finish(mut self) -> Result<Outcome> {
        let (value, handle) = self.reduce_to_value()?;
        Ok(Outcome {
            value,
            handle,
            heap: self.heap,
            sigma: self.sigma,
            steps: self.steps,
        })
    }

    /// Step until the body is a value, then read the returned value.
    fn reduce_to_value(&mut self) -> Result<(Tensor, Option<Handle>)> {
        while self.step()? {}
        self.apply_dim_bindings(self.func.body.len())?;
        let ret = self.func.ret;
        let (value, handle) = match self.env.get(ret) {
            Some(Val::Tensor(h)) => match self.heap.get(*h) {
                Some(c) => (c.data.clone(), Some(*h)),
                None => {
                    return Err(Error::malformed(format!(
                        "return of unallocated handle {h}"
                    )))
                }
            },
            Some(Val::Scalar(e, dt)) => (Tensor::from_elems(*dt, &[], &[*e])?, None),
            Some(Val::Dim(_)) => {
                return Err(Error::malformed(format!(
                    "return of the dim parameter {ret}"
                )))
            }
            None => return Err(Error::malformed(format!("return of undefined value {ret}"))),
        };
        self.check_return(&value)?;
        Ok((value, handle))
    }

    fn check_return(&self, value: &Tensor) -> Result<()> {
        let sig = &self.func.sig;
        let op = || format!("return of `{}`", sig.name);
        let (dt, shape): (Dtype, &[Dim]) = match &sig.ret {
            Type::Tensor(t) => (t.dtype, &t.shape),
            Type::Scalar(dt) => (*dt, &[]),
            _ => return Ok(()),
        };
        if shape.len() == value.shape().len() {
            for (axis, d) in shape.iter().enumerate() {
                // A declared dim that cannot be evaluated (an overflow, a
                // bad divisor) is a typed error naming it, not a shape
                // mismatch: what the body produced may be right.
                match d.eval(&self.sigma) {
                    Ok(_) | Err(tc_core::dim::EvalError::Unbound(_)) => {}
                    Err(source) => {
                        return Err(Error::Rule(RuleError::Eval {
                            context: format!(
                                "{}, dimension {axis} (`{d}`, σ = {})",
                                op(),
                                format_sigma(sig, &self.sigma)
                            ),
                            source,
                        }))
                    }
                }
            }
        }
        let ok_dims = shape.len() == value.shape().len()
            && shape
                .iter()
                .zip(value.shape())
                .all(|(d, &n)| match d.eval(&self.sigma) {
                    Ok(v) => v >= 0 && v as u64 == n as u64,
                    Err(tc_core::dim::EvalError::Unbound(_)) => true,
                    Err(_) => false,
                });
        if dt != value.dtype() || !ok_dims {
            return Err(Error::op(
                op(),
                format!(
                    "declared {}, produced {} {:?} (σ = {})",
                    sig.ret,
                    value.dtype(),
                    value.shape(),
                    format_sigma(sig, &self.sigma)
                ),
            ));
        }
        Ok(())
    }

    /// `let n = dim(x, axis)` extends σ before instruction `before`.
    fn apply_dim_bindings(&mut self, before: usize) -> Result<()> {
        let bindings: Vec<&DimBinding> = self
            .func
            .dim_bindings
            .iter()
            .filter(|b| b.before == before)
            .collect();
        for b in bindings {
            let t = self.tensor(b.of)?;
            let Some(&n) = t.shape().get(b.axis) else {
                return Err(Error::malformed(format!(
                    "dim binding `{}` reads axis {} of {} (rank {})",
                    b.name,
                    b.axis,
                    b.of,
                    t.shape().len()
                )));
            };
            let n =
                i64::try_from(n).map_err(|_| Error::malformed("dimension does not fit in i64"))?;
            self.sigma.insert(b.name.clone(), n);
        }
        Ok(())
    }

    fn tensor(&self, v: Value) -> Result<&Tensor> {
        match self.env.get(v) {
            Some(Val::Tensor(h)) => {
                self.heap.get(*h).map(|c| &c.data).ok_or_else(|| {
                    Error::malformed(format!("{v} refers to unallocated handle {h}"))
                })
            }
            Some(Val::Scalar(..)) => Err(Error::malformed(format!(
                "{v} is a scalar where a tensor is needed"
            ))),
            Some(Val::Dim(_)) => Err(Error::malformed(format!(
                "{v} is a dim where a tensor is needed"
            ))),
            None => Err(Error::malformed(format!("{v} is not defined"))),
        }
    }

    /// The scalar operand as an element of `dt` (literals convert by the cast
    /// rules of Section 2 §5).
    fn scalar(&self, s: &Scalar, dt: Dtype) -> Result<Elem> {
        let e = match s {
            Scalar::Float(x) => Elem::F(*x as f32),
            Scalar::Int(i) => Elem::I(*i),
            Scalar::Bool(b) => Elem::B(*b),
            Scalar::Param(i) => match self.env.get(self.func.param_value(*i)) {
                Some(Val::Scalar(e, _)) => *e,
                _ => return Err(Error::malformed(format!("v{i} is not a scalar parameter"))),
            },
        };
        Ok(cast::convert(e, dt))
    }

    /// §12b pad: the widths evaluated under σ, the fill value converted
    /// to the operand's dtype.
    fn pad(
        &self,
        axis: usize,
        (before, after): (&Dim, &Dim),
        value: &Scalar,
        x: Value,
    ) -> Result<Tensor> {
        let t = self.tensor(x)?;
        let b = concrete::eval_signed(before, &self.sigma, "pad before")?;
        let a = concrete::eval_signed(after, &self.sigma, "pad after")?;
        denote::pad(axis, (b, a), self.scalar(value, t.dtype())?, t)
    }

    /// ⟦sdpa q k v mask scale⟧ (docs/syntax.md §12f).
    fn sdpa(&self, op: &Op) -> Result<Tensor> {
        let Op::Sdpa {
            q,
            k,
            v,
            mask,
            scale,
        } = op
        else {
            return Err(Error::malformed(format!("sdpa: `{op}` is another op")));
        };
        let scale = self.scalar(scale, Dtype::F32)?;
        let [q, k, v, mask] = [q, k, v, mask].map(|x| self.tensor(*x));
        denote::sdpa(q?, k?, v?, mask?, scale)
    }

    /// ⟦dq_matmul x w scale outliers⟧ (docs/syntax.md §7c).
    fn dq_matmul(&self, op: &Op) -> Result<Tensor> {
        let Op::DqMatmul {
            x,
            w,
            scale,
            outliers,
        } = op
        else {
            return Err(Error::malformed(format!("dq_matmul: `{op}` is another op")));
        };
        let [x, w, scale, outliers] = [x, w, scale, outliers].map(|v| self.tensor(*v));
        denote::dq_matmul(x?, w?, scale?, outliers?)
    }

    /// ⟦op⟧ of the instruction's operands (every op but a call).
    fn apply(&self, op: &Op) -> Result<Tensor> {
        let t = match op {
            Op::Unary(u, x) => denote::unary(*u, self.tensor(*x)?)?,
            Op::Cast(dt, x) => denote::cast(*dt, self.tensor(*x)?)?,
            Op::Binary(b, x, y) => denote::binary(*b, self.tensor(*x)?, self.tensor(*y)?)?,
            Op::ScalarBinary {
                op,
                x,
                s,
                scalar_left,
            } => {
                let x = self.tensor(*x)?;
                let s = self.scalar(s, x.dtype())?;
                denote::scalar_binary(*op, x, s, *scalar_left)?
            }
            Op::Select(c, a, b) => {
                denote::select(self.tensor(*c)?, self.tensor(*a)?, self.tensor(*b)?)?
            }
            Op::Matmul(a, b) => denote::matmul(self.tensor(*a)?, self.tensor(*b)?)?,
            Op::MatmulI32(a, b) => denote::matmul_i32(self.tensor(*a)?, self.tensor(*b)?)?,
            Op::DqMatmul { .. } => self.dq_matmul(op)?,
            Op::QMatmul(x, w) => {
                crate::quant::qmatmul_reference(self.tensor(*x)?, self.tensor(*w)?)?
            }
            Op::Reduce {
                op,
                axes,
                keepdims,
                x,
            } => denote::reduce(*op, axes, *keepdims, self.tensor(*x)?)?,
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                x,
            } => denote::arg_reduce(*max, *axis, *keepdims, self.tensor(*x)?)?,
            Op::Transpose(perm, x) => denote::transpose(perm, self.tensor(*x)?)?,
            Op::Reshape(s, x) => {
                let x = self.tensor(*x)?;
                denote::reshape(&concrete::eval_target(s, &self.sigma)?, x)?
            }
            Op::Broadcast(s, x) => {
                let to = concrete::eval_shape(s, &self.sigma, "broadcast")?;
                denote::broadcast(&to, self.tensor(*x)?)?
            }
            Op::Slice {
                axis,
                start,
                stop,
                step,
                x,
            } => {
                let (a, b) = concrete::eval_bounds(start, stop, &self.sigma)?;
                denote::slice(*axis, a, b, *step, self.tensor(*x)?)?
            }
            Op::Concat(axis, xs) => {
                let ts = xs
                    .iter()
                    .map(|v| self.tensor(*v))
                    .collect::<Result<Vec<_>>>()?;
                denote::concat(*axis, &ts)?
            }
            Op::Gather { axis, table, ids } => {
                denote::gather(*axis, self.tensor(*table)?, self.tensor(*ids)?)?
            }
            Op::TopK {
                k,
                axis,
                indices,
                x,
            } => {
                let k = concrete::eval_size(k, &self.sigma, "topk")?;
                denote::topk(k, *axis, *indices, self.tensor(*x)?)?
            }
            Op::CumSum { axis, x } => denote::cumsum(*axis, self.tensor(*x)?)?,
            Op::Rope {
                layout,
                x,
                cos,
                sin,
            } => denote::rope(
                *layout,
                self.tensor(*x)?,
                self.tensor(*cos)?,
                self.tensor(*sin)?,
            )?,
            Op::Sdpa { .. } => self.sdpa(op)?,
            Op::Pad {
                axis,
                before,
                after,
                value,
                x,
            } => self.pad(*axis, (before, after), value, *x)?,
            Op::Conv {
                window,
                groups,
                x,
                w,
            } => denote::conv(window, *groups, self.tensor(*x)?, self.tensor(*w)?)?,
            Op::Pool {
                kind,
                kernel,
                window,
                x,
            } => denote::pool(*kind, kernel, window, self.tensor(*x)?)?,
            Op::Fill(dt, s, v) => {
                let shape = concrete::eval_shape(s, &self.sigma, "fill")?;
                denote::fill(*dt, &shape, self.scalar(v, *dt)?)?
            }
            Op::Iota(dt, s, axis) => {
                denote::iota(*dt, &concrete::eval_shape(s, &self.sigma, "iota")?, *axis)?
            }
            Op::Call(name, _) => {
                return Err(Error::malformed(format!("call of `{name}` outside a step")))
            }
            Op::Dim(d) => return Err(Error::malformed(format!("dim value `{d}` outside a step"))),
        };
        Ok(t)
    }

    /// §17: resolve the callee, run it through the contract on the shared
    /// heap (its arguments are the caller's handles), return its value.
    fn call(&mut self, name: &str, xs: &[Value]) -> Result<(Tensor, usize)> {
        let callee =
            (self.resolve)(name).ok_or_else(|| Error::UnknownFunction(name.to_string()))?;
        if self.depth + 1 >= MAX_CALL_DEPTH {
            return Err(Error::CallDepth {
                callee: name.to_string(),
                max: MAX_CALL_DEPTH,
            });
        }
        tc_core::ir::verify(callee)
            .map_err(|d| Error::malformed(format!("`{name}`: {}", d.message)))?;
        let mut args = Vec::with_capacity(xs.len());
        let mut vals = ValueMap::with_capacity(xs.len());
        for v in xs {
            match self.env.get(*v) {
                Some(Val::Tensor(h)) => {
                    args.push(Arg::Tensor(self.tensor(*v)?.clone()));
                    vals.push(Val::Tensor(*h));
                }
                Some(Val::Scalar(e, _)) => {
                    args.push(Arg::Scalar(*e));
                    vals.push(Val::Scalar(*e, Dtype::Bool)); // dtype fixed below
                }
                Some(Val::Dim(n)) => {
                    args.push(Arg::Dim(*n));
                    vals.push(Val::Dim(*n));
                }
                None => return Err(Error::malformed(format!("{v} is not defined"))),
            }
        }
        let bound = contract::bind_args(&callee.sig, &args)?;
        for (v, s) in vals.values_mut().zip(&bound.scalars) {
            if let Some((e, dt)) = s {
                *v = Val::Scalar(*e, *dt);
            }
        }
        // The callee runs on the caller's heap (grow-only, shared): lend it,
        // and take it back whatever happens.
        let heap = std::mem::take(&mut self.heap);
        let mut m = Machine {
            interp: self.interp,
            func: callee,
            resolve: self.resolve,
            heap,
            sigma: bound.sigma,
            env: vals,
            pc: 0,
            depth: self.depth + 1,
            steps: 0,
        };
        let r = m.reduce_to_value();
        self.heap = std::mem::take(&mut m.heap);
        let (value, _) = r?;
        Ok((value, m.steps))
    }
}

/// Denotations ⟦op⟧ of Section 4 §5 as index functions on concrete tensors,
/// with the numerics of Section 2 §3.
///
/// Choices made here (documented because the spec leaves them open):
/// - Basic float arithmetic (`+ − × ÷`, `√`, `1/x`, floor/ceil/round, abs,
///   neg) is computed in f32. Transcendentals (`exp, log, rsqrt, tanh,
///   sigmoid, gelu, sin, cos, erf, pow`) are evaluated in f64 and rounded
///   once to f32, which gives the (nearly always) correctly rounded f32
///   result: this is a reference, accuracy over speed.
/// - `erf` is [`denote::erf64`]: a positive-term series for |x| < 3 and a continued
///   fraction for erfc beyond, both accurate to a few f64 ulps.
///   `gelu(x) = x·½·(1 + erf(x/√2))`, evaluated as `x·½·erfc(−x/√2)` (the
///   same function, without the cancellation for very negative x).
/// - F16/BF16/F8: every op computes as F32 then rounds with
///   [`cast::round_to`]; matmul and sum/prod/mean accumulate in f32 and round
///   once at the end.
/// - `max`/`min` (binary and reduce) on floats are IEEE 754-2019
///   `maximum`/`minimum` (Section 2 §3): NaN if either operand is NaN, and
///   −0 < +0. `relu x = maximum(x, +0)`, so `relu(−0) = +0`.
/// - NaN results follow [`cast::nan_result`] (Section 2 §3, the rules are
///   listed in `cast.rs`): an elementwise op returns its first NaN operand
///   quieted (payload and sign kept; `neg`/`abs` set the sign first), a NaN
///   made from non-NaN operands is [`cast::CANONICAL_NAN`], and so is every
///   float reduction, matmul and convolution whose result is a NaN. Data movement (transpose,
///   reshape, broadcast, slice, concat, select) copies values: an F32
///   signalling NaN moves unchanged, while narrow floats are quiet once
///   decoded (Section 2 §5 decode rule) and stay so.
/// - Integers compute in i64 with wrapping ops, then wrap to the dtype
///   ([`cast::wrap_int`]); `÷0` and `%0` give 0; `MIN / −1` wraps to `MIN`.
/// - argmax/argmin: ties pick the first index; NaN is greater than every
///   number for argmax and smaller for argmin (so the first NaN wins both).
pub mod denote {
    use super::*;
    use tc_core::concrete::{self as rule, Operand};
    use tc_core::ir::{BinaryOp, PoolKind, ReduceOp, RopeLayout, UnaryOp, Window};

    /// A tensor as the shared concrete rule ([`tc_core::concrete`]) sees it:
    /// every denotation below validates its operands and sizes its output
    /// through that rule, which the JIT's planner uses too.
    fn opd(t: &Tensor) -> Operand<'_> {
        Operand {
            dtype: t.dtype(),
            shape: t.shape(),
        }
    }

    fn malformed(op: &str, msg: String) -> Error {
        Error::malformed(format!("{op}: {msg}"))
    }

    fn op_err(op: &str, message: String) -> Error {
        Error::op(op, message)
    }

    /// The volume of a shape, refusing tensors over [`MAX_ELEMS`] with
    /// [`RuleError::Size`] (the JIT's planner refuses the same shapes). `op` is
    /// kept for callers; the error names the shape and the cap.
    pub fn volume(_op: &str, shape: &[usize]) -> Result<usize> {
        Ok(tc_core::size::numel(shape)?)
    }

    /// Row-major strides of the shape of an existing tensor. Tensors are
    /// capped at construction (`Tensor` builds every shape through
    /// `tc_core::size::numel`), so `size::strides` cannot fail here; an empty
    /// shape's overflowing strides come back as 0 (never used to address).
    fn strides(shape: &[usize]) -> Vec<usize> {
        tc_core::size::strides(shape).unwrap_or_else(|_| vec![0; shape.len()])
    }

    /// Linear index → multi-index (row-major).
    fn unravel(mut lin: usize, shape: &[usize], idx: &mut [usize]) {
        for i in (0..shape.len()).rev() {
            let d = shape[i].max(1);
            idx[i] = lin % d;
            lin /= d;
        }
    }

    fn ravel(idx: &[usize], strides: &[usize]) -> usize {
        idx.iter().zip(strides).map(|(i, s)| i * s).sum()
    }

    /// Build the output by evaluating `f` at every multi-index of `shape`.
    fn tabulate(
        op: &str,
        dt: Dtype,
        shape: &[usize],
        mut f: impl FnMut(&[usize]) -> Result<Elem>,
    ) -> Result<Tensor> {
        let n = volume(op, shape)?;
        // Fallible: 2^31 decoded elements are 32 GiB (crate::alloc).
        let mut out = crate::alloc::with_capacity(n)?;
        let mut idx = vec![0usize; shape.len()];
        for lin in 0..n {
            unravel(lin, shape, &mut idx);
            out.push(f(&idx)?);
        }
        // Exact: every element is already a value of `dt` (§5.x results are
        // rounded by `fl`/`int`; data movement copies stored values).
        Tensor::from_values(dt, shape, &out)
    }

    /// A float result in dtype `dt`: F32 as is, narrower floats rounded (§3).
    pub fn fl(dt: Dtype, x: f32) -> Elem {
        Elem::F(if dt == Dtype::F32 {
            x
        } else {
            cast::round_to(x, dt)
        })
    }

    /// An integer result in dtype `dt`, wrapped at its width (§3).
    pub fn int(dt: Dtype, x: i64) -> Elem {
        Elem::I(cast::wrap_int(x, dt))
    }

    /// `erf` in f64: for |x| < 3 the series
    /// `erf x = 2/√π · e^{−x²} · Σₙ 2ⁿ x^{2n+1} / (1·3·…·(2n+1))` (all terms
    /// positive: no cancellation), beyond that `1 − erfc x` with erfc's
    /// continued fraction ([`erfc64`]). Accurate to a few f64 ulps, far
    /// below f32 resolution.
    pub fn erf64(x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        let a = x.abs();
        let r = if a < 3.0 {
            erf_series(a)
        } else {
            1.0 - erfc_cf(a)
        };
        r.copysign(x)
    }

    /// `erfc` in f64, accurate in the tail: the continued fraction
    /// `erfc x = e^{−x²}/√π · 1/(x + ½/(x + 1/(x + (3/2)/(x + …))))` for
    /// x ≥ 3, `2 − erfc(−x)` for x ≤ −3, `1 − erf x` between.
    pub fn erfc64(x: f64) -> f64 {
        if x.is_nan() {
            x
        } else if x >= 3.0 {
            erfc_cf(x)
        } else if x <= -3.0 {
            2.0 - erfc_cf(-x)
        } else {
            1.0 - erf64(x)
        }
    }

    fn erf_series(a: f64) -> f64 {
        let x2 = a * a;
        let mut term = a;
        let mut sum = a;
        for n in 1..400 {
            term *= 2.0 * x2 / (2 * n + 1) as f64;
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
        }
        std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum
    }

    fn erfc_cf(a: f64) -> f64 {
        if a > 27.3 {
            return 0.0; // e^{−x²} underflows f64
        }
        let mut f = a;
        for n in (1..=120).rev() {
            f = a + (n as f64 * 0.5) / f;
        }
        (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    }

    /// `gelu x = x·½·(1 + erf(x/√2))`, evaluated as `x·½·erfc(−x/√2)` in f64.
    pub fn gelu64(x: f64) -> f64 {
        x * 0.5 * erfc64(-x * std::f64::consts::FRAC_1_SQRT_2)
    }

    /// The scalar version of a unary op at dtype `dt` (Section 4 §5.1).
    pub fn unary_elem(op: UnaryOp, dt: Dtype, x: Elem) -> Result<Elem> {
        let bad = || malformed(op.name(), format!("not admissible at {dt}"));
        if !op.admits(dt) {
            return Err(bad());
        }
        Ok(match x {
            Elem::F(x) if dt.is_float() => {
                let d = x as f64;
                let r = match op {
                    // Sign operations: the NaN keeps its payload, gets the
                    // op's sign and is quieted (Section 2 §3).
                    UnaryOp::Neg => return Ok(fl(dt, cast::quiet(-x))),
                    UnaryOp::Abs => return Ok(fl(dt, cast::quiet(x.abs()))),
                    // relu x = maximum(x, +0): relu(−0) = +0, NaN quieted.
                    UnaryOp::Relu => cast::maximum(x, 0.0),
                    UnaryOp::Exp => d.exp() as f32,
                    UnaryOp::Log => d.ln() as f32,
                    UnaryOp::Sqrt => x.sqrt(),
                    UnaryOp::Rsqrt => (1.0 / d.sqrt()) as f32,
                    UnaryOp::Tanh => d.tanh() as f32,
                    UnaryOp::Sigmoid => (1.0 / (1.0 + (-d).exp())) as f32,
                    UnaryOp::Gelu => gelu64(d) as f32,
                    UnaryOp::Sin => d.sin() as f32,
                    UnaryOp::Cos => d.cos() as f32,
                    UnaryOp::Erf => erf64(d) as f32,
                    UnaryOp::Recip => 1.0 / x,
                    UnaryOp::Floor => x.floor(),
                    UnaryOp::Ceil => x.ceil(),
                    UnaryOp::Round => x.round_ties_even(),
                    UnaryOp::Not => return Err(bad()),
                };
                fl(dt, cast::nan_result(r, &[x]))
            }
            Elem::I(x) if dt.is_int() => match op {
                UnaryOp::Neg => int(dt, x.wrapping_neg()),
                UnaryOp::Abs => int(dt, x.wrapping_abs()),
                UnaryOp::Relu => int(dt, x.max(0)),
                _ => return Err(bad()),
            },
            Elem::B(b) if dt.is_bool() && op == UnaryOp::Not => Elem::B(!b),
            other => {
                return Err(malformed(
                    op.name(),
                    format!("element {other:?} is not a {dt} value"),
                ))
            }
        })
    }

    /// The scalar version of a binary op on two elements of dtype `dt`
    /// (Section 4 §5.3); comparisons give a Bool element.
    pub fn binary_elem(op: BinaryOp, dt: Dtype, a: Elem, b: Elem) -> Result<Elem> {
        let bad = || malformed(op.name(), format!("not admissible at {dt}"));
        if !op.admits(dt) {
            return Err(bad());
        }
        Ok(match (a, b) {
            (Elem::F(x), Elem::F(y)) if dt.is_float() => {
                let r = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x / y,
                    BinaryOp::Max => cast::maximum(x, y),
                    BinaryOp::Min => cast::minimum(x, y),
                    BinaryOp::Pow => (x as f64).powf(y as f64) as f32,
                    BinaryOp::Eq => return Ok(Elem::B(x == y)),
                    BinaryOp::Ne => return Ok(Elem::B(x != y)),
                    BinaryOp::Lt => return Ok(Elem::B(x < y)),
                    BinaryOp::Le => return Ok(Elem::B(x <= y)),
                    BinaryOp::Gt => return Ok(Elem::B(x > y)),
                    BinaryOp::Ge => return Ok(Elem::B(x >= y)),
                    _ => return Err(bad()),
                };
                fl(dt, cast::nan_result(r, &[x, y]))
            }
            (Elem::I(x), Elem::I(y)) if dt.is_int() => match op {
                BinaryOp::Add => int(dt, x.wrapping_add(y)),
                BinaryOp::Sub => int(dt, x.wrapping_sub(y)),
                BinaryOp::Mul => int(dt, x.wrapping_mul(y)),
                BinaryOp::Div => int(dt, if y == 0 { 0 } else { x.wrapping_div(y) }),
                BinaryOp::Rem => int(dt, if y == 0 { 0 } else { x.wrapping_rem(y) }),
                BinaryOp::Max => Elem::I(x.max(y)),
                BinaryOp::Min => Elem::I(x.min(y)),
                BinaryOp::Eq => Elem::B(x == y),
                BinaryOp::Ne => Elem::B(x != y),
                BinaryOp::Lt => Elem::B(x < y),
                BinaryOp::Le => Elem::B(x <= y),
                BinaryOp::Gt => Elem::B(x > y),
                BinaryOp::Ge => Elem::B(x >= y),
                _ => return Err(bad()),
            },
            (Elem::B(x), Elem::B(y)) if dt.is_bool() => match op {
                BinaryOp::And => Elem::B(x & y),
                BinaryOp::Or => Elem::B(x | y),
                BinaryOp::Xor => Elem::B(x ^ y),
                BinaryOp::Eq => Elem::B(x == y),
                BinaryOp::Ne => Elem::B(x != y),
                BinaryOp::Lt => Elem::B(!x & y),
                BinaryOp::Le => Elem::B(x <= y),
                BinaryOp::Gt => Elem::B(x & !y),
                BinaryOp::Ge => Elem::B(x >= y),
                _ => return Err(bad()),
            },
            (a, b) => {
                return Err(malformed(
                    op.name(),
                    format!("elements {a:?}, {b:?} are not {dt} values"),
                ))
            }
        })
    }

    /// §5.1 elementwise unary.
    pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
        let (dt, shape) = rule::unary(op, opd(x))?;
        let xs = x.try_to_elems()?;
        let st = strides(x.shape());
        tabulate(op.name(), dt, &shape, |i| {
            unary_elem(op, dt, xs[ravel(i, &st)])
        })
    }

    /// §5.2 cast: `λ i. cast_value(f(i))` (Section 2 §5 value semantics,
    /// a NaN operand quieted: Section 2 §3).
    pub fn cast(to: Dtype, x: &Tensor) -> Result<Tensor> {
        let (to, shape) = rule::cast(to, opd(x))?;
        let xs = x.try_to_elems()?;
        let st = strides(x.shape());
        tabulate("cast", to, &shape, |i| {
            Ok(cast::cast_value(xs[ravel(i, &st)], to))
        })
    }

    /// §5.3 elementwise binary: `λ i. op(f(i), g(i))`.
    pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let (rdt, shape) = rule::binary(op, opd(a), opd(b))?;
        let dt = a.dtype();
        let (xs, ys) = (a.try_to_elems()?, b.try_to_elems()?);
        let st = strides(a.shape());
        tabulate(op.name(), rdt, &shape, |i| {
            let k = ravel(i, &st);
            binary_elem(op, dt, xs[k], ys[k])
        })
    }

    /// `op(x, s)` (or `op(s, x)`) with a scalar `s` already in `x`'s dtype.
    pub fn scalar_binary(op: BinaryOp, x: &Tensor, s: Elem, scalar_left: bool) -> Result<Tensor> {
        let (rdt, shape) = rule::scalar_binary(op, opd(x))?;
        let dt = x.dtype();
        let xs = x.try_to_elems()?;
        let st = strides(x.shape());
        tabulate(op.name(), rdt, &shape, |i| {
            let e = xs[ravel(i, &st)];
            if scalar_left {
                binary_elem(op, dt, s, e)
            } else {
                binary_elem(op, dt, e, s)
            }
        })
    }

    /// §12e rope: element `j` of the last axis belongs to pair `p` with
    /// coordinates `(a, b)` = `x[…, 2p], x[…, 2p + 1]` (pairs) or `x[…, p],
    /// x[…, p + H]` (halves); it is `a·cos[…, p] − b·sin[…, p]` when `j` is
    /// the pair's first coordinate and `a·sin[…, p] + b·cos[…, p]` when it
    /// is the second, each product and sum a §5.3 binary element.
    pub fn rope(layout: RopeLayout, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let (dt, shape) = rule::rope(layout, opd(x), opd(cos), opd(sin))?;
        let (xs, cs, ss) = (x.try_to_elems()?, cos.try_to_elems()?, sin.try_to_elems()?);
        let last = shape.len() - 1;
        let h = cos.shape()[last];
        let (stx, stc) = (strides(x.shape()), strides(cos.shape()));
        let mul = |u, v| binary_elem(BinaryOp::Mul, dt, u, v);
        tabulate(layout.name(), dt, &shape, |i| {
            let j = i[last];
            let (p, first, ja, jb) = match layout {
                RopeLayout::Pairs => (j / 2, j % 2 == 0, j & !1, j | 1),
                RopeLayout::Halves if j < h => (j, true, j, j + h),
                RopeLayout::Halves => (j - h, false, j - h, j),
            };
            let (rx, rc) = (
                ravel(&i[..last], &stx[..last]),
                ravel(&i[..last], &stc[..last]),
            );
            let (a, b) = (xs[rx + ja], xs[rx + jb]);
            let (c, s) = (cs[rc + p], ss[rc + p]);
            if first {
                binary_elem(BinaryOp::Sub, dt, mul(a, c)?, mul(b, s)?)
            } else {
                binary_elem(BinaryOp::Add, dt, mul(a, s)?, mul(b, c)?)
            }
        })
    }

    /// §12f sdpa: the composition the op replaces, op by op (so the op has
    /// its bits): `x = matmul(q, k) · scale + mask`, `e = exp(x − max x)`
    /// over the last axis, `matmul(e / sum e, v)`, narrow keys and values
    /// first cast to F32 (exactly, §5.2).
    pub fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: Elem) -> Result<Tensor> {
        let (_, out_shape) = rule::sdpa(opd(q), opd(k), opd(v), opd(mask))?;
        let last = out_shape.len() - 1;
        let (k, v) = (&cast(Dtype::F32, k)?, &cast(Dtype::F32, v)?);
        let scores = scalar_binary(BinaryOp::Mul, &matmul(q, k)?, scale, false)?;
        let x = binary(BinaryOp::Add, &scores, mask)?;
        let wide = x.shape().to_vec();
        let top = broadcast(&wide, &reduce(ReduceOp::Max, &[last], true, &x)?)?;
        let e = unary(UnaryOp::Exp, &binary(BinaryOp::Sub, &x, &top)?)?;
        let total = broadcast(&wide, &reduce(ReduceOp::Sum, &[last], true, &e)?)?;
        matmul(&binary(BinaryOp::Div, &e, &total)?, v)
    }

    /// `select c a b`: `λ i. if c(i) then a(i) else b(i)`.
    pub fn select(c: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let (dt, shape) = rule::select(opd(c), opd(a), opd(b))?;
        let (cs, xs, ys) = (c.try_to_elems()?, a.try_to_elems()?, b.try_to_elems()?);
        let st = strides(a.shape());
        tabulate("select", dt, &shape, |i| {
            let k = ravel(i, &st);
            Ok(if matches!(cs[k], Elem::B(true)) {
                xs[k]
            } else {
                ys[k]
            })
        })
    }

    /// §7b widening integer matmul: by its definition, §7 over the
    /// operands cast to I32 (every I8 value is one, and I32 products and
    /// sums wrap at 32 bits, Section 2 §3), after §7b's typing.
    pub fn matmul_i32(a: &Tensor, b: &Tensor) -> Result<Tensor> {
        rule::matmul_i32(opd(a), opd(b))?;
        matmul(&cast(Dtype::I32, a)?, &cast(Dtype::I32, b)?)
    }

    /// §7c dynamically quantized int8 product, literally: per row `r` of
    /// `x` (its last axis the `K` int8 channels, then the `J` outlier
    /// ones), the scale `a = maximum(m / 127, 1e-30)` of `m`, the
    /// `maximum` of `+0` and every `|x[r, l]|`, `l < K`; each channel
    /// `q[l] = cast_i8(round(x[r, l] / a))` (ties to even, saturating, NaN
    /// to 0, §5.2); then per column `c` the wrapping I32 sum `Σ_l q[l] ·
    /// w[l, c]`, converted to F32, `· a · scale[c]`, plus `o`, the F32 dot
    /// of the outlier channels with `outliers[·, c]` as fused
    /// multiply-adds in order from `+0`. A NaN result is
    /// [`cast::CANONICAL_NAN`].
    pub fn dq_matmul(x: &Tensor, w: &Tensor, scale: &Tensor, outliers: &Tensor) -> Result<Tensor> {
        let (_, out_shape) = rule::dq_matmul([opd(x), opd(w), opd(scale), opd(outliers)])?;
        let (k, n, j) = (w.shape()[0], w.shape()[1], outliers.shape()[0]);
        let (xs, ws) = (x.as_slice::<f32>()?, w.as_slice::<i8>()?);
        let (ss, vs) = (scale.as_slice::<f32>()?, outliers.as_slice::<f32>()?);
        let rows = tc_core::size::numel(&out_shape[..out_shape.len() - 1])?;
        let mut y = Vec::with_capacity(tc_core::size::numel(&out_shape)?);
        for r in 0..rows {
            let row = &xs[r * (k + j)..][..k + j];
            let m = row[..k].iter().fold(0f32, |m, v| cast::maximum(m, v.abs()));
            let a = cast::maximum(m / 127.0, 1e-30);
            let q: Vec<i32> = row[..k]
                .iter()
                .map(|&v| i32::from((v / a).round_ties_even() as i8))
                .collect();
            for c in 0..n {
                let acc = (0..k).fold(0i32, |s, l| {
                    s.wrapping_add(q[l].wrapping_mul(i32::from(ws[l * n + c])))
                });
                let o = (0..j).fold(0f32, |o, t| row[k + t].mul_add(vs[t * n + c], o));
                let v = acc as f32 * a * ss[c] + o;
                y.push(if v.is_nan() { cast::CANONICAL_NAN } else { v });
            }
        }
        Tensor::from_vec(&out_shape, y)
    }

    /// §5.4 batched matmul: `p ++ [M, K] × p ++ [K, N] → p ++ [M, N]`,
    /// `λ (b, i, j). Σ_l a(b, i, l) · b(b, l, j)`, summed in order of l.
    /// A NaN sum is [`cast::CANONICAL_NAN`]: Section 4 §5.4 leaves the
    /// summation order unspecified (§6), so, as for a reduction, the NaN
    /// must not depend on which term or partial sum made it.
    pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let (dt, out_shape) = rule::matmul(opd(a), opd(b))?;
        let (sa, sb) = (a.shape(), b.shape());
        let (r, k) = (sa.len(), sa[sa.len() - 1]);
        let (xs, ys) = (a.try_to_elems()?, b.try_to_elems()?);
        let (sta, stb) = (strides(sa), strides(sb));
        let mut ia = vec![0usize; r];
        let mut ib = vec![0usize; r];
        tabulate("matmul", dt, &out_shape, |o| {
            ia[..r - 2].copy_from_slice(&o[..r - 2]);
            ib[..r - 2].copy_from_slice(&o[..r - 2]);
            ia[r - 2] = o[r - 2];
            ib[r - 1] = o[r - 1];
            ia[r - 1] = 0;
            ib[r - 2] = 0;
            // Term l reads a(…, i, l) and b(…, l, j): the offsets of l = 0
            // advanced by the summed axis's strides.
            let (a0, b0) = (ravel(&ia, &sta), ravel(&ib, &stb));
            let (da, db) = (sta[r - 1], stb[r - 2]);
            let mut facc = 0f32;
            let mut iacc = 0i64;
            for l in 0..k {
                match (xs[a0 + l * da], ys[b0 + l * db]) {
                    (Elem::F(x), Elem::F(y)) => facc += x * y,
                    (Elem::I(x), Elem::I(y)) => iacc = iacc.wrapping_add(x.wrapping_mul(y)),
                    (x, y) => return Err(malformed("matmul", format!("elements {x:?}, {y:?}"))),
                }
            }
            Ok(if dt.is_float() {
                fl(dt, reduced_nan(facc))
            } else {
                int(dt, iacc)
            })
        })
    }

    /// §5.5 reduce over an axis set: `λ idx. fold_op { f(idx with the reduced
    /// axes set to d) | d }`, folded in row-major order of the reduced axes.
    pub fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool, x: &Tensor) -> Result<Tensor> {
        let name = format!("reduce.{}", op.name());
        let (dt, out_shape) = rule::reduce(op, axes, keepdims, opd(x))?;
        let shape = x.shape();
        let red_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        // The reduced axes' volume. It is over the cap only for an input
        // that is empty through a kept axis (`[0, 2^62]` over axis 1): the
        // output is then empty and no fold runs (an empty reduced set of
        // max/min/mean was refused by the rule).
        let count = match tc_core::size::numel(&red_shape) {
            Ok(c) => c,
            Err(_) if x.numel() == 0 => usize::MAX,
            Err(e) => return Err(e.into()),
        };
        let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
        let xs = x.try_to_elems()?;
        let st = strides(shape);
        let mut src = vec![0usize; shape.len()];
        let mut ridx = vec![0usize; axes.len()];
        tabulate(&name, dt, &out_shape, |o| {
            for (j, &a) in kept.iter().enumerate() {
                src[a] = if keepdims { o[a] } else { o[j] };
            }
            let mut fsum = 0f32;
            let mut fprod = 1f32;
            let mut isum = 0i64;
            let mut iprod = 1i64;
            let mut best: Option<Elem> = None;
            let mut any = false;
            let mut all = true;
            for r in 0..count {
                unravel(r, &red_shape, &mut ridx);
                for (q, &a) in axes.iter().enumerate() {
                    src[a] = ridx[q];
                }
                let e = xs[ravel(&src, &st)];
                match e {
                    Elem::F(v) => {
                        fsum += v;
                        fprod *= v;
                    }
                    Elem::I(v) => {
                        isum = isum.wrapping_add(v);
                        iprod = iprod.wrapping_mul(v);
                    }
                    Elem::B(b) => {
                        any |= b;
                        all &= b;
                    }
                }
                if matches!(op, ReduceOp::Max | ReduceOp::Min) {
                    best = Some(match best {
                        None => e,
                        // Not rounded in between: max/min of dtype values is a dtype value.
                        Some(b) => extremum(op, dt, b, e)?,
                    });
                }
            }
            Ok(match (op, dt.is_float()) {
                (ReduceOp::Sum, true) => fl(dt, reduced_nan(fsum)),
                (ReduceOp::Sum, false) => int(dt, isum),
                (ReduceOp::Prod, true) => fl(dt, reduced_nan(fprod)),
                (ReduceOp::Prod, false) => int(dt, iprod),
                (ReduceOp::Mean, _) => fl(dt, reduced_nan(fsum / count as f32)),
                (ReduceOp::Max | ReduceOp::Min, true) => match best {
                    Some(Elem::F(b)) => Elem::F(reduced_nan(b)),
                    _ => return Err(op_err(&name, "empty axis".into())),
                },
                (ReduceOp::Max | ReduceOp::Min, _) => {
                    best.ok_or_else(|| op_err(&name, "empty axis".into()))?
                }
                (ReduceOp::Any, _) => Elem::B(any),
                (ReduceOp::All, _) => Elem::B(all),
            })
        })
    }

    /// One step of a max/min reduction: IEEE `maximum`/`minimum` on floats
    /// (−0 < +0, Section 2 §3), the int max/min otherwise.
    /// Not rounded: the max/min of `dt` values is one of them (a NaN
    /// result is made canonical at the end), so a reduction of one element
    /// and of many agree; rounding would saturate an F8E5M2 ±inf to the
    /// cast's ±57344 (the JIT's rule too: fuzz seed 17179870744).
    fn extremum(op: ReduceOp, dt: Dtype, a: Elem, b: Elem) -> Result<Elem> {
        if let (Elem::F(x), Elem::F(y)) = (a, b) {
            return Ok(Elem::F(if op == ReduceOp::Max {
                cast::maximum(x, y)
            } else {
                cast::minimum(x, y)
            }));
        }
        let bop = if op == ReduceOp::Max {
            BinaryOp::Max
        } else {
            BinaryOp::Min
        };
        binary_elem(bop, dt, a, b)
    }

    /// A float reduction's NaN is [`cast::CANONICAL_NAN`], whichever
    /// element was the first NaN (Section 2 §3: the fold order of a
    /// reduction is not observable, Section 4 §6, so its NaN is not either).
    fn reduced_nan(x: f32) -> f32 {
        if x.is_nan() {
            cast::CANONICAL_NAN
        } else {
            x
        }
    }

    /// Is `a` strictly better than `b` for argmax (`max`) / argmin? NaN is
    /// above every number for argmax and below every number for argmin, so
    /// in both cases the first NaN wins; equal elements keep the first.
    fn arg_better(max: bool, a: Elem, b: Elem) -> bool {
        match (a, b) {
            (Elem::F(x), Elem::F(y)) => {
                if y.is_nan() {
                    false
                } else if x.is_nan() {
                    true
                } else if max {
                    x > y
                } else {
                    x < y
                }
            }
            (Elem::I(x), Elem::I(y)) => {
                if max {
                    x > y
                } else {
                    x < y
                }
            }
            (Elem::B(x), Elem::B(y)) => {
                if max {
                    x & !y
                } else {
                    !x & y
                }
            }
            _ => false,
        }
    }

    /// argmax / argmin along one axis → I64 indices.
    pub fn arg_reduce(max: bool, axis: usize, keepdims: bool, x: &Tensor) -> Result<Tensor> {
        let name = if max { "argmax" } else { "argmin" };
        let (_, out_shape) = rule::arg_reduce(max, axis, keepdims, opd(x))?;
        let shape = x.shape();
        let n = shape[axis];
        let xs = x.try_to_elems()?;
        let st = strides(shape);
        let mut src = vec![0usize; shape.len()];
        tabulate(name, Dtype::I64, &out_shape, |o| {
            let mut j = 0;
            for (i, s) in src.iter_mut().enumerate() {
                if i == axis {
                    if keepdims {
                        j += 1;
                    }
                    continue;
                }
                *s = o[j];
                j += 1;
            }
            let mut best = 0usize;
            src[axis] = 0;
            let mut bv = xs[ravel(&src, &st)];
            for d in 1..n {
                src[axis] = d;
                let e = xs[ravel(&src, &st)];
                if arg_better(max, e, bv) {
                    best = d;
                    bv = e;
                }
            }
            Ok(Elem::I(best as i64))
        })
    }

    /// §5.6 transpose: output axis j is input axis `perm[j]` (Section 2 §9),
    /// so `out(j₀, …) = f(i)` with `i[perm[j]] = j`-th output index.
    pub fn transpose(perm: &[usize], x: &Tensor) -> Result<Tensor> {
        let shape = x.shape();
        let r = shape.len();
        let (_, out_shape) = rule::transpose(perm, opd(x))?;
        let xs = x.try_to_elems()?;
        let st = strides(shape);
        let mut src = vec![0usize; r];
        tabulate("transpose", x.dtype(), &out_shape, |o| {
            for (j, &p) in perm.iter().enumerate() {
                src[p] = o[j];
            }
            Ok(xs[ravel(&src, &st)])
        })
    }

    /// §5.7 reshape: `λ idx'. f(unflatten(flatten(idx', s'), s))`. The volume
    /// equality the checker assumed (Section 2 §10) is re-checked here: a
    /// mismatch is [`RuleError::ReshapeVolume`] (the §7.0 backstop).
    pub fn reshape(to: &[i64], x: &Tensor) -> Result<Tensor> {
        let from = x.shape();
        let (_, shape) = rule::reshape(to, opd(x))?;
        let xs = x.try_to_elems()?;
        let (st_in, st_out) = (strides(from), strides(&shape));
        let mut src = vec![0usize; from.len()];
        tabulate("reshape", x.dtype(), &shape, |o| {
            unravel(ravel(o, &st_out), from, &mut src);
            Ok(xs[ravel(&src, &st_in)])
        })
    }

    /// §5.8 broadcast to `target`: align trailing dims; a source dim of 1
    /// reads index 0, an equal dim reads the same index (Section 2 §11).
    pub fn broadcast(target: &[usize], x: &Tensor) -> Result<Tensor> {
        rule::broadcast(target, opd(x))?;
        let shape = x.shape();
        let (n, m) = (shape.len(), target.len());
        let xs = x.try_to_elems()?;
        let st = strides(shape);
        let mut src = vec![0usize; n];
        tabulate("broadcast", x.dtype(), target, |o| {
            for i in 0..n {
                src[i] = if shape[i] == 1 { 0 } else { o[m - n + i] };
            }
            Ok(xs[ravel(&src, &st)])
        })
    }

    /// §5.9 slice `[start, stop)` along `axis`: `λ j. f(j with j[axis] + start)`.
    pub fn slice(axis: usize, start: i64, stop: i64, step: usize, x: &Tensor) -> Result<Tensor> {
        let shape = x.shape();
        let (_, out_shape) = rule::slice(axis, start, stop, step, opd(x))?;
        let xs = x.try_to_elems()?;
        let st = strides(shape);
        let mut src = vec![0usize; shape.len()];
        tabulate("slice", x.dtype(), &out_shape, |o| {
            src.copy_from_slice(o);
            // Below `stop` ≤ the axis' size: the rule sized the output.
            src[axis] = start as usize + o[axis] * step;
            Ok(xs[ravel(&src, &st)])
        })
    }

    /// §5.10 concat along `axis` (k ≥ 2 operands): an index reads the operand
    /// whose range along `axis` contains it, shifted down by the sizes before.
    pub fn concat(axis: usize, xs: &[&Tensor]) -> Result<Tensor> {
        let ops: Vec<Operand> = xs.iter().map(|t| opd(t)).collect();
        let (dt, out_shape) = rule::concat(axis, &ops)?;
        let shape = out_shape.as_slice();
        let data: Vec<Vec<Elem>> = xs.iter().map(|t| t.try_to_elems()).collect::<Result<_>>()?;
        let sts: Vec<Vec<usize>> = xs.iter().map(|t| strides(t.shape())).collect();
        let mut src = vec![0usize; shape.len()];
        tabulate("concat", dt, &out_shape, |o| {
            src.copy_from_slice(o);
            let mut k = 0;
            while src[axis] >= xs[k].shape()[axis] {
                src[axis] -= xs[k].shape()[axis];
                k += 1;
            }
            Ok(data[k][ravel(&src, &sts[k])])
        })
    }

    /// §12a gather along `axis`: every id is checked against the table's
    /// axis first ([`rule::gather_ids`]), then
    /// `out[p…, j…, q…] = table[p…, ids[j…], q…]`.
    pub fn gather(axis: usize, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        let (dt, out_shape) = rule::gather(axis, opd(table), opd(ids))?;
        let id_elems = ids.try_to_elems()?;
        let id_vals: Vec<i64> = id_elems
            .iter()
            .map(|e| match e {
                Elem::I(i) => *i,
                // The rule admits only I64 indices, which decode as `Elem::I`.
                _ => -1,
            })
            .collect();
        rule::gather_ids(
            axis,
            table.shape()[axis],
            ids.shape(),
            id_vals.iter().copied(),
        )?;
        if dt.is_quantized() {
            return gather_blocks(axis, table, ids.shape(), &id_vals, &out_shape);
        }
        // Elements are decoded as read: an embedding table is far larger
        // than the rows a batch reads.
        let st = strides(table.shape());
        let ist = strides(ids.shape());
        let m = ids.shape().len();
        let mut src = vec![0usize; table.shape().len()];
        tabulate("gather", dt, &out_shape, |o| {
            src[..axis].copy_from_slice(&o[..axis]);
            src[axis + 1..].copy_from_slice(&o[axis + m..]);
            // In range: checked by `gather_ids` above.
            src[axis] = id_vals[ravel(&o[axis..axis + m], &ist)] as usize;
            table
                .get(ravel(&src, &st))
                .ok_or_else(|| malformed("gather", "read past the table".into()))
        })
    }

    /// Gather from a block-quantized table (Section 2 §18): the axis is not
    /// the block axis (the rule's), so every output row along the last
    /// axis is one whole row of the table's blocks, copied as bytes. The
    /// ids are in range (checked by the caller through `gather_ids`).
    fn gather_blocks(
        axis: usize,
        table: &Tensor,
        ids_shape: &[usize],
        id_vals: &[i64],
        out_shape: &[usize],
    ) -> Result<Tensor> {
        let dt = table.dtype();
        let tshape = table.shape();
        let (k, out_rank) = (tshape[tshape.len() - 1], out_shape.len());
        let row_bytes = tc_core::size::bytes(dt, k)?;
        let row_shape = &out_shape[..out_rank - 1];
        let rows = tc_core::size::numel(row_shape)?;
        let st = strides(&tshape[..tshape.len() - 1]);
        let ist = strides(ids_shape);
        let m = ids_shape.len();
        let bytes = table.bytes();
        let mut o = vec![0usize; row_shape.len()];
        let mut src = vec![0usize; tshape.len() - 1];
        let total = tc_core::size::bytes(dt, tc_core::size::numel(out_shape)?)?;
        let mut out = crate::alloc::with_capacity::<u8>(total)?;
        for r in 0..rows {
            unravel(r, row_shape, &mut o);
            src[..axis].copy_from_slice(&o[..axis]);
            src[axis + 1..].copy_from_slice(&o[axis + m..]);
            src[axis] = id_vals[ravel(&o[axis..axis + m], &ist)] as usize;
            let at = ravel(&src, &st) * row_bytes;
            let row = bytes
                .get(at..at + row_bytes)
                .ok_or_else(|| malformed("gather", "read past the table".into()))?;
            out.extend_from_slice(row);
        }
        Tensor::from_raw(dt, out_shape, out)
    }

    /// §8a top-k: each lane along `axis` ordered by argmax's order (NaN
    /// above every number, −0 = +0, ties keep the lower index: a stable
    /// sort on "strictly better"), its first `k` values or their indices.
    /// The JIT's kernel (`tc-llvm/src/codegen/topk.rs`) selects the same
    /// prefix with a heap: (value by that order, index) is a total order.
    pub fn topk(k: usize, axis: usize, indices: bool, x: &Tensor) -> Result<Tensor> {
        let (dt, out_shape) = rule::topk(k, axis, indices, opd(x))?;
        let shape = x.shape();
        let n = shape[axis];
        let xs = x.try_to_elems()?;
        let st = strides(shape);
        let mut src = vec![0usize; shape.len()];
        // One stable sort per lane, done when the lane is first reached.
        let lane_shape: Vec<usize> = (0..shape.len())
            .filter(|&i| i != axis)
            .map(|i| shape[i])
            .collect();
        let lst = strides(&lane_shape);
        let lanes = if n == 0 { 0 } else { xs.len() / n };
        let mut orders: Vec<Option<Vec<usize>>> = vec![None; lanes];
        tabulate("topk", dt, &out_shape, |o| {
            src.copy_from_slice(o);
            src[axis] = 0;
            // The lane's index: `o` without `axis`, raveled (no allocation
            // per element: the JIT runs this function as its host step).
            let id: usize = (0..o.len())
                .filter(|&i| i != axis)
                .zip(&lst)
                .map(|(i, s)| o[i] * s)
                .sum();
            let base = ravel(&src, &st);
            let step = st[axis];
            let order = orders
                .get_mut(id)
                .ok_or_else(|| malformed("topk", "lane out of range".into()))?
                .get_or_insert_with(|| {
                    let at = |d: usize| xs[base + d * step];
                    let mut lane: Vec<usize> = (0..n).collect();
                    lane.sort_by(|&a, &b| {
                        if arg_better(true, at(a), at(b)) {
                            std::cmp::Ordering::Less
                        } else if arg_better(true, at(b), at(a)) {
                            std::cmp::Ordering::Greater
                        } else {
                            std::cmp::Ordering::Equal
                        }
                    });
                    lane
                });
            let d = order[o[axis]];
            Ok(if indices {
                Elem::I(d as i64)
            } else {
                xs[base + d * step]
            })
        })
    }

    /// §8b cumsum: element j of a lane is the `sum` reduction (§5.5) of
    /// the lane's elements 0..=j, accumulated in order: f32 for floats
    /// (then rounded to `dt`, a NaN made canonical), wrapping i64 for ints
    /// (then wrapped to `dt`). The JIT runs this same function (a host
    /// step).
    pub fn cumsum(axis: usize, x: &Tensor) -> Result<Tensor> {
        let (dt, shape) = rule::cumsum(axis, opd(x))?;
        let xs = x.try_to_elems()?;
        let st = strides(&shape);
        let step = st[axis];
        let n = shape[axis];
        let mut out = xs.clone();
        // Every lane start: index 0 along `axis`.
        for base in 0..xs.len() {
            if (base / step) % n.max(1) != 0 {
                continue;
            }
            let (mut f, mut i) = (0f32, 0i64);
            for j in 0..n {
                let at = base + j * step;
                out[at] = match xs[at] {
                    Elem::F(v) => {
                        f += v;
                        fl(dt, reduced_nan(f))
                    }
                    Elem::I(v) => {
                        i = i.wrapping_add(v);
                        int(dt, i)
                    }
                    e => e,
                };
            }
        }
        Tensor::from_values(dt, &shape, &out)
    }

    /// §12b pad: `value` at the `before` leading and `after` trailing
    /// positions of `axis`, the operand's element shifted by `before`
    /// elsewhere (a copy: data movement).
    pub fn pad(
        axis: usize,
        (before, after): (i64, i64),
        value: Elem,
        x: &Tensor,
    ) -> Result<Tensor> {
        let (dt, out_shape) = rule::pad(axis, before, after, opd(x))?;
        let xs = x.try_to_elems()?;
        let st = strides(x.shape());
        let d = x.shape()[axis];
        // 0 ≤ before (the rule).
        let before = before as usize;
        let mut src = vec![0usize; out_shape.len()];
        tabulate("pad", dt, &out_shape, |o| {
            let j = o[axis];
            if j < before || j - before >= d {
                return Ok(value);
            }
            src.copy_from_slice(o);
            src[axis] = j - before;
            Ok(xs[ravel(&src, &st)])
        })
    }

    /// §12c conv: `λ [n, o, p…]. Σ_{c, k…} xpad[n, g·Cg + c, p·stride +
    /// k·dilation] · w[o, c, k…]` with `g = o / (O / groups)`, `Cg` the
    /// weights' dim 1 and `xpad` the input with `padding` zeros on each
    /// side; the terms in row-major order of `(c, k…)` (the matmul's
    /// accumulation: f32 for floats, then one rounding, the canonical NaN;
    /// wrapping i64 for ints).
    pub fn conv(window: &Window, groups: usize, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let (dt, out_shape) = rule::conv(window, groups, opd(x), opd(w))?;
        let r = window.rank();
        let (sx, sw) = (x.shape(), w.shape());
        let (xs, ws) = (x.try_to_elems()?, w.try_to_elems()?);
        let (stx, stw) = (strides(sx), strides(sw));
        let (cg, og) = (sw[1], sw[0] / groups);
        let kshape = &sw[2..];
        // An index extent, not a size: the loop runs only for an element of
        // a non-empty output with `Cg ≥ 1`, where it is within the weights.
        let taps = tc_core::size::extent(kshape);
        let zero = if dt.is_float() {
            Elem::F(0.0)
        } else {
            Elem::I(0)
        };
        let (mut xi, mut wi, mut k) = (vec![0; r + 2], vec![0; r + 2], vec![0; r]);
        tabulate("conv", dt, &out_shape, |o| {
            // `og ≥ 1` here: an output element exists, so `O ≥ 1`.
            let g = o[1] / og;
            let (mut facc, mut iacc) = (0f32, 0i64);
            for c in 0..cg {
                for t in 0..taps {
                    unravel(t, kshape, &mut k);
                    let inside = (0..r).all(|a| {
                        rule::window_tap(window, a, o[2 + a], k[a], sx[2 + a])
                            .map(|i| xi[2 + a] = i)
                            .is_some()
                    });
                    (xi[0], xi[1]) = (o[0], g * cg + c);
                    (wi[0], wi[1]) = (o[1], c);
                    wi[2..].copy_from_slice(&k);
                    let xe = if inside { xs[ravel(&xi, &stx)] } else { zero };
                    match (xe, ws[ravel(&wi, &stw)]) {
                        (Elem::F(a), Elem::F(b)) => facc += a * b,
                        (Elem::I(a), Elem::I(b)) => iacc = iacc.wrapping_add(a.wrapping_mul(b)),
                        (a, b) => return Err(malformed("conv", format!("elements {a:?}, {b:?}"))),
                    }
                }
            }
            Ok(if dt.is_float() {
                fl(dt, reduced_nan(facc))
            } else {
                int(dt, iacc)
            })
        })
    }

    /// §12d pooling over the last `kernel.len()` axes: per output element,
    /// its window's taps in row-major order. Max: `reduce.max`'s IEEE
    /// `maximum` over the taps inside the input (the rule keeps at least
    /// one in every window). Avg: the f32 sum over the zero-padded input
    /// divided by the kernel's volume, then one rounding (`reduce.mean`'s
    /// arithmetic).
    pub fn pool(kind: PoolKind, kernel: &[usize], window: &Window, x: &Tensor) -> Result<Tensor> {
        let (dt, out_shape) = rule::pool(kind, kernel, window, opd(x))?;
        let r = kernel.len();
        let sx = x.shape();
        let lead = sx.len() - r;
        let xs = x.try_to_elems()?;
        let stx = strides(sx);
        // An index extent (the loop runs only for an output element).
        let taps = tc_core::size::extent(kernel);
        let (mut xi, mut k) = (vec![0; sx.len()], vec![0; r]);
        tabulate("pool", dt, &out_shape, |o| {
            xi[..lead].copy_from_slice(&o[..lead]);
            let mut best: Option<Elem> = None;
            let mut fsum = 0f32;
            for t in 0..taps {
                unravel(t, kernel, &mut k);
                let inside = (0..r).all(|a| {
                    rule::window_tap(window, a, o[lead + a], k[a], sx[lead + a])
                        .map(|i| xi[lead + a] = i)
                        .is_some()
                });
                let e = if inside {
                    xs[ravel(&xi, &stx)]
                } else {
                    Elem::F(0.0)
                };
                match kind {
                    PoolKind::Avg => match e {
                        Elem::F(v) => fsum += v,
                        e => return Err(malformed("avg_pool", format!("element {e:?}"))),
                    },
                    PoolKind::Max if inside => {
                        best = Some(match best {
                            None => e,
                            Some(b) => extremum(ReduceOp::Max, dt, b, e)?,
                        })
                    }
                    PoolKind::Max => {}
                }
            }
            match (kind, best) {
                (PoolKind::Avg, _) => Ok(fl(dt, reduced_nan(fsum / taps as f32))),
                (PoolKind::Max, Some(Elem::F(b))) => Ok(Elem::F(reduced_nan(b))),
                (PoolKind::Max, Some(e)) => Ok(e),
                (PoolKind::Max, None) => Err(malformed(
                    "max_pool",
                    "a window with no input element".into(),
                )),
            }
        })
    }

    /// A tensor of one repeated value (already in `dt`'s value set).
    pub fn fill(dt: Dtype, shape: &[usize], v: Elem) -> Result<Tensor> {
        let (dt, shape) = rule::fill(dt, shape)?;
        tabulate("fill", dt, &shape, |_| Ok(v))
    }

    /// `iota`: each element is its index along `axis`, converted to `dt`.
    pub fn iota(dt: Dtype, shape: &[usize], axis: usize) -> Result<Tensor> {
        let (dt, shape) = rule::iota(dt, shape, axis)?;
        tabulate("iota", dt, &shape, |i| {
            Ok(cast::convert(Elem::I(i[axis] as i64), dt))
        })
    }
}
