//! Element types (Section 1 §2) and their classes (Section 2 §3).

use std::fmt;
use std::str::FromStr;

/// One of the eleven core element types (Section 1 §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16: the top half of an F32.
    BF16,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, "FN" variant (no infinities, max 448).
    F8E4M3,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits, IEEE-like (max finite 57344).
    F8E5M2,
    /// 64-bit two's-complement integer.
    I64,
    /// 32-bit two's-complement integer.
    I32,
    /// 16-bit two's-complement integer.
    I16,
    /// 8-bit two's-complement integer.
    I8,
    /// 4-bit two's-complement integer in [-8, 7], packed two per byte.
    I4,
    /// Boolean, one byte holding 0 or 1.
    Bool,
}

/// Admissibility class of a dtype (Section 2 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DtypeClass {
    /// F32, F16, BF16, F8E4M3, F8E5M2.
    Float,
    /// I64, I32, I16, I8, I4.
    SignedInt,
    /// Bool (its own class, not numeric).
    Bool,
}

impl Dtype {
    /// All eleven dtypes in declaration order.
    pub const ALL: [Dtype; 11] = [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
        Dtype::I64,
        Dtype::I32,
        Dtype::I16,
        Dtype::I8,
        Dtype::I4,
        Dtype::Bool,
    ];

    /// The admissibility class (Section 2 §3).
    pub fn class(self) -> DtypeClass {
        match self {
            Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F8E4M3 | Dtype::F8E5M2 => {
                DtypeClass::Float
            }
            Dtype::I64 | Dtype::I32 | Dtype::I16 | Dtype::I8 | Dtype::I4 => DtypeClass::SignedInt,
            Dtype::Bool => DtypeClass::Bool,
        }
    }

    /// True for the float class.
    pub fn is_float(self) -> bool {
        self.class() == DtypeClass::Float
    }

    /// True for the signed-integer class.
    pub fn is_int(self) -> bool {
        self.class() == DtypeClass::SignedInt
    }

    /// Numeric = Float ∪ SignedInt (Section 2 §3).
    pub fn is_numeric(self) -> bool {
        self.class() != DtypeClass::Bool
    }

    /// True for Bool.
    pub fn is_bool(self) -> bool {
        self == Dtype::Bool
    }

    /// Width of one element in bits (I4 = 4, Bool = 8 as stored).
    pub fn bits(self) -> u32 {
        match self {
            Dtype::F32 | Dtype::I32 => 32,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 16,
            Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::I8 | Dtype::Bool => 8,
            Dtype::I64 => 64,
            Dtype::I4 => 4,
        }
    }

    /// Storage size of one element in bytes as a fraction `(num, den)`: I4 is `(1, 2)`.
    pub fn byte_size(self) -> (usize, usize) {
        match self {
            Dtype::I4 => (1, 2),
            other => (other.bits() as usize / 8, 1),
        }
    }

    /// Bytes needed to store `n` elements (I4 rounds up to whole bytes).
    ///
    /// For counts validated by [`crate::size::numel`] (at most
    /// [`crate::size::MAX_ELEMS`]) this is exact. Beyond, it saturates at
    /// `usize::MAX` (an allocation of that size fails loudly) instead of
    /// wrapping to a small count that a writer would overrun; use
    /// [`crate::size::bytes`] to get a typed error instead.
    pub fn storage_bytes(self, n: usize) -> usize {
        let (num, den) = self.byte_size();
        n.checked_mul(num).map_or(usize::MAX, |b| b.div_ceil(den))
    }

    /// The lowercase name used in surface syntax and diagnostics (`f32`, `bf16`, `i4`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
            Dtype::F8E4M3 => "f8e4m3",
            Dtype::F8E5M2 => "f8e5m2",
            Dtype::I64 => "i64",
            Dtype::I32 => "i32",
            Dtype::I16 => "i16",
            Dtype::I8 => "i8",
            Dtype::I4 => "i4",
            Dtype::Bool => "bool",
        }
    }

    /// Inclusive value range of a signed-int dtype; `None` for other classes.
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            Dtype::I64 => Some((i64::MIN, i64::MAX)),
            Dtype::I32 => Some((i32::MIN as i64, i32::MAX as i64)),
            Dtype::I16 => Some((i16::MIN as i64, i16::MAX as i64)),
            Dtype::I8 => Some((i8::MIN as i64, i8::MAX as i64)),
            Dtype::I4 => Some((-8, 7)),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for DtypeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DtypeClass::Float => "float",
            DtypeClass::SignedInt => "signed int",
            DtypeClass::Bool => "bool",
        })
    }
}

/// The name given is not one of the eleven dtypes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}` (expected one of f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i16, i8, i4, bool)")]
pub struct UnknownDtype(pub String);

impl FromStr for Dtype {
    type Err = UnknownDtype;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dtype::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownDtype(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_sizes() {
        let floats: Vec<_> = Dtype::ALL.iter().filter(|d| d.is_float()).collect();
        assert_eq!(floats.len(), 5);
        let ints: Vec<_> = Dtype::ALL.iter().filter(|d| d.is_int()).collect();
        assert_eq!(ints.len(), 5);
        assert!(!Dtype::Bool.is_numeric());
        assert_eq!(Dtype::I4.byte_size(), (1, 2));
        assert_eq!(Dtype::I4.storage_bytes(3), 2);
        assert_eq!(Dtype::BF16.storage_bytes(3), 6);
        // 2^62 f32 elements would wrap to 0 bytes; it saturates instead.
        assert_eq!(Dtype::F32.storage_bytes(1 << 62), usize::MAX);
        assert_eq!(Dtype::I4.storage_bytes(usize::MAX), usize::MAX.div_ceil(2));
        assert_eq!(Dtype::I4.int_range(), Some((-8, 7)));
    }

    #[test]
    fn names_round_trip() {
        for d in Dtype::ALL {
            assert_eq!(d.name().parse::<Dtype>().unwrap(), d);
        }
        assert!("f64".parse::<Dtype>().is_err());
    }
}
