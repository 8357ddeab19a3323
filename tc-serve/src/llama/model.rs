//! SmolLM2-135M (the Llama architecture) as tensor fns over its GGUF
//! weights: block-quantized projections read by `qmatmul` (the weights stay
//! in their Q4_1 / Q8_0 blocks, Section 2 §18), RMSNorm, RoPE, SwiGLU,
//! grouped-query attention over a KV cache, and the tied output head.
//!
//! The KV cache holds f32 by default ([`KvDtype::F32`]: what the token-exact
//! tests check). [`KvDtype::F16`] (llama.cpp's default) halves its memory:
//! keys and values are rounded to f16 (round to nearest even) when written,
//! and attention widens them back to f32 as it reads them. Greedy text may
//! then differ from the f32 cache's at a near-tie; `tests/smollm2.rs`
//! (`f16_kv_cache_agrees_within_its_bound`) states and checks the logits'
//! bound and the top-1 agreement, docs/models.md gives the measured figures.
//!
//! RoPE: GGUF files store the Q and K projection rows permuted for
//! llama.cpp's rotation of *adjacent* pairs `(x[2i], x[2i+1])`; the model
//! applies that rotation to the weights as stored (no permutation is
//! undone at load). Hugging Face's checkpoints rotate the two halves
//! instead; `rotate_halves` is that layout, for weights in that order.

use tc::{tensor_module, Tensor};

#[tensor_module]
pub mod llama {
    use tc::{Dim, Tensor};

    /// Model width.
    pub const D: usize = 576;
    /// Query heads.
    pub const H: usize = 9;
    /// Key/value heads (grouped-query attention: `H / KV` queries share one).
    pub const KV: usize = 3;
    /// Query heads per key/value head.
    pub const G: usize = 3;
    /// Head width.
    pub const HD: usize = 64;
    /// Half a head: RoPE's rotated pairs.
    pub const HALF: usize = 32;
    /// Key/value projection width (`KV · HD`).
    pub const KVD: usize = 192;
    /// Feed-forward width.
    pub const F: usize = 1536;
    /// Rows of the stacked query and value projections (`D + KVD`).
    pub const QV: usize = 768;
    /// Rows of the stacked gate and up projections (`2 · F`).
    pub const F2: usize = 3072;

    /// The token embedding (also the output head: tied) and the final norm.
    #[tensor_params]
    pub struct Globals {
        #[tensor_name = "token_embd.weight"]
        pub embd: Tensor![q8_0; V, D],
        #[tensor_name = "output_norm.weight"]
        pub norm: Tensor![f32; D],
    }

    /// One decoder layer's weights, in GGUF's `[out, in]` row-major order.
    #[tensor_params]
    pub struct Layer {
        #[tensor_name = "attn_norm.weight"]
        pub attn_norm: Tensor![f32; D],
        #[tensor_name = "attn_q.weight"]
        pub wq: Tensor![q4_1; D, D],
        #[tensor_name = "attn_k.weight"]
        pub wk: Tensor![q4_1; KVD, D],
        #[tensor_name = "attn_v.weight"]
        pub wv: Tensor![q4_1; KVD, D],
        #[tensor_name = "attn_output.weight"]
        pub wo: Tensor![q4_1; D, D],
        #[tensor_name = "ffn_norm.weight"]
        pub ffn_norm: Tensor![f32; D],
        #[tensor_name = "ffn_gate.weight"]
        pub gate: Tensor![q4_1; F, D],
        #[tensor_name = "ffn_up.weight"]
        pub up: Tensor![q4_1; F, D],
        #[tensor_name = "ffn_down.weight"]
        pub down: Tensor![q4_1; D, F],
    }

    /// One decoder layer's weights as the tensor fns read them: `Layer`'s,
    /// with projections that share an input stacked into one weight, so
    /// that one product computes them (the activations quantized once, one
    /// pass over the rows): the queries' and values' (`wqv`, `[QV, D]`),
    /// the gate's and up's (`gate_up`, `[F2, D]`). Each output column is
    /// computed as its own projection computes it, so the results are
    /// those of the separate products, bit for bit. Stacked at load
    /// ([`super::Model::load`]: views of the file where the rows lie back
    /// to back in it), not read by name.
    #[tensor_params]
    pub struct Block {
        pub attn_norm: Tensor![f32; D],
        pub wqv: Tensor![q4_1; QV, D],
        pub wk: Tensor![q4_1; KVD, D],
        pub wo: Tensor![q4_1; D, D],
        pub ffn_norm: Tensor![f32; D],
        pub gate_up: Tensor![q4_1; F2, D],
        pub down: Tensor![q4_1; D, F],
    }

    /// RMSNorm (ε = 1e-5): `x / √(mean(x²) + ε) · w`.
    #[tensor_fn]
    pub fn rms_norm(x: Tensor![f32; B, S, D], w: Tensor![f32; D]) -> Tensor![f32; B, S, D] {
        let inv = rsqrt(mean_keepdims(x * x, [2]) + 1e-5);
        x * broadcast(inv, [B, S, D]) * broadcast(w, [B, S, D])
    }

