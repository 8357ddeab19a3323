//! Giving back the resident memory that only a program's setup used.
//!
//! Why: a process's peak resident set counts every page it touched, and
//! setup touches many it never needs again. Loading `libLLVM` (relocating
//! it and running its static constructors) leaves about 40 MiB of its file
//! resident before `main` runs, compiling or linking kernels adds more, a
//! mapped GGUF file's metadata (a tokenizer's vocabulary and merges) is
//! read once, and allocations freed after setup (a tokenizer's build, the
//! compiler's own heap) stay in the allocator's arenas. For SmolLM2-135M
//! (a 98 MB file) the file pages alone were 54 MiB of the peak.
//! [`release_file_pages`] and [`trim_heap`] give those pages back, so that
//! what stays resident is what the generation reads; [`share_one_heap`]
//! lets [`trim_heap`] reach what every thread freed.
//!
//! Nothing is lost: a page given back by [`release_file_pages`] is an
//! unmodified copy of its file, and the next read of it maps it again from
//! the page cache (a minor fault, or a read from disk if the kernel
//! dropped it meanwhile), exactly as the first read did.

/// What [`release_file_pages`] gave back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Mappings advised.
    pub mappings: usize,
    /// Bytes they had resident before.
    pub bytes: usize,
}

/// One mapping of `/proc/self/smaps`: what decides whether its resident
/// pages are plain copies of its file.
#[derive(Debug, Default)]
struct Entry {
    start: usize,
    end: usize,
    /// `r`, not `w`, `p`: a private mapping nothing can write without first
    /// making it writable.
    read_only_private: bool,
    /// Backed by a file (a path and an inode), not anonymous memory or a
    /// kernel area (`[vdso]`, `[heap]`, ...).
    file: bool,
    rss_kb: usize,
    /// Pages the process modified (private copies), resident or swapped.
    private_copies_kb: usize,
    /// Locked or special (`VmFlags` `lo`, `io`, `pf`): left alone.
    special: bool,
}

impl Entry {
    /// Are the resident pages plain copies of the file, and are there any?
    fn releasable(&self) -> bool {
        self.read_only_private
            && self.file
            && !self.special
            && self.private_copies_kb == 0
            && self.rss_kb > 0
            && self.end > self.start
    }
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
/// The mappings of an smaps text (`/proc/self/smaps`'s format).
fn parse_smaps(text: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((a, b)) = first.split_once('-') {
            // A header: `start-end perms offset dev inode [path]`.
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                let perms = f.next().unwrap_or("").as_bytes();
                let _offset = f.next();
                let _dev = f.next();
                let inode = f.next().unwrap_or("0");
                let path = f.next().unwrap_or("");
                out.push(Entry {
                    start,
                    end,
                    read_only_private: perms.len() == 4
                        && perms[0] == b'r'
                        && perms[1] == b'-'
                        && perms[3] == b'p',
                    file: inode != "0" && path.starts_with('/'),
                    ..Entry::default()
                });
                continue;
            }
        }
        let Some(e) = out.last_mut() else { continue };
        let kb = || f.clone().next().and_then(|v| v.parse::<usize>().ok());
        match first {
            "Rss:" => e.rss_kb = kb().unwrap_or(0),
            // Unknown counts as modified: such a mapping is left alone.
            "Anonymous:" | "Swap:" => e.private_copies_kb += kb().unwrap_or(1),
            "VmFlags:" => e.special = f.any(|flag| matches!(flag, "lo" | "io" | "pf")),
            _ => {}
        }
    }
    out
}

