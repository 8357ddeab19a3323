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

use crate::options::Error;
use crate::orc::Loader;

pub use crate::host::{host, Host};

/// How a module's object code is made. Both tiers compute the same bits:
/// the generated IR carries no fast-math flag and fixes its own summation
/// orders (`codegen::reduce::LANES`), so LLVM's optimisations change only
/// speed, never a result (`tests/tiers.rs` compares the two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// [`QUICK_PIPELINE`] and LLVM's fast instruction selection: a
    /// MiniLM's kernels in a sixth of the time, running about half as fast
    /// (8 × 128 tokens). Stored in the persistent cache as an entry of its
    /// own, which a later process loads only where the optimized tier's
    /// entry is missing.
    Quick,
    /// [`crate::host::PIPELINE`] and full code generation.
    Optimized,
}

/// The quick tier's pass pipeline: the loops' stack slots promoted to
/// registers, nothing else.
pub const QUICK_PIPELINE: &str = "function(mem2reg)";

fn target_machine(tier: Tier) -> Result<TargetMachine, Error> {
    let h = host();
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| Error::Llvm(e.to_string()))?;
    let level = match tier {
        Tier::Quick => OptimizationLevel::None,
        Tier::Optimized => OptimizationLevel::Aggressive,
    };
    target
        .create_target_machine(
            &triple,
            &h.cpu,
            &h.features,
            level,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| Error::Llvm("cannot create a target machine for the host".into()))
}

/// A thread's target machine of one tier, or why it could not be made.
type Machine = Option<std::rc::Rc<Result<TargetMachine, String>>>;

thread_local! {
    /// This thread's host target machines (one per [`Tier`]), made once:
    /// LLVM builds the subtarget (register classes, lowering tables) for
    /// the host's CPU and features inside it the first time a function
    /// asks, about a millisecond that every compilation paid twice
    /// (optimisation and code generation each made their own). A target
    /// machine is not shared between threads, and what it caches is a
    /// function of the host identity alone, so the object code is the same
    /// either way. Kept until [`release_target_machines`].
    static TARGET_MACHINE: std::cell::RefCell<[Machine; 2]> =
        const { std::cell::RefCell::new([None, None]) };
}

/// Run `f` with this thread's host target machine of `tier`.
fn with_target_machine<R>(
    tier: Tier,
    f: impl FnOnce(&TargetMachine) -> Result<R, Error>,
) -> Result<R, Error> {
    // The machine is held by `f`'s call, not the cell: `f` may compile
    // again on this thread, and a release meanwhile only drops the cell's.
    let tm = TARGET_MACHINE.with(|cell| {
        cell.borrow_mut()[tier as usize]
            .get_or_insert_with(|| {
                std::rc::Rc::new(target_machine(tier).map_err(|e| e.to_string()))
            })
            .clone()
    });
    match &*tm {
        Ok(tm) => f(tm),
        Err(e) => Err(Error::Llvm(e.clone())),
    }
}

/// Drop the host target machines that compiling left on this thread and
/// on every thread of the pool (about 0.9 MiB each for SmolLM2: the subtarget's
/// tables), to be made again by the next compilation (about a
/// millisecond). For a program whose kernels are all compiled (see
/// `tc::llvm::dry_run`) and that will mostly not compile again.
pub fn release_target_machines() {
    fn clear() {
        TARGET_MACHINE.with(|cell| drop(std::mem::take(&mut *cell.borrow_mut())));
    }
    clear();
    crate::threads::init();
    rayon::broadcast(|_| clear());
}

/// [`crate::host::PIPELINE`]: LLVM's loop unrolling off, so only loops
/// that ask for it are unrolled.
fn pass_options() -> PassBuilderOptions {
    let o = PassBuilderOptions::create();
    o.set_loop_unrolling(false);
    o
}

/// Parse `ir`, run `build`'s pipeline ([`crate::host::PIPELINE`],
/// [`QUICK_PIPELINE`] or [`crate::host::UNROLLED_PIPELINE`]) with the host
/// target machine.
fn optimise<'c>(
    ctx: &'c Context,
    (tm, build): (&TargetMachine, Build),
    ir: &str,
    name: &str,
) -> Result<Module<'c>, Error> {
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
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let pipeline = match build {
        Build::Now(Tier::Quick) => QUICK_PIPELINE,
        Build::Unrolled => crate::host::UNROLLED_PIPELINE,
        Build::Now(Tier::Optimized) | Build::Background => "default<O3>",
    };
    module
        .run_passes(pipeline, tm, pass_options())
        .map_err(|e| Error::Llvm(format!("{pipeline} pipeline: {}", e.to_string())))?;
    Ok(module)
}

