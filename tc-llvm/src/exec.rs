//! Compiled functions: planning + codegen + JIT at compile time, buffers,
//! thread splitting and steps at run time.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use tc_core::ir::{Function, Value, ValueMap};
use tc_core::{Dtype, Sigma};
use tc_runtime::contract::{self, Arg, Bound};
use tc_runtime::elem::Elem;
use tc_runtime::{cast, Tensor};

use crate::codegen::{self, extent, KernelShape, QKey};
use crate::ctx::ExecCtx;
use crate::jit::{Build, JitModule, Tier};
use crate::options::{Error, JitOptions};
use crate::plan::{self, Step, Structure, VKind, ValInfo};

/// Below this many elements of work a kernel runs on the calling thread
/// (outside a [`crate::team::session`]): a small tensor never pays for
/// waking the pool. About 30–60 µs of one core's elementwise work, the
/// order of two wake-ups of a sleeping pool worker on a VM (issue #15;
/// [`crate::kernels::matmul::PAR_MIN_MACS`] is the products' threshold).
pub const PAR_MIN_WORK: usize = 1 << 18;

/// The same inside a session, whose workers are awake.
pub const PAR_MIN_WORK_SESSION: usize = 1 << 16;

/// The elementwise split threshold under `ctx` (see [`PAR_MIN_WORK`]).
fn par_min_work(ctx: &ExecCtx) -> usize {
    if ctx.session {
        PAR_MIN_WORK_SESSION
    } else {
        PAR_MIN_WORK
    }
}

/// How a step calls another function by name (through a cache, which
/// decides how the callee is identified); `Sync` so a call can run on a
/// pool worker.
/// The state of one run of a compiled function: each value's buffer
/// pointer and owner, the scalar slots and the shape table the kernels
/// read.
struct RunState<'v> {
    vals: &'v ValueMap<ValInfo>,
    /// The extended σ of this call.
    sigma: &'v Sigma,
    ptrs: ValueMap<*mut u8>,
    owned_bufs: ValueMap<Option<Held>>,
    slots: Vec<u64>,
    shp: Vec<i64>,
    /// What the kernels of this run are handed.
    ctx: ExecCtx,
}

impl RunState<'_> {
    /// `out`'s buffer, its pointer recorded; `None` (the empty buffer held
    /// as the value) when `out` has no element: nothing to compute, and an
    /// empty value's other dims may be huge (`[2^40, 0]`), so a loop over
    /// its rows would run 2^40 empty iterations.
    fn output(&mut self, out: Value) -> Result<Option<Vec<u64>>, tc_runtime::Error> {
        let o = &self.vals[out];
        let mut buf = out_buffer(o.bytes())?;
        self.ptrs[out] = buf.as_mut_ptr().cast::<u8>();
        if o.numel() == 0 {
            self.owned_bufs[out] = Some(Held::Buf(buf));
            return Ok(None);
        }
        Ok(Some(buf))
    }
}

/// A generic compilation's plan for one σ: every value's shape and
/// layout, and σ extended by the body's dim bindings ([`plan::shapes`]).
type GenericPlan = (ValueMap<ValInfo>, Sigma);

/// The values a call runs with: the σ-specialised compilation's own, or a
/// generic compilation's plan for the call's σ.
enum Planned<'a> {
    Fixed(&'a ValueMap<ValInfo>),
    Generic(Arc<GenericPlan>),
}

impl Planned<'_> {
    fn vals(&self) -> &ValueMap<ValInfo> {
        match self {
            Planned::Fixed(v) => v,
            Planned::Generic(p) => &p.0,
        }
    }

    /// The extended σ of a generic plan (`None`: the compilation's own).
    fn sigma_ext(&self) -> Option<&Sigma> {
        match self {
            Planned::Fixed(_) => None,
            Planned::Generic(p) => Some(&p.1),
        }
    }
}

/// The plans of a generic compilation for the last [`PlanMemo::LEN`] σs
/// it ran with, most recent first. Planning evaluates every value's dims
/// from σ (string-keyed lookups): in GPT-2 decoding, where every function
/// is generic (the length changes every step) and `linear` alone meets
/// four σs per layer, 48 times a step, planning was about half of the time
/// a step spent outside kernels (issue #15). A plan is a function of the
/// function (fixed for a compilation: its callees are in its cache key)
/// and σ, so a remembered one is the plan. A server's decode step calls
/// the attention of each of its sequences in turn in every layer, each
/// with its own cache length: it needs as many σs as sequences (with 8,
/// 16 sequences never met their own again, and planning and binding were
/// a tenth of the step outside the kernels).
#[derive(Default)]
struct PlanMemo(std::sync::Mutex<std::collections::VecDeque<(Sigma, Arc<GenericPlan>)>>);

impl PlanMemo {
    const LEN: usize = 64;

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(Sigma, Arc<GenericPlan>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, sigma: &Sigma) -> Option<Arc<GenericPlan>> {
        let mut m = self.lock();
        let i = m.iter().position(|(s, _)| s == sigma)?;
        let hit = m.remove(i)?;
        let p = hit.1.clone();
        m.push_front(hit);
        Some(p)
    }

    fn put(&self, sigma: &Sigma, plan: Arc<GenericPlan>) {
        let mut m = self.lock();
        m.push_front((sigma.clone(), plan));
        m.truncate(Self::LEN);
    }
}

pub(crate) type Nested<'a> = dyn Fn(&str, &[Arg]) -> Result<Tensor, tc_runtime::Error> + Sync + 'a;

type KernelFn = unsafe extern "C" fn(*const *mut u8, *const i64, *const u64, i64, i64);

/// A function compiled for one σ (or, when generic, for every σ).
pub struct CompiledFn {
    func: Arc<Function>,
    st: Structure,
    vals: ValueMap<ValInfo>,
    sigma: Sigma,
    /// σ extended by the body's dim bindings (the views of matmul operands
    /// read slice starts from it).
    sigma_ext: Sigma,
    /// Call levels spliced into the body ([`crate::inline`]): 0 for none.
    inlined_levels: usize,
    /// The callees spliced in, as resolved when compiling.
    inlined: Vec<(String, Function)>,
    generic: bool,
    opts: JitOptions,
    /// Each kernel's entry point (a [`KernelFn`]'s address in one of
    /// `modules`) and loop structure. The address is replaced when the
    /// optimized tier is linked ([`CompiledFn::tier_up`]).
    kernels: Vec<(AtomicUsize, KernelShape)>,
    /// The kernels' exported names, in `kernels`' order.
    exports: Vec<String>,
    /// Steps large enough to split across the pool (σ-specialised only; 0
    /// for generic compilations), see [`CompiledFn::wants_worker`].
    par_regions: usize,
    qkeys: Vec<QKey>,
    /// The code `kernels` point into: the first compilation's module and,
    /// after a tier-up, the optimized one. Both are kept as long as this
    /// value, since a call that read an address before the swap may still
    /// be running the code behind it.
    modules: Mutex<Vec<JitModule>>,
    /// Some kernel still runs quick-tier code ([`Tier::Quick`]).
    quick: AtomicBool,
    /// Nanoseconds its calls ran while `quick` ([`CompiledFn::ran_quick`]).
    quick_ns: AtomicU64,
    /// The tier-up was asked for.
    tier_up_asked: AtomicBool,
    /// The plans of the last few σs (generic compilations only).
    plans: PlanMemo,
    /// Milliseconds spent compiling (planning, codegen, O3 and object code, or the persistent cache; linking).
    pub compile_ms: f64,
    /// Its object code came from the persistent cache ([`crate::disk`]).
    pub from_disk: bool,
    ir: String,
}

impl std::fmt::Debug for CompiledFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledFn")
            .field("func", &self.func.sig.name)
            .field("sigma", &self.sigma)
            .field("generic", &self.generic)
            .field("steps", &self.st.steps)
            .field("compile_ms", &self.compile_ms)
            .finish()
    }
}

/// The exported kernels' addresses in `m`, in `exports`' order.
fn kernel_addrs(m: &JitModule, exports: &[String]) -> Result<Vec<usize>, Error> {
    exports
        .iter()
        .map(|name| {
            m.addr(name)
                .ok_or_else(|| Error::Llvm(format!("missing {name}")))
        })
        .collect()
}

/// Compile the GEMM kernels `func`'s products will run: foreseen from
/// each matmul step's operand views and shapes under σ
/// ([`crate::kernels::matmul::prepare`], the decisions the call makes), each
/// product on a pool worker; for a shape-generic compilation, whose
/// shapes are not known yet, the host kernel ([`crate::kernels::matmul::warm_up`]).
/// A product whose views the planner cannot give is left to its call.
fn gemm_kernels(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    st: &Structure,
    sigma: &Sigma,
    generic: bool,
) -> Result<(), Error> {
    let products = matmul_steps(st);
    if products.is_empty() {
        return Ok(());
    }
    if generic {
        return crate::kernels::matmul::warm_up();
    }
    prepare_products(func, vals, st, sigma, &products, false)
}

