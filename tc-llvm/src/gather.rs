//! The gather step (Section 2 §12a, docs/syntax.md "gather") on the host.
//!
//! Why not a fused kernel: an id is data, and a kernel that reads
//! `table[id]` before the id is checked is the one read in tc whose bounds
//! no planned shape guarantees. The step checks every id first, with the
//! rule both backends share ([`concrete::gather_ids`]), then copies one
//! contiguous block per (outer index, id) — `memcpy` of `block` elements,
//! which is what an embedding lookup is — so a wrong id is a typed error
//! naming its position and never a read. Packed I4 copies nibble by nibble.
//! Narrow floats are then re-stored as the interpreter stores a copied
//! element (decode, exact store): a copy keeps every bit except a
//! signalling NaN, which comes out quiet (Section 2 §5's decode rule, the
//! rule of every data-movement op).

use tc_core::concrete;
use tc_core::Dtype;

/// The ids as stored (little-endian I64), in row-major order.
fn ids_of(bytes: &[u8]) -> impl Iterator<Item = i64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| <[u8; 8]>::try_from(c).map_or(-1, i64::from_le_bytes))
}

/// Every id in `0..table_shape[axis]`, else the first bad one (§12a).
pub(crate) fn check_ids(
    axis: usize,
    table_shape: &[usize],
    ids_shape: &[usize],
    ids: &[u8],
) -> Result<(), tc_runtime::Error> {
    let bound = table_shape.get(axis).copied().unwrap_or(0);
    concrete::gather_ids(axis, bound, ids_shape, ids_of(ids)).map_err(Into::into)
}

/// `out[p…, j…, q…] = table[p…, ids[j…], q…]`; the ids were checked by
/// [`check_ids`], and `table`, `ids` and `out` hold the storage of their
/// planned shapes (`out`'s is the rule's result shape). A buffer shorter
/// than that is an error, never a panic.
pub(crate) fn copy(
    dtype: Dtype,
    axis: usize,
    table_shape: &[usize],
    table: &[u8],
    ids: &[u8],
    out: &mut [u8],
) -> Result<(), tc_runtime::Error> {
    let short = || tc_runtime::Error::malformed("gather: a buffer is shorter than its shape");
    let pre = tc_core::size::numel(&table_shape[..axis])?;
    let v = table_shape[axis];
    let block = tc_core::size::numel(&table_shape[axis + 1..])?;
    let ids: Vec<usize> = ids_of(ids).map(|i| i as usize).collect();
    let n = ids.len();
    if dtype == Dtype::I4 {
        return copy_nibbles(pre, v, block, &ids, table, out).ok_or_else(short);
    }
    // Bytes of one copied block: exact for every byte-sized dtype, and for
    // a quantized table too, whose copied block is whole rows of blocks
    // (the rule refuses a gather along the block axis, Section 2 §18).
    let bb = dtype.storage_bytes(block);
    for p in 0..pre {
        for (j, &id) in ids.iter().enumerate() {
            // Each start is within its buffer's storage (checked by `get`).
            let src = (p * v + id) * bb;
            let dst = (p * n + j) * bb;
            let from = table.get(src..src + bb).ok_or_else(short)?;
            out.get_mut(dst..dst + bb)
                .ok_or_else(short)?
                .copy_from_slice(from);
        }
    }
    let written = (pre * n * bb).min(out.len());
    quiet_narrow(dtype, &mut out[..written]);
    Ok(())
}

/// Re-store every narrow float element of `bytes` through decode and the
/// exact store, as the interpreter does with a copied element: identity but
/// for signalling NaNs, which become quiet (sign and payload kept).
fn quiet_narrow(dtype: Dtype, bytes: &mut [u8]) {
    let restore = |b: u16| {
        tc_runtime::cast::decode_bits(b, dtype)
            .and_then(|x| tc_runtime::cast::store_bits(x, dtype))
            .unwrap_or(b)
    };
    match dtype {
        Dtype::F16 | Dtype::BF16 => {
            for c in bytes.chunks_exact_mut(2) {
                let b = restore(u16::from_le_bytes([c[0], c[1]]));
                c.copy_from_slice(&b.to_le_bytes());
            }
        }
        Dtype::F8E4M3 | Dtype::F8E5M2 => {
            for c in bytes.iter_mut() {
                *c = restore(u16::from(*c)) as u8;
            }
        }
        _ => {}
    }
}

/// [`copy`] for packed I4 (two per byte, low nibble first: Section 2 §5).
fn copy_nibbles(
    pre: usize,
    v: usize,
    block: usize,
    ids: &[usize],
    table: &[u8],
    out: &mut [u8],
) -> Option<()> {
    let n = ids.len();
    for p in 0..pre {
        for (j, &id) in ids.iter().enumerate() {
            for q in 0..block {
                let s = (p * v + id) * block + q;
                let d = (p * n + j) * block + q;
                let nib = (table.get(s / 2)? >> (4 * (s % 2))) & 0xF;
                let byte = out.get_mut(d / 2)?;
                let shift = 4 * (d % 2);
                *byte = (*byte & !(0xF << shift)) | (nib << shift);
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tc_core::concrete::RuleError;

    fn le(ids: &[i64]) -> Vec<u8> {
        ids.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    #[test]
    fn copies_blocks_along_an_inner_axis() {
        // table [2, 3, 2] of u8-sized Bool-free I8 values 0..12, axis 1.
        let table: Vec<u8> = (0..12).collect();
        let ids = le(&[2, 0]);
        let mut out = vec![0u8; 8];
        check_ids(1, &[2, 3, 2], &[2], &ids).unwrap();
        copy(Dtype::I8, 1, &[2, 3, 2], &table, &ids, &mut out).unwrap();
        assert_eq!(out, [4, 5, 0, 1, 10, 11, 6, 7]);
    }

    #[test]
    fn the_first_bad_id_is_reported_with_its_position() {
        let ids = le(&[0, 1, 3, -1]);
        let e = check_ids(0, &[3, 4], &[2, 2], &ids).unwrap_err();
        assert_eq!(
            e,
            tc_runtime::Error::Rule(RuleError::IndexOutOfRange {
                op: "gather".into(),
                axis: 0,
                position: vec![1, 0],
                index: 3,
                bound: 3,
            })
        );
    }

    #[test]
    fn a_narrow_signalling_nan_comes_out_quiet() {
        // F16 [sNaN 0x7C01, -0.0, 1.0]: the copy quiets the NaN only.
        let table: Vec<u8> = [0x7C01u16, 0x8000, 0x3C00]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let ids = le(&[0, 1, 2]);
        let mut out = vec![0u8; 6];
        copy(Dtype::F16, 0, &[3], &table, &ids, &mut out).unwrap();
        let got: Vec<u16> = out
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got, [0x7E01, 0x8000, 0x3C00]);
    }

    #[test]
    fn nibbles_keep_their_neighbours() {
        // I4 table [3] = [1, 2, 3] packed: 0x21, 0x03; gather [2, 0, 1].
        let table = [0x21u8, 0x03];
        let ids = le(&[2, 0, 1]);
        let mut out = [0xFFu8, 0xFF];
        copy(Dtype::I4, 0, &[3], &table, &ids, &mut out).unwrap();
        assert_eq!(out, [0x13, 0xF2]);
    }
}
