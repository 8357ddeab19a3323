//! The whole-fn cache: a standalone `#[tensor_fn]` that checked cleanly is
//! stored as its checked IR (the bytes `tc_core::embed` embeds) and its
//! signature's documentation, keyed by everything its verdict depends on.
//! On the next build, or the next expansion in an editor, an unchanged fn
//! is expanded from the entry without being checked again: no lowering,
//! no obligations, no solver.
//!
//! Identity. A standalone tensor fn's verdict is a function of its own
//! tokens (the attribute's and the item's: no module constants, callees or
//! weight structs reach it), the checker and Z3 (the proof cache's
//! identity, `tc_core::solver::proof_cache_identity`), this crate's code
//! (its source fingerprint, from `build.rs`) and the solver settings
//! (`TC_SOLVER_*`). The entry's name is a hash of all of it; the entry
//! holds all of it in full and a load compares it, so a hash collision or
//! an entry of other code or settings is a miss, never an expansion.
//!
//! Only clean verdicts are stored: a fn with errors is checked every time,
//! so its diagnostics are the checker's own. Integrity and trust are the
//! proof cache's (`tc-core/src/solver/disk.rs`): a checksum over the whole
//! entry, atomic writes by rename, entries read through
//! `tc_fingerprint::read_entry` (never a link, FIFO or huge file), and the
//! directory trusted like `target/` itself. The entries live in `fns/`
//! under the proof cache's directory (`proof_cache.rs`, this thread's
//! `tc_core::solver::proof_cache_dir`), and are off when it is.

use std::fs;
use std::path::PathBuf;

use proc_macro2::TokenStream;

const MAGIC: &str = "TC-FN-CACHE-1\n";

/// An entry's identity: everything the expansion depends on.
pub struct Key {
    material: String,
    path: PathBuf,
}

/// What an entry restores: the signature's rendered documentation and the
/// checked IR's embedded bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Expansion {
    pub doc: String,
    pub ir: Vec<u8>,
}

/// The key of a standalone tensor fn, or `None` when this thread's checks
/// have no proof cache (`proof_cache::install`).
pub fn key(attr: &TokenStream, item: &TokenStream) -> Option<Key> {
    let dir = tc_core::solver::proof_cache_dir()?.join("fns");
    Some(key_in(dir, attr, item))
}

fn key_in(dir: PathBuf, attr: &TokenStream, item: &TokenStream) -> Key {
    use tc_core::env::{TC_SOLVER_FAST, TC_SOLVER_MAX_RLIMIT, TC_SOLVER_RLIMIT};
    let setting = |v: tc_core::env::Var| v.get().unwrap_or_default();
    let material = format!(
        "{MAGIC}{}macros {}\nsettings {:?} {:?} {:?}\nattr {attr}\nitem {item}\n",
        tc_core::solver::proof_cache_identity(),
        env!("TC_MACROS_SOURCE_FINGERPRINT"),
        setting(TC_SOLVER_RLIMIT),
        setting(TC_SOLVER_MAX_RLIMIT),
        setting(TC_SOLVER_FAST),
    );
    let name = tc_fingerprint::fingerprint(&[(String::new(), material.clone().into_bytes())]);
    Key {
        material,
        path: dir.join(name),
    }
}

/// `material`, then the documentation and the IR each after its length
/// (u64, little-endian), then an FNV-1a 64 checksum of all before it.
fn encode(key: &Key, e: &Expansion) -> Vec<u8> {
    let mut out = key.material.clone().into_bytes();
    for part in [e.doc.as_bytes(), &e.ir] {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
        out.extend_from_slice(part);
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn decode(key: &Key, bytes: &[u8]) -> Option<Expansion> {
    let (body, sum) = bytes.split_at(bytes.len().checked_sub(8)?);
    if checksum(body).to_le_bytes() != sum {
        return None;
    }
    let mut rest = body.strip_prefix(key.material.as_bytes())?;
    let mut part = || -> Option<Vec<u8>> {
        let (len, tail) = rest.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        let (p, tail) = (tail.get(..len)?, tail.get(len..)?);
        rest = tail;
        Some(p.to_vec())
    };
    let doc = String::from_utf8(part()?).ok()?;
    let ir = part()?;
    rest.is_empty().then_some(Expansion { doc, ir })
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The stored expansion, if the entry is whole and states this key.
pub fn load(key: &Key) -> Option<Expansion> {
    // An entry is the fn's tokens and IR: far below 16 MiB.
    match tc_fingerprint::read_entry(&key.path, 16 << 20) {
        tc_fingerprint::Entry::Read(bytes) => decode(key, &bytes),
        tc_fingerprint::Entry::Absent | tc_fingerprint::Entry::Refused => None,
    }
}

/// Store an expansion; failures (a read-only or full disk) are ignored:
/// the cache only ever saves work.
pub fn save(key: &Key, e: &Expansion) {
    let Some(dir) = key.path.parent() else {
        return;
    };
    if fs::create_dir_all(dir).is_ok() {
        let _ = tc_fingerprint::write_entry(dir, &key.path, &encode(key, e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("tc-fn-cache-test-{}", std::process::id()))
    }

    #[test]
    fn round_trip_and_refusals() {
        let d = dir();
        let item = quote!(
            fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
                x
            }
        );
        let k = key_in(d.clone(), &quote!(), &item);
        let e = Expansion {
            doc: "fn f[N](x: Tensor[f32; N]) -> Tensor[f32; N]".into(),
            ir: vec![0, 1, 2, 255],
        };
        assert_eq!(load(&k), None, "an absent entry is a miss");
        save(&k, &e);
        assert_eq!(load(&k), Some(e));
        // Every byte matters: a flipped byte anywhere is a miss.
        let bytes = fs::read(&k.path).unwrap();
        for i in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert_eq!(decode(&k, &b), None, "byte {i} flipped");
        }
        // So is a truncation, and an entry made for other tokens under this name.
        assert_eq!(decode(&k, &bytes[..bytes.len() - 1]), None);
        let other = key_in(d.clone(), &quote!(requires(N > 1)), &item);
        assert_ne!(other.path, k.path, "the attribute is part of the key");
        assert_eq!(decode(&other, &bytes), None);
        let body = key_in(
            d.clone(),
            &quote!(),
            &quote!(
                fn f(x: Tensor![f32; N]) -> Tensor![f32; N] {
                    x + x
                }
            ),
        );
        assert_ne!(body.path, k.path, "the body is part of the key");
        // A link at the name is refused, not followed.
        #[cfg(unix)]
        {
            fs::remove_file(&k.path).unwrap();
            std::os::unix::fs::symlink("/dev/zero", &k.path).unwrap();
            assert_eq!(load(&k), None);
        }
        fs::remove_dir_all(&d).unwrap();
    }
}
