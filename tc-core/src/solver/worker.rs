//! The Z3 side of [`scoped`](super::scoped) checks on one long-lived
//! thread, for processes that check functions one at a time as they come
//! (the macro, inside rustc or an editor's macro server).
//!
//! Z3's first context on a thread costs 20–50 ms, later ones on the same
//! thread 3–15 (the perf log, 2026-12-05 17:00); a context warmed on
//! another thread does not help. A crate build whose functions all come
//! from the macro's caches but one paid that on the one. Here every Z3
//! query of a scope runs on the worker, which keeps a fresh context ready
//! for the next scope: the first made as soon as the worker starts, beside
//! the macro's first expansions, the next whenever no scope is live.
//!
//! Nothing a check observes changes: a scope still has a context of its
//! own, on which nothing ran before its first query, with the same queries
//! replayed in the same order; the caller blocks on each answer. Only the
//! thread and the moment the context was made differ, and a scope's
//! context is dropped on the worker after the scope ends, off the caller's
//! path.

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

fn serve(jobs: Receiver<Job>) {
    let mut scopes = Scopes::default();
    loop {
        // Idle between scopes with no spare: make the next scope's context
        // now, off any caller's path. This is also the warm-up: the first
        // context on a thread is the slowest to make, and it is made as
        // the worker starts, beside the macro's first expansions. (Not
        // while a scope is live: its next query would wait for it.)
        let job = match jobs.try_recv() {
            Err(TryRecvError::Empty) if scopes.spare.is_none() && scopes.live.is_empty() => {
                scopes.make_spare();
                continue;
            }
            Err(TryRecvError::Empty) => jobs.recv().ok(),
            Ok(job) => Some(job),
            Err(TryRecvError::Disconnected) => None,
        };
        match job {
            Some(job) => scopes.serve(job),
            None => return,
        }
    }
}

/// The worker's scopes.
#[derive(Default)]
struct Scopes {
    live: HashMap<u64, Z3Scope>,
    /// Scopes whose solver unwound: their later queries answer `unknown`
    /// too, never on a fresh context that lacks their history.
    poisoned: HashSet<u64>,
    /// A fresh context made while idle, for the next scope. Nothing has run
    /// on it, so a scope that takes it is in the state it would be in
    /// with a context made at its first query: contexts share no solver
    /// state (the determinism tests run the corpus both ways).
    spare: Option<Z3Scope>,
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
        let z = match self.live.remove(&id) {
            Some(z) => z,
            None => self.spare.take().unwrap_or_else(super::new_z3_scope),
        };
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

    /// Make the spare context. Its cost is no scope's: the profile phases
    /// it records are dropped.
    fn make_spare(&mut self) {
        self.spare = Some(super::new_z3_scope());
        let _ = profile::take();
    }

    fn end(&mut self, id: u64) {
        self.poisoned.remove(&id);
        self.live.remove(&id);
    }
}
