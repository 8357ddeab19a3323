//! The block-quantized dtypes' formats (Section 2 §18): the map from tc's
//! dtypes to `tc-quant`'s formats, and decoding of block bytes. A leaf:
//! [`crate::tensor`] decodes its elements through it and
//! [`crate::quant`] builds on tensors, so neither depends on the other
//! for the formats.

use tc_core::Dtype;
use tc_quant::quant::{self as q, Format};

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

/// Element `i` of a quantized buffer: its block decoded, the element
/// picked. For the element-wise accessors (`Tensor::get`), never a kernel.
/// A buffer too short for the element's block (impossible for a formed
/// tensor) reads as 0.
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

/// The F32 values `buf` (whole blocks of `dtype`) denotes: `None` when
/// `dtype` is not quantized or `buf` is not `n` elements' blocks.
pub(crate) fn dequantize(dtype: Dtype, buf: &[u8], n: usize) -> Option<Vec<f32>> {
    let f = format(dtype)?;
    let mut out = crate::alloc::filled(n, 0f32).ok()?;
    q::dequantize(f, buf, &mut out).ok()?;
    Some(out)
}
