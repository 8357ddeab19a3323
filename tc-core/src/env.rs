//! Every environment variable tc reads, in one table ([`ALL`]): its name,
//! its default and what it does. Code elsewhere names a variable through
//! its constant here and reads it through [`Var`]'s accessors, so that no
//! crate grows a setting that this table (and docs/environment.md, which a
//! test keeps equal to it) does not list. tc-serve's command-line flags are
//! the exception: each has a `TC_SERVE_*` variable that clap reads and its
//! `--help` lists.
//!
//! Each reader keeps its own caching (most read once per process); this
//! module only names and parses.

use std::ffi::OsString;
use std::str::FromStr;

/// One environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    /// Its name (`TC_…`).
    pub name: &'static str,
    /// What applies when it is unset, in words.
    pub default: &'static str,
    /// What it does, in one sentence.
    pub doc: &'static str,
}

impl Var {
    /// Its value, when set to valid UTF-8.
    pub fn get(&self) -> Option<String> {
        std::env::var(self.name).ok()
    }

    /// Its value as the OS gave it (a path), when set.
    pub fn get_os(&self) -> Option<OsString> {
        std::env::var_os(self.name)
    }

    /// Its value parsed (surrounding whitespace ignored); `None` when unset
    /// or unparsable, so a typo falls back to the default.
    pub fn parse<T: FromStr>(&self) -> Option<T> {
        self.get().and_then(|v| v.trim().parse().ok())
    }

    /// Set it, for this process and the children it starts.
    ///
    /// # Safety
    /// No other thread may read or write the environment meanwhile (as
    /// for [`std::env::set_var`] in Rust 2024): call it before any thread
    /// is started.
    // SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
    pub unsafe fn set(&self, value: impl AsRef<std::ffi::OsStr>) {
        std::env::set_var(self.name, value)
    }

    /// A switch that is on unless set to `0`.
    pub fn on_unless_zero(&self) -> bool {
        self.get().map_or(true, |v| v != "0")
    }

    /// A switch that is off unless set to something other than `0` or empty.
    pub fn on_if_set(&self) -> bool {
        self.get().is_some_and(|v| !v.is_empty() && v != "0")
    }
}

const fn var(name: &'static str, default: &'static str, doc: &'static str) -> Var {
    Var { name, default, doc }
}