/// Optimise `ir` and return the host assembly (for inspection and tests).
pub fn assembly(ir: &str) -> Result<String, Error> {
    assembly_built(ir, Build::Now(Tier::Optimized))
}

/// [`assembly`] as `build` makes the object code.
pub fn assembly_built(ir: &str, build: Build) -> Result<String, Error> {
    with_target_machine(build.tier(), |tm| {
        let ctx = Context::create();
        let module = optimise(&ctx, (tm, build), ir, "asm")?;
        let buf = tm
            .write_to_memory_buffer(&module, FileType::Assembly)
            .map_err(|e| Error::Llvm(e.to_string()))?;
        Ok(String::from_utf8_lossy(buf.as_slice()).into_owned())
    })
}

/// Optimise `ir` and return the optimised IR text.
pub fn optimised_ir(ir: &str) -> Result<String, Error> {
    with_target_machine(Tier::Optimized, |tm| {
        let ctx = Context::create();
        let module = optimise(&ctx, (tm, Build::Now(Tier::Optimized)), ir, "ir")?;
        Ok(module.print_to_string().to_string())
    })
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
    /// A part of it was compiled at [`Tier::Quick`].
    pub quick: bool,
}

impl std::fmt::Debug for JitModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitModule")
            .field("fns", &self.fns)
            .field("compile_ms", &self.compile_ms)
            .field("from_disk", &self.from_disk)
            .field("quick", &self.quick)
            .finish()
    }
}

/// How [`JitModule::compile_split`] makes the parts the persistent cache
/// does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// At this tier, the parts on parallel threads (a call waits).
    Now(Tier),
    /// At [`Tier::Optimized`], one part after another on this thread
    /// (the background tier-up, `crate::tier`): it leaves the other CPUs
    /// to the calls running meanwhile.
    Background,
    /// A module written vectorized and unrolled by hand (the GEMM
    /// micro-kernels), at the optimized tier through
    /// [`crate::host::UNROLLED_PIPELINE`].
    Unrolled,
}

impl Build {
    fn tier(self) -> Tier {
        match self {
            Build::Now(t) => t,
            Build::Background | Build::Unrolled => Tier::Optimized,
        }
    }
}

/// Where a part's object code came from, and its tier.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Disk(Tier),
    Compiled(Tier),
}

impl Origin {
    fn tier(self) -> Tier {
        match self {
            Origin::Disk(t) | Origin::Compiled(t) => t,
        }
    }
}

/// The text an object made by `build` is stored under in the persistent
/// cache: the IR itself for [`crate::host::PIPELINE`] (the store's header
/// names it), else the IR after a line naming the pipeline and code
/// generation, so that each is an entry of its own, never found as
/// another's.
fn entry_key(ir: &str, build: Build) -> std::borrow::Cow<'_, str> {
    match build {
        Build::Now(Tier::Optimized) | Build::Background => ir.into(),
        Build::Now(Tier::Quick) => {
            format!("; tc quick tier: {QUICK_PIPELINE}, code generation -O0\n{ir}").into()
        }
        Build::Unrolled => format!(
            "; tc unrolled kernel: {}, code generation -O3\n{ir}",
            crate::host::UNROLLED_PIPELINE
        )
        .into(),
    }
}

/// A module's IR text above which [`split_module`] cuts it in parts.
pub const PART_BYTES: usize = 24 * 1024;
/// At most this many parts.
pub const MAX_PARTS: usize = 4;

/// Cut a kernel module (`codegen::gen_module`'s text: declarations, then
/// per kernel an internal `@kN_body` and its exported `@kN`, then the
/// attribute groups) into self-contained modules of about [`PART_BYTES`]
/// each, at most [`MAX_PARTS`], each kernel whole in one part; every part
/// repeats the declarations and attributes. The cut depends on the text
/// alone (never on the thread count), so each part is a stable entry of the
/// persistent cache. Text of any other shape stays one part.
pub fn split_module(ir: &str) -> Vec<String> {
    let whole = || vec![ir.to_string()];
    let Some(first) = ir.find("\ndefine ").map(|i| i + 1) else {
        return whole();
    };
    let Some(attrs) = ir.find("\nattributes ").map(|i| i + 1) else {
        return whole();
    };
    let (head, body, tail) = (&ir[..first], &ir[first..attrs], &ir[attrs..]);
    // Kernels: each `define` block, grouped by kernel number.
    let mut kernels: Vec<(String, String)> = Vec::new();
    for block in body.split_inclusive("\n}\n") {
        let Some(name) = block
            .trim_start()
            .strip_prefix("define ")
            .and_then(|b| b.split('@').nth(1))
            .and_then(|b| b.split('(').next())
        else {
            if block.trim().is_empty() {
                continue;
            }
            return whole();
        };
        let kernel = name.strip_suffix("_body").unwrap_or(name);
        if !kernel.starts_with('k') || !kernel[1..].bytes().all(|b| b.is_ascii_digit()) {
            return whole();
        }
        match kernels.iter_mut().find(|k| k.0 == kernel) {
            Some(k) => k.1.push_str(block),
            None => kernels.push((kernel.to_string(), block.to_string())),
        }
    }
    let n = (ir.len() / PART_BYTES)
        .clamp(1, MAX_PARTS)
        .min(kernels.len());
    if n <= 1 {
        return whole();
    }
    // Largest kernels first, each into the smallest part so far.
    kernels.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let mut parts: Vec<String> = vec![String::new(); n];
    for (_, text) in &kernels {
        let smallest = (0..n).min_by_key(|&i| (parts[i].len(), i)).unwrap_or(0);
        parts[smallest].push_str(text);
    }
    parts
        .into_iter()
        .map(|p| format!("{head}{p}{tail}"))
        .collect()
}

