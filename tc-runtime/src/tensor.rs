//! Dense tensors of all eleven dtypes, stored in the Section 2 §5 layout.
//!
//! Storage is contiguous, row-major (C order) and its bytes never change
//! while it is shared (only [`Tensor::update_slice`] writes into a built
//! tensor, and only into storage its tensor alone holds); a [`Tensor`]
//! shares it through an `Arc`, so `Clone` and [`Tensor::reshape`] are
//! cheap. Layout per dtype: F32/ints little-endian, F16/BF16 two bytes
//! little-endian, F8 one byte, I4 packed two per byte (low nibble first; the
//! unused high nibble of an odd-length tensor is 0), Bool one byte (0 or 1).

use std::fmt;
use std::sync::Arc;

use ndarray::{ArrayBase, ArrayD, ArrayViewD, Data, Dimension, IxDyn};
use tc_core::concrete::RuleError;
use tc_core::Dtype;

use crate::cast;
use crate::elem::Elem;
use crate::element::Element;
use crate::error::{Error, Result};

/// How many elements `Display`/`Debug` print before eliding the rest with `...`.
const PREVIEW: usize = 16;

/// A dense, immutable tensor of one of the eleven dtypes.
///
/// `Send + Sync`; `Clone` shares the storage. Equality (`==`) is bitwise: same
/// dtype, same shape, same storage bytes (so a NaN equals the same NaN and
/// `-0.0 != 0.0`).
#[derive(Clone)]
pub struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    numel: usize,
    nbytes: usize,
    /// `nbytes` bytes of storage, 8-byte aligned, zero-padded to a whole word.
    words: Arc<Storage>,
}

/// Word storage that goes back to [`crate::pool`] when the last tensor
/// sharing it is dropped (large buffers only; the pool decides).
#[derive(Debug)]
struct Storage {
    words: Words,
    /// [`Tensor::storage_uid`]: from [`NEXT_UID`], never given twice.
    uid: u64,
}

/// Where a storage's words live.
#[derive(Debug)]
enum Words {
    /// Owned memory (from [`crate::pool`] when large).
    Heap(Vec<u64>),
    /// Words of a read-only file mapping
    /// ([`crate::safetensors_io::load_safetensors_mapped`]): never written
    /// ([`Tensor::update_slice`] copies first).
    Mapped(crate::mapped::Region),
}

/// The next storage's uid. A `u64` counted up by one per storage built
/// cannot wrap in a process's life (one per nanosecond: 584 years).
static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Storage {
    fn new(words: Vec<u64>) -> Storage {
        Storage::of(Words::Heap(words))
    }

    fn of(words: Words) -> Storage {
        let uid = NEXT_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Storage { words, uid }
    }

    /// The words, when they may be written (owned memory).
    fn heap_mut(&mut self) -> Option<&mut [u64]> {
        match &mut self.words {
            Words::Heap(w) => Some(w),
            Words::Mapped(_) => None,
        }
    }
}

impl std::ops::Deref for Storage {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        match &self.words {
            Words::Heap(w) => w,
            Words::Mapped(r) => r.words(),
        }
    }
}

/// A weak handle on a tensor's storage: it names that storage while any
/// tensor holds it, and never keeps it alive. Storage bytes never change
/// while an id names them (the one API that writes into a built tensor,
/// [`Tensor::update_slice`], writes only into storage its tensor alone
/// holds: an id is a handle too), so while [`StorageId::holds`] is true
/// the bytes are the ones seen when the id was taken: what a cache of data
/// derived from a tensor (the JIT's packed weights) needs to be sound.
/// Once every tensor on it is dropped the id is dead for good: its address
/// stays reserved by the weak reference, so no later storage takes it.
#[derive(Clone, Debug)]
pub struct StorageId(std::sync::Weak<Storage>);

impl StorageId {
    /// The id of `t`'s storage.
    pub fn of(t: &Tensor) -> StorageId {
        StorageId(Arc::downgrade(&t.words))
    }

    /// Is `t`'s storage this one (alive)?
    pub fn holds(&self, t: &Tensor) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&t.words)) && self.0.strong_count() > 0
    }

    /// Is some tensor still holding it?
    pub fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// A number unique among live ids (the storage's address), for hashing.
    pub fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Words::Heap(w) = &mut self.words {
            crate::pool::give(std::mem::take(w));
        }
    }
}

/// The element count of `shape`, or [`RuleError::Size`] beyond the cap both
/// backends share ([`tc_core::size::MAX_ELEMS`]): every tensor is built
/// through this, so the interpreter and the JIT may rely on it.
fn volume(shape: &[usize]) -> Result<usize> {
    Ok(tc_core::size::numel(shape)?)
}

/// [`volume`] of a `dtype` tensor, with Section 2 §18's formation at run
/// time: a block-quantized tensor has whole blocks along its last axis (so
/// its byte size is exact and every row starts on a block).
fn volume_of(dtype: Dtype, shape: &[usize]) -> Result<usize> {
    if let Some((block, _)) = dtype.block() {
        if !shape.last().is_some_and(|k| k % block == 0) {
            return Err(Error::Quantized {
                dtype,
                shape: shape.to_vec(),
                what: "a shape whose last dim is not a whole number of blocks",
            });
        }
    }
    volume(shape)
}