/// Which backend runs a tensor fn (`interp`/`interpreter`, else the JIT).
pub const TC_BACKEND: Var = var(
    "TC_BACKEND",
    "jit",
    "`interp` runs every tensor fn on the reference interpreter instead of the JIT.",
);
/// Phase timings of the checker (tc-core `profile`).
pub const TC_PROFILE: Var = var(
    "TC_PROFILE",
    "unset (off)",
    "A file to which `#[tensor_fn]` appends each fn's checking time by phase (`scripts/macro-profile.awk`).",
);
/// The solver's first resource limit per query.
pub const TC_SOLVER_RLIMIT: Var = var(
    "TC_SOLVER_RLIMIT",
    "100000",
    "Z3's deterministic resource limit for a query's first attempt.",
);
/// The solver's last resource limit per query.
pub const TC_SOLVER_MAX_RLIMIT: Var = var(
    "TC_SOLVER_MAX_RLIMIT",
    "10000000",
    "Z3's deterministic resource limit for a query's last retry.",
);
/// The linear fast path before Z3.
pub const TC_SOLVER_FAST: Var = var(
    "TC_SOLVER_FAST",
    "on",
    "`off` sends every non-syntactic query to Z3 (to measure the fast path).",
);
/// The macro's persistent proof cache.
pub const TC_PROOF_CACHE: Var = var(
    "TC_PROOF_CACHE",
    "the build's `target/tc-proof-cache`",
    "The `#[tensor_fn]` proof cache's folder (solver answers, and whole checked fns under `fns/`); `off`, `0` or empty turns it off.",
);
/// The interpreter's heap-invariant check.
pub const TC_CHECK_HEAP: Var = var(
    "TC_CHECK_HEAP",
    "off",
    "Any value but `0` or empty checks Section 4's heap invariant after every interpreter step.",
);
/// The storage pool's cap.
pub const TC_POOL_MB: Var = var(
    "TC_POOL_MB",
    "256",
    "MiB of freed tensor storage the pool keeps for reuse; `0` turns the pool off.",
);
/// The persistent kernel cache's folder.
pub const TC_KERNEL_CACHE: Var = var(
    "TC_KERNEL_CACHE",
    "`$XDG_CACHE_HOME/tc/kernels` or `~/.cache/tc/kernels`",
    "The kernel cache's folder; `off`, `0` or empty turns it off.",
);
/// The persistent kernel cache's cap.
pub const TC_KERNEL_CACHE_MAX_MB: Var = var(
    "TC_KERNEL_CACHE_MAX_MB",
    "1024",
    "MiB the kernel cache may hold before it evicts.",
);
/// The packed-weight cache's cap.
pub const TC_PACK_CACHE_MB: Var = var(
    "TC_PACK_CACHE_MB",
    "1024",
    "MiB of weights kept packed across calls; `0` keeps none (less memory, slower steps).",
);
/// Pinned worker threads.
pub const TC_PIN_THREADS: Var = var(
    "TC_PIN_THREADS",
    "on",
    "`0` leaves tc's rayon workers unpinned.",
);
/// Streamed matmul steps.
pub const TC_STREAM: Var = var(
    "TC_STREAM",
    "on",
    "`0` turns off streaming (non-temporal) stores for large outputs.",
);
/// Per-step timings of the JIT's executor.
pub const TC_LLVM_PROFILE: Var = var(
    "TC_LLVM_PROFILE",
    "off",
    "Any value but `0` prints every executed step's time to stderr.",
);
/// Tiered compilation.
pub const TC_JIT_TIERS: Var = var(
    "TC_JIT_TIERS",
    "on",
    "`0` compiles every kernel at the optimized tier at once (no quick tier, no background tier-up).",
);
/// An AVX2-only host, emulated.
pub const TC_HOST_AVX2: Var = var(
    "TC_HOST_AVX2",
    "off",
    "`1` compiles and runs as on a host without AVX-512 (tests the AVX2 paths).",
);
/// GEMM register rows.
pub const TC_MM_MR: Var = var(
    "TC_MM_MR",
    "the host's tile",
    "Rows of the f32 micro-kernel (1–14), for tuning.",
);
/// GEMM K blocking.
pub const TC_MM_KC: Var = var(
    "TC_MM_KC",
    "the built-in blocking",
    "The f32 GEMM's K block, for tuning.",
);
/// GEMM M blocking.
pub const TC_MM_MC: Var = var(
    "TC_MM_MC",
    "the built-in blocking",
    "The f32 GEMM's M block, for tuning.",
);
/// GEMM N blocking.
pub const TC_MM_NC: Var = var(
    "TC_MM_NC",
    "the built-in blocking",
    "The f32 GEMM's N block, for tuning.",
);
/// GEMM B prefetch distance.
pub const TC_MM_PF: Var = var(
    "TC_MM_PF",
    "the built-in distance",
    "K steps ahead the f32 micro-kernel prefetches its B panel; `0` turns it off.",
);
/// Edge kernels of the f32 GEMM.
pub const TC_MM_EDGE: Var = var(
    "TC_MM_EDGE",
    "on",
    "`0` runs ragged row tiles through the padded path (for measurements).",
);
/// In-place A operands of the f32 GEMM.
pub const TC_MM_IN_PLACE: Var = var(
    "TC_MM_IN_PLACE",
    "on",
    "`0` packs every A operand instead of reading it in place (for measurements).",
);
/// Streamed B panels of the f32 GEMM.
pub const TC_MM_STREAM: Var = var(
    "TC_MM_STREAM",
    "on",
    "`0` turns off the streamed-weight GEMM path (for measurements).",
);
/// AVX-512 16 × 16 transpose in packing.
pub const TC_MM_T16: Var = var(
    "TC_MM_T16",
    "on where AVX-512 runs",
    "`0` packs transposed operands without the AVX-512 16 × 16 transpose.",
);
/// Masked kernels for ragged column panels.
pub const TC_MM_COLS: Var = var(
    "TC_MM_COLS",
    "on",
    "`0` pads ragged column panels instead of using masked kernels.",
);
/// BF16 products on AVX512-BF16.
pub const TC_MM_BF16: Var = var(
    "TC_MM_BF16",
    "on",
    "`0` widens BF16 products to f32 instead of using `vdpbf16ps` (for measurements).",
);
/// BF16 products on AMX tiles.
pub const TC_MM_AMX: Var = var(
    "TC_MM_AMX",
    "on",
    "`0` keeps BF16 products off AMX tiles (`tdpbf16ps`), on `vdpbf16ps` or widened (for measurements).",
);
/// Few-row products against a weight read in place.
pub const TC_MM_SWEEP: Var = var(
    "TC_MM_SWEEP",
    "on where AVX-512 runs",
    "`0` sends products of up to eight rows through the tile path.",
);
/// Integer GEMM register rows.
pub const TC_MM_INT_MR: Var = var(
    "TC_MM_INT_MR",
    "the host's tile",
    "Rows of the integer micro-kernel (1–14), for tuning.",
);
/// Pairwise integer kernels.
pub const TC_MM_INT_PAIR: Var = var(
    "TC_MM_INT_PAIR",
    "on where available",
    "`0` turns off the pair kernels for i16/i8/i4 products.",
);
/// GEMV software prefetch.
pub const TC_GEMV_PF: Var = var(
    "TC_GEMV_PF",
    "256 (1 KiB), 0 (off) on AMD",
    "Floats ahead a few-row product (a decode step) prefetches its kept panels.",
);
/// Huge pages for kept packings.
pub const TC_PACK_HUGE: Var = var(
    "TC_PACK_HUGE",
    "on AMD only",
    "`1` advises kept packings onto transparent huge pages, `0` never does.",
);
/// The read-ahead budget.
pub const TC_READ_AHEAD_MB: Var = var(
    "TC_READ_AHEAD_MB",
    "8",
    "MiB a kept worker reads ahead of the next product's weight; `0` turns it off.",
);

