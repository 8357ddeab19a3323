//! Parallel work of a compile, on scoped threads of its own rather than
//! the rayon pool.
//!
//! Why: a compile runs under its cache slot's lock (`cache.rs`: a
//! `OnceLock` that other first calls of the function wait on). A rayon
//! worker that waits for a join runs other queued jobs meanwhile; if the
//! compile waited on the pool, the worker holding the lock could take a
//! queued call of the same function (another request's session) and wait
//! for the lock it holds itself: a deadlock, seen with a server's
//! concurrent first requests. Threads of the compile's own wait for
//! nothing but their work, so a compile never needs a pool worker, and a
//! worker blocked on the lock holds up nothing the compile needs.

/// LLVM compilations running in this process now ([`Compiling`]).
static COMPILING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A compilation running on this thread, until dropped. Meanwhile the kept
/// helpers of every session nap between looks for work instead of
/// spinning (`crate::team`), so the compile's threads get the CPUs: a
/// first call with an empty kernel cache is mostly compilation, and on two
/// cores a spinning helper held one of them.
pub(crate) struct Compiling(());

impl Compiling {
    pub(crate) fn start() -> Compiling {
        COMPILING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Compiling(())
    }
}

impl Drop for Compiling {
    fn drop(&mut self) {
        COMPILING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Threads this module has started ([`threads_started`]).
static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Threads a compile has started beside the calling thread, in this
/// process so far: a warm call starts none (a test checks it; a thread
/// per product once cost more than the product).
pub fn threads_started() -> u64 {
    STARTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Is a compilation running ([`Compiling`])?
pub(crate) fn compiling() -> bool {
    COMPILING.load(std::sync::atomic::Ordering::Relaxed) > 0
}

/// `f` over `items`, results in the items' order, on this thread and at
/// most as many scoped threads beside it as the machine has other CPUs,
/// each taking the next item in turn. The scoped threads may run on any
/// CPU, also when this thread is a pinned worker
/// (`crate::threads::unpin_current`). A panic in `f` propagates.
pub(crate) fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let helpers = items.len().min(cpus).saturating_sub(1);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(x) = items.get(i) else { return done };
            done.push((i, f(x)));
        }
    };
    STARTED.fetch_add(helpers as u64, std::sync::atomic::Ordering::Relaxed);
    let mut all = std::thread::scope(|s| {
        let others: Vec<_> = (0..helpers)
            .map(|_| {
                s.spawn(|| {
                    crate::threads::unpin_current();
                    work()
                })
            })
            .collect();
        let mut all = work();
        for h in others {
            all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    all.sort_unstable_by_key(|&(i, _)| i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// `a()` on this thread and `b()` on a scoped thread beside it.
pub(crate) fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::thread::scope(|s| {
        let hb = s.spawn(|| {
            crate::threads::unpin_current();
            b()
        });
        let ra = a();
        let rb = hb.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        (ra, rb)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order() {
        let v: Vec<usize> = (0..5).collect();
        assert_eq!(map(&v, |x| x * 10), vec![0, 10, 20, 30, 40]);
        assert!(map(&[] as &[u8], |x| *x).is_empty());
        assert_eq!(join(|| 1, || "b"), (1, "b"));
    }

    #[test]
    fn the_work_runs_off_the_pool() {
        // Called from a pool worker, only the calling thread is one.
        let on_pool = rayon::scope(|_| {
            map(&[0; 64], |_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                rayon::current_thread_index()
            })
        });
        let caller = on_pool
            .iter()
            .flatten()
            .collect::<std::collections::HashSet<_>>();
        assert!(caller.len() <= 1, "items ran on pool workers {caller:?}");
        let (_, b) = rayon::scope(|_| join(|| (), || rayon::current_thread_index().is_some()));
        assert!(!b);
    }
}