/// Element-wise construction does not exist for a quantized format: its
/// tensors are built from block bytes ([`Tensor::from_raw`]).
fn elements_ok(dtype: Dtype, shape: &[usize]) -> Result<()> {
    if dtype.is_quantized() {
        return Err(Error::Quantized {
            dtype,
            shape: shape.to_vec(),
            what: "elements (a quantized tensor is built from its block bytes)",
        });
    }
    Ok(())
}

/// A zeroed, 8-byte-aligned buffer of at least `nbytes` bytes, or
/// `OutOfMemory`.
fn zeroed_words(nbytes: usize) -> Result<Vec<u64>> {
    crate::pool::zeroed(nbytes.div_ceil(8))
}

/// Words for `nbytes` bytes that the caller then writes, every one of
/// them ([`crate::pool::overwritable`]).
///
/// Why: a tensor built from host data (a batched step's stacked rows, a
/// cast's result) took a fresh allocation every time while the pool held
/// the buffers of the tensors just dropped; past the allocator's small
/// sizes each fresh one came from the kernel as new pages, zeroed on
/// first touch (a 32-row decode step of SmolLM2: 12 % of its samples in
/// `clear_page_erms`).
fn overwritten_words(nbytes: usize) -> Result<Vec<u64>> {
    crate::pool::overwritable(nbytes.div_ceil(8))
}

/// The first `nbytes` bytes of `words`.
///
/// # Panics
/// When `nbytes` exceeds the words' size: every caller passes the size it
/// allocated for or recorded with the storage, so this is a bug, and the
/// check (one compare per call) keeps the cast below sound regardless.
fn word_bytes(words: &[u64], nbytes: usize) -> &[u8] {
    assert!(
        nbytes <= std::mem::size_of_val(words),
        "storage smaller than its byte count"
    );
    // SAFETY: the `nbytes` bytes lie inside `words` (asserted above; its
    // byte size cannot overflow, it is one allocation); u64 has no padding,
    // so every byte is initialised, and u8 has alignment 1; the result
    // borrows `words`, so the memory outlives it and is not written meanwhile.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), nbytes) }
}

/// Mutable form of [`word_bytes`] (same panic).
fn word_bytes_mut(words: &mut [u64], nbytes: usize) -> &mut [u8] {
    assert!(
        nbytes <= std::mem::size_of_val(words),
        "storage smaller than its byte count"
    );
    // SAFETY: as in `word_bytes`, with the exclusive borrow of `words` making
    // the byte view the only access; any bytes written form valid u64s.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), nbytes) }
}

/// Where [`Tensor::update_slice_from`] writes, in elements: `outer` runs
/// of `run` elements, the `o`-th at `o·dst_stride + dst_at` of the target
/// and `o·src_stride + src_at` of the source.
struct Block {
    outer: usize,
    run: usize,
    dst_stride: usize,
    dst_at: usize,
    src_stride: usize,
    src_at: usize,
}

/// Copy `src`'s elements into `dst` where `b` says (bit for bit; I4 nibble
/// by nibble). `dst` and `src` hold the elements `b` addresses (checked by
/// slicing: out of range panics, never writes astray).
fn write_block(dtype: Dtype, dst: &mut [u8], src: &[u8], b: &Block) {
    let (num, den) = dtype.byte_size();
    if den == 1 {
        let run = b.run * num;
        let (dst_at, src_at) = (
            (b.dst_stride * num, b.dst_at * num),
            (b.src_stride * num, b.src_at * num),
        );
        // One element per run (a position written into a cache whose
        // positions lie along the last axis): a copy of that constant
        // length per run, which compiles to a move instead of a `memcpy`
        // call for each element.
        match run {
            4 => copy_runs::<4>(dst, src, b.outer, dst_at, src_at),
            8 => copy_runs::<8>(dst, src, b.outer, dst_at, src_at),
            2 => copy_runs::<2>(dst, src, b.outer, dst_at, src_at),
            _ => {
                for o in 0..b.outer {
                    let (d, s) = (o * dst_at.0 + dst_at.1, o * src_at.0 + src_at.1);
                    dst[d..][..run].copy_from_slice(&src[s..][..run]);
                }
            }
        }
        return;
    }
    for o in 0..b.outer {
        for x in 0..b.run {
            let d = o * b.dst_stride + b.dst_at + x;
            let s = o * b.src_stride + b.src_at + x;
            let nib = (src[s / 2] >> (4 * (s % 2))) & 0x0F;
            let sh = 4 * (d % 2);
            dst[d / 2] = (dst[d / 2] & !(0x0F << sh)) | (nib << sh);
        }
    }
}

/// [`write_block`]'s runs of `N` bytes: run `o`, from byte `o · stride +
/// at` of `src` (`src_at`) to `o · stride + at` of `dst` (`dst_at`).
fn copy_runs<const N: usize>(
    dst: &mut [u8],
    src: &[u8],
    outer: usize,
    (dst_stride, dst_at): (usize, usize),
    (src_stride, src_at): (usize, usize),
) {
    for o in 0..outer {
        let s = o * src_stride + src_at;
        let run: &[u8; N] = src[s..s + N].try_into().expect("a run of N bytes");
        dst[o * dst_stride + dst_at..][..N].copy_from_slice(run);
    }
}