    /// RoPE on adjacent pairs (llama.cpp's layout, which GGUF's Q/K rows
    /// are permuted for): pair `(x[2i], x[2i+1])` of each head turns by
    /// the angle whose cosine and sine are `cos[s, i]`, `sin[s, i]`. The
    /// `rope_pairs` op (Section 2 §18) reads each pair where it lies, so
    /// no axis is split or copied.
    #[tensor_fn]
    pub fn rotate_pairs(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let c = broadcast(reshape(cos, [1, S, 1, HALF]), [B, S, N, HALF]);
        let s = broadcast(reshape(sin, [1, S, 1, HALF]), [B, S, N, HALF]);
        rope_pairs(x, c, s)
    }

    /// RoPE on halves (Hugging Face's layout): element `i < HD/2` pairs
    /// with `i + HD/2`.
    #[tensor_fn]
    pub fn rotate_halves(
        x: Tensor![f32; B, S, N, HD],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, N, HD] {
        let c = broadcast(reshape(cos, [1, S, 1, HALF]), [B, S, N, HALF]);
        let s = broadcast(reshape(sin, [1, S, 1, HALF]), [B, S, N, HALF]);
        rope_halves(x, c, s)
    }

    /// The attention input: the layer's normed residual stream.
    #[tensor_fn]
    pub fn attn_input(x: Tensor![f32; B, S, D], l: Block) -> Tensor![f32; B, S, D] {
        rms_norm(x, l.attn_norm)
    }

    /// The query and value projections in one product (`l.wqv`'s rows:
    /// the queries' `D`, then the values' `KVD`), for [`queries`] and
    /// [`values`] to take apart.
    #[tensor_fn]
    pub fn queries_values(xn: Tensor![f32; B, S, D], l: Block) -> Tensor![f32; B, S, QV] {
        qmatmul(xn, l.wqv)
    }

    /// The rotated queries: the first `D` columns of [`queries_values`].
    #[tensor_fn]
    pub fn queries(
        qv: Tensor![f32; B, S, QV],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
    ) -> Tensor![f32; B, S, D] {
        let q = reshape(slice(qv, 2, 0, D), [B, S, H, HD]);
        reshape(rotate_pairs(q, cos, sin), [B, S, D])
    }

    /// The rotated keys, as the cache holds them: per key/value head, the
    /// head dim major and the positions along the last axis (`[B, KV, HD,
    /// S]`), so that the scores' product reads the cached keys as a
    /// row-major `HD × T` right operand (its rows are positions' slices
    /// of one head dim), the layout the products read in place or pack
    /// with plain row copies, instead of a transposed one that each call
    /// transposed 16 × 16 at a time (`transpose16`, 12–15% of a 16-row
    /// decode step's samples).
    #[tensor_fn]
    pub fn keys(
        xn: Tensor![f32; B, S, D],
        cos: Tensor![f32; S, HALF],
        sin: Tensor![f32; S, HALF],
        l: Block,
    ) -> Tensor![f32; B, KV, HD, S] {
        let k = reshape(qmatmul(xn, l.wk), [B, S, KV, HD]);
        transpose(rotate_pairs(k, cos, sin), [0, 2, 3, 1])
    }

    /// The values, head-major: the last `KVD` columns of
    /// [`queries_values`].
    #[tensor_fn]
    pub fn values(qv: Tensor![f32; B, S, QV]) -> Tensor![f32; B, KV, S, HD] {
        transpose(reshape(slice(qv, 2, D, QV), [B, S, KV, HD]), [0, 2, 1, 3])
    }

    /// Causal grouped-query attention of the S new positions over the
    /// first T of the cache's C positions (`mask`: 0 where allowed, −1e30
    /// where not, its S rows repeated for each of the G query heads of a
    /// group). Each key/value head serves its `G` query heads as one
    /// fused attention (`sdpa`, docs/syntax.md §12f): their `G · S` query
    /// rows stacked against the head's keys and values, read in place from
    /// the cache (its first T positions), so the cache is never copied per
    /// query head and no score or probability tensor is written.
    #[tensor_fn(requires(T <= C))]
    pub fn attention(
        q: Tensor![f32; B, S, D],
        kc: Tensor![f32; B, KV, HD, C],
        vc: Tensor![f32; B, KV, C, HD],
        t: Dim![T],
        mask: Tensor![f32; G * S, T],
    ) -> Tensor![f32; B, S, D] {
        let q4 = reshape(
            transpose(reshape(q, [B, S, H, HD]), [0, 2, 1, 3]),
            [B, KV, G * S, HD],
        );
        let k = slice(kc, 3, 0, T);
        let v = slice(vc, 2, 0, T);
        let m = broadcast(reshape(mask, [1, 1, G * S, T]), [B, KV, G * S, T]);
        let ctx = reshape(sdpa(q4, k, v, m, 0.125), [B, H, S, HD]);
        reshape(transpose(ctx, [0, 2, 1, 3]), [B, S, D])
    }

