//! The embedding endpoint of tc-serve over real HTTP on loopback.
//!
//! One server is started in-process on 127.0.0.1 with an ephemeral port and
//! shared by the tests; requests go through a minimal HTTP/1.1 client on
//! `std::net::TcpStream`, so malformed and oversized requests can be sent
//! as they are. The weights are fetched on first use (`scripts/fetch-minilm.sh`).
//! Inputs are a few short sentences so the tests stay quick on the reference
//! interpreter too.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{get_at, minilm_dir as model_dir, post_at, raw_at, Reply};
use serde_json::{json, Value};
use tc_serve::app::{self, AppState, Config, Embedder};
use tc_serve::minilm::{cosine, MiniLm};

const BODY_LIMIT: usize = 64 * 1024;

struct Server {
    addr: SocketAddr,
    state: Arc<AppState>,
    /// Triggers the same drain path as SIGTERM (`serve`'s shutdown future).
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Receives once `serve` has returned (drained).
    done: Mutex<std::sync::mpsc::Receiver<()>>,
}

/// Start a server in-process on an ephemeral loopback port, on its own
/// runtime thread, through the binary's accept loop (`app::serve::serve`).
fn start(config: Config) -> Server {
    let dir = model_dir().expect("model folder");
    let model = MiniLm::load(&dir).expect("load model");
    let embedder = Embedder::new(model, &dir, config.clone()).expect("embedder");
    let state = AppState::new(config, Some(embedder), None);
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done) = std::sync::mpsc::channel();
    let st = state.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let app = app::router(st.clone());
            let shutdown = async {
                let _ = stopped.await;
            };
            tc_serve::serve::serve(listener, app, st, shutdown)
                .await
                .unwrap();
        });
        let _ = done_tx.send(());
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("server started");
    Server {
        addr,
        state,
        stop: Mutex::new(Some(stop)),
        done: Mutex::new(done),
    }
}

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        start(Config {
            body_limit: BODY_LIMIT,
            max_inputs: 8,
            workers: 2,
            ..Config::default()
        })
    })
}

/// Send raw header lines and body; read the whole reply (`Connection: close`).
fn raw(method: &str, path: &str, extra_headers: &str, body: &[u8]) -> Reply {
    raw_at(server().addr, method, path, extra_headers, body)
}

fn get(path: &str) -> Reply {
    raw("GET", path, "", b"")
}

fn post(path: &str, body: &str) -> Reply {
    post_at(server().addr, path, body)
}

fn embed(body: Value) -> Reply {
    post("/v1/embeddings", &body.to_string())
}

fn embed_at(addr: SocketAddr, body: Value) -> Reply {
    post_at(addr, "/v1/embeddings", &body.to_string())
}

/// Check the OpenAI response shape and return the embeddings.
fn check_shape(r: &Reply, n: usize) -> Vec<Vec<f32>> {
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.headers
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        r.headers
    );
    let v = r.json();
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["data", "model", "object", "usage"]);
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "all-MiniLM-L6-v2");
    let usage = v["usage"].as_object().unwrap();
    assert_eq!(usage.len(), 2);
    let tokens = usage["prompt_tokens"].as_u64().unwrap();
    assert!(tokens >= 2 * n as u64, "{tokens}");
    assert_eq!(usage["total_tokens"].as_u64(), Some(tokens));
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), n);
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d.as_object().unwrap().len(), 3);
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"].as_u64(), Some(i as u64));
            let e: Vec<f32> = d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(e.len(), 384);
            let norm = e.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
            e
        })
        .collect()
}

fn assert_error(r: &Reply, status: u16, needle: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{}", r.body);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
}

#[test]
fn health_and_models() {
    let r = get("/health");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["dimensions"], 384);
    let m = get("/v1/models").json();
    assert_eq!(m["data"][0]["id"], "all-MiniLM-L6-v2");
}

#[test]
fn single_string_input() {
    let r = embed(json!({"input": "A man is eating food.", "model": "all-MiniLM-L6-v2"}));
    let e = check_shape(&r, 1);
    // [CLS] a man is eating food . [SEP]
    assert_eq!(r.json()["usage"]["prompt_tokens"], 8);
    let direct = server()
        .state
        .embedder
        .as_ref()
        .unwrap()
        .embed_padded(&["A man is eating food."], 8, 1)
        .unwrap();
    assert!(cosine(&e[0], &direct[0]) > 0.99999);
}

