//! From LLVM IR text to callable machine code: the host target machine, the
//! O3 pipeline, object code, and linking it into the process (`orc.rs`),
//! through the persistent cache ([`crate::disk`]) when one is configured.
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

use std::time::Instant;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, RelocMode, Target, TargetMachine};
use inkwell::OptimizationLevel;

use crate::orc::Loader;
use crate::Error;

pub use crate::host::{host, Host};

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
/// The code is linked by its own ORC instance (`orc.rs`), dropped with
/// it. Only the exported functions' addresses leave it.
pub struct JitModule {
    _loader: Loader,
    fns: Vec<(String, usize)>,
    /// Milliseconds from IR text to callable pointers.
    pub compile_ms: f64,
    /// The object code came from the persistent cache ([`crate::disk`]):
    /// no optimisation or code generation ran.
    pub from_disk: bool,
}

impl std::fmt::Debug for JitModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitModule")
            .field("fns", &self.fns)
            .field("compile_ms", &self.compile_ms)
            .field("from_disk", &self.from_disk)
            .finish()
    }
}

/// Optimise `ir` and generate the host's relocatable object code for it.
pub fn object_code(ir: &str) -> Result<Vec<u8>, Error> {
    let ctx = Context::create();
    let module = optimise(&ctx, ir, "tc")?;
    let tm = target_machine()?;
    let buf = tm
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(|e| Error::Llvm(format!("object code: {}", e.to_string())))?;
    Ok(buf.as_slice().to_vec())
}

impl JitModule {
    /// Compile `ir` (or load its object code from the persistent cache,
    /// [`crate::disk::Store::global`]); `symbols` maps declared external
    /// functions to addresses; `exports` are the functions whose addresses
    /// are wanted.
    pub fn compile(
        ir: &str,
        symbols: &[(&str, usize)],
        exports: &[String],
    ) -> Result<JitModule, Error> {
        Self::compile_with(ir, symbols, exports, crate::disk::Store::global())
    }

    /// [`JitModule::compile`] with an explicit persistent cache (`None`:
    /// always compile, store nothing).
    pub fn compile_with(
        ir: &str,
        symbols: &[(&str, usize)],
        exports: &[String],
        store: Option<&crate::disk::Store>,
    ) -> Result<JitModule, Error> {
        let t0 = Instant::now();
        host();
        if let Some(object) = store.and_then(|s| s.load(ir)) {
            // An entry that matches the IR and this host but does not link
            // (it cannot happen short of an LLVM change under the same
            // identity) is recompiled and replaced, never trusted.
            if let Ok(m) = Self::link(&object, symbols, exports, t0, true) {
                return Ok(m);
            }
        }
        let object = object_code(ir)?;
        if let Some(s) = store {
            s.save(ir, &object);
        }
        Self::link(&object, symbols, exports, t0, false)
    }

    fn link(
        object: &[u8],
        symbols: &[(&str, usize)],
        exports: &[String],
        t0: Instant,
        from_disk: bool,
    ) -> Result<JitModule, Error> {
        let loader = Loader::new(symbols)?;
        loader.add_object(object)?;
        let fns = exports
            .iter()
            .map(|name| Ok((name.clone(), loader.lookup(name)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(JitModule {
            _loader: loader,
            fns,
            compile_ms: t0.elapsed().as_secs_f64() * 1e3,
            from_disk,
        })
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
