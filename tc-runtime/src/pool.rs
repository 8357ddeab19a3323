//! A bounded cache of large tensor storage buffers (a caching allocator,
//! like PyTorch's for its CUDA tensors).
//!
//! Why: a tensor of 64 MB is above glibc's largest `mmap` threshold (32 MB),
//! so every allocation of one is a fresh `mmap` whose pages the kernel must
//! fault in and zero on first write, and every free is a `munmap`. For a
//! bandwidth-bound kernel that is a whole extra write stream plus the
//! faults: measured here, `relu(a*b + c)` over 16M f32 took 30 ms into a
//! fresh buffer and 15 ms into a reused one (with streaming stores). A model
//! or server that runs the same shapes again and again allocates the same
//! sizes every call, so storage dropped by one call serves the next.
//!
//! Policy: only buffers of at least [`MIN_BYTES`] are kept (smaller ones are
//! cheap for the allocator); a poolable buffer is allocated with the
//! capacity of its size class ([`class_words`]: eight classes per power of
//! two, at most 12.5% over the request; 1.5 × the request when that length
//! is growing, [`zeroed`]) and reused for the requests it holds with at
//! most about half the request to spare, the smallest such first; the
//! total held is bounded by [`limit`] (default 256 MiB, `TC_POOL_MB`
//! overrides it, 0 disables the pool); when a returned buffer would
//! exceed it, the oldest held buffers are released first.
//!
//! Why classes, not exact lengths: shapes that grow by a little every call
//! never repeat a length. A decoder's KV cache grows by one position per
//! token, so with exact matching every step's `concat` took a fresh
//! buffer (page faults and zeroing: 10% of GPT-2 decoding's samples,
//! issue #15) while the previous step's buffer sat unused in the pool; a
//! server sees a new sequence length on most requests.
//!
//! A buffer taken from the pool holds stale data: [`take`] is for writers
//! that overwrite every word (the JIT's kernel outputs).

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

/// Buffers smaller than this (bytes) are not pooled: 64 KiB; 4 KiB under
/// Miri, so that its runs reach the pool with tensors small enough to
/// interpret (the policy is the same, only the threshold moves).
///
/// Why not higher: glibc serves a few hundred KiB from fresh `mmap`s or
/// from heap pages it trims back to the kernel on free, so such a buffer
/// also pays its page faults and zeroing on every call. MiniLM at batch
/// 32 × 16 tokens has 0.75 MiB activations: with a 1 MiB threshold its
/// bias additions took 150 µs each, 65 µs with this one (issue #15).
pub const MIN_BYTES: usize = if cfg!(miri) { 4 << 10 } else { 64 << 10 };

/// Default bound on the bytes held.
pub const DEFAULT_LIMIT: usize = 256 << 20;

/// Fresh buffers from this size on (bytes) are advised to use transparent
/// huge pages.
pub const HUGE_MIN: usize = 4 << 20;

/// The capacity a poolable buffer of `words` words is allocated with, and
/// the key it is reused under: `words` rounded up to a multiple of 1/8 of
/// its largest power of two (so at most 12.5% more), or `words` itself
/// below [`MIN_BYTES`] (or if the rounding would overflow).
pub fn class_words(words: usize) -> usize {
    if words.saturating_mul(8) < MIN_BYTES {
        return words;
    }
    // `words ≥ MIN_BYTES / 8 ≥ 512`, so its bit length is at least 10.
    let step = 1usize << (usize::BITS - 1 - words.leading_zeros() - 3);
    words.div_ceil(step).checked_mul(step).unwrap_or(words)
}

