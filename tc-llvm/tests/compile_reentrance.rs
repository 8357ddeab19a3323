//! First calls of one function from many pool workers at once: the first
//! compiles the kernels under the cache slot's lock while the others wait
//! for them. Were the compile to wait on the rayon pool itself (a join, a
//! parallel iterator), the worker holding the lock could take another of
//! those calls from its queue while it waits, and wait for itself
//! forever; a server whose requests arrive together hung so (the
//! embeddings tests of tc-serve, stack traces of both pool workers blocked
//! on one slot, one of them below its own compile). The interleaving
//! depends on timing, and this stress of it did not hang on the code
//! before the fix in the runs tried; `offpool`'s unit tests pin the
//! mechanism (a compile's parallel work runs on no pool worker).

use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rayon::prelude::*;
use tc_core::ir::{BinaryOp, Op, Scalar};
use tc_core::{Dim, Dtype};
use tc_llvm::JitOptions;

use crate::util::*;

#[test]
fn concurrent_first_calls_on_pool_workers_do_not_deadlock() {
    // A constant of this run's own makes the function new to the
    // persistent cache too, so its first call compiles with LLVM.
    let k = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos()) as f64;
    // Layers of a product and a softmax: a module of several parts, which
    // the compile optimises side by side.
    let mut b = builder("first_calls_together");
    let x = b.param("x", tt(Dtype::F32, &["M", "K"]));
    let w = b.param("w", tt(Dtype::F32, &["K", "K"]));
    b.returns(tt(Dtype::F32, &["M", "K"]));
    let mut h = x;
    for _ in 0..8 {
        let y = b.op(Op::Matmul(h, w));
        let y = b.op(Op::ScalarBinary {
            op: BinaryOp::Add,
            x: y,
            s: Scalar::Float(k),
            scalar_left: false,
        });
        h = softmax_rows(&mut b, y, vec![Dim::var("M"), Dim::var("K")]);
    }
    let f = b.finish(h);
    let mut rng = Rng(11);
    let a = random(&mut rng, Dtype::F32, &[64, 96], false);
    let wt = random(&mut rng, Dtype::F32, &[96, 96], false);
    let jit = std::sync::Arc::new(jit_with(JitOptions::default()));
    let f = std::sync::Arc::new(f);
    let (tx, rx) = mpsc::channel();
    // Callers outside the pool, as a server's request threads are: each
    // call's session is a job the pool's workers take from the injector,
    // also while one of them waits inside a compile.
    let callers = 8;
    for i in 0..callers {
        let (jit, f, tx) = (jit.clone(), f.clone(), tx.clone());
        let (a, wt) = (a.clone(), wt.clone());
        std::thread::spawn(move || {
            // The first call's session is under way (its compile too) when
            // the others arrive.
            if i > 0 {
                std::thread::sleep(Duration::from_millis(5 + 3 * i as u64));
            }
            let ok = (0..4).all(|_| {
                tc_llvm::session(|| {
                    let args = [a.clone().into(), wt.clone().into()];
                    (0..4)
                        .into_par_iter()
                        .all(|_| jit.call(&f, &args, &|_| None).is_ok())
                })
            });
            let _ = tx.send(ok);
        });
    }
    for _ in 0..callers {
        let ok = rx
            .recv_timeout(Duration::from_secs(240))
            .expect("first calls from 8 threads did not finish: deadlocked");
        assert!(ok, "a call failed");
    }
}
