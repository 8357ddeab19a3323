//! The server's application: settings, the embeddings' length-bucket
//! policy, request validation, the OpenAI-shaped embeddings handler, the
//! shared routes (health, models, metrics) and the router with its request
//! tracking and timeout. The cross-request embedding batcher is
//! `batcher.rs`, the generation endpoints and their scheduler
//! `generate/`, the metrics and the request log `metrics.rs`, the accept
//! loop and the graceful drain `serve.rs`.
//!
//! Batching policy (what reaches the kernel cache):
//! * each input is tokenized without truncation to count its tokens
//!   (`[CLS]` and `[SEP]` included); more than [`MAX_POSITIONS`] (512, the
//!   model's position table) is a 400; otherwise it is truncated to the
//!   model's `max_seq_length` (256), as sentence-transformers does;
//! * every input becomes one queued sentence; the batcher merges queued
//!   sentences of all requests into passes of at most `max_batch` sentences
//!   that fall into the same length bucket, with at most `max_batch_tokens`
//!   padded positions, waiting at most `max_wait` for a pass to fill;
//! * each pass is padded with `[PAD]` (id 0, mask 0) up to its bucket (the
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
//! ([`plan`] is the same policy applied to one request's inputs alone.)

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
use tower_http::timeout::TimeoutLayer;

use crate::batcher::Batcher;
use crate::generate::Generator;
use crate::metrics::{self, Metrics, RequestGuard, RequestStats};
use crate::minilm::{Batch, BoxError, MiniLm};

/// The model name the API answers with.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// Other accepted spellings of the model name.
pub const MODEL_ALIASES: &[&str] = &["sentence-transformers/all-MiniLM-L6-v2"];
/// Embedding width.
pub const DIM: usize = 384;
/// The model's position table: inputs longer than this are rejected.
pub const MAX_POSITIONS: usize = 512;
/// Default length buckets (tokens, `[CLS]` and `[SEP]` included).
pub const DEFAULT_BUCKETS: &[usize] = &[16, 32, 64, 128, 256];

