//! The threads tc's kernels run on: rayon's global pool, built by tc on
//! its first call (when nothing in the process built it before) with each
//! worker pinned to a CPU of its own, as ONNX Runtime pins its intra-op
//! threads at its default thread count (issue #15).
//!
//! Why: a call hops onto the pool and the calling thread sleeps until it
//! is done. Unpinned, the kernel's scheduler placed both workers of a
//! fresh 2-thread pool on one CPU while the caller still ran on the other,
//! and left them there, taking turns in 4 ms slices, for 10 ms and more
//! after the caller went to sleep and its CPU idled (the AMD Zen 4 VM of
//! issue #15, Linux 6.18; `perf sched` traces). A process's first call
//! then ran on one CPU at a time: the GPT-2 block's first call at 1 × 32
//! took a median of 16.9 ms (p90 23.4) over 30 processes, pinned 9.2 (p90
//! 11.2); its third call (new weights, kernels linked) 5.4 against 4.7.
//!
//! What: worker `i` of `n` is pinned to the `i`-th CPU the process may run
//! on (its affinity mask when the pool is built), only when the pool has
//! one worker per such CPU and at least two: with more threads than CPUs
//! pinning would stack them for good, and with fewer (`RAYON_NUM_THREADS`
//! below the CPU count, say replicas sharing a machine) every process
//! would pin its workers to the same first CPUs. ONNX Runtime likewise
//! pins only at its default thread count.
//!
//! `TC_PIN_THREADS=0` leaves the pool unpinned. A pool that the program
//! (or a library) built before tc's first call is left as it is (call
//! [`init`] first to have tc build it). Calls made on a worker of a pool
//! of the program's own build nothing (tc's work runs on that pool) and
//! leave the choice to the first call from outside any pool.
//! `RAYON_NUM_THREADS` sets the thread count as usual. Results never
//! depend on any of it: threads split only output rows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Workers pinned so far (each pins itself as it starts).
static PINNED: AtomicUsize = AtomicUsize::new(0);

/// The CPUs the process could run on when tc pinned its pool.
static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();

/// Build rayon's global pool with pinned workers, once, unless
/// `TC_PIN_THREADS=0` or the pool already exists. Every tc call,
/// [`crate::session`] and [`crate::compile_with`] call it first; a program
/// that uses rayon itself before its first tc call can call it at the
/// start of `main`. Returns whether tc built the pool (its workers pinned
/// where there is one per CPU and at least two: [`pinned_workers`] says
/// how many were).
pub fn init() -> bool {
    static BUILT: OnceLock<bool> = OnceLock::new();
    if let Some(&built) = BUILT.get() {
        return built;
    }
    // On a worker of a pool of the program's own, tc's work runs there: a
    // global pool built now would only sit idle. The choice waits for a
    // call from outside any pool.
    if rayon::current_thread_index().is_some() {
        return false;
    }
    *BUILT.get_or_init(|| {
        let on = crate::ctx::Settings::get().pin_threads;
        on && build_pinned()
    })
}

/// Workers of the global pool pinned to a CPU of their own (0 when tc did
/// not build the pool, when its thread count is not the CPU count or is
/// one, or off Linux).
pub fn pinned_workers() -> usize {
    PINNED.load(Ordering::Acquire)
}

/// Let the calling thread run on every CPU the process could when tc
/// pinned its pool. For the threads a pinned worker starts (a compile's
/// parts, `crate::offpool`): a new thread inherits its creator's one-CPU
/// mask, so a compile split across threads from a pinned worker ran them
/// all on that worker's CPU, taking turns (MiniLM's first call with an
/// empty kernel cache: two compile threads at half a CPU each while the
/// other CPU idled). Nothing when tc pinned no worker.
pub(crate) fn unpin_current() {
    #[cfg(target_os = "linux")]
    if pinned_workers() > 0 {
        if let Some(cpus) = ALLOWED.get() {
            set_affinity(cpus);
        }
    }
}

#[cfg(target_os = "linux")]
fn build_pinned() -> bool {
    let Some(cpus) = allowed_cpus() else {
        return false;
    };
    let _ = ALLOWED.set(cpus.clone());
    rayon::ThreadPoolBuilder::new()
        .start_handler(move |i| {
            // The pool's size, known here: the worker is registered
            // before its start handler runs.
            let n = rayon::current_num_threads();
            if n >= 2 && n == cpus.len() && set_affinity(&cpus[i..=i]) {
                PINNED.fetch_add(1, Ordering::Release);
            }
        })
        .build_global()
        .is_ok()
}

#[cfg(not(target_os = "linux"))]
fn build_pinned() -> bool {
    false
}

/// The CPUs this thread may run on (its affinity mask), in order.
#[cfg(target_os = "linux")]
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: `set` is a plain bit set that the kernel fills, of the size
    // passed; an all-zero `cpu_set_t` is a valid (empty) set.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let ok = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (ok == 0).then_some(set)
    }?;
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `CPU_ISSET` reads bit `c < bits` of the set just filled.
    let cpus: Vec<usize> = (0..bits)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Let the calling thread run on `cpus` only.
#[cfg(target_os = "linux")]
fn set_affinity(cpus: &[usize]) -> bool {
    // SAFETY: `set` is a zeroed (empty) `cpu_set_t` with bits set by
    // `CPU_SET` (each CPU is one of `allowed_cpus`, below the set's size),
    // passed with its size; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// What `unpin_current` does for a compile's thread: a thread started
    /// by a thread pinned to one CPU inherits that one CPU, and gets every
    /// CPU back by `set_affinity`.
    #[test]
    fn a_thread_started_by_a_pinned_thread_is_let_run_everywhere() {
        let all = allowed_cpus().expect("an affinity mask");
        if all.len() < 2 {
            return;
        }
        std::thread::spawn(move || {
            assert!(set_affinity(&all[..1]));
            std::thread::scope(|s| {
                s.spawn(|| {
                    assert_eq!(allowed_cpus().as_deref(), Some(&all[..1]));
                    assert!(set_affinity(&all));
                    assert_eq!(allowed_cpus(), Some(all.clone()));
                });
            });
        })
        .join()
        .expect("the pinned thread");
    }
}
