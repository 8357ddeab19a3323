//! The kernel cache: per (function, σ) compiled functions, LRU-bounded,
//! thread-safe, with statistics and a shape-generic path against recompile
//! storms.
//!
//! - Key: a fingerprint of the function (a hash of its printed IR, which
//!   includes the name, signature and every op) and σ (the output of
//!   `tc_runtime::contract::bind`; it fixes every dtype and shape of the
//!   body, since argument dtypes are fixed by the signature).
//! - Concurrency: the map lock is held only to find or insert a slot; the
//!   compilation runs in the slot's `OnceLock::get_or_init`, so concurrent
//!   first calls with the same σ compile once (the others wait on the slot)
//!   and different σ compile in parallel.
//! - Bound: at most [`CacheConfig::capacity`] specialised entries; the least
//!   recently used is evicted (a running call keeps its kernels alive).
//! - Recompile storms: with [`CacheConfig::specialize_after`] = N > 1, the
//!   first N − 1 calls with a new σ run the function's shape-generic kernels
//!   (compiled once per function, dims read at run time); the N-th call
//!   compiles the σ-specialised kernels. N = 1 (the default) specialises at
//!   once: the best steady state, and what a model with few shapes wants; a
//!   server seeing many shapes sets N ≥ 2 so a shape seen once never
//!   compiles.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use tc_core::ir::Function;
use tc_core::Sigma;
use tc_runtime::contract::{self, Arg};
use tc_runtime::Tensor;

use crate::exec::{compile_with, CompiledFn};
use crate::JitOptions;

/// Cache settings.
#[derive(Clone, Copy, Debug)]
pub struct CacheConfig {
    /// Maximum number of specialised entries (LRU eviction beyond).
    pub capacity: usize,
    /// Compile a σ-specialised kernel at the N-th call with that σ; before,
    /// run the shape-generic kernel. 0 or 1: specialise at the first call.
    pub specialize_after: u32,
    /// Code generation options.
    pub options: JitOptions,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: 256,
            specialize_after: 1,
            options: JitOptions::default(),
        }
    }
}

/// Cache statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Calls that found a specialised entry.
    pub hits: u64,
    /// Calls that created a specialised entry.
    pub misses: u64,
    /// σ-specialised compilations.
    pub compiles: u64,
    /// Shape-generic compilations (at most one per function while cached).
    pub generic_compiles: u64,
    /// Calls served by a shape-generic kernel.
    pub generic_runs: u64,
    /// Total compile time, milliseconds.
    pub compile_ms: f64,
    /// Entries evicted.
    pub evictions: u64,
    /// Calls run by the reference interpreter because the JIT could not
    /// compile the function (reason in [`Jit::last_fallback`]).
    pub fallbacks: u64,
}

/// How a call identifies its function.
#[derive(Clone, Copy)]
enum Ident {
    /// By address, confirmed by a structural comparison.
    Compare,
    /// By address alone (`&'static Function`).
    Static,
}

type Slot = Arc<OnceLock<Result<Arc<CompiledFn>, String>>>;

struct Entry {
    slot: Slot,
    tick: u64,
}

#[derive(Default)]
struct State {
    map: HashMap<(u64, Sigma), Entry>,
    generic: HashMap<u64, Slot>,
    seen: HashMap<(u64, Sigma), u32>,
    idents: HashMap<usize, (Arc<Function>, u64)>,
    /// Fingerprints of `'static` functions by address (bounded by the
    /// number of functions in the program: nothing `'static` is freed).
    static_idents: HashMap<usize, u64>,
    tick: u64,
}

/// A kernel cache (use [`Jit::global`] for the process-wide one).
pub struct Jit {
    config: Mutex<CacheConfig>,
    state: Mutex<State>,
    stats: Mutex<Stats>,
    last_fallback: Mutex<Option<String>>,
}

impl Default for Jit {
    fn default() -> Self {
        Jit::new(CacheConfig::default())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The function's identity: a hash of its printed form (name, signature, body).
pub fn fingerprint(func: &Function) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    func.to_string().hash(&mut h);
    func.sig.name.hash(&mut h);
    h.finish()
}

impl Jit {
    /// A cache with these settings.
    pub fn new(config: CacheConfig) -> Jit {
        Jit {
            config: Mutex::new(config),
            state: Mutex::new(State::default()),
            stats: Mutex::new(Stats::default()),
            last_fallback: Mutex::new(None),
        }
    }

    /// The process-wide cache used by [`crate::call`].
    pub fn global() -> &'static Jit {
        static G: OnceLock<Jit> = OnceLock::new();
        G.get_or_init(Jit::default)
    }

    /// Current settings.
    pub fn config(&self) -> CacheConfig {
        *lock(&self.config)
    }

    /// Change the settings (entries compiled with other options stay until evicted or cleared).
    pub fn set_config(&self, c: CacheConfig) {
        *lock(&self.config) = c;
        let mut st = lock(&self.state);
        let cap = c.capacity.max(1);
        let mut ev = 0;
        while st.map.len() > cap {
            evict_one(&mut st);
            ev += 1;
        }
        drop(st);
        lock(&self.stats).evictions += ev;
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        lock(&self.stats).clone()
    }

    /// Reset the statistics to zero.
    pub fn reset_stats(&self) {
        *lock(&self.stats) = Stats::default();
    }

    /// Drop every cached kernel.
    pub fn clear(&self) {
        *lock(&self.state) = State::default();
    }

