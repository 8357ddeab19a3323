//! Integer matmul through the generated IR kernels (`tc_llvm::kernels::matmul_int`):
//! bit-identical to the reference interpreter at every int dtype, with
//! operands spanning the dtype's whole range (products and sums overflow
//! and wrap), on edge tiles, several K-, row and column blocks, batches,
//! empty dims (raw entry), one thread and the pool; and the raw entry point against an
//! i64 reference with every kernel that applies.
mod util;

use tc_core::ir::{Function, Op};
use tc_core::Dtype;
use tc_llvm::kernels::matmul::set_column_kernels;
use tc_llvm::kernels::matmul_int::{matmul_int, matmul_int_using, pair_available, IntKernel};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::elem::Elem;
use tc_runtime::{cast, Tensor};
use util::*;

const INTS: [Dtype; 5] = [Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8, Dtype::I4];

/// A value of `dt` drawn from its whole range; one in eight is an extreme.
fn value(rng: &mut Rng, dt: Dtype) -> i64 {
    let (lo, hi) = dt.int_range().unwrap();
    let r = rng.next();
    if r.is_multiple_of(8) {
        return [lo, hi, lo + 1, hi - 1, -1][(r >> 8) as usize % 5];
    }
    if dt == Dtype::I64 {
        rng.next() as i64
    } else {
        lo + (rng.next() % (hi - lo + 1) as u64) as i64
    }
}

fn full_range(rng: &mut Rng, dt: Dtype, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let elems: Vec<Elem> = (0..n).map(|_| Elem::I(value(rng, dt))).collect();
    Tensor::from_elems(dt, shape, &elems).unwrap()
}

/// `matmul x y` with `x: batch ++ [M, K]`, `y: batch ++ [K, N]`.
fn matmul_fn(dt: Dtype, batch: &[&str]) -> Function {
    let dims = |last: [&'static str; 2]| -> Vec<&str> {
        let mut d = batch.to_vec();
        d.extend(last);
        d
    };
    let mut b = builder("mm_int");
    let x = b.param("x", tt(dt, &dims(["M", "K"])));
    let y = b.param("y", tt(dt, &dims(["K", "N"])));
    b.returns(tt(dt, &dims(["M", "N"])));
    let r = b.op(Op::Matmul(x, y));
    b.finish(r)
}

fn exact(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    if got.bytes() != want.bytes() {
        for (i, (g, w)) in got.to_elems().iter().zip(want.to_elems()).enumerate() {
            assert_eq!(g, &w, "{what}: element {i} (jit vs interpreter)");
        }
        panic!("{what}: storage bytes differ");
    }
}

/// JIT (one thread and the pool) against the interpreter.
fn check(rng: &mut Rng, dt: Dtype, batch: &[usize], m: usize, k: usize, n: usize) {
    let names: Vec<String> = (0..batch.len()).map(|i| format!("B{i}")).collect();
    let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let f = matmul_fn(dt, &names);
    let shape = |last: [usize; 2]| -> Vec<usize> {
        let mut s = batch.to_vec();
        s.extend(last);
        s
    };
    let args: Vec<Arg> = vec![
        full_range(rng, dt, &shape([m, k])).into(),
        full_range(rng, dt, &shape([k, n])).into(),
    ];
    let want = interp(&f, &args).unwrap();
    for threads in [1, 0] {
        let opts = JitOptions {
            threads,
            ..JitOptions::default()
        };
        let got = jit(&f, &args, opts);
        exact(
            &format!("{dt} {batch:?} ++ {m}x{k}x{n} threads={threads}"),
            &got,
            &want,
        );
    }
}

#[test]
fn every_int_dtype_matches_interpreter() {
    let mut rng = Rng(0x1234_5678);
    // (m, k, n): a single element; odd sizes (edge tiles in both
    // directions, I4 rows that start mid-byte); more than one tile in every
    // dimension (and the pool's row split); several K-blocks with an odd
    // tail (the pair kernel's half-filled last slot); several row blocks;
    // several column blocks.
    let shapes = [
        (1usize, 1usize, 1usize),
        (13, 17, 29),
        (1, 300, 7),
        (70, 65, 130),
        (3, 1101, 35),
        (140, 9, 33),
        (2, 3, 4100),
    ];
    for dt in INTS {
        for &(m, k, n) in &shapes {
            check(&mut rng, dt, &[], m, k, n);
        }
    }
}

