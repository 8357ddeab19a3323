//! Subtyping (Section 3 §3–§5) and shape equality (Section 2 §2).

use crate::ctx::Ctx;
use crate::diag::Counterexample;
use crate::dim::Dim;
use crate::dtype::Dtype;
use crate::pred::Pred;
use crate::solver::{self, Entailment};
use crate::types::{TensorType, Type};

/// Why `T₁ <: T₂` does not hold, most specific first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubtypeError {
    /// Different kinds (tensor vs scalar vs function): Section 3 §5 step 1.
    Kind {
        /// Kind of T₁.
        found: &'static str,
        /// Kind of T₂.
        expected: &'static str,
    },
    /// Dtypes differ: invariant (Section 3 §3.3, §9).
    Dtype {
        /// T₁'s dtype.
        found: Dtype,
        /// T₂'s dtype.
        expected: Dtype,
    },
    /// Ranks differ: invariant (Section 3 §8.5).
    Rank {
        /// T₁'s rank.
        found: usize,
        /// T₂'s rank.
        expected: usize,
    },
    /// A dimension cannot be proven equal (Section 2 §2).
    Dim {
        /// The axis.
        axis: usize,
        /// T₁'s dim.
        found: Dim,
        /// T₂'s dim.
        expected: Dim,
        /// Where it fails.
        cex: Counterexample,
    },
    /// A refinement of T₂ is not implied by Γ and T₁'s refinements.
    Refinement {
        /// The predicate of T₂ that fails.
        pred: Pred,
        /// Where it fails.
        cex: Counterexample,
    },
    /// Function arities differ.
    Arity {
        /// T₁'s arity.
        found: usize,
        /// T₂'s arity.
        expected: usize,
    },
    /// Inside a function type: parameter `index` (contravariant) or the result.
    InFn {
        /// `Some(i)` for parameter i, `None` for the result.
        param: Option<usize>,
        /// The nested failure.
        inner: Box<SubtypeError>,
    },
    /// The solver ran out of budget on this obligation.
    Unknown {
        /// The obligation.
        goal: Pred,
    },
}

/// `Γ ⊢ s₁ ≡ s₂` (Section 2 §2): rank, then each dim, short-circuiting on
/// syntactic equality. Returns the first failing axis.
pub fn shapes_equal(ctx: &Ctx, s1: &[Dim], s2: &[Dim]) -> Result<(), SubtypeError> {
    if s1.len() != s2.len() {
        return Err(SubtypeError::Rank {
            found: s1.len(),
            expected: s2.len(),
        });
    }
    for (axis, (a, b)) in s1.iter().zip(s2).enumerate() {
        dims_equal(ctx, a, b).map_err(|e| match e {
            DimEq::Differs(cex) => SubtypeError::Dim {
                axis,
                found: a.clone(),
                expected: b.clone(),
                cex,
            },
            DimEq::Unknown(goal) => SubtypeError::Unknown { goal },
        })?;
    }
    Ok(())
}

/// Why two dims could not be proven equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimEq {
    /// They differ under this assignment.
    Differs(Counterexample),
    /// Out of budget on this goal.
    Unknown(Pred),
}

/// `Γ ⊨ a = b`, syntactic first.
pub fn dims_equal(ctx: &Ctx, a: &Dim, b: &Dim) -> Result<(), DimEq> {
    if a == b {
        return Ok(());
    }
    let goal = Pred::eq(a.clone(), b.clone());
    match solver::entails(ctx, &goal) {
        Entailment::Valid => Ok(()),
        Entailment::Invalid(c) => Err(DimEq::Differs(c)),
        Entailment::Unknown => Err(DimEq::Unknown(goal)),
    }
}