#[test]
fn batch_input_keeps_order() {
    let sentences = [
        "A man is eating food.",
        "A woman is playing the violin in a small concert hall tonight.",
        "Hi",
    ];
    let r = embed(json!({"input": sentences, "model": "all-MiniLM-L6-v2"}));
    let e = check_shape(&r, 3);
    // Each answer belongs to its input whatever the chunking (sorted by length).
    for (i, s) in sentences.iter().enumerate() {
        let alone = server()
            .state
            .embedder
            .as_ref()
            .unwrap()
            .embed_padded(&[s], 1, 1)
            .unwrap();
        for (j, other) in e.iter().enumerate() {
            let c = cosine(&alone[0], other);
            assert_eq!(c > 0.9999, i == j, "input {i} vs answer {j}: cosine {c}");
        }
    }
}

#[test]
fn base64_encoding() {
    let f = embed(json!({"input": "Hi", "model": "all-MiniLM-L6-v2"})).json();
    let b = embed(json!({"input": "Hi", "model": "all-MiniLM-L6-v2", "encoding_format": "base64"}))
        .json();
    let floats: Vec<f32> = f["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(
        b["data"][0]["embedding"].as_str().unwrap(),
        app::base64_f32(&floats)
    );
    assert_eq!(app::base64_f32(&[1.0]), "AACAPw==");
}

#[test]
fn bucket_padding_does_not_change_embeddings() {
    let e = server().state.embedder.as_ref().unwrap();
    let s = "A man is riding a horse.";
    let alone = e.embed_padded(&[s], 1, 1).unwrap();
    // 9 tokens padded to a 32-token bucket, next to a longer sentence, and
    // to 3 rows (the third a copy of the first, dropped from the answer).
    let padded = e
        .embed_padded(&[s, "The quick brown fox jumps over the lazy dog."], 32, 3)
        .unwrap();
    assert_eq!(padded.len(), 2);
    let diff = alone[0]
        .iter()
        .zip(&padded[0])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "max abs difference {diff}");
}

#[test]
fn bucket_policy() {
    let config = Config::default();
    // 5 buckets × rows 1, 2, 4, 8, 16, 32: the σ a default server can see.
    assert_eq!(app::shapes(&config).len(), 30);
    let c24 = Config {
        max_batch: 24,
        ..Config::default()
    };
    assert_eq!(
        app::shapes(&c24)[..6],
        [(16, 1), (16, 2), (16, 4), (16, 8), (16, 16), (16, 24)]
    );
    assert_eq!(app::bucket_len(&config.buckets, 3), 16);
    assert_eq!(app::bucket_len(&config.buckets, 16), 16);
    assert_eq!(app::bucket_len(&config.buckets, 17), 32);
    assert_eq!(app::bucket_len(&config.buckets, 256), 256);
    assert_eq!(app::bucket_len(&[], 17), 17);
    assert_eq!(app::bucket_rows(3, 32, true), 4);
    assert_eq!(app::bucket_rows(3, 32, false), 3);
    assert_eq!(app::bucket_rows(20, 24, true), 24);
    let config = Config {
        max_batch: 2,
        ..config
    };
    let chunks = app::plan(&[40, 5, 6, 7, 20], &config);
    let shapes: Vec<(Vec<usize>, usize, usize)> = chunks
        .into_iter()
        .map(|c| (c.indices, c.seq, c.rows))
        .collect();
    assert_eq!(
        shapes,
        [
            (vec![1, 2], 16, 2),
            (vec![3], 16, 1),
            (vec![4], 32, 1),
            (vec![0], 64, 1)
        ]
    );
    assert_eq!(app::parse_buckets("none").unwrap(), Vec::<usize>::new());
    assert_eq!(app::parse_buckets("32, 16").unwrap(), [32, 16]);
    assert!(Config {
        buckets: vec![1024],
        ..Config::default()
    }
    .validate()
    .is_err());
}