/// Give back every resident page of this process's read-only private file
/// mappings that is an unmodified copy of its file: the code and read-only
/// data of the executable and its shared libraries (`libLLVM`'s above all)
/// and read-only mapped files (a GGUF model's pages read so far). A page
/// used again is mapped again from the page cache on its next read.
///
/// Call it once setup is done and before the work that should find
/// memory free: after a model is loaded and its kernels are compiled, and
/// before its weights are read (pages in use are mapped again at the cost
/// of a fault each, which is cheap once but not every step). A mapping
/// with any modified page (a relocated segment, a debugger's breakpoint)
/// is left alone, as is a locked one. Linux only; elsewhere it does
/// nothing.
///
/// # Safety
/// While it runs, no thread may unmap a file mapping of this process (a
/// `dlclose`, or dropping the last handle on a mapped file's tensors):
/// its addresses could be reused by other memory, which this would then
/// drop. Nor may any thread make a private file mapping of this
/// process writable and write to it (as the dynamic loader does when it
/// relocates the text of a library that `dlopen` loads meanwhile, or a
/// debugger setting a breakpoint): a page modified after it was checked
/// here would be dropped, and read back from the file unmodified.
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
pub unsafe fn release_file_pages() -> Released {
    #[cfg_attr(any(miri, not(target_os = "linux")), allow(unused_mut))]
    let mut done = Released::default();
    // Under Miri `/proc/self/smaps` lists the interpreter's own mappings,
    // none of them the interpreted program's: nothing there is its to give.
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let Ok(text) = std::fs::read_to_string("/proc/self/smaps") else {
            return done;
        };
        for e in parse_smaps(&text).iter().filter(|e| e.releasable()) {
            // `[start, end)` is a mapping of this process (smaps just
            // listed it), private, read-only and backed by a file, with no
            // page the process modified (no anonymous or swapped page):
            // dropping its pages loses nothing, each reads back from the
            // file unchanged. Nothing writes or unmaps it meanwhile.
            // SAFETY: as just said, with this function's contract.
            let r = unsafe {
                libc::madvise(
                    e.start as *mut libc::c_void,
                    e.end - e.start,
                    libc::MADV_DONTNEED,
                )
            };
            if r == 0 {
                done.mappings += 1;
                done.bytes += e.rss_kb * 1024;
            }
        }
    }
    done
}

/// Return the allocator's free memory to the kernel (glibc's
/// `malloc_trim`): after setup freed large temporary structures (a
/// tokenizer's build, the compiler's heap), their pages otherwise stay
/// resident in the arenas until reused. True when memory was released.
/// Only with glibc; elsewhere, and under Miri (whose allocations are its
/// own, not glibc's), it does nothing.
pub fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
    {
        // SAFETY: `malloc_trim` only releases free memory of the allocator
        // that every allocation here goes through; it is thread-safe
        // (each arena is locked while trimmed).
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", not(miri))))]
    false
}

/// The system's page size (4 KiB where it cannot be read).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn page_size() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: `sysconf` reads a constant of the system.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(p) = usize::try_from(p) {
            if p.is_power_of_two() {
                return p;
            }
        }
    }
    4096
}

/// Does private anonymous memory (the heap, or the allocator's own
/// mappings: readable, writable, no file) cover `[lo, hi)` without a gap,
/// according to `/proc/self/maps`' text `maps`?
#[cfg_attr(any(miri, not(target_os = "linux")), allow(dead_code))]
fn anonymous_private(maps: &str, lo: usize, hi: usize) -> bool {
    let mut at = lo;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= at || a > at {
            continue;
        }
        let (_offset, _dev, inode) = (f.next(), f.next(), f.next().unwrap_or("?"));
        let path = f.next().unwrap_or("");
        let anon = inode == "0" && (path.is_empty() || path == "[heap]");
        if !(perms.starts_with("rw") && perms.ends_with('p') && anon) {
            return false;
        }
        at = b;
        if at >= hi {
            return true;
        }
    }
    false
}

/// The whole pages of each of `bufs` that hold only zero bytes, given
/// back ([`crate::Tensor::release_zero_pages`],
/// [`crate::Tensor::release_zero_pages_of`]); the bytes given back.
/// `/proc/self/maps` is read once, for the first buffer with a whole page:
/// the kernel formats every mapping of the process for each read, and a
/// KV cache's tensors (60 for SmolLM2) each read it once, in the
/// scheduler's thread between two steps. One snapshot serves them all:
/// each buffer was allocated before it, and memory a live buffer lies in
/// is neither unmapped nor remapped while it is held.
pub(crate) fn release_zero_pages<'w>(bufs: impl IntoIterator<Item = &'w mut [u64]>) -> usize {
    #[cfg(target_os = "linux")]
    {
        let page = page_size();
        #[cfg(not(miri))]
        let mut maps: Option<Option<String>> = None;
        let mut released = 0;
        for words in bufs {
            let start = words.as_ptr() as usize;
            let end = start + std::mem::size_of_val(words);
            let (lo, hi) = (start.next_multiple_of(page), end / page * page);
            if hi <= lo {
                continue;
            }
            // Under Miri `/proc/self/maps` describes the interpreter, not
            // the interpreted program, whose heap is private anonymous
            // memory.
            #[cfg(not(miri))]
            {
                let text =
                    maps.get_or_insert_with(|| std::fs::read_to_string("/proc/self/maps").ok());
                let Some(text) = text.as_deref() else {
                    return released;
                };
                if !anonymous_private(text, lo, hi) {
                    continue;
                }
            }
            // SAFETY: `[lo, hi)` is the whole pages inside `words` (from
            // its bounds above), in private anonymous memory (checked
            // just above; under Miri the interpreted heap always is).
            released += unsafe { zero_pages_given_back(words, page, (lo, hi)) };
        }
        released
    }
    #[cfg(not(target_os = "linux"))]
    {
        drop(bufs);
        0
    }
}

