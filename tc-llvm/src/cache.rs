//! The kernel cache: per (computation, options, σ) compiled functions,
//! LRU-bounded, thread-safe, with statistics and a shape-generic path
//! against recompile storms.
//!
//! - Key: `(fingerprint, JitOptions, σ)`.
//!   - The fingerprint ([`fingerprint`]) identifies the whole computation:
//!     a 128-bit structural hash of the function's signature (name, shape
//!     variables, constants, parameter names and types, `requires`, axioms,
//!     return type) and body (every instruction's op with its attributes and
//!     literal bits, annotations, dim bindings, the returned value), followed
//!     by the same for every callee its calls resolve to, transitively, in
//!     breadth-first order by name (each name once, so a call cycle ends;
//!     a name that does not resolve is hashed as such). Spans are not part
//!     of it (they change no result). A caller's buffers are planned from
//!     its callees' signatures, so two textually identical `f`s whose `g`s
//!     return different shapes must not share kernels: their fingerprints
//!     differ. It is computed once per function and remembered: per
//!     address for `'static` functions ([`Jit::call_static`]), per address
//!     confirmed by a structural comparison otherwise ([`Jit::call`]); both
//!     memos are confirmed on every call against what the resolver returns
//!     for each callee now, so a different resolver recomputes it.
//!   - [`JitOptions`]: kernels compiled under other options (fast math,
//!     deterministic reductions, threads) are never reused.
//!   - σ: the output of `tc_runtime::contract::bind`; it fixes every dtype
//!     and shape of the body, since argument dtypes are fixed by the
//!     signature.
//!
//!   What a callee returns at run time is still checked against the plan
//!   (`exec`'s call step): the key is an identity, the check is the safety.
//! - Nested calls carry their depth; a call that would nest deeper than
//!   `tc_runtime::interp::MAX_CALL_DEPTH` is `Error::CallDepth`, as in the
//!   interpreter (recursion through a module, or IR built by hand).
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

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use tc_core::ir::{Function, Op};
use tc_core::Sigma;
use tc_runtime::contract::{self, Arg};
use tc_runtime::interp::{Interpreter, MAX_CALL_DEPTH};
use tc_runtime::Tensor;

use crate::exec::{compile_at, CompiledFn};
use crate::jit::Tier;
use crate::options::{Error, JitOptions};

/// Cache settings.
#[derive(Clone, Copy, Debug)]
pub struct CacheConfig {
    /// Maximum number of specialised entries (LRU eviction beyond).
    pub capacity: usize,
    /// Compile a σ-specialised kernel at the N-th call with that σ; before,
    /// run the shape-generic kernel. 0 or 1: specialise at the first call;
    /// `u32::MAX`: never (a decoder whose T changes every step), and no
    /// per-σ count is kept either.
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
    /// Compilations (of either kind) whose object code came from the
    /// persistent cache ([`crate::disk`]) instead of LLVM.
    pub disk_loads: u64,
    /// Compilations (of either kind) with kernels at the quick tier
    /// ([`Jit::set_tiered`]), raised to the optimized tier in the
    /// background once they have run long enough.
    pub quick_compiles: u64,
    /// Entries evicted.
    pub evictions: u64,
    /// Calls run by the reference interpreter because the JIT could not
    /// compile the function (reason in [`Jit::last_fallback`]).
    pub fallbacks: u64,
}

/// A compiled slot: the kernels, or why they could not be built (and
/// whether that depends on σ, see [`Jit::run_call`]).
type Slot = Arc<OnceLock<Result<Arc<CompiledFn>, (String, bool)>>>;

type Key = (u128, JitOptions, Sigma);

/// A [`Key`] or its borrowed parts, so a lookup needs no copy of σ (a copy
/// is one allocation per variable, on every call): the std pattern of a
/// `Borrow<dyn Trait>` key, hashed and compared by the same parts.
trait KeyParts {
    fn parts(&self) -> (u128, JitOptions, &Sigma);
}

