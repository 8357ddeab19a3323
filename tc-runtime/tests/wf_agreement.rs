//! Issue 10 item 10: the checker (with the verifier it runs) and the Section 4
//! interpreter (with the verifier it runs) agree on which axis attributes are
//! well-formed. A transpose whose permutation was shorter than the rank used
//! to pass the checker (as an "identity") and be refused by the interpreter.
//!
//! Property: for random ranks, shapes and axis attributes of every op family
//! with one (transpose, reduce, argmax/argmin, slice, concat, iota), the
//! function `y = op(x); return x` is accepted by `check_function` exactly when
//! the interpreter runs it without a `Malformed` error.

use proptest::prelude::*;

use tc_core::build::FnBuilder;
use tc_core::check::check_function;
use tc_core::concrete::RuleError;
use tc_core::ir::{Op, ReduceOp, Signatures};
use tc_core::{Dim, Dtype, Type};
use tc_runtime::contract::Arg;
use tc_runtime::interp::{no_calls, Interpreter};
use tc_runtime::{Error, Tensor};

/// One op of an axis-carrying family, its attributes drawn loosely so that
/// both well-formed and malformed ones occur (axes up to 5 on ranks 0–4).
#[derive(Clone, Debug)]
enum Case {
    Transpose(Vec<usize>),
    /// An identity transpose `0..k` carrying the operand's own type as its
    /// annotation, like the `let y: T = x;` re-view: the old checker took a
    /// short one for the identity and accepted it.
    ReView(usize),
    Reduce(Vec<usize>, bool),
    ArgReduce(usize, bool),
    Slice(usize),
    Concat(usize),
    Iota(usize),
}

fn axes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..=5, 0..=5)
}

fn case() -> impl Strategy<Value = Case> {
    prop_oneof![
        axes().prop_map(Case::Transpose),
        // Permutations of the right length are rare at random: add some.
        (0usize..=4).prop_flat_map(|r| Just((0..r).collect::<Vec<_>>())
            .prop_shuffle()
            .prop_map(Case::Transpose)),
        (0usize..=5).prop_map(Case::ReView),
        (axes(), any::<bool>()).prop_map(|(a, k)| Case::Reduce(a, k)),
        (0usize..=5, any::<bool>()).prop_map(|(a, k)| Case::ArgReduce(a, k)),
        (0usize..=5).prop_map(Case::Slice),
        (0usize..=5).prop_map(Case::Concat),
        (0usize..=5).prop_map(Case::Iota),
    ]
}

fn op(case: &Case, shape: &[Dim], x: tc_core::ir::Value) -> Op {
    match case.clone() {
        Case::Transpose(p) => Op::Transpose(p, x),
        Case::ReView(k) => Op::Transpose((0..k).collect(), x),
        Case::Reduce(axes, keepdims) => Op::Reduce {
            op: ReduceOp::Sum,
            axes,
            keepdims,
            x,
        },
        Case::ArgReduce(axis, keepdims) => Op::ArgReduce {
            max: true,
            axis,
            keepdims,
            x,
        },
        Case::Slice(axis) => Op::Slice {
            axis,
            start: Dim::c(0),
            stop: Dim::c(1),
            step: 1,
            x,
        },
        Case::Concat(axis) => Op::Concat(axis, vec![x, x]),
        Case::Iota(axis) => Op::Iota(Dtype::I64, shape.to_vec(), axis),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn checker_and_interpreter_agree_on_axis_attributes(
        dims in prop::collection::vec(1usize..=3, 0..=4),
        case in case(),
    ) {
        let shape: Vec<Dim> = dims.iter().map(|&d| Dim::c(d as i64)).collect();
        let ty = Type::tensor(Dtype::F32, shape.clone());
        let mut b = FnBuilder::new("f");
        let x = b.param("x", ty.clone());
        match case {
            Case::ReView(_) => b.op_annot(op(&case, &shape, x), ty.clone()),
            _ => b.op(op(&case, &shape, x)),
        };
        b.returns(ty);
        let f = b.finish(x);
        let checked = check_function(&f, &Signatures::new());
        let arg = Arg::Tensor(Tensor::zeros(Dtype::F32, &dims));
        let ran = Interpreter::checked().run(&f, &[arg], &no_calls);
        match (&checked, &ran) {
            (Ok(_), Ok(_)) => {}
            (Err(_), Err(Error::Rule(RuleError::Malformed(_)))) => {}
            _ => prop_assert!(
                false,
                "disagreement on {case:?} at shape {dims:?}:\n{f}\nchecker: {:?}\ninterpreter: {:?}",
                checked.as_ref().map(|_| ()).map_err(|e| e.iter().map(|d| d.to_string()).collect::<Vec<_>>()),
                ran.as_ref().map(|_| ())
            ),
        }
    }
}
