//! The integer GEMM's plain-Rust `unsafe` run directly on small inputs:
//! element reads of every int dtype (unaligned, I4 nibbles at odd
//! offsets), the packing of single and paired k-steps, the blocked driver
//! with the micro-tile write, and the narrowing and zeroing of the output.
//! The compiled kernels cannot run under Miri (`scripts/miri.sh`): the
//! reference kernels of [`crate::kernels::matmul::unsafe_tests`] stand in for them,
//! touching what the compiled ones touch. Operands are raw storage that
//! ends at their last byte and starts one byte past an aligned address.

use super::*;
use crate::kernels::gemm_common::Ukr;
use crate::kernels::matmul::unsafe_tests::{keep, on_pool, ukr, Pmadd, Step, Wrap};

/// `R` rows of the reference kernel at accumulator `T` stepping as `S`,
/// panels `NR` wide, columns `C` (0 whole, 1 one vector, 2 two), A packed
/// `MR` wide.
fn micro<T: Acc, S: Step<T>, const R: usize, const NR: usize, const C: u8, const MR: usize>(
) -> &'static Micro {
    let f: Ukr = ukr::<T, S, R, NR, C, MR>;
    let cols = [Cols::Whole, Cols::One, Cols::Two][C as usize];
    keep(Micro::of_fn(f, cols, R, NR))
}

/// Tiles of 3 rows: the full kernel, one of `E` edge rows, and their
/// one-vector variants for a ragged last column panel.
fn kernels<T: Acc, S: Step<T>, const E: usize, const NR: usize>() -> Kernels<'static> {
    Kernels {
        full: micro::<T, S, 3, NR, 0, 3>(),
        edge: Some(micro::<T, S, E, NR, 0, 3>()),
        ragged: Some(micro::<T, S, 3, NR, 1, 3>()),
        ragged_edge: Some(micro::<T, S, E, NR, 1, 3>()),
    }
}

/// Values of `dt` covering its extremes (I16's −32768 makes the pair
/// kernel's only overflowing sum, `2·(−32768)²`).
fn value(dt: Dtype, i: usize) -> i64 {
    let w = dt.bits();
    match i % 5 {
        0 => i64::MIN >> (64 - w),
        1 => i64::MAX >> (64 - w),
        2 => 0,
        _ => (i as i64 * 7919) % 15 - 7,
    }
}

/// `count` elements of `dt` (I4: nibbles, low first) one byte past the
/// start of the buffer, which ends at their last byte.
fn storage(dt: Dtype, count: usize, of: impl Fn(usize) -> i64) -> Vec<u8> {
    let mut v = vec![0u8; 1];
    match dt {
        Dtype::I4 => {
            let mut bytes = vec![0u8; count.div_ceil(2)];
            for i in 0..count {
                bytes[i / 2] |= ((of(i) as u8) & 0xF) << (4 * (i % 2));
            }
            v.extend(bytes);
        }
        _ => {
            let w = dt.bits() as usize / 8;
            for i in 0..count {
                v.extend(&of(i).to_le_bytes()[..w]);
            }
        }
    }
    v
}

/// The low `bits` of `x`, sign-extended (the dtype's wrap).
fn wrap(x: i64, bits: u32) -> i64 {
    (x << (64 - bits)) >> (64 - bits)
}

/// Element `i` of `dt`'s storage at `out`, sign-extended.
fn element(dt: Dtype, out: &[u8], i: usize) -> i64 {
    match dt {
        Dtype::I4 => wrap(((out[i / 2] >> (4 * (i % 2))) & 0xF) as i64, 4),
        _ => {
            let w = dt.bits() as usize / 8;
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(&out[i * w..(i + 1) * w]);
            wrap(i64::from_le_bytes(b), dt.bits())
        }
    }
}

