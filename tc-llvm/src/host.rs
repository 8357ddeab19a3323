//! The host the kernels are compiled for: LLVM's names for its CPU, its
//! features and its triple. Its own module because both the JIT (target
//! machine, codegen attributes) and the persistent cache (an entry's
//! identity) need it, and neither should import the other for it.

use std::sync::OnceLock;

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
}

impl Host {
    /// True when the host has AVX-512F.
    pub fn has_avx512(&self) -> bool {
        self.features.split(',').any(|f| f == "+avx512f")
    }
}

/// Initialise the native target once and describe the host.
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        Target::initialize_native(&InitializationConfig::default())
            .expect("LLVM native target initialisation");
        Host {
            cpu: TargetMachine::get_host_cpu_name().to_string(),
            features: TargetMachine::get_host_cpu_features().to_string(),
            triple: TargetMachine::get_default_triple()
                .as_str()
                .to_string_lossy()
                .into_owned(),
        }
    })
}
