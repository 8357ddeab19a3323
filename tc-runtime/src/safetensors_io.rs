//! Reading and writing tensors in the safetensors format.
//!
//! Dtype mapping: F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, BOOL
//! map to the tc dtype of the same name. I4 has no safetensors dtype (saving
//! it is an error); safetensors dtypes without a tc dtype (U8, F64, ...) are
//! an error when loaded. Every failure is an [`Error`], never a panic.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::{Dtype as StDtype, SafeTensors, View};
use tc_core::Dtype;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The safetensors dtype storing `d`; `None` for I4.
pub fn to_safetensors_dtype(d: Dtype) -> Option<StDtype> {
    Some(match d {
        Dtype::F32 => StDtype::F32,
        Dtype::F16 => StDtype::F16,
        Dtype::BF16 => StDtype::BF16,
        Dtype::F8E4M3 => StDtype::F8_E4M3,
        Dtype::F8E5M2 => StDtype::F8_E5M2,
        Dtype::I64 => StDtype::I64,
        Dtype::I32 => StDtype::I32,
        Dtype::I16 => StDtype::I16,
        Dtype::I8 => StDtype::I8,
        Dtype::Bool => StDtype::BOOL,
        Dtype::I4 => return None,
        // Block-quantized weights come from GGUF files (`crate::gguf`).
        Dtype::Q8_0 | Dtype::Q4_0 | Dtype::Q4_1 | Dtype::Q4_K | Dtype::Q6_K => return None,
    })
}

/// The tc dtype of a safetensors dtype; `None` for those tc lacks (U8, F64, ...).
pub fn from_safetensors_dtype(d: StDtype) -> Option<Dtype> {
    Some(match d {
        StDtype::F32 => Dtype::F32,
        StDtype::F16 => Dtype::F16,
        StDtype::BF16 => Dtype::BF16,
        StDtype::F8_E4M3 => Dtype::F8E4M3,
        StDtype::F8_E5M2 => Dtype::F8E5M2,
        StDtype::I64 => Dtype::I64,
        StDtype::I32 => Dtype::I32,
        StDtype::I16 => Dtype::I16,
        StDtype::I8 => Dtype::I8,
        StDtype::BOOL => Dtype::Bool,
        _ => return None,
    })
}

fn st_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::Safetensors(format!("{context}: {e}"))
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| st_err(&path.display().to_string(), e))
}

/// One tensor of `len` bytes stored as `dtype`, its bytes written into the
/// new storage by `fill`.
fn tensor_from(
    name: &str,
    dtype: StDtype,
    shape: &[usize],
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<Tensor> {
    let ours = from_safetensors_dtype(dtype).ok_or_else(|| {
        Error::Safetensors(format!(
            "tensor `{name}` has dtype {dtype:?}, which tc does not support"
        ))
    })?;
    Tensor::from_raw_fill(ours, shape, len, fill)
}

/// Convert one safetensors entry.
fn convert_view(name: &str, view: &safetensors::tensor::TensorView<'_>) -> Result<Tensor> {
    let data = view.data();
    tensor_from(name, view.dtype(), view.shape(), data.len(), |buf| {
        buf.copy_from_slice(data);
        Ok(())
    })
}

/// Every tensor in a safetensors buffer, by name (converted in name order,
/// so which of several bad tensors is reported does not depend on a hash).
pub fn load_safetensors_bytes(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    each_view(bytes, convert_view)
}

/// Every tensor of a safetensors buffer, validated by the safetensors
/// crate, each made by `make` from its name and view, in name order.
fn each_view(
    bytes: &[u8],
    mut make: impl FnMut(&str, &safetensors::tensor::TensorView<'_>) -> Result<Tensor>,
) -> Result<BTreeMap<String, Tensor>> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| st_err("invalid file", e))?;
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    views
        .into_iter()
        .map(|(name, view)| {
            let t = make(&name, &view)?;
            Ok((name, t))
        })
        .collect()
}

