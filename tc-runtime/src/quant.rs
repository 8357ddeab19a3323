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

/// The `tc-quant` format of a quantized dtype.
pub fn format(dtype: Dtype) -> Option<Format> {
    Some(match dtype {
        Dtype::Q8_0 => Format::Q8_0,
        Dtype::Q4_0 => Format::Q4_0,
        Dtype::Q4_1 => Format::Q4_1,
        Dtype::Q4_K => Format::Q4_K,
        Dtype::Q6_K => Format::Q6_K,
        _ => return None,
    })
}

/// The quantized dtype of a `tc-quant` format.
pub fn dtype(f: Format) -> Dtype {
    match f {
        Format::Q8_0 => Dtype::Q8_0,
        Format::Q4_0 => Dtype::Q4_0,
        Format::Q4_1 => Dtype::Q4_1,
        Format::Q4_K => Dtype::Q4_K,
        Format::Q6_K => Dtype::Q6_K,
    }
}

fn quant_err(t: &Tensor, what: &'static str) -> Error {
    Error::Quantized {
        dtype: t.dtype(),
        shape: t.shape().to_vec(),
        what,
    }
}

/// Element `i` of a quantized buffer: its block decoded, the element
/// picked. Used by the element-wise accessors (`Tensor::get`), never by a
/// kernel. A buffer too short for the element's block (impossible for a
/// formed tensor) reads as 0.
pub(crate) fn element(dtype: Dtype, buf: &[u8], i: usize) -> f32 {
    let Some(f) = format(dtype) else { return 0.0 };
    let (be, bb) = (f.block_elems(), f.block_bytes());
    let start = (i / be) * bb;
    let Some(block) = buf.get(start..start + bb) else {
        return 0.0;
    };
    let mut out = [0f32; 256];
    match q::dequantize(f, block, &mut out[..be]) {
        Ok(()) => out[i % be],
        Err(_) => 0.0,
    }
}

/// `dequantize` (Section 2 §18): the F32 tensor a quantized one denotes,
/// decoded exactly as GGML defines each format.
pub fn dequantize(t: &Tensor) -> Result<Tensor> {
    let f = format(t.dtype()).ok_or_else(|| quant_err(t, "dequantize of an unquantized tensor"))?;
    let mut out = vec![0f32; t.numel()];
    q::dequantize(f, t.bytes(), &mut out)
        .map_err(|_| quant_err(t, "block bytes that do not match its shape"))?;
    Tensor::from_vec(t.shape(), out)
}

/// `cast` with a quantized side: from a quantized format to a float is its
/// dequantization, then Section 2 §5 from F32; nothing casts into one.
pub(crate) fn cast(t: &Tensor, to: Dtype) -> Result<Tensor> {
    if to.is_quantized() || !t.dtype().is_quantized() || !to.is_float() {
        return Err(quant_err(t, "a cast other than dequantization to a float"));
    }
    let f = dequantize(t)?;
    if to == Dtype::F32 {
        Ok(f)
    } else {
        f.cast(to)
    }
}

/// Check `qmatmul x w`'s operands: the concrete rule, then the storage.
fn operands<'t>(x: &'t Tensor, w: &'t Tensor) -> Result<(Format, usize, usize, usize, Vec<usize>)> {
    let (_, out) = tc_core::concrete::qmatmul(opd(x), opd(w))?;
    let f = format(w.dtype()).ok_or_else(|| quant_err(w, "qmatmul of an unquantized weight"))?;
    let k = w.shape()[1];
    let n = w.shape()[0];
    let rows = if k == 0 { 0 } else { x.numel() / k };
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
