//! Sessions: a closure run on the rayon pool with the other workers kept
//! awake, so that every step a JIT call splits across threads is shared at
//! once (issue #15).
//!
//! Why: a split pushes its halves onto the current worker's deque. A worker
//! that went to sleep after the previous step (rayon puts idle workers to
//! sleep after some tens of µs) must be woken, which costs tens of µs on a
//! VM, and the splitting worker then waits for the half it stole. A step of
//! a MiniLM layer at batch 1 is about that long, so splitting it cost more
//! than the second core gave back; ONNX Runtime's pool spins between steps
//! for the same reason. Inside a session the other workers spin (yielding
//! to rayon, so they run any queued job, never holding up other work) and
//! steal each split at once, and products and kernels split from smaller
//! sizes ([`crate::kernels::matmul::splits`], [`crate::exec::PAR_MIN_WORK`]).
//!
//! A JIT call that splits two or more steps runs in a session of its own
//! unless it is already inside one; a caller that makes several calls in a
//! row (a model's forward pass) wraps them all in [`session`] and pays the
//! hop onto the pool once. Results never depend on it: threads split only
//! output rows (see the crate documentation).
//!
//! With nothing to steal, a helper reads ahead the weight of the product
//! of a few rows that comes next (`crate::kernels::readahead`): a decoder's small
//! kernels between two products leave memory idle.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Is this thread running a session's closure?
pub fn in_session() -> bool {
    ACTIVE.with(Cell::get)
}

impl crate::ctx::ExecCtx {
    /// The context of kernels called on this thread, on `threads` threads,
    /// inside a session when this thread runs one.
    pub fn on_this_thread(threads: usize) -> crate::ctx::ExecCtx {
        crate::ctx::ExecCtx::new(threads, in_session())
    }
}

/// Run `f` with every JIT call it makes on this thread kept on this
/// thread: no step splits across the pool, and no call hops onto it.
///
/// For callers that make many small calls in parallel themselves (a
/// batched decode step attends to each sequence's cache on its own pool
/// task): splitting a call of a few µs across threads would only make
/// the tasks wait for each other. Results never depend on it (threads
/// split only output rows).
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Is this thread inside [`serial`]?
pub fn in_serial() -> bool {
    SERIAL.with(Cell::get)
}

/// Run `f` on a pool worker with the pool's other workers kept awake until
/// it returns (see the module documentation). Inside a session, or with a
/// pool of one thread, it is just `f()`.
pub fn session<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    crate::threads::init();
    let helpers = rayon::current_num_threads().saturating_sub(1);
    if in_session() || helpers == 0 {
        return f();
    }
    let done = AtomicBool::new(false);
    // The caller's numerics choice goes with `f` onto the worker.
    let numerics = crate::options::quant_numerics();
    // From outside the pool `scope` runs on a worker and blocks this thread
    // once; it returns only after every helper has (a helper not yet
    // started when `f` is done is run by the scope itself and returns at
    // once).
    rayon::scope(|s| {
        for _ in 0..helpers {
            s.spawn(|_| keep_awake(&done));
        }
        // Also on a panic of `f`: the helpers stop, the scope returns and
        // propagates it.
        struct End<'a>(&'a AtomicBool);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                ACTIVE.with(|a| a.set(false));
                self.0.store(true, Ordering::Release);
                crate::kernels::readahead::GLOBAL.clear();
            }
        }
        ACTIVE.with(|a| a.set(true));
        let _end = End(&done);
        crate::options::enter_quant_numerics(numerics, f)
    })
}

/// Set how many bytes of the next products' weights a session's idle
/// workers read while the small kernels before them run (`0` turns the
/// read-ahead off). The default is `TC_READ_AHEAD_MB` MiB, else 8 MiB.
/// Results never depend on it: only products of one row block against
/// kept weights inside a session are read ahead, and reading changes
/// nothing.
pub fn set_read_ahead(bytes: usize) {
    crate::ctx::Settings::get().set_read_ahead(bytes);
}

/// Bytes read ahead so far in this process (see [`set_read_ahead`]).
pub fn read_ahead_bytes() -> u64 {
    crate::kernels::readahead::bytes_read()
}

/// How long a kept helper sleeps between looks for work while a
/// compilation runs: short beside a compile (milliseconds per module),
/// long beside the spin it replaces.
const COMPILE_NAP: std::time::Duration = std::time::Duration::from_micros(100);

/// Run the pool's pending jobs, stealing them from the other workers, and
/// otherwise read ahead the next product's weight ([`crate::kernels::readahead`]),
/// until `done`; napping while a compilation runs
/// ([`crate::offpool::Compiling`]).
fn keep_awake(done: &AtomicBool) {
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            continue;
        }
        let ahead = crate::kernels::readahead::GLOBAL.serve(
            done,
            crate::kernels::readahead::budget(crate::ctx::Settings::get()),
        );
        if ahead.is_none() {
            if crate::offpool::compiling() {
                std::thread::sleep(COMPILE_NAP);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
