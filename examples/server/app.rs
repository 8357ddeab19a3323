//! The embedding server's application: settings, the length-bucket policy,
//! request validation, the OpenAI-shaped handlers, and Prometheus metrics.
//!
//! Shared by `examples/server.rs` (the binary) and `tests/server.rs` (which
//! builds the same router in-process); both declare `mod model` (the MiniLM
//! host code in `examples/minilm/model.rs`) at their crate root.
//!
//! Batching policy (what reaches the kernel cache):
//! * each input is tokenized without truncation to count its tokens
//!   ([CLS] and [SEP] included); more than [`MAX_POSITIONS`] (512, the
//!   model's position table) is a 400; otherwise it is truncated to the
//!   model's `max_seq_length` (256), as sentence-transformers does;
//! * the inputs of one request are sorted by length and cut into chunks of at
//!   most `max_batch` sentences that fall into the same length bucket;
//! * each chunk is padded with [PAD] (id 0, mask 0) up to its bucket (the
//!   smallest configured bucket ≥ its longest sentence; past the largest
//!   bucket, its longest sentence), and, with `pad_rows`, its row count is
//!   rounded up to a power of two with copies of its first row (dropped from
//!   the answer). A padded position has mask 0: mean pooling ignores it and
//!   the attention bias is −max for it, so it does not change the embedding
//!   of any sentence (tested within 1e-5).
//!
//! So the tensor fns only ever see `[B, S]` with S a bucket and B a power of
//! two ≤ `max_batch`: with the default buckets (16, 32, 64, 128, 256) and
//! `max_batch` 32 that is at most 5 × 6 = 30 shapes σ, whatever the traffic.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Serialize;
use tokenizers::Tokenizer;
use tokio::sync::Semaphore;

use crate::model::{Batch, BoxError, MiniLm};

/// The model name the API answers with.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// Other accepted spellings of the model name.
pub const MODEL_ALIASES: &[&str] = &["sentence-transformers/all-MiniLM-L6-v2"];
/// Embedding width.
pub const DIM: usize = 384;
/// The model's position table: inputs longer than this are rejected.
pub const MAX_POSITIONS: usize = 512;
/// Default length buckets (tokens, [CLS] and [SEP] included).
pub const DEFAULT_BUCKETS: &[usize] = &[16, 32, 64, 128, 256];

/// Server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Length buckets, ascending; empty: pad each chunk to its longest sentence only.
    pub buckets: Vec<usize>,
    /// Most sentences per forward pass.
    pub max_batch: usize,
    /// Round each chunk's row count up to a power of two (≤ `max_batch`).
    pub pad_rows: bool,
    /// Forward passes run at once (each on a blocking thread).
    pub workers: usize,
    /// Largest accepted request body, bytes.
    pub body_limit: usize,
    /// Most inputs in one request.
    pub max_inputs: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            buckets: DEFAULT_BUCKETS.to_vec(),
            max_batch: 32,
            pad_rows: true,
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            body_limit: 2 << 20,
            max_inputs: 2048,
        }
    }
}

impl Config {
    /// Check the settings; sorts and dedups the buckets.
    pub fn validate(mut self) -> Result<Config, String> {
        self.buckets.sort_unstable();
        self.buckets.dedup();
        if self.buckets.first() == Some(&0) {
            return Err("a length bucket must be at least 1".into());
        }
        if self.buckets.last().is_some_and(|&b| b > MAX_POSITIONS) {
            return Err(format!(
                "length buckets must be at most {MAX_POSITIONS} (the position table)"
            ));
        }
        if self.max_batch == 0 || self.workers == 0 || self.max_inputs == 0 || self.body_limit == 0
        {
            return Err("max batch, workers, max inputs and body limit must be positive".into());
        }
        Ok(self)
    }
}

/// Parse a bucket list: `16,32,64` or `none` (no buckets).
pub fn parse_buckets(s: &str) -> Result<Vec<usize>, String> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<usize>()
                .map_err(|e| format!("bad bucket `{p}`: {e}"))
        })
        .collect()
}

