//! What compiled code and the kernel library may depend on besides their
//! operands, gathered in one place:
//!
//! - [`Settings`]: every `TC_*` variable this crate honours, read from the
//!   environment once per process, here and nowhere else (the table of
//!   variables is `tc_core::env`, mirrored by docs/environment.md), with the
//!   process-wide switches that tests and measurements flip;
//! - [`ExecCtx`]: what one run of a compiled function hands each kernel it
//!   calls: the thread count, whether a pool session is open on the calling
//!   thread, and the settings.
//!
//! The settings hold what the user asked for; a default that depends on
//! the host (AMD or not, AVX-512 or not) is resolved by the kernel that
//! uses it, beside its measurements. This module imports nothing of the
//! crate, so every module may depend on it.

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use tc_core::env;

/// A process-wide on/off setting: on unless its variable is `0`, which a
/// `set_…` function overrides (tests and measurements compare both ways).
pub struct Switch(AtomicBool);

impl Switch {
    fn from(var: env::Var) -> Switch {
        Switch(AtomicBool::new(var.on_unless_zero()))
    }

    /// Is it on?
    pub fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Turn it on or off, process-wide.
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed)
    }
}

/// Every `TC_*` setting of the JIT and its kernels, as the environment gave
/// it when first asked for (`None`: unset or unparsable, so the built-in
/// default applies).
pub struct Settings {
    /// `TC_MM_MR`: rows of the f32 micro-kernel (positive).
    pub mm_mr: Option<usize>,
    /// `TC_MM_KC`: the f32 GEMM's K block (positive).
    pub mm_kc: Option<usize>,
    /// `TC_MM_MC`: the f32 GEMM's M block (positive).
    pub mm_mc: Option<usize>,
    /// `TC_MM_NC`: the f32 GEMM's N block (positive).
    pub mm_nc: Option<usize>,
    /// `TC_MM_PF`: K steps the f32 micro-kernel prefetches B ahead.
    pub mm_prefetch: Option<usize>,
    /// `TC_MM_T16`: the AVX-512 16 × 16 transpose in packing allowed.
    pub mm_t16: bool,
    /// `TC_MM_SWEEP`: few-row products against a weight read in place
    /// allowed.
    pub mm_sweep: bool,
    /// `TC_MM_INT_MR`: rows of the integer micro-kernel.
    pub mm_int_mr: Option<usize>,
    /// `TC_MM_INT_PAIR`: the pair kernels for narrow integer products
    /// allowed.
    pub mm_int_pair: bool,
    /// `TC_GEMV_PF`: floats a few-row product prefetches ahead.
    pub gemv_ahead: Option<usize>,
    /// `TC_PACK_HUGE`: `Some(true)` always advise kept packings onto huge
    /// pages, `Some(false)` never.
    pub pack_huge: Option<bool>,
    /// `TC_PACK_CACHE_MB`: MiB of packed weights kept.
    pub pack_cache_mb: Option<usize>,
    /// `TC_HOST_AVX2`: compile and run as on a host without AVX-512.
    pub host_avx2: bool,
    /// `TC_PIN_THREADS`: pin the pool's workers (when tc builds the pool).
    pub pin_threads: bool,
    /// `TC_LLVM_PROFILE`: print every executed step's time.
    pub profile_steps: bool,
    /// `TC_JIT_TIERS`: tiered compilation in new caches (on unless `0`;
    /// `crate::Jit::set_tiered`).
    pub tiers: bool,
    /// `TC_MM_EDGE`: edge row panels through their own kernels.
    pub mm_edge: Switch,
    /// `TC_MM_IN_PLACE`: the streamed path reads A in place where it can.
    pub mm_in_place: Switch,
    /// `TC_MM_STREAM`: a single row block streams B panel by panel.
    pub mm_stream_b: Switch,
    /// `TC_MM_COLS`: ragged column panels through the masked kernels.
    pub mm_cols: Switch,
    /// `TC_MM_BF16`: BF16 products on `vdpbf16ps` where the CPU has it.
    pub mm_bf16: Switch,
    /// `TC_MM_AMX`: BF16 products on AMX tiles where the CPU has them.
    pub mm_amx: Switch,
    /// `TC_STREAM`: streaming stores for large flat outputs.
    pub streaming_stores: Switch,
    /// Bytes read ahead after a product (`TC_READ_AHEAD_MB` MiB, or what
    /// was last set); `usize::MAX` while the default applies.
    read_ahead: AtomicUsize,
}

