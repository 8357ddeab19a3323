//! Issue #11 item 4: a verdict is a function of the program alone — never of
//! the order in which functions are checked, of the thread, or of what that
//! thread checked before (solver state, the result cache).
//!
//! A corpus of functions — transcriptions of cases from `op_rules.rs`,
//! `section_examples.rs` and the UI cases (`tests/ui/solver/`, `layout/`),
//! real-model reshapes, and a seeded generator of reshape / broadcast / slice
//! obligations over linear, divisibility and product-axiom facts — is checked
//! in several orders and thread layouts; every layout must produce the same
//! verdicts, messages, spans and counterexamples as checking each function on
//! a fresh thread.

use std::thread;

use tc_core::build::FnBuilder;
use tc_core::check::{cex_string, check_function};
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, Signatures};
use tc_core::{Dim, Dtype, Pred, Type};

fn v(s: &str) -> Dim {
    Dim::var(s)
}

fn f32t(dims: Vec<Dim>) -> Type {
    Type::tensor(Dtype::F32, dims)
}

fn sh(s: &str) -> Vec<Dim> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| match x.parse::<i64>() {
            Ok(n) => Dim::c(n),
            Err(_) => Dim::var(x),
        })
        .collect()
}

/// A function that reshapes `x: [in]` to `target` under `requires`/`axioms`.
fn reshape_fn(
    name: &str,
    input: Vec<Dim>,
    target: Vec<Dim>,
    req: &[Pred],
    ax: &[Pred],
) -> Function {
    let mut b = FnBuilder::new(name);
    let x = b.param("x", f32t(input));
    let named = target.iter().flat_map(|d| d.vars());
    for n in named.chain(req.iter().chain(ax).flat_map(|p| p.vars())) {
        b.declare(&n);
    }
    for p in req {
        b.requires(p.clone());
    }
    for p in ax {
        b.axiom(p.clone());
    }
    b.returns(f32t(target.clone()));
    let y = b.op(Op::Reshape(target, x));
    b.finish(y)
}

/// Hand-picked cases: each names where it comes from.
fn transcribed() -> Vec<Function> {
    let mut out = Vec::new();
    // op_rules.rs `nonlinear_reshape`: linear facts, non-linear volume goal.
    out.push(reshape_fn(
        "nonlinear_reshape",
        sh("X, Y, Z"),
        vec![v("Y"), v("Z"), v("P") + v("Q")],
        &[
            Pred::eq(v("X"), v("Y") * 3 + v("Z") * 5 + 7),
            Pred::eq(v("P"), v("Y") * 3 + 7),
            Pred::eq(v("Q"), v("Z") * 5),
        ],
        &[],
    ));
    // op_rules.rs `axioms_accepted` / `axioms_rejected`.
    let pxy = Pred::eq(v("P"), v("X") * v("Y"));
    out.push(reshape_fn(
        "axiom_p",
        sh("X, Y"),
        sh("P"),
        &[],
        std::slice::from_ref(&pxy),
    ));
    out.push(reshape_fn("no_axiom_p", sh("X, Y"), sh("P"), &[], &[]));
    out.push(reshape_fn(
        "axiom_2p",
        sh("X, Y"),
        sh("P"),
        &[],
        &[Pred::eq(v("P"), v("X") * v("Y") * 2)],
    ));
    out.push(reshape_fn(
        "axiom_products",
        sh("A, C"),
        sh("E, F"),
        &[],
        &[Pred::eq(v("A") * v("C"), v("E") * v("F"))],
    ));
    out.push(reshape_fn(
        "x_squared_is_two",
        sh("X"),
        sh("X"),
        &[Pred::ge("X", 1)],
        &[Pred::eq(v("X") * v("X"), 2)],
    ));
    // section_examples.rs `reshape_products` without the bridging requires.
    out.push(reshape_fn(
        "reshape_products",
        sh("A, C"),
        sh("E, F"),
        &[],
        &[
            Pred::eq(v("Pin"), v("A") * v("C")),
            Pred::eq(v("Pout"), v("E") * v("F")),
        ],
    ));
    // tests/ui/solver/budget_unknown.rs: `X * X == 2 * Y * Y`.
    out.push(reshape_fn(
        "budget_unknown",
        sh("X, Y"),
        sh("Y, X"),
        &[],
        &[Pred::eq(v("X") * v("X"), v("Y") * v("Y") * 2)],
    ));
    // Cubic axioms (issue #11 item 6): one satisfiable, one with no solution.
    out.push(reshape_fn(
        "cubic_volume",
        sh("X, Y, Z"),
        sh("V"),
        &[],
        &[Pred::eq(v("V"), v("X") * v("Y") * v("Z"))],
    ));
    out.push(reshape_fn(
        "cubic_fermat",
        sh("X, Y, Z"),
        sh("Z, Y, X"),
        &[],
        &[Pred::eq(
            v("X") * v("X") * v("X") + v("Y") * v("Y") * v("Y"),
            v("Z") * v("Z") * v("Z"),
        )],
    ));
    out.extend(real_models());
    out
}