/// [`release_zero_pages`] of one buffer: its whole pages `[lo, hi)` that
/// hold only zeros, given back; the bytes given back.
///
/// # Safety
/// `lo` and `hi` are multiples of `page` (the system's page size) with
/// `[lo, hi)` inside `words`, and that range lies in private anonymous
/// memory, where a page given back reads as zeros again.
#[cfg(target_os = "linux")]
// SAFETY: (contract) met by `release_zero_pages`, its only caller.
unsafe fn zero_pages_given_back(words: &mut [u64], page: usize, (lo, hi): (usize, usize)) -> usize {
    let start = words.as_ptr() as usize;
    let base = words.as_mut_ptr().cast::<u8>();
    let per_page = page / 8;
    let mut released = 0;
    let mut run: Option<usize> = None;
    let mut give = |from: usize, to: usize| {
        // `[from, to)` is whole pages inside `words` (`base` is its
        // start), which this function borrows exclusively, in private
        // anonymous memory (this function's contract), and every byte there
        // is zero: MADV_DONTNEED replaces those pages by
        // zero-fill-on-demand ones, so every later read sees the same
        // zeros.
        // SAFETY: as just said; the allocator's bookkeeping lies
        // outside `words`.
        if unsafe { drop_zero_pages(base.wrapping_add(from - start), to - from) } == 0 {
            released += to - from;
        }
    };
    for p in (lo..hi).step_by(page) {
        let i = (p - start) / 8;
        let zero = words[i..i + per_page].iter().all(|&w| w == 0);
        match (zero, run) {
            (true, None) => run = Some(p),
            (false, Some(r)) => {
                give(r, p);
                run = None;
            }
            _ => {}
        }
    }
    if let Some(r) = run {
        give(r, hi);
    }
    released
}

/// `madvise(MADV_DONTNEED)` over the `len` bytes from `p`: on private
/// anonymous memory, pages that read as zeros from then on. Under Miri,
/// which has no such system call, the same effect in its place: the range
/// written with zeros, which makes a range outside the caller's buffer an
/// error there.
///
/// # Safety
/// `[p, p + len)` is whole pages of private anonymous memory inside a
/// buffer `p` may write, with no one else using it during the call, and
/// every byte there is already zero.
#[cfg(target_os = "linux")]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
unsafe fn drop_zero_pages(p: *mut u8, len: usize) -> libc::c_int {
    #[cfg(not(miri))]
    // SAFETY: the contract: zero pages of private anonymous memory read as
    // the same zeros once dropped.
    unsafe {
        libc::madvise(p.cast::<libc::c_void>(), len, libc::MADV_DONTNEED)
    }
    #[cfg(miri)]
    {
        // SAFETY: `len` writable bytes at `p` (the contract).
        unsafe { std::ptr::write_bytes(p, 0, len) };
        0
    }
}

