//! Fallible allocation of value-sized buffers.
//!
//! A result within the element cap ([`tc_core::size::MAX_ELEMS`]) can still
//! be more memory than the machine has: 2^31 decoded interpreter elements
//! are 32 GiB. An infallible `Vec` allocation aborts the whole process
//! there, which a safe call must never do (brief: "runtime never panics on
//! user input"), so every buffer whose size follows a tensor's element
//! count is allocated here and a refusal becomes [`Error::OutOfMemory`].
//! Small fixed-size buffers (index vectors of rank length) stay ordinary.
//!
//! What this cannot catch: an allocation the OS grants lazily and later
//! cannot back (Linux overcommit); the OOM killer is outside the process.

use std::alloc::Layout;

use crate::error::{Error, Result};

fn refused<T>(count: usize) -> Error {
    Error::OutOfMemory {
        bytes: count.saturating_mul(std::mem::size_of::<T>()),
    }
}

/// An empty `Vec` with room for exactly `count` elements, or `OutOfMemory`.
pub fn with_capacity<T>(count: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(count)
        .map_err(|_| refused::<T>(count))?;
    Ok(v)
}

/// `count` copies of `value`, or `OutOfMemory`.
pub fn filled<T: Clone>(count: usize, value: T) -> Result<Vec<T>> {
    let mut v = with_capacity(count)?;
    v.resize(count, value);
    Ok(v)
}

/// The items of `it` (at most `count` of them are expected; more are still
/// collected, with the `Vec`'s ordinary growth) in a buffer reserved
/// fallibly up front.
pub fn collect<T>(count: usize, it: impl IntoIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = with_capacity(count)?;
    v.extend(it);
    Ok(v)
}

/// Like [`collect`] for fallible items: the first error wins.
pub fn try_collect<T>(count: usize, it: impl IntoIterator<Item = Result<T>>) -> Result<Vec<T>> {
    let mut v = with_capacity(count)?;
    for x in it {
        v.push(x?);
    }
    Ok(v)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
}

/// Element types whose all-zero bit pattern is a valid value (`0`,
/// `+0.0`), so a buffer zeroed by the allocator is initialised (sealed:
/// only the types listed here).
pub trait ZeroBits: Copy + sealed::Sealed {}
impl ZeroBits for u64 {}
impl ZeroBits for f32 {}
impl ZeroBits for u8 {}

/// `count` zeroed elements, or `OutOfMemory`.
///
/// Zeroed by the allocator (`calloc`, so a large buffer is fresh `mmap`
/// pages nobody has touched yet), never by a write loop: huge-page advice
/// given before the first write ([`crate::huge::advise`]) and
/// first-touch placement rely on that.
pub fn zeroed<T: ZeroBits>(count: usize) -> Result<Vec<T>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<T>(count).map_err(|_| refused::<T>(count))?;
    // SAFETY: `layout` has a non-zero size (`count > 0`, checked above, and
    // every `ZeroBits` type is non-zero-sized) as `alloc_zeroed` requires.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(refused::<T>(count));
    }
    // SAFETY: `ptr` was just allocated by the global allocator with the
    // layout of `[T; count]` (so capacity `count` and T's alignment match
    // what `Vec<T>` would free it with), and all `count` elements are
    // initialised: zero bytes are a valid `T` (`ZeroBits`).
    Ok(unsafe { Vec::from_raw_parts(ptr, count, count) })
}

/// `words` zeroed words, or `OutOfMemory` ([`zeroed`]).
pub fn zeroed_words(words: usize) -> Result<Vec<u64>> {
    zeroed(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_request_is_a_typed_error() {
        // isize::MAX bytes can never be allocated: the layout is refused.
        let e = zeroed_words(usize::MAX / 8).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        let e = zeroed::<f32>(usize::MAX / 4).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        // A valid layout of 2^59 bytes: the allocator refuses it, but Miri
        // stops at a request beyond its host's memory instead of failing
        // it, so there only the two refusals above (the layout's) run.
        if cfg!(miri) {
            return;
        }
        let e = with_capacity::<u128>(usize::MAX / 32).unwrap_err();
        assert!(
            matches!(e, Error::OutOfMemory { bytes } if bytes > 0),
            "{e}"
        );
    }

    #[test]
    fn zeroed_words_are_zero_and_sized() {
        for n in [0, 1, 7, 4096] {
            let v = zeroed_words(n).unwrap();
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&w| w == 0));
            // +0.0, not -0.0: every bit clear.
            let f = zeroed::<f32>(n).unwrap();
            assert_eq!((f.len(), f.capacity()), (n, n));
            assert!(f.iter().all(|x| x.to_bits() == 0));
        }
    }

    #[test]
    fn collect_keeps_order_and_the_first_error() {
        assert_eq!(collect(3, 0..3).unwrap(), vec![0, 1, 2]);
        let r = try_collect(3, [Ok(1), Err(Error::UnknownFunction("x".into())), Ok(3)]);
        assert!(matches!(r, Err(Error::UnknownFunction(_))));
    }
}
