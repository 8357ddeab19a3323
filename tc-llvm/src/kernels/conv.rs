//! Convolution in the JIT (docs/syntax.md §12c), a host step: per batch
//! element and channel group, the input's windows are unfolded into a
//! `[C/groups · K…, S'…]` matrix (im2col, padding as zeros) and multiplied
//! by the group's `[O/groups, C/groups · K…]` weights with the f32 GEMM
//! ([`crate::kernels::matmul::sgemm`]: packing, the micro-kernel, the pool split).
//!
//! Numerics: the GEMM sums the same terms as the reference denotation
//! (`tc_runtime::interp::denote::conv`, Section 4 style) in another order,
//! so a float convolution is within the matmul's documented tolerance; the
//! result is rounded once into the dtype with the interpreter's own `fl`,
//! and a NaN is the canonical one. In deterministic mode the unfolded
//! matrix is multiplied in the denotation's order instead
//! (`matmul::sgemm_in_order`: its rows are the denotation's `(c, k…)`
//! terms, the padding's zeros included), bit-identical. Integer
//! convolutions run the denotation itself (bit-identical).
//!
//! Memory: the unfolded matrix is built for a tile of output positions at
//! a time, at most [`TILE_FLOATS`] floats, so a large image costs a bounded
//! scratch buffer rather than `K…` copies of itself.

use tc_core::concrete::{self, Operand};
use tc_core::ir::Window;
use tc_core::Dtype;
use tc_runtime::elem::Elem;
use tc_runtime::interp::denote;
use tc_runtime::{Error, Tensor};

use crate::ctx::ExecCtx;
use crate::kernels::matmul::{canonical_nans, sgemm, sgemm_in_order, View};

/// The unfolded matrix's tile size, in floats (16 MiB).
pub const TILE_FLOATS: usize = 1 << 22;

/// The sizes of one convolution, from the concrete rule's shapes.
struct Geometry {
    /// Batch, input channels per group, output channels per group.
    n: usize,
    cg: usize,
    og: usize,
    /// Spatial input extents, kernel extents, output extents.
    sin: Vec<usize>,
    kern: Vec<usize>,
    sout: Vec<usize>,
    /// Products: input positions, kernel taps, output positions.
    in_vol: usize,
    taps: usize,
    out_vol: usize,
}

fn volume(s: &[usize]) -> Result<usize, Error> {
    Ok(tc_core::size::numel(s)?)
}

/// `conv[window, groups] x, w` (the operands as the denotation takes them).
///
/// `in_order`: each output element's terms summed in the denotation's
/// order (`crate::kernels::matmul::sgemm_in_order` on the unfolded matrix, whose
/// rows are the denotation's `(c, k…)` in row-major order, the padding's
/// zero terms included), so the result is the interpreter's bit for bit
/// (`JitOptions::deterministic`).
pub fn conv(
    window: &Window,
    groups: usize,
    (x, w): (&Tensor, &Tensor),
    ctx: &ExecCtx,
    in_order: bool,
) -> Result<Tensor, Error> {
    let (dt, out_shape) = concrete::conv(window, groups, opd(x), opd(w))?;
    if !dt.is_float() {
        return denote::conv(window, groups, x, w);
    }
    let total = volume(&out_shape)?;
    if total == 0 {
        // Nothing to compute, and no loop may run over the other extents of
        // an empty result: a batch of 2^63 − 1 empty items would take
        // forever (fuzz seed 114294977020).
        return finish(dt, &out_shape, Vec::new());
    }
    let (sx, sw) = (x.shape(), w.shape());
    let g = Geometry {
        n: sx[0],
        cg: sw[1],
        og: sw[0] / groups,
        in_vol: tc_core::size::extent(&sx[2..]),
        taps: tc_core::size::extent(&sw[2..]),
        out_vol: tc_core::size::extent(&out_shape[2..]),
        sin: sx[2..].to_vec(),
        kern: sw[2..].to_vec(),
        sout: out_shape[2..].to_vec(),
    };
    let xs = floats(x)?;
    let ws = floats(w)?;
    let mut out = vec![0f32; total];
    for b in 0..g.n {
        for grp in 0..groups {
            group(
                &g,
                window,
                (b, grp, groups),
                (&xs, &ws),
                &mut out,
                (ctx, in_order),
            )?;
        }
    }
    finish(dt, &out_shape, out)
}

fn opd(t: &Tensor) -> Operand<'_> {
    Operand {
        dtype: t.dtype(),
        shape: t.shape(),
    }
}

/// The elements of a float tensor as f32 (exact: every float dtype's values
/// are f32 values).
fn floats(t: &Tensor) -> Result<Vec<f32>, Error> {
    if t.dtype() == Dtype::F32 {
        return Ok(t.as_slice::<f32>()?.to_vec());
    }
    t.try_to_elems()?
        .into_iter()
        .map(|e| match e {
            Elem::F(v) => Ok(v),
            e => Err(Error::malformed(format!(
                "conv: element {e:?} of a float tensor"
            ))),
        })
        .collect()
}