/// The padded length for a chunk whose longest sentence has `longest` tokens.
pub fn bucket_len(buckets: &[usize], longest: usize) -> usize {
    buckets
        .iter()
        .copied()
        .find(|&b| b >= longest)
        .unwrap_or(longest)
}

/// The padded row count for a chunk of `n` sentences.
pub fn bucket_rows(n: usize, max_batch: usize, pad_rows: bool) -> usize {
    if pad_rows {
        n.next_power_of_two().min(max_batch.max(n))
    } else {
        n
    }
}

/// Every padded shape `(seq, rows)` the policy can produce for inputs of at
/// most the largest bucket (what `--warmup` compiles before traffic).
pub fn shapes(config: &Config) -> Vec<(usize, usize)> {
    let mut rows: Vec<usize> = (1..=config.max_batch)
        .map(|n| bucket_rows(n, config.max_batch, config.pad_rows))
        .collect();
    rows.dedup();
    if !config.pad_rows {
        rows = vec![1];
    }
    let mut out = Vec::new();
    for &seq in &config.buckets {
        out.extend(rows.iter().map(|&r| (seq, r)));
    }
    out
}

/// One forward pass: which inputs, padded to which shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    /// Indices into the request's inputs.
    pub indices: Vec<usize>,
    /// Padded sequence length S.
    pub seq: usize,
    /// Padded row count B.
    pub rows: usize,
}

/// Cut inputs with these (truncated) token counts into chunks: sorted by
/// length, one bucket per chunk, at most `max_batch` sentences each.
pub fn plan(lens: &[usize], config: &Config) -> Vec<Chunk> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| (lens[i], i));
    let mut chunks: Vec<Chunk> = Vec::new();
    for i in order {
        let seq = bucket_len(&config.buckets, lens[i]);
        match chunks.last_mut() {
            Some(c)
                if c.indices.len() < config.max_batch
                    && (c.seq == seq || config.buckets.is_empty()) =>
            {
                c.indices.push(i);
                c.seq = c.seq.max(seq);
            }
            _ => chunks.push(Chunk {
                indices: vec![i],
                seq,
                rows: 0,
            }),
        }
    }
    for c in &mut chunks {
        c.rows = bucket_rows(c.indices.len(), config.max_batch, config.pad_rows);
    }
    chunks
}

/// Pad a tokenized batch to `seq` positions with [PAD] (id 0, mask 0) and to
/// `rows` rows with copies of its first row.
pub fn pad_batch(batch: &Batch, seq: usize, rows: usize) -> Batch {
    let seq = seq.max(batch.s);
    let rows = rows.max(batch.b);
    let mut ids = Vec::with_capacity(rows * seq);
    let mut mask = Vec::with_capacity(rows * seq);
    for r in 0..rows {
        let src = if r < batch.b { r } else { 0 };
        ids.extend_from_slice(&batch.ids[src * batch.s..(src + 1) * batch.s]);
        ids.resize((r + 1) * seq, 0);
        mask.extend_from_slice(&batch.mask[src * batch.s..(src + 1) * batch.s]);
        mask.resize((r + 1) * seq, 0.0);
    }
    Batch {
        b: rows,
        s: seq,
        ids,
        mask,
    }
}

/// The model plus what the server needs around it.
pub struct Embedder {
    model: MiniLm,
    /// The same tokenizer without truncation or padding, to count tokens.
    counter: Tokenizer,
    /// Server settings.
    pub config: Config,
}

impl Embedder {
    /// Wrap a loaded model; `dir` is the folder it was loaded from.
    pub fn new(model: MiniLm, dir: &Path, config: Config) -> Result<Embedder, BoxError> {
        let mut counter = Tokenizer::from_file(dir.join("tokenizer.json"))?;
        counter.with_padding(None);
        counter.with_truncation(None).map_err(|e| e.to_string())?;
        Ok(Embedder {
            model,
            counter,
            config: config.validate()?,
        })
    }

