//! Transparent huge page advice for large buffers, given only while huge
//! pages are cheap to get here.
//!
//! Why huge pages: a large operand on 2 MiB pages takes 512× fewer page
//! faults and TLB misses, and lies on physically contiguous memory, so its
//! mapping onto the physically indexed L2 is the same every run (see
//! [`crate::pool::zeroed`] and the packings in `tc-llvm`).
//!
//! Why a probe: what a huge page costs to fault depends on the machine. On
//! the AMD EPYC (Zen 4) VM of issue #15 the hypervisor takes back free
//! guest memory in 2 MiB blocks (free page reporting), and a huge page
//! can only come from such a block: faulting one cost 10–20 ms once the
//! memory had been reported (750 MiB: 7–8 s on huge pages, 0.3 s on 4 KiB
//! pages, 0.08 s on huge pages freed a moment before). GPT-2-small's
//! weight packings made its warm-up pass 3–4 s instead of 0.4 s. So the
//! whole huge pages of a buffer's length are faulted here, at once, each
//! timed: a fault slower than [`DEAR_FAULT`] (slower than faulting the
//! same 2 MiB as 4 KiB pages on that VM) counts, and after [`DEAR_AFTER`]
//! of them (one could be a preemption) the rest of the buffer and every
//! later one stay on 4 KiB pages for the life of the process. That bounds
//! the cost of learning to a few slow faults.
//!
//! A long-lived buffer filled on 4 KiB pages because huge pages were dear
//! can still end on huge pages: [`advise_filled`] advises it once written,
//! and the kernel's `khugepaged` then collapses it in the background at
//! its own pace (16 MB per 10 s by default), so a server that streams the
//! buffer for hours gets the faster reads without the warm-up paying for
//! them.
//!
//! Page size changes timing only, never a value: results do not depend on
//! the probe.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::alloc::ZeroBits;

/// The huge page size on x86-64 Linux.
pub const HUGE_PAGE: usize = 2 << 20;

/// A 2 MiB fault slower than this is dear: 2 ms is 1 GB/s, below what 4 KiB
/// faults reached on the VM that needed the probe (2.4 GB/s) and 5–10×
/// above an ordinary huge page fault (0.2–0.4 ms: zeroing 2 MiB).
pub const DEAR_FAULT: Duration = Duration::from_millis(2);

/// Dear faults after which no more huge pages are asked for.
pub const DEAR_AFTER: u32 = 2;

/// Counts dear faults; [`Probe::dear`] once there were [`DEAR_AFTER`].
#[derive(Debug)]
pub struct Probe {
    slow: AtomicU32,
    threshold: Duration,
}

impl Default for Probe {
    fn default() -> Probe {
        Probe::new()
    }
}

impl Probe {
    /// A probe that has seen no fault, counting faults over [`DEAR_FAULT`].
    pub const fn new() -> Probe {
        Probe::with_threshold(DEAR_FAULT)
    }

    /// A probe counting faults slower than `threshold`.
    pub const fn with_threshold(threshold: Duration) -> Probe {
        Probe {
            slow: AtomicU32::new(0),
            threshold,
        }
    }

    /// Record one huge page fault that took `cost`; true when huge pages
    /// are dear from now on.
    pub fn note(&self, cost: Duration) -> bool {
        if cost > self.threshold {
            self.slow.fetch_add(1, Ordering::Relaxed);
        }
        self.dear()
    }

    /// Have there been [`DEAR_AFTER`] dear faults?
    pub fn dear(&self) -> bool {
        self.slow.load(Ordering::Relaxed) >= DEAR_AFTER
    }
}

/// The process's probe.
static PROBE: Probe = Probe::new();

/// What [`advise`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// No whole huge page in the buffer, or not Linux.
    None,
    /// Huge pages are dear: the buffer is left on 4 KiB pages.
    Skipped,
    /// The buffer's whole huge pages were advised and the ones its length
    /// covers faulted.
    Huge,
    /// The faults turned out dear part way: the pages faulted so far are
    /// huge, the rest of the buffer stays on 4 KiB pages.
    Stopped,
    /// Advised once written ([`advise_filled`]): `khugepaged` may collapse
    /// it later.
    Later,
}