    /// `attention` over an f16 cache ([`super::KvDtype::F16`]): `sdpa`
    /// reads the f16 keys and values where they lie and widens them as it
    /// reads (exactly: every f16 is an f32), so the cache is read at half
    /// the bytes and nothing is converted into a buffer of its own. The
    /// body is `attention`'s; the cache's dtype is part of the signature.
    #[tensor_fn(requires(T <= C))]
    pub fn attention_f16(
        q: Tensor![f32; B, S, D],
        kc: Tensor![f16; B, KV, HD, C],
        vc: Tensor![f16; B, KV, C, HD],
        t: Dim![T],
        mask: Tensor![f32; G * S, T],
    ) -> Tensor![f32; B, S, D] {
        let q4 = reshape(
            transpose(reshape(q, [B, S, H, HD]), [0, 2, 1, 3]),
            [B, KV, G * S, HD],
        );
        let k = slice(kc, 3, 0, T);
        let v = slice(vc, 2, 0, T);
        let m = broadcast(reshape(mask, [1, 1, G * S, T]), [B, KV, G * S, T]);
        let ctx = reshape(sdpa(q4, k, v, m, 0.125), [B, H, S, HD]);
        reshape(transpose(ctx, [0, 2, 1, 3]), [B, S, D])
    }

    /// Keys (`[B, KV, HD, S]`) or values (`[B, KV, S, HD]`) rounded to f16
    /// for an f16 cache (Section 2 §5's cast: round to nearest even).
    #[tensor_fn]
    pub fn to_f16(x: Tensor![f32; B, KV, P, Q]) -> Tensor![f16; B, KV, P, Q] {
        cast::<f16>(x)
    }

    /// The rest of a layer after attention: the output projection of the
    /// attention context `ctx` and its residual, then the SwiGLU
    /// feed-forward (`down(silu(gate(x)) · up(x))`) and its residual. Kept
    /// apart from attention so that a batched decode step runs it once over
    /// every sequence's row (the weight matmuls see all rows) while each
    /// sequence attends to its own cache. The gate and up projections are
    /// one product (`l.gate_up`: the gate's `F` rows, then up's), read
    /// apart in place.
    #[tensor_fn]
    pub fn mix(
        x: Tensor![f32; B, S, D],
        ctx: Tensor![f32; B, S, D],
        l: Block,
    ) -> Tensor![f32; B, S, D] {
        let h = x + qmatmul(ctx, l.wo);
        let hn = rms_norm(h, l.ffn_norm);
        let gu = qmatmul(hn, l.gate_up);
        let g = slice(gu, 2, 0, F);
        h + qmatmul(g * sigmoid(g) * slice(gu, 2, F, F2), l.down)
    }

    /// Token embeddings: rows of the Q8_0 table, gathered as blocks, then
    /// dequantized.
    #[tensor_fn]
    pub fn embed(g: Globals, ids: Tensor![i64; B, S]) -> Tensor![f32; B, S, D] {
        dequantize(gather(g.embd, ids))
    }

    /// Token embeddings from their rows of the Q8_0 table, copied out by
    /// the model ([`super::Model`]'s `embedding_rows`), dequantized: the
    /// values `embed` gives for the same ids.
    #[tensor_fn]
    pub fn embed_rows(rows: Tensor![q8_0; B, S, D]) -> Tensor![f32; B, S, D] {
        dequantize(rows)
    }

    /// Logits of the last position through the tied head (the embedding).
    #[tensor_fn]
    pub fn logits(x: Tensor![f32; B, S, D], g: Globals) -> Tensor![f32; B, V] {
        let last = slice(rms_norm(x, g.norm), 1, S - 1, S);
        qmatmul(reshape(last, [B, D]), g.embd)
    }
}

/// What the KV cache stores: f32 (the default) or f16 (half the memory;
/// logits within the bound `tests/smollm2.rs` states).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    /// Keys and values as computed.
    #[default]
    F32,
    /// Keys and values rounded to f16 (round to nearest even) when written.
    F16,
}

impl KvDtype {
    /// The cache tensors' dtype.
    pub fn dtype(self) -> tc::core::Dtype {
        match self {
            KvDtype::F32 => tc::core::Dtype::F32,
            KvDtype::F16 => tc::core::Dtype::F16,
        }
    }

    /// Bytes per cached element.
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }
}

impl std::str::FromStr for KvDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(KvDtype::F32),
            "f16" => Ok(KvDtype::F16),
            other => Err(format!("a KV cache holds f32 or f16, not `{other}`")),
        }
    }
}

/// The model's weights: globals and layers, views of the mapped GGUF file.
pub struct Model {
    /// Embedding / output head and final norm.
    pub globals: llama::Globals,
    /// The decoder layers.
    pub layers: Vec<llama::Block>,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Positions the model was trained for.
    pub context: usize,
    /// What the caches [`Model::cache`] makes store (f32 unless set after
    /// loading); [`Model::cache_bytes`] counts in it. A step writes its
    /// keys and values in this type: a cache of another type is refused
    /// (the typed dtype error of `update_slice`).
    pub kv_dtype: KvDtype,
    /// The file, for what is read from it by offset.
    rows: Rows,
}

/// Reads of the model file by offset (`pread`), beside its mapping: the
/// token embedding's rows for each step, and the norms once at load.
///
/// Why not through the mapping: under fast numerics the quantized weights
/// are read from packed copies and their file pages are given back
/// ([`Model::prepack_quantized`]), and a read of a few bytes through the
/// mapping maps back 64 KiB to 2 MiB of the file around them (fault-around,
/// or a large folio of the page cache mapped whole): 61 norms and the rows
/// of a prompt brought 43 MiB of packed weights' pages back, resident a
/// second time. A read by offset copies from the page cache and maps
/// nothing. A file cut short meanwhile makes it fail, not fault.
struct Rows {
    file: std::fs::File,
    /// File offset of the token embedding's first row.
    embd_at: u64,
    /// Bytes per embedding row.
    embd_row: usize,
}