    /// The model's `max_seq_length` (inputs are truncated to it).
    pub fn max_len(&self) -> usize {
        self.model.max_len
    }

    /// Tokens of one input before truncation, [CLS] and [SEP] included.
    pub fn count_tokens(&self, s: &str) -> Result<usize, BoxError> {
        Ok(self.counter.encode(s, true)?.get_ids().len())
    }

    /// Embed the sentences of one chunk padded to `[rows, seq]`; blocking.
    pub fn embed_padded(
        &self,
        sentences: &[&str],
        seq: usize,
        rows: usize,
    ) -> Result<Vec<Vec<f32>>, BoxError> {
        let batch = pad_batch(&self.model.tokenize(sentences)?, seq, rows);
        let out: Vec<f32> = self.model.embed_batch(&batch)?.to_vec()?;
        Ok(out
            .chunks(DIM)
            .take(sentences.len())
            .map(<[f32]>::to_vec)
            .collect())
    }
}

/// A fixed-bucket latency histogram.
#[derive(Clone, Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Histogram upper bounds, seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Histogram {
    fn observe(&mut self, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LATENCY_BUCKETS.len()];
        }
        for (c, &le) in self.counts.iter_mut().zip(LATENCY_BUCKETS) {
            if v <= le {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// Server counters.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    in_flight: AtomicI64,
    busy_workers: AtomicI64,
    inputs: AtomicU64,
    prompt_tokens: AtomicU64,
    passes: Mutex<BTreeMap<(usize, usize), u64>>,
    positions: AtomicU64,
    forward_us: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shared state of the handlers.
pub struct AppState {
    /// The model.
    pub embedder: Arc<Embedder>,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    permits: Arc<Semaphore>,
    started: Instant,
}

impl AppState {
    /// State around a model.
    pub fn new(embedder: Embedder) -> Arc<AppState> {
        let permits = Arc::new(Semaphore::new(embedder.config.workers));
        Arc::new(AppState {
            embedder: Arc::new(embedder),
            metrics: Metrics::default(),
            permits,
            started: Instant::now(),
        })
    }
}

/// The HTTP application.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// An OpenAI-shaped error.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

impl ApiError {
    fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }

    fn with_status(mut self, status: StatusCode) -> ApiError {
        self.status = status;
        self
    }

    fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        });
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

async fn not_found(req: Request) -> ApiError {
    ApiError::invalid(
        format!("no route for {} {}", req.method(), req.uri().path()),
        None,
    )
    .with_status(StatusCode::NOT_FOUND)
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::invalid(
        format!(
            "method {} not allowed on {}",
            req.method(),
            req.uri().path()
        ),
        None,
    )
    .with_status(StatusCode::METHOD_NOT_ALLOWED)
}

fn route_label(path: &str) -> &'static str {
    match path {
        "/health" => "/health",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        "/v1/embeddings" => "/v1/embeddings",
        _ => "other",
    }
}

/// Count requests by route and status, and time them.
async fn track(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = route_label(req.uri().path());
    let t0 = Instant::now();
    state.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let resp = next.run(req).await;
    state.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    let m = &state.metrics;
    *lock(&m.requests)
        .entry((route, resp.status().as_u16()))
        .or_default() += 1;
    lock(&m.latency)
        .entry(route)
        .or_default()
        .observe(t0.elapsed().as_secs_f64());
    resp
}

async fn health(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(serde_json::json!({
        "status": "ok",
        "model": MODEL_NAME,
        "dimensions": DIM,
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
    }))
}

async fn models() -> impl IntoResponse {
    axum::Json(serde_json::json!({
        "object": "list",
        "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "sentence-transformers"}],
    }))
}

/// The validated request.
struct EmbeddingRequest {
    inputs: Vec<String>,
    base64: bool,
}