/// Advise the whole 2 MiB pages of `v`'s allocation onto transparent huge
/// pages and fault the ones its length covers now, timing each (see the
/// module doc); `force` advises even when huge pages are dear and never
/// stops part way (`TC_PACK_HUGE=1`). For a buffer fresh from
/// [`crate::alloc::zeroed`]: pages already touched stay as they are. The
/// contents never change.
pub fn advise<T: ZeroBits>(v: &mut Vec<T>, force: bool) -> Advice {
    #[cfg(target_os = "linux")]
    {
        advise_linux(v, force, &PROBE)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (v, force);
        Advice::None
    }
}

/// Advise the whole 2 MiB pages of `v`'s allocation onto transparent huge
/// pages without faulting any (see the module doc): for a long-lived
/// buffer already written on 4 KiB pages, which `khugepaged` may then
/// collapse. The contents never change.
pub fn advise_filled<T>(v: &Vec<T>) -> Advice {
    #[cfg(target_os = "linux")]
    {
        let (lo, hi) = whole_pages(v);
        if hi <= lo {
            return Advice::None;
        }
        let p = v.as_ptr().cast::<u8>().cast_mut();
        // SAFETY: `[lo, hi)` is rounded inward from `v`'s allocation
        // (`p` is its start), which the borrow keeps allocated for the
        // call; MADV_HUGEPAGE changes how those pages are backed, never
        // their contents, and writes nothing.
        match unsafe {
            madvise(
                p.wrapping_add(lo - p as usize),
                hi - lo,
                libc::MADV_HUGEPAGE,
            )
        } {
            0 => Advice::Later,
            _ => Advice::None,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = v;
        Advice::None
    }
}

/// The small pages of `v`, a buffer fresh from [`crate::alloc::zeroed`]
/// (or part of one), are faulted in writable by one
/// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14) instead of one fault per
/// 4 KiB as the buffer is first written: on the
/// AMD EPYC (Zen 4) VM of issue #15, where huge pages are dear, 28 MiB
/// (GPT-2-small block's weight packings) took 18.4–19.3 ms to write on
/// demand faults and 12.4–15.5 ms populated first. True when the kernel
/// populated the pages; false when it cannot (older kernels, not Linux),
/// which changes nothing. Pages already present stay as they are, and the
/// contents never change.
pub fn populate<T: ZeroBits>(v: &mut [T]) -> bool {
    #[cfg(target_os = "linux")]
    {
        const SMALL: usize = 4096;
        let p = v.as_mut_ptr().cast::<u8>();
        let start = p as usize;
        // The end of `v`'s elements, inside one allocation: cannot wrap.
        let end = start + std::mem::size_of_val(v);
        let (lo, hi) = (start.div_ceil(SMALL) * SMALL, end / SMALL * SMALL);
        if hi <= lo {
            return false;
        }
        // SAFETY: `[lo, hi)` is rounded inward from `v`'s elements (`p` is
        // the first), which the exclusive borrow keeps allocated and
        // unaliased for the call; MADV_POPULATE_WRITE only faults pages in,
        // as a write of what they hold would, never changing their contents.
        unsafe {
            madvise(
                p.wrapping_add(lo - start),
                hi - lo,
                libc::MADV_POPULATE_WRITE,
            ) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = v;
        false
    }
}

/// `madvise(2)` over the `len` bytes from `p`, or, under Miri, which has
/// no such system call, a check of that range in its place: its first and
/// last bytes are accessed as the advice would touch them (read; written
/// back unchanged for `MADV_POPULATE_WRITE`), so advice that strayed
/// outside its allocation is an error there, and the call succeeds (0).
/// Every advice given through here leaves the contents as they were
/// (`MADV_DONTNEED` only on a file mapping never written,
/// `crate::mapped`), so the rest of the program (the probe, the faulting
/// loop, the pool) runs the same code either way.
///
/// # Safety
/// `[p, p + len)` lies inside one live allocation or mapping that `p` may
/// read, and, for `MADV_POPULATE_WRITE`, write, with no one else writing
/// it during the call; the advice leaves its contents as they were.
#[cfg(target_os = "linux")]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
pub(crate) unsafe fn madvise(p: *mut u8, len: usize, advice: libc::c_int) -> libc::c_int {
    #[cfg(not(miri))]
    // SAFETY: the range is the caller's allocation and the advice leaves
    // its contents as they were (the contract).
    unsafe {
        libc::madvise(p.cast::<libc::c_void>(), len, advice)
    }
    #[cfg(miri)]
    {
        if len > 0 {
            for q in [p, p.wrapping_add(len - 1)] {
                let q = q.cast::<std::mem::MaybeUninit<u8>>();
                // SAFETY: `q` is a byte of the range, inside the caller's
                // allocation (the contract); as `MaybeUninit` it may hold
                // anything, and writing back what was read changes nothing.
                unsafe {
                    let byte = q.read_volatile();
                    if advice == libc::MADV_POPULATE_WRITE {
                        q.write_volatile(byte);
                    }
                }
            }
        }
        0
    }
}

/// The whole 2 MiB pages `[lo, hi)` inside `v`'s allocation (`hi ≤ lo`:
/// none).
#[cfg(target_os = "linux")]
fn whole_pages<T>(v: &Vec<T>) -> (usize, usize) {
    let start = v.as_ptr() as usize;
    // One live allocation of `capacity · size_of::<T>()` bytes: the sum
    // cannot wrap (an allocation never wraps the address space).
    let end = start + v.capacity() * std::mem::size_of::<T>();
    (
        start.div_ceil(HUGE_PAGE) * HUGE_PAGE,
        end / HUGE_PAGE * HUGE_PAGE,
    )
}

#[cfg(target_os = "linux")]
fn advise_linux<T: ZeroBits>(v: &mut Vec<T>, force: bool, probe: &Probe) -> Advice {
    let start = v.as_ptr() as usize;
    // Inside the allocation (see `whole_pages`): cannot wrap.
    let len_end = start + v.len() * std::mem::size_of::<T>();
    let (lo, hi) = whole_pages(v);
    if hi <= lo {
        return Advice::None;
    }
    if !force && probe.dear() {
        return Advice::Skipped;
    }
    let base = v.as_mut_ptr().cast::<u8>();
    // A failure (THP disabled) is harmless: then nothing below is a huge
    // fault, and none is dear.
    // SAFETY: `[lo, hi)` is rounded inward from `v`'s allocation (`base`
    // is its start), which the borrow keeps allocated for the call;
    // MADV_HUGEPAGE changes how those pages are backed, never their contents.
    let advised = unsafe { madvise(base.wrapping_add(lo - start), hi - lo, libc::MADV_HUGEPAGE) };
    if advised != 0 {
        return Advice::None;
    }
    let mut page = lo;
    while page < len_end.min(hi) {
        let t = std::time::Instant::now();
        // Reading the byte and writing it back changes nothing but makes the
        // kernel fault the page in for writing.
        // SAFETY: `page` is a byte of `v`'s elements (`[start, len_end)`),
        // initialised (`ZeroBits` types have no padding); `v` is exclusive.
        unsafe {
            let p = base.add(page - start);
            p.write_volatile(p.read_volatile());
        }
        if probe.note(t.elapsed()) && !force {
            let rest = page + HUGE_PAGE;
            if rest < hi {
                // SAFETY: as for the advice above, on a subrange of it.
                unsafe {
                    madvise(
                        base.wrapping_add(rest - start),
                        hi - rest,
                        libc::MADV_NOHUGEPAGE,
                    );
                }
            }
            return Advice::Stopped;
        }
        page += HUGE_PAGE;
    }
    Advice::Huge
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dear_after_two_slow_faults_not_after_fast_ones() {
        let p = Probe::new();
        for _ in 0..100 {
            assert!(!p.note(Duration::from_micros(300)));
        }
        assert!(
            !p.note(DEAR_FAULT * 5),
            "one slow fault may be a preemption"
        );
        assert!(
            !p.note(DEAR_FAULT),
            "at the threshold is not slower than it"
        );
        assert!(p.note(DEAR_FAULT * 2));
        assert!(p.dear() && p.note(Duration::ZERO), "dear stays dear");
    }

    // Every word of 6 MiB buffers, several times over: too slow for Miri,
    // which runs `advice_stays_inside_the_buffer_and_changes_nothing`.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn a_dear_probe_skips_unless_forced_and_contents_never_change() {
        let dear = Probe::new();
        dear.note(DEAR_FAULT * 3);
        dear.note(DEAR_FAULT * 3);
        let words = 3 * HUGE_PAGE / 8;
        let mut v = crate::alloc::zeroed::<u64>(words).unwrap();
        assert_eq!(advise_linux(&mut v, false, &dear), Advice::Skipped);
        let cheap = Probe::new();
        let did = advise_linux(&mut v, false, &cheap);
        // Stopped only if this machine's faults were dear twice.
        assert!(matches!(did, Advice::Huge | Advice::None | Advice::Stopped));
        assert!(v.iter().all(|&w| w == 0));
        // Forced on a dear probe, over pages that already hold data.
        let mut w = crate::alloc::zeroed::<u64>(words).unwrap();
        w.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as u64 * 0x9e37);
        assert!(matches!(
            advise_linux(&mut w, true, &dear),
            Advice::Huge | Advice::None
        ));
        assert!(w.iter().enumerate().all(|(i, &x)| x == i as u64 * 0x9e37));
        let mut small = crate::alloc::zeroed::<f32>(1000).unwrap();
        assert_eq!(advise_linux(&mut small, false, &cheap), Advice::None);
    }

    /// Every way through the advice on buffers of two to four whole huge
    /// pages, under Miri too (where `madvise` is a check of its range, so
    /// an advice past the buffer is an error there): skipped on a dear
    /// probe, given and faulted on a cheap one, stopped part way with the
    /// rest advised back to small pages, forced, given to a filled buffer,
    /// and the small pages populated; contents sampled (Miri interprets
    /// every word it reads).
    #[cfg(target_os = "linux")]
    #[test]
    fn advice_stays_inside_the_buffer_and_changes_nothing() {
        let sample = |len: usize| (0..len).step_by(8191).chain([len - 1]);
        let words = 9 * HUGE_PAGE / 16 + 3; // 4.5 MiB: two whole huge pages at least
        let dear = Probe::new();
        dear.note(DEAR_FAULT * 3);
        dear.note(DEAR_FAULT * 3);
        let mut v = crate::alloc::zeroed::<u64>(words).unwrap();
        assert_eq!(advise_linux(&mut v, false, &dear), Advice::Skipped);
        let did = advise_linux(&mut v, false, &Probe::new());
        assert!(matches!(did, Advice::Huge | Advice::None | Advice::Stopped));
        assert!(sample(words).all(|i| v[i] == 0));
        // Every fault dear: the second stops the advice, and the rest of a
        // buffer of at least three whole pages goes back to small pages.
        let every = Probe::with_threshold(Duration::ZERO);
        let mut w = crate::alloc::zeroed::<u64>(4 * HUGE_PAGE / 8).unwrap();
        let did = advise_linux(&mut w, false, &every);
        assert!(matches!(did, Advice::Stopped | Advice::None), "{did:?}");
        // Forced on a dear probe, over data; then advised once filled.
        sample(words).for_each(|i| v[i] = i as u64 ^ 0x9e37);
        assert!(matches!(
            advise_linux(&mut v, true, &dear),
            Advice::Huge | Advice::None
        ));
        assert!(matches!(advise_filled(&v), Advice::Later | Advice::None));
        let _ = populate(&mut v[1..words - 1]);
        assert!(sample(words).all(|i| v[i] == i as u64 ^ 0x9e37));
        let mut small = crate::alloc::zeroed::<u8>(100).unwrap();
        assert_eq!(advise_linux(&mut small, false, &Probe::new()), Advice::None);
        assert!(!populate(&mut small));
        assert_eq!(advise_filled(&small), Advice::None);
    }

    /// The resident KiB of the whole pages inside `v`, by `mincore`: this
    /// buffer's pages only. (The mapping's `Rss` in smaps also counted
    /// whatever the kernel had merged into the same mapping, such as
    /// another test's buffer allocated beside it and freed meanwhile, so
    /// a before/after difference of it could fall short.)
    #[cfg(all(target_os = "linux", not(miri)))]
    fn resident_kib(v: &[u64]) -> usize {
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let (lo, hi) = (
            v.as_ptr() as usize,
            v.as_ptr() as usize + std::mem::size_of_val(v),
        );
        let (start, end) = (lo.next_multiple_of(page), hi / page * page);
        let pages = end.saturating_sub(start) / page;
        let mut vec = vec![0u8; pages];
        // SAFETY: `start .. start + pages·page` lies inside `v`'s mapped
        // allocation; mincore only reads its page tables and writes one
        // byte per page into `vec`, which has `pages` of them.
        let rc =
            unsafe { libc::mincore(start as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore");
        vec.iter().filter(|&&b| b & 1 == 1).count() * page / 1024
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn populate_makes_a_fresh_buffer_resident_and_changes_nothing() {
        // 24 MiB, untouched after the allocation.
        let mut v = crate::alloc::zeroed::<u64>(3 << 20).unwrap();
        let before = resident_kib(&v);
        if !populate(&mut v) {
            return; // a kernel without MADV_POPULATE_WRITE
        }
        let after = resident_kib(&v);
        assert!(
            after >= 24 * 1024 - 8,
            "resident {before} KiB -> {after} KiB"
        );
        assert!(v.iter().all(|&w| w == 0));
        // Over data: unchanged.
        v.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as u64 ^ 0x5a5a);
        assert!(populate(&mut v));
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 ^ 0x5a5a));
        let mut tiny = crate::alloc::zeroed::<u8>(100).unwrap();
        let _ = populate(&mut tiny);
        assert!(tiny.iter().all(|&b| b == 0));
    }

    /// The `VmFlags` of the mapping that holds `addr`.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn vm_flags(addr: usize) -> Option<String> {
        smaps_field(addr, "VmFlags:")
    }

    /// The rest of the line starting with `key` in the /proc/self/smaps
    /// entry of the mapping that holds `addr`.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn smaps_field(addr: usize, key: &str) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if let Some(rest) = line.strip_prefix(key).filter(|_| inside) {
                return Some(rest.to_string());
            }
        }
        None
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn stopping_leaves_the_rest_of_the_buffer_on_small_pages() {
        // Every fault counts as dear: the second one stops the advice.
        let p = Probe::with_threshold(Duration::ZERO);
        let mut v = crate::alloc::zeroed::<u64>(6 * HUGE_PAGE / 8).unwrap();
        let did = advise_linux(&mut v, false, &p);
        if did == Advice::None {
            return; // no transparent huge pages here
        }
        assert_eq!(did, Advice::Stopped);
        let lo = (v.as_ptr() as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let flags = |a| vm_flags(a).unwrap_or_default();
        assert!(
            flags(lo).split_whitespace().any(|f| f == "hg"),
            "{}",
            flags(lo)
        );
        let rest = lo + 3 * HUGE_PAGE;
        assert!(
            flags(rest).split_whitespace().any(|f| f == "nh"),
            "{}",
            flags(rest)
        );
        assert!(v.iter().all(|&w| w == 0));
        assert_eq!(advise_linux(&mut v, false, &p), Advice::Skipped);
        // Once written, the whole buffer is advised again, nothing faulted.
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as u64);
        assert_eq!(advise_filled(&v), Advice::Later);
        assert!(
            flags(rest).split_whitespace().any(|f| f == "hg"),
            "{}",
            flags(rest)
        );
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    }
}
