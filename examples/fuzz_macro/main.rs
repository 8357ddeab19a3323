//! Fuzzing the macro front end: the soundness fuzzer's programs
//! (`examples/fuzz/gen.rs`, built with `FnBuilder`) rendered as Rust source
//! (`examples/fuzz/render.rs`), compiled in batches through
//! `#[tensor_module]`, and checked: the IR the macro embeds equals the
//! builder's checked IR, and the macro's fn gives the builder program's
//! result on the interpreter (bit for bit) and on the JIT (the fuzzer's
//! oracle). See docs/soundness.md, "Fuzzing the macro".
//!
//! ```text
//! cargo run --release --example fuzz_macro -- --count 5000 --batch 400
//! cargo run --release --example fuzz_macro -- --seed 1234 --count 1 --print
//! ```
//!
//! Flags: `--seed S` (first seed, default 0), `--count N` (programs to
//! compile, default 500), `--batch N` (programs per crate, default 400),
//! `--print` (print each rendered module), `--out DIR` (default
//! `target/fuzz-macro`: one crate per batch under it, a harness crate and a
//! target directory they share, so tc and its dependencies build once).
//! A batch that does not compile is bisected to the programs that do not;
//! each is a failure, reported with its seed and rustc's first errors.
#[path = "../fuzz/gen.rs"]
mod gen;
#[path = "harness.rs"]
mod harness;
#[path = "../fuzz/render.rs"]
mod render;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

struct Opts {
    seed: u64,
    count: u64,
    batch: usize,
    print: bool,
    out: PathBuf,
}

fn parse() -> Result<Opts, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut o = Opts {
        seed: 0,
        count: 500,
        batch: 400,
        print: false,
        out: root.join("target/fuzz-macro"),
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, f: &str| -> Result<u64, String> {
        v.and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{f} needs a number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seed" => o.seed = num(it.next(), &a)?,
            "--count" => o.count = num(it.next(), &a)?,
            "--batch" => o.batch = num(it.next(), &a)?.max(1) as usize,
            "--print" => o.print = true,
            "--out" => o.out = PathBuf::from(it.next().ok_or("--out needs a folder")?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(o)
}

/// The run's counts.
#[derive(Default)]
struct Counts {
    generated: u64,
    rejected: u64,
    no_sigma: u64,
    rendered: u64,
    not_renderable: BTreeMap<String, u64>,
    compiled: u64,
    ir_equal: u64,
    results_equal: u64,
    failures: Vec<String>,
}

/// A rendered program waiting for its batch.
struct Item {
    seed: u64,
    r: render::Rendered,
}

fn write(path: &Path, text: &str) {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).expect("create folder");
    }
    std::fs::write(path, text).expect("write file");
}

/// The crate every batch links: the generator and the checks, built once.
fn write_harness(out: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let toml = format!(
        "[package]\nname = \"fuzz-macro-harness\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[dependencies]\ntc = {{ path = {r:?} }}\ntc-core = {{ path = {c:?} }}\n\
         tc-runtime = {{ path = {rt:?} }}\ntc-llvm = {{ path = {l:?}, default-features = false }}\n",
        r = root,
        c = root.join("tc-core"),
        rt = root.join("tc-runtime"),
        l = root.join("tc-llvm"),
    );
    let lib = format!(
        "#[path = {g:?}]\npub mod gen;\n#[path = {h:?}]\npub mod harness;\n",
        g = root.join("examples/fuzz/gen.rs"),
        h = root.join("examples/fuzz_macro/harness.rs"),
    );
    write(&out.join("harness/Cargo.toml"), &toml);
    write(&out.join("harness/src/lib.rs"), &lib);
}

/// Batch crate `name` holding `items`, ready to build.
fn write_batch(out: &Path, name: &str, items: &[&Item]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = out.join(name);
    let toml = format!(
        "[package]\nname = {name:?}\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\ntc = {{ path = {r:?} }}\nfuzz-macro-harness = {{ path = {h:?} }}\n\n\
         [workspace]\n\n[profile.dev.package.\"*\"]\nopt-level = 1\n",
        r = root,
        h = out.join("harness"),
    );
    write(&dir.join("Cargo.toml"), &toml);
    // The workspace's versions, so the shared target directory's builds of
    // the dependencies serve every batch.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");
    let mut src = String::from(
        "#![allow(unused)]\nuse fuzz_macro_harness::harness::{boolean, float, int16, int32, int64, int8, size, tensor, Entry};\n\n",
    );
    for it in items {
        src.push_str(&it.r.module);
    }
    src.push_str("\nconst ENTRIES: &[Entry] = &[\n");
    for it in items {
        src.push_str(&format!(
            "    Entry {{ seed: {s}, ir: p{s}::tc_ir, call: |a| {c} }},\n",
            s = it.seed,
            c = it.r.call
        ));
    }
    src.push_str("];\n\nfn main() {\n    fuzz_macro_harness::harness::main(ENTRIES);\n}\n");
    write(&dir.join("src/main.rs"), &src);
    dir
}

/// Build a batch crate: `Err` holds rustc's errors.
fn build(out: &Path, dir: &Path) -> Result<(), String> {
    let o = Command::new(env!("CARGO"))
        .arg("build")
        .arg("--quiet")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", out.join("target"))
        .output()
        .expect("run cargo");
    if o.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// The first error of rustc's output, for the report.
fn first_error(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("error"))
        .unwrap_or(0);
    lines[start..(start + 12).min(lines.len())].join("\n")
}

