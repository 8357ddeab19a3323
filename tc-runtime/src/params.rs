//! Loading a weight struct (`#[tensor_params]`, docs/syntax.md "Weight
//! structs"): each field's tensor is taken from a name → tensor map by its
//! name under a prefix, and its dtype, rank and every dim are checked against
//! the field's declared type before the struct exists. A shape variable is
//! bound by the first field that has it as a bare dim and must agree in every
//! later one, as a call's σ is bound (Section 4 §7.1).

use std::collections::BTreeMap;

use tc_core::{Dim, Dtype, Sigma};

use crate::{Error, Result, Tensor};

/// The σ of one struct being loaded.
#[derive(Debug)]
pub struct Binder {
    prefix: String,
    sigma: Sigma,
}

impl Binder {
    /// A binder for the tensors named under `prefix` (`""`: no prefix;
    /// otherwise a field `wq` is looked up as `prefix.wq`).
    pub fn new(prefix: &str) -> Binder {
        Binder {
            prefix: prefix.trim_end_matches('.').to_string(),
            sigma: Sigma::new(),
        }
    }

    /// The full name of the tensor `name`.
    pub fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// The shape variables bound so far.
    pub fn sigma(&self) -> &Sigma {
        &self.sigma
    }

    /// The tensor `name` from `tensors`, checked against `dtype` and `dims`
    /// (a typed error naming the tensor otherwise).
    pub fn take(
        &mut self,
        tensors: &BTreeMap<String, Tensor>,
        name: &str,
        dtype: Dtype,
        dims: &[Dim],
    ) -> Result<Tensor> {
        let full = self.full_name(name);
        let t = tensors
            .get(&full)
            .ok_or_else(|| Error::MissingTensor { name: full.clone() })?;
        if t.dtype() != dtype {
            return Err(Error::Dtype {
                param: full,
                expected: dtype,
                found: t.dtype(),
            });
        }
        if t.rank() != dims.len() {
            return Err(Error::Rank {
                param: full,
                expected: dims.len(),
                found: t.rank(),
                shape: t.shape().to_vec(),
            });
        }
        // Bare variables bind first, so a compound dim of the same tensor
        // (`[H, 3 * H]`) can use them.
        for (axis, d) in dims.iter().enumerate() {
            if let Some(v) = d.as_var() {
                if !self.sigma.contains_key(v) {
                    let n = i64::try_from(t.shape()[axis]).unwrap_or(i64::MAX);
                    self.sigma.insert(v.to_string(), n);
                }
            }
        }
        for (axis, d) in dims.iter().enumerate() {
            self.check_dim(&full, axis, d, t.shape()[axis])?;
        }
        Ok(t.clone())
    }

    fn check_dim(&self, full: &str, axis: usize, d: &Dim, found: usize) -> Result<()> {
        let expected = d.eval(&self.sigma).map_err(|e| Error::op(format!("load `{full}`"), format!(
                "dimension {axis} (`{d}`): {e}; a variable in a compound dim must be bound by an earlier field or a bare dim"
            )))?;
        if i64::try_from(found).ok() == Some(expected) {
            return Ok(());
        }
        Err(Error::Dim {
            param: full.to_string(),
            axis,
            dim: d.to_string(),
            expected,
            found,
            sigma: self
                .sigma
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(ts: &[(&str, Tensor)]) -> BTreeMap<String, Tensor> {
        ts.iter().map(|(n, t)| (n.to_string(), t.clone())).collect()
    }

    #[test]
    fn binds_checks_and_names_the_tensor() {
        let w = Tensor::zeros(Dtype::F32, &[4, 8]);
        let b = Tensor::zeros(Dtype::F32, &[4]);
        let m = map(&[("l.0.w", w.clone()), ("l.0.b", b), ("l.0.bad", w)]);
        let mut s = Binder::new("l.0");
        let dims = [Dim::var("O"), Dim::c(8)];
        s.take(&m, "w", Dtype::F32, &dims).unwrap();
        assert_eq!(s.sigma().get("O"), Some(&4));
        s.take(&m, "b", Dtype::F32, &[Dim::var("O")]).unwrap();
        let e = s.take(&m, "bad", Dtype::F32, &[Dim::var("O"), Dim::c(4)]);
        assert!(
            matches!(&e, Err(Error::Dim { param, axis: 1, expected: 4, found: 8, .. }) if param == "l.0.bad"),
            "{e:?}"
        );
        let e = s.take(&m, "w", Dtype::F16, &dims).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Dtype {
                    found: Dtype::F32,
                    ..
                }
            ),
            "{e}"
        );
        let e = s.take(&m, "gone", Dtype::F32, &dims).unwrap_err();
        assert_eq!(
            e,
            Error::MissingTensor {
                name: "l.0.gone".into()
            }
        );
    }

    #[test]
    fn a_compound_dim_uses_the_bare_one_of_the_same_tensor() {
        let qkv = Tensor::zeros(Dtype::F32, &[4, 12]);
        let m = map(&[("qkv", qkv)]);
        let mut s = Binder::new("");
        let h = Dim::var("H");
        s.take(
            &m,
            "qkv",
            Dtype::F32,
            &[h.clone(), h.checked_scale(3).unwrap()],
        )
        .unwrap();
        let e = s.take(
            &m,
            "qkv",
            Dtype::F32,
            &[Dim::var("K"), Dim::var("H") * Dim::c(2)],
        );
        assert!(
            matches!(
                e,
                Err(Error::Dim {
                    axis: 1,
                    expected: 8,
                    found: 12,
                    ..
                })
            ),
            "{e:?}"
        );
    }
}