impl KeyParts for Key {
    fn parts(&self) -> (u128, JitOptions, &Sigma) {
        (self.0, self.1, &self.2)
    }
}

impl KeyParts for (u128, JitOptions, &Sigma) {
    fn parts(&self) -> (u128, JitOptions, &Sigma) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KeyParts + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

/// As the tuple's derived `Hash`: element after element, so a borrowed key
/// hashes like the owned one (the `Borrow` contract).
impl Hash for dyn KeyParts + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let (fp, opts, sigma) = self.parts();
        fp.hash(h);
        opts.hash(h);
        sigma.hash(h);
    }
}

impl PartialEq for dyn KeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyParts + '_ {}

struct Entry {
    slot: Slot,
    tick: u64,
}

/// A fingerprint remembered for a function compared by value: the copies it
/// was computed from (the function and what each transitive callee name
/// resolved to).
struct ByValue {
    func: Function,
    callees: Vec<(String, Option<Function>)>,
    fp: u128,
}

/// A fingerprint remembered for a `'static` function: the address each
/// transitive callee name resolved to (`'static` functions never change, so
/// the address is the identity).
struct ByAddr {
    callees: Vec<(String, Option<usize>)>,
    fp: u128,
}

#[derive(Default)]
struct State {
    map: HashMap<Key, Entry>,
    generic: HashMap<(u128, JitOptions), Slot>,
    seen: HashMap<Key, u32>,
    idents: HashMap<usize, Arc<ByValue>>,
    /// Fingerprints of `'static` functions by address (bounded by the
    /// number of functions in the program: nothing `'static` is freed).
    static_idents: HashMap<usize, Arc<ByAddr>>,
    tick: u64,
}

