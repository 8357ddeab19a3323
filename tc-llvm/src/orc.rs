//! Loading compiled object code into the process: a minimal safe wrapper
//! over LLVM 14's ORC `LLJIT` C API.
//!
//! Why ORC and not MCJIT: MCJIT (the only engine inkwell wraps) compiles a
//! *module*; it cannot take object code that was produced earlier, so it
//! cannot serve a persistent kernel cache (issue #15: a warm process start
//! must not recompile). `LLJIT` links a relocatable object file into the
//! process (RuntimeDyld on ELF), resolving the runtime helpers from a symbol
//! table we give it and libc/libm from the process. Every JIT module goes
//! this way — IR → object ([`crate::jit`]) → [`Loader`] — so the cold path
//! and the cached path run the same loader and the same code.
//!
//! One `LLJIT` per loaded function module: its lifetime is the machine
//! code's lifetime, and dropping it releases the code (the kernel cache
//! evicts modules, so code must be freeable, which per-module instances
//! make trivial). Kernels that live as long as the process (the GEMM
//! micro-kernels) share one instance instead (`jit::link_for_process`),
//! each under a name of its own.

use std::ffi::{CStr, CString};

use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcCreateLLJITBuilder, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFile,
    LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup,
    LLVMOrcLLJITMangleAndIntern, LLVMOrcLLJITRef,
};
// Orc.h renamed the symbol-map pair in LLVM 15; same layout.
#[cfg(feature = "llvm14")]
use llvm_sys::orc2::LLVMJITCSymbolMapPair as SymbolMapPair;
#[cfg(not(feature = "llvm14"))]
use llvm_sys::orc2::LLVMOrcCSymbolMapPair as SymbolMapPair;
use llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess, LLVMOrcDisposeMaterializationUnit,
    LLVMOrcJITDylibAddGenerator, LLVMOrcJITDylibDefine,
};

use crate::options::Error;

/// The message of an LLVM error, consuming it; `None` for success.
fn take_error(err: LLVMErrorRef, what: &str) -> Result<(), Error> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: `err` is a non-null error just returned by an LLVM C API call
    // and not yet consumed; `LLVMGetErrorMessage` consumes it and returns a
    // NUL-terminated string we own until `LLVMDisposeErrorMessage`.
    let msg = unsafe {
        let m = LLVMGetErrorMessage(err);
        let s = CStr::from_ptr(m).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(m);
        s
    };
    Err(Error::Llvm(format!("{what}: {msg}")))
}

/// One `LLJIT` instance holding (at most) one linked object file.
pub(crate) struct Loader {
    jit: LLVMOrcLLJITRef,
}

impl Loader {
    /// A fresh instance whose main library resolves `symbols` (name →
    /// address of a runtime helper) and, after them, the process's own
    /// symbols (libm, libc: the libcalls LLVM's code generator emits).
    pub(crate) fn new(symbols: &[(&str, usize)]) -> Result<Loader, Error> {
        let mut jit: LLVMOrcLLJITRef = std::ptr::null_mut();
        // SAFETY: the builder is created here and passed by value to
        // `LLVMOrcCreateLLJIT`, which takes ownership of it on success and
        // on failure; `jit` is written only on success.
        let err = unsafe { LLVMOrcCreateLLJIT(&mut jit, LLVMOrcCreateLLJITBuilder()) };
        take_error(err, "creating the ORC LLJIT")?;
        let loader = Loader { jit };
        loader.define_absolute(symbols)?;
        loader.add_process_symbols()?;
        Ok(loader)
    }

