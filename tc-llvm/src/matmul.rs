//! Matmul (Section 2 §7, Section 4 §5.4): packing, cache tiling and a
//! register-blocked micro-kernel generated as LLVM IR.
//!
//! The micro-kernel computes an `MR × NR` tile of C (8 × 32 on AVX-512, held
//! in 16 `<16 x float>` accumulators; 8 × 16 otherwise) from a packed A
//! micro-panel (`kc × MR`, column by column) and a packed B micro-panel
//! (`kc × NR`, row by row) with one broadcast of A and `NR/VW` vector FMAs per
//! row of the tile and step of k. It is emitted once per process as IR text
//! (`llvm.fma.v16f32`) and JIT-compiled like the other kernels. The loops
//! around it follow the BLIS order: `jc` (NC columns, B block in L3) →
//! `pc` (KC of the contraction, pack B) → `ic` (MC rows, pack A into L2,
//! split across threads) → `jr` → `ir` (micro-kernel, B micro-panel in L1).
//!
//! Numerics: f32 accumulation with FMA, blocked along K in KC chunks: the
//! sum order differs from the interpreter's sequential one (Section 4 §6:
//! the order is unspecified). Narrow floats are widened to f32 while packing
//! and rounded once at the end (Section 2 §3). Integer matmul wraps (i64
//! accumulation, wrapped to the dtype) and is bit-exact; it runs as a plain
//! Rust loop (no IR micro-kernel yet).

use std::sync::OnceLock;

use rayon::prelude::*;
use tc_core::Dtype;
use tc_runtime::cast;

use crate::jit::JitModule;
use crate::Error;

/// Rows of the register tile.
pub const MR: usize = 8;
/// Contraction block.
pub const KC: usize = 256;
/// Row block (A block of `MC × KC` floats sits in L2).
pub const MC: usize = 128;
/// Column block.
pub const NC: usize = 4096;

type Ukr = unsafe extern "C" fn(i64, *const f32, *const f32, *mut f32, i64, i64);

struct Micro {
    _module: JitModule,
    f: Ukr,
    nr: usize,
}

/// The micro-kernel's IR text for vector width `vw` (NR = 2·vw).
pub fn ukernel_ir(vw: usize) -> String {
    let nr = 2 * vw;
    let v = format!("<{vw} x float>");
    let mut s = String::new();
    s.push_str(&format!(
        "declare {v} @llvm.fma.v{vw}f32({v}, {v}, {v})\n\n"
    ));
    s.push_str(&format!(
        "define void @ukr(i64 %kc, float* noalias nocapture readonly %a, float* noalias nocapture readonly %b, float* noalias nocapture %c, i64 %ldc, i64 %accum) #0 {{\nentry:\n  br label %loop\nloop:\n  %k = phi i64 [0, %entry], [%k1, %loop]\n"
    ));
    for i in 0..MR {
        for j in 0..2 {
            s.push_str(&format!(
                "  %acc{i}_{j} = phi {v} [zeroinitializer, %entry], [%n{i}_{j}, %loop]\n"
            ));
        }
    }
    s.push_str(&format!("  %bo = mul i64 %k, {nr}\n"));
    for j in 0..2 {
        s.push_str(&format!(
            "  %bo{j} = add i64 %bo, {}\n  %bp{j} = getelementptr inbounds float, float* %b, i64 %bo{j}\n  %bq{j} = bitcast float* %bp{j} to {v}*\n  %b{j} = load {v}, {v}* %bq{j}, align 4\n",
            j * vw
        ));
    }
    s.push_str(&format!("  %ao = mul i64 %k, {MR}\n"));
    for i in 0..MR {
        s.push_str(&format!(
            "  %ao{i} = add i64 %ao, {i}\n  %ap{i} = getelementptr inbounds float, float* %a, i64 %ao{i}\n  %a{i} = load float, float* %ap{i}, align 4\n  %ai{i} = insertelement {v} undef, float %a{i}, i32 0\n  %as{i} = shufflevector {v} %ai{i}, {v} undef, <{vw} x i32> zeroinitializer\n"
        ));
        for j in 0..2 {
            s.push_str(&format!(
                "  %n{i}_{j} = call {v} @llvm.fma.v{vw}f32({v} %as{i}, {v} %b{j}, {v} %acc{i}_{j})\n"
            ));
        }
    }
    s.push_str("  %k1 = add nuw nsw i64 %k, 1\n  %cc = icmp ult i64 %k1, %kc\n  br i1 %cc, label %loop, label %done\ndone:\n  %ac = icmp ne i64 %accum, 0\n");
    for i in 0..MR {
        for j in 0..2 {
            s.push_str(&format!(
                "  %ro{i}_{j} = mul i64 %ldc, {i}\n  %co{i}_{j} = add i64 %ro{i}_{j}, {}\n  %cp{i}_{j} = getelementptr inbounds float, float* %c, i64 %co{i}_{j}\n  %cq{i}_{j} = bitcast float* %cp{i}_{j} to {v}*\n  %old{i}_{j} = load {v}, {v}* %cq{i}_{j}, align 4\n  %sum{i}_{j} = fadd {v} %old{i}_{j}, %n{i}_{j}\n  %res{i}_{j} = select i1 %ac, {v} %sum{i}_{j}, {v} %n{i}_{j}\n  store {v} %res{i}_{j}, {v}* %cq{i}_{j}, align 4\n",
                j * vw
            ));
        }
    }
    s.push_str("  ret void\n}\n\n");
    s.push_str(&crate::codegen::attributes());
    s
}

