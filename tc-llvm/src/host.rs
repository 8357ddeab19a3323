//! The host the kernels are compiled for: LLVM's names for its CPU, its
//! features and its triple. Its own module because both the JIT (target
//! machine, codegen attributes) and the persistent cache (an entry's
//! identity) need it, and neither should import the other for it.

use std::sync::OnceLock;

#[cfg(not(miri))]
use inkwell::targets::{InitializationConfig, Target, TargetMachine};

/// The host CPU as LLVM names it, and its feature string.
#[derive(Clone, Debug)]
pub struct Host {
    /// `TargetMachine::get_host_cpu_name()` (e.g. `icelake-client`).
    pub cpu: String,
    /// `TargetMachine::get_host_cpu_features()` (`+avx512f,…`).
    pub features: String,
    /// The default target triple.
    pub triple: String,
    /// `features` names `+avx512f` (found once: per-call paths ask).
    avx512: bool,
}

impl Host {
    /// True when the host has AVX-512F.
    pub fn has_avx512(&self) -> bool {
        self.avx512
    }

    /// True when `features` names `feature` (`+avx512bw`, …). A search of
    /// the feature string: ask once, not per call.
    pub fn has(&self, feature: &str) -> bool {
        self.features.split(',').any(|f| f == feature)
    }
}

/// LLVM options set once per process, before any compilation; part of the
/// persistent cache's identity (`disk::host_identity`), since they change
/// the object code.
///
/// `-enable-epilogue-vectorization=0`: LLVM 14's X86 backend miscompiles
/// the vectorized epilogue of a loop with an interleaved group of F16 loads
/// (stride 3 or 6 halves) when a scalar remainder follows (28 = 16 + 8 + 4
/// iterations): an F16 transpose of a `[28, 6]` tensor wrote wrong elements.
/// Found by the long fuzz run (seed 42949678659); the regression test is
/// `edge_values::f16_transposes_of_every_small_shape`. Without the
/// epilogue, remainders run scalar.
///
/// `-disable-lsr`: the backend's loop strength reduction was the costliest
/// code-generation pass on the kernels' vectorised, interleaved loops
/// (MiniLM's embedding module, a layer norm: 9 of 26 ms of code
/// generation, and 15 ms in all without it) and made the later passes
/// slower too. A MiniLM cold start with no kernel cache (process start to
/// the first embedding) went from a median of 184 to 146 ms, the GPT-2
/// block's three modules from 207 to 175 ms of compilation with the
/// per-thread target machine (`jit.rs`; benches/README change 62). The
/// kernels address their operands by index or by pointers they step
/// themselves (the GEMM micro-kernels, `gemm_common::k_step`), so it had
/// little to do there: SGEMM and the models' steady-state times within
/// noise.
pub const LLVM_OPTIONS: &[&str] = &["-enable-epilogue-vectorization=0", "-disable-lsr"];

/// The pass pipeline's options: `default<O3>` with LLVM's loop unrolling
/// only where a loop asks for it (`llvm.loop.unroll.*` metadata, as the
/// GEMM micro-kernel's k loop does, `gemm_common::ukernel_text`).
///
/// Why: σ-specialised kernels have constant trip counts, and O3's full
/// unrolling turned nests like MiniLM's masked mean over `[10, 384]` into
/// thousands of straight-line instructions whose scheduling DAGs cost the
/// backend quadratic time. Measured on MiniLM 1 × 10 (1 thread, every
/// module of a cold start): 520 → 204 ms of compilation, the pooling
/// module 145 → 29 ms; the models' step times did not move (alternating
/// processes, MiniLM 1 × 10 / 32 × 16 / 8 × 128 and the GPT-2 block 1 × 32 /
/// 1 × 128 and GPT-2 decoding within noise, benches/README change 48). The
/// vectoriser still interleaves its loops (`LoopInterleaving` stays on).
/// The pipeline is part of the persistent cache's identity
/// ([`crate::disk::host_identity`]).
pub const PIPELINE: &str = "default<O3>, loop unrolling only where asked";

/// The pass pipeline of a module the code generator wrote vectorized and
/// unrolled by hand (the GEMM micro-kernels, `gemm_common::ukernel_text`):
/// its stack slots promoted, its expressions simplified, and its loops
/// unrolled where they ask (`llvm.loop.unroll.count`), nothing else.
///
/// Why: O3 found nothing more to do in them and took twice as long. The
/// kernels this pipeline makes have O3's instructions (the same count of
/// FMAs per kernel with AVX-512 and with AVX2, where the k loop asks for
/// four copies), MiniLM 32 × 16 and 8 × 128 on one thread ran within noise
/// of O3's (alternating processes, AMD Zen 4 host, 2026-12-06), and a
/// cold start's three kernels compile in about half the time. A module
/// compiled through it is its own persistent-cache entry
/// (`jit::Build::Unrolled`).
pub const UNROLLED_PIPELINE: &str =
    "function(mem2reg,instcombine,simplifycfg,loop-unroll,instcombine,simplifycfg)";

