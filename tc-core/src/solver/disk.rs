//! The persistent proof cache (issue #48): Z3's answers on disk, so an
//! unchanged function costs a few file reads on the next build or editor
//! expansion instead of a Z3 context, a solver and its checks.
//!
//! Identity. Within a [`super::scoped`] check, a query's answer is a function
//! of the queries the scope's solver ran before it, in order (they share one
//! solver through push/pop). So an entry is keyed by a *chain*: a 128-bit
//! FNV-1a hash of the previous chain and this query's canonical key (facts
//! sorted by printed form, goal, counterexample order, budget), seeded with
//! the identity — tc-core's version and source fingerprint (every file of
//! `src/`, hashed by `build.rs`) and Z3's full version. The chain names the
//! file; a load compares the *whole* stored identity, previous chain and key
//! with the wanted ones, so a hash collision, an entry of another tc-core or
//! Z3, or a file from elsewhere is a miss, never an answer. Counterexamples
//! are stored with their queries, so a diagnostic is the same warm or cold.
//!
//! Exactness. A scope answered from here has not run those queries on its
//! solver; at its first miss the earlier queries are replayed, in order, so
//! the solver is in the state it would have been in cold, and the miss gets
//! the cold answer (`super::run`).
//!
//! Integrity. An entry ends with a checksum (FNV-1a 64) of everything before
//! it; a truncated or corrupted file fails it and is ignored (then
//! overwritten by the recomputed answer). Writes go to a private temporary
//! file in the same directory, then are renamed into place, so concurrent
//! writers (rustc processes, threads) and readers only see whole entries.
//!
//! Trust. The directory is a build cache, trusted like `target/` itself: the
//! checks stop accidents (stale, truncated, foreign entries), not an
//! attacker who can write to the build directory.
//!
//! Configuration: off unless a caller names a directory
//! ([`super::set_proof_cache`]); `#[tensor_fn]` names one under the build's
//! `target/` (see tc-macros' `proof_cache.rs`, overridable by
//! `TC_PROOF_CACHE=off|<dir>`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::Outcome;
use crate::diag::Counterexample;

const MAGIC: &str = "TC-PROOF-CACHE-1\n";

/// What every entry of this build is keyed by: the checker that asked and
/// the Z3 that answered.
pub(super) fn identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        format!(
            "tc-core {} source {}\nz3 {}\n",
            env!("CARGO_PKG_VERSION"),
            env!("TC_CORE_SOURCE_FINGERPRINT"),
            z3::full_version()
        )
    })
}

/// FNV-1a 128 over `parts`, each followed by a 0xff separator.
fn fnv128(parts: &[&[u8]]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    let mut h = OFFSET;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= u128::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The chain of a scope that has run nothing yet.
pub(super) fn chain_start() -> u128 {
    fnv128(&[identity().as_bytes()])
}

/// The chain after `prev` runs the query `key`.
pub(super) fn chain_next(prev: u128, key: &str) -> u128 {
    fnv128(&[&prev.to_le_bytes(), key.as_bytes()])
}

/// Counters of the proof caches on all threads (for tests and reports).
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Answers found and returned.
    pub hits: AtomicU64,
    /// Lookups that found no file.
    pub misses: AtomicU64,
    /// Files present but refused: a failed checksum, another identity,
    /// chain or key, an answer that does not parse, or not a regular file
    /// of at most 1 MiB (a FIFO, a symbolic link, a directory).
    pub rejected: AtomicU64,
    /// Entries written.
    pub writes: AtomicU64,
}

/// The process-wide counters.
pub fn stats() -> &'static DiskStats {
    static S: OnceLock<DiskStats> = OnceLock::new();
    S.get_or_init(DiskStats::default)
}

/// A proof cache directory.
#[derive(Debug)]
pub(super) struct Store {
    dir: PathBuf,
}