/// The items of a batch that fail to compile alone or in a half, found by
/// halving (each build compiles only what is left).
fn bisect<'a>(out: &Path, items: &[&'a Item], c: &mut Counts) -> Vec<&'a Item> {
    if items.len() == 1 {
        let dir = write_batch(out, "fuzz-macro-bisect", items);
        if let Err(e) = build(out, &dir) {
            c.failures.push(format!(
                "seed {}: does not compile through the macro:\n{}",
                items[0].seed,
                first_error(&e)
            ));
            return vec![];
        }
        return items.to_vec();
    }
    let dir = write_batch(out, "fuzz-macro-bisect", items);
    if build(out, &dir).is_ok() {
        return items.to_vec();
    }
    let (a, b) = items.split_at(items.len() / 2);
    let mut ok = bisect(out, a, c);
    ok.extend(bisect(out, b, c));
    ok
}

/// Build, bisect when needed, and run batch `k`.
fn run_batch(out: &Path, k: usize, items: &[Item], c: &mut Counts) {
    let name = format!("fuzz-macro-batch-{k}");
    let all: Vec<&Item> = items.iter().collect();
    let t0 = Instant::now();
    let dir = write_batch(out, &name, &all);
    let good = match build(out, &dir) {
        Ok(()) => all,
        Err(_) => {
            let good = bisect(out, &all, c);
            let dir = write_batch(out, &name, &good);
            if let Err(e) = build(out, &dir) {
                c.failures.push(format!(
                    "batch {k}: its compiling programs together do not:\n{}",
                    first_error(&e)
                ));
                return;
            }
            good
        }
    };
    c.compiled += good.len() as u64;
    eprintln!(
        "batch {k}: {} programs compiled in {:.0} s",
        good.len(),
        t0.elapsed().as_secs_f64()
    );
    let exe = out.join("target/debug").join(&name);
    let o = Command::new(&exe).output().expect("run batch");
    read_results(&String::from_utf8_lossy(&o.stdout), good.len(), c);
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        c.failures.push(format!(
            "batch {k} exited with {}: {}",
            o.status,
            first_error(&err)
        ));
    }
}

/// Count the harness's lines; any line that is not all `ok` is a failure
/// with its detail lines.
fn read_results(stdout: &str, expected: usize, c: &mut Counts) {
    let mut seen = 0;
    let mut current: Option<String> = None;
    let flush = |cur: &mut Option<String>, c: &mut Counts| {
        if let Some(f) = cur.take() {
            c.failures.push(f);
        }
    };
    for line in stdout.lines() {
        if let Some(d) = line.strip_prefix("  ") {
            if let Some(f) = current.as_mut() {
                f.push_str("\n    ");
                f.push_str(d);
            }
            continue;
        }
        flush(&mut current, c);
        seen += 1;
        let w: Vec<&str> = line.split_whitespace().collect();
        let field = |k: &str| {
            w.iter()
                .position(|x| *x == k)
                .and_then(|i| w.get(i + 1))
                .copied()
        };
        let ir = field("ir") == Some("ok");
        let res = field("interp") == Some("ok") && field("jit") == Some("ok");
        c.ir_equal += ir as u64;
        c.results_equal += res as u64;
        if !(ir && res) {
            current = Some(line.to_string());
        }
    }
    flush(&mut current, c);
    if seen != expected {
        c.failures.push(format!(
            "a batch reported {seen} of its {expected} programs"
        ));
    }
}

/// Generate, render and queue one seed.
fn take(seed: u64, o: &Opts, c: &mut Counts, queue: &mut Vec<Item>) {
    let cfg = harness::config();
    c.generated += 1;
    let case = match gen::prepare(seed, &cfg, harness::BUDGET) {
        gen::Prepared::Ready(case) => case,
        gen::Prepared::Rejected(_) => return c.rejected += 1,
        gen::Prepared::NoSigma => return c.no_sigma += 1,
    };
    match render::render(&case.program, &format!("p{seed}")) {
        Ok(r) => {
            if o.print {
                println!("{}", r.module);
            }
            c.rendered += 1;
            queue.push(Item { seed, r });
        }
        Err(render::Unrenderable(why)) => *c.not_renderable.entry(why).or_default() += 1,
    }
}

fn report(c: &Counts, o: &Opts, seeds: (u64, u64), secs: f64) {
    println!("seeds {}..{} in {secs:.0} s", seeds.0, seeds.1);
    println!(
        "generated {}; rejected by the checker {}; no σ within the budget {}",
        c.generated, c.rejected, c.no_sigma
    );
    let nr: u64 = c.not_renderable.values().sum();
    println!("rendered {}; not renderable {nr}", c.rendered);
    for (why, n) in &c.not_renderable {
        println!("  {n}: {why}");
    }
    println!(
        "compiled {}; IR equal {}; results equal {}; failures {}",
        c.compiled,
        c.ir_equal,
        c.results_equal,
        c.failures.len()
    );
    for f in &c.failures {
        println!("FAIL {f}");
    }
    let _ = o;
}

fn main() {
    if std::env::var_os("TC_KERNEL_CACHE").is_none() {
        std::env::set_var("TC_KERNEL_CACHE", "off");
    }
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fuzz_macro: {e}");
            std::process::exit(2);
        }
    };
    std::panic::set_hook(Box::new(|_| {}));
    write_harness(&o.out);
    let t0 = Instant::now();
    let mut c = Counts::default();
    let (mut seed, mut k) = (o.seed, 0);
    let mut queue = Vec::new();
    while c.rendered < o.count {
        take(seed, &o, &mut c, &mut queue);
        seed += 1;
        if queue.len() >= o.batch || c.rendered >= o.count {
            run_batch(&o.out, k, &std::mem::take(&mut queue), &mut c);
            k += 1;
        }
    }
    report(&c, &o, (o.seed, seed), t0.elapsed().as_secs_f64());
    if !c.failures.is_empty() {
        std::process::exit(1);
    }
}