impl Rows {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
        }
        #[cfg(not(unix))]
        {
            use std::io::{Read, Seek};
            let mut f = &self.file;
            f.seek(std::io::SeekFrom::Start(offset))?;
            f.read_exact(buf)
        }
    }
}

/// Layer `l`'s weights as the tensor fns read them ([`llama::Block`]):
/// the file's tensors checked as [`llama::Layer`] declares them, then the
/// projections that share an input stacked (views of the file where they
/// lie back to back, as llama.cpp's converter writes the query and value
/// projections, and the gate and up ones).
fn block(
    file: &tc::runtime::gguf::GgufFile,
    w: &std::collections::BTreeMap<String, Tensor>,
    l: usize,
) -> Result<llama::Block, Box<dyn std::error::Error>> {
    let at = format!("blk.{l}");
    let layer = llama::Layer::load(w, &at)?;
    let name = |n: &str| format!("{at}.{n}.weight");
    let stack = |a: &str, b: &str| file.stacked(&[&name(a), &name(b)]);
    Ok(llama::Block {
        attn_norm: layer.attn_norm,
        wqv: stack("attn_q", "attn_v")?,
        wk: layer.wk,
        wo: layer.wo,
        ffn_norm: layer.ffn_norm,
        gate_up: stack("ffn_gate", "ffn_up")?,
        down: layer.down,
    })
}

/// Hyper-parameters the tensor fns fix as constants, checked against the
/// file's metadata so another Llama's GGUF is refused, not misread.
fn check_hparams(
    g: &tc::runtime::gguf::GgufFile,
) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    let p = g.parse()?;
    let arch = p.str("general.architecture")?;
    if arch != "llama" {
        return Err(format!("architecture `{arch}`: this model is a llama").into());
    }
    let want = [
        ("llama.embedding_length", llama::D),
        ("llama.feed_forward_length", llama::F),
        ("llama.attention.head_count", llama::H),
        ("llama.attention.head_count_kv", llama::KV),
    ];
    for (key, v) in want {
        let found = p.u32(key)? as usize;
        if found != v {
            return Err(format!("{key} = {found}; the tensor fns are written for {v}").into());
        }
    }
    let eps = p.f32("llama.attention.layer_norm_rms_epsilon")?;
    if eps != 1e-5 {
        return Err(format!("RMSNorm ε = {eps}; the tensor fns use 1e-5").into());
    }
    let theta = p.f32("llama.rope.freq_base").unwrap_or(10000.0) as f64;
    let context = p.u32("llama.context_length")? as usize;
    Ok((theta, context))
}

impl Model {
    /// Load from a GGUF file (mapped: the tensors are views of the file).
    pub fn load(
        path: &std::path::Path,
    ) -> Result<(Model, tc::runtime::gguf::GgufFile), Box<dyn std::error::Error>> {
        // SAFETY: model files are not written while a model is loaded
        // (scripts/fetch-smollm2.sh publishes the file once, atomically).
        let file = unsafe { tc::runtime::gguf::GgufFile::map(path)? };
        let (rope_theta, context) = check_hparams(&file)?;
        let w = file.tensors()?;
        let mut globals = llama::Globals::load(&w, "")?;
        let mut layers = (0..)
            .take_while(|l| w.contains_key(&format!("blk.{l}.attn_norm.weight")))
            .map(|l| block(&file, &w, l))
            .collect::<Result<Vec<_>, _>>()?;
        let at = |name: &str| -> Result<(u64, usize), Box<dyn std::error::Error>> {
            let info = file
                .tensor_info(name)
                .ok_or_else(|| format!("tensor `{name}` is missing"))?;
            Ok((file.data_offset() as u64 + info.offset, info.nbytes))
        };
        let (embd_at, embd_bytes) = at("token_embd.weight")?;
        let rows = Rows {
            file: std::fs::File::open(path)?,
            embd_at,
            embd_row: embd_bytes / globals.embd.shape()[0].max(1),
        };
        // The norms are read from the file (see `Rows`).
        let read = |name: &str, t: &Tensor| -> Result<Tensor, Box<dyn std::error::Error>> {
            let (offset, n) = at(name)?;
            let mut buf = vec![0u8; n];
            rows.read_at(&mut buf, offset)?;
            Ok(Tensor::from_raw(t.dtype(), t.shape(), buf)?)
        };
        globals.norm = read("output_norm.weight", &globals.norm)?;
        for (i, l) in layers.iter_mut().enumerate() {
            l.attn_norm = read(&format!("blk.{i}.attn_norm.weight"), &l.attn_norm)?;
            l.ffn_norm = read(&format!("blk.{i}.ffn_norm.weight"), &l.ffn_norm)?;
        }
        Ok((
            Model {
                globals,
                layers,
                rope_theta,
                context,
                kv_dtype: KvDtype::default(),
                rows,
            },
            file,
        ))
    }

    /// Packs every quantized weight for fast numerics now (the JIT would
    /// on its first product with each): load time, not the first
    /// request, pays for it. Returns how many weights were packed; 0 on a
    /// host without the packed kernels, where products read the blocks as
    /// they lie.
    pub fn prepack_quantized(&self) -> usize {
        let globals = [&self.globals.embd];
        let layers = self
            .layers
            .iter()
            .flat_map(|l| [&l.wqv, &l.wk, &l.wo, &l.gate_up, &l.down]);
        globals
            .into_iter()
            .chain(layers)
            .filter(|t| tc::llvm::kernels::prepack::quant::prepack(t))
            .count()
    }

