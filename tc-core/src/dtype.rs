//! Element types (Section 1 §2) and their classes (Section 2 §3).

use std::fmt;
use std::str::FromStr;

/// One of the eleven core element types (Section 1 §2), or a block-quantized
/// format (Section 2 §18).
#[allow(non_camel_case_types)] // `Q4_K` is the format's name in GGML and GGUF
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
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
    /// GGML `Q8_0` (Section 2 §18): blocks of 32, an f16 scale `d` and 32
    /// `i8` quants, `x = d·q` (34 bytes a block).
    Q8_0,
    /// GGML `Q4_0`: blocks of 32, an f16 scale and 16 bytes of 4-bit quants,
    /// `x = d·(q − 8)` (18 bytes a block).
    Q4_0,
    /// GGML `Q4_1`: blocks of 32, f16 scale and minimum, 16 bytes of 4-bit
    /// quants, `x = d·q + m` (20 bytes a block).
    Q4_1,
    /// GGML `Q4_K`: super-blocks of 256 in 8 sub-blocks with 6-bit scales
    /// and minimums (144 bytes a block).
    Q4_K,
    /// GGML `Q6_K`: super-blocks of 256 in 16 sub-blocks with 8-bit scales,
    /// 6-bit quants (210 bytes a block).
    Q6_K,
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
    /// A block-quantized format (Section 2 §18): not numeric, its elements
    /// are read only through `dequantize`, `qmatmul` and `gather`.
    Quantized,
}

impl Dtype {
    /// The eleven element dtypes in declaration order (the block-quantized
    /// formats, which have no element representation, are [`Dtype::QUANTIZED`]).
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

    /// The block-quantized formats (Section 2 §18).
    pub const QUANTIZED: [Dtype; 5] = [
        Dtype::Q8_0,
        Dtype::Q4_0,
        Dtype::Q4_1,
        Dtype::Q4_K,
        Dtype::Q6_K,
    ];

    /// The admissibility class (Section 2 §3).
    pub fn class(self) -> DtypeClass {
        match self {
            Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F8E4M3 | Dtype::F8E5M2 => {
                DtypeClass::Float
            }
            Dtype::I64 | Dtype::I32 | Dtype::I16 | Dtype::I8 | Dtype::I4 => DtypeClass::SignedInt,
            Dtype::Bool => DtypeClass::Bool,
            Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => {
                DtypeClass::Quantized
            }
        }
    }

    /// True for a block-quantized format (Section 2 §18).
    pub fn is_quantized(self) -> bool {
        self.class() == DtypeClass::Quantized
    }

    /// A quantized format's `(elements, bytes)` per block along the last
    /// axis (Section 2 §18: `b(Q)`); `None` for element dtypes.
    pub fn block(self) -> Option<(usize, usize)> {
        match self {
            Dtype::Q8_0 => Some((32, 34)),
            Dtype::Q4_0 => Some((32, 18)),
            Dtype::Q4_1 => Some((32, 20)),
            Dtype::Q4_K => Some((256, 144)),
            Dtype::Q6_K => Some((256, 210)),
            _ => None,
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
        self.is_float() || self.is_int()
    }

    /// True for Bool.
    pub fn is_bool(self) -> bool {
        self == Dtype::Bool
    }

    /// Width of one element in bits (I4 = 4, Bool = 8 as stored; a
    /// quantized format's average, rounded down: its exact size is
    /// [`Dtype::byte_size`]).
    pub fn bits(self) -> u32 {
        if let Some((elems, bytes)) = self.block() {
            return (bytes * 8 / elems) as u32;
        }
        match self {
            Dtype::F32 | Dtype::I32 => 32,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 16,
            Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::I8 | Dtype::Bool => 8,
            Dtype::I64 => 64,
            Dtype::I4 => 4,
            Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => 0,
        }
    }

    /// Storage size of one element in bytes as a fraction `(num, den)`: I4 is
    /// `(1, 2)`, a quantized format its block's bytes over its block's
    /// elements (`Q4_1`: `(20, 32)`; exact for whole blocks, which formation
    /// guarantees, Section 2 §18).
    pub fn byte_size(self) -> (usize, usize) {
        if let Some((elems, bytes)) = self.block() {
            return (bytes, elems);
        }
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
            Dtype::Q8_0 => "q8_0",
            Dtype::Q4_0 => "q4_0",
            Dtype::Q4_1 => "q4_1",
            Dtype::Q4_K => "q4_k",
            Dtype::Q6_K => "q6_k",
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
            DtypeClass::Quantized => "quantized",
        })
    }
}

/// The name given is not one of the dtypes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}` (expected one of f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i16, i8, i4, bool, q8_0, q4_0, q4_1, q4_k, q6_k)")]
pub struct UnknownDtype(pub String);

impl FromStr for Dtype {
    type Err = UnknownDtype;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dtype::ALL
            .into_iter()
            .chain(Dtype::QUANTIZED)
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
        for q in Dtype::QUANTIZED {
            assert!(q.is_quantized() && !q.is_numeric() && !q.is_float());
        }
        // Two Q4_1 blocks of 32: 40 bytes; a Q6_K super-block: 210.
        assert_eq!(Dtype::Q4_1.storage_bytes(64), 40);
        assert_eq!(Dtype::Q6_K.storage_bytes(256), 210);
    }

    #[test]
    fn names_round_trip() {
        for d in Dtype::ALL.into_iter().chain(Dtype::QUANTIZED) {
            assert_eq!(d.name().parse::<Dtype>().unwrap(), d);
        }
        assert!("f64".parse::<Dtype>().is_err());
    }
}
