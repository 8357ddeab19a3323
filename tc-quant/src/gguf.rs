//! A hardened GGUF v2/v3 reader over a borrowed byte slice.
//!
//! The caller maps (or reads) the file; [`Gguf::parse`] walks the header,
//! the metadata key/values and the tensor infos, and validates every tensor
//! against the data section once, so [`Gguf::tensor_data`] can hand out
//! `&'a [u8]` slices of the input without copying. Quantized tensors follow
//! Section 2 §18: blocks run along `ne0`, so a GGUF tensor `[ne0 = K,
//! ne1 = N]` is the logical row-major tensor `[N, K]`
//! ([`TensorInfo::shape_row_major`]).
//!
//! Soundness: the input is untrusted. Every length, count and offset is
//! checked with checked arithmetic against the bytes that remain, and every
//! allocation is bounded by them (an array of `n` elements needs at least
//! `n` times its smallest encoded element size still unread), so a hostile
//! or truncated file yields a [`GgufError`] naming what failed and where.

use std::collections::BTreeMap;
use std::fmt;

/// The little-endian magic `"GGUF"`.
const MAGIC: [u8; 4] = *b"GGUF";
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// The data section alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Smallest encoded size of one tensor info: name length (8), `n_dims` (4),
/// type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 24;
/// Smallest encoded size of one key/value: key length (8), type (4), a u8.
const MIN_KV_BYTES: u64 = 13;

/// Why a GGUF file was rejected or a metadata lookup failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufError {
    /// The file does not start with `GGUF`.
    #[error("bad magic {found:02x?}: not a little-endian GGUF file")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// Only versions 2 and 3 (64-bit counts) are read.
    #[error("unsupported GGUF version {0} (only 2 and 3 are read)")]
    UnsupportedVersion(u32),
    /// The input ends before a field.
    #[error("truncated reading {what} at byte {offset}: need {needed} bytes, {available} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Absolute byte offset of the field.
        offset: usize,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the input.
        available: usize,
    },
    /// A count cannot fit in the bytes that remain.
    #[error("{what} count {count} at byte {offset} cannot fit in the {remaining} bytes left")]
    CountTooLarge {
        /// What is counted.
        what: &'static str,
        /// The count read.
        count: u64,
        /// Absolute byte offset of the count.
        offset: usize,
        /// Bytes left after the count.
        remaining: usize,
    },
    /// A string is not UTF-8.
    #[error("invalid UTF-8 in {what} at byte {offset}")]
    InvalidUtf8 {
        /// Which string.
        what: &'static str,
        /// Absolute byte offset of the string's bytes.
        offset: usize,
    },
    /// A metadata value type id outside 0..=12.
    #[error("unknown metadata value type {ty} at byte {offset}")]
    UnknownValueType {
        /// The type id read.
        ty: u32,
        /// Absolute byte offset of the type id.
        offset: usize,
    },
    /// An array whose elements are arrays (ggml rejects these too).
    #[error("nested array at byte {offset}")]
    NestedArray {
        /// Absolute byte offset of the element type.
        offset: usize,
    },
    /// A bool byte other than 0 or 1.
    #[error("invalid bool byte {value} at byte {offset}")]
    InvalidBool {
        /// The byte read.
        value: u8,
        /// Absolute byte offset.
        offset: usize,
    },
    /// Two metadata entries with one key.
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// Two tensors with one name.
    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },
    /// `general.alignment` is zero, not a power of two or not an integer.
    #[error("general.alignment {value} is not a power of two")]
    BadAlignment {
        /// The value, as text (it may have the wrong type).
        value: String,
    },
    /// More than four dims.
    #[error("tensor {name:?} has {n_dims} dims (at most 4) at byte {offset}")]
    TooManyDims {
        /// The tensor.
        name: String,
        /// The dim count read.
        n_dims: u32,
        /// Absolute byte offset of the count.
        offset: usize,
    },
    /// The element count or byte size overflows, or a dim exceeds `i64::MAX`.
    #[error("tensor {name:?} dims {dims:?} overflow")]
    DimOverflow {
        /// The tensor.
        name: String,
        /// Its dims as read.
        dims: Vec<u64>,
    },
    /// A ggml type id with no known block layout.
    #[error("tensor {name:?} has unknown ggml type {ty}")]
    UnknownTensorType {
        /// The tensor.
        name: String,
        /// The type id read.
        ty: u32,
    },
    /// `ne0` is not a multiple of the type's block length.
    #[error("tensor {name:?} row length {ne0} is not a multiple of block size {block}")]
    RaggedRow {
        /// The tensor.
        name: String,
        /// Its row length.
        ne0: u64,
        /// The type's block length.
        block: u64,
    },
    /// A tensor offset not a multiple of the alignment.
    #[error("tensor {name:?} offset {offset} is not a multiple of alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor extends past the end of the input.
    #[error(
        "tensor {name:?} bytes [{offset}, +{nbytes}) lie past the data section of {data_len} bytes"
    )]
    TensorOutOfBounds {
        /// The tensor.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// Its size in bytes.
        nbytes: u64,
        /// Bytes in the data section.
        data_len: u64,
    },
    /// Two tensors share bytes.
    #[error("tensors {first:?} and {second:?} overlap")]
    TensorOverlap {
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
    },
    /// The header and tensor infos end past the input (no data section).
    #[error("data section starts at byte {offset}, past the {len}-byte input")]
    DataSectionOutOfBounds {
        /// Aligned start of the data section.
        offset: u64,
        /// Input length.
        len: usize,
    },
    /// A metadata lookup found no such key.
    #[error("metadata key {key:?} is missing")]
    MissingKey {
        /// The key looked up.
        key: String,
    },
    /// A metadata lookup found a value of another type.
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    WrongType {
        /// The key looked up.
        key: String,
        /// The type the accessor wants.
        expected: &'static str,
        /// The type present.
        found: &'static str,
    },
    /// An integer value that does not fit the accessor's type.
    #[error("metadata key {key:?}: value {value} does not fit in {expected}")]
    OutOfRange {
        /// The key looked up.
        key: String,
        /// The type the accessor wants.
        expected: &'static str,
        /// The value present.
        value: i128,
    },
}