#[test]
fn bad_requests_get_json_4xx() {
    let m = "all-MiniLM-L6-v2";
    assert_error(&post("/v1/embeddings", "{\"input\": "), 400, "JSON");
    assert_error(&post("/v1/embeddings", "not json"), 400, "JSON");
    assert_error(&post("/v1/embeddings", "[1, 2]"), 400, "object");
    assert_error(&embed(json!({"model": m})), 400, "required");
    assert_error(&embed(json!({"input": [], "model": m})), 400, "empty array");
    assert_error(
        &embed(json!({"input": "", "model": m})),
        400,
        "empty string",
    );
    assert_error(
        &embed(json!({"input": ["ok", ""], "model": m})),
        400,
        "input[1]",
    );
    assert_error(&embed(json!({"input": 42, "model": m})), 400, "string");
    assert_error(
        &embed(json!({"input": ["ok", 7], "model": m})),
        400,
        "input[1]",
    );
    assert_error(
        &embed(json!({"input": [[1, 2, 3]], "model": m})),
        400,
        "token-id",
    );
    assert_error(
        &embed(json!({"input": vec!["a"; 9], "model": m})),
        400,
        "at most 8",
    );
    assert_error(&embed(json!({"input": "x", "model": 3})), 400, "'model'");
    assert_error(
        &embed(json!({"input": "x", "model": "text-embedding-3-small"})),
        404,
        "does not exist",
    );
    assert_error(
        &embed(json!({"input": "x", "model": m, "encoding_format": "int8"})),
        400,
        "encoding_format",
    );
    assert_error(
        &embed(json!({"input": "x", "model": m, "dimensions": 128})),
        400,
        "dimensions",
    );
    // 600 words: more tokens than the 512 positions.
    let long = "word ".repeat(600);
    let r = embed(json!({"input": ["short", long], "model": m}));
    assert_error(&r, 400, "512");
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    // Declared too large: answered before the body is read (the client waits on 100-continue).
    let h = format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n",
        10 << 20
    );
    assert_error(&raw("POST", "/v1/embeddings", &h, b""), 413, "larger than");
    // Too large without a declared length: chunked, cut off at the limit.
    let big = format!("{{\"input\": \"{}\"}}", "a".repeat(BODY_LIMIT));
    let chunked = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    let h = "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n";
    assert_error(
        &raw("POST", "/v1/embeddings", h, chunked.as_bytes()),
        413,
        "larger than",
    );
    assert_error(&get("/v1/nothing"), 404, "no route");
    assert_error(&get("/v1/embeddings"), 405, "not allowed");
    // Still serving.
    assert_eq!(get("/health").status, 200);
}

#[test]
fn concurrent_requests_all_succeed() {
    let sentences = [
        "A man is eating food.",
        "A man is riding a horse.",
        "A woman is playing violin.",
        "Hi there",
    ];
    let handles: Vec<_> = sentences
        .iter()
        .map(|s| {
            let s = s.to_string();
            std::thread::spawn(move || {
                let r = embed(json!({"input": s, "model": "all-MiniLM-L6-v2"}));
                check_shape(&r, 1).remove(0)
            })
        })
        .collect();
    let out: Vec<Vec<f32>> = handles
        .into_iter()
        .map(|h| h.join().expect("request thread"))
        .collect();
    for (i, s) in sentences.iter().enumerate() {
        let alone = server()
            .state
            .embedder
            .as_ref()
            .unwrap()
            .embed_padded(&[s], 1, 1)
            .unwrap();
        assert!(cosine(&alone[0], &out[i]) > 0.9999);
    }
}

