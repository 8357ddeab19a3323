//! Checked sizes: element counts, byte counts and row-major strides of
//! concrete shapes, with the one element cap both backends enforce.
//!
//! Every size the interpreter, the tensor constructors, the JIT planner and
//! its buffers compute from a shape goes through here, so a shape whose
//! element or byte count overflows (or exceeds [`MAX_ELEMS`]) is a typed
//! [`SizeError`] everywhere instead of a wrapped product (a too-small
//! buffer that a kernel then writes past) or an abort on an impossible
//! allocation.
//!
//! The rule for empty tensors (a dim is 0, Section 2 §16 opt-in `α ≥ 0`):
//! a shape with a 0 dim has 0 elements and 0 bytes whatever its other dims,
//! so `[2^40, 0]` is a legal input. What is capped is every tensor an
//! operation *produces*: `sum` of `[2^40, 0]` over axis 1 would produce
//! `2^40` elements and is a [`SizeError`], even though its input is empty.

use crate::Dtype;

/// The most elements a tensor may have, in both backends (the interpreter
/// holds every element decoded, the JIT allocates every value's buffer):
/// 2^31. Bytes of such a tensor (at most 8 per element) fit in `usize` on
/// every 64-bit target.
pub const MAX_ELEMS: usize = 1 << 31;

/// A shape whose element count overflows or exceeds [`MAX_ELEMS`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shape {shape:?} has {} elements, more than the cap of {cap} (tc_core::size::MAX_ELEMS)", count_text(.elems))]
pub struct SizeError {
    /// The offending shape (for a byte count, `[elements]`).
    pub shape: Vec<usize>,
    /// Its exact element count, `None` when even that overflows `i128`.
    pub elems: Option<u128>,
    /// The cap ([`MAX_ELEMS`]).
    pub cap: usize,
}

fn count_text(elems: &Option<u128>) -> String {
    match elems {
        Some(n) => n.to_string(),
        None => "over 2^127".to_string(),
    }
}

fn error(shape: &[usize]) -> SizeError {
    // The exact count by the volume rule (a usize dim is never negative,
    // so the volume is `None` only past i128).
    let elems = volume(shape.iter().map(|&d| d as i128)).map(|n| n as u128);
    SizeError {
        shape: shape.to_vec(),
        elems,
        cap: MAX_ELEMS,
    }
}

/// The element count of `shape` (1 for `[]`), at most [`MAX_ELEMS`].
///
/// A shape with a 0 dim has 0 elements, however large its other dims (the
/// zero is found before any product is formed, so `[2^40, 2^40, 0]` is 0,
/// not an overflow).
pub fn numel(shape: &[usize]) -> Result<usize, SizeError> {
    if shape.contains(&0) {
        return Ok(0);
    }
    match shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
        Some(n) if n <= MAX_ELEMS => Ok(n),
        _ => Err(error(shape)),
    }
}

/// The exact product of `dims`, a shape's volume (Section 2 §10): 0 when
/// any dim is 0, whatever the others, else the checked product; `None`
/// when a dim is negative or the product overflows `i128`. Multiplying in
/// order is not enough: a prefix may overflow before a 0 is reached (the
/// fuzzer's seed 4314976623: `[2^31, 2^32 + 2, 0, 0]`, whose volume is 0,
/// was refused as a reshape operand by both backends).
pub fn volume(dims: impl IntoIterator<Item = i128>) -> Option<i128> {
    let (mut acc, mut zero) = (Some(1i128), false);
    for d in dims {
        if d < 0 {
            return None;
        }
        zero |= d == 0;
        acc = acc.and_then(|a| a.checked_mul(d));
    }
    if zero {
        Some(0)
    } else {
        acc
    }
}

/// The product of some axes of a value (a window's taps, a convolution's
/// spatial extent): an index extent, never an allocation, so no cap and
/// no error. Saturating: when the whole value is within [`MAX_ELEMS`] the
/// product is exact; when the value is empty through another axis it may
/// be huge (`[0, 2^32]`'s spatial extent is 2^32), and every loop over it
/// then runs inside a loop over that empty axis (found by the fuzzer,
/// seed 104294972713: a convolution of an empty input with a 2^32 + 1 long
/// axis refused for size in the JIT, computed empty by the interpreter).
pub fn extent(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
}

