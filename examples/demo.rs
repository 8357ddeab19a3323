//! The checker at work on multi-head attention's head split, without macros:
//! the IR is built by hand, checked by tc-core, and the diagnostics printed
//! exactly as the checker produces them (counterexamples from Z3).
//!
//! Run: `cargo run --example demo`

use tc_core::build::FnBuilder;
use tc_core::check::check_function;
use tc_core::ir::{Function, Op, Signatures};
use tc_core::{solver, Dim, Dtype, Pred, TensorType, Type};

fn tensor(dims: Vec<Dim>) -> Type {
    Type::Tensor(TensorType::new(Dtype::F32, dims))
}

fn v(name: &str) -> Dim {
    Dim::var(name)
}

/// scores = (x·Wq split into heads) · (x·Wk split into heads)ᵀ, optionally
/// with the `D % H == 0` refinement and with a deliberately wrong key weight.
fn attention_scores(with_divisibility: bool, wrong_key_weight: bool) -> Function {
    let mut b = FnBuilder::new("attention_scores");
    let x = b.param("x", tensor(vec![v("B"), v("S"), v("D")]));
    let wq = b.param("wq", tensor(vec![v("D"), v("D")]));
    let wk_in = if wrong_key_weight { v("E") } else { v("D") };
    let wk = b.param("wk", tensor(vec![wk_in, v("D")]));
    // `heads: Dim![H]`: the head count is a size argument that binds H
    // (Section 1 §6 site 1), as in GPT-2's `n_head` (no witness tensor).
    b.param("heads", Type::Dim(v("H")));
    if with_divisibility {
        b.requires(Pred::eq(v("D").rem(&v("H")), 0));
    }
    let head = v("D").div(&v("H"));
    b.returns(tensor(vec![v("B"), v("H"), v("S"), v("S")]));

    let wq_b = b.op(Op::Broadcast(vec![v("B"), v("D"), v("D")], wq));
    let wk_b = b.op(Op::Broadcast(vec![v("B"), v("D"), v("D")], wk));
    let q = b.op(Op::Matmul(x, wq_b));
    let k = b.op(Op::Matmul(x, wk_b));
    let split = vec![v("B"), v("S"), v("H"), head];
    let q4 = b.op(Op::Reshape(split.clone(), q));
    let k4 = b.op(Op::Reshape(split, k));
    let qh = b.op(Op::Transpose(vec![0, 2, 1, 3], q4));
    let kt = b.op(Op::Transpose(vec![0, 2, 3, 1], k4));
    let scores = b.op(Op::Matmul(qh, kt));
    b.finish(scores)
}

fn report(title: &str, f: &Function) {
    println!("── {title}");
    match check_function(f, &Signatures::new()) {
        Ok(checked) => {
            println!("   accepted; value types:");
            for (v, t) in &checked.types {
                println!("     {v}: {t}");
            }
        }
        Err(diags) => {
            for d in diags {
                for line in d.to_string().lines() {
                    println!("   {line}");
                }
            }
        }
    }
    println!();
}

fn main() {
    println!("{}\n", attention_scores(true, false));
    report(
        "without `requires D % H == 0`",
        &attention_scores(false, false),
    );
    report(
        "with a key weight of shape [E, D]",
        &attention_scores(true, true),
    );
    report("fixed", &attention_scores(true, false));
    let s = solver::stats();
    println!(
        "solver: {} queries, {} answered syntactically, {} from cache, {} Z3 checks",
        s.queries, s.syntactic, s.cache_hits, s.z3_checks
    );
}