#[test]
fn metrics_in_prometheus_text() {
    assert_eq!(
        embed(json!({"input": "Hi", "model": "all-MiniLM-L6-v2"})).status,
        200
    );
    assert_eq!(post("/v1/embeddings", "{").status, 400);
    let r = get("/metrics");
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("text/plain"), "{}", r.headers);
    let t = &r.body;
    for needle in [
        "# TYPE tc_http_requests_total counter",
        "tc_http_requests_total{route=\"/v1/embeddings\",status=\"200\"}",
        "tc_http_requests_total{route=\"/v1/embeddings\",status=\"400\"}",
        "# TYPE tc_http_request_duration_seconds histogram",
        "tc_http_request_duration_seconds_bucket{route=\"/v1/embeddings\",le=\"+Inf\"}",
        "tc_http_request_duration_seconds_count{route=\"/v1/embeddings\"}",
        // Concurrent tests' sentences may share passes: any row count.
        "tc_model_forward_passes_total{seq=\"16\",rows=",
        "# TYPE tc_batch_queue_seconds histogram",
        "tc_batch_queue_seconds_bucket{le=\"+Inf\"}",
        "# TYPE tc_batch_size histogram",
        "tc_batch_size_count",
        "tc_batch_queue_depth",
        "tc_batch_cancelled_total",
        "tc_http_requests_in_flight",
        "tc_http_connections_open",
        "tc_kernel_cache_hits_total",
        "tc_kernel_cache_misses_total",
        "tc_kernel_cache_compiles_total",
        "tc_kernel_cache_entries",
        "tc_backend_info{backend=",
    ] {
        assert!(t.contains(needle), "metrics lack `{needle}`:\n{t}");
    }
    // Every sample line is `name{labels} value` with a numeric value.
    for line in t.lines().filter(|l| !l.starts_with('#')) {
        let v = line.rsplit(' ').next().unwrap();
        assert!(v.parse::<f64>().is_ok(), "bad sample line `{line}`");
    }
}