/// Optimise `ir` and generate the host's relocatable object code for it.
pub fn object_code(ir: &str) -> Result<Vec<u8>, Error> {
    object_code_built(ir, Build::Now(Tier::Optimized))
}

/// [`object_code`] as `build` makes it.
fn object_code_built(ir: &str, build: Build) -> Result<Vec<u8>, Error> {
    with_target_machine(build.tier(), |tm| {
        let ctx = Context::create();
        let module = optimise(&ctx, (tm, build), ir, "tc")?;
        let buf = tm
            .write_to_memory_buffer(&module, FileType::Object)
            .map_err(|e| Error::Llvm(format!("object code: {}", e.to_string())))?;
        Ok(buf.as_slice().to_vec())
    })
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
        Self::compile_built(ir, symbols, exports, store, Build::Now(Tier::Optimized))
    }

    /// [`JitModule::compile_with`], made as `build` says.
    pub fn compile_built(
        ir: &str,
        symbols: &[(&str, usize)],
        exports: &[String],
        store: Option<&crate::disk::Store>,
        build: Build,
    ) -> Result<JitModule, Error> {
        Self::compile_parts(&[ir.to_string()], symbols, exports, (store, build))
    }

    /// Compile a function's kernels as the parts [`split_module`] cut its
    /// module into (each part its own LLVM context and its own
    /// persistent-cache entry) and link them as one: with [`Build::Now`],
    /// on parallel threads, so a cold first call costs the largest part's
    /// compilation, not the sum. A part the persistent cache holds is
    /// loaded, whatever `build` says: it is the optimized tier's.
    pub fn compile_split(
        ir: &str,
        symbols: &[(&str, usize)],
        exports: &[String],
        build: Build,
    ) -> Result<JitModule, Error> {
        let parts = split_module(ir);
        Self::compile_parts(
            &parts,
            symbols,
            exports,
            (crate::disk::Store::global(), build),
        )
    }

    fn compile_parts(
        parts: &[String],
        symbols: &[(&str, usize)],
        exports: &[String],
        (store, build): (Option<&crate::disk::Store>, Build),
    ) -> Result<JitModule, Error> {
        let t0 = Instant::now();
        host();
        let objects = Self::objects(parts, store, build, true)?;
        match Self::link(&objects, symbols, exports, t0) {
            // A cached entry that matches the IR and this host but does not
            // link (it cannot happen short of an LLVM change under the same
            // identity) is recompiled and replaced, never trusted.
            Err(_) if objects.iter().any(|o| matches!(o.1, Origin::Disk(_))) => {
                let fresh = Self::objects(parts, store, build, false)?;
                Self::link(&fresh, symbols, exports, t0)
            }
            r => r,
        }
    }

    /// Each part's object code and where it came from: the persistent
    /// cache (looked up when `cached`: the optimized tier's entry, else,
    /// for a quick build, the quick tier's), else compiled as `build` says
    /// and stored under its own entry ([`entry_key`]).
    fn objects(
        parts: &[String],
        store: Option<&crate::disk::Store>,
        build: Build,
        cached: bool,
    ) -> Result<Vec<(Vec<u8>, Origin)>, Error> {
        let tier = build.tier();
        // The optimized tier's build of the same module.
        let best = match build {
            Build::Unrolled => Build::Unrolled,
            Build::Now(_) | Build::Background => Build::Now(Tier::Optimized),
        };
        let one = |ir: &String| {
            let lookup = store.filter(|_| cached);
            if let Some(object) = lookup.and_then(|s| s.load(&entry_key(ir, best))) {
                return Ok((object, Origin::Disk(Tier::Optimized)));
            }
            if tier == Tier::Quick {
                if let Some(object) = lookup.and_then(|s| s.load(&entry_key(ir, build))) {
                    return Ok((object, Origin::Disk(Tier::Quick)));
                }
            }
            // A call waits on it: the sessions' helpers nap meanwhile
            // (`crate::offpool::Compiling`); a background compile leaves
            // them be.
            let _busy = (build != Build::Background).then(crate::offpool::Compiling::start);
            let object = object_code_built(ir, build)?;
            if let Some(s) = store {
                s.save(&entry_key(ir, build), &object);
            }
            Ok((object, Origin::Compiled(tier)))
        };
        match build {
            Build::Background => parts.iter().map(one).collect(),
            // Off the pool: a compile holds its cache slot (`crate::offpool`).
            Build::Now(_) | Build::Unrolled => {
                crate::offpool::map(parts, one).into_iter().collect()
            }
        }
    }

    fn link(
        objects: &[(Vec<u8>, Origin)],
        symbols: &[(&str, usize)],
        exports: &[String],
        t0: Instant,
    ) -> Result<JitModule, Error> {
        let loader = Loader::new(symbols)?;
        for (object, _) in objects {
            loader.add_object(object)?;
        }
        let fns = exports
            .iter()
            .map(|name| Ok((name.clone(), loader.lookup(name)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(JitModule {
            _loader: loader,
            fns,
            compile_ms: t0.elapsed().as_secs_f64() * 1e3,
            from_disk: objects.iter().all(|o| matches!(o.1, Origin::Disk(_))),
            quick: objects.iter().any(|o| o.1.tier() == Tier::Quick),
        })
    }

    /// The address of an exported function.
    pub fn addr(&self, name: &str) -> Option<usize> {
        self.fns.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
    }
}

/// The one ORC instance of the process's kernels that live as long as it
/// (the GEMM micro-kernels, [`crate::kernels::gemm_common::compile_micro`]): an
/// `LLJIT` costs 0.23–0.27 ms to create (0.8 ms the first time, AMD Zen 4
/// host, 2026-12-04), and a warm start made one per kernel, three for a
/// GPT-2 block beside its own.
struct Shared {
    loader: Loader,
    /// What is linked: by symbol, the whole IR text it was linked from and
    /// its address.
    linked: std::sync::Mutex<std::collections::HashMap<String, (String, usize)>>,
}

fn shared() -> Result<&'static Shared, Error> {
    static S: std::sync::OnceLock<Result<Shared, String>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        host();
        let loader = Loader::new(&[]).map_err(|e| e.to_string())?;
        Ok(Shared {
            loader,
            linked: Default::default(),
        })
    })
    .as_ref()
    .map_err(|e| Error::Llvm(e.clone()))
}

