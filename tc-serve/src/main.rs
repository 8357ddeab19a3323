//! An embedding server for all-MiniLM-L6-v2 speaking the OpenAI embeddings API.
//!
//! `cargo run --release --example server -- [--port 8080] [--host 127.0.0.1]
//!  [--buckets 16,32,64,128,256|none] [--max-batch 32] [--max-batch-tokens 16384]
//!  [--max-wait-ms 5] [--no-pad-rows] [--workers N] [--body-limit BYTES]
//!  [--max-inputs N] [--max-concurrent-requests 512] [--max-connections 1024]
//!  [--header-read-timeout 10] [--body-read-timeout 30] [--request-timeout 300]
//!  [--shutdown-timeout 30] [--log-format text|json] [--warmup]
//!  [--cache-capacity N] [--specialize-after N] [--kernel-cache-dir DIR]`
//!
//! Every flag has an environment twin: `TC_SERVE_` and the flag's name in
//! upper case with `_` for `-` (`TC_SERVE_PORT`, `TC_SERVE_MAX_WAIT_MS`,
//! `TC_SERVE_LOG_FORMAT`, …), plus `TC_SERVE_PAD_ROWS=0|1` and
//! `TC_SERVE_WARMUP=1`; a flag wins over its variable. Timeouts are seconds.
//! Routes: `POST /v1/embeddings`, `GET /v1/models`, `GET /health` (= ready),
//! `GET /health/ready`, `GET /health/live`, `GET /metrics`.
//! SIGTERM or Ctrl-C drains: stop accepting, finish in-flight requests (up
//! to `--shutdown-timeout`), exit 0.
//! See the README's "Embedding server" section and `examples/server/app.rs`.

#[path = "server/app.rs"]
mod app;
#[path = "minilm/model.rs"]
mod model;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use app::{parse_buckets, AppState, Config, Embedder};
use model::{model_dir, BoxError, MiniLm};

const USAGE: &str =
    "usage: server [--host ADDR] [--port N] [--buckets 16,32,64,128,256|none] [--max-batch N] \
[--max-batch-tokens N] [--max-wait-ms MS] [--no-pad-rows] [--workers N] [--body-limit BYTES] \
[--max-inputs N] [--max-concurrent-requests N] [--max-connections N] [--header-read-timeout S] \
[--body-read-timeout S] [--request-timeout S] [--shutdown-timeout S] [--log-format text|json] \
[--warmup] [--cache-capacity N] [--specialize-after N] [--kernel-cache-dir DIR]";

/// Flags that take a value; each also reads `TC_SERVE_<NAME>`.
const VALUE_FLAGS: &[&str] = &[
    "host",
    "port",
    "buckets",
    "max-batch",
    "max-batch-tokens",
    "max-wait-ms",
    "workers",
    "body-limit",
    "max-inputs",
    "max-concurrent-requests",
    "max-connections",
    "header-read-timeout",
    "body-read-timeout",
    "request-timeout",
    "shutdown-timeout",
    "log-format",
    "cache-capacity",
    "specialize-after",
    "kernel-cache-dir",
];

struct Options {
    host: String,
    port: u16,
    warmup: bool,
    json_logs: bool,
    cache_capacity: usize,
    specialize_after: Option<u32>,
    /// Hook for a persistent kernel cache (see `kernel_cache_hook`).
    kernel_cache_dir: Option<PathBuf>,
    config: Config,
}

/// Set one valued option (`flag` without its leading `--`).
fn set(o: &mut Options, flag: &str, v: &str) -> Result<(), String> {
    let num = |v: &str| {
        v.trim()
            .parse::<usize>()
            .map_err(|e| format!("--{flag}: `{v}`: {e}"))
    };
    let secs = |v: &str| -> Result<Duration, String> {
        let s: f64 = v
            .trim()
            .parse()
            .map_err(|e| format!("--{flag}: `{v}`: {e}"))?;
        Duration::try_from_secs_f64(s).map_err(|e| format!("--{flag}: `{v}`: {e}"))
    };
    let c = &mut o.config;
    match flag {
        "host" => o.host = v.to_string(),
        "port" => o.port = u16::try_from(num(v)?).map_err(|e| format!("--port: {e}"))?,
        "buckets" => c.buckets = parse_buckets(v)?,
        "max-batch" => c.max_batch = num(v)?,
        "max-batch-tokens" => c.max_batch_tokens = num(v)?,
        "max-wait-ms" => c.max_wait = Duration::from_millis(num(v)? as u64),
        "workers" => c.workers = num(v)?,
        "body-limit" => c.body_limit = num(v)?,
        "max-inputs" => c.max_inputs = num(v)?,
        "max-concurrent-requests" => c.max_concurrent_requests = num(v)?,
        "max-connections" => c.max_connections = num(v)?,
        "header-read-timeout" => c.header_read_timeout = secs(v)?,
        "body-read-timeout" => c.body_read_timeout = secs(v)?,
        "request-timeout" => c.request_timeout = secs(v)?,
        "shutdown-timeout" => c.shutdown_timeout = secs(v)?,
        "log-format" => {
            o.json_logs = match v {
                "json" => true,
                "text" => false,
                _ => return Err(format!("--log-format: `{v}`: text or json")),
            }
        }
        "cache-capacity" => o.cache_capacity = num(v)?,
        "specialize-after" => o.specialize_after = Some(num(v)? as u32),
        "kernel-cache-dir" => o.kernel_cache_dir = Some(PathBuf::from(v)),
        _ => return Err(format!("unknown argument `--{flag}`\n{USAGE}")),
    }
    Ok(())
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        host: "127.0.0.1".into(),
        port: 8080,
        warmup: false,
        json_logs: false,
        cache_capacity: 1024,
        specialize_after: None,
        kernel_cache_dir: None,
        config: Config::default(),
    };
    let env = |name: &str| {
        std::env::var(format!(
            "TC_SERVE_{}",
            name.to_uppercase().replace('-', "_")
        ))
        .ok()
    };
    for flag in VALUE_FLAGS {
        if let Some(v) = env(flag) {
            set(&mut o, flag, &v)?;
        }
    }
    if let Some(v) = env("pad-rows") {
        o.config.pad_rows = v != "0";
    }
    if let Some(v) = env("warmup") {
        o.warmup = v != "0";
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        match flag.as_str() {
            "--no-pad-rows" => o.config.pad_rows = false,
            "--warmup" => o.warmup = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            f if f.starts_with("--") && VALUE_FLAGS.contains(&&f[2..]) => {
                let v = inline
                    .or_else(|| args.next())
                    .ok_or(format!("{flag} needs a value\n{USAGE}"))?;
                set(&mut o, &f[2..], &v)?;
            }
            _ => return Err(format!("unknown argument `{a}`\n{USAGE}")),
        }
    }
    o.config = o.config.validate()?;
    Ok(o)
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

