//! Test helpers: a minimal GGUF writer for building files in memory.
//! Not a stable API.

use crate::gguf::MetaValue;

/// Builds a GGUF v3 file in memory, recording where its u64 count and
/// length fields lie so tests can corrupt them.
#[derive(Debug, Default)]
pub struct GgufWriter {
    kvs: Vec<u8>,
    n_kv: u64,
    alignment: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    explicit_offsets: Vec<Option<u64>>,
}

/// A written file and the offsets of its u64 count/length fields.
#[derive(Debug, Clone)]
pub struct Written {
    /// The file.
    pub bytes: Vec<u8>,
    /// Byte offsets of every u64 count, length or tensor offset field.
    pub u64_fields: Vec<usize>,
}

fn put_str(out: &mut Vec<u8>, fields: &mut Vec<usize>, s: &str) {
    fields.push(out.len());
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &MetaValue<'_>) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::Str(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, fields: &mut Vec<usize>, v: &MetaValue<'_>) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::Str(s) => put_str(out, fields, s),
        MetaValue::Array(items) => {
            // An empty array's element type is arbitrary; u8 is as good as any.
            let ty = items.first().map_or(0, type_id);
            out.extend_from_slice(&ty.to_le_bytes());
            fields.push(out.len());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, fields, item);
            }
        }
    }
}

impl GgufWriter {
    /// An empty file with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            alignment: 32,
            ..Default::default()
        }
    }

    /// Adds a key/value (field offsets are recorded at [`Self::finish`]).
    pub fn kv(&mut self, key: &str, v: MetaValue<'_>) -> &mut Self {
        let mut scratch = Vec::new();
        put_str(&mut self.kvs, &mut scratch, key);
        self.kvs.extend_from_slice(&type_id(&v).to_le_bytes());
        put_value(&mut self.kvs, &mut scratch, &v);
        self.n_kv += 1;
        self
    }

    /// Sets `general.alignment` (as u32) and pads to it.
    pub fn alignment(&mut self, a: u32) -> &mut Self {
        self.alignment = a.into();
        self.kv("general.alignment", MetaValue::U32(a))
    }

    /// Adds a tensor with GGUF-order dims, a ggml type id and its bytes,
    /// placed after the previous one at the next aligned offset.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, data: &[u8]) -> &mut Self {
        self.tensors
            .push((name.to_owned(), dims.to_vec(), ty, data.to_vec()));
        self.explicit_offsets.push(None);
        self
    }

    /// Like [`Self::tensor`] but with a forced (possibly bad) offset.
    pub fn tensor_at(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: u32,
        data: &[u8],
        offset: u64,
    ) -> &mut Self {
        self.tensor(name, dims, ty, data);
        *self.explicit_offsets.last_mut().expect("just pushed") = Some(offset);
        self
    }

    /// The file bytes and field offsets.
    pub fn finish(&self) -> Written {
        let a = self.alignment.max(1) as usize;
        let mut out = b"GGUF".to_vec();
        let mut fields = Vec::new();
        out.extend_from_slice(&3u32.to_le_bytes());
        fields.push(out.len());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        fields.push(out.len());
        out.extend_from_slice(&self.n_kv.to_le_bytes());
        let kv_start = out.len();
        out.extend_from_slice(&self.kvs);
        // Re-walk the kv bytes to record their u64 fields with absolute offsets.
        fields.extend(kv_fields(&self.kvs).into_iter().map(|o| o + kv_start));
        let mut offsets = Vec::new();
        let mut next = 0usize;
        for ((name, dims, ty, data), forced) in self.tensors.iter().zip(&self.explicit_offsets) {
            put_str(&mut out, &mut fields, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                fields.push(out.len());
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            let off = forced.unwrap_or(next as u64);
            offsets.push(off);
            fields.push(out.len());
            out.extend_from_slice(&off.to_le_bytes());
            next = (next + data.len()).next_multiple_of(a);
        }
        out.resize(out.len().next_multiple_of(a), 0);
        let data_start = out.len();
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            let at = data_start + off as usize;
            if out.len() < at + data.len() {
                out.resize(at + data.len(), 0);
            }
            out[at..at + data.len()].copy_from_slice(data);
        }
        if !self.tensors.is_empty() {
            out.resize(out.len().next_multiple_of(a), 0);
        }
        Written {
            bytes: out,
            u64_fields: fields,
        }
    }
}

/// Offsets of the u64 length/count fields inside encoded key/values.
fn kv_fields(kvs: &[u8]) -> Vec<usize> {
    let mut fields = Vec::new();
    let mut pos = 0;
    let u64_at = |p: usize| u64::from_le_bytes(kvs[p..p + 8].try_into().expect("8 bytes")) as usize;
    let u32_at = |p: usize| u32::from_le_bytes(kvs[p..p + 4].try_into().expect("4 bytes"));
    fn skip_value(
        pos: &mut usize,
        ty: u32,
        fields: &mut Vec<usize>,
        u64_at: &dyn Fn(usize) -> usize,
        u32_at: &dyn Fn(usize) -> u32,
    ) {
        match ty {
            0 | 1 | 7 => *pos += 1,
            2 | 3 => *pos += 2,
            4..=6 => *pos += 4,
            10..=12 => *pos += 8,
            8 => {
                fields.push(*pos);
                *pos += 8 + u64_at(*pos);
            }
            _ => {
                let ety = u32_at(*pos);
                *pos += 4;
                fields.push(*pos);
                let n = u64_at(*pos);
                *pos += 8;
                for _ in 0..n {
                    skip_value(pos, ety, fields, u64_at, u32_at);
                }
            }
        }
    }
    while pos < kvs.len() {
        fields.push(pos);
        pos += 8 + u64_at(pos);
        let ty = u32_at(pos);
        pos += 4;
        skip_value(&mut pos, ty, &mut fields, &u64_at, &u32_at);
    }
    fields
}