fn parse_request(body: &[u8], config: &Config) -> Result<EmbeddingRequest, ApiError> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("could not parse the JSON body: {e}"), None))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid("the request body must be a JSON object", None))?;
    match obj.get("model") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::String(m)) => {
            if m != MODEL_NAME && !MODEL_ALIASES.contains(&m.as_str()) {
                return Err(ApiError::invalid(
                    format!("the model `{m}` does not exist; this server serves `{MODEL_NAME}`"),
                    Some("model"),
                )
                .with_status(StatusCode::NOT_FOUND)
                .with_code("model_not_found"));
            }
        }
        Some(_) => return Err(ApiError::invalid("'model' must be a string", Some("model"))),
    }
    let inputs = match obj.get("input") {
        None | Some(serde_json::Value::Null) => {
            return Err(ApiError::invalid(
                "'input' is a required property",
                Some("input"),
            ))
        }
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(items)) => {
            if items.is_empty() {
                return Err(ApiError::invalid(
                    "'input' must not be an empty array",
                    Some("input"),
                ));
            }
            if items.len() > config.max_inputs {
                return Err(ApiError::invalid(
                    format!(
                        "'input' has {} items; at most {} are accepted",
                        items.len(),
                        config.max_inputs
                    ),
                    Some("input"),
                ));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, x)| match x {
                    serde_json::Value::String(s) => Ok(s.clone()),
                    serde_json::Value::Number(_) | serde_json::Value::Array(_) => {
                        Err(ApiError::invalid(
                            format!("input[{i}]: token-id inputs are not supported; send strings"),
                            Some("input"),
                        ))
                    }
                    _ => Err(ApiError::invalid(
                        format!("input[{i}] must be a string"),
                        Some("input"),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "'input' must be a string or an array of strings",
                Some("input"),
            ))
        }
    };
    if let Some(i) = inputs.iter().position(|s| s.is_empty()) {
        return Err(ApiError::invalid(
            format!("input[{i}] is an empty string"),
            Some("input"),
        ));
    }
    let base64 = match obj.get("encoding_format") {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::String(f)) if f == "float" => false,
        Some(serde_json::Value::String(f)) if f == "base64" => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "'encoding_format' must be \"float\" or \"base64\"",
                Some("encoding_format"),
            ))
        }
    };
    match obj.get("dimensions") {
        None | Some(serde_json::Value::Null) => {}
        Some(d) if d.as_u64() == Some(DIM as u64) => {}
        Some(_) => {
            return Err(ApiError::invalid(
                format!("'dimensions' must be {DIM} for {MODEL_NAME}"),
                Some("dimensions"),
            ))
        }
    }
    Ok(EmbeddingRequest { inputs, base64 })
}

#[derive(Serialize)]
struct EmbeddingResponse {
    object: &'static str,
    data: Vec<EmbeddingItem>,
    model: &'static str,
    usage: Usage,
}

#[derive(Serialize)]
struct EmbeddingItem {
    object: &'static str,
    index: usize,
    embedding: EmbeddingData,
}

#[derive(Serialize)]
#[serde(untagged)]
enum EmbeddingData {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// Standard base64 (with padding) of little-endian f32s, as OpenAI's `encoding_format: "base64"`.
pub fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

async fn embeddings(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let limit = state.embedder.config.body_limit;
    let too_large = || {
        ApiError::invalid(
            format!("the request body is larger than {limit} bytes"),
            None,
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE)
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let bytes = to_bytes(body, limit).await.map_err(|e| {
        // `http_body_util::LengthLimitError`, seen through axum's error wrapper.
        if e.to_string().contains("length limit exceeded") {
            too_large()
        } else {
            ApiError::invalid(format!("could not read the request body: {e}"), None)
        }
    })?;
    let embedder = state.embedder.clone();
    let req = parse_request(&bytes, &embedder.config)?;

    // Count tokens (untruncated) off the async threads.
    let (req, counts) = {
        let embedder = embedder.clone();
        tokio::task::spawn_blocking(move || {
            let counts: Result<Vec<usize>, BoxError> = req
                .inputs
                .iter()
                .map(|s| embedder.count_tokens(s))
                .collect();
            (req, counts)
        })
        .await
        .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))?
    };
    let counts = counts.map_err(|e| {
        ApiError::invalid(format!("could not tokenize the input: {e}"), Some("input"))
    })?;
    if let Some((i, &n)) = counts.iter().enumerate().find(|(_, &n)| n > MAX_POSITIONS) {
        return Err(ApiError::invalid(
            format!(
                "input[{i}] has {n} tokens; this model's maximum context is {MAX_POSITIONS} positions \
                 (inputs up to {MAX_POSITIONS} tokens are truncated to {})",
                embedder.max_len()
            ),
            Some("input"),
        )
        .with_code("context_length_exceeded"));
    }
    let lens: Vec<usize> = counts.iter().map(|&n| n.min(embedder.max_len())).collect();
    let prompt_tokens: usize = lens.iter().sum();