/// A ggml tensor element type, as stored in a GGUF tensor info.
#[allow(non_camel_case_types)] // ggml's own names
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// id 0.
    F32,
    /// id 1.
    F16,
    /// id 30.
    BF16,
    /// id 8: 32 × i8 with an f16 scale.
    Q8_0,
    /// id 2: 32 × 4 bits with an f16 scale.
    Q4_0,
    /// id 3: 32 × 4 bits with f16 scale and min.
    Q4_1,
    /// id 12: 256-element super-block, 8 sub-blocks with 6-bit scales/mins.
    Q4_K,
    /// id 14: 256-element super-block, 6-bit values, 16 i8 sub-scales.
    Q6_K,
    /// Any other id with a known ggml block layout (the reader checks its
    /// size but this crate does not decode it).
    Other(u32),
}

impl GgmlType {
    /// The type for a ggml id (any id; see [`GgmlType::block_layout`]).
    pub fn from_id(id: u32) -> GgmlType {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            30 => GgmlType::BF16,
            8 => GgmlType::Q8_0,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            12 => GgmlType::Q4_K,
            14 => GgmlType::Q6_K,
            other => GgmlType::Other(other),
        }
    }

    /// The ggml id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::BF16 => 30,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q4_K => 12,
            GgmlType::Q6_K => 14,
            GgmlType::Other(id) => id,
        }
    }

    /// `(elements per block, bytes per block)` from ggml's type traits, or
    /// `None` for ids ggml never assigned or has removed.
    pub fn block_layout(self) -> Option<(u64, u64)> {
        Some(match self.id() {
            0 => (1, 4),
            1 | 25 | 30 => (1, 2),
            2 | 20 => (32, 18),
            3 => (32, 20),
            6 => (32, 22),
            7 => (32, 24),
            8 => (32, 34),
            9 => (32, 36),
            10 => (256, 84),
            11 | 21 => (256, 110),
            12 => (256, 144),
            13 => (256, 176),
            14 => (256, 210),
            15 => (256, 292),
            16 | 35 => (256, 66),
            17 => (256, 74),
            18 => (256, 98),
            19 => (256, 50),
            22 => (256, 82),
            23 => (256, 136),
            24 => (1, 1),
            26 => (1, 4),
            27 | 28 => (1, 8),
            29 => (256, 56),
            34 => (256, 54),
            39 => (32, 17),
            _ => return None,
        })
    }
}

