//! Read-ahead of the next kept weight by a session's idle workers (issue
//! #15).
//!
//! Why: a decoder's step is one-row products (`gemv`), and a short
//! sentence's forward pass products of a few rows (the streamed path),
//! bound by how fast memory streams each weight in, between stretches of
//! small kernels (layer norm, attention, bias, activation) that leave the
//! session's other workers spinning ([`crate::team`]). In GPT-2-small
//! decoding at 2 threads those stretches were 2–4 ms of a 16–22 ms step,
//! with the second core idle and memory bandwidth unused. A model calls
//! the same products in the same order every step or call, so the product
//! after this one is known from the last time: while the small kernels
//! run, an idle worker reads the start of that product's packing, and of
//! the one after it, which the product then finds in the last-level cache
//! instead of memory. Products of more than one row block reuse each panel
//! from cache and are not announced (`matmul::announce`).
//!
//! It only reads: results never depend on it. A wrong prediction (the
//! first step, another model, a packing at a reused address) costs the
//! bytes read and nothing else. A request holds its packing (an `Arc`), so
//! the bytes read are always live; the successor record holds weak handles
//! only, and a session's end drops any request left, so nothing is kept
//! alive by it.
//!
//! A read stops as soon as the next product starts (a generation counter),
//! the session ends, or the budget ([`budget`]) is read; between chunks the
//! reader runs the pool's pending jobs, so a split kernel is still served
//! at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::ctx::Settings;

/// What is read ahead: a kept packing's floats (`matmul::PackedB`), behind
/// a trait so that this module does not depend on the GEMM.
pub(crate) trait Packing: Send + Sync {
    /// The floats a product over it reads, in the order it reads them.
    fn slab(&self) -> &[f32];
}

/// A shared packing.
pub(crate) type Shared = Arc<dyn Packing>;

/// Bytes read between checks of the stop conditions (64 KiB: about 3 µs
/// at one core's bandwidth).
const CHUNK: usize = 1 << 16;

/// At most this many successors remembered (all forgotten when full:
/// relearned in one step).
const MAX_LINKS: usize = 4096;

/// Default [`budget`] in MiB. GPT-2-small decoding at 2 threads, per-step
/// medians of budgets alternating step by step in one process: 0.5–1 ms
/// (2–5%) faster with 8 MiB than with none, the same with 4, 16 or 32.
const BUDGET_MB: usize = 8;

/// Most bytes read ahead after a product: as last set
/// (`team::set_read_ahead`), else `TC_READ_AHEAD_MB` MiB (`0` turns the
/// read-ahead off), else [`BUDGET_MB`].
pub(crate) fn budget(settings: &Settings) -> usize {
    settings.read_ahead(BUDGET_MB << 20)
}

/// Bytes read ahead in this process.
static READ: AtomicU64 = AtomicU64::new(0);

/// Bytes read ahead in this process so far.
pub(crate) fn bytes_read() -> u64 {
    READ.load(Ordering::Relaxed)
}

#[derive(Default)]
struct Links {
    /// The packing of the last product started (its address).
    last: Option<usize>,
    /// Packing address → the packing started after it last time.
    next: BTreeMap<usize, Weak<dyn Packing>>,
}

/// A pending read: the packing to read first and the generation it was
/// posted in.
type Request = (Shared, u64);

/// The successor record, the pending read and the generation: one for the
/// process ([`GLOBAL`]), others in tests.
pub(crate) struct ReadAhead {
    links: Mutex<Links>,
    slot: Mutex<Option<Request>>,
    /// Whether `slot` may hold a request: what a spinning helper reads,
    /// so that it takes no lock while there is nothing to read.
    pending: AtomicBool,
    /// Bumped when a product starts: a read posted before it stops.
    generation: AtomicU64,
}

