//! AMX tile state, shared by tc's tile kernels: this crate's AMX-INT8
//! products of quantized blocks and tc-llvm's AMX-BF16 products.
//!
//! Three things must hold before a tile instruction runs, and this
//! module is the one place that establishes them:
//! - the CPU has AMX-TILE and the instruction set's extension (CPUID
//!   leaf 7: [`cpu_has`]);
//! - Linux handed the process its 8 KiB of tile state, which it does only
//!   on request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`:
//!   [`granted`] asks once);
//! - the thread loaded a configuration that gives every tile it names a
//!   shape ([`Tiles::load`], with a [`Config`] checked when it is built).

#[cfg(target_arch = "x86_64")]
use std::arch::asm;
use std::sync::OnceLock;

/// An AMX instruction-set extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension {
    /// `tdpbssd` and its signedness variants.
    Int8,
    /// `tdpbf16ps`.
    Bf16,
}

/// Whether the CPU has AMX-TILE and `ext` (CPUID leaf 7, sub-leaf 0:
/// EDX bit 24 is AMX-TILE, 25 AMX-INT8, 22 AMX-BF16). Says nothing of
/// the operating system's permission ([`granted`]).
pub fn cpu_has(ext: Extension) -> bool {
    // Miri runs neither CPUID nor tile instructions.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 reads no memory
        // and gives the highest leaf, checked before leaf 7 is asked.
        #[allow(unused_unsafe)] // the CPUID intrinsics are safe on newer toolchains
        let top = unsafe { __cpuid(0) }.eax;
        if top < 7 {
            return false;
        }
        // SAFETY: leaf 7 exists (just checked); the instruction reads no
        // memory.
        #[allow(unused_unsafe)]
        let edx = unsafe { __cpuid_count(7, 0) }.edx;
        let bit = match ext {
            Extension::Int8 => 25,
            Extension::Bf16 => 22,
        };
        edx & (1 << 24) != 0 && edx & (1 << bit) != 0
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    {
        let _ = ext;
        false
    }
}

/// Whether the operating system granted this process the tile state
/// (asked once; process-wide once granted). Only true where the CPU
/// has AMX-TILE.
pub fn granted() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| (cpu_has(Extension::Int8) || cpu_has(Extension::Bf16)) && request())
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn request() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: this arch_prctl takes two integers and reads or writes no
    // memory of the process; it fails (returns −1) where the kernel
    // lacks AMX support, and the permission it grants is process-wide.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    rc == 0
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn request() -> bool {
    false
}

/// A 64-byte tile configuration (palette 1) naming up to eight tiles.
/// Built by [`Config::new`], which refuses (at compile time, in a
/// `const`) any shape `ldtilecfg` would fault on.
#[repr(C, align(64))]
pub struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl Config {
    /// Tile `i` of `rows` rows of `bytes` bytes each, for each `(rows,
    /// bytes)` at index `i`; the rest unconfigured. Palette 1's limits: at
    /// most 8 tiles of at most 16 rows and 64 bytes, each a positive
    /// number of whole 4-byte elements.
    pub const fn new(shapes: &[(u8, u16)]) -> Config {
        assert!(shapes.len() <= 8, "palette 1 has 8 tiles");
        let mut colsb = [0u16; 16];
        let mut rows = [0u8; 16];
        let mut i = 0;
        while i < shapes.len() {
            let (r, b) = shapes[i];
            assert!(r >= 1 && r <= 16, "a tile has 1 to 16 rows");
            assert!(
                b >= 4 && b <= 64 && b % 4 == 0,
                "a tile row is 4 to 64 bytes, whole dwords"
            );
            rows[i] = r;
            colsb[i] = b;
            i += 1;
        }
        Config {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb,
            rows,
        }
    }
}

/// A configuration loaded on this thread, released on drop. Holding one
/// is the proof that `ldtilecfg` ran here with [`Tiles::config`]'s
/// shapes (it cannot leave the thread: the raw-pointer marker makes it
/// neither `Send` nor `Sync`); a kernel checks that they are its own.
pub struct Tiles {
    cfg: &'static Config,
    _here: std::marker::PhantomData<*const ()>,
}

impl Tiles {
    /// Loads `cfg` on this thread.
    ///
    /// # Safety
    /// [`granted`] returned true in this process (so the CPU has AMX-TILE
    /// and the tile state is the process's), and nothing that may load
    /// another configuration or release the tiles runs on this thread
    /// while the `Tiles` lives: in particular no call into a rayon pool,
    /// whose waiting thread can run another task's kernel.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: (contract) met by each kernel that loads its tiles.
    pub unsafe fn load(cfg: &'static Config) -> Tiles {
        // SAFETY: the configuration is 64 readable, aligned bytes whose
        // shapes `Config::new` checked against palette 1; the contract
        // says the OS granted the tile state.
        unsafe { asm!("ldtilecfg [{}]", in(reg) cfg, options(nostack, readonly)) };
        Tiles {
            cfg,
            _here: std::marker::PhantomData,
        }
    }

    /// The configuration loaded.
    pub fn config(&self) -> &'static Config {
        self.cfg
    }

    /// Whether the configuration loaded is `cfg` (by address: a kernel's
    /// own static).
    pub fn are(&self, cfg: &'static Config) -> bool {
        std::ptr::eq(self.cfg, cfg)
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured (`Tiles::load`), so the
        // instruction exists and is permitted; it only resets tile state.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shapes land where `ldtilecfg` reads them: palette at byte 0,
    /// tile `i`'s bytes per row at `16 + 2i`, its rows at `48 + i`.
    #[test]
    fn config_layout() {
        const C: Config = Config::new(&[(16, 64), (8, 32)]);
        assert_eq!(std::mem::size_of::<Config>(), 64);
        // SAFETY: `Config` is 64 plain bytes (repr(C), no padding: 2 + 14
        // + 32 + 16).
        let bytes: &[u8; 64] = unsafe { &*(&C as *const Config).cast() };
        assert_eq!(bytes[0], 1);
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 64);
        assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 32);
        assert_eq!((bytes[48], bytes[49], bytes[50]), (16, 8, 0));
    }
}
