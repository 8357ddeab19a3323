//! The long-run soundness fuzzer (issue #10): random well-typed programs,
//! the interpreter against every JIT mode. See `gen.rs` for the oracle.
//!
//! ```text
//! cargo run --release --example fuzz -- --seconds 600 --isolate
//! cargo run --release --example fuzz -- --case 1234          # one case, verbose
//! cargo run --release --example fuzz -- --ops concat,slice   # bisect by family
//! cargo run --release --example fuzz -- --ops attention       # a Llama family alone
//! ```
//!
//! The Llama families (`rmsnorm`, `rope`, `swiglu`, `gqa`, `attention`,
//! `llama`) build the SmolLM2 model's operations as whole programs; one
//! default-mix program in ten is one of them. A run ends with its counts,
//! unexplained fallbacks to the interpreter among them (each a failure;
//! `ALLOWED_FALLBACKS` in `gen.rs` lists the reasons that are not).
//!
//! Flags: `--seconds N` (default 60), `--seed S` (first seed, default 0),
//! `--cases N`, `--ops LIST` (or `TC_FUZZ_OPS`; `-name` excludes),
//! `--max-ops N`, `--huge N` (one case in N gets a huge dim; 0: none), `--budget ELEMS` (largest value of an ordinary case),
//! `--rotate` (one JIT mode per case, `MODES[seed % 6]`: about five times
//! faster; the long run uses it; one case in 8, drawn from its seed, still
//! runs all six), `--all-modes N` (that 8; 0: never), `--real PCT` (or
//! `TC_FUZZ_REAL`: percent of the non-llama programs in the real-sizes
//! class, default 20; 0: none), `--dim-params` (callees and `f` take
//! `Dim![…]` parameters, callers pass dims: `GenConfig::dim_params`),
//! `--matmul-i32` (one product in six a `dq_matmul`, one in four of the
//! others a `matmul_i32`: `GenConfig::matmul_i32`), `--isolate` (cases run in child processes: a crash is recorded with its
//! seed and the run goes on), `--jobs N` (with `--isolate`: N workers), `--trace` (print each seed before running it).
mod gen;

use std::time::{Duration, Instant};

use gen::{GenConfig, Prepared, Stats};

struct Opts {
    seconds: u64,
    seed: u64,
    cases: u64,
    isolate: bool,
    jobs: u64,
    trace: bool,
    budget: usize,
    case: Option<u64>,
    worker: Option<(u64, u64)>,
    cfg: GenConfig,
    passthrough: Vec<String>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        seconds: 60,
        seed: 0,
        cases: u64::MAX,
        isolate: false,
        jobs: 1,
        trace: false,
        budget: gen::LONG_BUDGET,
        case: None,
        worker: None,
        cfg: GenConfig::default(),
        passthrough: vec![],
    };
    o.cfg = GenConfig::from_env()?;
    let mut ops = std::env::var("TC_FUZZ_OPS").ok();
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, f: &str| -> Result<u64, String> {
        v.and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{f} needs a number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => o.seconds = num(it.next(), &a)?,
            "--seed" => o.seed = num(it.next(), &a)?,
            "--cases" => o.cases = num(it.next(), &a)?,
            "--case" => o.case = Some(num(it.next(), &a)?),
            "--isolate" => o.isolate = true,
            "--jobs" => o.jobs = num(it.next(), &a)?.max(1),
            "--trace" => o.trace = true,
            "--ops" => {
                let v = it.next().ok_or("--ops needs a list")?;
                o.passthrough.extend(["--ops".into(), v.clone()]);
                ops = Some(v);
            }
            "--max-ops" => {
                o.cfg.max_ops = num(it.next(), &a)? as usize;
                o.passthrough.extend([a.clone(), o.cfg.max_ops.to_string()]);
            }
            "--huge" => {
                o.cfg.huge_one_in = num(it.next(), &a)? as usize;
                o.passthrough
                    .extend([a.clone(), o.cfg.huge_one_in.to_string()]);
            }
            "--rotate" => {
                o.cfg.rotate = true;
                o.passthrough.push(a.clone());
            }
            "--dim-params" => {
                o.cfg.dim_params = true;
                o.passthrough.push(a.clone());
            }
            "--matmul-i32" => {
                o.cfg.matmul_i32 = true;
                o.passthrough.push(a.clone());
            }
            "--real" => {
                o.cfg.real_pct = (num(it.next(), &a)? as usize).min(100);
                o.passthrough
                    .extend([a.clone(), o.cfg.real_pct.to_string()]);
            }
            "--all-modes" => {
                o.cfg.all_modes_one_in = num(it.next(), &a)? as usize;
                o.passthrough
                    .extend([a.clone(), o.cfg.all_modes_one_in.to_string()]);
            }
            "--budget" => {
                o.budget = num(it.next(), &a)? as usize;
                o.passthrough.extend([a.clone(), o.budget.to_string()]);
            }
            "--worker" => o.worker = Some((num(it.next(), &a)?, num(it.next(), &a)?)),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if let Some(l) = ops {
        o.cfg = o.cfg.with_ops(Some(&l))?;
    }
    Ok(o)
}