/// The process's read-ahead, which the products and the session helpers
/// share.
pub(crate) static GLOBAL: ReadAhead = ReadAhead::new();

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn addr(p: &Shared) -> usize {
    Arc::as_ptr(p).cast::<()>() as usize
}

impl ReadAhead {
    /// No successor known, nothing pending.
    pub(crate) const fn new() -> ReadAhead {
        ReadAhead {
            links: Mutex::new(Links {
                last: None,
                next: BTreeMap::new(),
            }),
            slot: Mutex::new(None),
            pending: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        }
    }

    /// A product over `p` starts: any read ahead stops (it read
    /// what was asked for, or the prediction was wrong), and `p` is
    /// recorded as the successor of the product before it.
    pub(crate) fn starting(&self, p: &Shared) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let mut l = guard(&self.links);
        if let Some(prev) = l.last.replace(addr(p)) {
            if l.next.len() >= MAX_LINKS {
                l.next.clear();
            }
            l.next.insert(prev, Arc::downgrade(p));
        }
    }

    /// A product over `p` is done: post a read of the product
    /// that followed it last time, for an idle worker ([`Self::serve`]).
    pub(crate) fn finished(&self, p: &Shared) {
        if let Some(q) = self.successor(p) {
            let gen = self.generation.load(Ordering::Acquire);
            *guard(&self.slot) = Some((q, gen));
            self.pending.store(true, Ordering::Release);
        }
    }

    /// Drop a pending read (a session ends: no packing is kept alive by
    /// it).
    pub(crate) fn clear(&self) {
        guard(&self.slot).take();
    }

    /// The packing started after `p` last time, if it still lives.
    fn successor(&self, p: &Shared) -> Option<Shared> {
        guard(&self.links)
            .next
            .get(&addr(p))
            .and_then(Weak::upgrade)
    }

    /// Run by a session's idle worker: take the pending read, if any, and
    /// read its packing from the start, then the packing that followed
    /// that one last time, and so on, until the next product starts,
    /// `done` is set or `budget` bytes are read, running the pool's
    /// pending jobs between chunks. The bytes read; `None` when nothing
    /// was pending.
    pub(crate) fn serve(&self, done: &AtomicBool, budget: usize) -> Option<usize> {
        if !self.pending.load(Ordering::Acquire) {
            return None;
        }
        let (first, gen) = {
            let mut slot = self.slot.try_lock().ok()?;
            self.pending.store(false, Ordering::Relaxed);
            slot.take()?
        };
        let live =
            || self.generation.load(Ordering::Acquire) == gen && !done.load(Ordering::Acquire);
        let (mut left, mut read) = (budget / 4, 0);
        let mut next = Some(first);
        // The stretch before a small product (GPT-2's attention before its
        // 768 × 768 projection) outlasts reading that product's weight.
        while let Some(p) = next.take() {
            let floats = p.slab().len().min(left);
            for chunk in p.slab()[..floats].chunks(CHUNK / 4) {
                if !live() {
                    READ.fetch_add(read as u64, Ordering::Relaxed);
                    return Some(read);
                }
                touch(chunk);
                read += chunk.len() * 4;
                let _ = rayon::yield_now();
            }
            left -= floats;
            if left > 0 {
                next = self.successor(&p);
            }
        }
        READ.fetch_add(read as u64, Ordering::Relaxed);
        Some(read)
    }
}

/// A product over a kept packing, announced to [`GLOBAL`] while it runs:
/// [`ReadAhead::starting`] when made, [`ReadAhead::finished`] when
/// dropped (also when the product fails). `None`: not announced.
pub(crate) struct Product(Option<Shared>);

impl Product {
    /// Announce `p`'s product (if any) as starting.
    pub(crate) fn start(p: Option<Shared>) -> Product {
        if let Some(p) = &p {
            GLOBAL.starting(p);
        }
        Product(p)
    }
}

impl Drop for Product {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            GLOBAL.finished(p);
        }
    }
}

