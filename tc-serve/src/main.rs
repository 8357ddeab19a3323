//! tc-serve: an OpenAI-compatible server for embeddings (all-MiniLM-L6-v2)
//! and text generation (a Llama GGUF such as SmolLM2-135M-Instruct).
//!
//! `cargo run --release -p tc-serve -- --model models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
//!  --model models/all-MiniLM-L6-v2`; `--help` lists every flag. Every flag
//! has an environment twin, `TC_SERVE_` and the flag's name in upper case
//! with `_` for `-` (`TC_SERVE_PORT`, …); a flag wins over its variable.
//! SIGTERM or Ctrl-C drains: stop accepting, finish the running requests
//! and streams (up to `--shutdown-timeout`), exit 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use tc_serve::app::{self, parse_buckets, AppState, Config, Embedder};
use tc_serve::generate::{GenConfig, Generator};
use tc_serve::llama::model::KvDtype;
use tc_serve::minilm::{BoxError, MiniLm, Precision};

/// mimalloc, not the system allocator: a decode step allocates its
/// intermediate tensors anew, and glibc returned the large ones (a row of
/// logits is 196 KB) to the kernel on free, so every step paid their page
/// faults again. One-row SmolLM2 steps took 4.7–5.2 ms against 5.5–7.0
/// (`step_bench --fast --threads 2`, alternating, AMD Zen 4), 16-row steps
/// about 3% less.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Numerics {
    /// Every quantized block dequantized to f32 (bit-reproducible rows).
    Exact,
    /// 8-bit activations, as llama.cpp: faster, logits within a bound.
    Fast,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum EmbeddingPrecision {
    /// The file's f32 weights.
    F32,
    /// Int8 products (weights quantized at load with a scale per output
    /// column, activations per row, 16 outlier channels per product in
    /// f32): embeddings within cosine 0.999 of f32 (docs/models.md).
    Int8,
    /// Products in ggml's Q8_0 blocks (weights and activations with a
    /// scale per 32 values): embeddings within cosine 0.999 of f32.
    #[value(name = "q8_0")]
    Q80,
    /// Products with BF16 weights and activations, F32 accumulation
    /// (AVX512-BF16 where the CPU has it): embeddings within cosine 0.999
    /// of f32 (docs/models.md).
    Bf16,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum KvCache {
    /// Keys and values as computed (4 bytes each).
    F32,
    /// Rounded to f16 (2 bytes each, as llama.cpp's default): twice the
    /// positions in a budget, logits within the bound of docs/models.md.
    F16,
}

/// An OpenAI-compatible server on tc: /v1/embeddings (all-MiniLM-L6-v2),
/// /v1/chat/completions and /v1/completions (a Llama GGUF, streamed, with
/// continuous batching), /v1/models, /health, /metrics.
#[derive(Parser, Debug)]
#[command(name = "tc-serve", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "TC_SERVE_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed in the log).
    #[arg(long, env = "TC_SERVE_PORT", default_value_t = 8080)]
    port: u16,
    /// A model to serve: a MiniLM folder (model.safetensors, tokenizer.json,
    /// config.json) for embeddings, or a `.gguf` file (Llama) for
    /// generation. Give it twice to serve both.
    #[arg(long, env = "TC_SERVE_MODEL", value_delimiter = ',', required = true)]
    model: Vec<PathBuf>,
    /// Threads running the tensor kernels (rayon's pool; default: one per CPU).
    #[arg(long, env = "TC_SERVE_THREADS")]
    threads: Option<usize>,

    /// Generation: KV-cache memory budget, MiB. A request reserves prompt +
    /// max_tokens positions; requests wait while the budget is full.
    #[arg(long, env = "TC_SERVE_KV_CACHE_MB", default_value_t = 2048)]
    kv_cache_mb: usize,
    /// Generation: what the KV cache stores (f16 halves each position's bytes).
    #[arg(long, env = "TC_SERVE_KV_CACHE", value_enum, default_value = "f32")]
    kv_cache: KvCache,
    /// Generation: most sequences decoding at once (rows of a decode step).
    #[arg(long, env = "TC_SERVE_MAX_RUNNING", default_value_t = 64)]
    max_running: usize,
    /// Generation: most requests waiting for admission; more get 503 + Retry-After.
    #[arg(long, env = "TC_SERVE_MAX_WAITING", default_value_t = 256)]
    max_waiting: usize,
    /// Generation: most prompt tokens prefilled per step (a longer prompt is
    /// prefilled in chunks between decode steps).
    #[arg(long, env = "TC_SERVE_PREFILL_CHUNK", default_value_t = 256)]
    prefill_chunk: usize,
    /// Generation: most prompt tokens prefilled per step while other
    /// streams are decoding (bounds the latency a new request adds to them).
    #[arg(long, env = "TC_SERVE_PREFILL_CHUNK_DECODING", default_value_t = 32)]
    prefill_chunk_decoding: usize,
    /// Generation: max_tokens of a request that gives none (capped by the context).
    #[arg(long, env = "TC_SERVE_DEFAULT_MAX_TOKENS", default_value_t = 512)]
    default_max_tokens: usize,
    /// Generation: quantized matmul numerics.
    #[arg(long, env = "TC_SERVE_NUMERICS", value_enum, default_value = "exact")]
    numerics: Numerics,

    /// Embeddings: the products' precision.
    #[arg(
        long,
        env = "TC_SERVE_EMBEDDING_PRECISION",
        value_enum,
        default_value = "f32"
    )]
    embedding_precision: EmbeddingPrecision,
    /// Embeddings: length buckets (tokens), `16,32,64,128,256` or `none`.
    #[arg(long, env = "TC_SERVE_BUCKETS", default_value = "16,32,64,128,256")]
    buckets: String,
    /// Embeddings: most sentences per forward pass.
    #[arg(long, env = "TC_SERVE_MAX_BATCH", default_value_t = 32)]
    max_batch: usize,
    /// Embeddings: most padded positions (rows × seq) per forward pass.
    #[arg(long, env = "TC_SERVE_MAX_BATCH_TOKENS", default_value_t = 16384)]
    max_batch_tokens: usize,
    /// Embeddings: longest a sentence waits for its pass to fill, ms.
    #[arg(long, env = "TC_SERVE_MAX_WAIT_MS", default_value_t = 5)]
    max_wait_ms: u64,
    /// Embeddings: do not round a pass's row count up to a power of two.
    #[arg(long, env = "TC_SERVE_NO_PAD_ROWS")]
    no_pad_rows: bool,
    /// Embeddings: forward passes at once (default: one per CPU).
    #[arg(long, env = "TC_SERVE_WORKERS")]
    workers: Option<usize>,
    /// Embeddings: most inputs in one request.
    #[arg(long, env = "TC_SERVE_MAX_INPUTS", default_value_t = 2048)]
    max_inputs: usize,
    /// Embeddings: requests computed at once (counted once their body is
    /// read); more get 503 + Retry-After.
    #[arg(long, env = "TC_SERVE_MAX_CONCURRENT_REQUESTS", default_value_t = 512)]
    max_concurrent_requests: usize,

    /// Largest accepted request body, bytes.
    #[arg(long, env = "TC_SERVE_BODY_LIMIT", default_value_t = 2 << 20)]
    body_limit: usize,
    /// Open connections at once; more get 503 + Retry-After and are closed.
    #[arg(long, env = "TC_SERVE_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// Seconds a client may take to send a request's headers.
    #[arg(long, env = "TC_SERVE_HEADER_READ_TIMEOUT", default_value_t = 10.0)]
    header_read_timeout: f64,
    /// Seconds a client may take to send a request's whole body (408 past it).
    #[arg(long, env = "TC_SERVE_BODY_READ_TIMEOUT", default_value_t = 30.0)]
    body_read_timeout: f64,
    /// Seconds a write to a client may stay blocked (a client that stopped
    /// reading a stream) before the connection is closed.
    #[arg(long, env = "TC_SERVE_WRITE_TIMEOUT", default_value_t = 30.0)]
    write_timeout: f64,
    /// Seconds a request may take until its response starts (503 past it).
    #[arg(long, env = "TC_SERVE_REQUEST_TIMEOUT", default_value_t = 300.0)]
    request_timeout: f64,
    /// Seconds to wait for running requests and streams on SIGTERM / Ctrl-C.
    #[arg(long, env = "TC_SERVE_SHUTDOWN_TIMEOUT", default_value_t = 30.0)]
    shutdown_timeout: f64,

    /// Log format on stderr.
    #[arg(long, env = "TC_SERVE_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Compile the embedding shapes and the generation kernels before
    /// reporting ready.
    #[arg(long, env = "TC_SERVE_WARMUP")]
    warmup: bool,
    /// Kernel-cache capacity (entries).
    #[arg(long, env = "TC_SERVE_CACHE_CAPACITY", default_value_t = 1024)]
    cache_capacity: usize,
    /// Calls of a shape before the kernel cache specialises it (default: the
    /// cache's own; never when a GGUF is served, whose decode lengths each
    /// occur once).
    #[arg(long, env = "TC_SERVE_SPECIALIZE_AFTER")]
    specialize_after: Option<u32>,
    /// Persistent kernel-cache folder (`off` disables it).
    #[arg(long, env = "TC_SERVE_KERNEL_CACHE_DIR")]
    kernel_cache_dir: Option<PathBuf>,
}