    fn define_absolute(&self, symbols: &[(&str, usize)]) -> Result<(), Error> {
        if symbols.is_empty() {
            return Ok(());
        }
        let mut pairs = Vec::with_capacity(symbols.len());
        for (name, addr) in symbols {
            let c = CString::new(*name).map_err(|_| Error::Llvm(format!("symbol `{name}`")))?;
            // SAFETY: `self.jit` is live (owned by `self`); `c` is a valid
            // NUL-terminated string for the duration of the call. The
            // returned pool entry is owned by `pairs` until handed over below.
            let interned = unsafe { LLVMOrcLLJITMangleAndIntern(self.jit, c.as_ptr()) };
            pairs.push(SymbolMapPair {
                Name: interned,
                Sym: LLVMJITEvaluatedSymbol {
                    Address: *addr as u64,
                    Flags: LLVMJITSymbolFlags {
                        GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported
                            as u8
                            | LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsCallable as u8,
                        TargetFlags: 0,
                    },
                },
            });
        }
        // SAFETY: `pairs` holds `pairs.len()` initialised entries whose pool
        // entries `LLVMOrcAbsoluteSymbols` takes ownership of (Orc.h); the
        // array itself stays ours. On a failed define the unit is still ours
        // and disposed here; on success the JITDylib owns it.
        unsafe {
            let mu = LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len());
            let jd = LLVMOrcLLJITGetMainJITDylib(self.jit);
            let err = LLVMOrcJITDylibDefine(jd, mu);
            if !err.is_null() {
                LLVMOrcDisposeMaterializationUnit(mu);
            }
            take_error(err, "defining the runtime symbols")
        }
    }

    fn add_process_symbols(&self) -> Result<(), Error> {
        let mut gen = std::ptr::null_mut();
        // SAFETY: `self.jit` is live; the generator is written on success
        // and then owned by the main JITDylib (`LLVMOrcJITDylibAddGenerator`
        // takes ownership). No filter, so no callback context is needed.
        unsafe {
            let prefix = LLVMOrcLLJITGetGlobalPrefix(self.jit);
            let err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                &mut gen,
                prefix,
                None,
                std::ptr::null_mut(),
            );
            take_error(err, "searching the process's symbols")?;
            LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(self.jit), gen);
        }
        Ok(())
    }

    /// Link a relocatable object file (copied) into this instance.
    pub(crate) fn add_object(&self, object: &[u8]) -> Result<(), Error> {
        let name = CString::new("tc-object").expect("no NUL");
        // SAFETY: the buffer is a copy of `object` (LLVM copies the range),
        // and `LLVMOrcLLJITAddObjectFile` takes ownership of it whatever the
        // outcome (LLJIT.h); `self.jit` is live.
        unsafe {
            let buf = llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy(
                object.as_ptr().cast(),
                object.len(),
                name.as_ptr(),
            );
            let jd = LLVMOrcLLJITGetMainJITDylib(self.jit);
            take_error(
                LLVMOrcLLJITAddObjectFile(self.jit, jd, buf),
                "adding the object",
            )
        }
    }

    /// The address of `name` (links the object on first lookup).
    pub(crate) fn lookup(&self, name: &str) -> Result<usize, Error> {
        let c = CString::new(name).map_err(|_| Error::Llvm(format!("symbol `{name}`")))?;
        let mut addr = 0u64;
        // SAFETY: `self.jit` is live, `c` is NUL-terminated, `addr` is a
        // valid out-pointer for the call.
        let err = unsafe { LLVMOrcLLJITLookup(self.jit, &mut addr, c.as_ptr()) };
        take_error(err, &format!("symbol `{name}`"))?;
        usize::try_from(addr).map_err(|_| Error::Llvm(format!("symbol `{name}` address")))
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // SAFETY: `self.jit` came from `LLVMOrcCreateLLJIT` and is disposed
        // exactly once, here; the machine code it owns is freed with it, and
        // `JitModule` (the only owner) hands out its addresses only while it
        // lives. A disposal error has nowhere to go but is consumed.
        unsafe {
            let err = LLVMOrcDisposeLLJIT(self.jit);
            let _ = take_error(err, "disposing");
        }
    }
}

// SAFETY: an `LLJIT` (its ExecutionSession) is internally synchronised; we
// only look symbols up during construction and dispose it in `Drop`, which
// owns it, so moving it to another thread splits nothing.
unsafe impl Send for Loader {}
// SAFETY: no `&self` method mutates state that is not locked by ORC itself.
unsafe impl Sync for Loader {}