/// A kernel cache (use [`Jit::global`] for the process-wide one).
pub struct Jit {
    config: Mutex<CacheConfig>,
    /// [`Jit::set_tiered`].
    tiered: std::sync::atomic::AtomicBool,
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

/// Two SipHash streams fed the same bytes from different starting states:
/// a 128-bit hash (a 64-bit one would leave a collision, two computations
/// sharing kernels, at birthday odds over a long-running server's
/// functions). `DefaultHasher::new()` has fixed keys, so the value is the
/// same for the same IR within a build of the program, which is all an
/// in-memory cache needs.
struct Fp(DefaultHasher, DefaultHasher);

impl Fp {
    fn new() -> Fp {
        let (mut a, mut b) = (DefaultHasher::new(), DefaultHasher::new());
        a.write_u8(0xA5);
        b.write_u8(0x5A);
        Fp(a, b)
    }
    fn value(&self) -> u128 {
        ((self.0.finish() as u128) << 64) | self.1.finish() as u128
    }
}

impl Hasher for Fp {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
        self.1.write(bytes);
    }
    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// Every field of an op: its derived `Hash` (float scalars by their bits,
/// `tc_core::ir::Scalar`), so a new variant is keyed in full with no code
/// here.
fn hash_op(h: &mut Fp, op: &Op) {
    op.hash(h);
}

/// One function's signature and body, structurally (no spans).
fn hash_function(h: &mut Fp, f: &Function) {
    let sig = &f.sig;
    (&sig.name, &sig.vars, &sig.consts, &sig.ret).hash(h);
    sig.params.len().hash(h);
    for p in &sig.params {
        (&p.name, &p.ty).hash(h);
    }
    for preds in [&sig.requires, &sig.axioms] {
        preds.len().hash(h);
        for p in preds.iter() {
            p.node.hash(h);
        }
    }
    f.body.len().hash(h);
    for inst in &f.body {
        (inst.result, &inst.annot).hash(h);
        hash_op(h, &inst.op);
    }
    f.dim_bindings.len().hash(h);
    for b in &f.dim_bindings {
        (&b.name, b.of, b.axis, b.before).hash(h);
    }
    f.ret.hash(h);
}

/// The names `f` calls, in body order.
fn calls(f: &Function) -> impl Iterator<Item = &str> {
    f.body.iter().filter_map(|i| match &i.op {
        Op::Call(name, _) => Some(name.as_str()),
        _ => None,
    })
}

/// The fingerprint of `func` with its callees (see the module doc) and the
/// callees it covers, each name once with what it resolved to. A worklist,
/// not a recursion: call cycles (`f → g → f`, `relu → relu`) and deep call
/// chains cost no stack here (the depth limit applies when they run).
pub fn fingerprint_with<'f>(
    func: &Function,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
) -> (u128, Vec<(String, Option<&'f Function>)>) {
    let mut h = Fp::new();
    hash_function(&mut h, func);
    let mut callees = Vec::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut queue: VecDeque<String> = calls(func).map(String::from).collect();
    while let Some(name) = queue.pop_front() {
        if !done.insert(name.clone()) {
            continue;
        }
        let g = resolve(&name);
        name.hash(&mut h);
        match g {
            Some(g) => {
                1u8.hash(&mut h);
                hash_function(&mut h, g);
                queue.extend(calls(g).filter(|n| !done.contains(*n)).map(String::from));
            }
            None => 0u8.hash(&mut h),
        }
        callees.push((name, g));
    }
    (h.value(), callees)
}

/// The fingerprint of a function without resolvable calls (its calls are
/// hashed as unresolved names): [`fingerprint_with`] with no resolver.
pub fn fingerprint(func: &Function) -> u128 {
    fingerprint_with(func, &|_| None).0
}

impl Jit {
    /// A cache with these settings.
    pub fn new(config: CacheConfig) -> Jit {
        Jit {
            config: Mutex::new(config),
            tiered: std::sync::atomic::AtomicBool::new(crate::ctx::Settings::get().tiers),
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

    /// Tiered compilation on or off (on unless `TC_JIT_TIERS=0`): with it,
    /// a first call compiles the kernels the persistent cache lacks at the
    /// quick tier ([`crate::jit::Tier`]: the same bits, about a sixth of
    /// the compile time, slower code); once its calls have run quick code
    /// for [`crate::tier::TIER_UP_AFTER`], the function's optimized tier is
    /// compiled on a background thread ([`crate::tier`]) and replaces the
    /// quick code when ready. A [`dry_run`] always compiles the optimized
    /// tier.
    pub fn set_tiered(&self, on: bool) {
        self.tiered.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Raise every function this cache holds at the quick tier to the
    /// optimized tier now, and wait until every tier-up in the process is
    /// done: a benchmark's timed rounds, or a server that says it is warm,
    /// then run optimized code only.
    pub fn finish_tiers(&self) {
        let quick: Vec<Arc<CompiledFn>> = {
            let st = lock(&self.state);
            let slots = st.map.values().map(|e| &e.slot).chain(st.generic.values());
            slots
                .filter_map(|slot| match slot.get() {
                    Some(Ok(c)) if c.ask_tier_up() => Some(c.clone()),
                    _ => None,
                })
                .collect()
        };
        for c in &quick {
            crate::tier::submit(c);
        }
        crate::tier::finish_tier_ups();
    }

    /// [`Jit::set_tiered`]'s current value.
    pub fn tiered(&self) -> bool {
        self.tiered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Current settings.
    pub fn config(&self) -> CacheConfig {
        *lock(&self.config)
    }

    /// Change the settings. Entries compiled with other options stay until
    /// evicted or cleared, but are not used under the new options (the
    /// options are part of the key).
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

    /// The fingerprint of a function compared by value: remembered per
    /// address, confirmed by comparing the function and every transitive
    /// callee with the copies it was computed from (the lock is not held
    /// while the resolver runs).
    fn fp_by_value<'f>(
        &self,
        func: &Function,
        resolve: &dyn Fn(&str) -> Option<&'f Function>,
    ) -> u128 {
        let addr = func as *const Function as usize;
        let memo = lock(&self.state).idents.get(&addr).cloned();
        if let Some(m) = memo {
            let same = m.func == *func
                && m.callees.iter().all(|(n, g)| match (resolve(n), g) {
                    (Some(now), Some(then)) => now == then,
                    (None, None) => true,
                    _ => false,
                });
            if same {
                return m.fp;
            }
        }
        let (fp, callees) = fingerprint_with(func, resolve);
        let memo = Arc::new(ByValue {
            func: func.clone(),
            callees: callees.into_iter().map(|(n, g)| (n, g.cloned())).collect(),
            fp,
        });
        let mut st = lock(&self.state);
        if st.idents.len() > 4096 {
            st.idents.clear();
        }
        st.idents.insert(addr, memo);
        fp
    }

    /// The fingerprint of a `'static` function: remembered per address,
    /// confirmed by the addresses its callee names resolve to now.
    fn fp_static(
        &self,
        func: &'static Function,
        resolve: &dyn Fn(&str) -> Option<&'static Function>,
    ) -> u128 {
        let addr = func as *const Function as usize;
        let at = |g: Option<&Function>| g.map(|g| g as *const Function as usize);
        let memo = lock(&self.state).static_idents.get(&addr).cloned();
        if let Some(m) = memo {
            if m.callees.iter().all(|(n, a)| at(resolve(n)) == *a) {
                return m.fp;
            }
        }
        let (fp, callees) = fingerprint_with(func, resolve);
        let memo = Arc::new(ByAddr {
            callees: callees.into_iter().map(|(n, g)| (n, at(g))).collect(),
            fp,
        });
        lock(&self.state).static_idents.insert(addr, memo);
        fp
    }

    /// Bind σ, find or compile the kernels, run them. Functions (or σ) the
    /// JIT cannot compile run on the reference interpreter, counted in
    /// [`Stats::fallbacks`].
    ///
    /// The function is identified by its fingerprint, remembered per
    /// address and confirmed by comparing it (and its callees) with the
    /// copies remembered for that address (a `Function` at a reused
    /// address may differ). Code built by `#[tensor_fn]` calls
    /// [`Jit::call_static`], which skips the comparison.
    pub fn call<'f>(
        &self,
        func: &Function,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
    ) -> Result<Tensor, tc_runtime::Error> {
        self.call_in(AnyFn(func), args, resolve, 0, &self.call_config())
    }

    /// [`Jit::call`] for a `'static` function (what `#[tensor_fn]` builds
    /// once, in a `OnceLock`): its address identifies it, because a
    /// `&'static Function` is never freed and, having no interior
    /// mutability, never changes. A cache hit costs a hash-map lookup by
    /// address and one resolver call per callee (confirming the callees by
    /// address) instead of a structural comparison of the whole IR; calls
    /// in the body (resolved to `'static` functions too) take the same
    /// path.
    pub fn call_static(
        &self,
        func: &'static Function,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'static Function> + Sync),
    ) -> Result<Tensor, tc_runtime::Error> {
        self.call_in(StaticFn(func), args, resolve, 0, &self.call_config())
    }

    /// The settings a call from this thread runs under: [`Jit::config`]
    /// with this thread's [`with_quant_numerics`] choice, if any. Read
    /// once per outer call; its nested calls (on whichever thread) inherit
    /// it.
    fn call_config(&self) -> CacheConfig {
        let mut cfg = self.config();
        if let Some(n) = crate::options::quant_numerics() {
            cfg.options.fast_quant = n == tc_quant::quant::Numerics::Fast;
        }
        cfg
    }

    /// The one call path: identify the function as `C` does, bind σ, and
    /// run it ([`Jit::run_call`]), its nested calls `depth + 1` deep
    /// through this same path.
    fn call_in<'f, C: Callee<'f>>(
        &self,
        c: C,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        depth: usize,
        cfg: &CacheConfig,
    ) -> Result<Tensor, tc_runtime::Error> {
        let nested = |name: &str, a: &[Arg]| {
            let callee = nested_callee(name, resolve, depth)?;
            self.call_in(C::nested(callee), a, resolve, depth + 1, cfg)
        };
        let fp = c.fingerprint(self, resolve);
        let bound = c.bind(args)?;
        let call = (c.func(), fp, (args, &*bound));
        self.run_call(call, resolve, &nested, depth, cfg)
    }

    /// Find the slot for (fingerprint, options, σ), or the generic one.
    fn pick(&self, fp: u128, sigma: &Sigma, cfg: &CacheConfig) -> (Slot, bool, bool) {
        let mut st = lock(&self.state);
        st.tick += 1;
        let tick = st.tick;
        if let Some(e) = st.map.get_mut(&(fp, cfg.options, sigma) as &dyn KeyParts) {
            e.tick = tick;
            return (e.slot.clone(), false, false);
        }
        if cfg.specialize_after == u32::MAX {
            // Never specialised: counting σs (a clone and a hash of σ per
            // call) would be bookkeeping for nothing.
            let slot = st.generic.entry((fp, cfg.options)).or_default().clone();
            return (slot, true, false);
        }
        let key = (fp, cfg.options, sigma.clone());
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
            return (slot, false, true);
        }
        if st.seen.len() > 16 * cfg.capacity.max(16) {
            st.seen.clear();
        }
        let slot = st.generic.entry((fp, cfg.options)).or_default().clone();
        (slot, true, false)
    }

    /// Run a bound call: its compiled code from the cache
    /// ([`Jit::compiled`]), then [`Jit::dispatch`].
    fn run_call<'f>(
        &self,
        (func, fp, (args, bound)): (&Function, u128, (&[Arg], &contract::Bound)),
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        nested: &crate::exec::Nested,
        depth: usize,
        cfg: &CacheConfig,
    ) -> Result<Tensor, tc_runtime::Error> {
        // Before anything here uses the pool: tc builds it, pinned.
        crate::threads::init();
        let (slot, generic) = self.compiled(func, fp, &bound.sigma, resolve, cfg);
        let call = Call {
            func,
            args,
            bound,
            resolve,
            nested,
            depth,
        };
        // Filled by `compiled` (its `get_or_init`).
        match slot.get() {
            Some(Ok(c)) if c.is_quick() => {
                let t0 = std::time::Instant::now();
                let r = self.dispatch(c, &call);
                let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
                if c.ran_quick(ns, crate::tier::TIER_UP_AFTER) {
                    crate::tier::submit(c);
                }
                r
            }
            Some(Ok(c)) => self.dispatch(c, &call),
            Some(Err((why, sigma_dependent))) => {
                if generic && *sigma_dependent {
                    self.forget_generic(fp, cfg.options, &slot);
                }
                self.fall_back(why.clone(), &call)
            }
            None => self.fall_back("an empty cache slot".into(), &call),
        }
    }

    /// The compiled code for (fingerprint, options, σ) — a plain lookup,
    /// compiling on a miss, with its statistics — and whether it is the
    /// shape-generic one.
    fn compiled<'f>(
        &self,
        func: &Function,
        fp: u128,
        sigma: &Sigma,
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        cfg: &CacheConfig,
    ) -> (Slot, bool) {
        let (slot, generic, fresh) = self.pick(fp, sigma, cfg);
        slot.get_or_init(|| {
            // A dry run is a request to have everything compiled ahead.
            let tier = if self.tiered() && !dry() {
                Tier::Quick
            } else {
                Tier::Optimized
            };
            let r = compile_at(func, sigma, resolve, cfg.options, generic, tier);
            let mut s = lock(&self.stats);
            if let Ok(c) = &r {
                s.quick_compiles += u64::from(c.is_quick());
                if generic {
                    s.generic_compiles += 1;
                } else {
                    s.compiles += 1;
                }
                s.compile_ms += c.compile_ms;
                s.disk_loads += u64::from(c.from_disk);
            }
            // A planning error depends on σ (a size over the cap, a bad
            // dim), not on the function alone.
            r.map(Arc::new)
                .map_err(|e| (e.to_string(), matches!(e, Error::Runtime(_))))
        });
        let mut s = lock(&self.stats);
        if generic {
            s.generic_runs += 1;
        } else if fresh {
            s.misses += 1;
        } else {
            s.hits += 1;
        }
        (slot, generic)
    }

    /// The generic kernels serve every σ: a failure planning one σ must
    /// not send every later σ to the interpreter, so the failed slot is
    /// dropped (if it is still the one cached).
    fn forget_generic(&self, fp: u128, options: JitOptions, slot: &Slot) {
        let mut st = lock(&self.state);
        if st
            .generic
            .get(&(fp, options))
            .is_some_and(|s| Arc::ptr_eq(s, slot))
        {
            st.generic.remove(&(fp, options));
        }
    }

    /// The one place that decides how a compiled call runs: on the
    /// interpreter when its inlined calls would nest past the limit, as a
    /// dry run under [`dry_run`], in a pool session when its kernels want
    /// workers, else on this thread.
    fn dispatch(&self, c: &CompiledFn, call: &Call<'_, '_>) -> Result<Tensor, tc_runtime::Error> {
        let Call {
            func,
            args,
            bound,
            resolve,
            nested,
            depth,
        } = *call;
        if depth + c.inlined_levels() >= MAX_CALL_DEPTH {
            // Its body stands for calls nested deeper than the limit
            // allows from here: the interpreter makes them, to fail where
            // and as the semantics says (Section 4 §17).
            let why = format!(
                "`{}` inlines {} call levels, {depth} calls deep",
                func.sig.name,
                c.inlined_levels()
            );
            return self.fall_back(why, call);
        }
        if dry() {
            return c.dry_run(bound, args, resolve, nested);
        }
        if c.wants_worker() && !crate::team::in_session() {
            // One hop onto the pool for the whole call, with the other
            // workers kept awake for its splits.
            return crate::team::session(|| c.exec(bound, args, resolve, nested));
        }
        c.exec(bound, args, resolve, nested)
    }

    /// Run the call on the reference interpreter instead, counted in
    /// [`Stats::fallbacks`] with `why` as [`Jit::last_fallback`].
    fn fall_back(&self, why: String, call: &Call<'_, '_>) -> Result<Tensor, tc_runtime::Error> {
        lock(&self.stats).fallbacks += 1;
        *lock(&self.last_fallback) = Some(why);
        Interpreter::from_env().run_at_depth(call.func, call.args, call.resolve, call.depth)
    }
}