/// Write element `i` of a `dtype` buffer with the value of `cast[dtype] e`.
/// The buffer must be zero where I4 nibbles are written.
fn store(buf: &mut [u8], dtype: Dtype, i: usize, e: Elem) {
    // A quantized format has no element encoding; its constructors refuse
    // elements before any store ([`elements_ok`]), so nothing is written.
    if dtype.is_quantized() {
        return;
    }
    if dtype.is_float() {
        let x = match e {
            Elem::F(x) => x,
            Elem::I(v) => cast::int_to_float(v, dtype),
            Elem::B(b) => b as u8 as f32,
        };
        match dtype {
            Dtype::F32 => buf[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
            Dtype::F16 => {
                buf[2 * i..2 * i + 2].copy_from_slice(&cast::f16_from_f32(x).to_le_bytes())
            }
            Dtype::BF16 => {
                buf[2 * i..2 * i + 2].copy_from_slice(&cast::bf16_from_f32(x).to_le_bytes())
            }
            // Exact for a member of the value set (F8E5M2's ±inf included);
            // callers that cast round first ([`store_cast`]).
            _ => buf[i] = cast::store_bits(x, dtype).unwrap_or(0) as u8,
        }
        return;
    }
    match cast::convert(e, dtype) {
        Elem::I(v) => match dtype {
            Dtype::I64 => buf[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes()),
            Dtype::I32 => buf[4 * i..4 * i + 4].copy_from_slice(&(v as i32).to_le_bytes()),
            Dtype::I16 => buf[2 * i..2 * i + 2].copy_from_slice(&(v as i16).to_le_bytes()),
            Dtype::I8 => buf[i] = v as i8 as u8,
            _ => buf[i / 2] |= ((v as u8) & 0x0F) << (4 * (i % 2)),
        },
        Elem::B(b) => buf[i] = b as u8,
        Elem::F(_) => {} // unreachable: convert to a non-float dtype gives I or B
    }
}

/// Store `cast[dtype] e` (Section 2 §5: a float rounded, F8 saturating).
fn store_cast(buf: &mut [u8], dtype: Dtype, i: usize, e: Elem) {
    store(buf, dtype, i, cast::convert(e, dtype));
}

/// Decode element `i` of a `dtype` buffer (the index must be in range).
fn load(buf: &[u8], dtype: Dtype, i: usize) -> Elem {
    fn arr<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[N * i..N * i + N]);
        a
    }
    match dtype {
        Dtype::F32 => Elem::F(f32::from_le_bytes(arr(buf, i))),
        Dtype::F16 => Elem::F(cast::f16_to_f32(u16::from_le_bytes(arr(buf, i)))),
        Dtype::BF16 => Elem::F(cast::bf16_to_f32(u16::from_le_bytes(arr(buf, i)))),
        Dtype::F8E4M3 => Elem::F(cast::f8e4m3_to_f32(buf[i])),
        Dtype::F8E5M2 => Elem::F(cast::f8e5m2_to_f32(buf[i])),
        Dtype::I64 => Elem::I(i64::from_le_bytes(arr(buf, i))),
        Dtype::I32 => Elem::I(i32::from_le_bytes(arr(buf, i)) as i64),
        Dtype::I16 => Elem::I(i16::from_le_bytes(arr(buf, i)) as i64),
        Dtype::I8 => Elem::I(buf[i] as i8 as i64),
        Dtype::I4 => {
            let nib = (buf[i / 2] >> (4 * (i % 2))) & 0x0F;
            Elem::I(cast::wrap_int(nib as i64, Dtype::I4))
        }
        Dtype::Bool => Elem::B(buf[i] != 0),
        // §18: element i denotes its dequantization (exact in F32).
        Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => {
            Elem::F(crate::qformat::element(dtype, buf, i))
        }
    }
}

impl Tensor {
    /// A tensor whose storage is `region` of a file mapping, or `None`
    /// when its dtype has invalid bit patterns (Bool: validated on a copy
    /// instead) or `region` is not its exact byte length.
    pub(crate) fn from_mapped(
        dtype: Dtype,
        shape: &[usize],
        region: crate::mapped::Region,
    ) -> Option<Tensor> {
        let numel = volume_of(dtype, shape).ok()?;
        let nbytes = tc_core::size::bytes(dtype, numel).ok()?;
        let exact = std::mem::size_of_val(region.words()) == nbytes;
        (exact && !matches!(dtype, Dtype::Bool | Dtype::I4)).then(|| Tensor {
            dtype,
            shape: shape.to_vec(),
            numel,
            nbytes,
            words: Arc::new(Storage::of(Words::Mapped(region))),
        })
    }

