//! Reference dequantization, transcribed from ggml's `dequantize_row_*`.
//! The f32 operations and their order are ggml's (and gguf-py's), which
//! is what makes the results bit-exact; no FMA is used here.

use super::{Format, QuantError};
use half::f16;

/// Decodes the little-endian f16 at `b[i..i + 2]`.
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Dequantizes whole blocks of `f` into `out`, bit-exact with ggml's
/// `dequantize_row_*`. `out.len()` must be a multiple of the block length
/// and `blocks.len()` exactly `out.len() / block_elems · block_bytes`.
pub fn dequantize(f: Format, blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let (be, bb) = (f.block_elems(), f.block_bytes());
    if !out.len().is_multiple_of(be) {
        return Err(QuantError::NotBlockMultiple {
            format: f.name(),
            len: out.len(),
            block: be,
        });
    }
    let expected = out.len() / be * bb;
    if blocks.len() != expected {
        return Err(QuantError::BadLength {
            what: "blocks",
            expected,
            found: blocks.len(),
        });
    }
    for (blk, o) in blocks.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        dequant_block(f, blk, o);
    }
    Ok(())
}

/// One block; `blk` and `out` have the format's exact sizes.
pub(crate) fn dequant_block(f: Format, blk: &[u8], out: &mut [f32]) {
    match f {
        Format::Q8_0 => q8_0(blk, out),
        Format::Q4_0 => q4_0(blk, out),
        Format::Q4_1 => q4_1(blk, out),
        Format::Q4_K => q4_k(blk, out),
        Format::Q6_K => q6_k(blk, out),
    }
}

fn q8_0(blk: &[u8], out: &mut [f32]) {
    let d = f16_at(blk, 0);
    for (o, &q) in out.iter_mut().zip(&blk[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

fn q4_0(blk: &[u8], out: &mut [f32]) {
    let d = f16_at(blk, 0);
    for (j, &q) in blk[2..18].iter().enumerate() {
        out[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        out[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(blk: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
    for (j, &q) in blk[4..20].iter().enumerate() {
        out[j] = (q & 0x0F) as f32 * d + m;
        out[j + 16] = (q >> 4) as f32 * d + m;
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j`.
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (sc, m)
    }
}

fn q4_k(blk: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
    let scales = &blk[4..16];
    let qs = &blk[16..144];
    for (c, (q, o)) in qs
        .chunks_exact(32)
        .zip(out.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * c, scales);
        let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        for l in 0..32 {
            o[l] = d1 * (q[l] & 0x0F) as f32 - min1;
            o[l + 32] = d2 * (q[l] >> 4) as f32 - min2;
        }
    }
}

/// The signed 6-bit value `k` (0..256) of a Q6_K block, in `-32..32`.
pub(crate) fn q6_k_value(ql: &[u8], qh: &[u8], k: usize) -> i32 {
    let (half, r) = (k / 128, k % 128);
    let (quarter, l) = (r / 32, r % 32);
    let low = ql[half * 64 + l + 32 * (quarter & 1)];
    let low = if quarter < 2 { low & 0x0F } else { low >> 4 };
    let high = (qh[half * 32 + l] >> (2 * quarter)) & 3;
    (low | (high << 4)) as i32 - 32
}

fn q6_k(blk: &[u8], out: &mut [f32]) {
    let (ql, qh) = (&blk[0..128], &blk[128..192]);
    let scales = &blk[192..208];
    let d = f16_at(blk, 208);
    for (k, o) in out.iter_mut().enumerate() {
        // Element k uses scale (k / 16): ggml's `is + 2·quarter` per half.
        let sc = scales[k / 16] as i8 as f32;
        *o = d * sc * q6_k_value(ql, qh, k) as f32;
    }
}