/// One bound call, as [`Jit::dispatch`] runs it.
#[derive(Clone, Copy)]
struct Call<'c, 'f> {
    func: &'c Function,
    args: &'c [Arg],
    bound: &'c contract::Bound,
    resolve: &'c (dyn Fn(&str) -> Option<&'f Function> + Sync),
    nested: &'c crate::exec::Nested<'c>,
    depth: usize,
}

thread_local! {
    static DRY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn dry() -> bool {
    DRY.with(|d| d.get())
}

/// Run `f` with every JIT call made on this thread *prepared but not
/// computed*: each call compiles its kernels, or links them from the
/// persistent cache ([`crate::disk`]), exactly as a real call with the
/// same shapes would, does the same for every nested call (with zero
/// tensors of the planned shapes as their arguments), and returns zeros of
/// its planned result shape without running a kernel.
///
/// For warm-up (issue #15): a server runs its forward pass once per shape
/// it will serve under `dry_run`, so that traffic finds every kernel ready,
/// without paying for the arithmetic. The values `f` sees are zeros, not
/// results. A call whose compilation fails falls back to the interpreter
/// and computes, as it would outside. Calls on other threads are not
/// affected, unless the work handed to them takes the setting along
/// ([`in_dry_run`] here, [`enter_dry_run`] there, as `tc::CallContext`
/// does): otherwise a model that hands some calls to the pool's workers
/// would compute them, compile them at the quick tier, and compile again
/// (tier up) later, when setup was meant to be over.
pub fn dry_run<R>(f: impl FnOnce() -> R) -> R {
    crate::options::with_local(&DRY, true, f)
}

/// Whether this thread's calls run dry ([`dry_run`]).
pub fn in_dry_run() -> bool {
    dry()
}

/// Run `f` with this thread's calls dry or not, as another thread's
/// [`in_dry_run`] gave it; restored after.
pub fn enter_dry_run<R>(on: bool, f: impl FnOnce() -> R) -> R {
    crate::options::with_local(&DRY, on, f)
}

// `run_with` lives here, not in exec.rs, because its nested calls go
// through the process-wide cache: exec.rs stays below the cache (no import
// cycle, issue #14).
impl CompiledFn {
    /// Bind the contract and run, resolving calls through `resolve` (each
    /// nested call runs through the process-wide cache, [`Jit::global`]).
    pub fn run_with<'f>(
        &self,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
    ) -> Result<Tensor, tc_runtime::Error> {
        let cfg = Jit::global().call_config();
        let nested = |name: &str, a: &[Arg]| {
            let callee = nested_callee(name, resolve, 0)?;
            Jit::global().call_in(AnyFn(callee), a, resolve, 1, &cfg)
        };
        self.run_nested(args, resolve, &nested)
    }
}