fn micro() -> Result<&'static Micro, Error> {
    static M: OnceLock<Result<Micro, String>> = OnceLock::new();
    let r = M.get_or_init(|| {
        let vw = if crate::jit::host().has_avx512() {
            16
        } else {
            8
        };
        let ir = ukernel_ir(vw);
        let m = JitModule::compile(&ir, &[], &["ukr".to_string()]).map_err(|e| e.to_string())?;
        let a = m.addr("ukr").ok_or("ukr missing")?;
        // SAFETY: `ukr` has exactly the `Ukr` signature (see `ukernel_ir`).
        let f: Ukr = unsafe { std::mem::transmute::<usize, Ukr>(a) };
        Ok(Micro {
            _module: m,
            f,
            nr: 2 * vw,
        })
    });
    r.as_ref().map_err(|e| Error::Llvm(e.clone()))
}

/// Compile the micro-kernel now (so its cost is not charged to a call).
pub fn warm_up() -> Result<(), Error> {
    micro().map(|_| ())
}

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: used only for disjoint writes (distinct C tiles per task) or reads.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// A strided f32 matrix view.
#[derive(Clone, Copy)]
pub struct View {
    ptr: *const f32,
    rs: usize,
    cs: usize,
}
// SAFETY: read-only view.
unsafe impl Send for View {}
unsafe impl Sync for View {}

impl View {
    /// A row-major `ld`-strided view.
    pub fn new(ptr: *const f32, rs: usize, cs: usize) -> View {
        View { ptr, rs, cs }
    }
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> f32 {
        *self.ptr.add(i * self.rs + j * self.cs)
    }
}

/// `C[m×n] = A[m×k] · B[k×n]` in f32 (C row-major with leading dim `n`).
/// `threads == 1` runs on the calling thread only.
///
/// # Safety
/// The views must be valid for the given extents and `c` for `m·n` floats.
pub unsafe fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View,
    c: *mut f32,
    threads: usize,
) -> Result<(), Error> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        std::ptr::write_bytes(c, 0, m * n);
        return Ok(());
    }
    let mk = micro()?;
    let nr = mk.nr;
    let ukr = mk.f;
    let par = threads != 1 && (m * n * k) >= (1 << 18);
    let nthreads = if par {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let mc = if nthreads > 1 {
        MC.min((m.div_ceil(nthreads)).div_ceil(MR) * MR)
    } else {
        MC
    };
    let cp = SendPtr(c);
    let mut bp: Vec<f32> = Vec::new();
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let npanels = nc.div_ceil(nr);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            // Pack B[pc.., jc..] into NR-wide row panels, zero-padded.
            bp.clear();
            bp.resize(npanels * kc * nr, 0.0);
            let pack_b = |q: usize, dst: &mut [f32]| {
                for kk in 0..kc {
                    for cc in 0..nr {
                        let col = jc + q * nr + cc;
                        dst[kk * nr + cc] = if col < n { b.at(pc + kk, col) } else { 0.0 };
                    }
                }
            };
            if par {
                bp.par_chunks_mut(kc * nr)
                    .enumerate()
                    .for_each(|(q, d)| pack_b(q, d));
            } else {
                bp.chunks_mut(kc * nr)
                    .enumerate()
                    .for_each(|(q, d)| pack_b(q, d));
            }
            let bpr = &bp;
            let accum = (pc > 0) as i64;
            let do_block = |ic: usize| {
                let mcb = mc.min(m - ic);
                let mpanels = mcb.div_ceil(MR);
                let mut ap = vec![0f32; mpanels * kc * MR];
                for p in 0..mpanels {
                    for kk in 0..kc {
                        for r in 0..MR {
                            let row = ic + p * MR + r;
                            ap[(p * kc + kk) * MR + r] =
                                if row < m { a.at(row, pc + kk) } else { 0.0 };
                        }
                    }
                }
                let mut tile = vec![0f32; MR * nr];
                let c = cp;
                for q in 0..npanels {
                    let col0 = jc + q * nr;
                    let ncols = nr.min(n - col0);
                    let bq = bpr.as_ptr().add(q * kc * nr);
                    for p in 0..mpanels {
                        let row0 = ic + p * MR;
                        let nrows = MR.min(m - row0);
                        let apq = ap.as_ptr().add(p * kc * MR);
                        if nrows == MR && ncols == nr {
                            ukr(
                                kc as i64,
                                apq,
                                bq,
                                c.0.add(row0 * n + col0),
                                n as i64,
                                accum,
                            );
                        } else {
                            ukr(kc as i64, apq, bq, tile.as_mut_ptr(), nr as i64, 0);
                            for r in 0..nrows {
                                for cc in 0..ncols {
                                    let dst = c.0.add((row0 + r) * n + col0 + cc);
                                    let v = tile[r * nr + cc];
                                    *dst = if accum != 0 { *dst + v } else { v };
                                }
                            }
                        }
                    }
                }
            };
            let blocks: Vec<usize> = (0..m).step_by(mc).collect();
            if par && blocks.len() > 1 {
                blocks.par_iter().for_each(|&ic| do_block(ic));
            } else {
                blocks.iter().for_each(|&ic| do_block(ic));
            }
        }
    }
    Ok(())
}

