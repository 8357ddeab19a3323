//! The macro fuzzer's renderer (`examples/fuzz/render.rs`) on fixed seeds:
//! every program of the default mix renders (or is refused with a reason),
//! the source parses as Rust, and rendering is a function of the seed. The
//! long run, which compiles the rendered programs through `#[tensor_module]`
//! and compares IR and results, is `cargo run --release --example
//! fuzz_macro` (docs/soundness.md, "Fuzzing the macro"): compiling crates
//! of generated programs does not belong in the test suite.
use crate::{gen, render};

use tc_core::ir::Op;
use tc_core::Dim;

/// Seeds `0..SEEDS` of the fixed run.
const SEEDS: u64 = 48;

/// The macro run's mix (`examples/fuzz_macro/harness.rs`'s `config`).
fn cfg() -> gen::GenConfig {
    let mut c = gen::GenConfig::default();
    c.real_pct = 0;
    c.dim_params = true;
    c.matmul_i32 = true;
    c
}

#[test]
fn rendered_programs_parse_and_depend_on_the_seed_alone() {
    let (mut rendered, mut structs) = (0, 0);
    for seed in 0..SEEDS {
        let name = format!("p{seed}");
        let a = render::render(&gen::gen_program(seed, &cfg()), &name);
        let b = render::render(&gen::gen_program(seed, &cfg()), &name);
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.module, b.module, "seed {seed}: two renderings differ");
                assert_eq!(a.call, b.call, "seed {seed}");
                if let Err(e) = syn::parse_file(&a.module) {
                    panic!("seed {seed}: not Rust: {e}\n{}", a.module);
                }
                syn::parse_str::<syn::Expr>(&a.call).expect("the call is an expression");
                rendered += 1;
                structs += a.module.contains("#[tensor_params]") as u64;
            }
            (Err(x), Err(y)) => assert_eq!(x, y, "seed {seed}"),
            (a, b) => panic!("seed {seed}: rendered once only: {a:?} / {b:?}"),
        }
    }
    assert!(rendered >= SEEDS - 4, "only {rendered} of {SEEDS} rendered");
    assert!(structs >= 3, "{structs} programs with a weight struct");
}

/// `Op::Dim` is generated (a callee's `Dim![V]` parameter takes a dim of
/// the caller) and written in place as the call's argument.
#[test]
fn dim_arguments_are_generated_and_rendered() {
    let mut found = 0;
    for seed in 0..4 * SEEDS {
        let p = gen::gen_program(seed, &cfg());
        let Some(d) = p.main.body.iter().find_map(|i| match &i.op {
            Op::Dim(d) => Some(d.clone()),
            _ => None,
        }) else {
            continue;
        };
        let r = render::render(&p, "p").expect("renders");
        assert!(r.module.contains("Dim!["), "seed {seed}: no dim parameter");
        let arg = format!(", {}", render::dim(&d));
        assert!(
            r.module.contains(&arg),
            "seed {seed}: no `{arg}`\n{}",
            r.module
        );
        found += 1;
    }
    assert!(found >= 3, "{found} programs pass a dim");
}

/// A division under a coefficient keeps its parentheses: `Dim`'s
/// `Display` writes `2 * ((A + 1) / 2)` as `2 * (A + 1) / 2`, which Rust
/// reads as `(2 * (A + 1)) / 2 = A + 1` (the first failure of the macro
/// run, seed 78).
#[test]
fn rendered_dims_read_back_as_the_same_dim() {
    let a = Dim::var("A");
    let half = (a.clone() + Dim::c(1)).div(&Dim::c(2));
    assert_eq!(render::dim(&half.scale(2)), "2 * ((A + 1) / (2))");
    assert_eq!(render::dim(&(Dim::c(3) - half)), "-(((A + 1) / (2))) + 3");
    assert_eq!(render::dim(&(a.clone() - Dim::c(1))), "A - 1");
    assert_eq!(render::dim(&a.rem(&Dim::var("H"))), "((A) % (H))");
}
