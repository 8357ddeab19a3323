//! Products in the interpreter's order, for [`crate::JitOptions::deterministic`]:
//! every output element is `Σ_l a(i, l) · b(l, j)` accumulated in f32 from
//! +0 in order of `l`, one rounded multiply and one rounded add per term
//! (no FMA), exactly as `tc_runtime::interp::denote::matmul` and
//! `denote::conv` fold them; then the canonical NaN and one rounding into
//! a narrow dtype. So a deterministic product is the interpreter's bit for
//! bit, whatever the shapes, strides and thread count (Section 4 §5.4
//! leaves the order free, §6; this mode fixes it to the reference's).
//!
//! The loop nest keeps that order and still vectorizes: for each output
//! row, each term `l` is added to the whole row at once (`acc[j] +=
//! a(i, l) · b(l, j)` over `j`), so each lane carries one element's own
//! sum. Rows are independent, so threads split rows, never a sum.

use rayon::prelude::*;
use tc_core::Dtype;

use super::{batch_offset, canonical_nans, narrow, strided_dims, widen, View};
use crate::ctx::ExecCtx;
use crate::kernels::gemm_common::{contiguous_strides, matmul_dims, SendPtr};
use crate::options::Error;

/// Multiply-adds below which a product runs on the calling thread alone.
const PAR_MIN_MACS: usize = 1 << 20;

/// `C = A · B` for `A` (`m × k`) and `B` (`k × n`) read through their
/// views and `C` contiguous (`m × n`), every element summed in order.
///
/// # Safety
/// `a` must be valid for reads of every `(i, l)` with `i < m`, `l < k`,
/// `b` of every `(l, j)` with `l < k`, `j < n`, and `c` for writes of
/// `m·n` floats that overlap neither.
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
pub(crate) unsafe fn sgemm_in_order(
    m: usize,
    n: usize,
    k: usize,
    a: &View,
    b: &View,
    c: *mut f32,
    ctx: &ExecCtx,
) -> Result<(), Error> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    // A right operand with a column stride is copied into rows once: the
    // row update below reads each row of B `m` times.
    let copied;
    let rows = if b.cs == 1 {
        RowsOf::Strided(b)
    } else {
        let mut buf = tc_runtime::alloc::filled(k.saturating_mul(n), 0f32)
            .map_err(|e| Error::Unsupported(e.to_string()))?;
        for l in 0..k {
            for j in 0..n {
                // SAFETY: `(l, j)` is inside B's extents (the contract).
                buf[l * n + j] = unsafe { b.at(l, j) };
            }
        }
        copied = buf;
        RowsOf::Dense(&copied, n)
    };
    let cp = SendPtr(c);
    let row = |i: usize| {
        let cp = cp;
        // SAFETY: row `i < m` of C is its own `n` floats at `i·n`, inside
        // the `m·n` the contract makes writable; each call writes one row.
        let out = unsafe { std::slice::from_raw_parts_mut(cp.0.add(i * n), n) };
        out.fill(0.0);
        for l in 0..k {
            // SAFETY: `(i, l)` is inside A's extents (the contract).
            let x = unsafe { a.at(i, l) };
            // SAFETY: `l < k`, as `rows.get` requires.
            add_scaled(out, x, unsafe { rows.get(l, n) });
        }
    };
    if ctx.threads != 1 && m > 1 && m.saturating_mul(n).saturating_mul(k) >= PAR_MIN_MACS {
        (0..m).into_par_iter().for_each(row);
    } else {
        (0..m).for_each(row);
    }
    Ok(())
}

/// The rows of B, read in place or from a dense copy.
enum RowsOf<'a> {
    Strided(&'a View),
    Dense(&'a [f32], usize),
}

impl RowsOf<'_> {
    /// Row `l` of B, `n` floats.
    ///
    /// # Safety
    /// `l < k`, and for a view, the contract of [`sgemm_in_order`].
    // SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
    unsafe fn get(&self, l: usize, n: usize) -> &[f32] {
        match self {
            // SAFETY: row `l` of a view of column stride 1 is `n`
            // consecutive readable floats (the contract).
            RowsOf::Strided(b) => unsafe { std::slice::from_raw_parts(b.ptr.add(l * b.rs), n) },
            RowsOf::Dense(buf, w) => &buf[l * w..l * w + n],
        }
    }
}

/// `acc[j] += x · b[j]`: one rounded multiply, one rounded add (Rust never
/// contracts them into an FMA).
#[inline]
fn add_scaled(acc: &mut [f32], x: f32, b: &[f32]) {
    for (s, &y) in acc.iter_mut().zip(b) {
        *s += x * y;
    }
}