/// Server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Length buckets, ascending; empty: pad each pass to its longest sentence only.
    pub buckets: Vec<usize>,
    /// Most sentences per forward pass.
    pub max_batch: usize,
    /// Most padded positions (`rows × seq`) per forward pass; a single
    /// sentence always fits.
    pub max_batch_tokens: usize,
    /// Longest a queued sentence waits for its pass to fill (only while
    /// another pass runs).
    pub max_wait: Duration,
    /// Round each pass's row count up to a power of two (≤ `max_batch`).
    pub pad_rows: bool,
    /// Forward passes run at once (each on a blocking thread).
    pub workers: usize,
    /// Largest accepted request body, bytes.
    pub body_limit: usize,
    /// Most inputs in one request.
    pub max_inputs: usize,
    /// Embedding requests served at once (counted once their body is
    /// read); more get 503 + `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Open connections at once; more get 503 + `Retry-After` and are closed.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Longest a client may take to send a request's whole body (408 past
    /// it): a deadline for the body, not for the gap between its bytes.
    pub body_read_timeout: Duration,
    /// Longest a write to a client may stay blocked (a client that stops
    /// reading a stream): the connection is closed past it, and its
    /// sequence leaves the batch.
    pub write_timeout: Duration,
    /// Longest a request may take in all (503 past it; its queued work is dropped).
    pub request_timeout: Duration,
    /// On SIGTERM / Ctrl-C, longest to wait for in-flight requests.
    pub shutdown_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            buckets: DEFAULT_BUCKETS.to_vec(),
            max_batch: 32,
            max_batch_tokens: 16384,
            max_wait: Duration::from_millis(5),
            pad_rows: true,
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            body_limit: 2 << 20,
            max_inputs: 2048,
            max_concurrent_requests: 512,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(300),
            shutdown_timeout: Duration::from_secs(30),
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
        if self.max_batch_tokens == 0
            || self.max_concurrent_requests == 0
            || self.max_connections == 0
        {
            return Err(
                "max batch tokens, max concurrent requests and max connections must be positive"
                    .into(),
            );
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

/// Pad a tokenized batch to `seq` positions with `[PAD]` (id 0, mask 0) and to
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
        // A server tokenizes every request: read the model's tokenizer now
        // (it is otherwise read on first use), so a bad one stops the start.
        model.tokenizer()?;
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

    /// Tokens of one input before truncation, `[CLS]` and `[SEP]` included.
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

/// Shared state of the handlers.
pub struct AppState {
    /// Server settings (HTTP limits and the embeddings' batching policy).
    pub config: Config,
    /// The embedding model, when one is served.
    pub embedder: Option<Arc<Embedder>>,
    /// The cross-request batcher every embedding request goes through.
    pub batcher: Option<Batcher>,
    /// The generation model and its scheduler, when one is served.
    pub generator: Option<Arc<Generator>>,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Embedding requests being computed (`max_concurrent_requests`
    /// permits), taken once the body is read.
    pub slots: Arc<Semaphore>,
    ready: AtomicBool,
    next_id: AtomicU64,
    started: Instant,
}

impl AppState {
    /// State around the models; starts the embedding batcher thread. Ready
    /// at once (the binary clears readiness while it warms up, see
    /// [`AppState::set_ready`]).
    pub fn new(
        config: Config,
        embedder: Option<Embedder>,
        generator: Option<Arc<Generator>>,
    ) -> Arc<AppState> {
        let metrics = Arc::new(Metrics::default());
        let embedder = embedder.map(Arc::new);
        let batcher = embedder
            .as_ref()
            .map(|e| Batcher::start(e.clone(), metrics.clone()));
        Arc::new(AppState {
            slots: Arc::new(Semaphore::new(config.max_concurrent_requests)),
            config,
            embedder,
            batcher,
            generator,
            metrics,
            ready: AtomicBool::new(true),
            next_id: AtomicU64::new(1),
            started: Instant::now(),
        })
    }

    /// Whether `/health/ready` answers 200 (load balancers route on it).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Mark the server ready (after warm-up) or not (while draining).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }
}

/// The HTTP application: routes, request tracking (outermost) and the
/// request timeout (which bounds a response's start: a stream, once
/// started, is bounded by its token budget and the write timeout).
pub fn router(state: Arc<AppState>) -> Router {
    let config = &state.config;
    Router::new()
        .route("/health", get(health))
        .route("/health/live", get(live))
        .route("/health/ready", get(health))
        .route("/metrics", get(metrics_handler))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route(
            "/v1/chat/completions",
            post(crate::generate::api::chat_completions),
        )
        .route("/v1/completions", post(crate::generate::api::completions))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            config.request_timeout,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// 503 with `Retry-After` for a request over the concurrency limit.
pub fn overloaded() -> Response {
    let mut r = ApiError::internal("the server is saturated; retry later")
        .with_status(StatusCode::SERVICE_UNAVAILABLE)
        .with_code("overloaded")
        .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
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
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> ApiError {
        self.status = status;
        self
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
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
        "/health/live" => "/health/live",
        "/health/ready" => "/health/ready",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        "/v1/embeddings" => "/v1/embeddings",
        "/v1/chat/completions" => "/v1/chat/completions",
        "/v1/completions" => "/v1/completions",
        _ => "other",
    }
}

/// Count requests by route and status, time and log them, and tag each
/// response with its `x-request-id`. The guard does the counting, so a
/// request whose future is dropped (client gone) still leaves the in-flight
/// gauge and is logged as 499.
async fn track(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = route_label(req.uri().path());
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}", state.next_id.fetch_add(1, Ordering::Relaxed)));
    let guard = RequestGuard::new(state.clone(), id.clone(), route, req.method().to_string());
    let mut resp = next.run(req).await;
    let stats = resp.extensions().get::<RequestStats>().copied();
    guard.finish(resp.status().as_u16(), stats);
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// Readiness (`/health`, `/health/ready`): 200 once warmed up, 503 while
/// warming up or draining.
async fn health(State(state): State<Arc<AppState>>) -> Response {
    let ready = state.is_ready();
    let body = axum::Json(serde_json::json!({
        "status": if ready { "ok" } else { "unavailable" },
        "ready": ready,
        "model": state.embedder.as_ref().map(|_| MODEL_NAME),
        "dimensions": state.embedder.as_ref().map(|_| DIM),
        "generation_model": state.generator.as_ref().map(|g| g.model_name.clone()),
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
    }));
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

/// Liveness (`/health/live`): 200 while the process serves HTTP at all.
async fn live() -> impl IntoResponse {
    axum::Json(serde_json::json!({"status": "alive"}))
}
async fn models(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let mut data = Vec::new();
    if let Some(g) = &state.generator {
        data.push(serde_json::json!({"id": g.model_name, "object": "model", "created": 0, "owned_by": "tc"}));
    }
    if state.embedder.is_some() {
        data.push(serde_json::json!({"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "sentence-transformers"}));
    }
    axum::Json(serde_json::json!({"object": "list", "data": data}))
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

/// Read the whole body under the size limit and within `deadline` (408
/// past it): one deadline for the whole body, so a client trickling bytes
/// cannot hold the request open longer, whatever the gaps between them.
pub async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    deadline: Duration,
) -> Result<axum::body::Bytes, ApiError> {
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
    let read = tokio::time::timeout(deadline, to_bytes(body, limit))
        .await
        .map_err(|_| {
            ApiError::invalid("timed out reading the request body", None)
                .with_status(StatusCode::REQUEST_TIMEOUT)
        })?;
    read.map_err(|e| {
        // `http_body_util::LengthLimitError`, seen through axum's error wrapper.
        if e.to_string().contains("length limit exceeded") {
            too_large()
        } else {
            ApiError::invalid(format!("could not read the request body: {e}"), None)
        }
    })
}

/// Count tokens (untruncated) off the async threads; reject inputs past the
/// position table; return the truncated lengths.
async fn token_lengths(
    embedder: &Arc<Embedder>,
    inputs: Vec<String>,
) -> Result<(Vec<String>, Vec<usize>), ApiError> {
    let e = embedder.clone();
    let (inputs, counts) = tokio::task::spawn_blocking(move || {
        let counts: Result<Vec<usize>, BoxError> =
            inputs.iter().map(|s| e.count_tokens(s)).collect();
        (inputs, counts)
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))?;
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
    let lens = counts.iter().map(|&n| n.min(embedder.max_len())).collect();
    Ok((inputs, lens))
}

async fn embeddings(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(embedder) = state.embedder.clone() else {
        return Err(
            ApiError::invalid("this server has no embedding model", Some("model"))
                .with_status(StatusCode::NOT_FOUND)
                .with_code("model_not_found"),
        );
    };
    let bytes = read_body(
        &headers,
        body,
        state.config.body_limit,
        state.config.body_read_timeout,
    )
    .await?;
    // The concurrency slot is taken only now that the body is in: a slow
    // client holds a connection, never a slot.
    let Ok(_slot) = state.slots.clone().try_acquire_owned() else {
        state.metrics.shed.fetch_add(1, Ordering::Relaxed);
        return Ok(overloaded());
    };
    let req = parse_request(&bytes, &state.config)?;
    let base64 = req.base64;
    let (inputs, lens) = token_lengths(&embedder, req.inputs).await?;
    let prompt_tokens: usize = lens.iter().sum();
    let n = inputs.len();

    // Dropping this future (client gone, request timeout) drops the
    // batcher's reply receivers: the sentences not yet computed are skipped.
    let batcher = state
        .batcher
        .as_ref()
        .ok_or_else(|| ApiError::internal("no embedding batcher"))?;
    let results = batcher
        .embed(inputs, &lens, &state.metrics)
        .await
        .map_err(|e| ApiError::internal(format!("embedding failed: {e}")))?;
    let m = &state.metrics;
    m.inputs.fetch_add(n as u64, Ordering::Relaxed);
    m.prompt_tokens
        .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    let mut stats = RequestStats {
        inputs: n,
        tokens: prompt_tokens,
        ..RequestStats::default()
    };
    let mut seen_passes = Vec::new();
    for r in &results {
        stats.queue_ms = stats.queue_ms.max(r.queue.as_secs_f64() * 1e3);
        if !seen_passes.contains(&r.pass) {
            seen_passes.push(r.pass);
            stats.compute_ms += r.compute.as_secs_f64() * 1e3;
        }
    }

    let data = results
        .into_iter()
        .enumerate()
        .map(|(index, r)| EmbeddingItem {
            object: "embedding",
            index,
            embedding: if base64 {
                EmbeddingData::Base64(base64_f32(&r.embedding))
            } else {
                EmbeddingData::Float(r.embedding)
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
    let mut out = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response();
    out.extensions_mut().insert(stats);
    Ok(out)
}

async fn metrics_handler(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render_metrics(&state),
    )
}
