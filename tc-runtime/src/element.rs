//! The Rust element types of the eleven dtypes ([`Element`]) and the
//! storage wrappers tc adds ([`F8E4M3`], [`F8E5M2`], [`I4`]). Apart from
//! [`crate::elem`] because these conversions are [`crate::cast`]'s, and
//! `cast` itself works on [`Elem`]: `elem` ← `cast` ← `element`, no cycle.

use std::fmt;

use tc_core::Dtype;

use crate::elem::Elem;

/// A Rust element type that stores one tc dtype: `f32`, `half::f16`,
/// `half::bf16`, [`F8E4M3`], [`F8E5M2`], `i64`, `i32`, `i16`, `i8`, [`I4`]
/// and `bool`. Sealed: the set matches the eleven dtypes.
pub trait Element: Copy + Send + Sync + fmt::Debug + 'static + sealed::Sealed {
    /// The dtype this type stores.
    const DTYPE: Dtype;
    /// True when a `[Self]` has exactly the Section 2 §5 storage layout on a
    /// little-endian host (everything except the packed [`I4`]).
    #[doc(hidden)]
    const PLAIN: bool;
    /// The decoded value.
    fn to_elem(self) -> Elem;
    /// The value of `cast[Self::DTYPE]` applied to `e` (see [`crate::cast::convert`]).
    fn from_elem(e: Elem) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

/// Float payload of `convert(e, to)` for a float `to`.
fn conv_f(e: Elem, to: Dtype) -> f32 {
    match crate::cast::convert(e, to) {
        Elem::F(x) => x,
        _ => 0.0,
    }
}

/// Int payload of `convert(e, to)` for an int `to`.
fn conv_i(e: Elem, to: Dtype) -> i64 {
    match crate::cast::convert(e, to) {
        Elem::I(x) => x,
        _ => 0,
    }
}

/// An F8E4M3 ("FN") value: its storage byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

impl F8E4M3 {
    /// From the raw byte.
    pub fn from_bits(bits: u8) -> Self {
        F8E4M3(bits)
    }
    /// The raw byte.
    pub fn to_bits(self) -> u8 {
        self.0
    }
    /// Round an `f32` (RNE, saturating, NaN → NaN).
    pub fn from_f32(x: f32) -> Self {
        F8E4M3(crate::cast::f8e4m3_from_f32(x))
    }
    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        crate::cast::f8e4m3_to_f32(self.0)
    }
}

/// An F8E5M2 value: its storage byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

impl F8E5M2 {
    /// From the raw byte.
    pub fn from_bits(bits: u8) -> Self {
        F8E5M2(bits)
    }
    /// The raw byte.
    pub fn to_bits(self) -> u8 {
        self.0
    }
    /// Round an `f32` (RNE, saturating, NaN → NaN).
    pub fn from_f32(x: f32) -> Self {
        F8E5M2(crate::cast::f8e5m2_from_f32(x))
    }
    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        crate::cast::f8e5m2_to_f32(self.0)
    }
}

/// A 4-bit signed integer in [-8, 7] (stored packed, two per byte, low nibble first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct I4(i8);

impl I4 {
    /// `Some` when `v` is in [-8, 7].
    pub fn new(v: i8) -> Option<Self> {
        (-8..=7).contains(&v).then_some(I4(v))
    }
    /// Two's-complement wrap of `v` into [-8, 7] (keep the low four bits).
    pub fn wrapping(v: i64) -> Self {
        I4(crate::cast::wrap_int(v, Dtype::I4) as i8)
    }
    /// The value, in [-8, 7].
    pub fn get(self) -> i8 {
        self.0
    }
}

impl fmt::Display for I4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

macro_rules! float_element {
    ($t:ty, $dt:expr, $to:expr, $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = $dt;
            const PLAIN: bool = true;
            fn to_elem(self) -> Elem {
                #[allow(clippy::redundant_closure_call)]
                Elem::F(($to)(self))
            }
            fn from_elem(e: Elem) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from)(conv_f(e, $dt))
            }
        }
    };
}

float_element!(f32, Dtype::F32, |x: f32| x, |x: f32| x);
float_element!(
    half::f16,
    Dtype::F16,
    |x: half::f16| crate::cast::f16_to_f32(x.to_bits()),
    |x: f32| half::f16::from_bits(crate::cast::f16_from_f32(x))
);
float_element!(
    half::bf16,
    Dtype::BF16,
    |x: half::bf16| crate::cast::bf16_to_f32(x.to_bits()),
    |x: f32| half::bf16::from_bits(crate::cast::bf16_from_f32(x))
);
float_element!(F8E4M3, Dtype::F8E4M3, F8E4M3::to_f32, F8E4M3::from_f32);
float_element!(F8E5M2, Dtype::F8E5M2, F8E5M2::to_f32, F8E5M2::from_f32);

macro_rules! int_element {
    ($t:ty, $dt:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = $dt;
            const PLAIN: bool = true;
            fn to_elem(self) -> Elem {
                Elem::I(self as i64)
            }
            fn from_elem(e: Elem) -> Self {
                conv_i(e, $dt) as $t
            }
        }
    };
}

int_element!(i64, Dtype::I64);
int_element!(i32, Dtype::I32);
int_element!(i16, Dtype::I16);
int_element!(i8, Dtype::I8);

impl sealed::Sealed for I4 {}
impl Element for I4 {
    const DTYPE: Dtype = Dtype::I4;
    const PLAIN: bool = false;
    fn to_elem(self) -> Elem {
        Elem::I(self.0 as i64)
    }
    fn from_elem(e: Elem) -> Self {
        I4(conv_i(e, Dtype::I4) as i8)
    }
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: Dtype = Dtype::Bool;
    const PLAIN: bool = true;
    fn to_elem(self) -> Elem {
        Elem::B(self)
    }
    fn from_elem(e: Elem) -> Self {
        matches!(crate::cast::convert(e, Dtype::Bool), Elem::B(true))
    }
}