/// Compile `ir`, a GEMM micro-kernel (written vectorized and unrolled:
/// [`Build::Unrolled`]) that defines `@{name}(…)` and calls nothing
/// outside the process, into the shared instance for the life of the
/// process (or load its object from the persistent cache) and return
/// `name`'s address.
/// There the function is named after a hash of the whole text,
/// `{name}_{hash}`, so that kernels do not collide and the disk cache's
/// key stays a function of the text; a text already linked is found by
/// the whole text, never by the name alone. `None` when it cannot be
/// linked there (two texts of one hash, or a failed link, which leaves
/// the name unusable): the caller then links a module of its own.
pub(crate) fn link_for_process(ir: &str, name: &str) -> Option<usize> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(ir, &mut h);
    let unique = format!("{name}_{:016x}", std::hash::Hasher::finish(&h));
    let ir = ir.replace(&format!("@{name}("), &format!("@{unique}("));
    let shared = shared().ok()?;
    let lock = || shared.linked.lock().unwrap_or_else(|p| p.into_inner());
    // `Some(found)`: the name is taken, by this text (`found`) or another.
    let taken = |l: &std::collections::HashMap<String, (String, usize)>| {
        l.get(&unique)
            .map(|(text, addr)| (*text == ir).then_some(*addr))
    };
    if let Some(found) = taken(&lock()) {
        return found;
    }
    // Compiled (the slow part) outside the lock.
    let (object, _) = JitModule::objects(
        std::slice::from_ref(&ir),
        crate::disk::Store::global(),
        Build::Unrolled,
        true,
    )
    .ok()?
    .pop()?;
    let mut linked = lock();
    if let Some(found) = taken(&linked) {
        return found;
    }
    shared.loader.add_object(&object).ok()?;
    let addr = shared.loader.lookup(&unique).ok()?;
    linked.insert(unique, (ir, addr));
    Some(addr)
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