/// One batch element's channel group: tiles of output positions, each
/// unfolded then multiplied into `out`.
fn group(
    g: &Geometry,
    window: &Window,
    (b, grp, groups): (usize, usize, usize),
    (xs, ws): (&[f32], &[f32]),
    out: &mut [f32],
    (ctx, in_order): (&ExecCtx, bool),
) -> Result<(), Error> {
    // An empty output part computes nothing; past this point the output
    // (`og·out_vol ≥ 1` per group) and, when `cg ≥ 1`, the input and the
    // weights are non-empty, so every product below is within their
    // checked element counts (the extents alone may be huge for an empty
    // operand, `tc_core::size::extent`).
    if g.og == 0 || g.out_vol == 0 {
        return Ok(());
    }
    let rows = g.cg * g.taps;
    let c_total = g.cg * groups;
    let x_base = (b * c_total + grp * g.cg) * g.in_vol;
    let xg = &xs[x_base..x_base + g.cg * g.in_vol];
    let wg = &ws[grp * g.og * rows..(grp + 1) * g.og * rows];
    let o_total = g.og * groups;
    let out_base = (b * o_total + grp * g.og) * g.out_vol;
    let og_out = &mut out[out_base..out_base + g.og * g.out_vol];
    let tile = (TILE_FLOATS / rows.max(1)).clamp(1, g.out_vol);
    let mut cols = vec![0f32; rows * tile];
    let mut ctile = if tile < g.out_vol {
        vec![0f32; g.og * tile]
    } else {
        Vec::new()
    };
    let mut start = 0;
    while start < g.out_vol {
        let width = tile.min(g.out_vol - start);
        unfold(g, window, xg, start, width, &mut cols[..rows * width]);
        let direct = width == g.out_vol;
        let c: &mut [f32] = if direct {
            og_out
        } else {
            &mut ctile[..g.og * width]
        };
        let (va, vb) = (
            View::new(wg.as_ptr(), rows, 1),
            View::new(cols.as_ptr(), width, 1),
        );
        // SAFETY: A = `wg` (`og × rows`), B = `cols` (`rows × width`), both
        // sliced to exactly those extents; C = `c`, `og·width` floats of a
        // distinct `&mut`, overlapping neither (`sgemm`'s contract, and
        // `sgemm_in_order`'s, the same).
        unsafe {
            if in_order {
                sgemm_in_order(g.og, width, rows, &va, &vb, c.as_mut_ptr(), ctx)
            } else {
                sgemm(g.og, width, rows, va, vb, c.as_mut_ptr(), ctx)
            }
        }
        .map_err(|e| Error::op("conv", e.to_string()))?;
        if !direct {
            for o in 0..g.og {
                let dst = o * g.out_vol + start;
                og_out[dst..dst + width].copy_from_slice(&ctile[o * width..(o + 1) * width]);
            }
        }
        start += width;
    }
    Ok(())
}

/// im2col for output positions `start..start + width` (row-major over the
/// output's spatial extents): row `(c, k…)`, column `p` holds
/// `xpad[c, p·stride + k·dilation]`, 0 in the padding.
fn unfold(g: &Geometry, w: &Window, xg: &[f32], start: usize, width: usize, cols: &mut [f32]) {
    let r = g.sin.len();
    let mut k = vec![0usize; r];
    let mut p = vec![0usize; r];
    for c in 0..g.cg {
        let xc = &xg[c * g.in_vol..(c + 1) * g.in_vol];
        for t in 0..g.taps {
            unravel(t, &g.kern, &mut k);
            let row = &mut cols[(c * g.taps + t) * width..(c * g.taps + t + 1) * width];
            for (j, slot) in row.iter_mut().enumerate() {
                unravel(start + j, &g.sout, &mut p);
                let mut lin = 0usize;
                let mut inside = true;
                for a in 0..r {
                    match concrete::window_tap(w, a, p[a], k[a], g.sin[a]) {
                        Some(i) => lin = lin * g.sin[a] + i,
                        None => inside = false,
                    }
                }
                *slot = if inside { xc[lin] } else { 0.0 };
            }
        }
    }
}

fn unravel(mut lin: usize, shape: &[usize], idx: &mut [usize]) {
    for i in (0..shape.len()).rev() {
        if shape[i] > 0 {
            idx[i] = lin % shape[i];
            lin /= shape[i];
        }
    }
}

/// The f32 results as a `dt` tensor: the canonical NaN, one rounding
/// (the denotation's `fl`).
fn finish(dt: Dtype, shape: &[usize], mut out: Vec<f32>) -> Result<Tensor, Error> {
    canonical_nans(&mut out);
    if dt == Dtype::F32 {
        return Tensor::from_vec(shape, out);
    }
    let elems: Vec<Elem> = out.into_iter().map(|v| denote::fl(dt, v)).collect();
    Tensor::from_values(dt, shape, &elems)
}