/// How a call's function is identified in the cache: by value
/// ([`AnyFn`]: compared with the copy remembered for its address) or by
/// its `'static` address ([`StaticFn`]). Its nested calls are identified
/// the same way.
trait Callee<'f>: Copy {
    /// How a callee that the resolver found is identified.
    type Nested: Callee<'f>;
    fn func(&self) -> &Function;
    /// The function's fingerprint (memoised per address).
    fn fingerprint(
        &self,
        jit: &Jit,
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
    ) -> u128;
    /// σ from the arguments (the contract).
    fn bind(&self, args: &[Arg]) -> Result<Arc<contract::Bound>, tc_runtime::Error>;
    fn nested(callee: &'f Function) -> Self::Nested;
}

/// Any function, identified by value ([`Jit::call`]).
#[derive(Clone, Copy)]
struct AnyFn<'a>(&'a Function);

/// A `'static` function, identified by address ([`Jit::call_static`]).
#[derive(Clone, Copy)]
struct StaticFn(&'static Function);

impl<'f> Callee<'f> for AnyFn<'_> {
    type Nested = AnyFn<'f>;
    fn func(&self) -> &Function {
        self.0
    }
    fn fingerprint(
        &self,
        jit: &Jit,
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
    ) -> u128 {
        jit.fp_by_value(self.0, resolve)
    }
    fn bind(&self, args: &[Arg]) -> Result<Arc<contract::Bound>, tc_runtime::Error> {
        contract::bind_args(&self.0.sig, args).map(Arc::new)
    }
    fn nested(callee: &'f Function) -> AnyFn<'f> {
        AnyFn(callee)
    }
}

impl Callee<'static> for StaticFn {
    type Nested = StaticFn;
    fn func(&self) -> &Function {
        self.0
    }
    fn fingerprint(
        &self,
        jit: &Jit,
        resolve: &(dyn Fn(&str) -> Option<&'static Function> + Sync),
    ) -> u128 {
        jit.fp_static(self.0, resolve)
    }
    fn bind(&self, args: &[Arg]) -> Result<Arc<contract::Bound>, tc_runtime::Error> {
        crate::bind_memo::bind_static(self.0, args)
    }
    fn nested(callee: &'static Function) -> StaticFn {
        StaticFn(callee)
    }
}

/// Resolve a nested call's callee, refusing a call that would nest deeper
/// than the interpreter allows (same check, same order, same error).
pub(crate) fn nested_callee<'f>(
    name: &str,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
    depth: usize,
) -> Result<&'f Function, tc_runtime::Error> {
    let callee =
        resolve(name).ok_or_else(|| tc_runtime::Error::UnknownFunction(name.to_string()))?;
    if depth + 1 >= MAX_CALL_DEPTH {
        return Err(tc_runtime::Error::CallDepth {
            callee: name.to_string(),
            max: MAX_CALL_DEPTH,
        });
    }
    Ok(callee)
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
