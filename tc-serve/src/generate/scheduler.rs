//! The scheduler: continuous (iteration-level) batching over one model.
//!
//! Each iteration:
//! 1. takes new jobs from the channel (blocking only when idle);
//! 2. drops sequences and queued jobs whose client is gone, freeing their
//!    KV cache;
//! 3. admits queued jobs, oldest first, while their KV reservations fit the
//!    budget and the batch has room;
//! 4. plans the iteration's rows: one for every sequence past its
//!    prefill, and prompt chunks of at most `prefill_chunk` tokens in all,
//!    or `prefill_chunk_decoding` while other sequences are decoding (a
//!    long prompt takes several iterations, so the running streams keep
//!    their pace);
//! 5. runs them as one forward pass (`Model::step`): decode rows and
//!    prefill chunks together, so the weight matmuls see every row and a
//!    new request's prefill costs the running streams only its rows; each
//!    sequence's last row is sampled with its own RNG.
//!
//! Batching does not change results: a sequence's tokens depend on its
//! prompt, its sampling settings and its seed only (see `Model::step` for
//! why each row is computed as it would be alone).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use tc::Tensor;

use super::{Event, Finish, GenConfig, GenStats, Job};
use crate::llama::model::{Model, StepSeq};
use crate::llama::sampler::Sampler;
use crate::llama::tokenizer::{ChatTokenizer, StreamDecoder};

/// Positions a cache grows by (at least), so growth copies rarely.
const GROW: usize = 128;

/// One admitted sequence.
struct Seq {
    job: Job,
    cache: Vec<(Tensor, Tensor)>,
    /// Positions the cache has room for now.
    capacity: usize,
    /// Positions reserved (prompt + max_tokens).
    reserved: usize,
    /// Prompt tokens prefilled so far.
    prefilled: usize,
    /// The token to feed next (set once the prefill is done).
    next: Option<u32>,
    /// Positions in the cache.
    pos: usize,
    sampler: Sampler,
    decoder: StreamDecoder,
    /// All text generated so far, and how much of it was sent.
    text: String,
    sent: usize,
    generated: usize,
    last_token_at: Option<Instant>,
    done: bool,
}

impl Seq {
    fn alive(&self) -> bool {
        !self.done && !self.job.events.is_closed()
    }
}