    /// Number of specialised entries.
    pub fn len(&self) -> usize {
        lock(&self.state).map.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Why the last fallback to the interpreter happened.
    pub fn last_fallback(&self) -> Option<String> {
        lock(&self.last_fallback).clone()
    }

    fn ident(&self, st: &mut State, func: &Function) -> u64 {
        let addr = func as *const Function as usize;
        if let Some((f, fp)) = st.idents.get(&addr) {
            if **f == *func {
                return *fp;
            }
        }
        let fp = fingerprint(func);
        if st.idents.len() > 4096 {
            st.idents.clear();
        }
        st.idents.insert(addr, (Arc::new(func.clone()), fp));
        fp
    }

    /// Bind σ, find or compile the kernels, run them. Functions (or σ) the
    /// JIT cannot compile run on the reference interpreter, counted in
    /// [`Stats::fallbacks`].
    ///
    /// The function is identified by its address, confirmed by comparing
    /// it with the copy remembered for that address (a `Function` at a
    /// reused address may differ). Code built by `#[tensor_fn]` calls
    /// [`Jit::call_static`], which skips the comparison.
    pub fn call<'f>(
        &self,
        func: &Function,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
    ) -> Result<Tensor, tc_runtime::Error> {
        let nested = |name: &str, a: &[Arg]| {
            let callee = resolve(name)
                .ok_or_else(|| tc_runtime::Error::UnknownFunction(name.to_string()))?;
            self.call(callee, a, resolve)
        };
        self.call_with(func, Ident::Compare, args, resolve, &nested)
    }

    /// [`Jit::call`] for a `'static` function (what `#[tensor_fn]` builds
    /// once, in a `OnceLock`): its address alone identifies it, because a
    /// `&'static Function` is never freed and, having no interior
    /// mutability, never changes. A cache hit costs one hash-map lookup by
    /// address instead of a structural comparison of the whole IR; calls in
    /// the body (resolved to `'static` functions too) take the same path.
    pub fn call_static(
        &self,
        func: &'static Function,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'static Function> + Sync),
    ) -> Result<Tensor, tc_runtime::Error> {
        let nested = |name: &str, a: &[Arg]| {
            let callee = resolve(name)
                .ok_or_else(|| tc_runtime::Error::UnknownFunction(name.to_string()))?;
            self.call_static(callee, a, resolve)
        };
        self.call_with(func, Ident::Static, args, resolve, &nested)
    }

    fn call_with<'f>(
        &self,
        func: &Function,
        how: Ident,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        nested: &crate::exec::Nested,
    ) -> Result<Tensor, tc_runtime::Error> {
        let bound = contract::bind_args(&func.sig, args)?;
        let cfg = self.config();
        enum Pick {
            Special(Slot, bool),
            Generic(Slot),
        }
        let pick = {
            let mut st = lock(&self.state);
            let fp = match how {
                Ident::Compare => self.ident(&mut st, func),
                Ident::Static => {
                    let addr = func as *const Function as usize;
                    match st.static_idents.get(&addr) {
                        Some(fp) => *fp,
                        None => {
                            let fp = fingerprint(func);
                            st.static_idents.insert(addr, fp);
                            fp
                        }
                    }
                }
            };
            st.tick += 1;
            let tick = st.tick;
            let key = (fp, bound.sigma.clone());
            if let Some(e) = st.map.get_mut(&key) {
                e.tick = tick;
                Pick::Special(e.slot.clone(), false)
            } else {
                let seen = {
                    let c = st.seen.entry(key.clone()).or_insert(0);
                    *c += 1;
                    *c
                };
                if cfg.specialize_after <= 1 || seen >= cfg.specialize_after {
                    st.seen.remove(&key);
                    let slot: Slot = Arc::new(OnceLock::new());
                    st.map.insert(
                        key,
                        Entry {
                            slot: slot.clone(),
                            tick,
                        },
                    );
                    let mut ev = 0;
                    while st.map.len() > cfg.capacity.max(1) {
                        evict_one(&mut st);
                        ev += 1;
                    }
                    if ev > 0 {
                        lock(&self.stats).evictions += ev;
                    }
                    Pick::Special(slot, true)
                } else {
                    if st.seen.len() > 16 * cfg.capacity.max(16) {
                        st.seen.clear();
                    }
                    Pick::Generic(st.generic.entry(fp).or_default().clone())
                }
            }
        };
        let (slot, generic, fresh) = match pick {
            Pick::Special(s, fresh) => (s, false, fresh),
            Pick::Generic(s) => (s, true, false),
        };
        let compiled = slot.get_or_init(|| {
            let r = compile_with(func, &bound.sigma, resolve, cfg.options, generic);
            let mut s = lock(&self.stats);
            if let Ok(c) = &r {
                if generic {
                    s.generic_compiles += 1;
                } else {
                    s.compiles += 1;
                }
                s.compile_ms += c.compile_ms;
            }
            r.map(Arc::new).map_err(|e| e.to_string())
        });
        {
            let mut s = lock(&self.stats);
            if generic {
                s.generic_runs += 1;
            } else if fresh {
                s.misses += 1;
            } else {
                s.hits += 1;
            }
        }
        match compiled {
            Ok(c) => {
                if c.wants_worker()
                    && rayon::current_thread_index().is_none()
                    && rayon::current_num_threads() > 1
                {
                    // From outside the pool, `join` runs both closures on
                    // pool workers and blocks this thread once.
                    rayon::join(|| c.exec(&bound, args, resolve, nested), || ()).0
                } else {
                    c.exec(&bound, args, resolve, nested)
                }
            }
            Err(why) => {
                lock(&self.stats).fallbacks += 1;
                *lock(&self.last_fallback) = Some(why.clone());
                tc_runtime::exec::call(func, args, resolve)
            }
        }
    }
}

fn evict_one(st: &mut State) {
    if let Some(k) = st
        .map
        .iter()
        .min_by_key(|(_, e)| e.tick)
        .map(|(k, _)| k.clone())
    {
        st.map.remove(&k);
    }
}
