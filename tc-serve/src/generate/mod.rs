//! Text generation: the model's scheduler (continuous batching) and its
//! metrics; the HTTP endpoints are `api.rs`.
//!
//! One thread owns the model and runs [`scheduler::run`]. Requests reach it
//! through a channel as [`Job`]s; each answers through its own event
//! channel ([`Event`]), which the HTTP handler turns into a JSON answer or
//! an SSE stream. A handler that goes away (client disconnected, write
//! timeout) drops its receiver, and the scheduler frees the sequence and
//! its KV cache at the next step.

pub mod api;
pub mod scheduler;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc as tmpsc;

use crate::llama::model::{KvDtype, Model};
use crate::llama::sampler::SamplerConfig;
use crate::llama::tokenizer::ChatTokenizer;
use crate::metrics::{head, lock, single, Histogram};

/// Scheduler settings.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// KV-cache memory all running sequences may reserve, bytes. A request
    /// is admitted once its whole reservation (prompt + `max_tokens`
    /// positions) fits; until then it waits.
    pub kv_budget_bytes: usize,
    /// Most sequences decoding at once (the rows of a decode step).
    pub max_running: usize,
    /// Most requests waiting for admission; more get 503 + `Retry-After`.
    pub max_waiting: usize,
    /// Most prompt tokens prefilled per step, so a long prompt is cut into
    /// chunks between the running streams' decode steps.
    pub prefill_chunk: usize,
    /// Most prompt tokens prefilled per step while other sequences are
    /// decoding: their next token waits for that step's prefill, so this
    /// bounds the inter-token latency a new request adds to the running
    /// streams (a new request's first token comes a few steps later).
    pub prefill_chunk_decoding: usize,
    /// `max_tokens` of a request that gives none (capped by the context).
    pub default_max_tokens: usize,
    /// What the KV caches store: f32, or f16 at half the bytes (logits
    /// within the bound docs/models.md gives).
    pub kv_dtype: KvDtype,
    /// Compile (or link from the kernel cache) every kernel a prefill and
    /// a decode step run before the first request, on the scheduler's
    /// thread ([`Generator::wait_warm`] says when that is done); otherwise
    /// the first request pays for it.
    pub warm_up: bool,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            kv_budget_bytes: 2048 << 20,
            max_running: 64,
            max_waiting: 256,
            prefill_chunk: 256,
            prefill_chunk_decoding: 32,
            default_max_tokens: 512,
            kv_dtype: KvDtype::F32,
            warm_up: false,
        }
    }
}

impl GenConfig {
    /// Check the settings.
    pub fn validate(self) -> Result<GenConfig, String> {
        if self.kv_budget_bytes == 0
            || self.max_running == 0
            || self.prefill_chunk == 0
            || self.prefill_chunk_decoding == 0
            || self.default_max_tokens == 0
        {
            return Err(
                "the KV budget, max running, prefill chunk and default max tokens must be positive"
                    .into(),
            );
        }
        Ok(self)
    }
}