fn one_case(o: &Opts, seed: u64) {
    std::panic::set_hook(Box::new(|_| {}));
    let t0 = Instant::now();
    let prepared = gen::prepare(seed, &o.cfg, o.budget);
    eprintln!("prepared in {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    match prepared {
        Prepared::Rejected(why) => println!("seed {seed}: rejected by the checker: {why}"),
        Prepared::NoSigma => println!("seed {seed}: no σ within the budget"),
        Prepared::Ready(case) => {
            println!("{}", gen::describe(&case, false));
            if let Some(t) = &case.program.twins {
                println!("twin callees:");
                for f in t {
                    println!("{f}");
                }
            }
            println!("expect element-cap error: {}", case.expect_cap);
            if let Some(r) = &case.program.real {
                let (macs, elems) = gen::work(&case);
                println!(
                    "real sizes ({}): largest product {macs} multiply-adds, largest elementwise \
                     value {elems} elements",
                    r.kind
                );
            }
            let res = gen::run_case(&case, &gen::shared_cache(), &o.cfg);
            for f in &res.failures {
                println!("FAIL {}: {}", f.key, f.detail.lines().next().unwrap_or(""));
            }
            let c = &res.counts;
            println!(
                "all six modes: {}; real-sizes pair of calls compared: {}; pinned workers {}; \
                 packed weights kept {} bytes",
                res.all_modes,
                res.real_pair,
                tc_llvm::threads::pinned_workers(),
                tc_llvm::kernels::prepack::kept_bytes()
            );
            println!(
                "{} failures; values compared bit-exactly {}, within a bound {}, tainted (not \
                 compared) {} ({} not bit-identical), typed errors {}; fallbacks {} (allowed {:?}, \
                 unexplained {}); tiers compared {} (skipped {})",
                res.failures.len(),
                c.exact,
                c.bounded,
                c.tainted,
                res.unchecked,
                c.errors,
                res.fallbacks,
                c.allowed,
                c.unexplained,
                c.tiers,
                c.tier_skips
            );
        }
    }
}

/// The run's kernel cache folder, set as `TC_KERNEL_CACHE` and removed
/// when dropped.
struct RunCache(std::path::PathBuf);

impl RunCache {
    fn new() -> RunCache {
        let dir = std::env::temp_dir().join(format!("tc-fuzz-kernels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var("TC_KERNEL_CACHE", &dir);
        RunCache(dir)
    }
}

impl Drop for RunCache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    // A kernel cache of the run's own, in a fresh temporary folder removed
    // at the end (children inherit it), unless `TC_KERNEL_CACHE=off`: the
    // modes of a program often generate the same IR (the default mode, one
    // thread, the generic path once specialised), which is then compiled
    // once and loaded by the others, each still running its own mode's
    // kernels. About 1.6× the programs per second. Another folder is never
    // used: the repository's (`cargo run` sets it) or the user's would fill
    // with kernels no later run needs.
    // A worker uses the folder its parent set.
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fuzz: {e}");
            std::process::exit(2);
        }
    };
    let off = std::env::var_os("TC_KERNEL_CACHE").is_some_and(|v| v == "off");
    let _run_cache = (!off && o.worker.is_none()).then(RunCache::new);
    if let Some((from, count)) = o.worker {
        gen::worker(from, count, &o.cfg, o.budget);
        return;
    }
    if let Some(seed) = o.case {
        one_case(&o, seed);
        return;
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(o.seconds);
    let mut stats = Stats::default();
    let mut last = Instant::now();
    let mut progress = |s: &Stats| {
        if last.elapsed() >= Duration::from_secs(15) {
            last = Instant::now();
            eprintln!(
                "[{:>5.0}s] generated {} run {} failed {} families {}",
                t0.elapsed().as_secs_f64(),
                s.generated,
                s.run,
                s.failed,
                s.families.len()
            );
        }
    };
    if o.isolate {
        let exe = std::env::current_exe().expect("own path");
        let spawn = |from: u64, count: u64| {
            let mut c = std::process::Command::new(&exe);
            c.arg("--worker")
                .arg(from.to_string())
                .arg(count.to_string());
            c.args(&o.passthrough);
            c
        };
        // Job j takes seeds from `seed + j·2³²`: each seed names one case
        // whatever the number of jobs.
        let parts: Vec<Stats> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..o.jobs)
                .map(|j| {
                    let (spawn, o) = (&spawn, &o);
                    sc.spawn(move || {
                        let mut st = Stats::default();
                        let mut last = Instant::now();
                        let mut report = |s: &Stats| {
                            if last.elapsed() >= Duration::from_secs(15) {
                                last = Instant::now();
                                eprintln!(
                                    "[{:>5.0}s] job {j}: generated {} run {} failed {} families {}",
                                    t0.elapsed().as_secs_f64(),
                                    s.generated,
                                    s.run,
                                    s.failed,
                                    s.families.len()
                                );
                            }
                        };
                        gen::supervise(
                            spawn,
                            o.seed + (j << 32),
                            o.cases,
                            Some(deadline),
                            Duration::from_secs(60),
                            &o.cfg,
                            o.budget,
                            &mut st,
                            &mut report,
                        );
                        st
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("job")).collect()
        });
        for p in parts {
            stats.merge(p);
        }
    } else {
        std::panic::set_hook(Box::new(|_| {}));
        let shared = gen::shared_cache();
        let mut seed = o.seed;
        while Instant::now() < deadline && seed < o.seed.saturating_add(o.cases) {
            if o.trace {
                eprintln!("case {seed}");
            }
            let r = gen::process(seed, &o.cfg, o.budget, &shared);
            stats.absorb(&r);
            progress(&stats);
            seed += 1;
        }
    }
    println!("{:.0} s", t0.elapsed().as_secs_f64());
    print!("{}", stats.report(true));
    print!("{}", stats.counts_report());
    if !stats.families.is_empty() {
        drop(_run_cache);
        std::process::exit(1);
    }
}