fn secs(flag: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v).map_err(|e| format!("--{flag}: {v}: {e}"))
}

fn config(a: &Args) -> Result<Config, String> {
    let mut c = Config {
        buckets: parse_buckets(&a.buckets)?,
        max_batch: a.max_batch,
        max_batch_tokens: a.max_batch_tokens,
        max_wait: Duration::from_millis(a.max_wait_ms),
        pad_rows: !a.no_pad_rows,
        max_inputs: a.max_inputs,
        max_concurrent_requests: a.max_concurrent_requests,
        body_limit: a.body_limit,
        max_connections: a.max_connections,
        header_read_timeout: secs("header-read-timeout", a.header_read_timeout)?,
        body_read_timeout: secs("body-read-timeout", a.body_read_timeout)?,
        write_timeout: secs("write-timeout", a.write_timeout)?,
        request_timeout: secs("request-timeout", a.request_timeout)?,
        shutdown_timeout: secs("shutdown-timeout", a.shutdown_timeout)?,
        ..Config::default()
    };
    if let Some(w) = a.workers {
        c.workers = w;
    }
    c.validate()
}

/// Structured logs on stderr: one line per request (`tc_server::request`)
/// plus lifecycle lines; `--log-format json` for log pipelines.
fn init_logging(json: bool) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO);
    if json {
        builder.json().init();
    } else {
        builder.with_ansi(false).init();
    }
}