/// The plan's products: (output, left, right) of every `Step::Matmul`.
fn matmul_steps(st: &Structure) -> Vec<(Value, Value, Value)> {
    st.steps
        .iter()
        .filter_map(|s| match s {
            Step::Matmul { out, a, b } => Some((*out, *a, *b)),
            _ => None,
        })
        .collect()
}

/// [`crate::kernels::matmul::prepare`] for each of `products` (`(out, a, b)`) under
/// the planned `vals` and σ, on pool workers; with `any_columns`, for
/// every column count and depth the product could have on a later call
/// ([`crate::kernels::matmul::prepare_any_columns`]).
fn prepare_products(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    st: &Structure,
    sigma: &Sigma,
    products: &[(Value, Value, Value)],
    any_columns: bool,
) -> Result<(), Error> {
    // Off the pool: this runs inside a compile (`crate::offpool`).
    let each = crate::offpool::map(products, |&(out, a, b)| {
        let [Some(va), Some(vb)] = [a, b].map(|v| plan::view(func, vals, &st.mat, sigma, v, false))
        else {
            return Ok(());
        };
        let kept = matches!(vals[vb.base].kind, VKind::TensorParam(_))
            && crate::kernels::prepack::enabled();
        let (sa, sb) = (&vals[a].shape, &vals[b].shape);
        let dt = vals[out].dtype;
        let strides = (va.strides.as_slice(), vb.strides.as_slice());
        crate::kernels::gemm_common::ahead(|| {
            if any_columns {
                crate::kernels::matmul::prepare_any_columns(dt, strides, (sa, sb))
            } else {
                crate::kernels::matmul::prepare(dt, strides, (sa, sb), kept)
            }
        })
    });
    each.into_iter().collect()
}

/// Compile `func` for σ (the output of `tc_runtime::contract::bind`).
/// With `generic`, the kernels read every shape quantity at run time and
/// the result serves any σ.
pub fn compile_with<'f>(
    func: &Function,
    sigma: &Sigma,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
    opts: JitOptions,
    generic: bool,
) -> Result<CompiledFn, Error> {
    compile_at(func, sigma, resolve, opts, generic, Tier::Optimized)
}

/// [`compile_with`], the kernels the persistent cache does not hold
/// compiled at `tier`. A [`Tier::Quick`] result computes the same bits and
/// can be raised to the optimized tier later ([`CompiledFn::tier_up`]).
pub fn compile_at<'f>(
    func: &Function,
    sigma: &Sigma,
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
    opts: JitOptions,
    generic: bool,
    tier: Tier,
) -> Result<CompiledFn, Error> {
    let t0 = std::time::Instant::now();
    // A compile called directly (not through a call) also splits on the
    // pool: tc builds it first, pinned (`threads`).
    crate::threads::init();
    tc_core::ir::verify(func)
        .map_err(|d| Error::Runtime(tc_runtime::Error::malformed(d.message)))?;
    // σ-specialised: small callees are spliced in (`inline`), so fusion
    // crosses their boundaries.
    let inlined = if generic {
        None
    } else {
        crate::inline::inline_calls(func, sigma, resolve)
    };
    let (func, (vals, sigma_ext)) = match &inlined {
        Some(i) => (&i.func, i.planned.clone()),
        None => (
            func,
            plan::shapes(func, sigma, resolve).map_err(Error::Runtime)?,
        ),
    };
    let concrete = (!generic).then_some((&vals, &sigma_ext));
    let mut st = plan::structure(func, &|v| vals[v].dtype, concrete);
    if !generic {
        plan::group_rows(func, &vals, &mut st);
    }
    plan::verify(func, &st).map_err(Error::Llvm)?;
    // The GEMM kernels load (or compile) on one of the pool's workers
    // while another writes the module's IR text and links its parts: on
    // a warm start (every object from the persistent cache) the kernels
    // were the last to finish, and they waited on the text (issue #15).
    // Off the pool: a compile holds its cache slot (`crate::offpool`).
    let (built, warm) = crate::offpool::join(
        || -> Result<_, Error> {
            let code = codegen::gen_module(func, &vals, &st, &sigma_ext, generic, opts)?;
            let (ir, exports) = (&code.ir, &code.exports);
            let module = (!exports.is_empty())
                .then(|| {
                    JitModule::compile_split(ir, &crate::rt::symbols(), exports, Build::Now(tier))
                })
                .transpose()?;
            Ok((code, module))
        },
        || gemm_kernels(func, &vals, &st, &sigma_ext, generic),
    );
    let (code, module) = built?;
    warm?;
    let addrs = match &module {
        None => Vec::new(),
        Some(m) => kernel_addrs(m, &code.exports)?,
    };
    let kernels: Vec<(AtomicUsize, KernelShape)> = addrs
        .into_iter()
        .zip(code.shapes.iter().cloned())
        .map(|(a, shape)| (AtomicUsize::new(a), shape))
        .collect();
    let par_regions = if generic {
        0
    } else {
        parallel_regions(func, &vals, &st, &kernels)
    };
    let from_disk = module.as_ref().is_some_and(|m| m.from_disk);
    let quick = module.as_ref().is_some_and(|m| m.quick);
    Ok(CompiledFn {
        par_regions,
        func: Arc::new(func.clone()),
        st,
        vals,
        sigma: sigma.clone(),
        sigma_ext,
        inlined_levels: inlined.as_ref().map_or(0, |i| i.levels),
        inlined: inlined.map(|i| i.callees).unwrap_or_default(),
        generic,
        opts,
        kernels,
        exports: code.exports,
        qkeys: code.qkeys,
        modules: Mutex::new(module.into_iter().collect()),
        quick: AtomicBool::new(quick),
        quick_ns: AtomicU64::new(0),
        tier_up_asked: AtomicBool::new(false),
        plans: PlanMemo::default(),
        compile_ms: t0.elapsed().as_secs_f64() * 1e3,
        from_disk,
        ir: code.ir,
    })
}

/// How many regions of a σ-specialised function split across the pool:
/// its steps large enough (the thresholds of [`run_split`] and of the
/// matmul; a call counts when its result is that large), a product as two
/// (it packs and computes each K-block in separate splits).
fn parallel_regions(
    func: &Function,
    vals: &ValueMap<ValInfo>,
    st: &Structure,
    kernels: &[(AtomicUsize, KernelShape)],
) -> usize {
    let numel = |v: &Value| vals[*v].numel();
    let splits = |step: &Step| match step {
        // An empty output runs no kernel (`exec`), and its leading dims
        // may multiply past usize.
        Step::Kernel { out, .. } | Step::Matmul { out, .. } if numel(out) == 0 => false,
        Step::Kernel { id, out, .. } => kernels.get(*id).is_some_and(|(_, shape)| {
            let (outer, work) = extent(func, vals, *out, shape);
            let work = work.max(1).saturating_mul(plan::split_weight(st, *out));
            outer >= 2 && outer.saturating_mul(work) >= PAR_MIN_WORK
        }),
        Step::Group { members, .. } => members.last().is_some_and(|m| numel(m) >= PAR_MIN_WORK),
        Step::Matmul { out, a, .. } => {
            let sa = &vals[*a].shape;
            let k = sa.last().copied().unwrap_or(1);
            numel(out).saturating_mul(k) >= crate::kernels::matmul::PAR_MIN_MACS
        }
        Step::Call { out, .. } => numel(out) >= PAR_MIN_WORK,
        Step::Sdpa { out } => sdpa_work(func, vals, *out).1 >= crate::kernels::matmul::PAR_MIN_MACS,
        // Block copies / lane sorts on the calling thread.
        Step::Gather { .. } | Step::Host { .. } => false,
    };
    st.steps
        .iter()
        .filter(|step| splits(step))
        .map(|step| 1 + usize::from(matches!(step, Step::Matmul { .. })))
        .sum()
}

/// Compile `func` specialised to σ (calls in the body are not resolvable:
/// use [`compile_with`] for those).
pub fn compile(func: &Function, sigma: &Sigma, opts: JitOptions) -> Result<CompiledFn, Error> {
    compile_with(func, sigma, &|_| None, opts, false)
}

