//! Block-quantized tensors at run time (Section 2 §18): a quantized
//! [`Tensor`] stores its GGUF block bytes; it denotes the F32 tensor of its
//! dequantization. The formats' byte layouts, the reference dequantization
//! and the fused kernels live in `tc-quant`; this module ties them to
//! [`Tensor`] and gives `qmatmul` its reference denotation.

use tc_core::Dtype;
use tc_quant::quant::{self as q, Format};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use tc_quant::quant::Numerics;

pub use crate::qformat::{dtype, format};

fn quant_err(t: &Tensor, what: &'static str) -> Error {
    Error::Quantized {
        dtype: t.dtype(),
        shape: t.shape().to_vec(),
        what,
    }
}

/// `dequantize` (Section 2 §18): the F32 tensor a quantized one denotes,
/// decoded exactly as GGML defines each format.
pub fn dequantize(t: &Tensor) -> Result<Tensor> {
    if !t.dtype().is_quantized() {
        return Err(quant_err(t, "dequantize of an unquantized tensor"));
    }
    t.cast(Dtype::F32)
}

/// Check `qmatmul x w`'s operands: the concrete rule, then the storage.
fn operands<'t>(x: &'t Tensor, w: &'t Tensor) -> Result<(Format, usize, usize, usize, Vec<usize>)> {
    let (_, out) = tc_core::concrete::qmatmul(opd(x), opd(w))?;
    let f = format(w.dtype()).ok_or_else(|| quant_err(w, "qmatmul of an unquantized weight"))?;
    let k = w.shape()[1];
    let n = w.shape()[0];
    // x's leading dims (the rule checked its last is k): with k = 0 every
    // row still gets its (zero) outputs.
    let rows = tc_core::size::numel(&x.shape()[..x.rank() - 1])?;
    Ok((f, rows, k, n, out))
}

fn opd(t: &Tensor) -> tc_core::concrete::Operand<'_> {
    tc_core::concrete::Operand {
        dtype: t.dtype(),
        shape: t.shape(),
    }
}

/// The reference denotation of `qmatmul x w` (Section 2 §18: `matmul x
/// (transpose (dequantize w))`): `w` dequantized exactly, each output
/// element summed over `k` in order, product then sum in F32, as the
/// interpreter's `matmul` (Section 4).
pub fn qmatmul_reference(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (_, rows, k, n, out_shape) = operands(x, w)?;
    let wf = dequantize(w)?;
    let (xs, ws) = (x.as_slice::<f32>()?, wf.as_slice::<f32>()?);
    let mut y = crate::alloc::filled(tc_core::size::numel(&out_shape)?, 0f32)?;
    for r in 0..rows {
        let xr = &xs[r * k..r * k + k];
        for j in 0..n {
            let wr = &ws[j * k..j * k + k];
            let mut acc = 0f32;
            for l in 0..k {
                acc += xr[l] * wr[l];
            }
            y[r * n + j] = acc;
        }
    }
    Tensor::from_vec(&out_shape, y)
}

/// `qmatmul x w` on the fused kernels: the weight is read as blocks and
/// never materialised in F32. `Numerics::Exact` agrees with
/// [`qmatmul_reference`] within the matmul tolerance, `Numerics::Fast`
/// within the bound `tc-quant` states for 8-bit activations.
pub fn qmatmul(x: &Tensor, w: &Tensor, numerics: Numerics) -> Result<Tensor> {
    let (f, rows, k, n, out_shape) = operands(x, w)?;
    let mut y = crate::alloc::filled(tc_core::size::numel(&out_shape)?, 0f32)?;
    q::qmatmul(
        f,
        numerics,
        x.as_slice::<f32>()?,
        rows,
        k,
        w.bytes(),
        n,
        &mut y,
    )
    .map_err(|_| quant_err(w, "block bytes that do not match its shape"))?;
    Tensor::from_vec(&out_shape, y)
}

/// An F32 tensor `[…, K]` quantized to `Q8_0` along its last axis, block
/// bytes identical to ggml's `quantize_row_q8_0` (the element bound is
/// `tc_quant::quant::quantize_q8_0`'s): the int8 weights of a model whose
/// file holds F32 ones. `K` must be a multiple of 32; a weight that is not
/// finite, or a block whose scale f16 cannot hold, is refused.
pub fn quantize_q8_0(t: &Tensor) -> Result<Tensor> {
    let k = t.shape().last().copied().unwrap_or(0);
    let bytes = q::quantize_q8_0(t.as_slice::<f32>()?, k).map_err(|e| match e {
        q::QuantError::ScaleRange { .. } => quant_err(t, "a block with no f16 scale (a weight that is not finite, or max |x| / 127 past f16's range)"),
        _ => quant_err(t, "a last axis that is not a whole number of 32-blocks"),
    })?;
    Tensor::from_raw(Dtype::Q8_0, t.shape(), bytes)
}