/// A fresh zeroed buffer of `words` words (not from the pool), with the
/// capacity of its size class ([`class_words`]; the exact size if the
/// class cannot be allocated), or, when a length is growing (the pool
/// holds a buffer a little too small for it, see `growing`), of the
/// class of 1.5 × `words`.
///
/// Why the headroom: a decoder's KV cache grows by one position per step,
/// so with classes alone it left its class every few steps and every
/// layer's cache took a fresh buffer, whose pages the kernel faults in and
/// zeroes: GPT-2-small decoding 160 tokens faulted about 300 pages (1.2
/// MB) per step, 5% of its samples on the AMD Zen 4 host (issue #15).
/// With 1.5× headroom (and [`take`] serving a request from a buffer up to
/// half again its size) a growing length leaves its buffer geometrically
/// rarely.
///
/// Large ones come straight from `mmap` (through the allocator's `calloc`),
/// untouched, and are marked for transparent huge pages before anything
/// writes them, where those are cheap to get ([`crate::huge`]): a 64 MB buffer then takes 32 page faults instead of 16 384
/// (the faults cost as much as a bandwidth-bound kernel over it), and a
/// matmul operand lies on physically contiguous 2 MB pages, so how it maps
/// onto the physically indexed L2 no longer changes from run to run.
///
/// Under Miri this is the same code: the allocation, the size classes and
/// the huge-page advice with its probe and faulting loop; only the
/// `madvise` calls themselves become a check that their range lies inside
/// the buffer ([`crate::huge`]), since Miri has no such system call.
/// `OutOfMemory` when the allocator refuses ([`crate::alloc`]).
pub fn zeroed(words: usize) -> crate::Result<Vec<u64>> {
    let class = if growing(words) {
        class_words(words.saturating_add(words / 2))
    } else {
        class_words(words)
    };
    let mut v = match crate::alloc::zeroed_words(class) {
        Ok(v) => v,
        Err(_) if class > words => crate::alloc::zeroed_words(words)?,
        Err(e) => return Err(e),
    };
    // The words past `words` stay allocated (and zero) as spare capacity:
    // `take` grows the buffer into them for a later request of its class.
    v.truncate(words);
    if words.saturating_mul(8) >= HUGE_MIN {
        crate::huge::advise(&mut v, false);
    }
    Ok(v)
}

/// A buffer of `words` words for a caller that writes every byte it
/// stores (a kernel's output, a tensor built from host data): a held one
/// where one fits ([`take`]: stale contents, about to be overwritten),
/// else a fresh zeroed one ([`zeroed`]). Its last word is zero either
/// way, so the padding past the caller's last byte is zero, as in every
/// storage. `OutOfMemory` when a fresh buffer cannot be allocated.
pub fn overwritable(words: usize) -> crate::Result<Vec<u64>> {
    match take(words) {
        Some(mut v) => {
            if let Some(last) = v.last_mut() {
                *last = 0;
            }
            Ok(v)
        }
        None => zeroed(words),
    }
}

/// Pool counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests served from the pool.
    pub hits: u64,
    /// Requests of a poolable size the pool could not serve.
    pub misses: u64,
    /// Buffers taken back.
    pub returned: u64,
    /// Buffers released to the allocator to respect the limit.
    pub released: u64,
    /// Bytes held now.
    pub held_bytes: usize,
}

struct Pool {
    limit: usize,
    enabled: bool,
    held: VecDeque<Vec<u64>>,
    stats: PoolStats,
}

fn pool() -> &'static Mutex<Pool> {
    static P: OnceLock<Mutex<Pool>> = OnceLock::new();
    P.get_or_init(|| {
        let limit = tc_core::env::TC_POOL_MB
            .parse::<usize>()
            .map(|mb| mb.saturating_mul(1 << 20))
            .unwrap_or(DEFAULT_LIMIT);
        Mutex::new(Pool {
            limit,
            enabled: true,
            held: VecDeque::new(),
            stats: PoolStats::default(),
        })
    })
}

fn lock() -> std::sync::MutexGuard<'static, Pool> {
    pool().lock().unwrap_or_else(|e| e.into_inner())
}

fn bytes(v: &Vec<u64>) -> usize {
    v.capacity() * 8
}

/// Take the oldest held buffers out until at most `target` bytes are held;
/// the caller frees them after unlocking (`munmap` outside the lock).
fn release_until(p: &mut Pool, target: usize) -> Vec<Vec<u64>> {
    let mut freed = Vec::new();
    while p.stats.held_bytes > target {
        match p.held.pop_front() {
            Some(old) => {
                p.stats.held_bytes -= bytes(&old);
                p.stats.released += 1;
                freed.push(old);
            }
            None => break,
        }
    }
    freed
}