/// Batched matmul on raw storage (Section 2 §5 layout) of dtype `dt`:
/// `a: p ++ [M, K]`, `b: p ++ [K, N]` → `out: p ++ [M, N]`.
///
/// # Safety
/// The buffers must hold the storage of the given shapes.
pub unsafe fn matmul(
    dt: Dtype,
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    threads: usize,
) -> Result<(), Error> {
    let r = sa.len();
    let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
    let batch: usize = sa[..r - 2].iter().product();
    let (na, nb, nc) = (m * k, k * n, m * n);
    match dt {
        Dtype::F32 => {
            let (a, b, c) = (a as *const f32, b as *const f32, out as *mut f32);
            for p in 0..batch {
                sgemm(
                    m,
                    n,
                    k,
                    View::new(a.add(p * na), k, 1),
                    View::new(b.add(p * nb), n, 1),
                    c.add(p * nc),
                    threads,
                )?;
            }
        }
        d if d.is_float() => {
            let dec = |ptr: *const u8, len: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| {
                        let bits = if d.bits() == 16 {
                            u16::from_le_bytes([*ptr.add(2 * i), *ptr.add(2 * i + 1)])
                        } else {
                            *ptr.add(i) as u16
                        };
                        cast::decode_bits(bits, d).unwrap_or(f32::NAN)
                    })
                    .collect()
            };
            let (af, bf) = (dec(a, batch * na), dec(b, batch * nb));
            let mut cf = vec![0f32; batch * nc];
            for p in 0..batch {
                sgemm(
                    m,
                    n,
                    k,
                    View::new(af.as_ptr().add(p * na), k, 1),
                    View::new(bf.as_ptr().add(p * nb), n, 1),
                    cf.as_mut_ptr().add(p * nc),
                    threads,
                )?;
            }
            for (i, x) in cf.iter().enumerate() {
                let bits = cast::encode_bits(*x, d).unwrap_or(0);
                if d.bits() == 16 {
                    let le = bits.to_le_bytes();
                    *out.add(2 * i) = le[0];
                    *out.add(2 * i + 1) = le[1];
                } else {
                    *out.add(i) = bits as u8;
                }
            }
        }
        d if d.is_int() => {
            let rd = |ptr: *const u8, i: usize| -> i64 {
                match d {
                    Dtype::I64 => (ptr as *const i64).add(i).read_unaligned(),
                    Dtype::I32 => (ptr as *const i32).add(i).read_unaligned() as i64,
                    Dtype::I16 => (ptr as *const i16).add(i).read_unaligned() as i64,
                    Dtype::I8 => *(ptr as *const i8).add(i) as i64,
                    _ => {
                        let byte = *ptr.add(i / 2);
                        let nib = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
                        (((nib as i8) << 4) >> 4) as i64
                    }
                }
            };
            let mut acc = vec![0i64; n];
            for p in 0..batch {
                for i in 0..m {
                    acc.iter_mut().for_each(|x| *x = 0);
                    for l in 0..k {
                        let x = rd(a, p * na + i * k + l);
                        for (j, s) in acc.iter_mut().enumerate() {
                            *s = s.wrapping_add(x.wrapping_mul(rd(b, p * nb + l * n + j)));
                        }
                    }
                    for (j, s) in acc.iter().enumerate() {
                        let v = cast::wrap_int(*s, d);
                        let idx = p * nc + i * n + j;
                        match d {
                            Dtype::I64 => (out as *mut i64).add(idx).write_unaligned(v),
                            Dtype::I32 => (out as *mut i32).add(idx).write_unaligned(v as i32),
                            Dtype::I16 => (out as *mut i16).add(idx).write_unaligned(v as i16),
                            Dtype::I8 => *(out as *mut i8).add(idx) = v as i8,
                            _ => {
                                let byte = out.add(idx / 2);
                                let nib = (v as u8) & 0xF;
                                *byte = if idx % 2 == 0 {
                                    (*byte & 0xF0) | nib
                                } else {
                                    (*byte & 0x0F) | (nib << 4)
                                };
                            }
                        }
                    }
                }
            }
        }
        _ => return Err(Error::Unsupported(format!("matmul at {dt}"))),
    }
    Ok(())
}
