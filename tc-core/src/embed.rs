//! The checked IR as bytes: what `#[tensor_fn]` embeds in the program it
//! expands, and its verified load at run time.
//!
//! The bytes are CBOR (`ciborium`) of the format name, the fingerprint of
//! tc-core's sources and the [`Function`]. A load refuses bytes written by
//! another format or another tc-core (a macro and a runtime built from
//! different sources would disagree on what an op means), rebuilds every
//! [`Dim`] through its normalising constructors (so a dim is canonical, as
//! the checker's were, whatever the bytes say), and runs the structural
//! verifier ([`verify_structure`]). Floats in scalars travel as their bits.
//!
//! One serialisation, derived from the IR's types, replaces constructor
//! code written per op: an op added to the IR needs nothing here.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dim::{Atom, Dim};
use crate::ir::{verify_structure, Function, Scalar};

/// The format's name and version.
const FORMAT: &str = "tc-ir/1";

/// What a build of tc-core from other sources would not read alike.
const SOURCES: &str = env!("TC_CORE_SOURCE_FINGERPRINT");

/// Why embedded IR was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    /// The function could not be written (a bug: every IR type serialises).
    #[error("IR does not encode: {0}")]
    Encode(String),
    /// The bytes are not an encoded function.
    #[error("embedded IR does not decode: {0}")]
    Decode(String),
    /// The bytes come from another format or another tc-core.
    #[error(
        "embedded IR was written by `{found}`, this tc-core reads `{expected}`: rebuild the crate"
    )]
    Foreign {
        /// The writer's format and sources.
        found: String,
        /// This build's.
        expected: String,
    },
    /// The function decodes but the structural verifier refuses it.
    #[error("embedded IR of `{func}` is malformed: {message}")]
    Malformed {
        /// The function.
        func: String,
        /// The verifier's message.
        message: String,
    },
}

/// A tensor fn's IR as `#[tensor_fn]` embeds it: the bytes, decoded and
/// verified ([`decode`]) on first use, kept for the process. One
/// non-generic type, so that a tensor fn's expansion is a `static` and a
/// call: a `OnceLock` of its own per fn, with an initialising closure of
/// its own, was about fifteen monomorphised functions per tensor fn for
/// rustc to generate code for, again whenever an edit touched the crate.
pub struct Embedded {
    bytes: &'static [u8],
    ir: std::sync::OnceLock<Result<Function, EmbedError>>,
}

impl Embedded {
    /// The IR that `bytes` hold (not decoded until [`Embedded::get`]).
    pub const fn new(bytes: &'static [u8]) -> Embedded {
        Embedded {
            bytes,
            ir: std::sync::OnceLock::new(),
        }
    }

    /// The function, or why its bytes were refused.
    pub fn get(&'static self) -> Result<&'static Function, &'static EmbedError> {
        self.ir.get_or_init(|| decode(self.bytes)).as_ref()
    }
}

/// The resolver of a tensor fn that calls no other (`#[tensor_fn]` outside
/// a `#[tensor_module]`): no name resolves. A function item, so that no
/// expansion carries a closure of its own.
pub fn no_callees(_: &str) -> Option<&'static Function> {
    None
}

/// A resolver, as the expansions pass it.
pub type Resolver = dyn Fn(&str) -> Option<&'static Function> + Sync;

/// [`no_callees`] as a trait object made here, once: an expansion that
/// wrote `&no_callees` would have rustc generate its vtable and call shims
/// in every crate with a tensor fn.
pub static NO_CALLEES: &Resolver = &no_callees;

/// The bytes [`decode`] reads back as `f`.
pub fn encode(f: &Function) -> Result<Vec<u8>, EmbedError> {
    let mut out = Vec::new();
    ciborium::into_writer(&(FORMAT, SOURCES, f), &mut out)
        .map_err(|e| EmbedError::Encode(e.to_string()))?;
    Ok(out)
}