/// The scheduler's warm-up: a dry prefill of a short prompt and a dry
/// decode step into a cache of the configured precision (the kernels are
/// generic in the lengths and the batch, so these cover every request);
/// its seconds.
fn warm_up(model: &Model, cfg: &GenConfig) -> Result<f64, String> {
    let t0 = Instant::now();
    let prompt = cfg.prefill_chunk.min(8);
    let mut cache = model.cache(prompt + 1).map_err(|e| e.to_string())?;
    model
        .prepare(&mut cache, prompt)
        .map_err(|e| e.to_string())?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Why a sequence stopped (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// End of sequence token or a stop sequence.
    Stop,
    /// `max_tokens` (or the context) reached.
    Length,
}

impl Finish {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What the scheduler tells a request.
#[derive(Debug)]
pub enum Event {
    /// One generated token and the text it completes (possibly empty: part
    /// of a UTF-8 character, or text held back as a possible stop sequence).
    Token { id: u32, text: String },
    /// The sequence ended.
    Done {
        finish: Finish,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// The forward pass failed.
    Error(String),
}

/// One generation request, tokenized and validated.
pub struct Job {
    /// Prompt token ids (BOS included where the model wants it).
    pub prompt: Vec<u32>,
    /// Most tokens to generate (≥ 1; prompt + this fits the context).
    pub max_tokens: usize,
    /// Sampling, with this request's own seed.
    pub sampler: SamplerConfig,
    /// Stop sequences (non-empty strings).
    pub stop: Vec<String>,
    /// Keep generating past the end-of-sequence token (load tests).
    pub ignore_eos: bool,
    /// Where the events go; closed when the client is gone.
    pub events: tmpsc::UnboundedSender<Event>,
    /// When it was submitted.
    pub enqueued: Instant,
}

/// Why a job was not queued.
#[derive(Debug)]
pub enum SubmitError {
    /// The waiting queue is full.
    Overloaded,
    /// The job alone needs more KV memory than the whole budget.
    TooLarge { need: usize, budget: usize },
    /// The scheduler has stopped.
    Stopped,
}

/// Latency histogram upper bounds, seconds (time to first token, end to end).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Inter-token latency upper bounds, seconds.
pub const ITL_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
];
/// Decode batch-size upper bounds, sequences per step.
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// The scheduler's counters (read by `/metrics` and the tests).
#[derive(Default)]
pub struct GenStats {
    /// Sequences admitted and not yet finished (prefilling or decoding).
    pub running: AtomicI64,
    /// Requests waiting for admission.
    pub waiting: AtomicI64,
    /// KV-cache bytes allocated now.
    pub kv_bytes: AtomicI64,
    /// KV-cache bytes reserved by the running sequences (what admission counts).
    pub kv_reserved: AtomicI64,
    /// Prompt tokens prefilled.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Decode steps run.
    pub decode_steps: AtomicU64,
    /// Sequences dropped because their client had gone.
    pub cancelled: AtomicU64,
    /// Sequences finished, by reason.
    pub finished_stop: AtomicU64,
    /// Sequences finished at `max_tokens` or the context.
    pub finished_length: AtomicU64,
    /// Time spent in forward passes, microseconds.
    pub forward_us: AtomicU64,
    ttft: Mutex<Histogram>,
    itl: Mutex<Histogram>,
    e2e: Mutex<Histogram>,
    batch: Mutex<Histogram>,
}

impl GenStats {
    fn observe_ttft(&self, s: f64) {
        lock(&self.ttft).observe(LATENCY_BUCKETS, s);
    }
    fn observe_itl(&self, s: f64) {
        lock(&self.itl).observe(ITL_BUCKETS, s);
    }
    fn observe_e2e(&self, s: f64) {
        lock(&self.e2e).observe(LATENCY_BUCKETS, s);
    }
    fn observe_batch(&self, n: usize) {
        lock(&self.batch).observe(BATCH_BUCKETS, n as f64);
    }
}

/// The generation model behind the endpoints: its tokenizer, its limits,
/// and the channel to its scheduler thread.
pub struct Generator {
    /// The id the API answers with (`/v1/models`, `model` fields).
    pub model_name: String,
    /// The tokenizer and chat template from the GGUF's metadata.
    pub tok: Arc<ChatTokenizer>,
    /// Positions the model takes (prompt + generated).
    pub context: usize,
    /// Scheduler settings.
    pub config: GenConfig,
    /// Counters.
    pub stats: Arc<GenStats>,
    /// Bytes of KV cache per position.
    pub kv_bytes_per_position: usize,
    tx: Mutex<mpsc::Sender<Job>>,
    /// The scheduler's word on its warm-up (taken by the first
    /// [`Generator::wait_warm`]).
    warmed: Mutex<Option<mpsc::Receiver<Result<f64, String>>>>,
}

impl Generator {
    /// Load the GGUF at `path` and start the scheduler thread.
    pub fn load(
        path: &std::path::Path,
        config: GenConfig,
    ) -> Result<Generator, Box<dyn std::error::Error>> {
        let config = config.validate()?;
        let (mut model, file) = Model::load(path)?;
        model.kv_dtype = config.kv_dtype;
        // With fast numerics configured, the weights are packed at load
        // rather than by the first request.
        if tc::llvm::Jit::global().config().options.fast_quant {
            model.prepack_quantized();
        }
        let tok = ChatTokenizer::from_parts(crate::llama::model::tokenizer_parts(&file)?)?;
        let model_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.trim_end_matches(".gguf").to_string())
            .unwrap_or_else(|| "llama".into());
        let context = model.context;
        let kv_bytes_per_position = model.cache_bytes(1);
        let stats = Arc::new(GenStats::default());
        let (tx, rx) = mpsc::channel();
        let (warm_tx, warmed) = mpsc::channel();
        let (st, cfg) = (stats.clone(), config.clone());
        let eos = tok.eos();
        let tok = Arc::new(tok);
        let t = tok.clone();
        std::thread::Builder::new()
            .name("tc-scheduler".into())
            .spawn(move || {
                // The mapped file backs the model's weights: it lives as
                // long as the scheduler does.
                let _file = file;
                if cfg.warm_up {
                    // The receiver may be gone (nobody waits): nothing to tell.
                    let _ = warm_tx.send(warm_up(&model, &cfg));
                }
                drop(warm_tx);
                scheduler::run(model, t, eos, cfg, st, rx);
            })?;
        Ok(Generator {
            model_name,
            tok,
            context,
            config,
            stats,
            kv_bytes_per_position,
            tx: Mutex::new(tx),
            warmed: Mutex::new(Some(warmed)),
        })
    }

    /// Block until the scheduler has warmed up (with
    /// [`GenConfig::warm_up`]): its seconds, `None` without a warm-up (or
    /// when asked again), or why it failed. Requests sent meanwhile wait
    /// in the queue.
    pub fn wait_warm(&self) -> Result<Option<f64>, String> {
        let Some(rx) = lock(&self.warmed).take() else {
            return Ok(None);
        };
        match rx.recv() {
            Ok(r) => r.map(Some),
            // Closed without a word: no warm-up was asked for.
            Err(_) => Ok(None),
        }
    }

    /// Whether `name` (a request's `model`) names this model.
    pub fn answers_to(&self, name: &str) -> bool {
        name == self.model_name || name.eq_ignore_ascii_case(&self.model_name)
    }

    /// KV bytes a job with this many positions reserves.
    pub fn reservation(&self, positions: usize) -> usize {
        positions.saturating_mul(self.kv_bytes_per_position)
    }

    /// Queue a job for the scheduler.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        let need = self.reservation(job.prompt.len() + job.max_tokens);
        if need > self.config.kv_budget_bytes {
            return Err(SubmitError::TooLarge {
                need,
                budget: self.config.kv_budget_bytes,
            });
        }
        let waiting = self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        if waiting >= self.config.max_waiting as i64 {
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(SubmitError::Overloaded);
        }
        if lock(&self.tx).send(job).is_err() {
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(SubmitError::Stopped);
        }
        Ok(())
    }

    /// The generation metrics in Prometheus text format.
    pub fn render_metrics(&self, o: &mut String) {
        let s = &self.stats;
        let g = |a: &AtomicI64| a.load(Ordering::Relaxed);
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        single(
            o,
            "tc_gen_running_sequences",
            "gauge",
            "Sequences admitted (prefilling or decoding).",
            &g(&s.running),
        );
        single(
            o,
            "tc_gen_waiting_sequences",
            "gauge",
            "Requests waiting for admission (KV budget or batch full).",
            &g(&s.waiting),
        );
        single(
            o,
            "tc_gen_kv_cache_bytes",
            "gauge",
            "KV-cache bytes allocated by running sequences.",
            &g(&s.kv_bytes),
        );
        single(
            o,
            "tc_gen_kv_cache_reserved_bytes",
            "gauge",
            "KV-cache bytes reserved by running sequences (prompt + max_tokens).",
            &g(&s.kv_reserved),
        );
        single(
            o,
            "tc_gen_kv_cache_budget_bytes",
            "gauge",
            "The KV-cache budget (--kv-cache-mb).",
            &self.config.kv_budget_bytes,
        );
        single(
            o,
            "tc_gen_prompt_tokens_total",
            "counter",
            "Prompt tokens prefilled.",
            &c(&s.prompt_tokens),
        );
        single(
            o,
            "tc_gen_generated_tokens_total",
            "counter",
            "Tokens generated (rate() of it: tokens/s).",
            &c(&s.generated_tokens),
        );
        single(
            o,
            "tc_gen_decode_steps_total",
            "counter",
            "Batched decode steps.",
            &c(&s.decode_steps),
        );
        single(
            o,
            "tc_gen_cancelled_total",
            "counter",
            "Sequences dropped because their client had gone.",
            &c(&s.cancelled),
        );
        single(
            o,
            "tc_gen_forward_seconds_total",
            "counter",
            "Time in forward passes (prefill and decode).",
            &(c(&s.forward_us) as f64 / 1e6),
        );
        head(
            o,
            "tc_gen_finished_total",
            "counter",
            "Sequences finished, by finish_reason.",
        );
        let _ = writeln!(
            o,
            "tc_gen_finished_total{{reason=\"stop\"}} {}",
            c(&s.finished_stop)
        );
        let _ = writeln!(
            o,
            "tc_gen_finished_total{{reason=\"length\"}} {}",
            c(&s.finished_length)
        );
        let hists: [(&str, &str, &Mutex<Histogram>, &[f64]); 4] = [
            (
                "tc_gen_time_to_first_token_seconds",
                "Time from submission to the first generated token.",
                &s.ttft,
                LATENCY_BUCKETS,
            ),
            (
                "tc_gen_inter_token_latency_seconds",
                "Time between a sequence's successive tokens.",
                &s.itl,
                ITL_BUCKETS,
            ),
            (
                "tc_gen_request_duration_seconds",
                "Time from submission to the last token.",
                &s.e2e,
                LATENCY_BUCKETS,
            ),
            (
                "tc_gen_decode_batch_size",
                "Sequences per decode step.",
                &s.batch,
                BATCH_BUCKETS,
            ),
        ];
        for (name, help, h, bounds) in hists {
            head(o, name, "histogram", help);
            lock(h).render(o, name, "", bounds);
        }
    }
}
