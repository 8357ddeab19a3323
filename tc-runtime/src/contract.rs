//! The runtime contract of a tensor fn: binding σ from concrete arguments and
//! re-checking everything the checker assumed.
//!
//! At a call, the signature `∀ ᾱ. requires P. T₁ → … → Tₙ → U` (Section 2 §17)
//! meets concrete arguments. [`bind`] computes the substitution σ of Section 4
//! §2.2 from the arguments' shapes and checks, in this order:
//!
//! 1. arity;
//! 2. for each parameter in order: kind (tensor, scalar or dim), dtype, rank,
//!    then each dimension (a dim parameter's one dim, Section 1 §6 site 1,
//!    is one more dimension): a bare variable not yet bound binds σ (module
//!    constants are pre-bound), an already-bound variable or a constant is
//!    compared; compound dims (`S - K + 1`, `D / H`) are deferred;
//! 2b. each variable that only compound dims determine, solved from a
//!    deferred dim invertible in it (Section 2 §18: `4 * F`, `F + 2`,
//!    `K / 32`): the division must be exact and the value at least the
//!    variable's least size, else [`Error::Infer`];
//! 3. every deferred compound dim, evaluated under the now complete σ (so
//!    `x: [S], y: [S - K + 1]` works whatever the parameter order);
//! 4. every tensor refinement, every `requires`, and every axiom under σ
//!    (Section 2 §14: axioms are assumed statically and MUST be checked here).
//!
//! The default `α ≥ 1` (Section 2 §16) is enforced when a variable is bound:
//! binding 0 to a variable that does not opt into `α ≥ 0` is an error.
//!
//! Every failure is a typed [`Error`] naming the parameter, the axis, the
//! expected and actual values and σ (formatted `B = 2, S = 5` by
//! [`format_sigma`]). Nothing here panics on any input.

use std::collections::BTreeSet;

use tc_core::concrete::RuleError;
use tc_core::ctx::zero_opt_ins;
use tc_core::invert;
use tc_core::ir::Signature;
use tc_core::{Dim, Dtype, Pred, Sigma, TensorType, Type};

use crate::cast;
use crate::elem::Elem;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// One concrete argument of a tensor fn call.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A tensor, for a `Tensor[…]` parameter.
    Tensor(Tensor),
    /// A scalar, for a `Scalar[dt]` parameter. A float element is accepted for
    /// any float dtype (and rounded to it), an integer for any int dtype (it
    /// must lie in the dtype's range), a bool for `bool`.
    Scalar(Elem),
    /// A size, for a dim parameter `Dim![d]` (Section 1 §6 site 1): it binds
    /// `d` exactly as one dim of a tensor argument does. It has no buffer.
    Dim(usize),
}

impl Arg {
    /// "tensor" or "scalar", for [`Error::Kind`].
    pub fn kind_name(&self) -> &'static str {
        match self {
            Arg::Tensor(_) => "tensor",
            Arg::Scalar(_) => "scalar",
            Arg::Dim(_) => "dim",
        }
    }
}

/// What the contract reads of an argument before its values: its kind and,
/// for a tensor, its dtype and shape; a dim's size. [`bind_shapes`] binds σ
/// from these alone (the JIT checks a callee's contract this way when it
/// plans to inline the call, with no tensor at hand).
#[derive(Clone, Copy, Debug)]
pub enum ArgShape<'a> {
    /// A tensor of this dtype and shape.
    Tensor(Dtype, &'a [usize]),
    /// A scalar (its value is not read).
    Scalar,
    /// A size for a dim parameter.
    Dim(usize),
}

impl ArgShape<'_> {
    /// "tensor", "scalar" or "dim", for [`Error::Kind`].
    pub fn kind_name(&self) -> &'static str {
        match self {
            ArgShape::Tensor(..) => "tensor",
            ArgShape::Scalar => "scalar",
            ArgShape::Dim(_) => "dim",
        }
    }

    /// The size it gives its parameter's dim number `i`.
    fn dim(&self, i: usize) -> Option<usize> {
        match self {
            ArgShape::Tensor(_, s) => s.get(i).copied(),
            ArgShape::Dim(n) => (i == 0).then_some(*n),
            ArgShape::Scalar => None,
        }
    }
}

