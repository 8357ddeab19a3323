//! Weights packed once per process (issue #15). A weight is the same tensor
//! on every call, yet the GEMM packed it (for a PyTorch-layout weight, a
//! transpose) on every call: most of a batch-1 MiniLM's time. Here the
//! packed form ([`PackedB`]) of a matmul's right operand that is a tensor
//! *parameter* is kept, keyed by that tensor's storage identity
//! ([`StorageId`]) and the view (address, strides, extents).
//!
//! Sound because storage is immutable: while the id still names the live
//! storage of the tensor passed now (checked on every hit), its bytes are
//! the ones packed. A dropped tensor's entries are dead and purged on the
//! next insertion; the weak id reserves the address until then, so no new
//! storage can be mistaken for it. The packing is the one the GEMM would
//! do, so results are bit-identical with or without the cache.
//!
//! Size: at most `TC_PACK_CACHE_MB` (default 1024; `0` turns it off) of
//! packed floats; beyond that a packing is used for the call and not kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tc_runtime::{StorageId, Tensor};

use crate::matmul::{PackCache, PackedB, ViewKey};

struct Entry {
    id: StorageId,
    packed: Arc<PackedB>,
}

#[derive(Default)]
struct Store {
    map: HashMap<(usize, ViewKey), Entry>,
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
        std::env::var("TC_PACK_CACHE_MB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
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

/// The cache as seen for one operand: the tensor whose storage the view
/// reads.
pub struct Owner<'t>(pub &'t Tensor);

impl PackCache for Owner<'_> {
    fn get(&self, key: &ViewKey) -> Option<Arc<PackedB>> {
        let id = StorageId::of(self.0);
        let st = lock();
        let e = st.map.get(&(id.addr(), *key))?;
        e.id.holds(self.0).then(|| e.packed.clone())
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
        let id = StorageId::of(self.0);
        st.bytes += packed.bytes();
        if let Some(old) = st.map.insert((id.addr(), key), Entry { id, packed }) {
            st.bytes -= old.packed.bytes();
        }
    }
}
