//! The pool tc builds on its first call (`tc_llvm::threads`): each worker
//! pinned to a CPU of its own when there is one per CPU the process may run
//! on (at least two), and left alone otherwise — `TC_PIN_THREADS=0`, more
//! threads than CPUs or fewer, one thread, or a global pool the program
//! built first; a call on a
//! pool of the program's own builds nothing and leaves the choice to the
//! next call from outside it.
//!
//! The global pool is built once per process, so each case runs in a child
//! process of this test binary (`child_checks_its_pool`, ignored unless
//! asked for by name), with the case in its environment; the child asserts
//! what that case must give and the parent asserts the child passed.

use std::process::Command;

/// The CPUs in the calling thread's affinity mask.
fn affinity() -> Vec<usize> {
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set; the kernel
    // fills at most its size; `CPU_ISSET` reads bits below that size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
        (0..8 * size)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

#[test]
#[ignore = "run by `every_case_pins_as_documented` in a child process"]
fn child_checks_its_pool() {
    let cpus = affinity();
    let case = std::env::var("PINNED_POOL_CASE").expect("set by the parent");
    if case == "built-first" {
        // The program uses rayon before its first tc call.
        rayon::join(|| (), || ());
    }
    if case == "own-pool-first" {
        // Its first tc call runs on a pool of its own: nothing is built
        // there, and the next call from outside builds the global pool.
        let own = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert!(
            !own.install(tc_llvm::threads::init),
            "{case}: on its own pool"
        );
        assert_eq!(tc_llvm::threads::pinned_workers(), 0, "{case}");
    }
    let built = tc_llvm::threads::init();
    let n = rayon::current_num_threads();
    let masks: Vec<Vec<usize>> = rayon::broadcast(|_| affinity());
    let pins = matches!(case.as_str(), "default" | "own-pool-first");
    let expect = pins && n >= 2 && n == cpus.len();
    let here = !matches!(case.as_str(), "off" | "built-first");
    assert_eq!(built, here, "{case}: was the pool built here");
    if expect {
        assert_eq!(tc_llvm::threads::pinned_workers(), n, "{case}");
        for (i, m) in masks.iter().enumerate() {
            assert_eq!(m, &vec![cpus[i]], "{case}: worker {i} of {n} on {cpus:?}");
        }
    } else {
        assert_eq!(tc_llvm::threads::pinned_workers(), 0, "{case}");
        assert!(
            masks.iter().all(|m| *m == cpus),
            "{case}: {masks:?} vs {cpus:?}"
        );
    }
    // Pinned or not, the main thread keeps the process's mask.
    assert_eq!(affinity(), cpus, "{case}: the calling thread");
}

#[test]
fn every_case_pins_as_documented() {
    let cpus = affinity().len();
    let fewer = cpus.saturating_sub(1).max(1).to_string();
    let cases: [(&str, &[(&str, String)]); 7] = [
        ("default", &[]),
        ("own-pool-first", &[]),
        ("off", &[("TC_PIN_THREADS", "0".into())]),
        (
            "oversubscribed",
            &[("RAYON_NUM_THREADS", (cpus + 1).to_string())],
        ),
        ("one-thread", &[("RAYON_NUM_THREADS", "1".into())]),
        // On a machine of two CPUs, the one-thread case again.
        ("fewer-than-cpus", &[("RAYON_NUM_THREADS", fewer)]),
        ("built-first", &[]),
    ];
    // The child's name as the harness lists it: its module path without
    // the crate (the test binary holds several files, one module each).
    let child = concat!(module_path!(), "::child_checks_its_pool");
    let child = child.split_once("::").map_or(child, |(_, name)| name);
    for (case, env) in cases {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
        cmd.args(["--exact", child, "--ignored", "--test-threads=1"]);
        cmd.env("PINNED_POOL_CASE", case);
        cmd.env_remove("TC_PIN_THREADS")
            .env_remove("RAYON_NUM_THREADS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run the child");
        assert!(
            out.status.success(),
            "case {case}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("1 passed"),
            "case {case} ran nothing:\n{stdout}"
        );
    }
}
