//! Read-only file mappings that tensor storage can live in
//! ([`crate::safetensors_io::load_safetensors_mapped`], issue #15).
//!
//! Why: reading a model into fresh memory costs a page fault and a zeroed
//! page per 4 KiB before the copy. On the 2 vCPU AMD EPYC VM of issue #15
//! that was 52–70 ms for all-MiniLM-L6-v2's 91 MB, most of a cold start,
//! against 2–3 ms to map the file, whose pages the page cache already
//! holds (candle and ONNX Runtime map their weights the same way).
//!
//! A mapping is only ever read: it is mapped `PROT_READ`, and a tensor
//! whose storage is mapped is copied before [`crate::Tensor::update_slice`]
//! writes into it. What no check can give is that the file stays as it was
//! while mapped, which is why the loader is an `unsafe fn`.

use std::sync::Arc;

/// A whole file mapped read-only (`munmap`ed when the last region on it
/// is dropped).
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only memory that lives until `drop`; shared
// references to it race on nothing, from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send` just above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `file` (`len` bytes, at least 1) read-only.
    ///
    /// # Safety
    /// The file must not be written or truncated while the mapping lives
    /// (the bytes read through it would change under shared borrows, or
    /// fault).
    // SAFETY: (contract) passed on by `load_safetensors_mapped`'s caller.
    #[cfg(unix)]
    pub(crate) unsafe fn of(file: &std::fs::File, len: usize) -> std::io::Result<Mapping> {
        use std::os::unix::io::AsRawFd;
        if len == 0 {
            return Err(std::io::Error::other("an empty file is not mapped"));
        }
        // SAFETY: a fresh private read-only mapping of an open file: no
        // existing memory is affected; the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr as *const u8,
            len,
        })
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes from `ptr` are mapped readable until `drop`
        // (established by `of`), and never written while mapped (its
        // contract), so this shared view is valid for the borrow of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: `ptr`/`len` are the mapping `of` made; no borrow of it
        // outlives `self` (regions hold the `Arc` whose last drop this is).
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// Whole 8-byte words of a mapping: the storage of a mapped tensor.
#[derive(Debug)]
pub(crate) struct Region {
    map: Arc<Mapping>,
    /// Byte offset in the mapping, a multiple of 8.
    offset: usize,
    /// Words from there, inside the mapping.
    words: usize,
}

impl Region {
    /// `nbytes` bytes of `map` from `offset`, when they are whole aligned
    /// words inside it (`None` otherwise: the tensor is then copied).
    pub(crate) fn new(map: &Arc<Mapping>, offset: usize, nbytes: usize) -> Option<Region> {
        let end = offset.checked_add(nbytes)?;
        let aligned = (map.ptr as usize).checked_add(offset)?.is_multiple_of(8);
        (aligned && nbytes.is_multiple_of(8) && end <= map.len).then(|| Region {
            map: map.clone(),
            offset,
            words: nbytes / 8,
        })
    }

    /// Gives the resident pages wholly inside this region back to the
    /// kernel. The mapping stays: a later read faults the page in again
    /// from the file, with the same bytes (the mapping is private and
    /// never written, and the loader's contract keeps the file as it
    /// was), so nothing any borrow sees changes. Only memory use does.
    pub(crate) fn release_pages(&self) {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `sysconf` reads a constant of the system.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .ok()
                .filter(|p| p.is_power_of_two())
                .unwrap_or(4096);
            let start = self.map.ptr as usize + self.offset;
            let (lo, hi) = (
                start.next_multiple_of(page),
                (start + self.words * 8) / page * page,
            );
            if hi > lo {
                // MADV_DONTNEED on pages of a private mapping drops them
                // from the page tables; as these were never written, the
                // next access reads the unchanged file again (doc comment).
                // SAFETY: `[lo, hi)` is whole pages inside this private,
                // read-only file mapping, alive while `self` is.
                unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
            }
        }
    }

    /// The words.
    pub(crate) fn words(&self) -> &[u64] {
        let bytes = &self.map.bytes()[self.offset..self.offset + self.words * 8];
        // SAFETY: `bytes` is 8-byte aligned and holds `words` whole words
        // (checked by `new`); every bit pattern is a valid u64; the slice
        // borrows `self`, which holds the mapping.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u64>(), self.words) }
    }
}