impl Arg {
    /// The argument as [`bind_shapes`] reads it.
    pub fn shape(&self) -> ArgShape<'_> {
        match self {
            Arg::Tensor(t) => ArgShape::Tensor(t.dtype(), t.shape()),
            Arg::Scalar(_) => ArgShape::Scalar,
            Arg::Dim(n) => ArgShape::Dim(*n),
        }
    }
}

impl From<Tensor> for Arg {
    fn from(t: Tensor) -> Arg {
        Arg::Tensor(t)
    }
}

impl From<&Tensor> for Arg {
    fn from(t: &Tensor) -> Arg {
        Arg::Tensor(t.clone())
    }
}

impl From<Elem> for Arg {
    fn from(e: Elem) -> Arg {
        Arg::Scalar(e)
    }
}

impl From<f32> for Arg {
    fn from(x: f32) -> Arg {
        Arg::Scalar(Elem::F(x))
    }
}

impl From<i64> for Arg {
    fn from(x: i64) -> Arg {
        Arg::Scalar(Elem::I(x))
    }
}

impl From<i32> for Arg {
    fn from(x: i32) -> Arg {
        Arg::Scalar(Elem::I(x as i64))
    }
}

impl From<bool> for Arg {
    fn from(x: bool) -> Arg {
        Arg::Scalar(Elem::B(x))
    }
}

/// A tensor fn's arguments as its expansion passes them: each parameter's
/// value, in order, in a tuple (nested for long lists). The expansion
/// moves its parameters into the tuple and makes one call, so the code
/// rustc generates for each tensor fn is that call and nothing to clean up
/// on unwinding; the conversions live in these impls, instantiated once
/// per parameter-type list (the build cost, issue #48).
pub trait IntoArgs {
    /// How many arguments [`IntoArgs::push_args`] pushes.
    const COUNT: usize;
    /// Push the arguments in parameter order.
    fn push_args(self, out: &mut Vec<Arg>);
}

impl IntoArgs for Arg {
    const COUNT: usize = 1;
    fn push_args(self, out: &mut Vec<Arg>) {
        out.push(self);
    }
}

/// Values that are one argument, converted as `Arg::from` does; `usize`
/// is a dim parameter's size (`Dim![…]` is `usize`), the narrow integers
/// are scalars widened to `i64`.
macro_rules! one_arg {
    ($($t:ty => |$x:ident| $e:expr;)*) => {$(
        impl IntoArgs for $t {
            const COUNT: usize = 1;
            fn push_args(self, out: &mut Vec<Arg>) {
                let $x = self;
                out.push($e);
            }
        }
    )*};
}

one_arg! {
    Tensor => |t| Arg::Tensor(t);
    &Tensor => |t| Arg::Tensor(t.clone());
    f32 => |x| Arg::Scalar(Elem::F(x));
    i64 => |x| Arg::Scalar(Elem::I(x));
    i32 => |x| Arg::Scalar(Elem::I(i64::from(x)));
    i16 => |x| Arg::Scalar(Elem::I(i64::from(x)));
    i8 => |x| Arg::Scalar(Elem::I(i64::from(x)));
    bool => |x| Arg::Scalar(Elem::B(x));
    usize => |n| Arg::Dim(n);
}

macro_rules! tuple_args {
    ($($t:ident)*) => {
        impl<$($t: IntoArgs),*> IntoArgs for ($($t,)*) {
            const COUNT: usize = 0 $(+ $t::COUNT)*;
            #[allow(non_snake_case, unused_variables)]
            fn push_args(self, out: &mut Vec<Arg>) {
                let ($($t,)*) = self;
                $($t.push_args(out);)*
            }
        }
    };
}

tuple_args!();
tuple_args!(A);
tuple_args!(A B);
tuple_args!(A B C);
tuple_args!(A B C D);
tuple_args!(A B C D E);
tuple_args!(A B C D E F);
tuple_args!(A B C D E F G);
tuple_args!(A B C D E F G H);
// (tc-macros' `TUPLE_ARGS` nests longer lists in tuples of at most 8.)

/// `args` as a list.
pub fn into_args<A: IntoArgs>(args: A) -> Vec<Arg> {
    let mut out = Vec::with_capacity(A::COUNT);
    args.push_args(&mut out);
    out
}