#[test]
fn batched_every_int_dtype_matches_interpreter() {
    let mut rng = Rng(0x9abc_def1);
    for dt in INTS {
        // Odd per-entry sizes: I4 entries start mid-byte.
        check(&mut rng, dt, &[3], 13, 17, 29);
        check(&mut rng, dt, &[3], 1, 1, 1);
        // Large enough for the pool: one entry per task.
        check(&mut rng, dt, &[3], 70, 65, 130);
        check(&mut rng, dt, &[2, 3], 5, 7, 9);
    }
}

#[test]
fn empty_dims_agree_with_interpreter() {
    // K = 0 (empty sums: zeros) and empty results. Today the contract
    // refuses a dim variable bound to 0 (`ZeroDim`) for both, so these
    // cannot reach a kernel through a function (the raw entry point handles
    // them, `raw_entry_empty_dims`); should the contract admit them, the
    // JIT must match the interpreter exactly.
    let mut rng = Rng(77);
    for dt in INTS {
        for (batch, m, k, n) in [
            (&[][..], 5usize, 0usize, 7usize),
            (&[3][..], 3, 0, 1),
            (&[][..], 0, 4, 5),
            (&[][..], 4, 5, 0),
            (&[0][..], 4, 5, 6),
        ] {
            let names: Vec<&str> = ["B0"][..batch.len()].to_vec();
            let f = matmul_fn(dt, &names);
            let shape = |last: [usize; 2]| -> Vec<usize> {
                let mut s = batch.to_vec();
                s.extend(last);
                s
            };
            let args: Vec<Arg> = vec![
                full_range(&mut rng, dt, &shape([m, k])).into(),
                full_range(&mut rng, dt, &shape([k, n])).into(),
            ];
            let what = format!("{dt} {batch:?} ++ {m}x{k}x{n}");
            match interp(&f, &args) {
                Ok(want) => {
                    for threads in [1, 0] {
                        let opts = JitOptions {
                            threads,
                            ..JitOptions::default()
                        };
                        exact(&what, &jit(&f, &args, opts), &want);
                    }
                }
                Err(e) => {
                    let j = jit_with(JitOptions::default());
                    assert!(
                        j.call(&f, &args, &|_| None).is_err(),
                        "{what}: the interpreter refuses ({e}), the JIT accepts"
                    );
                }
            }
        }
    }
}

#[test]
fn raw_entry_empty_dims() {
    for dt in INTS {
        for kind in kernels(dt) {
            for (batch, m, k, n) in [
                (1usize, 5usize, 0usize, 7usize),
                (3, 3, 0, 1),
                (1, 0, 4, 5),
                (1, 4, 5, 0),
                (0, 4, 5, 6),
            ] {
                let a = vec![0x77u8; dt.storage_bytes(batch * m * k)];
                let b = vec![0x77u8; dt.storage_bytes(batch * k * n)];
                let bytes = dt.storage_bytes(batch * m * n);
                let mut out = vec![0xA5u8; bytes + 1];
                // SAFETY: the buffers hold the shapes' storage.
                unsafe {
                    matmul_int_using(
                        kind,
                        dt,
                        a.as_ptr(),
                        b.as_ptr(),
                        out.as_mut_ptr(),
                        &[batch, m, k],
                        &[batch, k, n],
                        &tc_llvm::ctx::ExecCtx::on_this_thread(0),
                    )
                    .unwrap();
                }
                let what = format!("{dt} {kind:?} {batch}x{m}x{k}x{n}");
                for i in 0..batch * m * n {
                    assert_eq!(read(dt, &out, i), 0, "{what}: element {i}");
                }
                assert_eq!(out[bytes], 0xA5, "{what}: byte after the output");
                if batch * m * n == 0 {
                    assert!(
                        out.iter().all(|&x| x == 0xA5),
                        "{what}: wrote to an empty output"
                    );
                } else if dt == Dtype::I4 && (batch * m * n) % 2 == 1 {
                    assert_eq!(out[bytes - 1] >> 4, 0xA, "{what}: spare nibble");
                }
            }
        }
    }
}

/// Storage of a random `len`-element operand of `dt` (every bit pattern).
fn raw(rng: &mut Rng, dt: Dtype, len: usize) -> Vec<u8> {
    (0..dt.storage_bytes(len))
        .map(|_| rng.next() as u8)
        .collect()
}