    let inputs = Arc::new(req.inputs);
    let mut tasks = Vec::new();
    for chunk in plan(&lens, &embedder.config) {
        let (state, inputs) = (state.clone(), inputs.clone());
        tasks.push(tokio::spawn(async move {
            let permit = state
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| e.to_string())?;
            let st = state.clone();
            let handle = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let m = &st.metrics;
                m.busy_workers.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                let sentences: Vec<&str> =
                    chunk.indices.iter().map(|&i| inputs[i].as_str()).collect();
                let out = st.embedder.embed_padded(&sentences, chunk.seq, chunk.rows);
                m.forward_us
                    .fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                m.busy_workers.fetch_sub(1, Ordering::Relaxed);
                *lock(&m.passes).entry((chunk.seq, chunk.rows)).or_default() += 1;
                m.positions
                    .fetch_add((chunk.seq * chunk.rows) as u64, Ordering::Relaxed);
                out.map(|e| (chunk.indices, e)).map_err(|e| e.to_string())
            });
            handle
                .await
                .map_err(|e| format!("model task failed: {e}"))?
        }));
    }
    let mut embeddings: Vec<Vec<f32>> = vec![Vec::new(); inputs.len()];
    for t in tasks {
        let (indices, out) = t
            .await
            .map_err(|e| ApiError::internal(format!("model task failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("embedding failed: {e}")))?;
        for (i, e) in indices.into_iter().zip(out) {
            embeddings[i] = e;
        }
    }
    state
        .metrics
        .inputs
        .fetch_add(inputs.len() as u64, Ordering::Relaxed);
    state
        .metrics
        .prompt_tokens
        .fetch_add(prompt_tokens as u64, Ordering::Relaxed);

    let data = embeddings
        .into_iter()
        .enumerate()
        .map(|(index, e)| EmbeddingItem {
            object: "embedding",
            index,
            embedding: if req.base64 {
                EmbeddingData::Base64(base64_f32(&e))
            } else {
                EmbeddingData::Float(e)
            },
        })
        .collect();
    let resp = EmbeddingResponse {
        object: "list",
        data,
        model: MODEL_NAME,
        usage: Usage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    };
    let json = serde_json::to_vec(&resp).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response())
}

/// Render the counters in Prometheus text format (0.0.4).
pub fn render_metrics(state: &AppState) -> String {
    use std::fmt::Write;
    let m = &state.metrics;
    let mut o = String::new();
    let head = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    head(
        &mut o,
        "tc_http_requests_total",
        "counter",
        "HTTP requests by route and status code.",
    );
    for ((route, status), n) in lock(&m.requests).iter() {
        let _ = writeln!(
            o,
            "tc_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
        );
    }
    head(
        &mut o,
        "tc_http_request_duration_seconds",
        "histogram",
        "HTTP request latency by route.",
    );
    for (route, h) in lock(&m.latency).iter() {
        for (le, c) in LATENCY_BUCKETS.iter().zip(&h.counts) {
            let _ = writeln!(
                o,
                "tc_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} {c}"
            );
        }
        let _ = writeln!(
            o,
            "tc_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            o,
            "tc_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
            h.sum
        );
        let _ = writeln!(
            o,
            "tc_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
            h.count
        );
    }
    // A metric with one unlabelled sample: HELP/TYPE lines and the value.
    let single = |o: &mut String, name: &str, kind: &str, help: &str, v: &dyn std::fmt::Display| {
        head(o, name, kind, help);
        let _ = writeln!(o, "{name} {v}");
    };
    single(
        &mut o,
        "tc_http_requests_in_flight",
        "gauge",
        "HTTP requests being served.",
        &m.in_flight.load(Ordering::Relaxed),
    );
    single(
        &mut o,
        "tc_embedding_inputs_total",
        "counter",
        "Inputs embedded.",
        &m.inputs.load(Ordering::Relaxed),
    );
    single(
        &mut o,
        "tc_embedding_prompt_tokens_total",
        "counter",
        "Tokens embedded (after truncation, with [CLS]/[SEP]).",
        &m.prompt_tokens.load(Ordering::Relaxed),
    );
    head(
        &mut o,
        "tc_model_forward_passes_total",
        "counter",
        "Forward passes by padded shape [rows, seq].",
    );
    for ((seq, rows), n) in lock(&m.passes).iter() {
        let _ = writeln!(
            o,
            "tc_model_forward_passes_total{{seq=\"{seq}\",rows=\"{rows}\"}} {n}"
        );
    }
    single(
        &mut o,
        "tc_model_padded_positions_total",
        "counter",
        "Token positions computed, padding included.",
        &m.positions.load(Ordering::Relaxed),
    );
    single(
        &mut o,
        "tc_model_forward_seconds_total",
        "counter",
        "Time spent in forward passes.",
        &(m.forward_us.load(Ordering::Relaxed) as f64 / 1e6),
    );
    single(
        &mut o,
        "tc_model_workers",
        "gauge",
        "Forward passes allowed at once.",
        &state.embedder.config.workers,
    );
    single(
        &mut o,
        "tc_model_busy_workers",
        "gauge",
        "Forward passes running.",
        &m.busy_workers.load(Ordering::Relaxed),
    );

    let s = tc::kernel_cache_stats();
    let counters: [(&str, &str, f64); 8] = [
        (
            "hits",
            "Kernel-cache calls that found a specialised entry.",
            s.hits as f64,
        ),
        (
            "misses",
            "Kernel-cache calls that created a specialised entry.",
            s.misses as f64,
        ),
        (
            "compiles",
            "Shape-specialised kernel compilations.",
            s.compiles as f64,
        ),
        (
            "generic_compiles",
            "Shape-generic kernel compilations.",
            s.generic_compiles as f64,
        ),
        (
            "generic_runs",
            "Calls served by a shape-generic kernel.",
            s.generic_runs as f64,
        ),
        (
            "evictions",
            "Kernel-cache entries evicted.",
            s.evictions as f64,
        ),
        (
            "fallbacks",
            "Calls the JIT handed to the reference interpreter.",
            s.fallbacks as f64,
        ),
        (
            "compile_seconds",
            "Total kernel compile time.",
            s.compile_ms / 1e3,
        ),
    ];
    for (name, help, v) in counters {
        single(
            &mut o,
            &format!("tc_kernel_cache_{name}_total"),
            "counter",
            help,
            &v,
        );
    }
    single(
        &mut o,
        "tc_kernel_cache_entries",
        "gauge",
        "Specialised kernel-cache entries.",
        &tc::llvm::Jit::global().len(),
    );
    head(
        &mut o,
        "tc_backend_info",
        "gauge",
        "The engine running the tensor fns (TC_BACKEND=interp for the interpreter).",
    );
    let backend = match tc::backend() {
        tc::Backend::Jit => "jit",
        tc::Backend::Interpreter => "interpreter",
    };
    let _ = writeln!(o, "tc_backend_info{{backend=\"{backend}\"}} 1");
    o
}

async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render_metrics(&state),
    )
}