/// `Γ ⊢ T₁ <: T₂` by the algorithm of Section 3 §5.
pub fn subtype(ctx: &Ctx, t1: &Type, t2: &Type) -> Result<(), SubtypeError> {
    if t1 == t2 {
        // Reflexivity (§3.1) without a solver call.
        return Ok(());
    }
    match (t1, t2) {
        (Type::Tensor(a), Type::Tensor(b)) => sub_tensor(ctx, a, b),
        (Type::Scalar(a), Type::Scalar(b)) => {
            if a == b {
                Ok(())
            } else {
                Err(SubtypeError::Dtype {
                    found: *a,
                    expected: *b,
                })
            }
        }
        (Type::Unit, Type::Unit) => Ok(()),
        // A dim value is one dim: `Dim[a] <: Dim[b]` iff Γ ⊨ a = b (Section 2 §2).
        (Type::Dim(a), Type::Dim(b)) => {
            shapes_equal(ctx, std::slice::from_ref(a), std::slice::from_ref(b))
        }
        (Type::Fn(f1), Type::Fn(f2)) => {
            // sub-fn (§3.4): contravariant parameters, covariant result.
            if f1.params.len() != f2.params.len() {
                return Err(SubtypeError::Arity {
                    found: f1.params.len(),
                    expected: f2.params.len(),
                });
            }
            for (i, (p1, p2)) in f1.params.iter().zip(&f2.params).enumerate() {
                subtype(ctx, p2, p1).map_err(|e| SubtypeError::InFn {
                    param: Some(i),
                    inner: Box::new(e),
                })?;
            }
            subtype(ctx, &f1.ret, &f2.ret).map_err(|e| SubtypeError::InFn {
                param: None,
                inner: Box::new(e),
            })
        }
        _ => Err(SubtypeError::Kind {
            found: t1.kind_name(),
            expected: t2.kind_name(),
        }),
    }
}

/// sub-tensor (Section 3 §3.3): same dtype, `s₁ ≡ s₂`, `Γ; R₁ ⊨ R₂`.
pub fn sub_tensor(ctx: &Ctx, a: &TensorType, b: &TensorType) -> Result<(), SubtypeError> {
    if a.dtype != b.dtype {
        return Err(SubtypeError::Dtype {
            found: a.dtype,
            expected: b.dtype,
        });
    }
    shapes_equal(ctx, &a.shape, &b.shape)?;
    for p in &b.refs {
        match solver::entails_with(ctx, &a.refs, p) {
            Entailment::Valid => {}
            Entailment::Invalid(cex) => {
                return Err(SubtypeError::Refinement {
                    pred: p.clone(),
                    cex,
                })
            }
            Entailment::Unknown => return Err(SubtypeError::Unknown { goal: p.clone() }),
        }
    }
    Ok(())
}

impl SubtypeError {
    /// The counterexample, when there is one.
    pub fn cex(&self) -> Option<&Counterexample> {
        match self {
            SubtypeError::Dim { cex, .. } | SubtypeError::Refinement { cex, .. } => Some(cex),
            SubtypeError::InFn { inner, .. } => inner.cex(),
            _ => None,
        }
    }

    /// A lowercase "expected … found …" description.
    pub fn describe(&self) -> String {
        match self {
            SubtypeError::Kind { found, expected } => {
                format!("expected a {expected}, found a {found}")
            }
            SubtypeError::Dtype { found, expected } => {
                format!("expected dtype {expected}, found {found} (dtypes are invariant; insert an explicit cast)")
            }
            SubtypeError::Rank { found, expected } => {
                format!("expected rank {expected}, found rank {found}")
            }
            SubtypeError::Dim {
                axis,
                found,
                expected,
                ..
            } => {
                format!("dimension {axis}: expected `{expected}`, found `{found}`")
            }
            SubtypeError::Refinement { pred, .. } => format!("refinement `{pred}` is not implied"),
            SubtypeError::Arity { found, expected } => {
                format!("expected a function of {expected} parameters, found {found}")
            }
            SubtypeError::InFn {
                param: Some(i),
                inner,
            } => format!("parameter {i}: {}", inner.describe()),
            SubtypeError::InFn { param: None, inner } => format!("result: {}", inner.describe()),
            SubtypeError::Unknown { goal } => format!(
                "could not prove `{goal}` within the solver budget; add a refinement or an axiom"
            ),
        }
    }

    /// Was this a solver-budget failure?
    pub fn is_unknown(&self) -> bool {
        match self {
            SubtypeError::Unknown { .. } => true,
            SubtypeError::InFn { inner, .. } => inner.is_unknown(),
            _ => false,
        }
    }
}