    /// `ids`' rows of the token embedding as a `[1, S, D]` Q8_0 tensor,
    /// the bytes `llama::embed`'s gather would copy, read from the file
    /// ([`Rows`]).
    fn embedding_rows(&self, ids: &[u32]) -> Result<Tensor, tc::Error> {
        let e = &self.globals.embd;
        let (v, d) = (e.shape()[0], e.shape()[1]);
        let row = self.rows.embd_row;
        let mut out = vec![0u8; ids.len() * row];
        for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(row.max(1))) {
            let i = id as u64;
            if i >= v as u64 {
                return Err(tc::Error::malformed(format!(
                    "token id {id} is outside the vocabulary of {v}"
                )));
            }
            self.rows
                .read_at(dst, self.rows.embd_at + i * row as u64)
                .map_err(|err| {
                    tc::Error::malformed(format!("reading embedding row {id}: {err}"))
                })?;
        }
        Tensor::from_raw(e.dtype(), &[1, ids.len(), d], out)
    }

    /// cos and sin rows `[S, HD/2]` of positions `start..start + s`,
    /// appended to `cos` and `sin`: the angles in f64 (`pos · θ^(−2i/HD)`),
    /// rounded once to f32.
    fn rope_rows(&self, start: usize, s: usize, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
        for p in start..start + s {
            for i in 0..llama::HALF {
                let inv = 1.0 / self.rope_theta.powf((2 * i) as f64 / llama::HD as f64);
                let a = p as f64 * inv;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
    }

    /// An empty KV cache for `capacity` positions, of [`Model::kv_dtype`]:
    /// one (keys, values) pair per layer: keys `[1, KV, HD, capacity]`
    /// (positions along the last axis, as [`llama::keys`] makes them),
    /// values `[1, KV, capacity, HD]`.
    /// Its pages cost memory once written: zeroed memory the allocator had
    /// to clear is given back ([`Tensor::release_zero_pages`]), so the
    /// values' positions still to come are not resident. The keys' first
    /// position touches every head dim's run of `capacity` floats, so a
    /// keys tensor is resident from its first write on wherever a run is
    /// shorter than a page (`capacity` under 1,024 f32 positions).
    pub fn cache(&self, capacity: usize) -> Result<Vec<(Tensor, Tensor)>, tc::Error> {
        let zeros = |room: &[usize]| Tensor::try_zeros(self.kv_dtype.dtype(), room);
        let (keys, values) = (
            [1, llama::KV, llama::HD, capacity],
            [1, llama::KV, capacity, llama::HD],
        );
        let mut cache = (0..self.layers.len())
            .map(|_| Ok((zeros(&keys)?, zeros(&values)?)))
            .collect::<Result<Vec<_>, tc::Error>>()?;
        Tensor::release_zero_pages_of(cache.iter_mut().flat_map(|(k, v)| [k, v]));
        Ok(cache)
    }

    /// Compile, or link from the kernel cache, every kernel that generating
    /// from a `prompt`-token prompt into `cache` runs (its prefill, then
    /// its decode steps), computing nothing ([`tc::llvm::dry_run`]): no
    /// weight is read. It writes zeros into `cache`'s first `prompt + 1`
    /// positions, which generation writes before it reads them. Nothing to
    /// do on the interpreter.
    pub fn prepare(&self, cache: &mut [(Tensor, Tensor)], prompt: usize) -> Result<(), tc::Error> {
        if tc::backend() != tc::Backend::Jit || prompt == 0 {
            return Ok(());
        }
        let room = cache.first().map_or(0, |(_, v)| v.shape()[2]);
        // `dry_run` covers the calls made on this thread, and those the
        // pass hands to the pool's workers through a `tc::CallContext`
        // (`keys_beside`, `attend_all`): every call compiles, none computes.
        tc::llvm::dry_run(|| {
            self.forward_pass(cache, &vec![0; prompt], 0)?;
            if room > prompt {
                self.step_pass(&mut [StepSeq {
                    cache,
                    tokens: &[0],
                    pos: prompt,
                }])?;
            }
            Ok(())
        })
    }

    /// Get ready to generate from a `prompt`-token prompt into `cache`
    /// with the least memory resident: every kernel compiled or linked
    /// first ([`Model::prepare`]), before any weight is read, then what
    /// only setup touched given back ([`tc::runtime::resident`]): the code
    /// pages of `libLLVM` and the rest of the process's code, the GGUF
    /// metadata's pages, the heap that setup freed (the tokenizer's build,
    /// the compiler's); under fast numerics (the JIT's `fast_quant`), the
    /// quantized weights are packed after that
    /// ([`Model::prepack_quantized`]), not before. What stays resident
    /// while generating is then the weights (once), the KV cache and what
    /// the steps use.
    ///
    /// # Safety
    /// As [`tc::runtime::resident::release_file_pages`]: while it runs, no
    /// thread may unmap a file mapping (a `dlclose`, dropping another
    /// mapped model) or write to a private one (a library that `dlopen` is
    /// loading, a debugger's breakpoint).
    // SAFETY: (contract) an `unsafe fn`: its callers uphold `# Safety` above.
    pub unsafe fn get_ready(
        &self,
        cache: &mut [(Tensor, Tensor)],
        prompt: usize,
    ) -> Result<Ready, tc::Error> {
        self.prepare(cache, prompt)?;
        // What compiling kept for the next compilation (the per-thread
        // target machines), when it compiled: the run compiles no more.
        tc::llvm::release_target_machines();
        // SAFETY: this function's contract, passed on.
        let mut released = unsafe { tc::runtime::resident::release_file_pages() }.bytes;
        tc::runtime::resident::trim_heap();
        let t_packing = std::time::Instant::now();
        // Packed for fast numerics only now: the packed weights are as
        // large as the file's, and packed before the compiler's pages were
        // given back, the two would have been resident together.
        if tc::llvm::Jit::global().config().options.fast_quant && self.prepack_quantized() > 0 {
            // What the packing read of the file and left mapped (the
            // pages a packed weight shares with its neighbours).
            // SAFETY: as above.
            released += unsafe { tc::runtime::resident::release_file_pages() }.bytes;
        }
        let packing_s = t_packing.elapsed().as_secs_f64();
        tc::runtime::resident::trim_heap();
        Ok(Ready {
            released,
            packing_s,
        })
    }

    /// One forward pass of `ids` at positions `start..`, writing their keys
    /// and values into `cache`; the logits `[1, V]` of the last position.
    /// A one-sequence [`Model::step`].
    pub fn forward(
        &self,
        cache: &mut [(Tensor, Tensor)],
        ids: &[u32],
        start: usize,
    ) -> Result<Tensor, tc::Error> {
        tc::session(|| self.forward_pass(cache, ids, start))
    }

    fn forward_pass(
        &self,
        cache: &mut [(Tensor, Tensor)],
        ids: &[u32],
        start: usize,
    ) -> Result<Tensor, tc::Error> {
        self.step_pass(&mut [StepSeq {
            cache,
            tokens: ids,
            pos: start,
        }])
    }
}

/// What [`Model::get_ready`] did.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    /// Bytes of file pages given back.
    pub released: usize,
    /// Seconds spent packing the weights for fast numerics (0 otherwise):
    /// load time, which a timed prefill leaves out.
    pub packing_s: f64,
}

