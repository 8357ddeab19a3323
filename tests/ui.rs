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