/// The kernel-cache folder in use and its counters, for the warm-up log.
fn disk_cache_report() -> String {
    match tc::llvm::disk::Store::global() {
        None => "off".to_string(),
        Some(s) => {
            let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            format!(
                "{} (hits {}, misses {}, rejected {}, writes {})",
                s.dir().display(),
                n(&s.stats.hits),
                n(&s.stats.misses),
                n(&s.stats.rejected),
                n(&s.stats.writes)
            )
        }
    }
}

/// One dry pass per padded embedding shape the policy can produce, so
/// requests find their kernels compiled (or linked from the persistent
/// cache), and the generator's own warm-up (a dry prefill and decode step
/// on its scheduler thread, [`GenConfig::warm_up`]); then the server
/// reports ready.
fn warm_up(state: &AppState) -> Result<(), BoxError> {
    use rayon::prelude::*;
    let t = Instant::now();
    if let Some(embedder) = &state.embedder {
        let shapes = app::shapes(&embedder.config);
        shapes.par_iter().try_for_each(|&(seq, rows)| {
            tc::llvm::dry_run(|| embedder.embed_padded(&["warm up"], seq, rows)).map(drop)
        })?;
        tracing::info!(shapes = shapes.len(), "embedding shapes compiled");
    }
    if let Some(g) = &state.generator {
        if let Some(seconds) = g.wait_warm()? {
            tracing::info!(seconds, "generation kernels compiled");
        }
    }
    tracing::info!(
        seconds = t.elapsed().as_secs_f64(),
        kernel_cache_entries = tc::llvm::Jit::global().len(),
        disk_cache = %disk_cache_report(),
        "warm-up done; ready"
    );
    state.set_ready(true);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // Read by rayon and tc's disk cache once, when the pool and the store
    // are built: set here, before any thread exists.
    if let Some(n) = args.threads {
        std::env::set_var("RAYON_NUM_THREADS", n.max(1).to_string());
    }
    if let Some(dir) = &args.kernel_cache_dir {
        // SAFETY: no thread other than this one exists yet.
        unsafe { tc::core::env::TC_KERNEL_CACHE.set(dir) };
    }
    // tc builds the rayon pool, its workers pinned one per CPU, before the
    // warm-up's `par_iter` would build it unpinned (`tc_llvm::threads`).
    tc::llvm::threads::init();
    let config = config(&args)?;
    init_logging(matches!(args.log_format, LogFormat::Json));

    let (mut dirs, mut ggufs) = (Vec::new(), Vec::new());
    for m in &args.model {
        if m.is_dir() {
            dirs.push(m.clone());
        } else if m
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            && m.is_file()
        {
            ggufs.push(m.clone());
        } else {
            return Err(format!(
                "--model {}: neither a MiniLM folder nor a .gguf file",
                m.display()
            )
            .into());
        }
    }
    if dirs.len() > 1 || ggufs.len() > 1 {
        return Err("--model: at most one embedding folder and one .gguf file".into());
    }

    let jit = tc::llvm::Jit::global();
    let mut cache = jit.config();
    cache.capacity = args.cache_capacity;
    if !ggufs.is_empty() {
        cache.specialize_after = u32::MAX;
    }
    if let Some(n) = args.specialize_after {
        cache.specialize_after = n;
    }
    cache.options.fast_quant = matches!(args.numerics, Numerics::Fast);
    jit.set_config(cache);
    tracing::info!(
        backend = ?tc::backend(),
        threads = rayon::current_num_threads(),
        capacity = cache.capacity,
        specialize_after = cache.specialize_after.max(1),
        numerics = ?args.numerics,
        "kernel cache"
    );

    let embedder = match dirs.first() {
        None => None,
        Some(dir) => {
            let t0 = Instant::now();
            let precision = match args.embedding_precision {
                EmbeddingPrecision::F32 => Precision::F32,
                EmbeddingPrecision::Int8 => Precision::Int8,
                EmbeddingPrecision::Q80 => Precision::Q8_0,
                EmbeddingPrecision::Bf16 => Precision::Bf16,
            };
            let model = MiniLm::load_with(dir, precision).map_err(|e| e.to_string())?;
            let e = Embedder::new(model, dir, config.clone()).map_err(|e| e.to_string())?;
            tracing::info!(model = app::MODEL_NAME, dir = %dir.display(), ?precision,
                seconds = t0.elapsed().as_secs_f64(), "embedding model loaded");
            Some(e)
        }
    };
    let generator = match ggufs.first() {
        None => None,
        Some(path) => {
            let t0 = Instant::now();
            let gen_config = GenConfig {
                kv_budget_bytes: args.kv_cache_mb.saturating_mul(1 << 20),
                max_running: args.max_running,
                max_waiting: args.max_waiting,
                prefill_chunk: args.prefill_chunk,
                prefill_chunk_decoding: args.prefill_chunk_decoding,
                default_max_tokens: args.default_max_tokens,
                kv_dtype: match args.kv_cache {
                    KvCache::F32 => KvDtype::F32,
                    KvCache::F16 => KvDtype::F16,
                },
                warm_up: args.warmup,
            };
            let g = Generator::load(path, gen_config)?;
            tracing::info!(model = %g.model_name, file = %path.display(), context = g.context,
                kv_cache = ?g.config.kv_dtype, seconds = t0.elapsed().as_secs_f64(), "generation model loaded");
            Some(Arc::new(g))
        }
    };
    tracing::info!(policy = ?config, "settings");
    let state = AppState::new(config, embedder, generator);
    let addr: SocketAddr = format!("{}:{}", args.host, args.port).parse()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!("listening on http://{}", listener.local_addr()?);
            if args.warmup {
                // Live at once, ready after warm-up (load balancers wait on /health).
                state.set_ready(false);
                let st = state.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(err) = warm_up(&st) {
                        tracing::error!("warm-up failed: {err}");
                    }
                });
            }
            let router = app::router(state.clone());
            tc_serve::serve::serve(listener, router, state, tc_serve::serve::shutdown_signal())
                .await?;
            tracing::info!("shut down");
            Ok::<(), Box<dyn std::error::Error>>(())
        })
}