/// One sequence's part in a batched step ([`Model::step`]).
pub struct StepSeq<'a> {
    /// Its KV cache (one `(keys, values)` pair per layer), room for
    /// `pos + tokens.len()`.
    pub cache: &'a mut [(Tensor, Tensor)],
    /// The tokens to feed: one for a decode step, a prompt's chunk for a
    /// prefill.
    pub tokens: &'a [u32],
    /// Its position (the number of positions already in the cache).
    pub pos: usize,
}

impl Model {
    /// One forward pass of several sequences at once, each feeding its own
    /// tokens at its own positions: decode steps (one token each) and
    /// prefill chunks together. The sequences' rows are stacked as the `S`
    /// axis of one `[1, R, D]` activation, so every weight matmul
    /// (`qmatmul`) sees all R rows; RoPE takes each row's own position (the
    /// cos/sin tables are per row); attention runs per sequence against
    /// its own cache, over exactly its own length with its own causal mask
    /// (ragged: no padding to the longest), the sequences in parallel on
    /// the pool. Returns the logits `[N, V]` of each sequence's last row,
    /// row i for sequence i.
    ///
    /// Each row is computed as a one-sequence pass computes it: the
    /// row-wise ops are independent of the row count, and the quantized
    /// matmul's kernels compute every row with the same sequence of steps
    /// whatever the number of rows (`tests/batching.rs` checks the bits).
    pub fn step(&self, seqs: &mut [StepSeq<'_>]) -> Result<Tensor, tc::Error> {
        tc::session(|| self.step_pass(seqs))
    }

    fn step_pass(&self, seqs: &mut [StepSeq<'_>]) -> Result<Tensor, tc::Error> {
        use llama::{D, HALF};
        let mut ids = Vec::new();
        let mut cos = Vec::new();
        let mut sin = Vec::new();
        let mut parts = Vec::with_capacity(seqs.len());
        for q in seqs.iter_mut() {
            let s = q.tokens.len();
            if s == 0 {
                return Err(tc::Error::malformed("a step of a sequence with no tokens"));
            }
            self.rope_rows(q.pos, s, &mut cos, &mut sin);
            parts.push(Part {
                row: ids.len(),
                rows: s,
                pos: q.pos,
                mask: mask(s, q.pos + s)?,
                cache: &mut *q.cache,
            });
            ids.extend_from_slice(q.tokens);
        }
        let r = ids.len();
        let mut x = llama::embed_rows(self.embedding_rows(&ids)?)?;
        let cos = Tensor::from_vec(&[r, HALF], cos)?;
        let sin = Tensor::from_vec(&[r, HALF], sin)?;
        for (li, l) in self.layers.iter().enumerate() {
            let xn = llama::attn_input(x.clone(), l)?;
            let qv = llama::queries_values(xn.clone(), l)?;
            let (k, qv) = self.keys_beside(xn, qv, &cos, &sin, l)?;
            let (q, v) = qv;
            let rows = LayerRows { n: r, q, k, v };
            let ctx = attend_all(&mut parts, li, &rows)?;
            x = llama::mix(x, ctx, l)?;
        }
        if r > parts.len() {
            // A prefill's intermediates, which the storage pool keeps for
            // a next pass of the same length (7 MB for 128 tokens), are no
            // use to the decode steps after it (theirs are too small to
            // pool): given back before the output head reads the
            // embedding, the last of the weights to become resident, they
            // do not add to the peak resident set.
            tc::runtime::pool::clear();
            tc::runtime::resident::trim_heap();
        }
        // `[N, 1, D]`: each sequence's last row.
        let xs = x.as_slice::<f32>()?;
        let mut last = Vec::with_capacity(parts.len() * D);
        for p in &parts {
            let at = (p.row + p.rows - 1) * D;
            last.extend_from_slice(&xs[at..at + D]);
        }
        llama::logits(Tensor::from_vec(&[parts.len(), 1, D], last)?, &self.globals)
    }

    /// Bytes of a KV cache of [`Model::kv_dtype`] with room for `capacity`
    /// positions.
    pub fn cache_bytes(&self, capacity: usize) -> usize {
        2 * self.layers.len() * llama::KV * capacity * llama::HD * self.kv_dtype.bytes()
    }

    /// `cache` moved into a larger one with room for `capacity` positions
    /// (its first positions copied over).
    pub fn grow_cache(
        &self,
        cache: &[(Tensor, Tensor)],
        capacity: usize,
    ) -> Result<Vec<(Tensor, Tensor)>, tc::Error> {
        let mut bigger = self.cache(capacity)?;
        for ((nk, nv), (k, v)) in bigger.iter_mut().zip(cache) {
            nk.update_slice(KEY_POS, 0, k)?;
            nv.update_slice(VALUE_POS, 0, v)?;
        }
        Ok(bigger)
    }
}

/// Rows of a step from which [`Model::keys_beside`] hands the queries'
/// rotation to the other worker (16 rows: 12 µs of it a layer; one row:
/// about 1 µs, less than the hand-off).
const BESIDE_ROWS: usize = 8;

/// The axis of a cached keys tensor (`[1, KV, HD, C]`) and of a cached
/// values tensor (`[1, KV, C, HD]`) along which the positions lie.
const KEY_POS: usize = 3;
const VALUE_POS: usize = 2;

impl Model {
    /// A layer's cached keys (its key projection, rotated), and beside
    /// them on the pool's other worker its rotated queries and cached
    /// values from `qv`. The keys' product splits across the pool; the
    /// queries' rotation and the values' rounding are a few µs each, which
    /// the other worker computes meanwhile instead of the product waiting
    /// for them (or them for it). Below [`BESIDE_ROWS`] rows they are too
    /// small to pay for the hand-off: one after the other on this thread.
    /// Results never depend on where they ran.
    #[allow(clippy::type_complexity)]
    fn keys_beside(
        &self,
        xn: Tensor,
        qv: Tensor,
        cos: &Tensor,
        sin: &Tensor,
        l: &llama::Block,
    ) -> Result<(Tensor, (Tensor, Tensor)), tc::Error> {
        let keys = || self.as_cached(llama::keys(xn, cos.clone(), sin.clone(), l)?);
        let queries_values = || {
            let q = llama::queries(qv.clone(), cos.clone(), sin.clone())?;
            Ok::<_, tc::Error>((q, self.as_cached(llama::values(qv.clone())?)?))
        };
        if cos.shape().first().is_none_or(|&rows| rows < BESIDE_ROWS) {
            return Ok((keys()?, queries_values()?));
        }
        // Both sides carry the caller's context: called outside the pool
        // (a warm-up's dry run), `join` runs both on its workers.
        let cx = tc::CallContext::here();
        let (k, qv) = rayon::join(
            || cx.enter(keys),
            || cx.enter(|| tc::llvm::team::serial(queries_values)),
        );
        Ok((k?, qv?))
    }

    /// A step's keys or values (f32) in the cache's element type: rounded
    /// to f16 for an f16 cache (`llama::to_f16`), once for all of the
    /// step's rows, whose sequences then copy their own positions.
    fn as_cached(&self, x: Tensor) -> Result<Tensor, tc::Error> {
        match self.kv_dtype {
            KvDtype::F16 => llama::to_f16(x),
            KvDtype::F32 => Ok(x),
        }
    }
}

/// One sequence's rows in a step ([`Model::step`]).
struct Part<'a> {
    /// Its first row among the step's rows, and how many it has.
    row: usize,
    rows: usize,
    /// Positions already in its cache.
    pos: usize,
    /// Its causal mask ([`mask`]).
    mask: Tensor,
    cache: &'a mut [(Tensor, Tensor)],
}

/// A layer's queries `[1, R, D]`, keys `[1, KV, HD, R]` and values
/// `[1, KV, R, HD]` for the step's `n` rows, the keys and values in the
/// cache's element type ([`Model::as_cached`]).
struct LayerRows {
    n: usize,
    q: Tensor,
    k: Tensor,
    v: Tensor,
}

impl Part<'_> {
    /// This sequence's keys and values written into its layer-`li` cache,
    /// then its queries' attention over the cache: its rows of the
    /// attention context `[1, rows, D]`.
    fn attend(&mut self, li: usize, all: &LayerRows) -> Result<Tensor, tc::Error> {
        use llama::D;
        let (row, s) = (self.row, self.rows);
        let (kc, vc) = self
            .cache
            .get_mut(li)
            .ok_or_else(|| tc::Error::malformed("a cache without this layer"))?;
        // This sequence's positions of the step's keys and values (its `s`
        // rows from `row` on), copied into its cache where they go: no
        // tensor of its own rows in between.
        kc.update_slice_from(KEY_POS, self.pos, &all.k, row..row + s)?;
        vc.update_slice_from(VALUE_POS, self.pos, &all.v, row..row + s)?;
        let q = if s == all.n {
            all.q.clone()
        } else {
            Tensor::from_slice(
                &[1, s, D],
                &all.q.as_slice::<f32>()?[row * D..(row + s) * D],
            )?
        };
        attend(q, kc, vc, self.pos + s, self.mask.clone())
    }
}