    /// Build from finished storage (length already checked).
    fn from_words(dtype: Dtype, shape: &[usize], numel: usize, words: Vec<u64>) -> Tensor {
        Tensor {
            dtype,
            shape: shape.to_vec(),
            numel,
            nbytes: dtype.storage_bytes(numel),
            words: Arc::new(Storage::new(words)),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape (row-major; `[]` for a scalar).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements (1 for a scalar, 0 when a dimension is 0).
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// The raw storage in the Section 2 §5 layout (`dtype.storage_bytes(numel)` bytes).
    pub fn bytes(&self) -> &[u8] {
        word_bytes(&self.words, self.nbytes)
    }

    /// A tensor of zeros (`0.0`, `0` or `false`).
    ///
    /// # Panics
    /// When the volume of `shape` is over the element cap
    /// (`tc_core::size::MAX_ELEMS`) or the allocation fails; use
    /// [`Tensor::try_zeros`] to get an error instead of the cap panic.
    pub fn zeros(dtype: Dtype, shape: &[usize]) -> Tensor {
        match Tensor::try_zeros(dtype, shape) {
            Ok(t) => t,
            Err(e) => panic!("Tensor::zeros: {e}"),
        }
    }

    /// A tensor of zeros; `Size` when the volume is over `tc_core::size::MAX_ELEMS`.
    pub fn try_zeros(dtype: Dtype, shape: &[usize]) -> Result<Tensor> {
        let numel = volume_of(dtype, shape)?;
        let nbytes = tc_core::size::bytes(dtype, numel)?;
        Ok(Tensor::from_words(
            dtype,
            shape,
            numel,
            zeroed_words(nbytes)?,
        ))
    }

    /// A tensor with every element equal to `cast[dtype] value`.
    pub fn full(dtype: Dtype, shape: &[usize], value: Elem) -> Result<Tensor> {
        elements_ok(dtype, shape)?;
        let numel = volume(shape)?;
        let nbytes = tc_core::size::bytes(dtype, numel)?;
        let mut words = zeroed_words(nbytes)?;
        let buf = word_bytes_mut(&mut words, nbytes);
        for i in 0..numel {
            store_cast(buf, dtype, i, value);
        }
        Ok(Tensor::from_words(dtype, shape, numel, words))
    }

    /// A rank-0 tensor holding `cast[dtype] value`.
    pub fn scalar(dtype: Dtype, value: Elem) -> Tensor {
        let mut words = vec![0u64; 1];
        store_cast(word_bytes_mut(&mut words, 8), dtype, 0, value);
        Tensor::from_words(dtype, &[], 1, words)
    }

    /// Build from decoded elements in row-major order. Each element is
    /// converted with [`cast::convert`] semantics (floats rounded RNE to
    /// `dtype`, ints wrapped, etc.) and encoded.
    ///
    /// `DataLength` when `elems.len()` is not the volume of `shape`.
    pub fn from_elems(dtype: Dtype, shape: &[usize], elems: &[Elem]) -> Result<Tensor> {
        Tensor::encode(dtype, shape, elems, store_cast)
    }

    /// Build from elements that are already values of `dtype` (the
    /// interpreter's results: rounded arithmetic, or copies of stored
    /// elements), stored exactly: unlike [`Tensor::from_elems`] no cast is
    /// applied, so F8E5M2's ±inf survives data movement
    /// ([`cast::store_bits`]).
    pub fn from_values(dtype: Dtype, shape: &[usize], elems: &[Elem]) -> Result<Tensor> {
        Tensor::encode(dtype, shape, elems, store)
    }

    /// `elems` (row-major, one per element of `shape`) written with `put`.
    fn encode(
        dtype: Dtype,
        shape: &[usize],
        elems: &[Elem],
        put: fn(&mut [u8], Dtype, usize, Elem),
    ) -> Result<Tensor> {
        elements_ok(dtype, shape)?;
        let numel = volume(shape)?;
        if elems.len() != numel {
            return Err(Error::DataLength {
                shape: shape.to_vec(),
                expected: numel,
                found: elems.len(),
            });
        }
        let nbytes = dtype.storage_bytes(numel);
        let mut words = zeroed_words(nbytes)?;
        let buf = word_bytes_mut(&mut words, nbytes);
        for (i, &e) in elems.iter().enumerate() {
            put(buf, dtype, i, e);
        }
        Ok(Tensor::from_words(dtype, shape, numel, words))
    }

    /// Build from raw storage in the Section 2 §5 layout.
    ///
    /// `ByteLength` unless `bytes.len() == dtype.storage_bytes(volume)`;
    /// `InvalidBool` when a Bool byte is not 0 or 1. For I4 with an odd number
    /// of elements the unused high nibble of the last byte is cleared.
    pub fn from_raw(dtype: Dtype, shape: &[usize], bytes: Vec<u8>) -> Result<Tensor> {
        Tensor::from_raw_slice(dtype, shape, &bytes)
    }

    /// Take ownership of 8-byte-aligned word storage without copying (the JIT's
    /// output path). `words` must hold exactly `ceil(storage_bytes / 8)` words
    /// laid out as Section 2 §5 says; padding past the last byte is cleared.
    pub fn from_word_storage(dtype: Dtype, shape: &[usize], mut words: Vec<u64>) -> Result<Tensor> {
        let numel = volume_of(dtype, shape)?;
        let nbytes = tc_core::size::bytes(dtype, numel)?;
        if words.len() != nbytes.div_ceil(8) {
            return Err(Error::ByteLength {
                dtype,
                shape: shape.to_vec(),
                expected: nbytes.div_ceil(8) * 8,
                found: words.len() * 8,
            });
        }
        let total = words.len() * 8;
        let buf = word_bytes_mut(&mut words, total);
        if dtype == Dtype::Bool {
            if let Some((index, &byte)) = buf[..nbytes].iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(Error::InvalidBool { index, byte });
            }
        }
        if dtype == Dtype::I4 && numel % 2 == 1 {
            buf[nbytes - 1] &= 0x0F;
        }
        buf[nbytes..].fill(0);
        Ok(Tensor::from_words(dtype, shape, numel, words))
    }

    /// As [`Tensor::from_raw`], from a borrowed slice (copied).
    pub fn from_raw_slice(dtype: Dtype, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
        Tensor::from_raw_fill(dtype, shape, bytes.len(), |buf| {
            buf.copy_from_slice(bytes);
            Ok(())
        })
    }

    /// As [`Tensor::from_raw_slice`] for a source of `len` bytes that
    /// `fill` writes straight into the new storage (all of it: it is given
    /// exactly `len` bytes), so a file is read into the tensor without an
    /// intermediate copy. The same checks, in the same order of
    /// precedence: `ByteLength` (before `fill` runs), then `fill`'s error,
    /// then `InvalidBool`.
    pub fn from_raw_fill(
        dtype: Dtype,
        shape: &[usize],
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<Tensor> {
        let numel = volume_of(dtype, shape)?;
        let expected = tc_core::size::bytes(dtype, numel)?;
        if len != expected {
            return Err(Error::ByteLength {
                dtype,
                shape: shape.to_vec(),
                expected,
                found: len,
            });
        }
        let mut words = zeroed_words(expected)?;
        let buf = word_bytes_mut(&mut words, expected);
        fill(buf)?;
        if dtype == Dtype::Bool {
            if let Some((index, &byte)) = buf.iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(Error::InvalidBool { index, byte });
            }
        }
        if dtype == Dtype::I4 && numel % 2 == 1 {
            buf[expected - 1] &= 0x0F;
        }
        Ok(Tensor::from_words(dtype, shape, numel, words))
    }

    /// Build from typed data in row-major order; the dtype is `T::DTYPE`.
    /// Bits are copied verbatim (NaN payloads included).
    ///
    /// `DataLength` when `data.len()` is not the volume of `shape`.
    pub fn from_vec<T: Element>(shape: &[usize], data: Vec<T>) -> Result<Tensor> {
        Tensor::from_slice(shape, &data)
    }

    /// As [`Tensor::from_vec`], from a borrowed slice.
    pub fn from_slice<T: Element>(shape: &[usize], data: &[T]) -> Result<Tensor> {
        let dtype = T::DTYPE;
        let numel = volume(shape)?;
        if data.len() != numel {
            return Err(Error::DataLength {
                shape: shape.to_vec(),
                expected: numel,
                found: data.len(),
            });
        }
        let nbytes = dtype.storage_bytes(numel);
        // A plain layout's copy writes every byte; element stores (I4's
        // nibbles) need zeros to write into.
        let mut words = if plain_layout::<T>() {
            overwritten_words(nbytes)?
        } else {
            zeroed_words(nbytes)?
        };
        let buf = word_bytes_mut(&mut words, nbytes);
        if plain_layout::<T>() {
            // `plain_layout` holds, so `T` is a sealed PLAIN element type (f32,
            // f16, bf16, the `repr(transparent)` F8 newtypes, i64..i8, bool).
            // SAFETY: those have no padding, so all `size_of_val(data)` bytes
            // are initialised; u8 has alignment 1; the view borrows `data`.
            let src = unsafe {
                std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
            };
            buf.copy_from_slice(src);
        } else {
            for (i, &x) in data.iter().enumerate() {
                store(buf, dtype, i, x.to_elem());
            }
        }
        Ok(Tensor::from_words(dtype, shape, numel, words))
    }

    /// A rank-0 tensor holding `v`.
    pub fn from_scalar<T: Element>(v: T) -> Tensor {
        Tensor::scalar(T::DTYPE, v.to_elem())
    }

    /// Decode element `flat_index` (row-major); `None` when out of range.
    pub fn get(&self, flat_index: usize) -> Option<Elem> {
        (flat_index < self.numel).then(|| load(self.bytes(), self.dtype, flat_index))
    }

    /// Decode element `flat_index` (row-major). Never panics: an index out of
    /// range yields [`Elem::zero`] of the dtype — use [`Tensor::get`] to detect it.
    pub fn elem(&self, flat_index: usize) -> Elem {
        self.get(flat_index)
            .unwrap_or_else(|| Elem::zero(self.dtype))
    }

    /// Decode element at a multi-index; `None` when the rank or an index is out of range.
    pub fn get_at(&self, index: &[usize]) -> Option<Elem> {
        if index.len() != self.shape.len() {
            return None;
        }
        let mut flat = 0usize;
        for (&i, &d) in index.iter().zip(&self.shape) {
            if i >= d {
                return None;
            }
            flat = flat * d + i;
        }
        self.get(flat)
    }

    /// All elements, decoded, in row-major order.
    pub fn to_elems(&self) -> Vec<Elem> {
        let buf = self.bytes();
        (0..self.numel).map(|i| load(buf, self.dtype, i)).collect()
    }

    /// [`Tensor::to_elems`], or `OutOfMemory` when the decoded elements
    /// (16 bytes each) cannot be allocated: the interpreter's path.
    pub fn try_to_elems(&self) -> Result<Vec<Elem>> {
        let buf = self.bytes();
        crate::alloc::collect(
            self.numel,
            (0..self.numel).map(|i| load(buf, self.dtype, i)),
        )
    }

    /// All elements as `T` (row-major); `WrongElementType` unless `T::DTYPE == dtype`.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_type::<T>()?;
        if plain_layout::<T>() {
            return Ok(self.typed_slice::<T>().to_vec());
        }
        let buf = self.bytes();
        Ok((0..self.numel)
            .map(|i| T::from_elem(load(buf, self.dtype, i)))
            .collect())
    }