/// Run `f` over `0..outer`, split across the pool (chunk bounds multiples of
/// `align`) unless `threads == 1` or the work is small.
///
/// # Safety
/// `f` must be a kernel whose buffers in `p` hold their planned shapes,
/// with `outer` its planned outer extent (the kernel indexes only rows
/// `lo..hi ⊆ 0..outer` of its output and what those rows read). It stays
/// `unsafe`: nothing here can check raw buffers against the kernel's code.
// SAFETY: (contract) established by its caller `CompiledFn::exec`, see there.
unsafe fn run_split(f: KernelFn, p: Ptrs, outer: usize, work: usize, align: usize, ctx: &ExecCtx) {
    let serial =
        ctx.threads == 1 || outer < 2 || outer.saturating_mul(work.max(1)) < par_min_work(ctx);
    if serial {
        if outer > 0 {
            // SAFETY: the whole range `0..outer`, within the buffers by this
            // function's contract.
            unsafe { f(p.0, p.1, p.2, 0, outer as i64) };
        }
        return;
    }
    par_ranges(outer, align, |lo, hi| {
        // The whole `Ptrs` (Send + Sync), not its raw-pointer fields, which
        // a closure would capture one by one.
        #[allow(clippy::redundant_locals)]
        let p = p;
        // SAFETY: `par_ranges` hands out disjoint `lo..hi ⊆ 0..outer`, so
        // each call stays within the buffers (this function's contract)
        // and the concurrent calls write disjoint output rows.
        unsafe { f(p.0, p.1, p.2, lo as i64, hi as i64) };
    });
}

/// Split `0..outer` into about four ranges per pool thread, with bounds at
/// multiples of `align`, and run `f` on each non-empty range across the
/// pool.
fn par_ranges(outer: usize, align: usize, f: impl Fn(usize, usize) + Sync) {
    let align = align.max(1);
    let nt = rayon::current_num_threads().max(1);
    let chunks = (nt * 4).min(outer.div_ceil(align)).max(1);
    let bound_at = |c: usize| -> usize {
        if c >= chunks {
            outer
        } else {
            (outer * c / chunks) / align * align
        }
    };
    (0..chunks).into_par_iter().for_each(|c| {
        let (lo, hi) = (bound_at(c), bound_at(c + 1));
        if hi > lo {
            f(lo, hi);
        }
    });
}

/// An sdpa's leading indices and its multiply-adds (`L·M·T·(D + E)`,
/// saturating), from its planned shapes.
fn sdpa_work(func: &Function, vals: &ValueMap<ValInfo>, out: Value) -> (usize, usize) {
    let Some(tc_core::ir::Op::Sdpa { q, k, .. }) = func.inst(out).map(|i| &i.op) else {
        return (0, 0);
    };
    let (sq, sk, so) = (&vals[*q].shape, &vals[*k].shape, &vals[out].shape);
    let n = sq.len();
    if n < 2 || sk.len() != n || so.len() != n {
        return (0, 0);
    }
    let lead = sq[..n - 2].iter().fold(1usize, |a, &x| a.saturating_mul(x));
    let per = sq[n - 2].saturating_mul(sk[n - 1]);
    let width = sq[n - 1].saturating_add(so[n - 1]);
    (lead, lead.saturating_mul(per).saturating_mul(width))
}

/// An sdpa operand's element type and view ([`CompiledFn::sdpa_views`]).
type SdpaView = (crate::kernels::attention::Elem, plan::StridedView);

/// An sdpa operand for the kernel: its first element's address (in bounds:
/// `fits` checked every element the view addresses), element type and
/// strides.
fn sdpa_operand<'w>(
    ptrs: &ValueMap<*mut u8>,
    (elem, w): &'w SdpaView,
) -> crate::kernels::attention::Operand<'w> {
    crate::kernels::attention::Operand {
        ptr: ptrs[w.base]
            .cast_const()
            .wrapping_add(w.offset * elem.bytes()),
        elem: *elem,
        strides: &w.strides,
    }
}

/// An sdpa's problem shared by the pool's tasks.
struct SharedProblem<'a>(crate::kernels::attention::Problem<'a>);
// SAFETY: the problem's pointers are only read (the operands, which no task
// writes) while `par_ranges` runs, and it joins every task before the
// buffers they point into can be freed.
unsafe impl Sync for SharedProblem<'_> {}

/// Flat outputs from this size on are written with streaming stores
/// (`run_flat_streamed`): twice the L2 of these machines, so a value
/// this large would not stay in cache for its consumer anyway.
pub const STREAM_MIN: usize = 8 << 20;

/// Elements per tile of [`run_flat_streamed`] (a multiple of the 64-element
/// chunk alignment; at most 32 KiB of output per tile, in L1).
const TILE: usize = 4096;

/// Whether large flat outputs use streaming stores: on unless `TC_STREAM=0`
/// or [`set_streaming`]`(false)` (for measuring them).
pub fn streaming() -> bool {
    crate::ctx::Settings::get().streaming_stores.on()
}

/// Turn streaming stores for large flat outputs on or off (process-wide).
pub fn set_streaming(on: bool) {
    crate::ctx::Settings::get().streaming_stores.set(on)
}

thread_local! {
    static TILE_BUF: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Copy `n` bytes with non-temporal (streaming) stores: the destination's
/// cache lines are written without first being read (an ordinary store
/// reads the line it writes, one extra memory stream for a large output),
/// and do not evict the inputs from cache. Ends with `sfence`, so the data
/// is globally visible before the chunk reports completion to the pool.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes, not overlapping.
// SAFETY: (contract) established by `run_flat_streamed`, its only caller.
unsafe fn stream_copy(dst: *mut u8, src: *const u8, n: usize) {
    // Every access is to bytes `0..head` or `head..n`, `head ≤ n`; in the
    // loop `dst + i` is 16-byte aligned (`align_offset` chose `head`), as
    // `_mm_stream_si128` requires; the loads are unaligned ones.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: so inside both ranges (the contract); SSE2 (loads, streaming
    // stores, `sfence`) is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = (dst.align_offset(16)).min(n);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 16 <= n {
            let v = _mm_loadu_si128(src.add(i) as *const __m128i);
            _mm_stream_si128(dst.add(i) as *mut __m128i, v);
            i += 16;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), n - i);
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the contract: both ranges valid for `n` bytes, disjoint.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, n)
    };
}

/// A flat kernel (every buffer read at the output's own linear index, all
/// of the output's length) over a large output: each chunk runs the kernel
/// tile by tile into an L1 scratch tile (inputs passed offset to the tile's
/// start, so the kernel runs over `0..len`) and streams the tile to the
/// output with [`stream_copy`]. For `relu(a*b + c)` over 16M f32 this
/// writes 64 MB instead of reading and writing it (the store's line fill):
/// 3 + 1 memory streams instead of 3 + 2. Same kernel, same elements: the
/// result is bit-identical to [`run_split`]'s.
///
/// # Safety
/// As [`run_split`]; `list[0]` is the output, `list[1..]` the inputs, with
/// `dts` their dtypes (storage bytes of a prefix of `i` elements:
/// `Dtype::storage_bytes`, exact at the 64-element multiples used here).
// SAFETY: (contract) established by its caller `CompiledFn::exec`, see there.
unsafe fn run_flat_streamed(
    f: KernelFn,
    list: &[*mut u8],
    dts: &[Dtype],
    shp: *const i64,
    slots: *const u64,
    outer: usize,
    threads: usize,
) {
    struct Ctx<'a> {
        list: &'a [*mut u8],
        dts: &'a [Dtype],
        shp: *const i64,
        slots: *const u64,
    }
    // SAFETY: `Ctx` is shared by the pool's chunks only to read its raw
    // pointers; through them each chunk writes its own disjoint output range
    // (`par_ranges`) and its own thread-local tile, and only reads the
    // inputs, which no step writes while the kernel runs.
    unsafe impl Sync for Ctx<'_> {}
    let ctx = Ctx {
        list,
        dts,
        shp,
        slots,
    };
    let chunk = |lo: usize, hi: usize| {
        let ctx = &ctx;
        TILE_BUF.with(|t| {
            let mut t = t.borrow_mut();
            let words = ctx.dts[0].storage_bytes(TILE).div_ceil(8);
            if t.len() < words {
                t.resize(words, 0);
            }
            let mut moved: Vec<*mut u8> = ctx.list.to_vec();
            moved[0] = t.as_mut_ptr().cast::<u8>();
            let mut base = lo;
            while base < hi {
                let len = TILE.min(hi - base);
                // `base + len ≤ hi ≤ outer` and every buffer holds `outer`
                // elements (the contract): each input offset by `base` still
                // has the `len ≤ TILE` elements the kernel reads, writing
                // the tile (sized for TILE outputs above).
                // SAFETY: so in bounds; the copy writes this chunk's own
                // output elements `base..base + len` from the disjoint tile.
                unsafe {
                    for (k, p) in ctx.list.iter().enumerate().skip(1) {
                        moved[k] = p.add(ctx.dts[k].storage_bytes(base));
                    }
                    f(moved.as_ptr(), ctx.shp, ctx.slots, 0, len as i64);
                    let out = ctx.list[0].add(ctx.dts[0].storage_bytes(base));
                    stream_copy(out, moved[0], ctx.dts[0].storage_bytes(len));
                }
                base += len;
            }
        })
    };
    if threads == 1 || outer < 2 * TILE {
        chunk(0, outer);
        return;
    }
    par_ranges(outer, TILE, chunk);
}