/// The function `bytes` hold, verified (see the module doc).
pub fn decode(bytes: &[u8]) -> Result<Function, EmbedError> {
    let (format, sources, f): (String, String, Function) =
        ciborium::from_reader(bytes).map_err(|e| EmbedError::Decode(e.to_string()))?;
    if format != FORMAT || sources != SOURCES {
        return Err(EmbedError::Foreign {
            found: format!("{format} {sources}"),
            expected: format!("{FORMAT} {SOURCES}"),
        });
    }
    verify_structure(&f).map_err(|d| EmbedError::Malformed {
        func: f.sig.name.clone(),
        message: d.message,
    })?;
    Ok(f)
}

/// A dim's factor as it travels: a variable, or a quotient or remainder
/// of two dims.
#[derive(Serialize, Deserialize)]
enum AtomRepr<D> {
    Var(String),
    Div(D, D),
    Mod(D, D),
}

/// A dim travels as its terms (monomial, coefficient), in its canonical
/// order.
impl Serialize for Dim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let terms: Vec<(Vec<AtomRepr<&Dim>>, i64)> = self
            .terms()
            .map(|(m, c)| (m.iter().map(atom_repr).collect(), c))
            .collect();
        terms.serialize(s)
    }
}

fn atom_repr(a: &Atom) -> AtomRepr<&Dim> {
    match a {
        Atom::Var(v) => AtomRepr::Var(v.clone()),
        Atom::Div(x, y) => AtomRepr::Div(x, y),
        Atom::Mod(x, y) => AtomRepr::Mod(x, y),
    }
}

/// Rebuilt through the checked, normalising operations, as the checker
/// built it: the result is canonical, and an overflow or a division by
/// zero in the bytes is a decoding error.
impl<'de> Deserialize<'de> for Dim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dim, D::Error> {
        let terms: Vec<(Vec<AtomRepr<Dim>>, i64)> = Vec::deserialize(d)?;
        let bad = |e: crate::dim::DimError| D::Error::custom(format!("dim: {e}"));
        let mut sum = Dim::c(0);
        for (monomial, c) in terms {
            let mut term = Dim::c(c);
            for a in monomial {
                let factor = match a {
                    AtomRepr::Var(v) => Dim::var(v),
                    AtomRepr::Div(x, y) => x.checked_div(&y).map_err(bad)?,
                    AtomRepr::Mod(x, y) => x.checked_rem(&y).map_err(bad)?,
                };
                term = term.checked_mul(&factor).map_err(bad)?;
            }
            sum = sum.checked_add(&term).map_err(bad)?;
        }
        Ok(sum)
    }
}