#[cfg(not(miri))]
fn set_llvm_options() {
    let args: Vec<std::ffi::CString> = std::iter::once("tc")
        .chain(LLVM_OPTIONS.iter().copied())
        .filter_map(|a| std::ffi::CString::new(a).ok())
        .collect();
    let ptrs: Vec<*const std::os::raw::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    let argc = i32::try_from(ptrs.len()).unwrap_or(1);
    // SAFETY: `ptrs` are `argc` valid NUL-terminated strings kept alive by
    // `args` across the call; run once, from `host`'s `OnceLock` init.
    unsafe {
        llvm_sys::support::LLVMParseCommandLineOptions(argc, ptrs.as_ptr(), std::ptr::null())
    };
}

/// True when the CPU's vendor (CPUID leaf 0) is AMD. The hand-written
/// streaming loops tune their software prefetch and the kept packings'
/// huge pages by it (`crate::kernels::gemv`):
/// LLVM 14 names a Zen 4 `znver3` and knows no later core, so the vendor,
/// not [`Host::cpu`], is what is asked.
pub fn amd() -> bool {
    static AMD: OnceLock<bool> = OnceLock::new();
    *AMD.get_or_init(|| {
        // Miri cannot run CPUID (inline assembly); its hosts report no
        // vendor, so the default tuning applies.
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            let r = std::arch::x86_64::__cpuid(0);
            let mut v = [0u8; 12];
            for (d, w) in v.chunks_exact_mut(4).zip([r.ebx, r.edx, r.ecx]) {
                d.copy_from_slice(&w.to_le_bytes());
            }
            &v == b"AuthenticAMD"
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        {
            false
        }
    })
}

/// `features` with every AVX-512 feature turned off (`+avx512bw` →
/// `-avx512bw`): what `TC_HOST_AVX2=1` compiles for, so that an AVX-512
/// machine runs, and tests, the kernels and paths of an AVX2-only host
/// (256-bit vectors, 6 × 16 GEMM tiles, no Rust AVX-512 intrinsics: see
/// [`avx512`]).
fn without_avx512(features: &str) -> String {
    features
        .split(',')
        .map(|f| match f.strip_prefix("+avx512") {
            Some(rest) => format!("-avx512{rest}"),
            None => f.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// May AVX-512 code run: the kernels are compiled for it ([`Host`]'s
/// features, unless `TC_HOST_AVX2=1`) and the CPU has AVX-512F (the Rust
/// intrinsics paths: packing transposes, `gemv`, `sweep`). Found once.
pub fn avx512() -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    *A.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            host().has_avx512() && std::arch::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Initialise the native target and the LLVM options once, and describe
/// the host.
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let (cpu, mut features, triple) = describe();
        if crate::ctx::Settings::get().host_avx2 {
            features = without_avx512(&features);
        }
        Host {
            cpu,
            avx512: features.split(',').any(|f| f == "+avx512f"),
            features,
            triple,
        }
    })
}

/// LLVM's names for the host: its CPU, its feature string and its triple
/// (after initialising the native target and the LLVM options).
#[cfg(not(miri))]
fn describe() -> (String, String, String) {
    set_llvm_options();
    Target::initialize_native(&InitializationConfig::default())
        .expect("LLVM native target initialisation");
    (
        TargetMachine::get_host_cpu_name().to_string(),
        TargetMachine::get_host_cpu_features().to_string(),
        TargetMachine::get_default_triple()
            .as_str()
            .to_string_lossy()
            .into_owned(),
    )
}

/// Under Miri, which cannot call into LLVM: the features the build
/// enables (`-C target-feature`), which are also the ones Miri's
/// `is_x86_feature_detected!` reports, so the Rust paths that [`avx512`]
/// and [`Host::has`] gate are the ones Miri can interpret. Nothing is
/// compiled under Miri: the JIT's machine code cannot run there.
#[cfg(miri)]
fn describe() -> (String, String, String) {
    let on = [
        ("+avx2", cfg!(target_feature = "avx2")),
        ("+fma", cfg!(target_feature = "fma")),
        ("+f16c", cfg!(target_feature = "f16c")),
        ("+avx512f", cfg!(target_feature = "avx512f")),
        ("+avx512bw", cfg!(target_feature = "avx512bw")),
        ("+avx512vl", cfg!(target_feature = "avx512vl")),
        ("+avx512vnni", cfg!(target_feature = "avx512vnni")),
    ];
    let features: Vec<&str> = on.iter().filter(|f| f.1).map(|f| f.0).collect();
    (
        "miri".to_string(),
        features.join(","),
        "x86_64-unknown-linux-gnu".to_string(),
    )
}