fn read(dt: Dtype, s: &[u8], i: usize) -> i64 {
    match dt {
        Dtype::I64 => i64::from_le_bytes(s[8 * i..8 * i + 8].try_into().unwrap()),
        Dtype::I32 => i32::from_le_bytes(s[4 * i..4 * i + 4].try_into().unwrap()) as i64,
        Dtype::I16 => i16::from_le_bytes(s[2 * i..2 * i + 2].try_into().unwrap()) as i64,
        Dtype::I8 => s[i] as i8 as i64,
        _ => {
            let nib = (s[i / 2] >> (4 * (i % 2))) & 0xF;
            (((nib << 4) as i8) >> 4) as i64
        }
    }
}

/// The interpreter's definition: i64 wrapping accumulation, wrapped to `dt`.
fn reference(
    dt: Dtype,
    a: &[u8],
    b: &[u8],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<i64> {
    let mut out = Vec::with_capacity(batch * m * n);
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut s = 0i64;
                for l in 0..k {
                    let x = read(dt, a, p * m * k + i * k + l);
                    let y = read(dt, b, p * k * n + l * n + j);
                    s = s.wrapping_add(x.wrapping_mul(y));
                }
                out.push(cast::wrap_int(s, dt));
            }
        }
    }
    out
}

fn kernels(dt: Dtype) -> Vec<IntKernel> {
    match dt {
        Dtype::I64 => vec![IntKernel::I64],
        Dtype::I32 => vec![IntKernel::I32],
        _ if pair_available() => vec![IntKernel::I32, IntKernel::Pair16],
        _ => vec![IntKernel::I32],
    }
}

#[test]
fn raw_entry_every_kernel_matches_reference() {
    let mut rng = Rng(4242);
    let cases = [
        (1usize, 1usize, 1usize, 1usize),
        (1, 13, 17, 29),
        (3, 13, 17, 29),
        (1, 27, 1025, 33),
        (2, 70, 65, 130),
        (1, 1, 2, 3),
        // Both masked forms of the ragged column panel (fewer or more than
        // half a panel of 32 columns, i64: 16) for every kernel, with edge
        // row panels.
        (1, 40, 33, 47),
        (1, 15, 9, 56),
        (2, 27, 70, 24),
    ];
    for dt in INTS {
        for &(batch, m, k, n) in &cases {
            let a = raw(&mut rng, dt, batch * m * k);
            let b = raw(&mut rng, dt, batch * k * n);
            let want = reference(dt, &a, &b, batch, m, k, n);
            let bytes = dt.storage_bytes(batch * m * n);
            // Ragged column panels straight into C by the masked kernels,
            // and through the scratch tile (the switch is process-wide;
            // both ways are exact, so other tests here are unaffected).
            for (kind, cols) in kernels(dt)
                .into_iter()
                .flat_map(|k| [(k, true), (k, false)])
            {
                set_column_kernels(cols);
                for threads in [1, 0] {
                    // One byte of offset: an unaligned output; a sentinel
                    // byte after it must survive (I4 with an odd count
                    // keeps the last byte's high nibble).
                    let mut out = vec![0xA5u8; bytes + 2];
                    let (sa, sb) = ([batch, m, k], [batch, k, n]);
                    // SAFETY: a, b hold the operands; out[1..] the result.
                    unsafe {
                        matmul_int_using(
                            kind,
                            dt,
                            a.as_ptr(),
                            b.as_ptr(),
                            out.as_mut_ptr().add(1),
                            &sa,
                            &sb,
                            &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
                        )
                        .unwrap();
                    }
                    let what =
                        format!("{dt} {kind:?} {batch}x{m}x{k}x{n} threads={threads} cols={cols}");
                    for (i, w) in want.iter().enumerate() {
                        assert_eq!(read(dt, &out[1..], i), *w, "{what}: element {i}");
                    }
                    assert_eq!(out[0], 0xA5, "{what}: byte before the output");
                    assert_eq!(out[bytes + 1], 0xA5, "{what}: byte after the output");
                    if dt == Dtype::I4 && (batch * m * n) % 2 == 1 {
                        assert_eq!(out[bytes] >> 4, 0xA, "{what}: spare nibble");
                    }
                }
            }
        }
    }
}