/// Reshapes from real models (issue #11's corpus).
fn real_models() -> Vec<Function> {
    let two = Dim::c(2);
    let (h, w) = (v("H"), v("W"));
    // Swin patch merge: [B, H, W, C] → [B, H/2, 2, W/2, 2, C]; wrong for odd W.
    let swin_target = vec![
        v("B"),
        h.div(&two),
        two.clone(),
        w.div(&two),
        two.clone(),
        v("C"),
    ];
    let swin_req = [Pred::eq(h.rem(&two), 0), Pred::ge("W", 2)];
    // Split heads (GPT-2): [B, S, D] → [B, S, H, D / H] with D % H == 0.
    let heads = vec![v("B"), v("S"), v("NH"), v("D").div(&v("NH"))];
    let heads_req = [Pred::eq(v("D").rem(&v("NH")), 0)];
    // ViT patchify: [B, C, GH * 16, GW * 16] → [B, C, GH, 16, GW, 16].
    let vit_in = vec![v("B"), v("C"), v("GH") * 16, v("GW") * 16];
    vec![
        reshape_fn(
            "swin_merge",
            sh("B, H, W, C"),
            swin_target.clone(),
            &swin_req,
            &[],
        ),
        reshape_fn(
            "swin_merge_even",
            sh("B, H, W, C"),
            swin_target,
            &[swin_req[0].clone(), Pred::eq(w.rem(&two), 0)],
            &[],
        ),
        reshape_fn("split_heads", sh("B, S, D"), heads.clone(), &heads_req, &[]),
        reshape_fn("split_heads_no_div", sh("B, S, D"), heads, &[], &[]),
        reshape_fn("vit_patchify", vit_in, sh("B, C, GH, 16, GW, 16"), &[], &[]),
    ]
}

/// The 200-op body of `benches/check.rs`, shortened to `blocks` blocks.
fn deep_body(blocks: usize) -> Function {
    let bsd = sh("B, S, D");
    let mut b = FnBuilder::new("deep");
    let x = b.param("x", f32t(bsd.clone()));
    let w = b.param("w", f32t(sh("B, E, D")));
    let y = b.param("y", f32t(sh("B, T, D")));
    b.declare("H");
    b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    b.requires(Pred::eq("E", "D"));
    b.requires(Pred::eq("T", "S"));
    b.requires(Pred::ge("D", 32));
    b.returns(f32t(bsd.clone()));
    let split = vec![v("B"), v("S"), v("H"), v("D").div(&v("H"))];
    let mut cur = x;
    for i in 0..blocks {
        let m = b.op(Op::Matmul(cur, w));
        let a = b.op(Op::Binary(BinaryOp::Add, m, y));
        let r = b.op(Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![2],
            keepdims: true,
            x: a,
        });
        let bc = b.op(Op::Broadcast(bsd.clone(), r));
        let s = b.op(Op::Binary(BinaryOp::Sub, a, bc));
        let cut = v("D") - (i as i64 + 1);
        let lo = b.op(Op::Slice {
            axis: 2,
            start: Dim::c(0),
            stop: cut.clone(),
            step: 1,
            x: s,
        });
        let hi = b.op(Op::Slice {
            axis: 2,
            start: cut,
            stop: v("D") + (i as i64 % 3) - 1, // out of bounds when i % 3 == 2
            step: 1,
            x: s,
        });
        let cc = b.op(Op::Concat(2, vec![lo, hi]));
        cur = if i % 2 == 0 {
            let sp = b.op(Op::Reshape(split.clone(), cc));
            b.op(Op::Reshape(bsd.clone(), sp))
        } else {
            cc
        };
    }
    b.finish(cur)
}