/// Does a held buffer of capacity `cap` serve a request of `words`
/// words? When it holds them and is no larger than the class of 1.5 ×
/// `words` (what [`zeroed`] gives a growing length: such a buffer then
/// serves every longer request it holds).
fn fits(cap: usize, words: usize) -> bool {
    cap >= words && cap <= class_words(words.saturating_add(words / 2))
}

/// Is a length of `words` words growing: does the pool hold a buffer
/// smaller than it by at most a quarter (what a previous, shorter
/// request of the same kind returned)?
fn growing(words: usize) -> bool {
    if words.saturating_mul(8) < MIN_BYTES {
        return false;
    }
    let p = lock();
    p.enabled
        && p.held
            .iter()
            .any(|v| v.capacity() < words && v.capacity() >= words - words / 4)
}

/// A held buffer of `words` words: the smallest that fits the request (`fits`)
/// (stale contents, except words it grew into, which are zero), if any.
pub fn take(words: usize) -> Option<Vec<u64>> {
    if words.saturating_mul(8) < MIN_BYTES {
        return None;
    }
    let mut p = lock();
    if !p.enabled {
        return None;
    }
    // The smallest that fits; of equals, the most recently returned: its
    // pages are the likeliest to be warm (`min_by_key` keeps the first
    // minimum, and the scan runs from the back).
    let best = p
        .held
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, v)| fits(v.capacity(), words))
        .min_by_key(|(_, v)| v.capacity())
        .map(|(i, _)| i);
    match best {
        Some(i) => {
            let mut v = p.held.remove(i)?;
            p.stats.hits += 1;
            p.stats.held_bytes -= bytes(&v);
            drop(p);
            // `capacity ≥ words` (`fits`), so neither reallocates.
            if v.len() >= words {
                v.truncate(words);
            } else {
                v.resize(words, 0);
            }
            Some(v)
        }
        None => {
            p.stats.misses += 1;
            None
        }
    }
}

/// Offer a buffer back; kept when it is large enough and fits the limit
/// (releasing older buffers if needed), dropped otherwise.
pub fn give(v: Vec<u64>) {
    let b = bytes(&v);
    if b < MIN_BYTES {
        return;
    }
    let mut p = lock();
    if !p.enabled || b > p.limit {
        return;
    }
    let target = p.limit.saturating_sub(b);
    let freed = release_until(&mut p, target);
    p.stats.held_bytes += b;
    p.stats.returned += 1;
    p.held.push_back(v);
    drop(p);
    // `munmap` outside the lock.
    drop(freed);
}

/// The bound on bytes held.
pub fn limit() -> usize {
    lock().limit
}

/// Change the bound (0 disables pooling); releases what exceeds it.
pub fn set_limit(bytes_limit: usize) {
    let mut p = lock();
    p.limit = bytes_limit;
    let freed = release_until(&mut p, bytes_limit);
    drop(p);
    drop(freed);
}

/// Bypass the pool (`false`: take finds nothing, given buffers are freed)
/// without releasing what it holds; for measuring the pool's effect.
pub fn set_enabled(on: bool) {
    lock().enabled = on;
}

/// Release every held buffer to the allocator.
pub fn clear() {
    let freed: Vec<Vec<u64>> = {
        let mut p = lock();
        p.stats.released += p.held.len() as u64;
        p.stats.held_bytes = 0;
        p.held.drain(..).collect()
    };
    drop(freed);
}