/// `TC_LLVM_PROFILE=1`: print every step's time to stderr.
fn profiling() -> bool {
    crate::ctx::Settings::get().profile_steps
}

fn describe_step(step: &Step, vals: &ValueMap<ValInfo>) -> String {
    let sh = |v: &Value| format!("{:?}", vals[*v].shape);
    match step {
        Step::Kernel { out, .. } => format!("kernel -> {}", sh(out)),
        Step::Group { members, .. } => format!(
            "row group of {} -> {}",
            members.len(),
            members.last().map(sh).unwrap_or_default()
        ),
        Step::Matmul { out, a, b } => format!("matmul {} x {} -> {}", sh(a), sh(b), sh(out)),
        Step::Call { name, out, .. } => format!("call {name} -> {}", sh(out)),
        Step::Gather {
            out, table, ids, ..
        } => {
            format!("gather {} by {} -> {}", sh(table), sh(ids), sh(out))
        }
        Step::Host { out } => format!("host op -> {}", sh(out)),
        Step::Sdpa { out } => format!("sdpa -> {}", sh(out)),
    }
}

/// Later steps read a call's result as the planned dtype and shape,
/// planned from the callee's signature, and possibly from another callee
/// than the one that ran (the resolver is the caller's and may change): a
/// different result is an error, never a buffer read past its end.
fn check_call_result(name: &str, want: &ValInfo, got: &Tensor) -> Result<(), tc_runtime::Error> {
    if got.dtype() == want.dtype && got.shape() == want.shape.as_slice() {
        return Ok(());
    }
    Err(tc_runtime::Error::CallResult {
        callee: name.to_string(),
        expected_dtype: want.dtype,
        expected_shape: want.shape.clone(),
        found_dtype: got.dtype(),
        found_shape: got.shape().to_vec(),
    })
}

/// An output buffer of `bytes` bytes in 8-byte words (the storage
/// `Tensor::from_word_storage` takes without a copy).
///
/// A buffer of the same size dropped by an earlier call comes from
/// [`tc_runtime::pool`] (no `mmap`, no faults, no zeroing by the kernel):
/// its stale contents are fine because every step writes every element of
/// its output (kernels loop over the whole output, matmul overwrites C on
/// its first K-block and zero-fills when K = 0); only the padding past the
/// last element is cleared, to keep the storage invariant. Otherwise a
/// fresh zeroed buffer, on transparent huge pages when large
/// ([`tc_runtime::pool::zeroed`]).
/// `OutOfMemory` when a fresh buffer cannot be allocated.
fn out_buffer(bytes: usize) -> tc_runtime::Result<Vec<u64>> {
    tc_runtime::pool::overwritable(bytes.div_ceil(8))
}

/// A [`Step::Gather`]: the ids checked, then the output's buffer and the
/// block copies ([`crate::gather`]).
fn run_gather(
    out: Value,
    axis: usize,
    table: Value,
    ids: Value,
    st: &mut RunState,
) -> Result<(), tc_runtime::Error> {
    let vals = st.vals;
    let (t, x) = (&vals[table], &vals[ids]);
    let (tp, ip) = (st.ptrs[table], st.ptrs[ids]);
    // A gather's operands are materialized (plan::structure forces them)
    // and computed by earlier steps or bound as arguments: each pointer is
    // the storage of its planned shape (checked by `contract::bind_args`,
    // or sized by `out_buffer` from the same `vals`).
    // SAFETY: so `bytes()` initialised bytes are there, alive in
    // `st.owned_bufs`/`args` for the step and unwritten (the output is new).
    let (ids_bytes, table_bytes) = unsafe { (bytes_of(ip, x.bytes()), bytes_of(tp, t.bytes())) };
    crate::gather::check_ids(axis, &t.shape, &x.shape, ids_bytes)?;
    let Some(mut buf) = st.output(out)? else {
        return Ok(());
    };
    let o = &vals[out];
    let n = o.bytes().min(buf.len() * 8);
    // SAFETY: `buf` is an owned, initialised `Vec<u64>` of at least
    // `o.bytes()` bytes (`out_buffer`), viewed as bytes for the copy only.
    let out_bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), n) };
    crate::gather::copy(o.dtype, axis, &t.shape, table_bytes, ids_bytes, out_bytes)?;
    st.owned_bufs[out] = Some(Held::Buf(buf));
    Ok(())
}

/// `n` bytes at `p` (none when `n` is 0 or `p` is null).
///
/// # Safety
/// When `n > 0` and `p` is not null, `p` points at `n` initialised bytes
/// that stay valid and unwritten for `'a`.
// SAFETY: an `unsafe fn`: its callers uphold the contract just above.
unsafe fn bytes_of<'a>(p: *mut u8, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p.cast_const(), n) }
}

/// A computed value's storage: the kernel's word buffer, or (once it has
/// been passed to or returned from an `Op::Call` callee) a shared tensor
/// that owns the same allocation. Either way `ptrs[v]` points into it.
enum Held {
    Buf(Vec<u64>),
    T(Tensor),
}

impl Held {
    /// Move a word buffer into a tensor (no copy: the `Vec`'s heap
    /// allocation moves into the tensor's `Arc`, so pointers into it stay
    /// valid).
    fn into_tensor(mut self, info: &ValInfo) -> Result<Tensor, tc_runtime::Error> {
        match &mut self {
            Held::Buf(b) => Tensor::from_word_storage(info.dtype, &info.shape, std::mem::take(b)),
            Held::T(t) => Ok(t.clone()),
        }
    }
}

impl Drop for Held {
    /// Intermediate buffers go back to the storage pool for the next call.
    fn drop(&mut self) {
        if let Held::Buf(b) = self {
            tc_runtime::pool::give(std::mem::take(b));
        }
    }
}

#[derive(Clone, Copy)]
struct Ptrs(*const *mut u8, *const i64, *const u64);
// SAFETY: a `Ptrs` crosses threads only inside `run_split`, whose caller
// keeps the pointed-to list, shape table, slots and buffers alive until it
// returns (`par_ranges` joins); the chunks write disjoint output rows and
// only read everything else, so sharing the pointers races on nothing.
unsafe impl Send for Ptrs {}
// SAFETY: as for `Send` just above.
unsafe impl Sync for Ptrs {}

impl CompiledFn {
    /// The generated (unoptimised) IR text.
    pub fn ir(&self) -> &str {
        &self.ir
    }

    /// Whether a call from outside the rayon pool should run on a pool
    /// worker: when two or more steps split across the pool. Each split
    /// started from an outside thread hands its work to sleeping workers and
    /// puts the caller to sleep until they finish (two thread wake-ups, tens
    /// of µs each on a VM); started on a worker, the split pushes onto the
    /// worker's own deque while the other worker is still spinning from the
    /// previous step. One hop for the whole call instead of one per step:
    /// the BERT-sized block bench went from 20.9 ms to 16.4 ms on 2 threads.
    pub fn wants_worker(&self) -> bool {
        self.par_regions >= 2 && self.opts.threads != 1 && !crate::team::in_serial()
    }

    /// The thread count steps run with: 1 when the options say so *or* the
    /// pool has one thread. A split over a one-thread pool started from
    /// outside it only hands each step to the pool's worker and puts the
    /// caller to sleep until it is done: with `RAYON_NUM_THREADS=1`, MiniLM
    /// spent 15–33% of its samples in those wake-ups (issue #15). Also 1
    /// inside [`crate::team::serial`].
    fn threads(&self) -> usize {
        if rayon::current_num_threads() <= 1 || crate::team::in_serial() {
            1
        } else {
            self.opts.threads
        }
    }

    /// The call levels spliced into the body ([`crate::inline`]; 0: none).
    /// Run `depth` calls deep, the body stands for calls down to `depth +
    /// inlined_levels()`: past the interpreter's depth limit the caller
    /// must run the interpreter instead (`cache` does).
    pub fn inlined_levels(&self) -> usize {
        self.inlined_levels
    }

    /// True for a shape-generic compilation.
    pub fn is_generic(&self) -> bool {
        self.generic
    }

    /// The σ it was compiled for.
    pub fn sigma(&self) -> &Sigma {
        &self.sigma
    }

    /// Kernel `id`'s entry point: the optimized tier's once it is linked.
    fn kernel(&self, id: usize) -> KernelFn {
        // Acquire: pairs with `tier_up`'s release, so the code behind a
        // swapped address is visible to this thread.
        let a = self.kernels[id].0.load(Ordering::Acquire);
        // SAFETY: `a` is ORC's address of the export `self.exports[id]` in
        // one of `self.modules` (mapped as long as `self`), and every `k{id}`
        // has exactly the `KernelFn` signature (codegen::finish_fn).
        unsafe { std::mem::transmute::<usize, KernelFn>(a) }
    }

    /// Whether some kernel still runs quick-tier code ([`Tier::Quick`]).
    pub fn is_quick(&self) -> bool {
        self.quick.load(Ordering::Acquire)
    }