/// The persistent kernel cache (tc-llvm's `disk` module): a replica that
/// starts on a warm cache directory links its σ set's object code instead of
/// compiling it, so `--warmup` takes well under a second. `--kernel-cache-dir`
/// names the folder (`off` disables it); without it `TC_KERNEL_CACHE` or the
/// user cache folder applies. Called first in `main`, before any thread
/// exists, because the store reads the environment once.
fn kernel_cache_hook(dir: Option<&PathBuf>) {
    if let Some(dir) = dir {
        std::env::set_var("TC_KERNEL_CACHE", dir);
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

/// One pass per padded shape the policy can produce (every bucket, every row
/// count), so requests find their kernels compiled. Without row padding
/// only single-row shapes are warmed. Each pass is a dry run
/// (`tc::llvm::dry_run`): kernels are compiled, or linked from the
/// persistent cache, but nothing is computed; the shapes are prepared in
/// parallel on the rayon pool (the kernel cache is shared and thread-safe;
/// a dry run covers the calls of its own thread). Then the server reports
/// ready.
fn warm_up(state: &AppState) -> Result<(), BoxError> {
    use rayon::prelude::*;
    let t = Instant::now();
    let shapes = app::shapes(&state.embedder.config);
    shapes.par_iter().try_for_each(|&(seq, rows)| {
        tc::llvm::dry_run(|| state.embedder.embed_padded(&["warm up"], seq, rows)).map(drop)
    })?;
    tracing::info!(
        shapes = shapes.len(),
        seconds = t.elapsed().as_secs_f64(),
        kernel_cache_entries = tc::llvm::Jit::global().len(),
        disk_cache = %disk_cache_report(),
        "warm-up done; ready"
    );
    state.set_ready(true);
    Ok(())
}

fn configure_kernel_cache(opts: &Options) {
    // The kernel cache: room for every (function, σ) the buckets allow.
    let jit = tc::llvm::Jit::global();
    let mut cache = jit.config();
    cache.capacity = opts.cache_capacity;
    if let Some(n) = opts.specialize_after {
        cache.specialize_after = n;
    }
    jit.set_config(cache);
    tracing::info!(
        backend = ?tc::backend(),
        capacity = cache.capacity,
        specialize_after = cache.specialize_after.max(1),
        "kernel cache"
    );
}

fn main() -> Result<(), BoxError> {
    // tc builds the rayon pool, its workers pinned one per CPU, before the
    // warm-up's `par_iter` would build it unpinned (`tc_llvm::threads`).
    tc::llvm::threads::init();
    let opts = parse_args()?;
    kernel_cache_hook(opts.kernel_cache_dir.as_ref());
    init_logging(opts.json_logs);
    let dir = model_dir()?;
    let t0 = Instant::now();
    let model = MiniLm::load(&dir)?;
    let embedder = Embedder::new(model, &dir, opts.config.clone())?;
    tracing::info!(
        model = app::MODEL_NAME,
        dir = %dir.display(),
        seconds = t0.elapsed().as_secs_f64(),
        "loaded"
    );
    tracing::info!(policy = ?opts.config, "settings");
    configure_kernel_cache(&opts);
    let state = AppState::new(embedder);
    let addr: SocketAddr = format!("{}:{}", opts.host, opts.port).parse()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!("listening on http://{}", listener.local_addr()?);
            if opts.warmup {
                // Live at once, ready after warm-up (load balancers wait on /health).
                state.set_ready(false);
                let st: Arc<AppState> = state.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = warm_up(&st) {
                        tracing::error!("warm-up failed: {e}");
                    }
                });
            }
            let app = app::router(state.clone());
            app::serve::serve(listener, app, state, app::serve::shutdown_signal()).await?;
            tracing::info!("shut down");
            Ok(())
        })
}