/// Read one float per 64-byte line of `data` (the line comes into this
/// core's caches, and on to the shared last-level cache; the hardware
/// prefetchers follow the stream).
fn touch(data: &[f32]) {
    let mut acc = 0u32;
    for x in data.iter().step_by(16) {
        acc ^= std::hint::black_box(*x).to_bits();
    }
    std::hint::black_box(acc);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Floats(Vec<f32>);

    impl Packing for Floats {
        fn slab(&self) -> &[f32] {
            &self.0
        }
    }

    /// A packing of `k × n` floats.
    fn packing(k: usize, n: usize) -> Shared {
        Arc::new(Floats(vec![1.0; k * n]))
    }

    fn bytes(p: &Shared) -> usize {
        p.slab().len() * 4
    }

    /// One decoding step's products in order: `a`, `b`, `c`.
    fn step(r: &ReadAhead, ps: &[&Shared]) {
        for p in ps {
            r.starting(p);
            r.finished(p);
        }
    }

    #[test]
    fn the_product_that_followed_last_time_is_posted() {
        let r = ReadAhead::new();
        let (a, b, c) = (packing(64, 96), packing(64, 160), packing(32, 64));
        step(&r, &[&a, &b, &c]);
        // The first step learns the order; no successor was known when
        // each product finished.
        assert!(r.slot.lock().unwrap().is_none());
        step(&r, &[&a]);
        let (next, _) = r.slot.lock().unwrap().take().expect("posted");
        assert!(Arc::ptr_eq(&next, &b), "a was followed by b");
        step(&r, &[&b]);
        let (next, _) = r.slot.lock().unwrap().take().expect("posted");
        assert!(Arc::ptr_eq(&next, &c), "b was followed by c");
        let done = AtomicBool::new(false);
        assert_eq!(r.serve(&done, usize::MAX), None, "nothing pending");
    }

    #[test]
    fn a_read_follows_the_chain_up_to_the_budget() {
        let r = ReadAhead::new();
        let (a, b, c) = (packing(64, 96), packing(64, 160), packing(32, 64));
        step(&r, &[&a, &b, &c]);
        step(&r, &[&a]);
        let done = AtomicBool::new(false);
        // Posted: b; then c, a, b, ... as far as the budget goes.
        let all = bytes(&b) + bytes(&c) + bytes(&a);
        assert_eq!(r.serve(&done, all), Some(all));
        r.finished(&a);
        assert_eq!(r.serve(&done, bytes(&b) + 4096), Some(bytes(&b) + 4096));
        r.finished(&a);
        assert_eq!(r.serve(&done, 0), Some(0));
    }

    #[test]
    fn a_read_stops_when_the_next_product_starts_or_the_session_ends() {
        let r = ReadAhead::new();
        let (a, b) = (packing(64, 96), packing(256, 512));
        step(&r, &[&a, &b, &a]);
        let done = AtomicBool::new(false);
        // Posted when `a` finished: `b`. The next product starts first.
        r.starting(&b);
        assert_eq!(r.serve(&done, usize::MAX), Some(0));
        r.finished(&b);
        done.store(true, Ordering::Release);
        assert_eq!(r.serve(&done, usize::MAX), Some(0));
    }

    #[test]
    fn nothing_is_kept_alive() {
        let r = ReadAhead::new();
        let (a, b) = (packing(64, 96), packing(64, 160));
        step(&r, &[&a, &b, &a]);
        // `b` is posted (`a`'s successor): held while pending.
        assert_eq!(Arc::strong_count(&b), 2);
        r.clear();
        assert_eq!(
            Arc::strong_count(&b),
            1,
            "a session's end drops the request"
        );
        let weak = Arc::downgrade(&b);
        drop(b);
        assert!(
            weak.upgrade().is_none(),
            "the successor record holds no packing"
        );
        r.finished(&a);
        assert!(
            r.slot.lock().unwrap().is_none(),
            "a dropped successor is not posted"
        );
    }
}