/// One metadata value. Strings borrow from the input.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue<'a> {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 6.
    F32(f32),
    /// Type 12.
    F64(f64),
    /// Type 7 (one byte, 0 or 1).
    Bool(bool),
    /// Type 8 (u64 length, UTF-8 bytes).
    Str(&'a str),
    /// Type 9 (element type, u64 count, elements; never nested).
    Array(Vec<MetaValue<'a>>),
}

impl MetaValue<'_> {
    /// The GGUF type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::Str(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }

    /// The value as an integer, when it is one of the eight integer types.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v.into(),
            MetaValue::I8(v) => v.into(),
            MetaValue::U16(v) => v.into(),
            MetaValue::I16(v) => v.into(),
            MetaValue::U32(v) => v.into(),
            MetaValue::I32(v) => v.into(),
            MetaValue::U64(v) => v.into(),
            MetaValue::I64(v) => v.into(),
            _ => return None,
        })
    }
}

/// One tensor's description; its bytes are [`Gguf::tensor_data`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor name (unique in the file).
    pub name: String,
    /// Dims in GGUF order: `ne0` (fastest varying) first.
    pub dims: Vec<u64>,
    /// The element type.
    pub kind: GgmlType,
    /// Byte offset relative to the data section.
    pub offset: u64,
    /// Size in bytes (checked against the input at parse time).
    pub nbytes: usize,
}

impl TensorInfo {
    /// Row-major logical shape: the dims reversed (GGUF `[ne0 = K, ne1 = N]`
    /// is `[N, K]`). Every dim fits `usize` because `nbytes` did.
    pub fn shape_row_major(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file borrowing its input.
#[derive(Clone, Debug)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    version: u32,
    alignment: u64,
    metadata: BTreeMap<String, MetaValue<'a>>,
    table: TensorTable,
}

/// A parsed file's tensor table: every tensor's description, by name, and
/// where the data section starts. It owns what it holds (no borrow of the
/// bytes), so whoever keeps the bytes can keep it too instead of parsing
/// again: a parse reads every metadata value, a vocabulary included.
#[derive(Clone, Debug, Default)]
pub struct TensorTable {
    tensors: Vec<TensorInfo>,
    by_name: BTreeMap<String, usize>,
    data_offset: usize,
}

impl TensorTable {
    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// One tensor info by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// Absolute offset of the data section (aligned to the alignment).
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Exactly the tensor's bytes in `bytes`, the bytes this table was
    /// parsed from (its infos were bounds-checked against them); an info
    /// or bytes from elsewhere that do not fit yield `&[]`.
    pub fn data<'b>(&self, bytes: &'b [u8], t: &TensorInfo) -> &'b [u8] {
        let start = usize::try_from(t.offset)
            .ok()
            .and_then(|o| o.checked_add(self.data_offset));
        let range = start.and_then(|s| Some(s..s.checked_add(t.nbytes)?));
        range.and_then(|r| bytes.get(r)).unwrap_or(&[])
    }
}