/// A positive count, or `None`.
fn positive(var: env::Var) -> Option<usize> {
    var.parse::<usize>().filter(|&v| v > 0)
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            mm_mr: positive(env::TC_MM_MR),
            mm_kc: positive(env::TC_MM_KC),
            mm_mc: positive(env::TC_MM_MC),
            mm_nc: positive(env::TC_MM_NC),
            mm_prefetch: env::TC_MM_PF.parse(),
            mm_t16: env::TC_MM_T16.on_unless_zero(),
            mm_sweep: env::TC_MM_SWEEP.on_unless_zero(),
            mm_int_mr: env::TC_MM_INT_MR.parse(),
            mm_int_pair: env::TC_MM_INT_PAIR.on_unless_zero(),
            gemv_ahead: env::TC_GEMV_PF.parse(),
            pack_huge: match env::TC_PACK_HUGE.get().as_deref() {
                Some("0") => Some(false),
                Some("1") => Some(true),
                _ => None,
            },
            pack_cache_mb: env::TC_PACK_CACHE_MB.parse(),
            host_avx2: env::TC_HOST_AVX2.get().is_some_and(|v| v == "1"),
            pin_threads: env::TC_PIN_THREADS.on_unless_zero(),
            profile_steps: env::TC_LLVM_PROFILE.get().is_some_and(|v| v != "0"),
            tiers: env::TC_JIT_TIERS.on_unless_zero(),
            mm_edge: Switch::from(env::TC_MM_EDGE),
            mm_in_place: Switch::from(env::TC_MM_IN_PLACE),
            mm_stream_b: Switch::from(env::TC_MM_STREAM),
            mm_cols: Switch::from(env::TC_MM_COLS),
            mm_bf16: Switch::from(env::TC_MM_BF16),
            mm_amx: Switch::from(env::TC_MM_AMX),
            streaming_stores: Switch::from(env::TC_STREAM),
            read_ahead: AtomicUsize::new(match env::TC_READ_AHEAD_MB.parse::<usize>() {
                Some(mb) => mb.saturating_mul(1 << 20).min(usize::MAX - 1),
                None => usize::MAX,
            }),
        }
    }

    /// The process's settings, read from the environment the first time.
    pub fn get() -> &'static Settings {
        static S: OnceLock<Settings> = OnceLock::new();
        S.get_or_init(Settings::from_env)
    }

    /// The read-ahead budget in bytes: as last [`Settings::set_read_ahead`],
    /// else `TC_READ_AHEAD_MB`, else `default` bytes.
    pub fn read_ahead(&self, default: usize) -> usize {
        match self.read_ahead.load(Ordering::Relaxed) {
            usize::MAX => default,
            b => b,
        }
    }

    /// Set the read-ahead budget in bytes, process-wide.
    pub fn set_read_ahead(&self, bytes: usize) {
        self.read_ahead
            .store(bytes.min(usize::MAX - 1), Ordering::Relaxed)
    }
}

/// The persistent kernel cache's settings, read when asked (the cache is
/// opened once, at the first compilation, so a program may still choose
/// its folder after other settings were read): `TC_KERNEL_CACHE`, the
/// folder or `off`/`0`/empty, and `TC_KERNEL_CACHE_MAX_MB`, the size limit
/// in MiB.
pub fn kernel_cache() -> (Option<OsString>, Option<u64>) {
    (
        env::TC_KERNEL_CACHE.get_os(),
        env::TC_KERNEL_CACHE_MAX_MB.parse(),
    )
}

/// What one run of a compiled function hands each kernel it calls. Built
/// once per run ([`ExecCtx::new`]); a kernel asks it rather than the
/// environment or the calling thread's state, so what a kernel did is
/// decided by its arguments alone.
#[derive(Clone, Copy)]
pub struct ExecCtx {
    /// `1`: every product runs on the calling thread; any other value lets
    /// a large enough product split across the pool.
    pub threads: usize,
    /// A pool session is open on the calling thread (`team::session`): its
    /// workers are awake, so smaller products split, and a kept worker
    /// serves the read-ahead.
    pub session: bool,
    /// The process's settings.
    pub settings: &'static Settings,
}

impl ExecCtx {
    /// The context of a run on `threads` threads; `session` says whether a
    /// pool session is open on the calling thread.
    pub fn new(threads: usize, session: bool) -> ExecCtx {
        ExecCtx {
            threads,
            session,
            settings: Settings::get(),
        }
    }

    /// The same context on the calling thread alone (the parts of a
    /// product already split across the pool).
    pub fn serial(&self) -> ExecCtx {
        ExecCtx {
            threads: 1,
            ..*self
        }
    }
}
