//! The concrete shape rule (`tc_core::concrete`, issue #14) against the
//! checker: for random well-typed programs (the soundness fuzzer's
//! generator, every op family) and a σ their `requires` admit, each
//! instruction's concrete result under the rule — from its operands' checked
//! types evaluated under σ — is exactly the checker's synthesised type
//! evaluated under σ. Both backends size values through this rule (the
//! interpreter's denotations and the JIT's planner), so a disagreement here
//! is a shape bug in one of the three.
use crate::gen;

use tc_core::concrete::{self, Operand, RuleError};
use tc_core::ir::{Op, ValueMap};
use tc_core::{Dtype, Sigma, Type};

/// Seeds of the run (each is a whole random program).
const SEEDS: u64 = 400;

/// A checked type evaluated under σ: `None` for a scalar, or when a dim
/// is not bound in σ (a local binding's variable).
fn concrete_type(t: &Type, sigma: &Sigma) -> Option<(Dtype, Vec<usize>)> {
    let Type::Tensor(t) = t else { return None };
    let shape = t
        .shape
        .iter()
        .map(|d| usize::try_from(d.eval(sigma).ok()?).ok())
        .collect::<Option<Vec<_>>>()?;
    Some((t.dtype, shape))
}

/// Instructions compared in `case` (calls and values with unbound dims
/// are skipped); panics on the first disagreement.
fn compare(case: &gen::Case) -> usize {
    let f = &case.program.main;
    let types = &case.checked.types;
    let vals: ValueMap<Option<(Dtype, Vec<usize>)>> = types
        .values()
        .map(|t| concrete_type(t, &case.sigma))
        .collect();
    let operand = |v: tc_core::ir::Value| -> Result<Operand<'_>, RuleError> {
        match vals.get(v) {
            Some(Some((dtype, shape))) => Ok(Operand {
                dtype: *dtype,
                shape,
            }),
            _ => Err(RuleError::Malformed(format!("{v} has no concrete type"))),
        }
    };
    let mut compared = 0;
    for (i, inst) in f.body.iter().enumerate() {
        if matches!(inst.op, Op::Call(..)) {
            continue;
        }
        let Some(want) = &vals[inst.result] else {
            continue;
        };
        let got = concrete::infer(&inst.op, &operand, &case.sigma);
        match got {
            Ok(got) => assert_eq!(
                &got, want,
                "seed {}: instruction {i} ({:?}) under σ = {:?}\n{f}",
                case.seed, inst.op, case.sigma
            ),
            Err(RuleError::Malformed(m)) if m.ends_with("has no concrete type") => continue,
            Err(e) => panic!(
                "seed {}: the rule refuses instruction {i} ({:?}) of a well-typed program at an admitted σ = {:?}: {e}\n{f}",
                case.seed, inst.op, case.sigma
            ),
        }
        compared += 1;
    }
    compared
}

#[test]
fn the_concrete_rule_is_the_checked_type_under_sigma() {
    let cfg = gen::GenConfig {
        huge_one_in: 4,
        ..gen::GenConfig::default()
    };
    let (mut cases, mut insts) = (0, 0);
    for seed in 0..SEEDS {
        // A huge σ is fine here: the rule has no element cap.
        if let gen::Prepared::Ready(case) = gen::prepare(seed, &cfg, 1 << 12) {
            insts += compare(&case);
            cases += 1;
        }
    }
    // The generator accepts most programs; a collapse would make this vacuous.
    assert!(
        cases >= SEEDS as usize / 2,
        "only {cases} programs prepared"
    );
    assert!(insts >= 4 * cases, "only {insts} instructions compared");
}
