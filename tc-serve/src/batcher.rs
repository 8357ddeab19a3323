//! The cross-request batcher: every request's sentences go into one queue;
//! a batcher task merges them into forward passes under `max_batch`, a
//! padded-token budget and a short wait, and scatters the embeddings back to
//! each sentence's request.
//!
//! Why a separate task: a single-sentence request alone would run a `[1, S]`
//! pass; 32 of them at once would run 32 such passes. Merged, they share one
//! `[32, S]` pass. The passes keep the server's bucket policy (`bucket_len`,
//! `bucket_rows`, `pad_batch`), so every pass has a shape from `shapes()` and
//! none triggers a compile after warm-up.
//!
//! Cancellation: each sentence carries a oneshot sender; when its request's
//! future is dropped (client gone, request timeout) the receiver is dropped,
//! the sender reports closed, and the batcher skips the sentence before its
//! pass (counted in `tc_batch_cancelled_total`).
//!
//! The task runs on its own thread with a single-threaded tokio runtime, so
//! the batcher does not depend on which runtime serves HTTP (the binary's or
//! a test's), and forward passes run on that runtime's blocking pool, at most
//! `workers` at once (the [`Batcher::workers`] semaphore).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::app::{bucket_len, bucket_rows, Config, Embedder};
use crate::metrics::Metrics;

/// One sentence's result: its embedding and how it was served.
#[derive(Debug)]
pub struct Embedded {
    /// The unit-norm embedding.
    pub embedding: Vec<f32>,
    /// Time from enqueue to the start of its pass.
    pub queue: Duration,
    /// Duration of its forward pass.
    pub compute: Duration,
    /// Which pass computed it (1-based, in dispatch order).
    pub pass: u64,
}

/// One queued sentence.
pub struct Job {
    /// The input text.
    pub text: String,
    /// Its token count after truncation (`[CLS]` and `[SEP]` included).
    pub len: usize,
    /// When it was queued.
    pub enqueued: Instant,
    /// Where its result goes; closed when the request is gone.
    pub reply: oneshot::Sender<Result<Embedded, String>>,
}

/// Handle to the batcher task.
pub struct Batcher {
    tx: mpsc::UnboundedSender<Job>,
    /// Forward passes allowed at once (`workers` permits). Holding permits
    /// stalls the batcher; the tests do that to line up concurrent requests.
    pub workers: Arc<Semaphore>,
}

impl Batcher {
    /// Start the batcher thread for `embedder`, recording into `metrics`.
    pub fn start(embedder: Arc<Embedder>, metrics: Arc<Metrics>) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        let workers = Arc::new(Semaphore::new(embedder.config.workers));
        let w = workers.clone();
        std::thread::Builder::new()
            .name("tc-batcher".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .max_blocking_threads(embedder.config.workers.max(1))
                    .build()
                    .expect("batcher runtime");
                rt.block_on(run(rx, embedder, metrics, w));
            })
            .expect("spawn the batcher thread");
        Batcher { tx, workers }
    }

    /// Embed `texts` (token counts `lens`, after truncation): queue every
    /// sentence, then wait for all of them, in order. Dropping the returned
    /// future cancels the sentences not yet computed.
    pub async fn embed(
        &self,
        texts: Vec<String>,
        lens: &[usize],
        metrics: &Metrics,
    ) -> Result<Vec<Embedded>, String> {
        let now = Instant::now();
        let mut replies = Vec::with_capacity(texts.len());
        for (text, &len) in texts.into_iter().zip(lens) {
            let (reply, rx) = oneshot::channel();
            metrics.queued.fetch_add(1, Ordering::Relaxed);
            let job = Job {
                text,
                len,
                enqueued: now,
                reply,
            };
            if self.tx.send(job).is_err() {
                metrics.queued.fetch_sub(1, Ordering::Relaxed);
                return Err("the batcher has stopped".into());
            }
            replies.push(rx);
        }
        let mut out = Vec::with_capacity(replies.len());
        for rx in replies {
            out.push(
                rx.await
                    .map_err(|_| "the forward pass failed".to_string())??,
            );
        }
        Ok(out)
    }
}

/// The group a sentence batches with: its length bucket (all one group when
/// there are no buckets).
fn group(config: &Config, len: usize) -> usize {
    if config.buckets.is_empty() {
        0
    } else {
        bucket_len(&config.buckets, len)
    }
}

/// Which queued sentences the next pass takes, oldest first: those of the
/// oldest sentence's group, at most `max_batch`, while the padded pass
/// (`seq × rows`) stays within `max_batch_tokens` (one sentence always goes).
/// Returns their positions in `pending` and whether the pass is full (so
/// waiting longer could not grow it).
pub fn select(pending: &VecDeque<Job>, config: &Config) -> (Vec<usize>, bool) {
    let Some(first) = pending.front() else {
        return (Vec::new(), false);
    };
    let key = group(config, first.len);
    let mut picked = Vec::new();
    let mut seq = 0;
    for (i, job) in pending.iter().enumerate() {
        if group(config, job.len) != key {
            continue;
        }
        let s = seq.max(bucket_len(&config.buckets, job.len));
        let rows = bucket_rows(picked.len() + 1, config.max_batch, config.pad_rows);
        if !picked.is_empty() && s * rows > config.max_batch_tokens {
            return (picked, true);
        }
        picked.push(i);
        seq = s;
        if picked.len() == config.max_batch {
            return (picked, true);
        }
    }
    (picked, false)
}

