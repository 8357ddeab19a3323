//! Weights from GGUF files (Section 2 §18): every tensor of a file as a
//! [`Tensor`] of its row-major shape, block-quantized ones in their stored
//! blocks, so a `#[tensor_params]` struct loads from a GGUF file by tensor
//! name exactly as from safetensors (the same dtype, rank and dim checks,
//! `tc::runtime::params::Binder`). The parsing, and every check of an
//! offset, size and count, is `tc_quant::gguf`'s; this module maps GGML
//! types to dtypes and keeps the file's bytes alive for the tensors.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tc_core::Dtype;
use tc_quant::gguf::{GgmlType, Gguf, TensorInfo, TensorTable};

pub use tc_quant::gguf::MetaValue;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The bytes of a GGUF file: read into memory, or mapped read-only.
enum Source {
    Owned(Vec<u8>),
    #[cfg(unix)]
    Mapped(Arc<crate::mapped::Mapping>),
}

/// A GGUF file whose header, metadata and tensor table parsed (any later
/// [`GgufFile::parse`] of the same bytes succeeds the same way).
pub struct GgufFile {
    source: Source,
    context: String,
    /// The tensor table of the one parse made at construction: tensors are
    /// found here, not by parsing again. A parse reads every metadata
    /// value (SmolLM2's 49,152 tokens and 48,900 merges, each checked as
    /// UTF-8), and a model that stacked its projections layer by layer
    /// parsed the file 60 times (SmolLM2's load: 0.48–0.51 s, now
    /// 0.10–0.11).
    table: TensorTable,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

fn gguf_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::Gguf(format!("{context}: {e}"))
}

/// The dtype of a GGML tensor type tc reads; `None` for the rest.
pub fn dtype_of(kind: GgmlType) -> Option<Dtype> {
    Some(match kind {
        GgmlType::F32 => Dtype::F32,
        GgmlType::F16 => Dtype::F16,
        GgmlType::BF16 => Dtype::BF16,
        GgmlType::Q8_0 => Dtype::Q8_0,
        GgmlType::Q4_0 => Dtype::Q4_0,
        GgmlType::Q4_1 => Dtype::Q4_1,
        GgmlType::Q4_K => Dtype::Q4_K,
        GgmlType::Q6_K => Dtype::Q6_K,
        GgmlType::Other(_) => return None,
    })
}

