//! From LLVM IR text to callable machine code: the host target machine, the
//! O3 pipeline and MCJIT.
//!
//! Kernels are generated as textual LLVM IR (see [`crate::codegen`]) and
//! parsed with inkwell's `Context::create_module_from_ir`: the text form gives
//! access to everything LLVM 14's C API does not expose (fast-math flags on
//! single instructions, `!llvm.loop` metadata, function attributes), and it
//! is what a test or a bug report prints.
//!
//! Vectorization facts measured on this machine (issue 5): LLVM 14 vectorizes
//! for the host only when (1) the `TargetMachine` handed to
//! `Module::run_passes("default<O3>", …)` carries the host CPU name and
//! features and (2) every kernel function carries the `target-cpu` and
//! `target-features` attributes; 512-bit vectors also need
//! `prefer-vector-width`=`512`. [`host`] supplies the three strings and
//! [`crate::codegen`] puts them on every function.

use std::mem::ManuallyDrop;
use std::sync::OnceLock;
use std::time::Instant;

use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine,
};
use inkwell::OptimizationLevel;

use crate::Error;

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

fn target_machine() -> Result<TargetMachine, Error> {
    let h = host();
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| Error::Llvm(e.to_string()))?;
    target
        .create_target_machine(
            &triple,
            &h.cpu,
            &h.features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| Error::Llvm("cannot create a target machine for the host".into()))
}

/// Parse `ir`, run `default<O3>` with the host target machine.
fn optimise<'c>(ctx: &'c Context, ir: &str, name: &str) -> Result<Module<'c>, Error> {
    let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), name);
    let module = ctx.create_module_from_ir(buf).map_err(|e| {
        Error::Llvm(format!(
            "generated IR does not parse: {}\n--- IR ---\n{}",
            e.to_string(),
            ir
        ))
    })?;
    module
        .verify()
        .map_err(|e| Error::Llvm(format!("generated IR does not verify: {}", e.to_string())))?;
    let tm = target_machine()?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|e| Error::Llvm(format!("O3 pipeline: {}", e.to_string())))?;
    Ok(module)
}

/// Optimise `ir` and return the host assembly (for inspection and tests).
pub fn assembly(ir: &str) -> Result<String, Error> {
    let ctx = Context::create();
    let module = optimise(&ctx, ir, "asm")?;
    let tm = target_machine()?;
    let buf = tm
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| Error::Llvm(e.to_string()))?;
    Ok(String::from_utf8_lossy(buf.as_slice()).into_owned())
}

/// Optimise `ir` and return the optimised IR text.
pub fn optimised_ir(ir: &str) -> Result<String, Error> {
    let ctx = Context::create();
    let module = optimise(&ctx, ir, "ir")?;
    Ok(module.print_to_string().to_string())
}

/// A JIT-compiled module: its machine code lives as long as this value.
///
/// Owns its LLVM context and execution engine (dropped in that order
/// reversed: engine first). After construction only raw function pointers
/// are used, never the context, so moving it across threads is sound.
pub struct JitModule {
    ee: ManuallyDrop<ExecutionEngine<'static>>,
    ctx: *mut Context,
    fns: Vec<(String, usize)>,
    /// Milliseconds from IR text to callable pointers.
    pub compile_ms: f64,
}

// After `compile` returns, the context and engine (whose `Rc`s and LLVM
// handles are not thread-safe) are touched only by `Drop`, which owns the
// module; no engine clone or context handle escapes `compile` (the module,
// which held the engine's other `Rc`, is dropped there).
// SAFETY: so moving a `JitModule` never splits those handles across threads;
// shared use (`addr`) reads only `fns`, addresses of immutable machine code.
unsafe impl Send for JitModule {}
// SAFETY: as for `Send` just above.
unsafe impl Sync for JitModule {}

impl Drop for JitModule {
    fn drop(&mut self) {
        // SAFETY: `ee` is dropped exactly once (here, `ManuallyDrop`), before
        // the context it borrows; `ctx` came from `Box::into_raw` in
        // `JitModule::compile`, nothing else frees it, and nothing borrows
        // the context once `ee` is gone.
        unsafe {
            ManuallyDrop::drop(&mut self.ee);
            drop(Box::from_raw(self.ctx));
        }
    }
}

impl std::fmt::Debug for JitModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitModule")
            .field("fns", &self.fns)
            .field("compile_ms", &self.compile_ms)
            .finish()
    }
}

impl JitModule {
    /// Compile `ir`; `symbols` maps declared external functions to addresses
    /// (`ExecutionEngine::add_global_mapping`); `exports` are the functions
    /// whose addresses are wanted.
    pub fn compile(
        ir: &str,
        symbols: &[(&str, usize)],
        exports: &[String],
    ) -> Result<JitModule, Error> {
        let t0 = Instant::now();
        host();
        // The engine borrows the context for as long as the module lives,
        // which the borrow checker cannot express for a self-owning struct:
        // the context is boxed here and freed by hand (in `Drop`, or below on
        // failure). `ctx_ptr` keeps `Box::into_raw`'s ownership (a pointer
        // derived from the `&Context` could not be used to free it).
        let ctx_ptr: *mut Context = Box::into_raw(Box::new(Context::create()));
        // SAFETY: `ctx_ptr` is a live, aligned box allocation; it is freed
        // only after everything borrowing `ctx` (module, engine) is dropped.
        let ctx: &'static Context = unsafe { &*ctx_ptr };
        let result = (|| {
            let module = optimise(ctx, ir, "tc")?;
            let ee = module
                .create_jit_execution_engine(OptimizationLevel::Aggressive)
                .map_err(|e| Error::Llvm(format!("MCJIT: {}", e.to_string())))?;
            for (name, addr) in symbols {
                if let Some(f) = module.get_function(name) {
                    ee.add_global_mapping(&f, *addr);
                }
            }
            let mut fns = Vec::new();
            for name in exports {
                let a = ee
                    .get_function_address(name)
                    .map_err(|e| Error::Llvm(format!("symbol `{name}`: {e:?}")))?;
                fns.push((name.clone(), a));
            }
            drop(module);
            Ok((ee, fns))
        })();
        match result {
            Ok((ee, fns)) => Ok(JitModule {
                ee: ManuallyDrop::new(ee),
                ctx: ctx_ptr,
                fns,
                compile_ms: t0.elapsed().as_secs_f64() * 1e3,
            }),
            Err(e) => {
                // SAFETY: the closure's module and engine were dropped when
                // it returned the error, so nothing borrows the context;
                // `ctx_ptr` is from `Box::into_raw` and freed only here.
                unsafe { drop(Box::from_raw(ctx_ptr)) };
                Err(e)
            }
        }
    }

    /// The address of an exported function.
    pub fn addr(&self, name: &str) -> Option<usize> {
        self.fns.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
    }
}

/// The attribute groups every module carries (issue 5: host CPU, features,
/// 512-bit vectors on every kernel function).
pub fn attributes() -> String {
    let h = host();
    let width = if h.has_avx512() { "512" } else { "256" };
    format!(
        "attributes #0 = {{ nounwind \"target-cpu\"=\"{cpu}\" \"target-features\"=\"{f}\" \"prefer-vector-width\"=\"{width}\" \"min-legal-vector-width\"=\"0\" }}\n\
         attributes #1 = {{ nounwind readnone willreturn }}\n\
         attributes #2 = {{ noinline nounwind \"target-cpu\"=\"{cpu}\" \"target-features\"=\"{f}\" \"prefer-vector-width\"=\"{width}\" }}\n",
        cpu = h.cpu,
        f = h.features
    )
}