/// Format σ as `B = 2, S = 5`: the signature's (non-fresh) variables in
/// declaration order, then any other bound names (local dim bindings) in
/// name order. Module constants are left out (they never vary). The empty
/// substitution prints as `∅`.
pub fn format_sigma(sig: &Signature, sigma: &Sigma) -> String {
    let mut parts = Vec::new();
    let mut seen = BTreeSet::new();
    for v in &sig.vars {
        seen.insert(v.name.as_str());
        if v.fresh {
            continue;
        }
        if let Some(x) = sigma.get(&v.name) {
            parts.push(format!("{} = {x}", v.name));
        }
    }
    for (name, x) in sigma {
        if seen.contains(name.as_str()) || sig.consts.iter().any(|(c, _)| c == name) {
            continue;
        }
        if name.contains('#') {
            continue; // fresh (Section 2 §13), never shown
        }
        parts.push(format!("{name} = {x}"));
    }
    if parts.is_empty() {
        "∅".to_string()
    } else {
        parts.join(", ")
    }
}

/// The dtype an [`Elem`] naturally carries (for [`Error::Dtype`] on scalars).
fn natural_dtype(e: &Elem) -> Dtype {
    match e {
        Elem::F(_) => Dtype::F32,
        Elem::I(_) => Dtype::I64,
        Elem::B(_) => Dtype::Bool,
    }
}

/// Check a scalar argument against `Scalar[dt]` and convert it into `dt`'s
/// value set: floats are rounded to the dtype (Section 2 §5 float → float),
/// integers must already be in range (no silent wrap of an argument).
pub fn scalar_value(param: &str, dt: Dtype, e: Elem) -> Result<Elem> {
    let class_ok = match e {
        Elem::F(_) => dt.is_float(),
        Elem::I(_) => dt.is_int(),
        Elem::B(_) => dt.is_bool(),
    };
    if !class_ok {
        return Err(Error::Dtype {
            param: param.to_string(),
            expected: dt,
            found: natural_dtype(&e),
        });
    }
    match e {
        Elem::I(x) => {
            let (lo, hi) = dt.int_range().unwrap_or((i64::MIN, i64::MAX));
            if x < lo || x > hi {
                return Err(Error::ScalarValue {
                    param: param.to_string(),
                    dtype: dt,
                    value: x.to_string(),
                });
            }
            Ok(Elem::I(x))
        }
        Elem::F(x) => Ok(cast::convert(Elem::F(x), dt)),
        b => Ok(b),
    }
}

/// The variables that admit 0: those marked `allow_zero`, plus those whose
/// refinements or `requires` state `α ≥ 0` (Section 2 §16; placement is syntax
/// only, Section 2 §15).
fn zero_ok(sig: &Signature) -> BTreeSet<String> {
    let mut preds: Vec<Pred> = sig.requires.iter().map(|r| r.node.clone()).collect();
    for p in &sig.params {
        if let Type::Tensor(t) = &p.ty {
            preds.extend(t.refs.iter().cloned());
        }
    }
    let mut out = zero_opt_ins(&preds);
    out.extend(
        sig.vars
            .iter()
            .filter(|v| v.allow_zero)
            .map(|v| v.name.clone()),
    );
    out
}

/// What [`bind_args`] produces: σ and the argument values converted into
/// their parameters' value sets.
#[derive(Clone, Debug)]
pub struct Bound {
    /// The substitution (module constants included).
    pub sigma: Sigma,
    /// One entry per parameter: `Some((value, dtype))` for a scalar parameter.
    pub scalars: Vec<Option<(Elem, Dtype)>>,
}

/// Bind σ from the arguments and check the whole contract (see the module
/// docs for the order). Returns σ, module constants included.
pub fn bind(sig: &Signature, args: &[Arg]) -> Result<Sigma> {
    bind_args(sig, args).map(|b| b.sigma)
}

/// [`bind`], also returning each scalar argument converted to its declared dtype.
pub fn bind_args(sig: &Signature, args: &[Arg]) -> Result<Bound> {
    let shapes: Vec<ArgShape<'_>> = args.iter().map(Arg::shape).collect();
    let mut scalars = vec![None; args.len()];
    let sigma = bind_with(sig, &shapes, &mut |pi, dt| {
        if let (Some(p), Some(Arg::Scalar(e))) = (sig.params.get(pi), args.get(pi)) {
            scalars[pi] = Some((scalar_value(&p.name, dt, *e)?, dt));
        }
        Ok(())
    })?;
    Ok(Bound { sigma, scalars })
}