    /// A number naming this tensor's storage, never given to other storage
    /// in this process (clones and reshapes share it; an in-place
    /// [`Tensor::update_slice`] keeps it, a copy on write does not). A
    /// record keyed by it (the JIT's operands seen once) holds no handle,
    /// so it does not make a later `update_slice` copy the storage.
    pub fn storage_uid(&self) -> u64 {
        self.words.uid
    }

    /// A hint that this tensor's bytes will not be read for a while: where
    /// its storage is a read-only file mapping, the resident pages wholly
    /// inside it go back to the operating system (a later read brings
    /// them back from the file, unchanged). Heap storage is left as it
    /// is. The JIT calls it on a quantized weight once it holds a packed
    /// copy, so the weight's memory is counted once.
    pub fn release_resident_pages(&self) {
        if let Words::Mapped(r) = &self.words.words {
            r.release_pages();
        }
    }

    /// Give back to the operating system the whole memory pages of this
    /// tensor's storage that hold only zero bytes; the bytes given back. A
    /// page given back reads as zeros again, so no value changes; it costs
    /// memory again once written. For a buffer allocated zeroed and filled
    /// over time, such as a KV cache with room for the positions still to
    /// come: the allocator may have handed it memory that was in use
    /// before and had to zero it, which makes the whole buffer resident at
    /// once. Only storage this tensor alone holds (no clone or
    /// [`StorageId`] shares it), in private anonymous memory
    /// ([`crate::resident`]); anything else is left as it is. Linux only.
    pub fn release_zero_pages(&mut self) -> usize {
        Tensor::release_zero_pages_of([self])
    }