/// A small deterministic generator (64-bit LCG), so the corpus is fixed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Facts over A, B, C, P drawn from a pool mixing linear, divisibility and
/// product facts; the goals are reshapes, broadcasts and slices over them.
fn generated(count: usize, seed: u64) -> Vec<Function> {
    let mut rng = Lcg(seed);
    let facts = [
        Pred::eq(v("A").rem(&Dim::c(4)), 0),
        Pred::eq(v("A").rem(&v("B")), 0),
        Pred::eq(v("C"), v("B") * 2),
        Pred::ge("B", 3),
        Pred::le("A", 64),
        Pred::eq(v("B").rem(&Dim::c(2)), 1),
    ];
    let axioms = [
        Pred::eq(v("P"), v("A") * v("B")),
        Pred::eq(v("P") * v("C"), v("A") * v("B") * v("B")),
    ];
    let targets: Vec<Vec<Dim>> = vec![
        vec![v("A").div(&Dim::c(4)), Dim::c(4), v("B")],
        vec![v("A").div(&v("B")), v("B"), v("B")],
        vec![v("P")],
        vec![v("C"), v("A").div(&Dim::c(2))],
        vec![v("B"), v("A")],
    ];
    let mut out = Vec::new();
    for i in 0..count {
        let req: Vec<Pred> = (0..1 + rng.next(3))
            .map(|_| facts[rng.next(facts.len())].clone())
            .collect();
        let ax: Vec<Pred> = match rng.next(3) {
            0 => vec![axioms[rng.next(axioms.len())].clone()],
            _ => vec![],
        };
        let name = format!("gen{i}");
        let f = match rng.next(3) {
            0 | 1 => {
                let t = targets[rng.next(targets.len())].clone();
                reshape_fn(&name, sh("A, B"), t, &req, &ax)
            }
            _ => slice_broadcast(&name, &req, rng.next(4) as i64),
        };
        out.push(f);
    }
    out
}

/// A slice of `[A, B]` along axis 0 to `A / 2 + k`, broadcast to `[C, ·, B]`.
fn slice_broadcast(name: &str, req: &[Pred], k: i64) -> Function {
    let mut b = FnBuilder::new(name);
    let x = b.param("x", f32t(sh("A, B")));
    b.declare("C");
    for p in req {
        b.requires(p.clone());
    }
    let stop = v("A").div(&Dim::c(2)) + k;
    let s = b.op(Op::Slice {
        axis: 0,
        start: Dim::c(1),
        stop: stop.clone(),
        step: 1,
        x,
    });
    let target = vec![v("C"), stop - 1, v("B")];
    b.returns(f32t(target.clone()));
    let y = b.op(Op::Broadcast(target, s));
    b.finish(y)
}

fn corpus() -> Vec<Function> {
    let mut out = transcribed();
    out.push(deep_body(6));
    out.extend(generated(24, 0x7c11));
    out
}

