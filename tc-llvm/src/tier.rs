//! Tiered compilation: the background thread that raises quick-tier
//! kernels to the optimized tier.
//!
//! Why: a first call with an empty kernel cache used to wait for O3 on
//! every kernel (a MiniLM's first embedding, about 150 ms of compilation
//! on two cores, twice candle's whole start). The cache now compiles what
//! the persistent cache lacks at [`Tier::Quick`](crate::jit::Tier) (a
//! sixth of the time); a function whose calls have run quick code for
//! [`TIER_UP_AFTER`] is queued here, compiled at the optimized tier on
//! this thread, and its kernels are switched over
//! ([`CompiledFn::tier_up`]). Both tiers compute the same
//! bits, so a caller sees only the speed change.
//!
//! - One thread, started at the first tier-up, at a lower scheduling
//!   priority than the process's other threads: it takes what the calls
//!   leave of the CPUs.
//! - A function evicted or dropped before its turn is skipped (the queue
//!   holds weak references).
//! - Process exit: a handler registered with `atexit` stops the queue and
//!   waits for the compilation in flight (at most [`EXIT_WAIT`]), so
//!   LLVM is never running while the C++ runtime destroys LLVM's static
//!   objects.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::exec::CompiledFn;

/// How long a function's calls run quick code before its tier-up is queued.
pub const TIER_UP_AFTER: Duration = Duration::from_millis(50);

/// How long process exit waits for a tier-up in flight.
pub const EXIT_WAIT: Duration = Duration::from_secs(10);

struct Queue {
    jobs: VecDeque<Weak<CompiledFn>>,
    /// A tier-up is compiling now.
    busy: bool,
    /// The thread was started, or tried.
    started: bool,
    /// It could not be started: callers compile their tier-ups themselves.
    failed: bool,
    /// The process is exiting: no new work starts.
    exiting: bool,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    jobs: VecDeque::new(),
    busy: false,
    started: false,
    failed: false,
    exiting: false,
});
/// Signalled whenever `QUEUE` changes.
static CHANGED: Condvar = Condvar::new();
/// Tier-ups completed in this process.
static DONE: AtomicU64 = AtomicU64::new(0);

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Queue `f`'s tier-up. Without a thread (one could not be started), the
/// calling thread compiles it (a failure keeps the quick code: slower,
/// the same bits).
pub(crate) fn submit(f: &Arc<CompiledFn>) {
    let mut q = queue();
    if q.exiting {
        return;
    }
    if !q.started {
        q.started = true;
        q.failed = start().is_err();
    }
    if q.failed {
        drop(q);
        if f.tier_up().is_ok() && !f.is_quick() {
            DONE.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    q.jobs.push_back(Arc::downgrade(f));
    CHANGED.notify_all();
}

fn start() -> std::io::Result<()> {
    // SAFETY: `at_exit` is an `extern "C" fn()` that lives as long as the
    // program, as `atexit` requires.
    if unsafe { libc::atexit(at_exit) } != 0 {
        return Err(std::io::Error::other("atexit"));
    }
    std::thread::Builder::new()
        .name("tc-tier-up".into())
        .spawn(worker)
        .map(drop)
}

fn worker() {
    // Lower this thread's priority (Linux's nice value is per thread):
    // the calls keep the CPUs they use. A failure changes only speed.
    #[cfg(target_os = "linux")]
    // SAFETY: `setpriority` on the calling thread's id, no pointers.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
    }
    loop {
        let job = {
            let mut q = queue();
            loop {
                if q.exiting {
                    return;
                }
                if let Some(j) = q.jobs.pop_front() {
                    q.busy = true;
                    break j;
                }
                q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        if let Some(f) = job.upgrade() {
            renew_exit_handler();
            // A failure (or a panic) leaves the quick code in place: the
            // same bits; `busy` is cleared either way.
            let up = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.tier_up()));
            if matches!(up, Ok(Ok(()))) && !f.is_quick() {
                DONE.fetch_add(1, Ordering::Relaxed);
            }
        }
        queue().busy = false;
        CHANGED.notify_all();
    }
}

/// Times [`renew_exit_handler`] registered [`at_exit`] again.
static RENEWED: AtomicU64 = AtomicU64::new(0);

/// Register [`at_exit`] again, for the first [`RENEW_MAX`] tier-ups. Exit
/// runs its handlers in the reverse order of their registration, C++
/// destructors of static objects included: an object LLVM first built
/// during a compile after [`start`] registered `at_exit` was destroyed
/// before `at_exit` ran, while the tier-up in flight could still use it
/// (a test binary's exit: "LLVM ERROR: Cannot select" once in a few
/// runs). Registered again before each of the first tier-ups, `at_exit`
/// runs before the objects of every earlier compile; LLVM builds its lazy
/// objects in its first compiles, so a bounded number of registrations
/// covers them (each takes a slot of the C library's list for good).
fn renew_exit_handler() {
    if RENEWED.fetch_add(1, Ordering::Relaxed) < RENEW_MAX {
        // SAFETY: as in `start`.
        unsafe { libc::atexit(at_exit) };
    }
}

/// How many tier-ups register [`at_exit`] again.
const RENEW_MAX: u64 = 64;

extern "C" fn at_exit() {
    let mut q = queue();
    q.exiting = true;
    q.jobs.clear();
    CHANGED.notify_all();
    let deadline = std::time::Instant::now() + EXIT_WAIT;
    while q.busy {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        q = CHANGED
            .wait_timeout(q, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// Wait until every queued tier-up has finished: a benchmark's timed
/// rounds then run optimized code, and a server can say it is warm.
pub fn finish_tier_ups() {
    let mut q = queue();
    while (!q.jobs.is_empty() || q.busy) && !q.exiting && !q.failed {
        q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}

/// Tier-ups completed in this process.
pub fn tier_ups() -> u64 {
    DONE.load(Ordering::Relaxed)
}

/// Tier-ups queued or compiling now.
pub fn pending() -> usize {
    let q = queue();
    q.jobs.len() + usize::from(q.busy)
}
