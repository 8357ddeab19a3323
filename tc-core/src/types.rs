//! The type grammar of Section 1 §2.

use std::collections::BTreeMap;
use std::fmt;

use crate::dim::{Dim, DimError};
use crate::dtype::Dtype;
use crate::pred::Pred;

/// `Tensor[dt, shape, R]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TensorType {
    /// Element type (invariant under subtyping, Section 3 §3.3).
    pub dtype: Dtype,
    /// Ordered dims; the rank is `shape.len()` and is static (Section 1 §5).
    pub shape: Vec<Dim>,
    /// The refinement set R (a conjunction).
    pub refs: Vec<Pred>,
}

impl TensorType {
    /// A tensor type with no refinements.
    pub fn new(dtype: Dtype, shape: Vec<Dim>) -> TensorType {
        TensorType {
            dtype,
            shape,
            refs: Vec::new(),
        }
    }

    /// Add refinements (builder style).
    pub fn with_refs(mut self, refs: impl IntoIterator<Item = Pred>) -> TensorType {
        self.refs.extend(refs);
        self
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Substitute shape variables in dims and refinements; panics where
    /// [`TensorType::checked_subst`] errs.
    pub fn subst(&self, map: &BTreeMap<String, Dim>) -> TensorType {
        self.checked_subst(map).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Substitute shape variables in dims and refinements, or the first dim
    /// that overflows.
    pub fn checked_subst(&self, map: &BTreeMap<String, Dim>) -> Result<TensorType, DimError> {
        Ok(TensorType {
            dtype: self.dtype,
            shape: self
                .shape
                .iter()
                .map(|d| d.checked_subst(map))
                .collect::<Result<_, _>>()?,
            refs: self
                .refs
                .iter()
                .map(|p| p.checked_subst(map))
                .collect::<Result<_, _>>()?,
        })
    }

    /// `vol(s)`: the product of the dims (Section 2 §10), as a polynomial;
    /// panics where [`checked_volume`] errs.
    pub fn volume(&self) -> Dim {
        volume(&self.shape)
    }
}

/// The shape of a reduction over `axes` (Section 2 §8): reduced axes
/// dropped, or kept as `1` with `keepdims`. The one statement of the rule's
/// shape, used by the checker and the fuzzer's generator.
pub fn reduced_shape(shape: &[Dim], axes: &[usize], keepdims: bool) -> Vec<Dim> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keepdims) {
            (true, true) => Some(Dim::c(1)),
            (true, false) => None,
            (false, _) => Some(d.clone()),
        })
        .collect()
}

/// The product of a list of dims (`1` for the empty shape, Section 4 §2.2);
/// panics where [`checked_volume`] errs.
pub fn volume(shape: &[Dim]) -> Dim {
    checked_volume(shape).unwrap_or_else(|e| panic!("{e}"))
}

/// The product of a list of dims, or the overflow (`[2^40, 2^40]` has no
/// i64 volume).
pub fn checked_volume(shape: &[Dim]) -> Result<Dim, DimError> {
    shape
        .iter()
        .try_fold(Dim::c(1), |acc, d| acc.checked_mul(d))
}

/// An n-ary function type `T₁ → … → Tₙ → U` with its `requires` clause (Section 2 §17).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FnType {
    /// Parameter types, in order.
    pub params: Vec<Type>,
    /// Return type.
    pub ret: Box<Type>,
}

/// A type of the core calculus (Section 1 §2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Type {
    /// `Tensor[dt, s, R]`.
    Tensor(TensorType),
    /// `T₁ → … → U`.
    Fn(FnType),
    /// `Scalar[dt]`.
    Scalar(Dtype),
    /// A dim parameter `Dim![d]` (Section 1 §6, binding site 1: a parameter
    /// whose type names a dim binds it). Its value is a size, not a tensor:
    /// it binds `d` at a call exactly as one dim of a tensor parameter does
    /// (a bare variable binds, anything else is compared under σ).
    Dim(Dim),
    /// `Unit`.
    Unit,
}

impl Type {
    /// Shorthand for an unrefined tensor type.
    pub fn tensor(dtype: Dtype, shape: Vec<Dim>) -> Type {
        Type::Tensor(TensorType::new(dtype, shape))
    }

    /// The tensor type, if this is one.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// What kind of type this is, for "expected a tensor, found a scalar" messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Type::Tensor(_) => "tensor",
            Type::Fn(_) => "function",
            Type::Scalar(_) => "scalar",
            Type::Dim(_) => "dim",
            Type::Unit => "unit",
        }
    }

    /// The dims a parameter of this type binds at a call: a tensor's shape,
    /// a dim parameter's one dim, nothing for other kinds. The one statement
    /// of "which dims does a parameter bind", shared by the checker (formation,
    /// inferability, call unification) and the runtime contract.
    pub fn param_dims(&self) -> &[Dim] {
        match self {
            Type::Tensor(t) => &t.shape,
            Type::Dim(d) => std::slice::from_ref(d),
            _ => &[],
        }
    }

    /// Substitute shape variables everywhere in the type; panics where
    /// [`Type::checked_subst`] errs.
    pub fn subst(&self, map: &BTreeMap<String, Dim>) -> Type {
        self.checked_subst(map).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Substitute shape variables everywhere in the type, or the first dim
    /// that overflows.
    pub fn checked_subst(&self, map: &BTreeMap<String, Dim>) -> Result<Type, DimError> {
        Ok(match self {
            Type::Tensor(t) => Type::Tensor(t.checked_subst(map)?),
            Type::Fn(f) => Type::Fn(FnType {
                params: f
                    .params
                    .iter()
                    .map(|p| p.checked_subst(map))
                    .collect::<Result<_, _>>()?,
                ret: Box::new(f.ret.checked_subst(map)?),
            }),
            Type::Dim(d) => Type::Dim(d.checked_subst(map)?),
            other => other.clone(),
        })
    }
}

/// Prints a shape as `[B, S, D / H]`.
pub fn shape_string(s: &[Dim]) -> String {
    format!(
        "[{}]",
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

impl fmt::Display for TensorType {
    /// Mirrors the surface syntax: `Tensor[f32; B, S, D where D % 8 == 0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor[{}", self.dtype)?;
        if !self.shape.is_empty() {
            let dims: Vec<_> = self.shape.iter().map(|d| d.to_string()).collect();
            write!(f, "; {}", dims.join(", "))?;
        }
        if !self.refs.is_empty() {
            let rs: Vec<_> = self.refs.iter().map(|p| p.to_string()).collect();
            write!(f, " where {}", rs.join(", "))?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Fn(ft) => {
                let ps: Vec<_> = ft.params.iter().map(|p| p.to_string()).collect();
                write!(f, "fn({}) -> {}", ps.join(", "), ft.ret)
            }
            Type::Scalar(d) => write!(f, "Scalar[{d}]"),
            Type::Dim(d) => write!(f, "Dim[{d}]"),
            Type::Unit => f.write_str("()"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_volume() {
        let t = TensorType::new(
            Dtype::F32,
            vec![Dim::var("B"), Dim::var("S"), Dim::var("D")],
        )
        .with_refs([Pred::eq(Dim::var("D").rem(&Dim::c(8)), 0)]);
        assert_eq!(t.to_string(), "Tensor[f32; B, S, D where D % 8 == 0]");
        assert_eq!(t.volume(), Dim::var("D") * Dim::var("S") * Dim::var("B"));
        assert_eq!(volume(&[]).as_const(), Some(1));
        assert_eq!(Type::Scalar(Dtype::F32).to_string(), "Scalar[f32]");
    }
}