/// `batch` products of `m × k` by `k × n` through [`batched`] with `ks`,
/// the output narrowed to `dt` as `matmul_int_using` does, against the
/// wrapping i64 sums.
#[allow(clippy::too_many_arguments)]
fn check<T: Acc + IntoI64>(
    ks: Kernels<'static>,
    pair: bool,
    dt: Dtype,
    (batch, m, k, n): (usize, usize, usize, usize),
) {
    let a = storage(dt, batch * m * k, |i| value(dt, i));
    let b = storage(dt, batch * k * n, |i| value(dt, 3 * i + 1));
    let mut acc = vec![T::default(); batch * m * n];
    let (ap, bp, cp) = (
        SendPtr(a.as_ptr().cast_mut()),
        SendPtr(b.as_ptr().cast_mut()),
        SendPtr(acc.as_mut_ptr()),
    );
    on_pool(|| {
        #[allow(clippy::redundant_locals)]
        let (ap, bp, cp) = (ap, bp, cp);
        // SAFETY: the operands' storage starts one byte into `a` and `b`
        // (read unaligned) and ends with them; C is `batch·m·n` elements of
        // `T`; the kernels are of `T` and `pair` (`kernels`).
        unsafe {
            batched(
                ks,
                pair,
                dt,
                ap.0.add(1).cast_const(),
                bp.0.add(1).cast_const(),
                cp.0,
                batch,
                (m, k, n),
                &crate::ctx::ExecCtx::on_this_thread(2),
            )
        }
    });
    let bytes = (batch * m * n * dt.bits() as usize).div_ceil(8);
    let mut out = vec![0u8; bytes];
    let narrowed: Vec<i64> = if dt == Dtype::I64 {
        acc.iter().map(|&x| x.into_i64()).collect()
    } else {
        let vals: Vec<i32> = acc.iter().map(|&x| x.into_i64() as i32).collect();
        // SAFETY: `out` is the storage of `batch·m·n` elements of `dt`,
        // initialised.
        unsafe { narrow(dt, &vals, out.as_mut_ptr()) };
        (0..batch * m * n).map(|i| element(dt, &out, i)).collect()
    };
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let sum = (0..k).fold(0i64, |s, l| {
                    let x = value(dt, (p * m + i) * k + l);
                    let y = value(dt, 3 * ((p * k + l) * n + j) + 1);
                    s.wrapping_add(x.wrapping_mul(y))
                });
                let got = narrowed[(p * m + i) * n + j];
                assert_eq!(
                    got,
                    wrap(sum, dt.bits()),
                    "{dt} pair={pair} item {p} ({i}, {j})"
                );
            }
        }
    }
}

/// The accumulators as i64.
trait IntoI64 {
    fn into_i64(self) -> i64;
}

impl IntoI64 for i32 {
    fn into_i64(self) -> i64 {
        self as i64
    }
}

impl IntoI64 for i64 {
    fn into_i64(self) -> i64 {
        self
    }
}

#[test]
fn every_int_dtype_through_the_blocked_driver() {
    // Three items (I4 items start at odd nibbles), a last row panel of one
    // row, an odd depth (the pair packing's lone last step) and a ragged
    // column panel.
    let dims = (3, 4, 5, 19);
    check::<i64>(kernels::<i64, Wrap, 1, 8>(), false, Dtype::I64, dims);
    for dt in [Dtype::I32, Dtype::I16, Dtype::I8, Dtype::I4] {
        check::<i32>(kernels::<i32, Wrap, 1, 16>(), false, dt, dims);
    }
    for dt in [Dtype::I16, Dtype::I8, Dtype::I4] {
        check::<i32>(kernels::<i32, Pmadd, 1, 16>(), true, dt, dims);
    }
}

#[test]
fn no_depth_writes_zeros_and_keeps_a_last_odd_nibble() {
    for dt in [Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8, Dtype::I4] {
        let count = 7;
        let bytes = (count * dt.bits() as usize).div_ceil(8);
        let mut out = vec![0xffu8; bytes];
        let nowhere = std::ptr::NonNull::<u8>::dangling().as_ptr();
        let kind = if dt == Dtype::I64 {
            IntKernel::I64
        } else {
            IntKernel::I32
        };
        // SAFETY: `k = 0`: the operands are never read; `out` is the
        // initialised storage of the `1 × 7` output.
        unsafe {
            matmul_int_using(
                kind,
                dt,
                nowhere,
                nowhere,
                out.as_mut_ptr(),
                &[1, 0],
                &[0, 7],
                &crate::ctx::ExecCtx::on_this_thread(1),
            )
        }
        .unwrap();
        let zeros = bytes - usize::from(dt == Dtype::I4);
        assert!(out[..zeros].iter().all(|&b| b == 0), "{dt}: {out:?}");
        if dt == Dtype::I4 {
            assert_eq!(out[bytes - 1], 0xf0, "the other nibble of the last byte");
        }
    }
}
