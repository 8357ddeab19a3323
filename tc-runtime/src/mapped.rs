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
        if len == 0 {
            return Err(std::io::Error::other("an empty file is not mapped"));
        }
        // SAFETY: the file stays as it is while mapped (the contract).
        let ptr = unsafe { map_read_only(file, len) }?;
        Ok(Mapping { ptr, len })
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
            unmap(self.ptr, self.len)
        }
    }
}

/// The `len ≥ 1` bytes of `file` mapped private and read-only (`mmap`).
///
/// # Safety
/// The file must not be written or truncated while the mapping lives.
#[cfg(all(unix, not(miri)))]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
unsafe fn map_read_only(file: &std::fs::File, len: usize) -> std::io::Result<*const u8> {
    use std::os::unix::io::AsRawFd;
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
    Ok(ptr as *const u8)
}

/// Under Miri, which maps no files: the file's `len ≥ 1` bytes read into
/// an allocation of that length on a page boundary, as `mmap` places them.
/// Read once, where a mapping reads them on demand: the same bytes, since
/// the file stays as it is while mapped (the contract). Everything built on
/// the mapping (regions, tensors viewing it, `release_pages`) is the same
/// code as outside Miri.
///
/// # Safety
/// As the mapping's.
#[cfg(all(unix, miri))]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
unsafe fn map_read_only(file: &std::fs::File, len: usize) -> std::io::Result<*const u8> {
    use std::os::unix::fs::FileExt;
    let layout = page_layout(len)?;
    // SAFETY: `layout` is not zero-sized (`len ≥ 1`).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(std::io::ErrorKind::OutOfMemory.into());
    }
    // SAFETY: `ptr` holds `len` zeroed bytes, just allocated and not yet
    // shared.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
    if let Err(e) = file.read_exact_at(bytes, 0) {
        // SAFETY: allocated just above with `layout`, no longer borrowed.
        unsafe { std::alloc::dealloc(ptr, layout) };
        return Err(e);
    }
    Ok(ptr.cast_const())
}

/// The allocation standing in for a mapping under Miri: `len` bytes on a
/// page boundary.
#[cfg(all(unix, miri))]
fn page_layout(len: usize) -> std::io::Result<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(len, 4096).map_err(std::io::Error::other)
}

/// Undo [`map_read_only`] (`munmap`; under Miri, free its allocation).
///
/// # Safety
/// `ptr`, `len` are a mapping `map_read_only` made, not yet undone, and no
/// borrow of its bytes is left.
#[cfg(unix)]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
unsafe fn unmap(ptr: *const u8, len: usize) {
    #[cfg(not(miri))]
    // SAFETY: the mapping `map_read_only` made (the contract).
    unsafe {
        libc::munmap(ptr as *mut libc::c_void, len);
    }
    #[cfg(miri)]
    if let Ok(layout) = page_layout(len) {
        // SAFETY: the allocation `map_read_only` made with this layout (the
        // same `len` gives the same one) (the contract).
        unsafe { std::alloc::dealloc(ptr.cast_mut(), layout) };
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
            let base = self.map.ptr.wrapping_add(self.offset);
            let start = base as usize;
            let (lo, hi) = (
                start.next_multiple_of(page),
                (start + self.words * 8) / page * page,
            );
            if hi > lo {
                // MADV_DONTNEED on pages of a private mapping drops them
                // from the page tables; as these were never written, the
                // next access reads the unchanged file again (doc comment).
                // SAFETY: `[lo, hi)` is whole pages inside this private,
                // read-only file mapping (`base` is inside it), alive while
                // `self` is; the advice leaves its contents as they were,
                // and writes nothing.
                unsafe {
                    crate::huge::madvise(
                        base.wrapping_add(lo - start).cast_mut(),
                        hi - lo,
                        libc::MADV_DONTNEED,
                    )
                };
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A file mapped whole, under Miri too (where the mapping is an
    /// allocation holding the file's bytes): its bytes, regions of whole
    /// aligned words inside it and none elsewhere, pages given back
    /// without a byte changing, the mapping kept by its regions.
    #[test]
    fn regions_read_the_file_and_stay_inside_it() {
        let path = std::env::temp_dir().join(format!("tc-mapped-{}", std::process::id()));
        // Three pages and a ragged tail.
        let data: Vec<u8> = (0..3 * 4096 + 13).map(|i| (i * 31 % 253) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: the file is this test's own, unchanged until removed
        // below, after the mapping is gone.
        let map = Arc::new(unsafe { Mapping::of(&file, data.len()) }.unwrap());
        assert_eq!(map.bytes(), &data[..]);
        let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
        let len = data.len();
        assert!(Region::new(&map, 3, 16).is_none(), "not aligned");
        assert!(Region::new(&map, 8, 12).is_none(), "not whole words");
        assert!(Region::new(&map, len - 5, 8).is_none(), "past the end");
        assert!(Region::new(&map, usize::MAX - 7, 8).is_none(), "overflow");
        let all = Region::new(&map, 0, len / 8 * 8).expect("whole words");
        let tail = Region::new(&map, 2 * 4096 + 8, 8).unwrap();
        drop(map);
        for r in [&all, &tail] {
            r.release_pages();
        }
        assert_eq!(all.words().len(), len / 8);
        assert!(all
            .words()
            .iter()
            .enumerate()
            .all(|(i, &w)| w == word(8 * i)));
        assert_eq!(tail.words(), [word(2 * 4096 + 8)]);
        drop((all, tail));
        // SAFETY: as above.
        assert!(unsafe { Mapping::of(&file, 0) }.is_err(), "empty");
        let _ = std::fs::remove_file(&path);
    }
}