/// Drop the sentences whose request is gone.
fn drop_cancelled(pending: &mut VecDeque<Job>, metrics: &Metrics) {
    let before = pending.len();
    pending.retain(|j| !j.reply.is_closed());
    let gone = (before - pending.len()) as u64;
    if gone > 0 {
        metrics.cancelled.fetch_add(gone, Ordering::Relaxed);
        metrics.queued.fetch_sub(gone as i64, Ordering::Relaxed);
    }
}

/// The batcher loop: wait for a sentence and a free worker, wait up to
/// `max_wait` (from the oldest sentence's arrival) for a full pass when
/// another pass is running, then hand the pass to a blocking thread and go
/// round again.
async fn run(
    mut rx: mpsc::UnboundedReceiver<Job>,
    embedder: Arc<Embedder>,
    metrics: Arc<Metrics>,
    workers: Arc<Semaphore>,
) {
    let config = embedder.config.clone();
    let mut pending: VecDeque<Job> = VecDeque::new();
    let mut open = true;
    let mut passes = 0u64;
    loop {
        if pending.is_empty() {
            match rx.recv().await {
                Some(j) => pending.push_back(j),
                None => return,
            }
        }
        let permit = workers.clone().acquire_owned().await.expect("never closed");
        // While another pass runs, sentences keep arriving and a fuller pass
        // pays off: wait up to `max_wait`. With every other worker idle, wait
        // only while sentences keep coming (a gap of `max_wait / 10` ends
        // the pass): a lone client's request is not held for company that
        // is not coming, and a burst still lands in one pass.
        let others_busy = workers.available_permits() + 1 < config.workers;
        loop {
            while let Ok(j) = rx.try_recv() {
                pending.push_back(j);
            }
            drop_cancelled(&mut pending, &metrics);
            let Some(first) = pending.front() else { break };
            let mut deadline = first.enqueued + config.max_wait;
            if !others_busy {
                let last = pending.back().map_or(first.enqueued, |j| j.enqueued);
                deadline = deadline.min(last + config.max_wait / 10);
            }
            if !open || select(&pending, &config).1 || Instant::now() >= deadline {
                break;
            }
            tokio::select! {
                j = rx.recv() => match j {
                    Some(j) => pending.push_back(j),
                    None => open = false,
                },
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
        let (picked, _) = select(&pending, &config);
        if picked.is_empty() {
            if !open {
                return;
            }
            continue;
        }
        let mut jobs = Vec::with_capacity(picked.len());
        for &i in picked.iter().rev() {
            jobs.push(pending.remove(i).expect("picked index"));
        }
        jobs.reverse();
        metrics
            .queued
            .fetch_sub(jobs.len() as i64, Ordering::Relaxed);
        passes += 1;
        let (e, m) = (embedder.clone(), metrics.clone());
        tokio::task::spawn_blocking(move || run_pass(&e, &m, jobs, passes, permit));
    }
}

/// One forward pass over `jobs` (one group), on a blocking thread; the
/// permit is the worker slot, released when the pass ends.
fn run_pass(
    embedder: &Embedder,
    metrics: &Metrics,
    jobs: Vec<Job>,
    pass: u64,
    _permit: OwnedSemaphorePermit,
) {
    let before = jobs.len();
    let jobs: Vec<Job> = jobs.into_iter().filter(|j| !j.reply.is_closed()).collect();
    metrics
        .cancelled
        .fetch_add((before - jobs.len()) as u64, Ordering::Relaxed);
    if jobs.is_empty() {
        return;
    }
    let config = &embedder.config;
    let longest = jobs.iter().map(|j| j.len).max().unwrap_or(1);
    let seq = bucket_len(&config.buckets, longest);
    let rows = bucket_rows(jobs.len(), config.max_batch, config.pad_rows);
    let t0 = Instant::now();
    for j in &jobs {
        metrics.record_queue_time((t0 - j.enqueued).as_secs_f64());
    }
    metrics.busy_workers.fetch_add(1, Ordering::Relaxed);
    let sentences: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
    let out = embedder.embed_padded(&sentences, seq, rows);
    let compute = t0.elapsed();
    metrics.busy_workers.fetch_sub(1, Ordering::Relaxed);
    metrics.record_pass(seq, rows, jobs.len(), compute.as_micros() as u64);
    match out {
        Ok(embeddings) => {
            for (j, embedding) in jobs.into_iter().zip(embeddings) {
                let _ = j.reply.send(Ok(Embedded {
                    embedding,
                    queue: t0 - j.enqueued,
                    compute,
                    pass,
                }));
            }
        }
        Err(e) => {
            let msg = e.to_string();
            for j in jobs {
                let _ = j.reply.send(Err(msg.clone()));
            }
        }
    }
}