/// A scalar travels as its identity: a float by its bits, so `-0.0` and a
/// NaN's payload survive.
impl Serialize for Scalar {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.key().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        let (tag, bits): (u8, u64) = Deserialize::deserialize(d)?;
        Ok(match tag {
            0 => Scalar::Float(f64::from_bits(bits)),
            1 => Scalar::Int(bits as i64),
            2 if bits <= 1 => Scalar::Bool(bits == 1),
            3 => Scalar::Param(
                usize::try_from(bits).map_err(|_| D::Error::custom("scalar parameter index"))?,
            ),
            _ => return Err(D::Error::custom(format!("scalar tag {tag} with {bits}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::FnBuilder;
    use crate::ir::{BinaryOp, Op};
    use crate::pred::{CmpOp, Pred};
    use crate::{Dtype, Type};
    use proptest::prelude::*;

    /// A function with what a careless encoding would lose: dims with
    /// quotients, remainders, products and negative coefficients, floats
    /// whose identity is their bits, the extreme integer, refinements.
    fn sample() -> Function {
        let (n, k) = (Dim::var("N"), Dim::var("K"));
        let odd = n.checked_div(&Dim::c(2)).unwrap().checked_mul(&k).unwrap()
            + n.checked_rem(&Dim::c(3)).unwrap().scale(-4)
            + Dim::c(7);
        let t = Type::tensor(Dtype::F32, vec![n.clone(), k.clone()]);
        let mut b = FnBuilder::new("sample");
        b.constant("C", -3);
        b.requires(Pred::Cmp(n.clone(), CmpOp::Ge, Dim::c(2)));
        let x = b.param("x", t.clone());
        let mut v = x;
        for s in [
            Scalar::Float(-0.0),
            Scalar::Float(f64::from_bits(0x7ff8_0000_dead_beef)),
            Scalar::Int(i64::MIN),
            Scalar::Bool(true),
        ] {
            v = b.op(Op::ScalarBinary {
                op: BinaryOp::Mul,
                x: v,
                s,
                scalar_left: false,
            });
        }
        let r = b.op(Op::Reshape(vec![odd.clone(), Dim::c(1)], v));
        b.returns(Type::tensor(Dtype::F32, vec![odd, Dim::c(1)]));
        b.finish(r)
    }

    #[test]
    fn a_function_round_trips_exactly() {
        let f = sample();
        let back = decode(&encode(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        // Equality of scalars is by bits; say so for the NaN's payload.
        let bits: Vec<u64> = back
            .body
            .iter()
            .filter_map(|i| match i.op {
                Op::ScalarBinary {
                    s: Scalar::Float(x),
                    ..
                } => Some(x.to_bits()),
                _ => None,
            })
            .collect();
        assert_eq!(bits, vec![(-0.0f64).to_bits(), 0x7ff8_0000_dead_beef]);
    }

    #[test]
    fn foreign_bytes_are_refused() {
        let f = sample();
        let mut other = Vec::new();
        ciborium::into_writer(&(FORMAT, "another tc-core", &f), &mut other).unwrap();
        assert!(matches!(decode(&other), Err(EmbedError::Foreign { .. })));
        let mut old = Vec::new();
        ciborium::into_writer(&("tc-ir/0", SOURCES, &f), &mut old).unwrap();
        assert!(matches!(decode(&old), Err(EmbedError::Foreign { .. })));
    }

    #[test]
    fn a_dim_in_the_bytes_is_rebuilt_canonical() {
        // `2·N + N` written as two terms of the same monomial: read back as
        // the one canonical term `3·N`.
        let repr = vec![
            (vec![AtomRepr::<Dim>::Var("N".into())], 2i64),
            (vec![AtomRepr::Var("N".into())], 1),
        ];
        let mut bytes = Vec::new();
        ciborium::into_writer(&repr, &mut bytes).unwrap();
        let d: Dim = ciborium::from_reader(&bytes[..]).unwrap();
        assert_eq!(d, Dim::var("N").scale(3));
        // A coefficient overflow is an error, not a wrapped dim.
        let big = vec![
            (vec![AtomRepr::<Dim>::Var("N".into())], i64::MAX),
            (vec![AtomRepr::Var("N".into())], 1),
        ];
        let mut bytes = Vec::new();
        ciborium::into_writer(&big, &mut bytes).unwrap();
        assert!(ciborium::from_reader::<Dim, _>(&bytes[..]).is_err());
    }

    #[test]
    fn a_function_the_verifier_refuses_is_refused() {
        let mut f = sample();
        // An operand that is not defined before its use.
        f.body[0].op = Op::Binary(
            BinaryOp::Add,
            crate::ir::Value::from_u32(90),
            crate::ir::Value::from_u32(91),
        );
        let bytes = encode(&f).unwrap();
        assert!(matches!(decode(&bytes), Err(EmbedError::Malformed { .. })));
    }

    proptest! {
        /// Damaged bytes (cut short, or with a byte changed) are an error
        /// or a function the verifier accepts, never a panic.
        #[test]
        fn damaged_bytes_never_panic(cut in 0usize..2000, at in 0usize..2000, byte: u8) {
            let bytes = encode(&sample()).unwrap();
            let _ = decode(&bytes[..cut.min(bytes.len())]);
            let mut flipped = bytes.clone();
            let i = at % flipped.len();
            flipped[i] = byte;
            if let Ok(f) = decode(&flipped) {
                prop_assert!(verify_structure(&f).is_ok());
            }
        }
    }
}