/// Poll `cond` every 10 ms for up to `secs` seconds.
fn wait_until(what: &str, secs: u64, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Hold every worker slot: the batcher queues sentences but runs no pass.
fn hold_workers(s: &Server) -> tokio::sync::OwnedSemaphorePermit {
    let n = s.state.config.workers as u32;
    s.state
        .batcher
        .as_ref()
        .unwrap()
        .workers
        .clone()
        .try_acquire_many_owned(n)
        .expect("idle workers")
}

fn embedding_of(v: &Value, i: usize) -> Vec<f32> {
    v["data"][i]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn concurrent_requests_are_merged_into_one_pass() {
    let s = start(Config {
        workers: 1,
        ..Config::default()
    });
    let singles = [
        "A man is eating food.",
        "A man is riding a horse.",
        "A woman is playing violin.",
        "Hi there",
        "Two men pushed carts.",
    ];
    let multi = [
        "A monkey is playing drums.",
        "Hi",
        "The girl carries a baby.",
    ];
    let held = hold_workers(&s);
    let passes = || s.state.metrics.forward_passes.load(Ordering::Relaxed);
    let before = passes();
    let addr = s.addr;
    let mut threads: Vec<_> = singles
        .iter()
        .map(|t| {
            let t = t.to_string();
            std::thread::spawn(move || embed_at(addr, json!({"input": t})))
        })
        .collect();
    threads.push(std::thread::spawn(move || {
        embed_at(addr, json!({"input": multi}))
    }));
    wait_until("8 queued sentences", 120, || {
        s.state.metrics.queued.load(Ordering::Relaxed) == 8
    });
    assert_eq!(passes(), before, "no pass while the workers are held");
    drop(held);
    let replies: Vec<Value> = threads
        .into_iter()
        .map(|t| {
            let r = t.join().expect("request thread");
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()
        })
        .collect();
    // All 8 sentences (16-token bucket) went through one [8, 16] pass.
    assert_eq!(passes(), before + 1);
    let sizes = s.state.metrics.batch_sizes();
    assert_eq!((sizes.count(), sizes.sum()), (1, 8.0));
    // Each answer equals the unbatched one (what a request alone computes:
    // bucket 16, one row), within 1e-6, in its request's order.
    let e = s.state.embedder.as_ref().unwrap();
    let unbatched = |t: &str| e.embed_padded(&[t], 16, 1).unwrap().remove(0);
    for (i, t) in singles.iter().enumerate() {
        let d = max_abs_diff(&embedding_of(&replies[i], 0), &unbatched(t));
        assert!(d <= 1e-6, "{t}: max abs difference {d}");
    }
    for (i, t) in multi.iter().enumerate() {
        let d = max_abs_diff(&embedding_of(&replies[5], i), &unbatched(t));
        assert!(d <= 1e-6, "{t}: max abs difference {d}");
    }
    let m = get_at(s.addr, "/metrics").body;
    assert!(
        m.contains("tc_model_forward_passes_total{seq=\"16\",rows=\"8\"} 1"),
        "{m}"
    );
    assert!(m.contains("tc_batch_size_bucket{le=\"8\"} 1"), "{m}");
}

#[test]
fn a_disconnected_clients_queued_sentences_are_not_computed() {
    let s = start(Config {
        workers: 1,
        ..Config::default()
    });
    let m = &s.state.metrics;
    let held = hold_workers(&s);
    let before = m.forward_passes.load(Ordering::Relaxed);
    let body =
        json!({"input": ["one sentence", "another one", "a third", "and a fourth"]}).to_string();
    let mut stream = TcpStream::connect(s.addr).unwrap();
    write!(
        stream,
        "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    wait_until("4 queued sentences", 60, || {
        m.queued.load(Ordering::Relaxed) == 4
    });
    assert_eq!(m.in_flight.load(Ordering::Relaxed), 1);
    drop(stream);
    // The request's future is dropped: the gauge comes back to 0 …
    wait_until("the in-flight gauge back at 0", 30, || {
        m.in_flight.load(Ordering::Relaxed) == 0
    });
    drop(held);
    // … and the batcher skips its sentences instead of computing them.
    wait_until("4 cancelled sentences", 30, || {
        m.cancelled.load(Ordering::Relaxed) == 4
    });
    assert_eq!(m.queued.load(Ordering::Relaxed), 0);
    assert_eq!(m.forward_passes.load(Ordering::Relaxed), before);
    let text = get_at(s.addr, "/metrics").body;
    assert!(
        text.contains("tc_http_requests_total{route=\"/v1/embeddings\",status=\"499\"} 1"),
        "{text}"
    );
    // Still serving, and the gauge is 0 again after a normal request.
    let r = embed_at(s.addr, json!({"input": "Hi"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(m.in_flight.load(Ordering::Relaxed), 0);
}

#[test]
fn shutdown_finishes_the_in_flight_request() {
    let s = start(Config {
        workers: 1,
        ..Config::default()
    });
    let held = hold_workers(&s);
    let addr = s.addr;
    let request = std::thread::spawn(move || embed_at(addr, json!({"input": "A long request"})));
    wait_until("a queued sentence", 60, || {
        s.state.metrics.queued.load(Ordering::Relaxed) == 1
    });
    // What SIGTERM does in the binary: resolve `serve`'s shutdown future.
    s.stop.lock().unwrap().take().unwrap().send(()).unwrap();
    wait_until("the listener closed", 30, || {
        TcpStream::connect(addr).is_err()
    });
    let done = s.done.lock().unwrap();
    assert!(
        done.recv_timeout(Duration::from_millis(200)).is_err(),
        "serve returned with a request in flight"
    );
    drop(held);
    let r = request.join().expect("request thread");
    assert_eq!(r.status, 200, "{}", r.body);
    check_shape(&r, 1);
    done.recv_timeout(Duration::from_secs(30))
        .expect("serve returned after draining");
}

#[test]
fn a_slow_header_client_is_cut_off() {
    let s = start(Config {
        header_read_timeout: Duration::from_secs(1),
        ..Config::default()
    });
    let mut stream = TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let t = Instant::now();
    stream
        .write_all(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut buf = Vec::new();
    // EOF (or a reset) once the timeout fires; never a hang.
    let _ = stream.read_to_end(&mut buf);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "cut off after {waited:?}"
    );
    // Other clients are unaffected.
    assert_eq!(get_at(s.addr, "/health").status, 200);
}

#[test]
fn saturation_gives_503_with_retry_after() {
    let s = start(Config {
        workers: 1,
        max_concurrent_requests: 1,
        max_connections: 3,
        ..Config::default()
    });
    let m = &s.state.metrics;
    let held = hold_workers(&s);
    let addr = s.addr;
    let first = std::thread::spawn(move || embed_at(addr, json!({"input": "first"})));
    wait_until("a queued sentence", 60, || {
        m.queued.load(Ordering::Relaxed) == 1
    });
    // Over the concurrency limit: shed at once.
    let r = embed_at(addr, json!({"input": "second"}));
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.headers.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        r.headers
    );
    assert_eq!(r.json()["error"]["code"], "overloaded");
    // Health and metrics are not limited.
    assert_eq!(get_at(addr, "/health").status, 200);
    // Over the connection cap: the first request's connection plus two idle.
    wait_until("one open connection", 30, || {
        m.connections.load(Ordering::Relaxed) == 1
    });
    let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    wait_until("three open connections", 30, || {
        m.connections.load(Ordering::Relaxed) == 3
    });
    let r = get_at(addr, "/health");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.headers.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        r.headers
    );
    drop(idle);
    drop(held);
    let r = first.join().expect("request thread");
    assert_eq!(r.status, 200, "{}", r.body);
    let text = get_at(addr, "/metrics").body;
    assert!(text.contains("tc_http_requests_shed_total 2"), "{text}");
}

#[test]
fn health_distinguishes_live_from_ready() {
    let s = start(Config::default());
    assert_eq!(get_at(s.addr, "/health/ready").status, 200);
    s.state.set_ready(false);
    let r = get_at(s.addr, "/health");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["ready"], false);
    assert_eq!(get_at(s.addr, "/health/ready").status, 503);
    assert_eq!(get_at(s.addr, "/health/live").status, 200);
    s.state.set_ready(true);
    assert_eq!(get_at(s.addr, "/health").status, 200);
    assert!(get_at(s.addr, "/metrics").body.contains("tc_ready 1"));
}

#[test]
fn batcher_selection_respects_buckets_batch_and_token_budget() {
    use std::collections::VecDeque;
    use tc_serve::batcher::{select, Job};
    let job = |len: usize| Job {
        text: String::new(),
        len,
        enqueued: Instant::now(),
        reply: tokio::sync::oneshot::channel().0,
    };
    let config = Config {
        max_batch: 4,
        ..Config::default()
    };
    // The oldest sentence's bucket (16) only, oldest first.
    let q: VecDeque<Job> = [5, 40, 6, 7].into_iter().map(job).collect();
    assert_eq!(select(&q, &config), (vec![0, 2, 3], false));
    // Full at max_batch.
    let q: VecDeque<Job> = [5, 5, 5, 5, 5].into_iter().map(job).collect();
    assert_eq!(select(&q, &config), (vec![0, 1, 2, 3], true));
    // Token budget: 2 rows × 32 fit in 64 positions, 4 rows × 32 do not.
    let tight = Config {
        max_batch_tokens: 64,
        ..config.clone()
    };
    let q: VecDeque<Job> = [20, 20, 20].into_iter().map(job).collect();
    assert_eq!(select(&q, &tight), (vec![0, 1], true));
    // A single sentence always goes, whatever the budget.
    let q: VecDeque<Job> = [200].into_iter().map(job).collect();
    assert_eq!(select(&q, &tight), (vec![0], false));
    // No buckets: one group, padded to the longest.
    let none = Config {
        buckets: Vec::new(),
        ..config
    };
    let q: VecDeque<Job> = [5, 40, 6].into_iter().map(job).collect();
    assert_eq!(select(&q, &none), (vec![0, 1, 2], false));
}

/// A client trickling its body one byte at a time, each byte well within
/// any gap timeout, is cut off at the whole-body deadline (408), and while
/// it trickles it holds no concurrency slot: another client's request is
/// served (with one slot in all, the old gap-only timeout let a trickler
/// turn every other request into a 503).
#[test]
fn a_slow_body_client_holds_no_slot_and_meets_the_whole_body_deadline() {
    let s = start(Config {
        workers: 1,
        max_concurrent_requests: 1,
        body_read_timeout: Duration::from_secs(2),
        ..Config::default()
    });
    let body = json!({"input": "trickled, one byte at a time"}).to_string();
    let addr = s.addr;
    let slow = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        write!(
            stream,
            "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        let t = Instant::now();
        for b in body.as_bytes() {
            // The server may close the socket at its deadline: stop then.
            if stream.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
            if t.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        let mut buf = Vec::new();
        let _ = stream.read_to_end(&mut buf);
        (t.elapsed(), buf)
    });
    std::thread::sleep(Duration::from_millis(600));
    // The trickler is mid-body: another request still gets the slot.
    let r = embed_at(addr, json!({"input": "Hi"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let (waited, buf) = slow.join().expect("slow client");
    let reply = common::parse_reply(buf);
    assert_eq!(reply.status, 408, "{}", reply.body);
    assert!(
        waited >= Duration::from_millis(1800) && waited < Duration::from_secs(10),
        "cut off after {waited:?}"
    );
}