/// Everything a user can see of one verdict.
fn verdict(f: &Function) -> String {
    match check_function(f, &Signatures::new()) {
        Ok(c) => {
            let tys: Vec<String> = c.types.values().map(|t| t.to_string()).collect();
            format!("{}: ok {}", f.sig.name, tys.join("; "))
        }
        Err(es) => {
            let ds: Vec<String> = es
                .iter()
                .map(|d| format!("{d} @{:?} [{}]", d.span, cex_string(d)))
                .collect();
            format!("{}: {}", f.sig.name, ds.join(" || "))
        }
    }
}

/// Check `order` on one new thread; results by corpus index.
fn one_thread(fs: &[Function], order: Vec<usize>) -> Vec<(usize, String)> {
    let fs = fs.to_vec();
    thread::spawn(move || order.into_iter().map(|i| (i, verdict(&fs[i]))).collect())
        .join()
        .expect("checker thread")
}

fn by_index(n: usize, pairs: Vec<(usize, String)>) -> Vec<String> {
    let mut out = vec![String::new(); n];
    for (i, s) in pairs {
        out[i] = s;
    }
    out
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Lcg(seed);
    let mut idx: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        idx.swap(i, rng.next(i + 1));
    }
    idx
}

#[track_caller]
fn assert_same(layout: &str, want: &[String], got: &[String]) {
    for (w, g) in want.iter().zip(got) {
        assert_eq!(w, g, "layout `{layout}` changed a verdict");
    }
}

#[test]
fn verdicts_do_not_depend_on_order_or_thread() {
    let fs = corpus();
    let n = fs.len();
    // Reference: every function on a fresh thread (fresh solver, cold cache).
    let fresh: Vec<String> = (0..n)
        .map(|i| one_thread(&fs, vec![i]).remove(0).1)
        .collect();
    // The corpus must exercise both verdicts, or this test proves nothing.
    assert!(fresh.iter().any(|s| s.contains(": ok ")));
    assert!(fresh.iter().any(|s| s.contains("error[")));

    let forward: Vec<usize> = (0..n).collect();
    assert_same(
        "in order",
        &fresh,
        &by_index(n, one_thread(&fs, forward.clone())),
    );
    let backward: Vec<usize> = (0..n).rev().collect();
    assert_same("reversed", &fresh, &by_index(n, one_thread(&fs, backward)));
    for seed in [1, 2, 3] {
        let got = by_index(n, one_thread(&fs, shuffled(n, seed)));
        assert_same(&format!("shuffled seed {seed}"), &fresh, &got);
    }
    // Twice on one thread: the second pass answers from a warm cache.
    let twice: Vec<usize> = forward.iter().chain(forward.iter()).copied().collect();
    let second: Vec<(usize, String)> = one_thread(&fs, twice).split_off(n);
    assert_same("second pass", &fresh, &by_index(n, second));
    // Two threads at once, interleaved.
    let (even, odd): (Vec<usize>, Vec<usize>) = forward.iter().partition(|i| *i % 2 == 0);
    let (fe, fo) = (fs.clone(), fs.clone());
    let t0 = thread::spawn(move || one_thread(&fe, even));
    let t1 = thread::spawn(move || one_thread(&fo, odd));
    let mut both = t0.join().expect("thread 0");
    both.extend(t1.join().expect("thread 1"));
    assert_same("two threads", &fresh, &by_index(n, both));
}

#[test]
fn verdicts_do_not_depend_on_the_previous_check() {
    // Found by this test before the fix: `swin_merge_even` was accepted on a
    // fresh thread and rejected (E0501) right after `nonlinear_reshape`.
    let fs: Vec<Function> = transcribed().into_iter().chain([deep_body(4)]).collect();
    // Predecessors that leave the most behind in a reused solver: products,
    // refinement, unknowns, a long body.
    let heavy = [
        "nonlinear_reshape",
        "reshape_products",
        "budget_unknown",
        "swin_merge",
        "deep",
    ];
    let before: Vec<usize> = (0..fs.len())
        .filter(|&j| heavy.contains(&fs[j].sig.name.as_str()))
        .collect();
    assert_eq!(before.len(), heavy.len());
    for i in 0..fs.len() {
        let fresh = one_thread(&fs, vec![i]).remove(0).1;
        for &j in &before {
            let after = one_thread(&fs, vec![j, i]).remove(1).1;
            assert_eq!(fresh, after, "after `{}`", fs[j].sig.name);
        }
    }
}