impl Store {
    pub(super) fn new(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
        }
    }

    /// The directory of the entries.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, chain: u128) -> PathBuf {
        self.dir.join(format!("{chain:032x}"))
    }

    /// Everything an entry states before its answer.
    fn header(prev: u128, key: &str) -> String {
        format!("{MAGIC}{}prev {prev:032x}\nkey {key}\n", identity())
    }

    fn encode(prev: u128, key: &str, out: &Outcome) -> Vec<u8> {
        let mut s = Self::header(prev, key);
        match out {
            Outcome::Unsat => s.push_str("unsat\n"),
            Outcome::Unknown => s.push_str("unknown\n"),
            Outcome::Sat(None) => s.push_str("sat\n"),
            Outcome::Sat(Some(cex)) => {
                s.push_str("cex\n");
                for (name, v) in &cex.0 {
                    s.push_str(&format!("{name}={v}\n"));
                }
            }
        }
        let sum = checksum(s.as_bytes());
        s.push_str(&format!("sum {sum:016x}\n"));
        s.into_bytes()
    }

    /// The answer stored for `chain`, if the file is whole and states this
    /// identity, `prev` and `key`.
    fn decode(bytes: &[u8], prev: u128, key: &str) -> Option<Outcome> {
        let text = std::str::from_utf8(bytes).ok()?;
        let body_end = text.strip_suffix('\n')?.rfind('\n')? + 1;
        let (body, last) = text.split_at(body_end);
        let sum =
            u64::from_str_radix(last.strip_prefix("sum ")?.trim_end_matches('\n'), 16).ok()?;
        if sum != checksum(body.as_bytes()) {
            return None;
        }
        let answer = body.strip_prefix(Self::header(prev, key).as_str())?;
        let mut lines = answer.lines();
        let out = match lines.next()? {
            "unsat" => Outcome::Unsat,
            "unknown" => Outcome::Unknown,
            "sat" => Outcome::Sat(None),
            "cex" => {
                let mut vals = Vec::new();
                for l in lines.by_ref() {
                    let (name, v) = l.rsplit_once('=')?;
                    vals.push((name.to_string(), v.parse::<i64>().ok()?));
                }
                Outcome::Sat(Some(Counterexample(vals)))
            }
            _ => return None,
        };
        lines.next().is_none().then_some(out)
    }

    /// The stored answer of the query `key` run after `prev` (whose chain is
    /// `chain`), or `None` (absent, or refused and counted).
    pub(super) fn load(&self, prev: u128, chain: u128, key: &str) -> Option<Outcome> {
        let st = stats();
        // An entry is a few hundred bytes; what sits at its name is read
        // only if it is a regular file of at most 1 MiB (never a FIFO's
        // wait or /dev/zero's endless bytes: a hang of the build).
        let bytes = match tc_fingerprint::read_entry(&self.path_of(chain), 1 << 20) {
            tc_fingerprint::Entry::Read(b) => b,
            tc_fingerprint::Entry::Absent => {
                st.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            tc_fingerprint::Entry::Refused => {
                st.rejected.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let out = Self::decode(&bytes, prev, key);
        let counter = if out.is_some() {
            &st.hits
        } else {
            &st.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// Store an answer; failures (read-only or full disk) are ignored: the
    /// cache only ever saves work.
    pub(super) fn save(&self, prev: u128, chain: u128, key: &str, out: &Outcome) {
        if fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let bytes = Self::encode(prev, key, out);
        if tc_fingerprint::write_entry(&self.dir, &self.path_of(chain), &bytes).is_ok() {
            stats().writes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let cex = Outcome::Sat(Some(Counterexample(vec![
            ("B".into(), 1),
            ("S".into(), -2),
        ])));
        for out in [Outcome::Unsat, Outcome::Unknown, Outcome::Sat(None), cex] {
            let bytes = Store::encode(7, "ent[B]|k", &out);
            assert_eq!(Store::decode(&bytes, 7, "ent[B]|k"), Some(out.clone()));
            // Another key or history: refused.
            assert_eq!(Store::decode(&bytes, 8, "ent[B]|k"), None);
            assert_eq!(Store::decode(&bytes, 7, "ent[B]|j"), None);
            // Any flipped byte, or any truncation: refused.
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 0x01;
                assert_eq!(Store::decode(&bad, 7, "ent[B]|k"), None, "byte {i}");
                assert_eq!(Store::decode(&bytes[..i], 7, "ent[B]|k"), None, "cut {i}");
            }
        }
    }
}