/// Where tc-serve and the MiniLM tests find the MiniLM model.
pub const TC_MINILM_DIR: Var = var(
    "TC_MINILM_DIR",
    "`models/all-MiniLM-L6-v2` in the repository",
    "The folder holding MiniLM's `model.safetensors`, `config.json` and `tokenizer.json`.",
);

/// Every variable, in the order docs/environment.md lists them.
pub const ALL: &[Var] = &[
    TC_BACKEND,
    TC_PROFILE,
    TC_SOLVER_RLIMIT,
    TC_SOLVER_MAX_RLIMIT,
    TC_SOLVER_FAST,
    TC_PROOF_CACHE,
    TC_CHECK_HEAP,
    TC_POOL_MB,
    TC_KERNEL_CACHE,
    TC_KERNEL_CACHE_MAX_MB,
    TC_PACK_CACHE_MB,
    TC_PIN_THREADS,
    TC_STREAM,
    TC_LLVM_PROFILE,
    TC_JIT_TIERS,
    TC_HOST_AVX2,
    TC_MM_MR,
    TC_MM_KC,
    TC_MM_MC,
    TC_MM_NC,
    TC_MM_PF,
    TC_MM_EDGE,
    TC_MM_IN_PLACE,
    TC_MM_STREAM,
    TC_MM_T16,
    TC_MM_COLS,
    TC_MM_BF16,
    TC_MM_AMX,
    TC_MM_SWEEP,
    TC_MM_INT_MR,
    TC_MM_INT_PAIR,
    TC_GEMV_PF,
    TC_PACK_HUGE,
    TC_READ_AHEAD_MB,
    TC_MINILM_DIR,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_prefixed() {
        let mut names: Vec<&str> = ALL.iter().map(|v| v.name).collect();
        assert!(names.iter().all(|n| n.starts_with("TC_")));
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a variable is listed twice");
    }
}
