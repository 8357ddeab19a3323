//! The Z3 side of [`scoped`](super::scoped) checks on one long-lived
//! thread, for processes that check functions one at a time as they come
//! (the macro, inside rustc or an editor's macro server).
//!
//! Z3's first context on a thread costs 20–50 ms, later ones on the same
//! thread a few (the perf log, 2026-12-05 17:00); a context warmed on
//! another thread does not help. A crate build whose functions all come
//! from the macro's caches but one paid that on the one. Here every Z3
//! query of a scope runs on the worker, which warms Z3 up as soon as it
//! starts, beside the macro's first expansions.
//!
//! Nothing a check observes changes: a scope still has a context of its
//! own, made at its first query that reaches Z3, with the same queries
//! replayed in the same order; the caller blocks on each answer. Only the
//! thread differs, and a scope's context is dropped on the worker after
//! the scope ends, off the caller's path.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::{Outcome, Query, Stats, Z3Scope};
use crate::profile;

enum Job {
    /// `pending` replayed, then `q`, on scope `id`'s solver (made at its
    /// first job).
    Run {
        id: u64,
        pending: Vec<Query>,
        q: Query,
        reply: Sender<Reply>,
    },
    /// Scope `id` ended.
    End(u64),
}

/// A query's outcome, with the counters and profile phases the worker
/// recorded for it (the caller's thread keeps both).
pub(super) struct Reply {
    pub(super) out: Outcome,
    pub(super) stats: Stats,
    pub(super) phases: Vec<(&'static str, Duration, u64)>,
}

static WORKER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();

/// Start the worker (once per process) and send this process's scoped Z3
/// work to it from now on. Where no thread can be spawned, the work stays
/// on the checking thread, as without this.
pub(super) fn start() {
    WORKER.get_or_init(|| {
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("tc-z3".into())
            .spawn(move || serve(rx))
            .ok()
            .map(|_| Mutex::new(tx))
    });
}

/// Whether scoped Z3 work goes to the worker.
pub(super) fn enabled() -> bool {
    matches!(WORKER.get(), Some(Some(_)))
}

/// A fresh scope id (ids name scopes on the worker).
pub(super) fn scope_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn send(job: Job) -> bool {
    let Some(Some(tx)) = WORKER.get() else {
        return false;
    };
    let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
    tx.send(job).is_ok()
}

/// Run `q` (after `pending`) on scope `id`'s solver on the worker; `None`
/// if the worker is gone.
pub(super) fn run(id: u64, pending: Vec<Query>, q: Query) -> Option<Reply> {
    let (reply, answer) = channel();
    if !send(Job::Run {
        id,
        pending,
        q,
        reply,
    }) {
        return None;
    }
    answer.recv().ok()
}

/// Scope `id` ended: its context is dropped on the worker.
pub(super) fn end(id: u64) {
    send(Job::End(id));
}

/// Warm-up rounds before the first job: the second and third contexts on
/// a thread still cost 10–15 ms, the fourth about 3 (the perf log,
/// 2026-12-05 17:00).
const WARM_ROUNDS: usize = 3;

fn serve(jobs: Receiver<Job>) {
    let mut scopes = Scopes::default();
    // Warm up until the first job comes: a job never waits for more than
    // the round in progress.
    for _ in 0..WARM_ROUNDS {
        match jobs.try_recv() {
            Ok(job) => {
                scopes.serve(job);
                break;
            }
            Err(TryRecvError::Empty) => super::warm_up_once(),
            Err(TryRecvError::Disconnected) => return,
        }
    }
    for job in jobs {
        scopes.serve(job);
    }
}

/// The worker's scopes.
#[derive(Default)]
struct Scopes {
    live: HashMap<u64, Z3Scope>,
    /// Scopes whose solver unwound: their later queries answer `unknown`
    /// too, never on a fresh context that lacks their history.
    poisoned: HashSet<u64>,
}

impl Scopes {
    fn serve(&mut self, job: Job) {
        match job {
            Job::End(id) => self.end(id),
            Job::Run {
                id,
                pending,
                q,
                reply,
            } => {
                let mut stats = Stats::default();
                let out = self.run(id, &pending, &q, &mut stats);
                let phases = profile::take();
                let _ = reply.send(Reply { out, stats, phases });
            }
        }
    }

    fn run(&mut self, id: u64, pending: &[Query], q: &Query, stats: &mut Stats) -> Outcome {
        if self.poisoned.contains(&id) {
            return Outcome::Unknown;
        }
        let z = self.live.remove(&id).unwrap_or_else(super::new_z3_scope);
        // A panic inside Z3's bindings answers `unknown` (as an exhausted
        // budget does); the worker serves on.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            super::on_z3_scope(z, pending, q, stats)
        }));
        match ran {
            Ok((Some(z), out)) => {
                self.live.insert(id, z);
                out
            }
            Ok((None, _)) | Err(_) => {
                self.poisoned.insert(id);
                Outcome::Unknown
            }
        }
    }

    fn end(&mut self, id: u64) {
        self.poisoned.remove(&id);
        self.live.remove(&id);
    }
}