impl GgufFile {
    /// Parse `bytes` as a GGUF file (a typed error for anything malformed).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        GgufFile::checked(Source::Owned(bytes), "GGUF buffer".into())
    }

    /// Read and parse the file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile> {
        let context = path.as_ref().display().to_string();
        let bytes = std::fs::read(path.as_ref()).map_err(|e| gguf_err(&context, e))?;
        GgufFile::checked(Source::Owned(bytes), context)
    }

    /// Map the file at `path` read-only and parse it: its tensors are then
    /// views of the mapping where their bytes are whole aligned words, so a
    /// model costs its file's pages once, in the page cache. A file that
    /// cannot be mapped is read instead.
    ///
    /// # Safety
    /// As [`crate::load_safetensors_mapped`]: the file must not be written
    /// or truncated while this value or any tensor from it is alive.
    // SAFETY: (contract) met by the caller: see `# Safety`.
    pub unsafe fn map(path: impl AsRef<Path>) -> Result<GgufFile> {
        #[cfg(unix)]
        {
            let context = path.as_ref().display().to_string();
            let file = std::fs::File::open(path.as_ref()).map_err(|e| gguf_err(&context, e))?;
            let len = file.metadata().map_err(|e| gguf_err(&context, e))?.len();
            let len = usize::try_from(len).map_err(|_| gguf_err(&context, "file too large"))?;
            // SAFETY: the file stays as it is while mapped (this function's
            // contract, passed on).
            if let Ok(map) = unsafe { crate::mapped::Mapping::of(&file, len) } {
                return GgufFile::checked(Source::Mapped(Arc::new(map)), context);
            }
        }
        GgufFile::read(path)
    }

    fn checked(source: Source, context: String) -> Result<GgufFile> {
        let mut f = GgufFile {
            source,
            context,
            table: TensorTable::default(),
        };
        f.table = f.parse()?.table().clone();
        Ok(f)
    }

    /// The named tensor's description (from the table parsed once).
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.table.tensor(name)
    }

    /// Where the data section starts: a tensor's bytes lie at this plus
    /// its [`TensorInfo::offset`].
    pub fn data_offset(&self) -> usize {
        self.table.data_offset()
    }

    fn bytes(&self) -> &[u8] {
        match &self.source {
            Source::Owned(v) => v,
            #[cfg(unix)]
            Source::Mapped(m) => m.bytes(),
        }
    }

    /// The parsed file: metadata and tensor table, borrowing the bytes.
    pub fn parse(&self) -> Result<Gguf<'_>> {
        Gguf::parse(self.bytes()).map_err(|e| gguf_err(&self.context, e))
    }

    /// Every tensor, by name, in its row-major shape (GGUF `[ne0 = K,
    /// ne1 = N]` is `[N, K]`): views of a mapped file where they can be,
    /// copies otherwise. A tensor of a GGML type tc does not read, or whose
    /// shape breaks its blocks, is a typed error naming it.
    pub fn tensors(&self) -> Result<BTreeMap<String, Tensor>> {
        let mut out = BTreeMap::new();
        for info in self.table.tensors() {
            let t = self.tensor(info)?;
            out.insert(info.name.clone(), t);
        }
        Ok(out)
    }

    /// The rows of the named tensors stacked along their first axis, in
    /// the order given: `[N₀ + N₁ + …, K]` from tensors `[Nᵢ, K]` of one
    /// type and one row width (a layer's projections that share an input,
    /// so that one product computes them all). A block-quantized row is
    /// whole blocks, so the stack is their bytes one after another: a
    /// view of a mapped file where those bytes lie back to back in it, one
    /// copy otherwise. Typed errors: a missing name, mixed types or row
    /// widths, a tensor of rank other than 2, fewer than one name.
    pub fn stacked(&self, names: &[&str]) -> Result<Tensor> {
        let err = |msg: String| gguf_err(&self.context, msg);
        let mut parts = Vec::with_capacity(names.len());
        for name in names {
            let info = self
                .tensor_info(name)
                .ok_or_else(|| err(format!("tensor `{name}` is missing")))?;
            let shape = info.shape_row_major();
            if shape.len() != 2 {
                return Err(err(format!(
                    "tensor `{name}` has rank {}, not 2",
                    shape.len()
                )));
            }
            parts.push((info, shape, self.table.data(self.bytes(), info)));
        }
        let Some((first, first_shape, _)) = parts.first() else {
            return Err(err("stacking no tensors".into()));
        };
        let (kind, k) = (first.kind, first_shape[1]);
        let mut rows = 0usize;
        for (info, shape, _) in &parts {
            if info.kind != kind || shape[1] != k {
                return Err(err(format!(
                    "stacking `{}` ({}, rows of {}) with `{}` ({}, rows of {k})",
                    info.name, info.kind, shape[1], first.name, kind
                )));
            }
            rows = rows
                .checked_add(shape[0])
                .ok_or_else(|| err("the stacked rows overflow".into()))?;
        }
        let dt = dtype_of(kind)
            .ok_or_else(|| err(format!("GGML type {kind}, which tc does not read")))?;
        let shape = [rows, k];
        #[cfg(unix)]
        if let Source::Mapped(map) = &self.source {
            let base = self.bytes().as_ptr() as usize;
            let back_to_back = parts
                .windows(2)
                .all(|w| w[0].2.as_ptr_range().end == w[1].2.as_ptr());
            let (start, len) = (
                parts[0].2.as_ptr() as usize,
                parts.iter().map(|p| p.2.len()).sum(),
            );
            let view = back_to_back
                .then(|| start.checked_sub(base))
                .flatten()
                .and_then(|o| crate::mapped::Region::new(map, o, len))
                .and_then(|r| Tensor::from_mapped(dt, &shape, r));
            if let Some(t) = view {
                return Ok(t);
            }
        }
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.2.iter().copied()).collect();
        Tensor::from_raw(dt, &shape, bytes).map_err(|e| err(format!("stacking {names:?}: {e}")))
    }

    fn tensor(&self, info: &TensorInfo) -> Result<Tensor> {
        let dt = dtype_of(info.kind).ok_or_else(|| {
            gguf_err(
                &self.context,
                format!(
                    "tensor `{}` has GGML type {}, which tc does not read",
                    info.name, info.kind
                ),
            )
        })?;
        let shape = info.shape_row_major();
        let data = self.table.data(self.bytes(), info);
        #[cfg(unix)]
        if let Source::Mapped(map) = &self.source {
            let offset = (data.as_ptr() as usize).checked_sub(self.bytes().as_ptr() as usize);
            let view = offset
                .and_then(|o| crate::mapped::Region::new(map, o, data.len()))
                .and_then(|r| Tensor::from_mapped(dt, &shape, r));
            if let Some(t) = view {
                return Ok(t);
            }
        }
        Tensor::from_raw_slice(dt, &shape, data)
            .map_err(|e| gguf_err(&self.context, format!("tensor `{}`: {e}", info.name)))
    }
}
