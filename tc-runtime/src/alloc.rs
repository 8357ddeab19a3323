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

/// `words` zeroed words, or `OutOfMemory`.
///
/// Zeroed by the allocator (`calloc`, so a large buffer is fresh `mmap`
/// pages nobody has touched yet), never by a write loop: the pool's
/// huge-page advice and first-touch placement rely on that.
pub fn zeroed_words(words: usize) -> Result<Vec<u64>> {
    if words == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<u64>(words).map_err(|_| refused::<u64>(words))?;
    // SAFETY: `layout` has a non-zero size (`words > 0`, checked above) as
    // `alloc_zeroed` requires.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    if ptr.is_null() {
        return Err(refused::<u64>(words));
    }
    // SAFETY: `ptr` was just allocated by the global allocator with the
    // layout of `[u64; words]` (so capacity `words` and u64's alignment
    // match what `Vec<u64>` would free it with), and all `words` elements
    // are initialised: zero bytes are a valid u64.
    Ok(unsafe { Vec::from_raw_parts(ptr, words, words) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_request_is_a_typed_error() {
        // isize::MAX bytes can never be allocated: the layout is refused.
        let e = zeroed_words(usize::MAX / 8).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
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
        }
    }

    #[test]
    fn collect_keeps_order_and_the_first_error() {
        assert_eq!(collect(3, 0..3).unwrap(), vec![0, 1, 2]);
        let r = try_collect(3, [Ok(1), Err(Error::UnknownFunction("x".into())), Ok(3)]);
        assert!(matches!(r, Err(Error::UnknownFunction(_))));
    }
}