/// A bounds-checked cursor over the input.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let truncated = || GgufError::Truncated {
            what,
            offset: self.pos,
            needed: n,
            available: self.remaining(),
        };
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let out = self.bytes.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Reads a count and checks that `count * min_bytes` bytes remain, so a
    /// caller may reserve `count` slots.
    fn count(&mut self, what: &'static str, min_bytes: u64) -> Result<usize, GgufError> {
        let offset = self.pos;
        let count = self.u64(what)?;
        let remaining = self.remaining();
        let fits = count
            .checked_mul(min_bytes)
            .is_some_and(|need| need <= remaining as u64);
        if !fits {
            return Err(GgufError::CountTooLarge {
                what,
                count,
                offset,
                remaining,
            });
        }
        // `count <= remaining` here (min_bytes >= 1), so it fits usize.
        Ok(count as usize)
    }

    fn string(&mut self, what: &'static str) -> Result<&'a str, GgufError> {
        let len = self.u64(what)?;
        let offset = self.pos;
        let raw = self.take(len, what)?;
        std::str::from_utf8(raw).map_err(|_| GgufError::InvalidUtf8 { what, offset })
    }
}

/// Encoded size of the smallest value of a type (for bounding array counts).
fn min_value_bytes(ty: u32) -> u64 {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        // Arrays and unknown types are rejected before any element is read.
        _ => 1,
    }
}

fn read_value<'a>(r: &mut Reader<'a>, ty: u32, ty_at: usize) -> Result<MetaValue<'a>, GgufError> {
    Ok(match ty {
        0 => MetaValue::U8(r.u8("u8 value")?),
        1 => MetaValue::I8(r.u8("i8 value")? as i8),
        2 => MetaValue::U16(u16::from_le_bytes(r.array("u16 value")?)),
        3 => MetaValue::I16(i16::from_le_bytes(r.array("i16 value")?)),
        4 => MetaValue::U32(r.u32("u32 value")?),
        5 => MetaValue::I32(r.u32("i32 value")? as i32),
        6 => MetaValue::F32(f32::from_le_bytes(r.array("f32 value")?)),
        7 => {
            let offset = r.pos;
            match r.u8("bool value")? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                value => return Err(GgufError::InvalidBool { value, offset }),
            }
        }
        8 => MetaValue::Str(r.string("string value")?),
        9 => read_array(r)?,
        10 => MetaValue::U64(r.u64("u64 value")?),
        11 => MetaValue::I64(r.u64("i64 value")? as i64),
        12 => MetaValue::F64(f64::from_le_bytes(r.array("f64 value")?)),
        ty => return Err(GgufError::UnknownValueType { ty, offset: ty_at }),
    })
}

fn read_array<'a>(r: &mut Reader<'a>) -> Result<MetaValue<'a>, GgufError> {
    let ty_at = r.pos;
    let ty = r.u32("array element type")?;
    if ty == 9 {
        return Err(GgufError::NestedArray { offset: ty_at });
    }
    if ty > 12 {
        return Err(GgufError::UnknownValueType { ty, offset: ty_at });
    }
    let n = r.count("array element", min_value_bytes(ty))?;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        items.push(read_value(r, ty, ty_at)?);
    }
    Ok(MetaValue::Array(items))
}

fn read_metadata<'a>(
    r: &mut Reader<'a>,
    n_kv: usize,
) -> Result<BTreeMap<String, MetaValue<'a>>, GgufError> {
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string("metadata key")?;
        let ty_at = r.pos;
        let ty = r.u32("metadata value type")?;
        let value = read_value(r, ty, ty_at)?;
        if metadata.insert(key.to_owned(), value).is_some() {
            return Err(GgufError::DuplicateKey {
                key: key.to_owned(),
            });
        }
    }
    Ok(metadata)
}

fn alignment_of(metadata: &BTreeMap<String, MetaValue<'_>>) -> Result<u64, GgufError> {
    let Some(v) = metadata.get("general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let bad = || GgufError::BadAlignment {
        value: format!("{v:?}"),
    };
    let a = v.as_int().ok_or_else(bad)?;
    let a = u32::try_from(a).map_err(|_| bad())?;
    if !a.is_power_of_two() {
        return Err(bad());
    }
    Ok(a.into())
}

