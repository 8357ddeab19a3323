//! The server's counters, histograms and gauges, their Prometheus text
//! rendering, and the per-request drop guard that keeps the in-flight gauge
//! and the request log honest when a client goes away mid-request.
//!
//! Kept apart from the handlers (`app.rs`) and the batcher (`batcher.rs`),
//! which both record into [`Metrics`] but do not render it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::app::AppState;

/// Request latency histogram upper bounds, seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Queue-time histogram upper bounds, seconds (a sentence's wait from
/// enqueue to the start of its forward pass).
pub const QUEUE_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Batch-size histogram upper bounds, sentences per forward pass.
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// A fixed-bucket histogram (cumulative counts, Prometheus style).
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// Record one observation against `bounds` (the same bounds every call).
    pub fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (c, &le) in self.counts.iter_mut().zip(bounds) {
            if v <= le {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn render(&self, o: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        let counts = self.counts.iter().chain(std::iter::repeat(&0));
        for (le, c) in bounds.iter().zip(counts) {
            let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {c}");
        }
        let _ = writeln!(
            o,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(o, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(o, "{name}_count{} {}", braces(labels), self.count);
    }
}

/// Server counters. Public fields are the ones tests and operators read.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    /// HTTP requests being served (decremented by [`RequestGuard`]'s drop).
    pub in_flight: AtomicI64,
    /// Open HTTP connections (within the connection cap).
    pub connections: AtomicI64,
    /// Forward passes running now.
    pub busy_workers: AtomicI64,
    /// Sentences waiting in the batcher (channel or pending list).
    pub queued: AtomicI64,
    /// Inputs embedded.
    pub inputs: AtomicU64,
    /// Tokens embedded (after truncation).
    pub prompt_tokens: AtomicU64,
    /// Forward passes run (all shapes): the tests count passes with it.
    pub forward_passes: AtomicU64,
    /// Sentences dropped before their pass because their request was gone.
    pub cancelled: AtomicU64,
    /// Requests refused because the server was saturated (503).
    pub shed: AtomicU64,
    passes: Mutex<BTreeMap<(usize, usize), u64>>,
    positions: AtomicU64,
    forward_us: AtomicU64,
    queue_time: Mutex<Histogram>,
    batch_size: Mutex<Histogram>,
}

/// Lock a metrics mutex, ignoring poisoning (a counter stays usable).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    /// Record one forward pass of `sentences` real rows padded to `[rows, seq]`.
    pub fn record_pass(&self, seq: usize, rows: usize, sentences: usize, micros: u64) {
        self.forward_passes.fetch_add(1, Ordering::Relaxed);
        self.forward_us.fetch_add(micros, Ordering::Relaxed);
        *lock(&self.passes).entry((seq, rows)).or_default() += 1;
        self.positions
            .fetch_add((seq * rows) as u64, Ordering::Relaxed);
        lock(&self.batch_size).observe(BATCH_BUCKETS, sentences as f64);
    }

    /// Record how long one sentence waited in the batcher queue.
    pub fn record_queue_time(&self, seconds: f64) {
        lock(&self.queue_time).observe(QUEUE_BUCKETS, seconds);
    }

    /// A copy of the batch-size histogram (sentences per forward pass).
    pub fn batch_sizes(&self) -> Histogram {
        lock(&self.batch_size).clone()
    }

    fn record_request(&self, route: &'static str, status: u16, seconds: f64) {
        *lock(&self.requests).entry((route, status)).or_default() += 1;
        lock(&self.latency)
            .entry(route)
            .or_default()
            .observe(LATENCY_BUCKETS, seconds);
    }
}

/// What the embeddings handler tells the request log (a response extension).
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestStats {
    /// Inputs in the request.
    pub inputs: usize,
    /// Tokens after truncation.
    pub tokens: usize,
    /// Longest queue wait of its sentences, milliseconds.
    pub queue_ms: f64,
    /// Forward-pass time of the passes it took part in, milliseconds.
    pub compute_ms: f64,
}

/// Counts one request in flight from creation to drop, so the gauge comes
/// back down and the request is logged even when its future is dropped
/// (client gone, connection closed) before a response exists.
pub struct RequestGuard {
    state: Arc<AppState>,
    id: String,
    route: &'static str,
    method: String,
    t0: Instant,
    done: bool,
}

impl RequestGuard {
    /// Start tracking a request.
    pub fn new(state: Arc<AppState>, id: String, route: &'static str, method: String) -> Self {
        state.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        RequestGuard {
            state,
            id,
            route,
            method,
            t0: Instant::now(),
            done: false,
        }
    }

    /// The request finished with `status`: count, time and log it.
    pub fn finish(mut self, status: u16, stats: Option<RequestStats>) {
        self.done = true;
        self.log(status, stats);
    }

    fn log(&self, status: u16, stats: Option<RequestStats>) {
        let secs = self.t0.elapsed().as_secs_f64();
        self.state.metrics.record_request(self.route, status, secs);
        let s = stats.unwrap_or_default();
        // `?` (Debug) quotes and escapes the client's id: a raw `%` would
        // let an `x-request-id` such as `a status=200 route=/admin` forge
        // fields in the text log format.
        tracing::info!(
            target: "tc_server::request",
            id = ?self.id,
            method = %self.method,
            route = self.route,
            status,
            inputs = s.inputs,
            tokens = s.tokens,
            queue_ms = s.queue_ms,
            compute_ms = s.compute_ms,
            total_ms = secs * 1e3,
            "request"
        );
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.state.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.done {
            // The future was dropped before a response: the client went away
            // (499 is the customary "client closed request" code).
            self.log(499, None);
        }
    }
}

/// Render the counters in Prometheus text format (0.0.4).
pub fn render_metrics(state: &AppState) -> String {
    let m = &state.metrics;
    let mut o = String::new();
    head(
        &mut o,
        "tc_http_requests_total",
        "counter",
        "HTTP requests by route and status code (499: client closed the request).",
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
        h.render(
            &mut o,
            "tc_http_request_duration_seconds",
            &format!("route=\"{route}\""),
            LATENCY_BUCKETS,
        );
    }
    render_http_gauges(&mut o, state);
    if let Some(e) = &state.embedder {
        render_model(&mut o, m, e.config.workers);
    }
    if let Some(g) = &state.generator {
        g.render_metrics(&mut o);
    }
    render_kernel_cache(&mut o);
    o
}

pub fn head(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A metric with one unlabelled sample: HELP/TYPE lines and the value.
pub fn single(o: &mut String, name: &str, kind: &str, help: &str, v: &dyn std::fmt::Display) {
    head(o, name, kind, help);
    let _ = writeln!(o, "{name} {v}");
}

fn render_http_gauges(o: &mut String, state: &AppState) {
    let m = &state.metrics;
    single(
        o,
        "tc_http_requests_in_flight",
        "gauge",
        "HTTP requests being served.",
        &m.in_flight.load(Ordering::Relaxed),
    );
    single(
        o,
        "tc_http_connections_open",
        "gauge",
        "Open HTTP connections (within the connection cap).",
        &m.connections.load(Ordering::Relaxed),
    );
    single(
        o,
        "tc_http_requests_shed_total",
        "counter",
        "Requests answered 503 because the server was saturated.",
        &m.shed.load(Ordering::Relaxed),
    );
    single(
        o,
        "tc_ready",
        "gauge",
        "1 once warm-up is done and the server takes traffic.",
        &u8::from(state.is_ready()),
    );
}

fn render_model(o: &mut String, m: &Metrics, workers: usize) {
    single(
        o,
        "tc_embedding_inputs_total",
        "counter",
        "Inputs embedded.",
        &m.inputs.load(Ordering::Relaxed),
    );
    single(
        o,
        "tc_embedding_prompt_tokens_total",
        "counter",
        "Tokens embedded (after truncation, with [CLS]/[SEP]).",
        &m.prompt_tokens.load(Ordering::Relaxed),
    );
    head(
        o,
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
        o,
        "tc_model_padded_positions_total",
        "counter",
        "Token positions computed, padding included.",
        &m.positions.load(Ordering::Relaxed),
    );
    single(
        o,
        "tc_model_forward_seconds_total",
        "counter",
        "Time spent in forward passes.",
        &(m.forward_us.load(Ordering::Relaxed) as f64 / 1e6),
    );
    single(
        o,
        "tc_model_workers",
        "gauge",
        "Forward passes allowed at once.",
        &workers,
    );
    single(
        o,
        "tc_model_busy_workers",
        "gauge",
        "Forward passes running.",
        &m.busy_workers.load(Ordering::Relaxed),
    );
    render_batcher(o, m);
}

fn render_batcher(o: &mut String, m: &Metrics) {
    single(
        o,
        "tc_batch_queue_depth",
        "gauge",
        "Sentences waiting for a forward pass.",
        &m.queued.load(Ordering::Relaxed),
    );
    single(
        o,
        "tc_batch_cancelled_total",
        "counter",
        "Queued sentences skipped because their client had gone.",
        &m.cancelled.load(Ordering::Relaxed),
    );
    head(
        o,
        "tc_batch_queue_seconds",
        "histogram",
        "Time a sentence waited from enqueue to the start of its forward pass.",
    );
    lock(&m.queue_time).render(o, "tc_batch_queue_seconds", "", QUEUE_BUCKETS);
    head(
        o,
        "tc_batch_size",
        "histogram",
        "Sentences per forward pass (before row padding), across requests.",
    );
    lock(&m.batch_size).render(o, "tc_batch_size", "", BATCH_BUCKETS);
}

fn render_kernel_cache(o: &mut String) {
    let s = tc::kernel_cache_stats();
    let counters: [(&str, &str, f64); 10] = [
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
            "quick_compiles",
            "Kernel compilations at the quick tier (of either kind).",
            s.quick_compiles as f64,
        ),
        (
            "tier_ups",
            "Quick-tier kernels compiled again at the optimized tier.",
            tc::llvm::tier_ups() as f64,
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
            o,
            &format!("tc_kernel_cache_{name}_total"),
            "counter",
            help,
            &v,
        );
    }
    single(
        o,
        "tc_kernel_cache_entries",
        "gauge",
        "Specialised kernel-cache entries.",
        &tc::llvm::Jit::global().len(),
    );
    head(
        o,
        "tc_backend_info",
        "gauge",
        "The engine running the tensor fns (TC_BACKEND=interp for the interpreter).",
    );
    let backend = match tc::backend() {
        tc::Backend::Jit => "jit",
        tc::Backend::Interpreter => "interpreter",
    };
    let _ = writeln!(o, "tc_backend_info{{backend=\"{backend}\"}} 1");
}