/// A snapshot of the counters.
pub fn stats() -> PoolStats {
    lock().stats
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pure: no pool state.
    #[test]
    fn size_classes_bound_the_waste_and_are_stable() {
        let min = MIN_BYTES / 8;
        for w in (0..min).step_by(97).chain([min - 1]) {
            assert_eq!(class_words(w), w, "below the pool's threshold: exact");
        }
        let mut prev = 0;
        for w in (min..min * 70)
            .step_by(13)
            .chain([usize::MAX / 2, usize::MAX])
        {
            let c = class_words(w);
            assert!(c >= w && c - w <= w / 8, "{w} -> {c}");
            assert_eq!(class_words(c), c, "a class size is its own class");
            assert!(c >= prev, "monotone");
            prev = c;
        }
    }

    // One test: the pool is process-global, parallel tests would interleave.
    #[test]
    fn reuse_exact_size_and_respect_the_limit() {
        let words = MIN_BYTES / 8;
        set_limit(3 * MIN_BYTES);
        clear();
        assert!(take(words).is_none(), "empty pool");
        // Too small to pool.
        give(vec![0u64; 16]);
        assert_eq!(stats().held_bytes, 0);
        let mut a = vec![0u64; words];
        a[0] = 7;
        let addr = a.as_ptr() as usize;
        give(a);
        // `vec!` allocates exactly `words`: a class of its own only when
        // `words` is a class size (it is: a power of two).
        assert_eq!(class_words(words), words);
        assert!(take(words + 1).is_none(), "another size class");
        let b = take(words).expect("reused");
        assert_eq!(b.as_ptr() as usize, addr, "the same allocation comes back");
        assert_eq!(b[0], 7, "contents are stale, not zeroed");
        give(b);
        // Over the limit: the oldest go first.
        for _ in 0..4 {
            give(vec![1u64; words]);
        }
        let s = stats();
        assert!(s.held_bytes <= 3 * MIN_BYTES, "{s:?}");
        assert!(s.released >= 2, "{s:?}");
        // A buffer larger than the limit is never held.
        give(vec![0u64; 4 * words]);
        assert!(stats().held_bytes <= 3 * MIN_BYTES);
        // A length that grows a little each call (a KV cache) stays in its
        // class: the buffer comes back, grown into its zeroed spare words.
        clear();
        set_limit(16 * MIN_BYTES);
        let base = 5 * words + 3; // not a class size: the class has spare words
        let class = class_words(base);
        assert!(class > base, "{class} vs {base}");
        let mut g = zeroed(base).unwrap();
        assert_eq!((g.len(), g.capacity()), (base, class));
        g.iter_mut().for_each(|w| *w = 3);
        let addr = g.as_ptr() as usize;
        give(g);
        let g = take(base + 1).expect("same class, one word longer");
        assert_eq!((g.as_ptr() as usize, g.len()), (addr, base + 1));
        assert_eq!(
            (g[0], g[base]),
            (3, 0),
            "stale words kept, grown words zero"
        );
        give(g);
        let g = take(base - 2).expect("same class, shorter");
        assert_eq!((g.as_ptr() as usize, g.len()), (addr, base - 2));
        give(g);
        assert!(take(class + 1).is_none(), "the next class");
        clear();
        set_limit(3 * MIN_BYTES);
        for _ in 0..2 {
            give(vec![1u64; words]);
        }
        let held = stats().held_bytes;
        set_enabled(false);
        assert!(take(words).is_none(), "bypassed");
        give(vec![0u64; words]);
        assert_eq!(stats().held_bytes, held, "bypass keeps what is held");
        set_enabled(true);
        set_limit(0);
        assert_eq!(stats().held_bytes, 0);
        give(vec![0u64; words]);
        assert_eq!(stats().held_bytes, 0, "limit 0 disables pooling");
        set_limit(DEFAULT_LIMIT);
        best_fit_and_growing_lengths();
        huge_buffers_are_advised_kept_and_released();
        host_data_reuses_held_buffers();
    }

    // Part of the one test above: a tensor built from host data takes a
    // held buffer instead of a fresh allocation, and writes every byte of
    // it; one whose elements are stored into zeros (I4's nibbles) does not.
    fn host_data_reuses_held_buffers() {
        use crate::{Tensor, I4};
        let words = MIN_BYTES / 8;
        clear();
        let stale = vec![u64::MAX; words];
        let addr = stale.as_ptr() as usize;
        give(stale);
        let data: Vec<f32> = (0..2 * words).map(|i| i as f32).collect();
        let t = Tensor::from_slice(&[2 * words], &data).unwrap();
        assert_eq!(t.bytes().as_ptr() as usize, addr, "the held buffer");
        assert_eq!(t.as_slice::<f32>().unwrap(), &data[..]);
        drop(t);
        // Two bytes short of the buffer: the held buffer again, every
        // element read back.
        let h: Vec<half::f16> = (0..4 * words - 1)
            .map(|i| half::f16::from_f32((i % 7) as f32))
            .collect();
        let t = Tensor::from_slice(&[4 * words - 1], &h).unwrap();
        assert_eq!(t.bytes().as_ptr() as usize, addr, "held again");
        assert_eq!(t.as_slice::<half::f16>().unwrap(), &h[..]);
        drop(t);
        give(vec![u64::MAX; words]);
        let n = 16 * words;
        let q: Vec<I4> = (0..n).map(|i| I4::wrapping(i as i64)).collect();
        let t = Tensor::from_slice(&[n], &q).unwrap();
        assert_eq!(t.to_vec::<I4>().unwrap(), q, "nibbles stored into zeros");
        drop(t);
        clear();
    }

    // Part of the one test above (process-global pool).
    fn best_fit_and_growing_lengths() {
        let words = MIN_BYTES / 8;
        clear();
        // Of two buffers that fit, the smaller serves.
        give(vec![0u64; 3 * words]);
        give(vec![0u64; 5 * words / 2]);
        give(vec![0u64; 2 * words]);
        let b = take(9 * words / 4).expect("fits");
        assert_eq!(b.capacity(), 5 * words / 2, "the smallest that fits");
        assert!(take(4 * words).is_none(), "none holds it");
        assert_eq!(
            take(words).map(|v| v.capacity()),
            None,
            "all twice too large or more"
        );
        give(b);
        clear();
        // A KV cache: four buffers a step, each a little longer than the
        // last step's, which come back after the new ones are taken.
        // Fresh buffers are what page faults cost: with classes alone a
        // length leaves its class every 12.5%, with headroom every 50%.
        let (mut fresh, mut prev) = (0, Vec::new());
        for t in 0..200 {
            let w = 2 * words + t * words / 25; // 2 → 10 × `words`
            let now: Vec<Vec<u64>> = (0..4)
                .map(|_| {
                    take(w).unwrap_or_else(|| {
                        fresh += 1;
                        zeroed(w).unwrap()
                    })
                })
                .collect();
            assert!(now.iter().all(|v| v.len() == w));
            prev.drain(..).for_each(give);
            prev = now;
        }
        // Each move to a larger buffer takes eight fresh ones (four, and
        // four more the step after, while the first four are out): the
        // first step's and log_1.5(5) ≈ 4 moves. Classes alone moved
        // about 14 times (log_1.125(5)).
        assert!(fresh <= 8 * 5, "{fresh} fresh buffers");
        clear();
    }

    // Part of the one test above (process-global pool). A buffer from
    // `HUGE_MIN` on takes the huge-page path (`huge::advise`: the probe,
    // the advice and the faulting loop, with only `madvise` itself
    // checked rather than made under Miri); it is kept, served again
    // with its contents and space, and released by the limit. Contents
    // are sampled, not scanned: Miri interprets every word it reads.
    fn huge_buffers_are_advised_kept_and_released() {
        clear();
        set_limit(3 * HUGE_MIN);
        let words = HUGE_MIN / 8 + 3; // not a class size: spare words
        let sample = |len: usize| (0..len).step_by(4099).chain([len - 1]);
        let mut v = zeroed(words).unwrap();
        assert_eq!((v.len(), v.capacity()), (words, class_words(words)));
        assert!(sample(words).all(|i| v[i] == 0), "fresh and zeroed");
        sample(words).for_each(|i| v[i] = i as u64 ^ 0x5a5a);
        let addr = v.as_ptr() as usize;
        give(v);
        let mut v = take(words + 1).expect("its class, one word longer");
        assert_eq!((v.as_ptr() as usize, v.len()), (addr, words + 1));
        assert!(sample(words).all(|i| v[i] == i as u64 ^ 0x5a5a), "stale");
        assert_eq!(v[words], 0, "grown into a zeroed spare word");
        v[words] = 1;
        give(v);
        // A second, larger one: over the limit together, the older goes.
        let released = stats().released;
        give(zeroed(2 * HUGE_MIN / 8).unwrap());
        assert!(stats().held_bytes <= 3 * HUGE_MIN);
        assert_eq!(stats().released, released + 1, "{:?}", stats());
        assert!(take(words).is_none(), "the first was released");
        set_limit(0);
        assert_eq!(stats().held_bytes, 0);
        set_limit(DEFAULT_LIMIT);
    }
}
