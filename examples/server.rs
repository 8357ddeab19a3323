//! An embedding server for all-MiniLM-L6-v2 speaking the OpenAI embeddings API.
//!
//! `cargo run --release --example server -- [--port 8080] [--host 127.0.0.1]
//!  [--buckets 16,32,64,128,256|none] [--max-batch 32] [--no-pad-rows]
//!  [--workers N] [--body-limit BYTES] [--max-inputs N] [--warmup]
//!  [--cache-capacity N] [--specialize-after N]`
//!
//! Every flag has an environment twin (`TC_SERVE_PORT`, `TC_SERVE_HOST`,
//! `TC_SERVE_BUCKETS`, `TC_SERVE_MAX_BATCH`, `TC_SERVE_PAD_ROWS=0|1`,
//! `TC_SERVE_WORKERS`, `TC_SERVE_BODY_LIMIT`, `TC_SERVE_MAX_INPUTS`,
//! `TC_SERVE_WARMUP=1`, `TC_SERVE_CACHE_CAPACITY`, `TC_SERVE_SPECIALIZE_AFTER`);
//! a flag wins over its variable. Routes:
//! `POST /v1/embeddings`, `GET /v1/models`, `GET /health`, `GET /metrics`.
//! See the README's "Embedding server" section and `examples/server/app.rs`.

#[path = "server/app.rs"]
mod app;
#[path = "minilm/model.rs"]
mod model;

use std::net::SocketAddr;
use std::time::Instant;

use app::{parse_buckets, AppState, Config, Embedder};
use model::{model_dir, BoxError, MiniLm};

const USAGE: &str =
    "usage: server [--host ADDR] [--port N] [--buckets 16,32,64,128,256|none] [--max-batch N] \
[--no-pad-rows] [--workers N] [--body-limit BYTES] [--max-inputs N] [--warmup] [--cache-capacity N] \
[--specialize-after N]";

struct Options {
    host: String,
    port: u16,
    warmup: bool,
    cache_capacity: usize,
    specialize_after: Option<u32>,
    config: Config,
}

fn parse_args() -> Result<Options, String> {
    let env = |k: &str| std::env::var(k).ok();
    let num = |what: &str, v: &str| {
        v.parse::<usize>()
            .map_err(|e| format!("{what}: `{v}`: {e}"))
    };
    let mut o = Options {
        host: "127.0.0.1".into(),
        port: 8080,
        warmup: false,
        cache_capacity: 1024,
        specialize_after: None,
        config: Config::default(),
    };
    if let Some(v) = env("TC_SERVE_HOST") {
        o.host = v;
    }
    if let Some(v) = env("TC_SERVE_PORT") {
        o.port = num("TC_SERVE_PORT", &v)? as u16;
    }
    if let Some(v) = env("TC_SERVE_BUCKETS") {
        o.config.buckets = parse_buckets(&v)?;
    }
    if let Some(v) = env("TC_SERVE_MAX_BATCH") {
        o.config.max_batch = num("TC_SERVE_MAX_BATCH", &v)?;
    }
    if let Some(v) = env("TC_SERVE_PAD_ROWS") {
        o.config.pad_rows = v != "0";
    }
    if let Some(v) = env("TC_SERVE_WORKERS") {
        o.config.workers = num("TC_SERVE_WORKERS", &v)?;
    }
    if let Some(v) = env("TC_SERVE_BODY_LIMIT") {
        o.config.body_limit = num("TC_SERVE_BODY_LIMIT", &v)?;
    }
    if let Some(v) = env("TC_SERVE_MAX_INPUTS") {
        o.config.max_inputs = num("TC_SERVE_MAX_INPUTS", &v)?;
    }
    if let Some(v) = env("TC_SERVE_WARMUP") {
        o.warmup = v != "0";
    }
    if let Some(v) = env("TC_SERVE_CACHE_CAPACITY") {
        o.cache_capacity = num("TC_SERVE_CACHE_CAPACITY", &v)?;
    }
    if let Some(v) = env("TC_SERVE_SPECIALIZE_AFTER") {
        o.specialize_after = Some(num("TC_SERVE_SPECIALIZE_AFTER", &v)? as u32);
    }
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--host" => o.host = value()?,
            "--port" => o.port = num("--port", &value()?)? as u16,
            "--buckets" => o.config.buckets = parse_buckets(&value()?)?,
            "--max-batch" => o.config.max_batch = num("--max-batch", &value()?)?,
            "--no-pad-rows" => o.config.pad_rows = false,
            "--workers" => o.config.workers = num("--workers", &value()?)?,
            "--body-limit" => o.config.body_limit = num("--body-limit", &value()?)?,
            "--max-inputs" => o.config.max_inputs = num("--max-inputs", &value()?)?,
            "--warmup" => o.warmup = true,
            "--cache-capacity" => o.cache_capacity = num("--cache-capacity", &value()?)?,
            "--specialize-after" => {
                o.specialize_after = Some(num("--specialize-after", &value()?)? as u32)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument `{a}`\n{USAGE}")),
        }
    }
    o.config = o.config.validate()?;
    Ok(o)
}

fn main() -> Result<(), BoxError> {
    let opts = parse_args()?;
    let dir = model_dir()?;
    let t0 = Instant::now();
    let model = MiniLm::load(&dir)?;
    let embedder = Embedder::new(model, &dir, opts.config.clone())?;
    eprintln!(
        "loaded {} from {} in {:.2} s",
        app::MODEL_NAME,
        dir.display(),
        t0.elapsed().as_secs_f64()
    );
    eprintln!(
        "policy: buckets {:?}, max batch {}, pad rows to a power of two: {}, workers {}, body limit {} B, max inputs {}",
        opts.config.buckets,
        opts.config.max_batch,
        opts.config.pad_rows,
        opts.config.workers,
        opts.config.body_limit,
        opts.config.max_inputs
    );
    // The kernel cache: room for every (function, σ) the buckets allow.
    let jit = tc::llvm::Jit::global();
    let mut cache = jit.config();
    cache.capacity = opts.cache_capacity;
    if let Some(n) = opts.specialize_after {
        cache.specialize_after = n;
    }
    jit.set_config(cache);
    eprintln!(
        "backend: {:?}, kernel cache capacity {}, specialize after {} call(s)",
        tc::backend(),
        cache.capacity,
        cache.specialize_after.max(1)
    );
    if opts.warmup {
        // One pass per padded shape the policy can produce (every bucket, every
        // row count), so requests find their kernels compiled. Without row
        // padding only single-row shapes are warmed.
        let t = Instant::now();
        let shapes = app::shapes(&opts.config);
        for &(seq, rows) in &shapes {
            embedder.embed_padded(&["warm up"], seq, rows)?;
        }
        eprintln!(
            "warm-up: {} shapes in {:.1} s, {} kernel-cache entries",
            shapes.len(),
            t.elapsed().as_secs_f64(),
            jit.len()
        );
    }
    let state = AppState::new(embedder);
    let addr: SocketAddr = format!("{}:{}", opts.host, opts.port).parse()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            eprintln!("listening on http://{}", listener.local_addr()?);
            axum::serve(listener, app::router(state))
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                    eprintln!("shutting down");
                })
                .await?;
            Ok(())
        })
}