    /// [`Tensor::release_zero_pages`] of each of `tensors`, the process's
    /// memory map read once for all of them (a KV cache's tensors, one
    /// pair per layer); the bytes given back.
    pub fn release_zero_pages_of<'t>(tensors: impl IntoIterator<Item = &'t mut Tensor>) -> usize {
        crate::resident::release_zero_pages(
            tensors
                .into_iter()
                .filter_map(|t| Arc::get_mut(&mut t.words).and_then(Storage::heap_mut)),
        )
    }

    /// Overwrite the block of `src`'s extent along `axis` from `start`:
    /// `self[…, start..start + len, …] = src` (XLA's `DynamicUpdateSlice`),
    /// the one write into a built tensor. For a cache with room for every
    /// position (a decoder's KV cache, `[B, H, capacity, HD]`), written one
    /// step at a time and read through a `slice` of its first T positions.
    ///
    /// In place when this tensor is its storage's only handle (no clone,
    /// reshape or [`StorageId`] shares it: nobody else can see the write);
    /// otherwise the storage is copied first (copy on write), and every
    /// other handle keeps the old values. Elements are copied as stored
    /// (bit for bit). In place, a write costs the bytes written, not the
    /// tensor's size.
    ///
    /// `Op` when the dtypes, ranks or extents off `axis` differ, `axis` is
    /// not an axis, or the block does not fit (`start + len` past the
    /// axis); `self` is then unchanged. `OutOfMemory` when a copy cannot
    /// be allocated.
    pub fn update_slice(&mut self, axis: usize, start: usize, src: &Tensor) -> Result<()> {
        let len = src.shape.get(axis).copied().unwrap_or(0);
        self.update_slice_from(axis, start, src, 0..len)
    }

    /// [`Tensor::update_slice`] with the block of `src`'s positions
    /// `block` along `axis`: `self[…, start..start + len, …] = src[…,
    /// block, …]` (`len` the block's), without a tensor of that block of
    /// its own (one sequence's rows of a batched step's keys, written into
    /// that sequence's cache). The same checks, and also `Op` when the
    /// block is reversed or ends past `src`'s axis.
    pub fn update_slice_from(
        &mut self,
        axis: usize,
        start: usize,
        src: &Tensor,
        block: std::ops::Range<usize>,
    ) -> Result<()> {
        let (from, len) = (block.start, block.len());
        self.update_fits(axis, start, src, &block)?;
        if len == 0 || src.numel == 0 {
            return Ok(());
        }
        // Shared (another handle would see the write) or mapped (read-only
        // memory): write into a copy.
        if Arc::get_mut(&mut self.words)
            .and_then(Storage::heap_mut)
            .is_none()
        {
            let copy = crate::alloc::collect(self.words.len(), self.words.iter().copied())?;
            self.words = Arc::new(Storage::new(copy));
        }
        let (dtype, nbytes) = (self.dtype, self.nbytes);
        // Neither volume is 0 (`src`'s was checked; `self` holds a block as
        // large), so every extent is at least 1 and these products are
        // within the cap.
        let outer: usize = self.shape[..axis].iter().product();
        let inner: usize = self.shape[axis + 1..].iter().product();
        let block = Block {
            outer,
            run: len * inner,
            dst_stride: self.shape[axis] * inner,
            dst_at: start * inner,
            src_stride: src.shape[axis] * inner,
            src_at: from * inner,
        };
        if let Some(words) = Arc::get_mut(&mut self.words).and_then(Storage::heap_mut) {
            write_block(dtype, word_bytes_mut(words, nbytes), src.bytes(), &block);
        }
        Ok(())
    }

    /// The checks of [`Tensor::update_slice_from`].
    fn update_fits(
        &self,
        axis: usize,
        start: usize,
        src: &Tensor,
        block: &std::ops::Range<usize>,
    ) -> Result<()> {
        let bad = |message: String| Error::op("update_slice", message);
        if src.dtype != self.dtype {
            return Err(bad(format!(
                "dtypes {} and {} differ",
                self.dtype, src.dtype
            )));
        }
        let (a, b) = (&self.shape, &src.shape);
        if axis >= a.len() || b.len() != a.len() {
            return Err(bad(format!(
                "axis {axis} of shapes {a:?} (target) and {b:?} (source)"
            )));
        }
        if (0..a.len()).any(|i| i != axis && a[i] != b[i]) {
            return Err(bad(format!(
                "shapes {a:?} and {b:?} differ off axis {axis}"
            )));
        }
        let len = block.len();
        if block.start > block.end || block.end > b[axis] {
            return Err(bad(format!(
                "source positions {}..{} are not a block of 0..{} on axis {axis}",
                block.start, block.end, b[axis]
            )));
        }
        let fits = |at: usize, extent: usize| at.checked_add(len).is_some_and(|end| end <= extent);
        if !fits(start, a[axis]) {
            return Err(bad(format!(
                "positions {start}..{start}+{len} are not within 0..{} on axis {axis}",
                a[axis]
            )));
        }
        Ok(())
    }

    /// The same storage with a new shape of equal volume (metadata only).
    ///
    /// `ReshapeVolume` when the volumes differ, `Size` when the new
    /// volume is over the element cap.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let to_volume = volume_of(self.dtype, shape)?;
        if self.dtype.is_quantized() && shape.last() != self.shape.last() {
            return Err(Error::Quantized {
                dtype: self.dtype,
                shape: shape.to_vec(),
                what: "a reshape that moves the block axis",
            });
        }
        if to_volume != self.numel {
            return Err(Error::Rule(RuleError::ReshapeVolume {
                from: self.shape.clone(),
                to: shape.iter().map(|&d| d as i64).collect(),
                from_volume: self.numel as i64,
                to_volume: to_volume as i64,
            }));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    /// `cast[to]` of the whole tensor (Section 2 §5); `OutOfMemory` when
    /// the result cannot be allocated.
    pub fn cast(&self, to: Dtype) -> Result<Tensor> {
        if self.dtype.is_quantized() || to.is_quantized() {
            return self.dequantize_to(to);
        }
        let buf = self.bytes();
        let nbytes = to.storage_bytes(self.numel);
        // Every element is stored, each whole but I4's nibbles, which are
        // stored into zeros.
        let mut words = if to == Dtype::I4 {
            zeroed_words(nbytes)?
        } else {
            overwritten_words(nbytes)?
        };
        let out = word_bytes_mut(&mut words, nbytes);
        for i in 0..self.numel {
            store_cast(out, to, i, load(buf, self.dtype, i));
        }
        Ok(Tensor::from_words(to, &self.shape, self.numel, words))
    }

    /// `cast` with a quantized side (Section 2 §18): from a quantized
    /// format to a float is its dequantization, then Section 2 §5 from F32;
    /// nothing casts into one.
    fn dequantize_to(&self, to: Dtype) -> Result<Tensor> {
        let refuse = |what| Error::Quantized {
            dtype: self.dtype,
            shape: self.shape.clone(),
            what,
        };
        if to.is_quantized() || !to.is_float() {
            return Err(refuse("a cast other than dequantization to a float"));
        }
        let values = crate::qformat::dequantize(self.dtype, self.bytes(), self.numel)
            .ok_or_else(|| refuse("block bytes that do not match its shape"))?;
        let f = Tensor::from_vec(&self.shape, values)?;
        if to == Dtype::F32 {
            Ok(f)
        } else {
            f.cast(to)
        }
    }

    /// Copy into an owned `ndarray` of `T` (`WrongElementType` on a dtype mismatch).
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(&self.shape), v)
            .map_err(|e| Error::op("to_ndarray", e.to_string()))
    }

    /// A zero-copy `ndarray` view of the storage. `WrongElementType` unless
    /// `T::DTYPE == dtype`; `NoZeroCopyView` for packed I4 (and on big-endian hosts).
    pub fn as_array_view<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        self.check_type::<T>()?;
        if !plain_layout::<T>() {
            return Err(Error::NoZeroCopyView { dtype: self.dtype });
        }
        ArrayViewD::from_shape(IxDyn(&self.shape), self.typed_slice::<T>())
            .map_err(|e| Error::op("as_array_view", e.to_string()))
    }

    /// A zero-copy flat slice of the elements (same conditions as [`Tensor::as_array_view`]).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_type::<T>()?;
        if !plain_layout::<T>() {
            return Err(Error::NoZeroCopyView { dtype: self.dtype });
        }
        Ok(self.typed_slice::<T>())
    }

    fn check_type<T: Element>(&self) -> Result<()> {
        if T::DTYPE == self.dtype {
            Ok(())
        } else {
            Err(Error::WrongElementType {
                expected: T::DTYPE,
                found: self.dtype,
            })
        }
    }

    /// The storage as `[T]`; callers have checked `T::DTYPE == dtype` and `plain_layout::<T>()`.
    fn typed_slice<T: Element>(&self) -> &[T] {
        assert!(T::DTYPE == self.dtype && plain_layout::<T>());
        // The words (a Vec<u64>, 8-byte aligned; `plain_layout`: `align_of::<T>()
        // ≤ 8` and `size_of::<T>() = storage_bytes(1)`) hold `nbytes =
        // numel·size_of::<T>()` initialised bytes: every constructor sizes them.
        // Bool storage holds only 0 or 1: `from_raw_slice`/`from_word_storage`
        // reject other bytes, everything else encodes through `store`.
        // SAFETY: so the `numel` values are in bounds, aligned and valid (any
        // bits are a valid number); the slice borrows the immutable storage.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<T>(), self.numel) }
    }

    fn fmt_preview(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor[{}", self.dtype)?;
        if !self.shape.is_empty() {
            f.write_str(";")?;
            for (k, d) in self.shape.iter().enumerate() {
                write!(f, "{}{d}", if k == 0 { " " } else { ", " })?;
            }
        }
        f.write_str("] ")?;
        let mut printed = 0usize;
        self.fmt_axis(f, 0, 0, &mut printed)
    }

    fn fmt_axis(
        &self,
        f: &mut fmt::Formatter<'_>,
        axis: usize,
        offset: usize,
        printed: &mut usize,
    ) -> fmt::Result {
        if axis == self.shape.len() {
            *printed += 1;
            return write!(f, "{}", self.elem(offset));
        }
        // An empty axis counts against the preview like an element: an
        // empty tensor's other axes may be 2^40 long, and printing each of
        // their `[]` rows would not end.
        if self.shape[axis] == 0 {
            *printed += 1;
            return f.write_str("[]");
        }
        // Every axis up to this one is non-empty, so the later axes' volume
        // is at most the element count; the 0 is never reached.
        let later = tc_core::size::volume(self.shape[axis + 1..].iter().map(|&d| d as i128));
        let stride = later.and_then(|v| usize::try_from(v).ok()).unwrap_or(0);
        f.write_str("[")?;
        for i in 0..self.shape[axis] {
            if i > 0 {
                f.write_str(", ")?;
            }
            if *printed >= PREVIEW {
                f.write_str("...")?;
                break;
            }
            self.fmt_axis(f, axis + 1, offset + i * stride, printed)?;
        }
        f.write_str("]")
    }
}

/// True when `[T]` has the §5 layout of `T::DTYPE` on this host.
fn plain_layout<T: Element>() -> bool {
    T::PLAIN
        && cfg!(target_endian = "little")
        && std::mem::size_of::<T>() == T::DTYPE.storage_bytes(1)
        && std::mem::align_of::<T>() <= 8
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.bytes() == other.bytes()
    }
}

impl Eq for Tensor {}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_preview(f)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_preview(f)
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> TryFrom<ArrayBase<S, D>> for Tensor {
    type Error = Error;
    /// Copy an `ndarray` (any layout; elements taken in logical row-major order).
    fn try_from(a: ArrayBase<S, D>) -> Result<Tensor> {
        Tensor::try_from(&a)
    }
}

impl<T: Element, S: Data<Elem = T>, D: Dimension> TryFrom<&ArrayBase<S, D>> for Tensor {
    type Error = Error;
    /// Copy an `ndarray` (any layout; elements taken in logical row-major order).
    fn try_from(a: &ArrayBase<S, D>) -> Result<Tensor> {
        match a.as_slice() {
            Some(s) => Tensor::from_slice(a.shape(), s),
            None => Tensor::from_vec(a.shape(), a.iter().copied().collect()),
        }
    }
}