/// Every tensor in a safetensors file, by name: the same result and errors
/// as [`load_safetensors_bytes`] on the file's contents, but each tensor is
/// read from the file straight into its storage. Reading the whole file
/// first touched twice the memory: on the AMD VM of issue #15, where fresh
/// pages are slow to fault, GPT-2-small's 500 MB took 2.5–5.5 s to load.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    let path = path.as_ref();
    let ctx = path.display().to_string();
    let io = |e: std::io::Error| st_err(&ctx, e);
    let mut file = std::fs::File::open(path).map_err(io)?;
    let (data, meta) = match file_header(&mut file) {
        Ok(h) => h,
        Err(Header::Io(e)) => return Err(io(e)),
        Err(Header::Invalid(e)) => return Err(with_context(st_err("invalid file", e), &ctx)),
    };
    let mut infos: Vec<_> = meta.tensors().into_iter().collect();
    infos.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = BTreeMap::new();
    for (name, info) in infos {
        let (start, end) = info.data_offsets;
        // Validated by `read_metadata`: `start ≤ end ≤` the data's length.
        let at = data + start as u64;
        let t = tensor_from(&name, info.dtype, &info.shape, end - start, |buf| {
            read_at(&mut file, buf, at).map_err(io)
        })
        .map_err(|e| with_context(e, &ctx))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Why a file's header could not be read.
enum Header {
    /// Reading the file failed.
    Io(std::io::Error),
    /// The header is not valid (what `SafeTensors::deserialize` reports).
    Invalid(safetensors::SafeTensorError),
}

/// The file's header, validated by the safetensors crate exactly as
/// [`SafeTensors::deserialize`] validates a whole buffer, and the offset of
/// its data. `read_metadata` checks the data's extent against the length of
/// the buffer it is given without reading the data, so it is given the
/// header followed by zeros the allocator never touched (a large
/// `alloc_zeroed` is fresh pages): the data is not read twice.
fn file_header(
    file: &mut std::fs::File,
) -> std::result::Result<(u64, safetensors::tensor::Metadata), Header> {
    let len = file.metadata().map_err(Header::Io)?.len();
    let len = usize::try_from(len)
        .map_err(|_| Header::Invalid(safetensors::SafeTensorError::HeaderTooLarge))?;
    let mut buf = crate::alloc::zeroed::<u8>(len)
        .map_err(|e| Header::Io(std::io::Error::other(e.to_string())))?;
    let head = len.min(8);
    read_at(file, &mut buf[..head], 0).map_err(Header::Io)?;
    if head == 8 {
        let mut le = [0u8; 8];
        le.copy_from_slice(&buf[..8]);
        let n = u64::from_le_bytes(le);
        // A header past the file's end is not read: `read_metadata`
        // reports it from the 8 bytes alone.
        if let Some(stop) = usize::try_from(n).ok().and_then(|n| n.checked_add(8)) {
            if stop <= len {
                read_at(file, &mut buf[8..stop], 8).map_err(Header::Io)?;
            }
        }
    }
    let (n, meta) = SafeTensors::read_metadata(&buf).map_err(Header::Invalid)?;
    Ok((n as u64 + 8, meta))
}

/// Fill `buf` from the file at byte `at`.
fn read_at(file: &mut std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(buf)
}

/// Every tensor in a safetensors file, by name, as [`load_safetensors`]
/// (the same result and errors), but read where the file lies: the file
/// is mapped read-only, and each tensor whose bytes are whole aligned
/// words of a dtype without invalid bit patterns (every float and integer
/// dtype: all of a float model's weights) is a view of the mapping, not a
/// copy; the rest are copied. The mapping goes when the last tensor on it
/// is dropped. No zeroed pages, no copy: all-MiniLM-L6-v2's 91 MB load in
/// 2–3 ms instead of 52–70 (issue #15), as candle and ONNX Runtime map
/// theirs.
///
/// A mapped tensor is read-only memory: [`Tensor::update_slice`] writes
/// into a copy, as for shared storage. A file that cannot be mapped (its
/// file system has no `mmap`, or the address space is full) is read with
/// [`load_safetensors`]; off Unix this is always [`load_safetensors`].
///
/// # Safety
/// The file must not be written to or truncated while any tensor returned
/// here, or sharing storage with one, is alive: the tensors' bytes would
/// change under shared borrows, or the process would fault on a page past
/// the new end. Model files in a read-only model directory meet this; so
/// does a file that is replaced by renaming a new one over it (the mapping
/// keeps the old one).
// SAFETY: (contract) met by the caller: see `# Safety`.
pub unsafe fn load_safetensors_mapped(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    #[cfg(unix)]
    {
        let path = path.as_ref();
        let ctx = path.display().to_string();
        let io = |e: std::io::Error| st_err(&ctx, e);
        let file = std::fs::File::open(path).map_err(io)?;
        let len = usize::try_from(file.metadata().map_err(io)?.len())
            .map_err(|_| st_err(&ctx, "file too large to map"))?;
        if len == 0 {
            return load_safetensors(path);
        }
        // SAFETY: the file stays as it is while mapped (this function's
        // contract, passed on).
        match unsafe { crate::mapped::Mapping::of(&file, len) } {
            Ok(map) => mapped_tensors(&std::sync::Arc::new(map)).map_err(|e| with_context(e, &ctx)),
            // A file that cannot be mapped (a file system without `mmap`,
            // such as sysfs or some FUSE mounts, or no address space left)
            // is read instead: the same tensors or the same error as the
            // buffer loader, never a failure the buffer loader would not give.
            Err(_) => load_safetensors(path),
        }
    }
    #[cfg(not(unix))]
    load_safetensors(path)
}

/// The tensors of a mapped safetensors file: views of `map` where they
/// can be, copies otherwise, validated as [`load_safetensors_bytes`]
/// validates a buffer (same errors, same order).
#[cfg(unix)]
fn mapped_tensors(
    map: &std::sync::Arc<crate::mapped::Mapping>,
) -> Result<BTreeMap<String, Tensor>> {
    let bytes = map.bytes();
    each_view(bytes, |name, view| {
        let data = view.data();
        // Inside `bytes` (the view borrows it); an offset that is not (it
        // cannot be) means a copy, never a region elsewhere.
        let offset = (data.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize);
        let mapped = from_safetensors_dtype(view.dtype()).and_then(|dt| {
            let region = crate::mapped::Region::new(map, offset?, data.len())?;
            Tensor::from_mapped(dt, view.shape(), region)
        });
        match mapped {
            Some(t) => Ok(t),
            None => convert_view(name, view),
        }
    })
}

fn with_context(e: Error, context: &str) -> Error {
    match e {
        Error::Safetensors(m) => Error::Safetensors(format!("{context}: {m}")),
        other => other,
    }
}

/// One named tensor from a safetensors buffer, checked against the dtype (and,
/// when given, the shape) the caller expects.
///
/// Errors: `Safetensors` (bad buffer, no such name, unsupported dtype),
/// `Dtype` (the stored dtype differs; `param` is the tensor name),
/// `ShapeMismatch` (the stored shape differs).
pub fn load_tensor_from_bytes(
    bytes: &[u8],
    name: &str,
    expected_dtype: Dtype,
    expected_shape: Option<&[usize]>,
) -> Result<Tensor> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| st_err("invalid file", e))?;
    let view = st.tensor(name).map_err(|e| match e {
        safetensors::SafeTensorError::TensorNotFound(_) => {
            let mut names: Vec<&String> = st.names();
            names.sort();
            Error::Safetensors(format!("no tensor named `{name}` (found {names:?})"))
        }
        other => st_err(name, other),
    })?;
    let found = from_safetensors_dtype(view.dtype());
    if found != Some(expected_dtype) {
        return match found {
            Some(found) => Err(Error::Dtype {
                param: name.to_string(),
                expected: expected_dtype,
                found,
            }),
            None => Err(Error::Safetensors(format!(
                "tensor `{name}` has dtype {:?}, expected {expected_dtype}",
                view.dtype()
            ))),
        };
    }
    if let Some(shape) = expected_shape {
        if view.shape() != shape {
            return Err(Error::ShapeMismatch {
                context: format!("safetensors tensor `{name}`"),
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
    }
    convert_view(name, &view)
}

/// One named tensor from a safetensors file; see [`load_tensor_from_bytes`].
pub fn load_tensor(
    path: impl AsRef<Path>,
    name: &str,
    expected_dtype: Dtype,
    expected_shape: Option<&[usize]>,
) -> Result<Tensor> {
    let path = path.as_ref();
    load_tensor_from_bytes(&read_file(path)?, name, expected_dtype, expected_shape)
        .map_err(|e| with_context(e, &path.display().to_string()))
}

/// A tensor as a safetensors [`View`].
struct StView<'a> {
    tensor: &'a Tensor,
    dtype: StDtype,
}

impl View for StView<'_> {
    fn dtype(&self) -> StDtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.tensor.bytes())
    }
    fn data_len(&self) -> usize {
        self.tensor.bytes().len()
    }
}

fn views<'a, I>(tensors: I) -> Result<Vec<(String, StView<'a>)>>
where
    I: IntoIterator<Item = (&'a String, &'a Tensor)>,
{
    tensors
        .into_iter()
        .map(|(name, t)| {
            let dtype = to_safetensors_dtype(t.dtype()).ok_or_else(|| {
                Error::Safetensors(format!(
                    "tensor `{name}`: dtype {} has no safetensors encoding",
                    t.dtype()
                ))
            })?;
            Ok((name.clone(), StView { tensor: t, dtype }))
        })
        .collect()
}

/// Serialise named tensors into a safetensors buffer (I4 → `Safetensors` error).
pub fn save_safetensors_bytes(tensors: &BTreeMap<String, Tensor>) -> Result<Vec<u8>> {
    safetensors::serialize(views(tensors)?, &None).map_err(|e| st_err("serialize", e))
}

/// Write named tensors to a safetensors file (I4 → `Safetensors` error).
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &BTreeMap<String, Tensor>) -> Result<()> {
    let path = path.as_ref();
    safetensors::serialize_to_file(views(tensors)?, &None, path)
        .map_err(|e| st_err(&path.display().to_string(), e))
}