/// Have every thread allocate from one heap (glibc's `M_ARENA_MAX` = 1),
/// so that [`trim_heap`] can give back what any of them freed: glibc gives
/// each thread that allocates an arena of its own, and `malloc_trim` never
/// shrinks the top of such an arena, where the buffers that a forward pass
/// run on a pool worker (a session, `tc::session`) freed then stay
/// resident (3–5 MiB after SmolLM2's 128-token prefill at 2 threads).
/// tc's threads allocate per call, not in their inner loops, so they
/// rarely wait on the shared heap's lock. Call it at the start of `main`,
/// before other threads run: a thread keeps the arena it has. True when
/// set; only with glibc, elsewhere (and under Miri) it does nothing.
pub fn share_one_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
    {
        // SAFETY: `mallopt` changes a setting of the allocator for arenas
        // made from now on; it is thread-safe and touches no memory of
        // ours.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", not(miri))))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0a00000-55d0c0b00000 r-xp 00001000 fe:00 123 /usr/bin/app
Rss:                 400 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me
7f0000000000-7f0000200000 r--p 00000000 fe:00 456 /usr/lib/libX.so
Rss:                 300 kB
Anonymous:           100 kB
Swap:                  0 kB
VmFlags: rd mr mw me ac
7f0000200000-7f0000300000 rw-p 00000000 00:00 0 
Rss:                 100 kB
Anonymous:           100 kB
VmFlags: rd wr mr mw me ac
7f0000300000-7f0000400000 r--p 00000000 fe:00 789 /models/a model.gguf
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd mr mw me
7f0000400000-7f0000500000 r-xp 00000000 fe:00 790 /usr/lib/libY.so
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  4 kB
VmFlags: rd ex mr mw me
7f0000500000-7f0000600000 r-xp 00000000 fe:00 791 /usr/lib/libZ.so
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me lo
7f0000600000-7f0000700000 r--p 00000000 fe:00 792 /usr/lib/libW.so
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd mr mw me
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
Rss:                   0 kB
Anonymous:             0 kB
VmFlags: ex
";

    #[test]
    fn only_unmodified_read_only_file_pages_are_released() {
        let e = parse_smaps(SMAPS);
        assert_eq!(e.len(), 8);
        let picked: Vec<usize> = e
            .iter()
            .filter(|e| e.releasable())
            .map(|e| e.start)
            .collect();
        // The executable's text and the mapped model (a path with a space);
        // not a relocated segment, an anonymous mapping, a mapping with a
        // swapped-out private page, a locked one, nothing resident, or a
        // kernel area.
        assert_eq!(picked, vec![0x55d0c0a00000, 0x7f0000300000]);
        assert_eq!(e[0].rss_kb, 400);
    }

    #[test]
    fn zero_pages_are_released_only_in_private_anonymous_memory() {
        let maps = "\
1000-3000 rw-p 00000000 00:00 0          [heap]
3000-5000 rw-p 00000000 00:00 0 
5000-6000 rw-s 00000000 00:05 77         /dev/shm/x
6000-7000 rw-p 00000000 fe:00 12         /tmp/file
";
        assert!(
            anonymous_private(maps, 0x1000, 0x5000),
            "heap then anonymous"
        );
        assert!(!anonymous_private(maps, 0x2000, 0x6000), "a shared mapping");
        assert!(!anonymous_private(maps, 0x6000, 0x7000), "a file");
        assert!(!anonymous_private(maps, 0x7000, 0x8000), "nothing mapped");

        // Zeroed words with some pages written: only the others go, and
        // every value reads back unchanged.
        let page = page_size();
        let n = 64 * page / 8;
        let mut t = crate::Tensor::try_zeros(tc_core::Dtype::I64, &[n]).unwrap();
        let one = crate::Tensor::from_vec(&[1], vec![7i64]).unwrap();
        for at in [0, n / 2, n - 1] {
            t.update_slice(0, at, &one).unwrap();
        }
        let released = t.release_zero_pages();
        #[cfg(target_os = "linux")]
        assert!(released >= 58 * page, "{released} bytes");
        let _ = released;
        let v = t.to_vec::<i64>().unwrap();
        assert_eq!(v.iter().filter(|&&x| x == 7).count(), 3);
        assert_eq!(
            (v[0], v[n / 2], v[n - 1], v[1], v[n / 2 + 1]),
            (7, 7, 7, 0, 0)
        );
        assert!(v.iter().all(|&x| x == 0 || x == 7));
        // A shared storage is left alone.
        let mut shared = t.clone();
        assert_eq!(shared.release_zero_pages(), 0);
    }

    #[test]
    fn releasing_keeps_contents_and_lowers_the_resident_size() {
        // A file mapped read-only, read (resident), released, read again.
        let path = std::env::temp_dir().join(format!("tc-resident-{}", std::process::id()));
        // 4 MiB; 64 KiB under Miri, which interprets every byte.
        let len = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: the file is this test's own and unchanged while mapped.
        let map = unsafe { crate::mapped::Mapping::of(&file, data.len()) }.unwrap();
        let sum = |b: &[u8]| b.iter().map(|&x| x as u64).sum::<u64>();
        let want = sum(&data);
        assert_eq!(sum(map.bytes()), want);
        // SAFETY: no thread of this test process writes a file mapping.
        let r = unsafe { release_file_pages() };
        // Nothing under Miri (see `release_file_pages`).
        #[cfg(all(target_os = "linux", not(miri)))]
        assert!(r.mappings >= 1 && r.bytes >= 4 << 20, "{r:?}");
        let _ = r;
        assert_eq!(sum(map.bytes()), want, "read back from the file");
        drop(map);
        let _ = std::fs::remove_file(&path);
        let _ = trim_heap();
    }
}