/// [`bind`] from the arguments' kinds, dtypes and shapes alone: the same
/// checks in the same order, except that scalar values are not converted
/// (a scalar argument is only checked to be a scalar).
pub fn bind_shapes(sig: &Signature, args: &[ArgShape<'_>]) -> Result<Sigma> {
    bind_with(sig, args, &mut |_, _| Ok(()))
}

/// The contract's three passes; `scalar(param, dtype)` is called in pass 1
/// for each scalar parameter, in parameter order.
fn bind_with(
    sig: &Signature,
    args: &[ArgShape<'_>],
    scalar: &mut dyn FnMut(usize, Dtype) -> Result<()>,
) -> Result<Sigma> {
    if args.len() != sig.params.len() {
        return Err(Error::Arity {
            func: sig.name.clone(),
            expected: sig.params.len(),
            found: args.len(),
        });
    }
    let mut sigma: Sigma = sig.consts.iter().cloned().collect();
    // Only a zero extent consults it (Section 2 §16): computed then, not on
    // every call (it clones every predicate of the signature).
    let zero_set = std::cell::OnceCell::new();
    let zero_ok = |v: &str| zero_set.get_or_init(|| zero_ok(sig)).contains(v);
    // (param index, axis) of compound dims, checked once every bare variable is bound.
    let mut deferred: Vec<(usize, usize)> = Vec::new();

    // Pass 1: kind, dtype, rank, bare variables and constants (Section 2 §17).
    for (pi, (p, a)) in sig.params.iter().zip(args).enumerate() {
        match (&p.ty, a) {
            (Type::Tensor(tt), ArgShape::Tensor(dt, shape)) => {
                let site = |axis, dim| Site {
                    sig,
                    param: &p.name,
                    axis: Some(axis),
                    dim,
                };
                for axis in bind_tensor(&p.name, tt, (*dt, shape), &mut sigma, &zero_ok, &site)? {
                    deferred.push((pi, axis));
                }
            }
            (Type::Dim(d), ArgShape::Dim(n)) => {
                let site = Site {
                    sig,
                    param: &p.name,
                    axis: None,
                    dim: d,
                };
                if !bind_dim(&site, &mut sigma, &zero_ok, *n)? {
                    deferred.push((pi, 0));
                }
            }
            (Type::Scalar(dt), ArgShape::Scalar) => scalar(pi, *dt)?,
            (ty, a) => {
                return Err(Error::Kind {
                    param: p.name.clone(),
                    expected: ty.kind_name().to_string(),
                    found: a.kind_name().to_string(),
                });
            }
        }
    }
    // Pass 1b: variables only compound dims determine (Section 2 §18).
    infer_compound(sig, args, &deferred, &mut sigma, &zero_ok)?;
    // Pass 2: compound dims under the complete σ.
    for (pi, axis) in deferred {
        check_compound(sig, &sigma, args, pi, axis)?;
    }
    // Pass 3: refinements, requires, axioms (Section 2 §14, §15).
    check_refinements(sig, &sigma)?;
    Ok(sigma)
}

/// Pass 1 for a tensor argument: dtype, rank, and each bare variable or
/// constant dim bound or checked; the axes of compound dims, for pass 2.
fn bind_tensor<'a>(
    param: &str,
    tt: &'a TensorType,
    (dtype, shape): (Dtype, &[usize]),
    sigma: &mut Sigma,
    zero_ok: &dyn Fn(&str) -> bool,
    site: &dyn Fn(usize, &'a Dim) -> Site<'a>,
) -> Result<Vec<usize>> {
    if dtype != tt.dtype {
        return Err(Error::Dtype {
            param: param.to_string(),
            expected: tt.dtype,
            found: dtype,
        });
    }
    if shape.len() != tt.shape.len() {
        return Err(Error::Rank {
            param: param.to_string(),
            expected: tt.shape.len(),
            found: shape.len(),
            shape: shape.to_vec(),
        });
    }
    let mut deferred = Vec::new();
    for (axis, (d, &actual)) in tt.shape.iter().zip(shape).enumerate() {
        if !bind_dim(&site(axis, d), sigma, zero_ok, actual)? {
            deferred.push(axis);
        }
    }
    Ok(deferred)
}

/// Pass 1b (Section 2 §18, last bullet): a variable no bare dim bound is
/// solved from a deferred compound dim invertible in it once that dim's
/// other variables are bound (`4 * F` at 32 gives `F = 8`), until nothing
/// changes. Pass 2 then re-checks every compound dim, these included. A dim
/// that cannot be inverted is left alone: pass 2 reports its variable unbound.
fn infer_compound(
    sig: &Signature,
    args: &[ArgShape<'_>],
    deferred: &[(usize, usize)],
    sigma: &mut Sigma,
    zero_ok: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let mut progress = true;
    while progress {
        progress = false;
        for &(pi, axis) in deferred {
            let p = &sig.params[pi];
            let (Some(d), Some(actual)) = (p.ty.param_dims().get(axis), args[pi].dim(axis)) else {
                continue;
            };
            let open: Vec<String> = d
                .vars()
                .into_iter()
                .filter(|v| !sigma.contains_key(v))
                .collect();
            let [var] = open.as_slice() else { continue };
            let site = Site {
                sig,
                param: &p.name,
                axis: Some(axis).filter(|_| matches!(p.ty, Type::Tensor(_))),
                dim: d,
            };
            if let Some(val) = invert_dim(&site, var, actual, sigma, zero_ok)? {
                sigma.insert(var.clone(), val);
                progress = true;
            }
        }
    }
    Ok(())
}

/// The value of `var` that makes `site`'s dim equal `actual`: exact
/// division, checked arithmetic, and the least size of Section 2 §16
/// (`var ≥ 1` unless opted into `≥ 0`). `None` when the dim is not
/// invertible in `var` (formation refuses such a signature; one built
/// unchecked fails in pass 2 instead).
fn invert_dim(
    site: &Site,
    var: &str,
    actual: usize,
    sigma: &Sigma,
    zero_ok: &dyn Fn(&str) -> bool,
) -> Result<Option<i64>> {
    let fail = |why: String| Error::Infer {
        param: site.param.to_string(),
        axis: site.axis,
        dim: site.dim.to_string(),
        var: var.to_string(),
        found: actual,
        why,
        sigma: format_sigma(site.sig, sigma),
    };
    let n = i64::try_from(actual).map_err(|_| fail("the size does not fit in an i64".into()))?;
    let val = match invert::solve_value(site.dim, var, n, sigma) {
        Ok(v) => v,
        Err(invert::InvertError::NotInvertible(_)) => return Ok(None),
        Err(e) => return Err(fail(e.to_string())),
    };
    let min = if zero_ok(var) { 0 } else { 1 };
    if val < min {
        return Err(fail(format!(
            "it gives `{var}` = {val}, below the least size `{var} >= {min}` (Section 2 §16)"
        )));
    }
    Ok(Some(val))
}

/// Pass 2: a compound dim (`2 * W`, `D / H`) against the argument's size.
fn check_compound(
    sig: &Signature,
    sigma: &Sigma,
    args: &[ArgShape<'_>],
    pi: usize,
    axis: usize,
) -> Result<()> {
    let p = &sig.params[pi];
    let (Some(d), Some(actual)) = (p.ty.param_dims().get(axis), args[pi].dim(axis)) else {
        return Ok(());
    };
    let site = Site {
        sig,
        param: &p.name,
        axis: Some(axis).filter(|_| matches!(p.ty, Type::Tensor(_))),
        dim: d,
    };
    let context = || match site.axis {
        Some(axis) => format!("parameter `{}`, dimension {axis} (`{d}`)", p.name),
        None => format!("parameter `{}` (`Dim![{d}]`)", p.name),
    };
    let expected = d.eval(sigma).map_err(|source| {
        Error::Rule(RuleError::Eval {
            context: context(),
            source,
        })
    })?;
    if expected < 0 {
        return Err(Error::Rule(RuleError::NegativeDim {
            context: context(),
            dim: d.to_string(),
            value: expected,
        }));
    }
    if expected as u64 != actual as u64 {
        return Err(site.mismatch(sigma, expected, actual));
    }
    Ok(())
}

/// Pass 3: parameter refinements, `requires` and axioms under σ.
fn check_refinements(sig: &Signature, sigma: &Sigma) -> Result<()> {
    for p in &sig.params {
        if let Type::Tensor(tt) = &p.ty {
            for r in &tt.refs {
                check_pred(
                    sig,
                    sigma,
                    r,
                    &format!("refinement of parameter `{}`", p.name),
                )?;
            }
        }
    }
    for r in &sig.requires {
        check_pred(sig, sigma, &r.node, "requires")?;
    }
    for a in &sig.axioms {
        check_pred(sig, sigma, &a.node, "axiom")?;
    }
    Ok(())
}

/// One dim of a parameter, for binding and for the error naming it.
struct Site<'a> {
    sig: &'a Signature,
    param: &'a str,
    /// The tensor axis; `None` for a dim parameter.
    axis: Option<usize>,
    dim: &'a Dim,
}

impl Site<'_> {
    fn mismatch(&self, sigma: &Sigma, expected: i64, found: usize) -> Error {
        let (param, dim, sigma) = (
            self.param.to_string(),
            self.dim.to_string(),
            format_sigma(self.sig, sigma),
        );
        match self.axis {
            Some(axis) => Error::Dim {
                param,
                axis,
                dim,
                expected,
                found,
                sigma,
            },
            None => Error::DimArg {
                param,
                dim,
                expected,
                found,
                sigma,
            },
        }
    }

    /// `found` is outside the sizes a variable admits: 0 without the `α ≥ 0`
    /// opt-in, or beyond the dim range.
    fn range(&self, sigma: &Sigma, min: i64, found: usize) -> Error {
        let (param, dim, sigma) = (
            self.param.to_string(),
            self.dim.to_string(),
            format_sigma(self.sig, sigma),
        );
        match (self.axis, found) {
            (Some(axis), 0) => Error::ZeroDim {
                param,
                axis,
                var: dim,
                sigma,
            },
            (Some(_), _) => Error::op("bind", format!("dimension {found} does not fit in an i64")),
            (None, _) => Error::DimArgRange {
                param,
                dim,
                min,
                max: i64::MAX,
                found,
                sigma,
            },
        }
    }
}

/// Pass 1 for one dim (Section 2 §17 unification at run time): a bare
/// variable not yet bound binds σ (after the `α ≥ 1` default and the dim
/// range), a bound variable or a constant is compared. Returns `false` for a
/// compound dim, which pass 2 checks under the complete σ.
fn bind_dim(
    site: &Site,
    sigma: &mut Sigma,
    zero_ok: &dyn Fn(&str) -> bool,
    actual: usize,
) -> Result<bool> {
    let d = site.dim;
    let expected = match (d.as_var(), d.as_const()) {
        (Some(v), _) => match sigma.get(v) {
            Some(&e) => e,
            None => {
                // Section 2 §16: the default α ≥ 1.
                // Whether `v` may be 0 (`zero_ok`), asked only for an
                // extent of 0 or one out of range.
                let min = || if zero_ok(v) { 0 } else { 1 };
                let Ok(val) = i64::try_from(actual) else {
                    return Err(site.range(sigma, min(), actual));
                };
                if val < 1 && val < min() {
                    return Err(site.range(sigma, min(), actual));
                }
                sigma.insert(v.to_string(), val);
                return Ok(true);
            }
        },
        (None, Some(c)) => c,
        (None, None) => return Ok(false),
    };
    if expected < 0 || expected as u64 != actual as u64 {
        return Err(site.mismatch(sigma, expected, actual));
    }
    Ok(true)
}

/// Evaluate one predicate under σ: false → [`Error::Predicate`], not
/// evaluable → [`RuleError::Eval`].
fn check_pred(sig: &Signature, sigma: &Sigma, p: &Pred, kind: &str) -> Result<()> {
    match p.eval(sigma) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Predicate {
            kind: kind.to_string(),
            pred: p.to_string(),
            sigma: format_sigma(sig, sigma),
        }),
        Err(source) => Err(Error::Rule(RuleError::Eval {
            context: format!("{kind} `{p}`"),
            source,
        })),
    }
}
