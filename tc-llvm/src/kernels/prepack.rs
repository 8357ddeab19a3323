//! Weights packed once per process (issue #15). A weight is the same tensor
//! on every call, yet the GEMM packed it (for a PyTorch-layout weight, a
//! transpose) on every call: most of a batch-1 MiniLM's time. Here the
//! packed form ([`PackedB`]) of a matmul's right operand that is a tensor
//! *parameter* is kept, keyed by that tensor's storage identity
//! ([`StorageId`]) and the view (address, strides, extents). It is packed
//! whole on the second call that sees the same live storage: a weight comes
//! back, while an activation passed to a callee is new storage every call
//! and keeps the per-call packing.
//!
//! Sound because storage bytes never change while shared: while the id
//! still names the live storage of the tensor passed now (checked on every
//! hit), its bytes are the ones packed (the id is a handle, so
//! [`Tensor::update_slice`] copies before it writes). A dropped tensor's
//! entries are dead and purged on the next insertion; the weak id reserves
//! the address until then, so no new storage can be mistaken for it. The
//! packing is the one the GEMM would do, so results are bit-identical with
//! or without the cache.
//!
//! Views seen once are remembered by the storage's uid
//! ([`Tensor::storage_uid`]), not by a weak id: a weak handle shares the
//! storage, and a decoder's KV cache, written in place every step with
//! [`Tensor::update_slice`], is read by the attention's products every
//! step; a handle on it would make every write copy the whole cache. A
//! record of a view seen once only decides whether to pack now; a packing
//! is always made from the bytes there now.
//!
//! Products of at most eight rows read a weight in place (`sweep.rs`)
//! until it is kept, not packing it per call; with the cache off
//! (`TC_PACK_CACHE_MB=0`) they always do, so a decoder then holds no
//! packed copy of its weights at all.
//!
//! Size: at most `TC_PACK_CACHE_MB` (default 1024; `0` turns it off) of
//! packed floats; beyond that a packing is used for the call and not kept.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use tc_runtime::{StorageId, Tensor};

use crate::kernels::matmul::{Lookup, PackCache, PackedB, ViewKey};

struct Entry {
    id: StorageId,
    packed: Arc<PackedB>,
}

#[derive(Default)]
struct Store {
    map: HashMap<(usize, ViewKey), Entry>,
    /// Views seen once, by storage uid (a weight is what comes back on a
    /// later call; an activation passed to a callee is new storage every
    /// call). Uids are never reused, so no new storage is mistaken for one
    /// seen; whether the storage still lives is not known, so the set is
    /// emptied when full.
    seen: HashSet<(u64, ViewKey)>,
    bytes: usize,
}

fn store() -> &'static Mutex<Store> {
    static S: OnceLock<Mutex<Store>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// The cap in bytes (`TC_PACK_CACHE_MB`).
pub fn cap_bytes() -> usize {
    static C: OnceLock<usize> = OnceLock::new();
    *C.get_or_init(|| {
        crate::ctx::Settings::get()
            .pack_cache_mb
            .unwrap_or(1024)
            .saturating_mul(1 << 20)
    })
}

/// Is the cache on (`TC_PACK_CACHE_MB` not 0)?
pub fn enabled() -> bool {
    cap_bytes() > 0
}

/// Bytes of packed weights kept now (live or not yet purged).
pub fn kept_bytes() -> usize {
    lock().bytes
}

fn lock() -> std::sync::MutexGuard<'static, Store> {
    store().lock().unwrap_or_else(|p| p.into_inner())
}

/// At most this many views remembered as seen once (all are forgotten when
/// it fills: a weight among them is then kept one call later).
const MAX_SEEN: usize = 4096;

/// The cache as seen for one operand: the tensor whose storage the view
/// reads.
pub struct Owner<'t>(pub &'t Tensor);

impl PackCache for Owner<'_> {
    fn get(&self, key: &ViewKey) -> Lookup {
        let id = StorageId::of(self.0);
        let k = (id.addr(), *key);
        let mut st = lock();
        if let Some(e) = st.map.get(&k).filter(|e| e.id.holds(self.0)) {
            return Lookup::Hit(e.packed.clone());
        }
        let once = (self.0.storage_uid(), *key);
        if st.seen.contains(&once) {
            return Lookup::Pack;
        }
        if st.seen.len() >= MAX_SEEN {
            st.seen.clear();
        }
        st.seen.insert(once);
        Lookup::Skip
    }

    fn put(&self, key: ViewKey, packed: Arc<PackedB>) {
        let cap = cap_bytes();
        let mut st = lock();
        if st.map.values().any(|e| !e.id.alive()) {
            st.map.retain(|_, e| e.id.alive());
            st.bytes = st.map.values().map(|e| e.packed.bytes()).sum();
        }
        if st.bytes.saturating_add(packed.bytes()) > cap {
            return;
        }
        st.seen.remove(&(self.0.storage_uid(), key));
        let id = StorageId::of(self.0);
        st.bytes += packed.bytes();
        if let Some(old) = st.map.insert((id.addr(), key), Entry { id, packed }) {
            st.bytes -= old.packed.bytes();
        }
    }
}