    /// Count `ns` nanoseconds of a call that ran quick code; true exactly
    /// once, when its calls have together run `after`
    /// ([`crate::tier::TIER_UP_AFTER`]): then the caller queues
    /// [`CompiledFn::tier_up`]. A program that calls it briefly (a one-shot
    /// embedding) never pays for the optimized tier; one that runs it
    /// longer (a server, a batch of 8 × 128 tokens) gets it soon.
    pub(crate) fn ran_quick(&self, ns: u64, after: std::time::Duration) -> bool {
        let total = self
            .quick_ns
            .fetch_add(ns, Ordering::Relaxed)
            .saturating_add(ns);
        total as u128 >= after.as_nanos() && self.ask_tier_up()
    }

    /// True exactly once while quick: the first asker queues the tier-up.
    pub(crate) fn ask_tier_up(&self) -> bool {
        self.is_quick() && !self.tier_up_asked.swap(true, Ordering::Relaxed)
    }

    /// Compile the kernels at [`Tier::Optimized`] (parts the persistent
    /// cache holds are loaded; compiled parts are stored) on this thread,
    /// one part after another, and switch every kernel to them. Calls
    /// running meanwhile go on with the quick code, which stays mapped:
    /// both compute the same bits. Nothing to do unless [`Self::is_quick`].
    pub fn tier_up(&self) -> Result<(), Error> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if !self.is_quick() {
            return Ok(());
        }
        let m = JitModule::compile_split(
            &self.ir,
            &crate::rt::symbols(),
            &self.exports,
            Build::Background,
        )?;
        let addrs = kernel_addrs(&m, &self.exports)?;
        for ((slot, _), a) in self.kernels.iter().zip(addrs) {
            slot.store(a, Ordering::Release);
        }
        modules.push(m);
        self.quick.store(false, Ordering::Release);
        Ok(())
    }

    /// Number of fused kernels.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    /// The planned steps.
    pub fn steps(&self) -> &[Step] {
        &self.st.steps
    }

    /// Bind the contract and run (the body must not call other functions).
    pub fn run(&self, args: &[Arg]) -> Result<Tensor, tc_runtime::Error> {
        self.run_with(args, &|_| None)
    }

    /// Bind the contract, check σ against the one compiled for (unless
    /// shape-generic), and run with `nested` for calls.
    pub(crate) fn run_nested<'f>(
        &self,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        nested: &Nested,
    ) -> Result<Tensor, tc_runtime::Error> {
        let bound = contract::bind_args(&self.func.sig, args)?;
        if !self.generic && bound.sigma != self.sigma {
            return Err(tc_runtime::Error::op(
                format!("compiled `{}`", self.func.sig.name),
                format!(
                    "compiled for σ = {:?}, called with σ = {:?}",
                    self.sigma, bound.sigma
                ),
            ));
        }
        // The body holds the callees it was compiled with: a resolver that
        // now gives another function for one of them is refused (the
        // cache's key covers callees, so its calls never get here with one).
        for (name, g) in &self.inlined {
            let now = match resolve(name) {
                Some(h) if std::ptr::eq(h, g) || h == g => continue,
                Some(_) => "another function",
                None => "no function",
            };
            return Err(tc_runtime::Error::op(
                format!("compiled `{}`", self.func.sig.name),
                format!(
                    "compiled with `{name}` inlined, but the resolver now gives {now} for `{name}`"
                ),
            ));
        }
        self.exec(&bound, args, resolve, nested)
    }

    /// Run on arguments already bound to `bound`.
    /// `nested` runs a call of another function by name (through a cache,
    /// which decides how the callee is identified).
    pub(crate) fn exec<'f>(
        &self,
        bound: &Bound,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        nested: &Nested,
    ) -> Result<Tensor, tc_runtime::Error> {
        let func = &*self.func;
        let planned = self.vals_for(bound, resolve)?;
        let (vals, sigma_ext) = (planned.vals(), planned.sigma_ext());
        let mut ptrs = ValueMap::filled(func, std::ptr::null_mut());
        for (i, a) in args.iter().enumerate() {
            if let Arg::Tensor(t) = a {
                ptrs[func.param_value(i)] = t.bytes().as_ptr() as *mut u8;
            }
        }
        let mut st = RunState {
            vals,
            sigma: sigma_ext.unwrap_or(&self.sigma_ext),
            ptrs,
            owned_bufs: ValueMap::from_fn(func, |_| None),
            slots: self.slot_values(bound),
            // Shape table (generic kernels).
            shp: match sigma_ext {
                Some(s) => self.qkeys.iter().map(|k| k.value(vals, func, s)).collect(),
                None => Vec::new(),
            },
            ctx: ExecCtx::on_this_thread(self.threads()),
        };
        let prof = profiling();
        for step in &self.st.steps {
            let t0 = prof.then(std::time::Instant::now);
            match step {
                Step::Kernel { id, out, inputs } => self.run_kernel(*id, *out, inputs, &mut st)?,
                Step::Group {
                    id,
                    members,
                    inputs,
                } => self.run_group(*id, members, inputs, &mut st)?,
                Step::Matmul { out, a, b } => self.run_matmul((*out, *a, *b), args, &mut st)?,
                Step::Gather {
                    out,
                    axis,
                    table,
                    ids,
                } => run_gather(*out, *axis, *table, *ids, &mut st)?,
                Step::Host { out } => self.run_host(*out, args, &mut st)?,
                Step::Sdpa { out } => self.run_sdpa(*out, &mut st)?,
                Step::Call {
                    out,
                    name,
                    args: cargs,
                } => {
                    let mut call_args = Vec::with_capacity(cargs.len());
                    for v in cargs {
                        call_args.push(self.arg_of(
                            *v,
                            vals,
                            &mut st.ptrs,
                            &mut st.owned_bufs,
                            args,
                            bound,
                        )?);
                    }
                    let t = nested(name, &call_args)?;
                    drop(call_args);
                    check_call_result(name, &vals[*out], &t)?;
                    // The callee's tensor is kept as is: later kernels read
                    // its storage in place (no copy back).
                    st.ptrs[*out] = t.bytes().as_ptr() as *mut u8;
                    st.owned_bufs[*out] = Some(Held::T(t));
                }
            }
            if let Some(t0) = t0 {
                eprintln!(
                    "tc-llvm profile `{}`: {:8.3} ms  {}",
                    func.sig.name,
                    t0.elapsed().as_secs_f64() * 1e3,
                    describe_step(step, vals)
                );
            }
        }
        let ret = func.ret;
        let rv = &vals[ret];
        match rv.kind {
            VKind::TensorParam(i) => match &args[i] {
                Arg::Tensor(t) => Ok(t.clone()),
                _ => Err(tc_runtime::Error::malformed("return of a scalar")),
            },
            _ => {
                let held = st.owned_bufs[ret].take().ok_or_else(|| {
                    tc_runtime::Error::malformed("returned value was not computed")
                })?;
                // The kernel wrote straight into word storage: no copy.
                held.into_tensor(rv)
            }
        }
    }

    /// The scalar parameters' values in the kernels' slot encoding.
    fn slot_values(&self, bound: &Bound) -> Vec<u64> {
        self.st
            .slots
            .iter()
            .map(|(p, dt)| match bound.scalars.get(*p).and_then(|s| *s) {
                Some((e, _)) => match cast::convert(e, *dt) {
                    Elem::F(x) => x.to_bits() as u64,
                    Elem::I(i) => i as u64,
                    Elem::B(b) => b as u64,
                },
                None => 0,
            })
            .collect()
    }

    /// A [`Step::Kernel`]: the output's buffer, then the kernel over it
    /// (split across threads, or streamed for large flat outputs).
    fn run_kernel(
        &self,
        id: usize,
        out: Value,
        inputs: &[Value],
        st: &mut RunState,
    ) -> Result<(), tc_runtime::Error> {
        let func = &*self.func;
        let (vals, ctx) = (st.vals, st.ctx);
        let Some(buf) = st.output(out)? else {
            return Ok(());
        };
        let (ptrs, owned_bufs) = (&mut st.ptrs, &mut st.owned_bufs);
        let (shp, slots) = (&st.shp, &st.slots);
        let o = &vals[out];
        let (f, shape) = (self.kernel(id), &self.kernels[id].1);
        let (outer, work) = extent(func, vals, out, shape);
        let work = work.saturating_mul(plan::split_weight(&self.st, out));
        let mut list: Vec<*mut u8> = Vec::with_capacity(inputs.len() + 2);
        list.push(ptrs[out]);
        for v in inputs {
            list.push(ptrs[*v]);
        }
        // A top-k's heap rows: `i64`s laid out like the output, written
        // before they are read (`codegen/topk.rs`), so stale pool words
        // are fine.
        let scratch = match shape {
            KernelShape::Select { scratch: true, .. } => {
                let mut s = out_buffer(tc_core::size::bytes(Dtype::I64, o.numel())?)?;
                list.push(s.as_mut_ptr().cast::<u8>());
                Some(s)
            }
            _ => None,
        };
        let p = Ptrs(list.as_ptr(), shp.as_ptr(), slots.as_ptr());
        let align = if matches!(shape, KernelShape::Flat) {
            64
        } else {
            1
        };
        let ctx = if o.dtype == Dtype::I4 {
            ctx.serial()
        } else {
            ctx
        };
        // I4 is excluded: its kernels update half bytes in place,
        // and a tile's stale half byte would land in the padding.
        let stream = matches!(shape, KernelShape::Flat)
            && o.dtype != Dtype::I4
            && streaming()
            && buf.len() * 8 >= STREAM_MIN
            && inputs.iter().all(|v| vals[*v].numel() == o.numel());
        if stream {
            let dts: Vec<Dtype> = std::iter::once(o.dtype)
                .chain(inputs.iter().map(|v| vals[*v].dtype))
                .collect();
            // Buffers of their planned shapes as for `run_split`
            // below; a flat kernel reads each input at the
            // output's linear index.
            // SAFETY: and every input has the output's length
            // (checked in `stream`), as `run_flat_streamed` needs.
            unsafe { run_flat_streamed(f, &list, &dts, p.1, p.2, outer, ctx.threads) };
        } else {
            // The arguments' shapes were checked against σ by
            // `contract::bind_args` (σ = the compiled one, or
            // `vals` was planned from it); every step output was
            // sized by `out_buffer` from the same `vals`.
            // SAFETY: so each buffer holds its planned shape, and
            // `outer` is the output's planned extent (`extent`).
            unsafe { run_split(f, p, outer, work, align, &ctx) };
        }
        if let Some(s) = scratch {
            tc_runtime::pool::give(s);
        }
        owned_bufs[out] = Some(Held::Buf(buf));
        Ok(())
    }

    /// A [`Step::Group`]: every member's buffer, then one row kernel.
    fn run_group(
        &self,
        id: usize,
        members: &[Value],
        inputs: &[Value],
        st: &mut RunState,
    ) -> Result<(), tc_runtime::Error> {
        let func = &*self.func;
        let (vals, ctx) = (st.vals, st.ctx);
        let (ptrs, owned_bufs) = (&mut st.ptrs, &mut st.owned_bufs);
        let (shp, slots) = (&st.shp, &st.slots);
        let mut list: Vec<*mut u8> = Vec::with_capacity(members.len() + inputs.len());
        let mut bufs = Vec::with_capacity(members.len());
        for m in members {
            let o = &vals[*m];
            let mut buf = out_buffer(o.bytes())?;
            ptrs[*m] = buf.as_mut_ptr().cast::<u8>();
            list.push(ptrs[*m]);
            bufs.push(buf);
        }
        for v in inputs {
            list.push(ptrs[*v]);
        }
        let f = self.kernel(id);
        let mut work = 0usize;
        let mut outer = 1usize;
        for m in members {
            let s = &vals[*m].shape;
            // Members have rank ≥ 2 and at least GROUP_MIN_ROW
            // elements per row (plan::group_rows), so the row
            // count is at most the (checked) element count.
            outer = tc_core::size::numel(&s[..s.len() - 1])?;
            work = work.saturating_add(match func.inst(*m).map(|i| &i.op) {
                Some(tc_core::ir::Op::Reduce { x, .. }) => {
                    vals[*x].shape.last().copied().unwrap_or(1)
                }
                _ => s.last().copied().unwrap_or(1),
            });
        }
        let p = Ptrs(list.as_ptr(), shp.as_ptr(), slots.as_ptr());
        // SAFETY: as for `Step::Kernel`: members were sized by
        // `out_buffer` from `vals`, inputs are checked arguments
        // or earlier outputs; `outer` is the members' common row
        // count (plan::group_rows groups rows of one extent).
        unsafe { run_split(f, p, outer, work, 1, &ctx) };
        for (m, buf) in members.iter().zip(bufs) {
            owned_bufs[*m] = Some(Held::Buf(buf));
        }
        Ok(())
    }

    /// A [`Step::Host`]: the op's reference denotation on its operand's
    /// buffer (copied into a tensor), the result held as a call's is.
    fn run_host(
        &self,
        out: Value,
        args: &[Arg],
        st: &mut RunState,
    ) -> Result<(), tc_runtime::Error> {
        use tc_core::ir::Op;
        let op = &self
            .func
            .inst(out)
            .ok_or_else(|| {
                tc_runtime::Error::malformed(format!("host step {out} is no instruction"))
            })?
            .op;
        let tensor = |v: Value| {
            let info = &st.vals[v];
            // The operand is materialized (plan::structure forces a host
            // op's operands): the storage of its planned shape, checked by
            // `contract::bind_args` or sized by `out_buffer` from `vals`.
            // SAFETY: so `bytes()` initialised bytes are there, alive this step.
            let bytes = unsafe { bytes_of(st.ptrs[v], info.bytes()) };
            Tensor::from_raw_slice(info.dtype, &info.shape, bytes)
        };
        let t = match op {
            Op::Conv {
                window,
                groups,
                x,
                w,
            } => crate::kernels::conv::conv(
                window,
                *groups,
                (&tensor(*x)?, &tensor(*w)?),
                &st.ctx,
                self.opts.deterministic,
            )?,
            Op::Pool {
                kind,
                kernel,
                window,
                x,
            } => tc_runtime::interp::denote::pool(*kind, kernel, window, &tensor(*x)?)?,
            Op::QMatmul(x, w) => self.run_qmatmul(*x, *w, args, st)?,
            Op::DqMatmul {
                x,
                w,
                scale,
                outliers,
            } => self.run_dq_matmul([*x, *w, *scale, *outliers], args, st)?,
            // §18 `dequantize` (plan::reads_quantized: only a quantized cast
            // is a host step).
            Op::Cast(dt, x) => tensor(*x)?.cast(*dt)?,
            _ => {
                return Err(tc_runtime::Error::malformed(format!(
                    "host step for `{op}`"
                )))
            }
        };
        check_call_result("host op", &st.vals[out], &t)?;
        st.ptrs[out] = t.bytes().as_ptr() as *mut u8;
        st.owned_bufs[out] = Some(Held::T(t));
        Ok(())
    }

    /// `qmatmul x w` (Section 2 §18) on `tc-quant`'s fused kernels, reading
    /// both operands where they lie: the weight's blocks are never copied
    /// or dequantized whole. `JitOptions::fast_quant` picks the kernels'
    /// numerics: 8-bit activations (`Numerics::Fast`) or F32 dequantization
    /// (`Exact`). A fast-numerics weight that is a tensor parameter is
    /// read from its packed form (`prepack::quant`) once it comes back.
    fn run_qmatmul(
        &self,
        x: Value,
        w: Value,
        args: &[Arg],
        st: &RunState,
    ) -> Result<Tensor, tc_runtime::Error> {
        let (xi, wi) = (&st.vals[x], &st.vals[w]);
        let (_, out_shape) = tc_core::concrete::qmatmul(
            tc_core::concrete::Operand {
                dtype: xi.dtype,
                shape: &xi.shape,
            },
            tc_core::concrete::Operand {
                dtype: wi.dtype,
                shape: &wi.shape,
            },
        )?;
        let format = tc_runtime::quant::format(wi.dtype)
            .ok_or_else(|| tc_runtime::Error::malformed("qmatmul: an unquantized weight"))?;
        // SAFETY: both operands are materialized (plan::uses forces a host
        // op's operands): the storage of their planned shapes, alive for
        // this step.
        let (xb, wb) = unsafe {
            (
                bytes_of(st.ptrs[x], xi.bytes()),
                bytes_of(st.ptrs[w], wi.bytes()),
            )
        };
        // SAFETY: every bit pattern is an f32; `align_to` puts only whole,
        // aligned f32s in the middle part.
        let (head, xs, _) = unsafe { xb.align_to::<f32>() };
        if !head.is_empty() {
            return Err(tc_runtime::Error::malformed(
                "qmatmul: a misaligned operand",
            ));
        }
        let (n, k) = (wi.shape[0], wi.shape[1]);
        // The rows are x's leading dims (the rule checked x's last is k),
        // so an empty contraction (k = 0) still gives every row its zeros.
        let rows = tc_core::size::numel(&xi.shape[..xi.shape.len() - 1])?;
        // The output goes straight into a tensor's word storage (from the
        // pool when a buffer of its size came back): no copy into a tensor
        // afterwards. Every element is written below (the kernels write
        // every row of every column; an empty contraction is filled here).
        let numel = tc_core::size::numel(&out_shape)?;
        let mut words = out_buffer(tc_core::size::bytes(Dtype::F32, numel)?)?;
        // SAFETY: every bit pattern is an f32, and u64's alignment is a
        // multiple of f32's, so the middle part is every word, as f32s.
        let (_, all, _) = unsafe { words.align_to_mut::<f32>() };
        let y = &mut all[..numel];
        if k == 0 {
            y.fill(0.0);
        }
        let numerics = if self.opts.fast_quant {
            tc_runtime::quant::Numerics::Fast
        } else {
            tc_runtime::quant::Numerics::Exact
        };
        // The packed form is of the parameter's own bytes, which are the
        // operand's exactly when they are the same memory.
        let packed = match (numerics, &wi.kind) {
            (tc_runtime::quant::Numerics::Fast, VKind::TensorParam(i)) => match args.get(*i) {
                Some(Arg::Tensor(t))
                    if t.bytes().as_ptr() == wb.as_ptr() && t.bytes().len() == wb.len() =>
                {
                    crate::kernels::prepack::quant::packed(t, format, n, k)
                }
                _ => None,
            },
            _ => None,
        };
        // Deterministic mode with exact numerics: the reference's order.
        let in_order = self.opts.deterministic && !self.opts.fast_quant;
        match packed {
            Some(p) => tc_quant::quant::qmatmul_packed(&p, xs, rows, y),
            None if in_order => tc_quant::quant::qmatmul_in_order(format, xs, rows, k, wb, n, y),
            None => tc_quant::quant::qmatmul(format, numerics, xs, rows, k, wb, n, y),
        }
        .map_err(|e| tc_runtime::Error::malformed(format!("qmatmul: {e}")))?;
        Tensor::from_word_storage(Dtype::F32, &out_shape, words)
    }

    /// `dq_matmul x w scale outliers` (docs/syntax.md §7c) on its fused
    /// kernel (`kernels::matmul::dq_matmul`), reading every operand where
    /// it lies; a weight that is a tensor parameter keeps its tile packing
    /// across calls, as a matmul's does.
    fn run_dq_matmul(
        &self,
        operands: [Value; 4],
        args: &[Arg],
        st: &RunState,
    ) -> Result<Tensor, tc_runtime::Error> {
        let [xi, wi, si, oi] = operands.map(|v| &st.vals[v]);
        let (_, out_shape) =
            tc_core::concrete::dq_matmul([xi, wi, si, oi].map(|i| tc_core::concrete::Operand {
                dtype: i.dtype,
                shape: &i.shape,
            }))?;
        // SAFETY: every operand is materialized (plan::uses forces a host
        // op's operands): the storage of its planned shape, alive for
        // this step.
        let [xb, wb, sb, ob] =
            operands.map(|v| unsafe { bytes_of(st.ptrs[v], st.vals[v].bytes()) });
        fn floats(b: &[u8]) -> Result<&[f32], tc_runtime::Error> {
            // SAFETY: every bit pattern is an f32; `align_to` puts only
            // whole, aligned f32s in the middle part.
            match unsafe { b.align_to::<f32>() } {
                ([], fs, []) => Ok(fs),
                _ => Err(tc_runtime::Error::malformed(
                    "dq_matmul: a misaligned operand",
                )),
            }
        }
        let (k, n, j) = (wi.shape[0], wi.shape[1], oi.shape[0]);
        let rows = tc_core::size::numel(&xi.shape[..xi.shape.len() - 1])?;
        let o = crate::kernels::matmul::DqOperands {
            x: floats(xb)?,
            w: wb,
            scale: floats(sb)?,
            outliers: floats(ob)?,
            rows,
            k,
            j,
            n,
        };
        let numel = tc_core::size::numel(&out_shape)?;
        let mut words = out_buffer(tc_core::size::bytes(Dtype::F32, numel)?)?;
        // SAFETY: every bit pattern is an f32, and u64's alignment is a
        // multiple of f32's, so the middle part is every word, as f32s.
        let (_, all, _) = unsafe { words.align_to_mut::<f32>() };
        let weight = match (&wi.kind, crate::kernels::prepack::enabled()) {
            (VKind::TensorParam(i), true) => match args.get(*i) {
                Some(Arg::Tensor(t)) => Some(crate::kernels::prepack::Owner(t)),
                _ => None,
            },
            _ => None,
        };
        let cache = weight
            .as_ref()
            .map(|w| w as &dyn crate::kernels::matmul::PackCache);
        crate::kernels::matmul::dq_matmul(&o, &mut all[..numel], &st.ctx, cache)
            .map_err(|e| tc_runtime::Error::op("dq_matmul", e.to_string()))?;
        Tensor::from_word_storage(Dtype::F32, &out_shape, words)
    }

    /// A [`Step::Sdpa`] (§12f): the output's buffer, then the fused
    /// attention kernel on the four operands read through their planned
    /// views, its leading indices split across the pool when the work is
    /// large (an encoder's heads), on the calling thread otherwise (a
    /// decode step's few query rows).
    fn run_sdpa(&self, out: Value, st: &mut RunState) -> Result<(), tc_runtime::Error> {
        use crate::kernels::attention::{Numerics, Problem};
        use tc_core::ir::{Op, Scalar};
        let func = &*self.func;
        let Some(Op::Sdpa {
            q,
            k,
            v,
            mask,
            scale: Scalar::Float(scale),
        }) = func.inst(out).map(|i| &i.op)
        else {
            let m = format!("step {out} is not an sdpa with a float scale");
            return Err(tc_runtime::Error::op("sdpa", m));
        };
        let [vq, vk, vv, vm] = self.sdpa_views([*q, *k, *v, *mask], st)?;
        // The concrete rule (§12f) sized every value when the plan was
        // made; the shapes are read back from it.
        let vals = st.vals;
        let (sq, sk, sv) = (&vals[*q].shape, &vals[*k].shape, &vals[*v].shape);
        let n = sq.len();
        let (lead, (l, work)) = (&sq[..n - 2], sdpa_work(func, vals, out));
        let Some(mut buf) = st.output(out)? else {
            return Ok(());
        };
        let ptrs = &st.ptrs;
        let p = Problem {
            lead,
            m: sq[n - 2],
            d: sq[n - 1],
            t: sk[n - 1],
            e: sv[n - 1],
            q: sdpa_operand(ptrs, &vq),
            k: sdpa_operand(ptrs, &vk),
            v: sdpa_operand(ptrs, &vv),
            mask: sdpa_operand(ptrs, &vm),
            scale: *scale as f32,
            numerics: Numerics {
                fma: !self.opts.deterministic,
                fast_exp: self.opts.fast_math,
            },
        };
        let o = crate::kernels::gemm_common::SendPtr(buf.as_mut_ptr().cast::<f32>());
        // Split as a matmul of as many multiply-adds would be (a decode
        // step's few rows, about 0.1 M, stay on this thread).
        let split = crate::kernels::matmul::splits(&st.ctx, work, 1, 1);
        if st.ctx.threads == 1 || l < 2 || !split {
            // Every element each view addresses lies inside its base
            // buffer (`sdpa_views`: `fits`, against the planned element
            // count, which `ptrs` holds), of its element type; the shapes
            // are the concrete rule's, so `t ≥ 1`.
            // SAFETY: so the operands are readable; `buf` is a fresh
            // buffer of the output's `l·m·e` f32s, disjoint from them.
            unsafe { crate::kernels::attention::run(&p, o.0, 0..l) };
        } else {
            let shared = SharedProblem(p);
            par_ranges(l, 1, |lo, hi| {
                let (shared, o) = (&shared, &o);
                // SAFETY: as in the serial case; `par_ranges` hands out
                // disjoint ranges, so the tasks write disjoint output rows.
                unsafe { crate::kernels::attention::run(&shared.0, o.0, lo..hi) };
            });
        }
        st.owned_bufs[out] = Some(Held::Buf(buf));
        Ok(())
    }

    /// An sdpa's operands as the planner reads them in place, each view
    /// checked to lie inside its buffer and to read its element type: f32
    /// queries and mask, keys and values in f32 or a 16-bit float, widened
    /// as read.
    fn sdpa_views(
        &self,
        ops: [Value; 4],
        st: &RunState,
    ) -> Result<[SdpaView; 4], tc_runtime::Error> {
        use crate::kernels::attention::Elem;
        let (func, vals) = (&*self.func, st.vals);
        let elem = |dt: Dtype| match dt {
            Dtype::F32 => Some(Elem::F32),
            Dtype::F16 => Some(Elem::F16),
            Dtype::BF16 => Some(Elem::Bf16),
            _ => None,
        };
        let views = ops.map(|x| {
            let w = plan::view(func, vals, &self.st.mat, st.sigma, x, false)
                .filter(|w| w.fits(&vals[x].shape, vals[w.base].numel()))
                .filter(|w| vals[w.base].dtype == vals[x].dtype && vals[x].shape.len() >= 2)?;
            Some((elem(vals[x].dtype)?, w))
        });
        let fail = |m: &str| tc_runtime::Error::op("sdpa", m.to_string());
        let [Some(q), Some(k), Some(v), Some(mask)] = views else {
            return Err(fail(
                "an operand the planner reads in place is not a float view inside its buffer",
            ));
        };
        if q.0 != Elem::F32 || mask.0 != Elem::F32 {
            return Err(fail("the queries and the mask are f32"));
        }
        Ok([q, k, v, mask])
    }

    /// A [`Step::Matmul`]: the output's buffer, then the GEMM on the
    /// operands' buffers read through their planned views.
    fn run_matmul(
        &self,
        (out, a, b): (Value, Value, Value),
        args: &[Arg],
        st: &mut RunState,
    ) -> Result<(), tc_runtime::Error> {
        let func = &*self.func;
        let (vals, ctx) = (st.vals, st.ctx);
        let Some(mut buf) = st.output(out)? else {
            return Ok(());
        };
        let (ptrs, owned_bufs) = (&mut st.ptrs, &mut st.owned_bufs);
        let o = &vals[out];
        let (sa, sb) = (&vals[a].shape, &vals[b].shape);
        // Operands that are views of buffers (plan::view: transposes,
        // broadcasts, slices, reshapes) are read through strides, each view
        // checked to lie inside its buffer.
        let [va, vb] = [a, b].map(|v| {
            plan::view(func, vals, &self.st.mat, st.sigma, v, false)
                .filter(|w| w.fits(&vals[v].shape, vals[w.base].numel()))
        });
        let (Some(va), Some(vb)) = (va, vb) else {
            return Err(tc_runtime::Error::op(
                "matmul",
                "an operand the planner reads in place is not a view inside its buffer",
            ));
        };
        // A right operand read from a tensor parameter (a weight) keeps its
        // packing across calls (`prepack`: keyed by the storage, checked).
        let weight = match (&vals[vb.base].kind, crate::kernels::prepack::enabled()) {
            (VKind::TensorParam(i), true) => match args.get(*i) {
                Some(Arg::Tensor(t)) => Some(crate::kernels::prepack::Owner(t)),
                _ => None,
            },
            _ => None,
        };
        // The first element's address. In bounds: `fits` checked every
        // addressed element against the buffer, so the first one's byte
        // offset is too; a sub-byte dtype (I4) is only read from offset 0.
        let at = |w: &plan::StridedView| -> Result<*const u8, tc_runtime::Error> {
            let dt = vals[w.base].dtype;
            let whole = dt.byte_size().1 == 1 || w.offset == 0;
            match tc_core::size::bytes(dt, w.offset) {
                Ok(off) if whole => Ok(ptrs[w.base].wrapping_add(off)),
                _ => Err(tc_runtime::Error::op(
                    "matmul",
                    format!("operand offset {} of {dt} is not a byte address", w.offset),
                )),
            }
        };
        let (pa, pb) = (at(&va)?, at(&vb)?);
        let c = buf.as_mut_ptr().cast::<u8>();
        let (st_a, st_b) = (&va.strides, &vb.strides);
        // SAFETY: every element each view addresses lies inside its base
        // buffer (`fits`, checked just above against the buffer's planned
        // element count, which is what `ptrs` holds); `buf` is a fresh
        // buffer of the output's storage, disjoint from both.
        unsafe {
            if vals[a].dtype != o.dtype {
                // §7b `matmul_i32` (I8 operands, I32 sums): exact integer
                // arithmetic, the same bits in every order and mode.
                let cache = weight
                    .as_ref()
                    .map(|w| w as &dyn crate::kernels::matmul::PackCache);
                crate::kernels::matmul::matmul_i32_strided(
                    pa, st_a, pb, st_b, c, sa, sb, &ctx, cache,
                )
            } else if self.opts.deterministic {
                // The interpreter's order (`matmul/in_order.rs`).
                crate::kernels::matmul::matmul_strided_in_order(
                    o.dtype, pa, st_a, pb, st_b, c, sa, sb, &ctx,
                )
            } else {
                let cache = weight
                    .as_ref()
                    .map(|w| w as &dyn crate::kernels::matmul::PackCache);
                crate::kernels::matmul::matmul_strided(
                    o.dtype, pa, st_a, pb, st_b, c, sa, sb, &ctx, cache,
                )
            }
        }
        .map_err(|e| tc_runtime::Error::op("matmul", e.to_string()))?;
        owned_bufs[out] = Some(Held::Buf(buf));
        Ok(())
    }

    /// Every value's type for this call: planned at compile time, or, for a
    /// shape-generic compilation, planned now from σ (with the extended σ
    /// the generic kernels read).
    fn vals_for<'f>(
        &self,
        bound: &Bound,
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
    ) -> Result<Planned<'_>, tc_runtime::Error> {
        if !self.generic {
            return Ok(Planned::Fixed(&self.vals));
        }
        if let Some(p) = self.plans.get(&bound.sigma) {
            return Ok(Planned::Generic(p));
        }
        let p = Arc::new(plan::shapes(&self.func, &bound.sigma, resolve)?);
        self.plans.put(&bound.sigma, p.clone());
        Ok(Planned::Generic(p))
    }

    /// A prepared-but-not-computed call ([`crate::cache::dry_run`]): each
    /// nested call goes through `nested` with zero tensors of the planned
    /// shapes in place of computed values (parameters as given), so the
    /// callees' kernels are compiled or linked too; no step of this
    /// function runs; the result is zeros of its planned shape.
    pub(crate) fn dry_run<'f>(
        &self,
        bound: &Bound,
        args: &[Arg],
        resolve: &(dyn Fn(&str) -> Option<&'f Function> + Sync),
        nested: &Nested,
    ) -> Result<Tensor, tc_runtime::Error> {
        let func = &*self.func;
        let planned = self.vals_for(bound, resolve)?;
        let vals = planned.vals();
        // The GEMM kernels of this call's products: a shape-generic
        // compilation has only the host kernel ready (`gemm_kernels`), and
        // its calls compiled the others (edge rows, ragged column panels)
        // while they ran, after the warm-up. Every column variant, since
        // later calls may have other column counts (a decoder's attention
        // reads a cache one position longer each step). A kernel that
        // fails to compile here is compiled, and its error reported, by
        // the call that needs it, as before.
        if let Planned::Generic(p) = &planned {
            let products = matmul_steps(&self.st);
            let _ = prepare_products(func, &p.0, &self.st, &p.1, &products, true);
        }
        // Zeroed buffers from the pool, as a real call's outputs come:
        // fresh ones (`Tensor::try_zeros`) were each given to the pool
        // when dropped and never taken back out here, so a warm-up left
        // the pool holding one buffer per value it made (25 MB after
        // SmolLM2's, none of it of use to the calls that followed).
        let zeros = |v: Value| {
            let i = &vals[v];
            let mut buf = out_buffer(i.bytes())?;
            buf.fill(0);
            Tensor::from_word_storage(i.dtype, &i.shape, buf)
        };
        for step in &self.st.steps {
            let Step::Call {
                name, args: cargs, ..
            } = step
            else {
                continue;
            };
            let mut call_args = Vec::with_capacity(cargs.len());
            for v in cargs {
                call_args.push(match vals[*v].kind {
                    VKind::Dim(n) => Arg::Dim(n),
                    VKind::TensorParam(i) => args[i].clone(),
                    VKind::ScalarParam(i) => match bound.scalars.get(i) {
                        Some(Some((e, _))) => Arg::Scalar(*e),
                        _ => args[i].clone(),
                    },
                    VKind::Inst(_) => Arg::Tensor(zeros(*v)?),
                });
            }
            nested(name, &call_args)?;
        }
        zeros(func.ret)
    }

    /// The argument for value `v` of a call: parameters as given, computed
    /// values as tensors sharing their buffer (an `Arc` clone, no copy).
    fn arg_of(
        &self,
        v: Value,
        vals: &ValueMap<ValInfo>,
        ptrs: &mut ValueMap<*mut u8>,
        owned: &mut ValueMap<Option<Held>>,
        args: &[Arg],
        bound: &Bound,
    ) -> Result<Arg, tc_runtime::Error> {
        let info = &vals[v];
        match info.kind {
            VKind::Dim(n) => Ok(Arg::Dim(n)),
            VKind::TensorParam(i) | VKind::ScalarParam(i) if i < args.len() => {
                if let (VKind::ScalarParam(_), Some(Some((e, _)))) =
                    (&info.kind, bound.scalars.get(i))
                {
                    return Ok(Arg::Scalar(*e));
                }
                Ok(args[i].clone())
            }
            _ => {
                let slot = &mut owned[v];
                let held = slot.take().ok_or_else(|| {
                    tc_runtime::Error::malformed("call argument was not computed")
                })?;
                let t = held.into_tensor(info)?;
                // The allocation did not move; refresh the pointer anyway.
                ptrs[v] = t.bytes().as_ptr() as *mut u8;
                *slot = Some(Held::T(t.clone()));
                Ok(Arg::Tensor(t))
            }
        }
    }
}
