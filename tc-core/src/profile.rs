//! Where the checker's time goes, for `scripts/macro-cost.sh` and issue #48.
//!
//! Off unless `TC_PROFILE` names a file: then each phase [`time`]d on a
//! thread is summed there, and [`flush`] appends one line per checked unit
//! (`label phase=µs/count …`) to that file. A proc macro cannot print to the
//! build's output without making a warning of it, hence the file. When off,
//! [`time`] is one relaxed atomic load and a call, so the instrumentation can
//! stay in the release path.

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn target() -> Option<&'static str> {
    static T: OnceLock<Option<String>> = OnceLock::new();
    T.get_or_init(|| crate::env::TC_PROFILE.get().filter(|s| !s.is_empty()))
        .as_deref()
}

/// Whether `TC_PROFILE` is set.
pub fn enabled() -> bool {
    target().is_some()
}

thread_local! {
    static PHASES: RefCell<Vec<(&'static str, Duration, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Add `d` to `phase` on this thread (a no-op when profiling is off).
pub fn add(phase: &'static str, d: Duration) {
    if !enabled() {
        return;
    }
    PHASES.with(|p| {
        let mut p = p.borrow_mut();
        match p.iter_mut().find(|(n, _, _)| *n == phase) {
            Some(e) => {
                e.1 += d;
                e.2 += 1;
            }
            None => p.push((phase, d, 1)),
        }
    })
}

/// Run `f`, counting its wall time to `phase` when profiling is on.
pub fn time<R>(phase: &'static str, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    add(phase, t.elapsed());
    r
}

/// Add phases recorded on another thread (with their counts) to this
/// thread's.
pub fn merge(phases: Vec<(&'static str, Duration, u64)>) {
    if !enabled() || phases.is_empty() {
        return;
    }
    PHASES.with(|p| {
        let mut p = p.borrow_mut();
        for (phase, d, n) in phases {
            match p.iter_mut().find(|(name, _, _)| *name == phase) {
                Some(e) => {
                    e.1 += d;
                    e.2 += n;
                }
                None => p.push((phase, d, n)),
            }
        }
    })
}

/// The phases summed on this thread since the last [`take`], in first-seen order.
pub fn take() -> Vec<(&'static str, Duration, u64)> {
    PHASES.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Append this thread's phases as one line labelled `label` to the
/// `TC_PROFILE` file and clear them. Errors are ignored: profiling must
/// never change what the macro does.
pub fn flush(label: &str) {
    let Some(path) = target() else { return };
    let phases = take();
    let mut line = label.replace(char::is_whitespace, "_");
    for (n, d, c) in phases {
        line.push_str(&format!(" {n}={}/{c}", d.as_micros()));
    }
    line.push('\n');
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write of the whole line: concurrent rustc processes append
        // whole lines (O_APPEND), never interleaved halves.
        let _ = f.write_all(line.as_bytes());
    }
}
