//! trybuild UI tests: every `.rs` under `tests/ui/<category>/` except `pass/`
//! must fail to compile with exactly the recorded `.stderr`; `pass/` must
//! compile and run. Regenerate snapshots with
//! `TRYBUILD=overwrite cargo test --test ui` and review every diff.

const FAIL_CATEGORIES: &[&str] = &[
    "signature",
    "elementwise",
    "matmul",
    "reduce",
    "layout",
    "subtyping",
    "calls",
    "syntax",
    "transformer",
    "dims",
    "params",
    "window",
    "quant",
];

#[test]
fn ui() {
    {
        let t = trybuild::TestCases::new();
        for c in FAIL_CATEGORIES {
            t.compile_fail(format!("tests/ui/{c}/*.rs"));
        }
        t.pass("tests/ui/pass/*.rs");
    }
    // The solver-budget cases run with a small (deterministic) Z3 resource
    // budget so that reaching `unknown` takes milliseconds, not minutes. The
    // proc macro reads TC_SOLVER_RLIMIT when its thread's solver starts.
    std::env::set_var("TC_SOLVER_RLIMIT", "20000");
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/solver/*.rs");
}

/// Every compile error tc reports carries a stable code with an entry in
/// docs/errors.md: each `error:` line of every recorded `.stderr` starts
/// with `[Ennnn]`, and that code is a known one. (rustc's own errors, which
/// some cases record after tc's, are `error[Ennnn]:`.)
#[test]
fn every_recorded_error_has_a_code() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let mut uncoded = Vec::new();
    let mut seen = 0;
    for category in std::fs::read_dir(&root).unwrap() {
        let dir = category.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_none_or(|e| e != "stderr") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| l.starts_with("error: ")) {
                seen += 1;
                let code = line.strip_prefix("error: [").and_then(|rest| rest.get(..5));
                let known = code.is_some_and(|c| tc::core::diag::codes::ALL.contains(&c));
                if !known {
                    uncoded.push(format!("{}: {line}", path.display()));
                }
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} recorded errors found under {}",
        root.display()
    );
    assert!(
        uncoded.is_empty(),
        "errors without a known code:\n{}",
        uncoded.join("\n")
    );
}