/// The scheduler loop; returns when every sender is gone.
pub fn run(
    model: Model,
    tok: Arc<ChatTokenizer>,
    eos: u32,
    config: GenConfig,
    stats: Arc<GenStats>,
    rx: mpsc::Receiver<Job>,
) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut running: Vec<Seq> = Vec::new();
    let mut reserved_bytes = 0usize;
    let per_pos = model.cache_bytes(1);
    let mut open = true;
    loop {
        // 1. Intake.
        if running.is_empty() && waiting.is_empty() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(j) => waiting.push_back(j),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(j) => waiting.push_back(j),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        // 2. Clients gone: out of the queue and the batch.
        let before = waiting.len();
        waiting.retain(|j| !j.events.is_closed());
        let gone = before - waiting.len();
        if gone > 0 {
            stats.waiting.fetch_sub(gone as i64, Ordering::Relaxed);
            stats.cancelled.fetch_add(gone as u64, Ordering::Relaxed);
        }
        for s in running.iter_mut() {
            if !s.done && s.job.events.is_closed() {
                s.done = true;
                stats.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        retire(&mut running, &mut reserved_bytes, per_pos, &stats);
        // 3. Admission, oldest first (no overtaking: a large request is not
        // starved by small ones behind it).
        while let Some(j) = waiting.front() {
            let positions = j.prompt.len() + j.max_tokens;
            let need = positions * per_pos;
            if running.len() >= config.max_running || reserved_bytes + need > config.kv_budget_bytes
            {
                break;
            }
            let Some(job) = waiting.pop_front() else {
                break;
            };
            stats.waiting.fetch_sub(1, Ordering::Relaxed);
            let capacity = positions.min(job.prompt.len() + GROW);
            match model.cache(capacity) {
                Ok(cache) => {
                    reserved_bytes += need;
                    stats.running.fetch_add(1, Ordering::Relaxed);
                    stats.kv_reserved.fetch_add(need as i64, Ordering::Relaxed);
                    stats
                        .kv_bytes
                        .fetch_add((capacity * per_pos) as i64, Ordering::Relaxed);
                    running.push(Seq {
                        sampler: Sampler::new(job.sampler),
                        job,
                        cache,
                        capacity,
                        reserved: positions,
                        prefilled: 0,
                        next: None,
                        pos: 0,
                        decoder: StreamDecoder::new(),
                        text: String::new(),
                        sent: 0,
                        generated: 0,
                        last_token_at: None,
                        done: false,
                    });
                }
                Err(e) => {
                    let _ = job.events.send(Event::Error(format!("KV cache: {e}")));
                }
            }
        }
        // 4. This iteration's rows: a decode row for every sequence past its
        // prefill, and prompt chunks within the prefill budget.
        let plan = plan_step(&mut running, &config, &model, per_pos, &stats);
        // 5. One forward pass over all of them.
        if !plan.is_empty() {
            let t0 = Instant::now();
            let result = {
                let mut step: Vec<StepSeq<'_>> = Vec::with_capacity(plan.len());
                let mut rest = running.iter_mut().enumerate();
                for &(i, chunk) in &plan {
                    if let Some((_, s)) = rest.find(|(j, _)| *j == i) {
                        // Its next token when decoding, else its prompt's
                        // next `chunk` tokens.
                        let tokens = match (&s.next, chunk) {
                            (Some(next), 0) => std::slice::from_ref(next),
                            _ => &s.job.prompt[s.prefilled..s.prefilled + chunk],
                        };
                        step.push(StepSeq {
                            tokens,
                            cache: &mut s.cache,
                            pos: s.pos,
                        });
                    }
                }
                model.step(&mut step)
            };
            stats
                .forward_us
                .fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
            let decoding = plan.iter().filter(|(_, chunk)| *chunk == 0).count();
            if decoding > 0 {
                stats.decode_steps.fetch_add(1, Ordering::Relaxed);
                stats.observe_batch(decoding);
            }
            // The logits are read where the pass left them: a copy of a
            // 16-row step's (3 MB) took a third of this thread's time.
            match result
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|l| l.as_slice::<f32>())
            {
                Ok(logits) => {
                    let v = logits.len() / plan.len();
                    for (r, &(i, chunk)) in plan.iter().enumerate() {
                        let s = &mut running[i];
                        let row = &logits[r * v..(r + 1) * v];
                        if chunk == 0 {
                            s.pos += 1;
                        } else {
                            stats
                                .prompt_tokens
                                .fetch_add(chunk as u64, Ordering::Relaxed);
                            s.prefilled += chunk;
                            s.pos = s.prefilled;
                            if s.prefilled < s.job.prompt.len() {
                                continue;
                            }
                        }
                        let id = s.sampler.sample(row);
                        emit(s, id, &tok, eos, &stats);
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    for (i, _) in &plan {
                        fail(&mut running[*i], &msg);
                    }
                }
            }
        }
        retire(&mut running, &mut reserved_bytes, per_pos, &stats);
    }
}

/// The rows of this iteration's forward pass, in `running` order: each
/// entry a sequence's index and how many prompt tokens it prefills (0: it
/// decodes). A sequence past its
/// prefill feeds its next token (its cache grown first where full);
/// sequences still prefilling feed their next prompt chunk, at most
/// `prefill_chunk` prompt tokens in all, or `prefill_chunk_decoding` while
/// others decode (their next token waits for this pass, so the budget
/// bounds the inter-token latency a new request adds).
fn plan_step(
    running: &mut [Seq],
    config: &GenConfig,
    model: &Model,
    per_pos: usize,
    stats: &GenStats,
) -> Vec<(usize, usize)> {
    let decoding = running.iter().any(|s| s.alive() && s.next.is_some());
    let mut budget = if decoding {
        config.prefill_chunk.min(config.prefill_chunk_decoding)
    } else {
        config.prefill_chunk
    };
    let mut plan = Vec::new();
    for (i, s) in running.iter_mut().enumerate() {
        if !s.alive() {
            continue;
        }
        if s.next.is_none() {
            let chunk = (s.job.prompt.len() - s.prefilled).min(budget);
            if chunk > 0 {
                budget -= chunk;
                plan.push((i, chunk));
            }
            continue;
        }
        if s.pos + 1 > s.capacity {
            let cap = s.reserved.min(s.capacity + GROW.max(s.capacity / 2));
            match model.grow_cache(&s.cache, cap) {
                Ok(c) => {
                    stats
                        .kv_bytes
                        .fetch_add(((cap - s.capacity) * per_pos) as i64, Ordering::Relaxed);
                    s.cache = c;
                    s.capacity = cap;
                }
                Err(e) => {
                    fail(s, &format!("KV cache: {e}"));
                    continue;
                }
            }
        }
        plan.push((i, 0));
    }
    plan
}

/// Remove finished sequences, freeing their KV cache.
fn retire(running: &mut Vec<Seq>, reserved_bytes: &mut usize, per_pos: usize, stats: &GenStats) {
    running.retain(|s| {
        if !s.done {
            return true;
        }
        *reserved_bytes -= s.reserved * per_pos;
        stats.running.fetch_sub(1, Ordering::Relaxed);
        stats
            .kv_reserved
            .fetch_sub((s.reserved * per_pos) as i64, Ordering::Relaxed);
        stats
            .kv_bytes
            .fetch_sub((s.capacity * per_pos) as i64, Ordering::Relaxed);
        false
    });
}

fn fail(s: &mut Seq, msg: &str) {
    let _ = s.job.events.send(Event::Error(msg.to_string()));
    s.done = true;
}

/// Where the first stop sequence starts in `text[from..]`, if one does.
fn find_stop(text: &str, from: usize, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter_map(|st| text[from..].find(st.as_str()).map(|i| from + i))
        .min()
}

/// The longest tail of `text` (starting at or after `from`, on a character
/// boundary) that is a proper prefix of a stop sequence: it must be held
/// back until the next tokens show whether the stop sequence completes.
fn held_back(text: &str, from: usize, stops: &[String]) -> usize {
    let unsent = text.len() - from;
    let mut hold = 0;
    for st in stops {
        for k in (1..st.len()).rev() {
            if k > text.len() {
                continue;
            }
            let at = text.len() - k;
            if text.is_char_boundary(at) && st.as_bytes().starts_with(&text.as_bytes()[at..]) {
                // A stop's prefix may have begun in text already sent: only
                // the unsent part of it can still be held (`from` and `at`
                // are both character boundaries, so the cut is one too).
                hold = hold.max(k.min(unsent));
                break;
            }
        }
    }
    hold
}

/// Record the sampled token `id`: send its text, and finish the sequence on
/// EOS, a stop sequence, `max_tokens` or a full context.
fn emit(s: &mut Seq, id: u32, tok: &ChatTokenizer, eos: u32, stats: &GenStats) {
    let now = Instant::now();
    match s.last_token_at {
        None => stats.observe_ttft((now - s.job.enqueued).as_secs_f64()),
        Some(t) => stats.observe_itl((now - t).as_secs_f64()),
    }
    s.last_token_at = Some(now);
    if id == eos && !s.job.ignore_eos {
        finish(s, Finish::Stop, stats);
        return;
    }
    s.generated += 1;
    stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
    s.next = Some(id);
    let piece = match s.decoder.push(tok, id) {
        Ok(p) => p,
        Err(e) => {
            fail(s, &e.to_string());
            return;
        }
    };
    s.text.push_str(&piece);
    if let Some(at) = find_stop(&s.text, s.sent, &s.job.stop) {
        let text = s.text[s.sent..at].to_string();
        s.sent = at;
        let _ = s.job.events.send(Event::Token { id, text });
        finish(s, Finish::Stop, stats);
        return;
    }
    let last = s.generated == s.job.max_tokens || s.pos + 1 >= s.reserved;
    if last {
        s.text.push_str(&s.decoder.finish());
    }
    let upto = if last {
        s.text.len()
    } else {
        s.text.len() - held_back(&s.text, s.sent, &s.job.stop)
    };
    let text = s.text[s.sent..upto].to_string();
    s.sent = upto;
    let _ = s.job.events.send(Event::Token { id, text });
    if last {
        finish(s, Finish::Length, stats);
    }
}

fn finish(s: &mut Seq, reason: Finish, stats: &GenStats) {
    s.done = true;
    match reason {
        Finish::Stop => stats.finished_stop.fetch_add(1, Ordering::Relaxed),
        Finish::Length => stats.finished_length.fetch_add(1, Ordering::Relaxed),
    };
    stats.observe_e2e(s.job.enqueued.elapsed().as_secs_f64());
    let _ = s.job.events.send(Event::Done {
        finish: reason,
        prompt_tokens: s.job.prompt.len(),
        completion_tokens: s.generated,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_sequences_are_found_and_held_back() {
        let stops = vec!["\n\n".to_string(), "END".to_string()];
        assert_eq!(find_stop("abc\n\nx", 0, &stops), Some(3));
        assert_eq!(find_stop("abcEN", 0, &stops), None);
        assert_eq!(held_back("abcEN", 0, &stops), 2);
        assert_eq!(held_back("abc\n", 0, &stops), 1);
        assert_eq!(held_back("abc", 0, &stops), 0);
        // Only what was not sent yet may be held.
        assert_eq!(held_back("abcEN", 4, &stops), 1);
        // A multi-byte character is never cut.
        let stops = vec!["é!".to_string()];
        assert_eq!(held_back("café", 0, &stops), 2);
    }
}
