//! One decoded tensor element, independent of its storage layout.

use std::fmt;

use tc_core::Dtype;

/// The decoded value of one element. Every float dtype decodes exactly into
/// `f32`; ints into `i64` (already in the dtype's range); Bool into `bool`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elem {
    /// A value of a float dtype (exact: every F16/BF16/F8 value is an `f32`).
    F(f32),
    /// A value of a signed-int dtype, widened to `i64`.
    I(i64),
    /// A Bool value.
    B(bool),
}

impl Elem {
    /// The zero of `dtype`'s class: `F(0.0)`, `I(0)` or `B(false)`.
    pub fn zero(dtype: Dtype) -> Elem {
        if dtype.is_float() {
            Elem::F(0.0)
        } else if dtype.is_int() {
            Elem::I(0)
        } else {
            Elem::B(false)
        }
    }

    /// The one of `dtype`'s class: `F(1.0)`, `I(1)` or `B(true)`.
    pub fn one(dtype: Dtype) -> Elem {
        if dtype.is_float() {
            Elem::F(1.0)
        } else if dtype.is_int() {
            Elem::I(1)
        } else {
            Elem::B(true)
        }
    }

    /// The float payload, if this is `Elem::F`.
    pub fn as_f32(self) -> Option<f32> {
        match self {
            Elem::F(x) => Some(x),
            _ => None,
        }
    }

    /// The integer payload, if this is `Elem::I`.
    pub fn as_i64(self) -> Option<i64> {
        match self {
            Elem::I(x) => Some(x),
            _ => None,
        }
    }

    /// The Bool payload, if this is `Elem::B`.
    pub fn as_bool(self) -> Option<bool> {
        match self {
            Elem::B(x) => Some(x),
            _ => None,
        }
    }

    /// True when this variant is the one `dtype` decodes into
    /// (`F` for floats, `I` for ints, `B` for Bool).
    pub fn matches_class(self, dtype: Dtype) -> bool {
        matches!(
            (self, dtype.is_float(), dtype.is_int()),
            (Elem::F(_), true, _) | (Elem::I(_), _, true) | (Elem::B(_), false, false)
        )
    }

    /// Bitwise identity: like `==`, except that NaNs compare by bit pattern
    /// (so a NaN equals itself) and `-0.0` differs from `0.0`.
    pub fn bit_eq(self, other: Elem) -> bool {
        match (self, other) {
            (Elem::F(a), Elem::F(b)) => a.to_bits() == b.to_bits(),
            (a, b) => a == b,
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::F(x) => write!(f, "{x:?}"),
            Elem::I(x) => write!(f, "{x}"),
            Elem::B(x) => write!(f, "{x}"),
        }
    }
}

impl From<f32> for Elem {
    fn from(x: f32) -> Elem {
        Elem::F(x)
    }
}

impl From<i64> for Elem {
    fn from(x: i64) -> Elem {
        Elem::I(x)
    }
}

impl From<bool> for Elem {
    fn from(x: bool) -> Elem {
        Elem::B(x)
    }
}