#[test]
fn pair_kernel_extremes_wrap_like_i64() {
    // Every operand at an extreme of I16/I8/I4: the pair kernel's i32 lane
    // sums a₀b₀ + a₁b₁ overflow (2·(−32768)² = 2³¹); the result must still
    // equal the i64 sum wrapped to the dtype.
    for dt in [Dtype::I16, Dtype::I8, Dtype::I4] {
        let (lo, hi) = dt.int_range().unwrap();
        for (x, y) in [(lo, lo), (lo, hi), (hi, hi), (hi, lo)] {
            for k in [1usize, 2, 3, 31, 64, 513] {
                let (m, n) = (3usize, 17usize);
                let a = Tensor::from_elems(dt, &[m, k], &vec![Elem::I(x); m * k]).unwrap();
                let b = Tensor::from_elems(dt, &[k, n], &vec![Elem::I(y); k * n]).unwrap();
                let want = reference(dt, a.bytes(), b.bytes(), 1, m, k, n);
                for kind in kernels(dt) {
                    let mut out = vec![0u8; dt.storage_bytes(m * n)];
                    // SAFETY: the tensors hold the operands, out the result.
                    unsafe {
                        matmul_int_using(
                            kind,
                            dt,
                            a.bytes().as_ptr(),
                            b.bytes().as_ptr(),
                            out.as_mut_ptr(),
                            &[m, k],
                            &[k, n],
                            &tc_llvm::ctx::ExecCtx::on_this_thread(1),
                        )
                        .unwrap();
                    }
                    for (i, w) in want.iter().enumerate() {
                        assert_eq!(
                            read(dt, &out, i),
                            *w,
                            "{dt} {kind:?} {x}·{y} k={k}: element {i}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn malformed_calls_are_errors_not_panics() {
    let buf = [0u8; 64];
    let mut out = [0u8; 64];
    let p = buf.as_ptr();
    let o = out.as_mut_ptr();
    // SAFETY: every call is rejected before touching memory.
    unsafe {
        assert!(matmul_int(
            Dtype::I32,
            p,
            p,
            o,
            &[2],
            &[2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int(
            Dtype::I32,
            p,
            p,
            o,
            &[2, 3],
            &[2, 3, 4],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int(
            Dtype::I32,
            p,
            p,
            o,
            &[2, 3],
            &[4, 2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int(
            Dtype::I32,
            p,
            p,
            o,
            &[2, 1, 3],
            &[3, 3, 1],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int(
            Dtype::F32,
            p,
            p,
            o,
            &[2, 2],
            &[2, 2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int(
            Dtype::Bool,
            p,
            p,
            o,
            &[2, 2],
            &[2, 2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int_using(
            IntKernel::I32,
            Dtype::I64,
            p,
            p,
            o,
            &[2, 2],
            &[2, 2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int_using(
            IntKernel::I64,
            Dtype::I32,
            p,
            p,
            o,
            &[2, 2],
            &[2, 2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
        assert!(matmul_int_using(
            IntKernel::Pair16,
            Dtype::I32,
            p,
            p,
            o,
            &[2, 2],
            &[2, 2],
            &tc_llvm::ctx::ExecCtx::on_this_thread(1)
        )
        .is_err());
    }
    assert!(out.iter().all(|&x| x == 0));
}

#[test]
fn kernels_are_vectorized() {
    use tc_llvm::kernels::matmul_int::ukernel_int_ir;
    let h = tc_llvm::jit::host();
    if !h.has_avx512() {
        eprintln!("no AVX-512 on this host: instruction check skipped");
        return;
    }
    // As the kernels are compiled (`Build::Unrolled`).
    let asm = |k, vw| {
        tc_llvm::jit::assembly_built(&ukernel_int_ir(k, vw, 13), tc_llvm::jit::Build::Unrolled)
            .unwrap()
    };
    let i32k = asm(IntKernel::I32, 16);
    assert!(i32k.contains("vpmulld") && i32k.contains("zmm"), "{i32k}");
    if h.features.split(',').any(|f| f == "+avx512dq") {
        let i64k = asm(IntKernel::I64, 8);
        assert!(i64k.contains("vpmullq") && i64k.contains("zmm"), "{i64k}");
    }
    if h.features.split(',').any(|f| f == "+avx512bw") {
        let pk = asm(IntKernel::Pair16, 16);
        assert!(
            (pk.contains("vpmaddwd") || pk.contains("vpdpwssd")) && pk.contains("zmm"),
            "{pk}"
        );
    }
}

/// docs/syntax.md §7b: `matmul_i32 x w` with `x: [B, S, K]` and one
/// weight `w: [K, N]` broadcast over the batch (a linear layer's form,
/// one folded product), or `w: [B, K, N]` (contiguous, batched).
fn matmul_i32_fn(broadcast: bool) -> Function {
    use tc_core::Dim;
    let mut b = builder("mm_i32");
    let x = b.param("x", tt(Dtype::I8, &["B", "S", "K"]));
    let w = if broadcast {
        let w = b.param("w", tt(Dtype::I8, &["K", "N"]));
        b.op(Op::Broadcast(
            vec![Dim::var("B"), Dim::var("K"), Dim::var("N")],
            w,
        ))
    } else {
        b.param("w", tt(Dtype::I8, &["B", "K", "N"]))
    };
    b.returns(tt(Dtype::I32, &["B", "S", "N"]));
    let r = b.op(Op::MatmulI32(x, w));
    b.finish(r)
}

/// `matmul_i32` bit for bit with the interpreter (the I32 matmul of the
/// widened operands), with operands over all of I8 (-128 included, so
/// products reach 2¹⁴ and long sums pass 2²⁴), on the AMX-INT8 tiles
/// where the host has them and on the integer GEMM's kernels with the
/// tiles switched off: row counts below, at and past a tile's 16 and a
/// group's 32, ragged column panels, k of one tile, several, and past a
/// K-block of the tiles' packing (1024), and k that fills no whole tile
/// row (the tiles then run over zero steps up to the next one: 5, 70,
/// 368, 1100). Each weight is called twice: the second call takes the
/// packing its first kept.
#[test]
fn matmul_i32_matches_interpreter() {
    use tc_llvm::kernels::matmul::{i8_amx_available, i8_tiled, set_bf16_amx};
    let mut rng = Rng(0x5eed_1832);
    let shapes = [
        (1usize, 2usize, 64usize, 16usize),
        (2, 9, 128, 45),
        (1, 33, 384, 100),
        (3, 16, 1088, 32),
        (1, 70, 1536, 33),
        (2, 5, 70, 19),
        (1, 1, 64, 7),
        (1, 33, 368, 100),
        (2, 9, 1100, 45),
        (1, 17, 5, 40),
    ];
    for tiles in [true, false] {
        set_bf16_amx(tiles);
        for broadcast in [true, false] {
            let f = matmul_i32_fn(broadcast);
            for &(b, s, k, n) in &shapes {
                let w_shape = if broadcast { vec![k, n] } else { vec![b, k, n] };
                let args: Vec<Arg> = vec![
                    full_range(&mut rng, Dtype::I8, &[b, s, k]).into(),
                    full_range(&mut rng, Dtype::I8, &w_shape).into(),
                ];
                let want = interp(&f, &args).unwrap();
                for threads in [1, 0] {
                    let j = util::jit_with(JitOptions {
                        threads,
                        ..JitOptions::default()
                    });
                    let before = i8_tiled();
                    for call in 0..2 {
                        let got = j.call(&f, &args, &|_| None).expect("jit run");
                        exact(
                            &format!(
                                "{b}x{s}x{k}x{n} broadcast={broadcast} tiles={tiles} threads={threads} call {call}"
                            ),
                            &got,
                            &want,
                        );
                    }
                    let fits = broadcast || b == 1;
                    if tiles && i8_amx_available() && fits && b * s >= 2 {
                        assert!(i8_tiled() > before, "{b}x{s}x{k}x{n}: not on the tiles");
                    }
                }
            }
        }
    }
    set_bf16_amx(true);
}

/// docs/syntax.md §7c: `dq_matmul x w scale outliers` with `x: [B, S, C]`
/// (`C = K + J` at run time), `w: [K, N]`, `scale: [N]`, `outliers: [J, N]`.
fn dq_matmul_fn() -> Function {
    let mut b = builder("dq_mm");
    let x = b.param("x", tt(Dtype::F32, &["B", "S", "C"]));
    let w = b.param("w", tt(Dtype::I8, &["K", "N"]));
    let scale = b.param("scale", tt(Dtype::F32, &["N"]));
    let outliers = b.param("outliers", tt(Dtype::F32, &["J", "N"]));
    b.returns(tt(Dtype::F32, &["B", "S", "N"]));
    let r = b.op(Op::DqMatmul {
        x,
        w,
        scale,
        outliers,
    });
    b.finish(r)
}

/// Activations as an encoder's: most channels within ±4, the `j` last
/// ones 5–20× that, and rows that test the scale's edges: all zeros, one
/// with a NaN, one with an infinity, one of subnormals and −0, one whose
/// quotients fall on ties (the scale 1: `max |x| = 127`).
fn dq_activations(rng: &mut Rng, rows: usize, k: usize, j: usize) -> Vec<f32> {
    let c = k + j;
    let mut x: Vec<f32> = (0..rows * c)
        .map(|i| {
            let v = (rng.unit() - 0.5) * 8.0;
            if i % c >= k {
                v * (5.0 + 15.0 * rng.unit())
            } else {
                v
            }
        })
        .collect();
    let specials: [&dyn Fn(usize) -> f32; 5] = [
        &|_| 0.0,
        &|l| if l == 3 { f32::NAN } else { 1.0 },
        &|l| if l == 1 { f32::NEG_INFINITY } else { -2.0 },
        &|l| {
            if l % 2 == 0 {
                -0.0
            } else {
                f32::from_bits(l as u32 + 1)
            }
        },
        &|l| if l == 0 { 127.0 } else { (l % 9) as f32 - 4.5 },
    ];
    for (s, f) in specials.iter().enumerate() {
        let r = (s * 7 + 3) % rows;
        for l in 0..k {
            x[r * c + l] = f(l);
        }
    }
    x
}

/// `dq_matmul` bit for bit with the interpreter's literal definition, on
/// the AMX-INT8 tiles (quantized into the tile packing, finished in the
/// tiles' writer) where the host has them and on the integer GEMM with
/// the tiles off: row counts below, at and past a tile's 16 and a
/// group's 32, ragged column panels, k of no whole tile row (5, 70, 368)
/// and past a K-block (1100), one outlier channel to 16, one
/// thread and the pool, in every JIT mode and shape-generic; each weight
/// called twice (the second call takes the packing the first kept). Rows with a NaN, an infinity,
/// subnormals, zeros and ties included.
#[test]
fn dq_matmul_matches_interpreter() {
    use tc_llvm::kernels::matmul::{i8_amx_available, i8_tiled, set_bf16_amx};
    let mut rng = Rng(0x5eed_d0a8);
    let shapes = [
        (1usize, 8usize, 64usize, 1usize, 16usize),
        (2, 9, 128, 16, 45),
        (1, 33, 368, 16, 100),
        (4, 16, 384, 16, 64),
        (1, 70, 1100, 3, 33),
        (2, 5, 70, 1, 19),
        (1, 17, 5, 2, 40),
        (1, 1, 64, 16, 7),
    ];
    let f = dq_matmul_fn();
    for tiles in [true, false] {
        set_bf16_amx(tiles);
        for &(b, s, k, j, n) in &shapes {
            let x = dq_activations(&mut rng, b * s, k, j);
            let scale: Vec<f32> = (0..n)
                .map(|i| match i % 11 {
                    0 => 0.0,
                    1 => -0.01,
                    _ => rng.unit() * 0.05,
                })
                .collect();
            let outliers: Vec<f32> = (0..j * n).map(|_| rng.unit() - 0.5).collect();
            let args: Vec<Arg> = vec![
                Tensor::from_vec(&[b, s, k + j], x).unwrap().into(),
                full_range(&mut rng, Dtype::I8, &[k, n]).into(),
                Tensor::from_vec(&[n], scale).unwrap().into(),
                Tensor::from_vec(&[j, n], outliers).unwrap().into(),
            ];
            let want = interp(&f, &args).unwrap();
            let what = format!("dq_matmul {b}x{s}x{k}+{j}x{n} tiles={tiles}");
            assert_every_mode(&what, &f, &args, &generic_jit());
            for threads in [1, 0] {
                let jit = util::jit_with(JitOptions {
                    threads,
                    ..JitOptions::default()
                });
                let before = i8_tiled();
                for call in 0..2 {
                    let got = jit.call(&f, &args, &|_| None).expect("jit run");
                    exact(
                        &format!("{b}x{s}x{k}+{j}x{n} tiles={tiles} threads={threads} call {call}"),
                        &got,
                        &want,
                    );
                }
                assert_eq!(jit.stats().fallbacks, 0, "{:?}", jit.last_fallback());
                if tiles && i8_amx_available() && b * s >= 2 {
                    assert!(i8_tiled() > before, "{b}x{s}x{k}+{j}x{n}: not on the tiles");
                }
            }
        }
    }
    set_bf16_amx(true);
}