/// The storage bytes of `numel` elements of `dtype` (Section 2 §5 layout:
/// I4 packs two per byte, rounding up), for a count within [`MAX_ELEMS`].
pub fn bytes(dtype: Dtype, numel: usize) -> Result<usize, SizeError> {
    if numel > MAX_ELEMS {
        return Err(error(&[numel]));
    }
    let (num, den) = dtype.byte_size();
    numel
        .checked_mul(num)
        .map(|b| b.div_ceil(den))
        .ok_or_else(|| error(&[numel]))
}

/// [`numel`] then [`bytes`]: the storage bytes of a `dtype` tensor of `shape`.
pub fn shape_bytes(dtype: Dtype, shape: &[usize]) -> Result<usize, SizeError> {
    bytes(dtype, numel(shape)?).map_err(|_| error(shape))
}

/// Row-major element strides of `shape` (the last axis has stride 1).
///
/// For a non-empty shape within [`MAX_ELEMS`] every stride is at most the
/// element count, so nothing overflows. For an empty shape no element is
/// ever addressed, so a stride whose product would overflow (`[0, 2^40,
/// 2^40]`) is given as 0: any value is correct, and 0 keeps later index
/// arithmetic in range.
pub fn strides(shape: &[usize]) -> Result<Vec<usize>, SizeError> {
    let empty = numel(shape)? == 0;
    let mut st = vec![0usize; shape.len()];
    let mut acc = Some(1usize);
    for d in (0..shape.len()).rev() {
        st[d] = match acc {
            Some(a) => a,
            None if empty => 0,
            None => return Err(error(shape)),
        };
        acc = acc.and_then(|a| a.checked_mul(shape[d]));
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_caps() {
        assert_eq!(numel(&[]), Ok(1));
        assert_eq!(numel(&[3, 4]), Ok(12));
        assert_eq!(numel(&[1 << 40, 0]), Ok(0));
        assert_eq!(numel(&[1 << 40, 1 << 40, 0]), Ok(0));
        assert_eq!(numel(&[0, 1 << 62]), Ok(0));
        assert_eq!(numel(&[MAX_ELEMS]), Ok(MAX_ELEMS));
        let e = numel(&[MAX_ELEMS, 2]).unwrap_err();
        assert_eq!(e.elems, Some(1 << 32));
        assert_eq!(e.cap, MAX_ELEMS);
        // 65536^4 = 2^64 wraps to 0 in unchecked usize arithmetic.
        let e = numel(&[65536; 4]).unwrap_err();
        assert_eq!(e.elems, Some(1u128 << 64));
        assert!(e.to_string().contains("18446744073709551616"), "{e}");
        assert_eq!(numel(&[usize::MAX; 3]).unwrap_err().elems, None);
    }

    #[test]
    fn bytes_and_strides() {
        assert_eq!(bytes(Dtype::I4, 3), Ok(2));
        assert_eq!(bytes(Dtype::I64, MAX_ELEMS), Ok(MAX_ELEMS * 8));
        assert!(bytes(Dtype::I8, MAX_ELEMS + 1).is_err());
        assert_eq!(shape_bytes(Dtype::F32, &[1 << 40, 0]), Ok(0));
        assert!(shape_bytes(Dtype::F32, &[1 << 21; 3]).is_err());
        assert_eq!(strides(&[2, 3, 4]), Ok(vec![12, 4, 1]));
        assert_eq!(strides(&[]), Ok(vec![]));
        assert_eq!(strides(&[0, 1 << 40, 1 << 40]), Ok(vec![0, 1 << 40, 1]));
        assert_eq!(strides(&[5, 0, 1 << 62, 4]), Ok(vec![0, 0, 4, 1]));
        assert!(strides(&[1 << 20, 1 << 20]).is_err());
    }
}