/// [`super::matmul_strided`] in the interpreter's order: the same operands,
/// shapes and errors, the result the interpreter's bit for bit. Integer
/// products are exact in every order (wrapping sums) and run as there.
///
/// # Safety
/// [`super::matmul_strided`]'s contract.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
pub unsafe fn matmul_strided_in_order(
    dt: Dtype,
    a: *const u8,
    st_a: &[isize],
    b: *const u8,
    st_b: &[isize],
    out: *mut u8,
    sa: &[usize],
    sb: &[usize],
    ctx: &ExecCtx,
) -> Result<(), Error> {
    if !dt.is_float() {
        // SAFETY: the contract, passed on unchanged.
        return unsafe { super::matmul_strided(dt, a, st_a, b, st_b, out, sa, sb, ctx, None) };
    }
    let (batch, m, k, n) = strided_dims(sa, sb, st_a, st_b)?;
    if batch * m * n == 0 {
        return Ok(());
    }
    let total = batch * m * n;
    if dt == Dtype::F32 {
        // SAFETY: the contract, at f32.
        unsafe { items(a.cast(), st_a, b.cast(), st_b, out.cast(), (sa, sb), ctx) }?;
        // SAFETY: `out` holds the output's `batch·m·n` f32s, just written.
        canonical_nans(unsafe { std::slice::from_raw_parts_mut(out.cast::<f32>(), total) });
        return Ok(());
    }
    let (ca, cb) = (contiguous_strides(sa), contiguous_strides(sb));
    // A view (a weight broadcast over the batch) is copied in order first.
    let size = dt.bits() as usize / 8;
    let copy = |p, sh, st: &[isize], c: &[isize]| -> Result<Option<Vec<u64>>, Error> {
        if st == c {
            return Ok(None);
        }
        // SAFETY: every element the strides address is readable (the
        // contract).
        Ok(Some(unsafe { super::gather_contiguous(p, sh, st, size)? }))
    };
    let (a2, b2) = (copy(a, sa, st_a, &ca)?, copy(b, sb, st_b, &cb)?);
    let a = a2.as_ref().map_or(a, |v| v.as_ptr().cast());
    let b = b2.as_ref().map_or(b, |v| v.as_ptr().cast());
    // Narrow floats: widened exactly (every value is an f32), summed as
    // f32, rounded once at the end, as the interpreter does.
    // SAFETY: contiguous operands (or their copies): `batch·m·k` and
    // `batch·k·n` elements.
    let (af, bf) = unsafe { (widen(dt, a, batch * m * k)?, widen(dt, b, batch * k * n)?) };
    let mut cf = tc_runtime::alloc::filled(total, 0f32)?;
    // SAFETY: the widened copies have exactly the contiguous operands'
    // elements, and `cf` the output's.
    unsafe {
        items(
            af.as_ptr(),
            &ca,
            bf.as_ptr(),
            &cb,
            cf.as_mut_ptr(),
            (sa, sb),
            ctx,
        )
    }?;
    canonical_nans(&mut cf);
    // SAFETY: `out` holds the output's `total` elements of `dt` (the contract).
    unsafe { narrow(dt, &cf, out) };
    Ok(())
}

/// Every batch item of an f32 product, in order, into contiguous `c`.
///
/// # Safety
/// [`super::matmul_strided`]'s contract at f32, with `(sa, sb)` a matmul's
/// shapes (`matmul_dims`) and the strides checked against them.
#[allow(clippy::too_many_arguments)]
// SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
unsafe fn items(
    a: *const f32,
    st_a: &[isize],
    b: *const f32,
    st_b: &[isize],
    c: *mut f32,
    (sa, sb): (&[usize], &[usize]),
    ctx: &ExecCtx,
) -> Result<(), Error> {
    let (batch, m, k, n) = matmul_dims(sa, sb)?;
    let r = sa.len();
    let offs = |p: usize, st: &[isize]| batch_offset(p, sa, st);
    for p in 0..batch {
        let va = View::new(
            // SAFETY: item `p < batch` of A starts `offs(p, st_a)` elements
            // in, inside what the contract makes readable.
            unsafe { a.offset(offs(p, st_a)) },
            st_a[r - 2] as usize,
            st_a[r - 1] as usize,
        );
        let vb = View::new(
            // SAFETY: as for A.
            unsafe { b.offset(offs(p, st_b)) },
            st_b[r - 2] as usize,
            st_b[r - 1] as usize,
        );
        // SAFETY: the views address item `p` of each operand; item `p` of
        // C is its `m·n` floats at `p·m·n`, written by this call alone.
        unsafe { sgemm_in_order(m, n, k, &va, &vb, c.add(p * m * n), ctx) }?;
    }
    Ok(())
}