/// Every sequence's attention for layer `li` ([`Part::attend`]), their
/// contexts stacked in row order `[1, R, D]`. Several sequences run in
/// parallel on the pool, each call kept on its task's thread
/// ([`tc::llvm::team::serial`]): a decode row's attention is a few µs
/// of work, which splitting across threads would only slow.
fn attend_all(parts: &mut [Part<'_>], li: usize, rows: &LayerRows) -> Result<Tensor, tc::Error> {
    use rayon::prelude::*;
    if let [one] = parts {
        return one.attend(li, rows);
    }
    // The caller's backend and numerics go with each sequence's calls.
    let cx = tc::CallContext::here();
    let mut all = vec![0f32; rows.n * llama::D];
    // Each sequence's rows of the stacked contexts, which its task fills:
    // no list of contexts collected and copied afterwards.
    let mut outs = Vec::with_capacity(parts.len());
    let mut rest = all.as_mut_slice();
    for p in parts.iter() {
        let n = p.rows * llama::D;
        if n > rest.len() {
            return Err(tc::Error::malformed(
                "sequences with more rows than the step",
            ));
        }
        let (mine, after) = rest.split_at_mut(n);
        outs.push(mine);
        rest = after;
    }
    parts.par_iter_mut().zip(outs).try_for_each(|(p, out)| {
        cx.enter(|| {
            tc::llvm::team::serial(|| {
                let c = p.attend(li, rows)?;
                let c = c.as_slice::<f32>()?;
                if c.len() != out.len() {
                    return Err(tc::Error::malformed("a context of another size"));
                }
                out.copy_from_slice(c);
                Ok(())
            })
        })
    })?;
    Tensor::from_vec(&[1, rows.n, llama::D], all)
}

/// `llama::attention` over the first `t` positions of a cache of either
/// dtype (another is the typed dtype error of the f32 version's contract).
fn attend(
    q: Tensor,
    kc: &Tensor,
    vc: &Tensor,
    t: usize,
    mask: Tensor,
) -> Result<Tensor, tc::Error> {
    match kc.dtype() {
        tc::core::Dtype::F16 => llama::attention_f16(q, kc.clone(), vc.clone(), t, mask),
        _ => llama::attention(q, kc.clone(), vc.clone(), t, mask),
    }
}

/// `[G · S, T]` additive mask: query i (at position T − S + i) sees keys
/// ≤ it; its S rows once per query head of a group (`llama::attention`).
fn mask(s: usize, t: usize) -> Result<Tensor, tc::Error> {
    let rows: Vec<f32> = (0..s * t)
        .map(|k| if k % t <= t - s + k / t { 0.0 } else { -1e30 })
        .collect();
    Tensor::from_vec(&[llama::G * s, t], rows.repeat(llama::G))
}

/// The fetched model file (scripts/fetch-smollm2.sh), under the workspace
/// root: this file is compiled into the facade's example and test (whose
/// manifest is the root) and into tc-serve (whose manifest is a folder
/// below it), so the folder holding `models/` is searched upwards.
pub fn default_model_path() -> std::path::PathBuf {
    const REL: &str = "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| d.join("scripts/fetch-smollm2.sh").exists())
        .unwrap_or(here)
        .join(REL)
}

/// The tokenizer's parts from the GGUF metadata (`tokenizer.ggml.*`).
pub fn tokenizer_parts(
    file: &tc::runtime::gguf::GgufFile,
) -> Result<super::tokenizer::TokenizerParts, Box<dyn std::error::Error>> {
    let p = file.parse()?;
    let strings = |key: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
        Ok(p.str_array(key)?.into_iter().map(str::to_string).collect())
    };
    let add_bos = matches!(
        p.get("tokenizer.ggml.add_bos_token"),
        Some(tc::runtime::gguf::MetaValue::Bool(true))
    );
    Ok(super::tokenizer::TokenizerParts {
        tokens: strings("tokenizer.ggml.tokens")?,
        merges: strings("tokenizer.ggml.merges")?,
        token_types: p.i32_array("tokenizer.ggml.token_type")?,
        bos: p.u32("tokenizer.ggml.bos_token_id")?,
        eos: p.u32("tokenizer.ggml.eos_token_id")?,
        pre: p.str("tokenizer.ggml.pre").unwrap_or("default").to_string(),
        chat_template: p.str("tokenizer.chat_template").ok().map(str::to_string),
        add_bos,
    })
}