/// `one_thread` with this thread's solver configured by `setup` first.
fn one_thread_with(
    fs: &[Function],
    order: Vec<usize>,
    setup: impl FnOnce() + Send + 'static,
) -> Vec<(usize, String)> {
    let fs = fs.to_vec();
    thread::spawn(move || {
        setup();
        order.into_iter().map(|i| (i, verdict(&fs[i]))).collect()
    })
    .join()
    .expect("checker thread")
}

#[test]
fn verdicts_do_not_depend_on_shuffled_orders_on_several_threads() {
    let fs = corpus();
    let n = fs.len();
    let fresh: Vec<String> = (0..n)
        .map(|i| one_thread(&fs, vec![i]).remove(0).1)
        .collect();
    // Four threads at once, each the whole corpus in its own shuffled order.
    let handles: Vec<_> = (0..4u64)
        .map(|seed| {
            let fs = fs.clone();
            thread::spawn(move || one_thread(&fs, shuffled(fs.len(), 100 + seed)))
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let got = by_index(n, h.join().expect("thread"));
        assert_same(&format!("thread {t} of 4, shuffled"), &fresh, &got);
    }
}

/// Set in the child process of `verdicts_are_the_same_on_the_z3_worker`.
const WORKER_CHILD: &str = "DETERMINISM_Z3_WORKER_CHILD";

#[test]
fn verdicts_are_the_same_on_the_z3_worker() {
    // The worker is process-wide once started, so its checks run in a
    // child process (this binary again, one ignored test) and are compared
    // with this process's, made on the checking threads.
    let fs = corpus();
    let fresh: Vec<String> = (0..fs.len())
        .map(|i| format!("{:?}", one_thread(&fs, vec![i]).remove(0).1))
        .collect();
    let child = concat!(module_path!(), "::z3_worker_child");
    let child = child.split_once("::").map_or(child, |(_, name)| name);
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_CHILD, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = 0;
    // (The harness prints the child's name before its output, on the same
    // line as the first of it: the child starts with a newline.)
    for line in stdout.lines().filter_map(|l| l.strip_prefix("verdict ")) {
        let mut parts = line.splitn(3, ' ');
        let (layout, i, got) = (parts.next(), parts.next(), parts.next());
        let (Some(layout), Some(i), Some(got)) = (layout, i, got) else {
            panic!("malformed child line: {line}");
        };
        let i: usize = i.parse().expect("an index");
        assert_eq!(
            fresh[i], got,
            "layout `{layout}` on the Z3 worker changed a verdict"
        );
        seen += 1;
    }
    // Forward and reversed on one thread, then four shuffled threads.
    assert_eq!(
        seen,
        6 * fs.len(),
        "the child checked too little:\n{stdout}"
    );
}

/// The child of `verdicts_are_the_same_on_the_z3_worker`: every check's Z3
/// work on the worker, from one thread in two orders, then from four
/// threads at once in shuffled orders.
#[test]
#[ignore = "run by verdicts_are_the_same_on_the_z3_worker in a child process"]
fn z3_worker_child() {
    if std::env::var_os(WORKER_CHILD).is_none() {
        return;
    }
    tc_core::solver::use_worker();
    assert!(
        tc_core::solver::uses_worker(),
        "the Z3 worker did not start"
    );
    let fs = corpus();
    let n = fs.len();
    println!();
    let print = |layout: &str, got: Vec<(usize, String)>| {
        for (i, v) in got {
            println!("verdict {layout} {i} {v:?}");
        }
    };
    print("forward", one_thread(&fs, (0..n).collect()));
    print("reversed", one_thread(&fs, (0..n).rev().collect()));
    let handles: Vec<_> = (0..4u64)
        .map(|seed| {
            let fs = fs.clone();
            thread::spawn(move || one_thread(&fs, shuffled(fs.len(), 200 + seed)))
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        print(&format!("shuffled-{t}"), h.join().expect("thread"));
    }
}

#[test]
fn the_answers_before_z3_change_no_verdict() {
    // `solver/fast.rs` only proves (valid, or satisfiable by a witness); Z3
    // alone must reach the same verdicts, messages and counterexamples.
    let fs = corpus();
    let n = fs.len();
    let with: Vec<String> = by_index(n, one_thread(&fs, (0..n).collect()));
    let without = by_index(
        n,
        one_thread_with(&fs, (0..n).collect(), || {
            tc_core::solver::set_fast_path_enabled(false)
        }),
    );
    assert_same("Z3 alone", &without, &with);
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!(
            "tc-proof-cache-{tag}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn proof_cache_answers_are_the_cold_answers() {
    let fs = corpus();
    let n = fs.len();
    let fresh: Vec<String> = (0..n)
        .map(|i| one_thread(&fs, vec![i]).remove(0).1)
        .collect();
    let tmp = TempDir::new("determinism");
    let dir = tmp.0.clone();
    let with_cache = move || {
        let d = dir.clone();
        move || tc_core::solver::set_proof_cache(Some(&d))
    };
    let cold = by_index(n, one_thread_with(&fs, (0..n).collect(), with_cache()));
    assert_same("cold, filling the proof cache", &fresh, &cold);
    let files = entries(&tmp.0);
    assert!(
        !files.is_empty(),
        "the corpus reaches Z3, so entries are written"
    );
    // Warm: reversed and shuffled on several threads, every answer from disk.
    let backward: Vec<usize> = (0..n).rev().collect();
    let stats = tc_core::solver::proof_cache_stats();
    let hits = stats.hits.load(std::sync::atomic::Ordering::Relaxed);
    let warm = by_index(n, one_thread_with(&fs, backward, with_cache()));
    assert_same("warm, reversed", &fresh, &warm);
    assert!(stats.hits.load(std::sync::atomic::Ordering::Relaxed) > hits);
    let handles: Vec<_> = (0..3u64)
        .map(|seed| {
            let (fs, setup) = (fs.clone(), with_cache());
            thread::spawn(move || one_thread_with(&fs, shuffled(fs.len(), 200 + seed), setup))
        })
        .collect();
    for h in handles {
        assert_same(
            "warm, shuffled threads",
            &fresh,
            &by_index(n, h.join().expect("thread")),
        );
    }
    // Corrupt every entry three ways; each is refused, recomputed, rewritten.
    for (k, f) in files.iter().enumerate() {
        let mut bytes = std::fs::read(f).expect("entry");
        match k % 3 {
            0 => {
                let i = bytes.len() / 2;
                bytes[i] ^= 0x20;
            }
            1 => bytes.truncate(bytes.len() / 3),
            // A well-formed entry of another query: right checksum, wrong key.
            _ => bytes = std::fs::read(&files[(k + 1) % files.len()]).expect("entry"),
        }
        std::fs::write(f, bytes).expect("corrupt");
    }
    let rejected = stats.rejected.load(std::sync::atomic::Ordering::Relaxed);
    let after = by_index(n, one_thread_with(&fs, (0..n).collect(), with_cache()));
    assert_same("corrupt entries", &fresh, &after);
    assert!(stats.rejected.load(std::sync::atomic::Ordering::Relaxed) > rejected);
    let again = by_index(n, one_thread_with(&fs, shuffled(n, 7), with_cache()));
    assert_same("rewritten entries", &fresh, &again);
}