/// Quantized weights packed for fast numerics (`tc_quant::PackedWeights`,
/// Section 2 §18), kept like [`PackedB`]: by the storage identity of the
/// tensor parameter they were packed from, checked on every hit, and
/// counted against the same cap. Packed on the first call: a block-
/// quantized operand is a weight (activations are f32), and packing costs
/// about what one unpacked call spends transposing the blocks. The
/// packing is a layout only: results are bit-identical with or without
/// it.
pub mod quant {
    use super::*;
    use tc_quant::{Format, PackedWeights};

    /// The tensor's bytes (address and length) and the weight's shape:
    /// one storage may hold several views.
    type Key = (usize, usize, usize, Format, usize, usize);

    struct Entry {
        id: StorageId,
        packed: Arc<PackedWeights>,
    }

    #[derive(Default)]
    struct Store {
        map: HashMap<Key, Entry>,
    }

    fn store() -> &'static Mutex<Store> {
        static S: OnceLock<Mutex<Store>> = OnceLock::new();
        S.get_or_init(Default::default)
    }

    fn lock() -> std::sync::MutexGuard<'static, Store> {
        store().lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Packs the block-quantized weight `t` (`[n, k]`) now, as the first
    /// fast-numerics `qmatmul` on it would: a model loaded for fast
    /// numerics calls it on its weights so that no request (and no
    /// timed prefill) pays for the packing. Whether a packed form is held;
    /// `false` for a tensor that is not a rank-2 quantized weight of a
    /// packed format, on a host without the kernels, or with the cache off.
    pub fn prepack(t: &Tensor) -> bool {
        let Some(f) = tc_runtime::quant::format(t.dtype()) else {
            return false;
        };
        match *t.shape() {
            [n, k] => packed(t, f, n, k).is_some(),
            _ => false,
        }
    }

    /// Bytes of packed quantized weights kept now.
    pub fn kept_bytes() -> usize {
        lock().map.values().map(|e| e.packed.bytes()).sum()
    }

    /// Free the packed forms of weights that are gone (every tensor on
    /// their storage dropped); the bytes freed. Otherwise they are freed
    /// only when a later packing is kept: a program that drops its model
    /// (before it exits, where libLLVM's destructors touch its pages again,
    /// or to load another) calls this to give their memory back at once.
    pub fn drop_unused() -> usize {
        let gone: Vec<Entry> = {
            let mut st = lock();
            let dead: Vec<Key> = st
                .map
                .iter()
                .filter(|(_, e)| !e.id.alive())
                .map(|(k, _)| *k)
                .collect();
            dead.iter().filter_map(|k| st.map.remove(k)).collect()
        };
        // Freed outside the lock.
        gone.iter().map(|e| e.packed.bytes()).sum()
    }

    /// The packed form of tensor `t`'s bytes as the weight `[n, k]` of
    /// format `f`: `None` when the cache is off or the host has no packed
    /// kernel for `f` (then the caller reads the raw blocks). Past the
    /// cap, the packing serves this call and is not kept.
    pub fn packed(t: &Tensor, f: Format, n: usize, k: usize) -> Option<Arc<PackedWeights>> {
        if !enabled() {
            return None;
        }
        let bytes = t.bytes();
        let id = StorageId::of(t);
        let key = (id.addr(), bytes.as_ptr() as usize, bytes.len(), f, n, k);
        if let Some(e) = lock().map.get(&key).filter(|e| e.id.holds(t)) {
            return Some(e.packed.clone());
        }
        // Packed outside the lock: a large weight takes milliseconds.
        let packed = Arc::new(PackedWeights::new(f, bytes, n, k).ok()??);
        let mut st = lock();
        st.map.retain(|_, e| e.id.alive());
        let kept: usize = st.map.values().map(|e| e.packed.bytes()).sum();
        if kept
            .saturating_add(super::kept_bytes())
            .saturating_add(packed.bytes())
            > cap_bytes()
        {
            return Some(packed);
        }
        st.map.insert(
            key,
            Entry {
                id,
                packed: packed.clone(),
            },
        );
        // Fast numerics read only the packed copy from now on; a mapped
        // weight's file pages need not stay resident beside it.
        t.release_resident_pages();
        Some(packed)
    }
}