/// One tensor info as read, before its bytes are checked.
fn read_tensor_info(r: &mut Reader<'_>) -> Result<TensorInfo, GgufError> {
    let name = r.string("tensor name")?.to_owned();
    let n_dims_at = r.pos;
    let n_dims = r.u32("tensor n_dims")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            name,
            n_dims,
            offset: n_dims_at,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(r.u64("tensor dim")?);
    }
    let kind = GgmlType::from_id(r.u32("tensor type")?);
    let offset = r.u64("tensor offset")?;
    let nbytes = tensor_nbytes(&name, &dims, kind)?;
    Ok(TensorInfo {
        name,
        dims,
        kind,
        offset,
        nbytes,
    })
}

/// Bytes of a tensor: `ne0 / block * block_bytes * ne1 * ne2 * ne3`, with
/// ggml's rule that no dim (nor the element count) exceeds `i64::MAX`.
fn tensor_nbytes(name: &str, dims: &[u64], kind: GgmlType) -> Result<usize, GgufError> {
    let overflow = || GgufError::DimOverflow {
        name: name.to_owned(),
        dims: dims.to_vec(),
    };
    let (block, block_bytes) = kind.block_layout().ok_or(GgufError::UnknownTensorType {
        name: name.to_owned(),
        ty: kind.id(),
    })?;
    let mut elems: u64 = 1;
    for &d in dims {
        elems = elems.checked_mul(d).ok_or_else(overflow)?;
    }
    if elems > i64::MAX as u64 {
        return Err(overflow());
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    if ne0 % block != 0 {
        return Err(GgufError::RaggedRow {
            name: name.to_owned(),
            ne0,
            block,
        });
    }
    let mut nbytes = (ne0 / block)
        .checked_mul(block_bytes)
        .ok_or_else(overflow)?;
    for &d in dims.iter().skip(1) {
        nbytes = nbytes.checked_mul(d).ok_or_else(overflow)?;
    }
    usize::try_from(nbytes).map_err(|_| overflow())
}

/// Checks alignment, bounds and pairwise disjointness of the tensors.
fn check_layout(tensors: &[TensorInfo], alignment: u64, data_len: u64) -> Result<(), GgufError> {
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                name: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let fits = t
            .offset
            .checked_add(t.nbytes as u64)
            .is_some_and(|end| end <= data_len);
        if !fits {
            return Err(GgufError::TensorOutOfBounds {
                name: t.name.clone(),
                offset: t.offset,
                nbytes: t.nbytes as u64,
                data_len,
            });
        }
    }
    // Empty tensors own no bytes, so they cannot overlap anything.
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.nbytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        // Bounds were checked above, so the sum cannot overflow.
        if pair[0].offset + pair[0].nbytes as u64 > pair[1].offset {
            return Err(GgufError::TensorOverlap {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}

impl<'a> Gguf<'a> {
    /// Parses and validates a GGUF v2/v3 file. Never panics; any defect is
    /// a [`GgufError`]. Tensor bytes are not copied.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>, GgufError> {
        let mut r = Reader { bytes, pos: 0 };
        let magic = r.array::<4>("magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.count("tensor", MIN_TENSOR_INFO_BYTES)?;
        let n_kv = r.count("metadata key/value", MIN_KV_BYTES)?;
        let metadata = read_metadata(&mut r, n_kv)?;
        let alignment = alignment_of(&metadata)?;
        let mut tensors = Vec::with_capacity(n_tensors);
        let mut by_name = BTreeMap::new();
        for i in 0..n_tensors {
            let t = read_tensor_info(&mut r)?;
            if by_name.insert(t.name.clone(), i).is_some() {
                return Err(GgufError::DuplicateTensor { name: t.name });
            }
            tensors.push(t);
        }
        let data_offset = Self::data_start(r.pos, alignment, bytes.len(), tensors.is_empty())?;
        check_layout(&tensors, alignment, (bytes.len() - data_offset) as u64)?;
        Ok(Gguf {
            bytes,
            version,
            alignment,
            metadata,
            table: TensorTable {
                tensors,
                by_name,
                data_offset,
            },
        })
    }

    /// The aligned data section start. A file with no tensors may end
    /// before the padding; its (empty) data section then starts at the end.
    fn data_start(
        pos: usize,
        alignment: u64,
        len: usize,
        no_tensors: bool,
    ) -> Result<usize, GgufError> {
        let aligned = (pos as u64)
            .checked_next_multiple_of(alignment)
            .filter(|&a| a <= len as u64);
        match aligned {
            Some(a) => Ok(a as usize),
            None if no_tensors => Ok(len),
            None => Err(GgufError::DataSectionOutOfBounds {
                offset: (pos as u64).saturating_add(alignment - 1) / alignment * alignment,
                len,
            }),
        }
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// All metadata, by key.
    pub fn metadata(&self) -> &BTreeMap<String, MetaValue<'a>> {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&MetaValue<'a>> {
        self.metadata.get(key)
    }

    fn need(&self, key: &str) -> Result<&MetaValue<'a>, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    fn wrong(key: &str, expected: &'static str, found: &MetaValue<'_>) -> GgufError {
        GgufError::WrongType {
            key: key.to_owned(),
            expected,
            found: found.type_name(),
        }
    }

    /// An integer value of any integer type that fits `u32` (llama
    /// metadata mixes u32, i32 and u64).
    pub fn u32(&self, key: &str) -> Result<u32, GgufError> {
        let v = self.need(key)?;
        let i = v.as_int().ok_or_else(|| Self::wrong(key, "u32", v))?;
        u32::try_from(i).map_err(|_| GgufError::OutOfRange {
            key: key.to_owned(),
            expected: "u32",
            value: i,
        })
    }

    /// An `f32` value (an `f64` is rounded to `f32`).
    pub fn f32(&self, key: &str) -> Result<f32, GgufError> {
        match self.need(key)? {
            MetaValue::F32(v) => Ok(*v),
            MetaValue::F64(v) => Ok(*v as f32),
            v => Err(Self::wrong(key, "f32", v)),
        }
    }

    /// A string value, borrowed from the input.
    pub fn str(&self, key: &str) -> Result<&'a str, GgufError> {
        match self.need(key)? {
            MetaValue::Str(s) => Ok(s),
            v => Err(Self::wrong(key, "string", v)),
        }
    }

    fn array(&self, key: &str, expected: &'static str) -> Result<&[MetaValue<'a>], GgufError> {
        match self.need(key)? {
            MetaValue::Array(items) => Ok(items),
            v => Err(Self::wrong(key, expected, v)),
        }
    }

    /// An array of strings.
    pub fn str_array(&self, key: &str) -> Result<Vec<&'a str>, GgufError> {
        let items = self.array(key, "array of string")?;
        let strings = items.iter().map(|v| match v {
            MetaValue::Str(s) => Ok(*s),
            v => Err(Self::wrong(key, "array of string", v)),
        });
        strings.collect()
    }

    /// An array of integers that each fit `i32` (any integer element type).
    pub fn i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        let items = self.array(key, "array of i32")?;
        let ints = items.iter().map(|v| {
            let i = v
                .as_int()
                .ok_or_else(|| Self::wrong(key, "array of i32", v))?;
            i32::try_from(i).map_err(|_| GgufError::OutOfRange {
                key: key.to_owned(),
                expected: "i32",
                value: i,
            })
        });
        ints.collect()
    }

    /// The tensor table.
    pub fn table(&self) -> &TensorTable {
        &self.table
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        self.table.tensors()
    }

    /// One tensor info by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.table.tensor(name)
    }

    /// Exactly the tensor's bytes. Infos from this file were bounds-checked
    /// at parse; an info from elsewhere that does not fit yields `&[]`.
    pub fn tensor_data(&self, t: &TensorInfo) -> &'a [u8] {
        self.table.data(self.bytes, t)
    }

    /// The bytes of the named tensor.
    pub fn tensor_bytes(&self, name: &str) -> Option<&'a [u8]> {
        self.tensor(name).map(|t| self.tensor_data(t))
    }

    /// Absolute offset of the data section (aligned to the alignment).
    pub fn data_offset(&self) -> usize {
        self.table.data_offset()
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgmlType::Other(id) => write!(f, "ggml type {id}"),
            t => write!(f, "{t:?}"),
        }
    }
}

#[cfg(test)]
mod tests;
