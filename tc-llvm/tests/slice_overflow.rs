//! A strided slice with a huge step, or over an axis near i64::MAX, runs on
//! both backends: its declared length `⌈n / k⌉`, normalised
//! `(n + k − 1) / k`, is evaluated exactly (its value is at most the axis),
//! where it used to overflow i64 at every call and fail with a misleading
//! "declared …, produced f32 [1]". A declared dim whose value really leaves
//! i64 is a typed evaluation error naming that dim, on both backends.
use crate::util;

use tc_core::concrete::RuleError;
use tc_core::ir::{Function, Op};
use tc_core::{Dim, Dtype, Pred, TensorType, Type};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use tc_runtime::{Error, Tensor};
use util::*;

/// `f(x: [Z, N]) -> [Z, ret]` returning `slice[axis=1, 0, N, step] x`,
/// with `Z >= 0` (so that an axis near i64::MAX has a value to live in).
fn strided(step: usize, ret: Dim) -> Function {
    let mut b = builder("f");
    let x = b.param(
        "x",
        Type::Tensor(
            TensorType::new(Dtype::F32, vec![Dim::var("Z"), Dim::var("N")])
                .with_refs(vec![Pred::ge(Dim::var("Z"), 0)]),
        ),
    );
    b.returns(Type::tensor(Dtype::F32, vec![Dim::var("Z"), ret]));
    let y = b.op(Op::Slice {
        axis: 1,
        start: Dim::c(0),
        stop: Dim::var("N"),
        step,
        x,
    });
    b.finish(y)
}

/// The checker accepts `f` (so the declared type is proven), and both
/// backends return the same result.
fn runs(f: &Function, x: Tensor) -> Tensor {
    tc_core::check::check_function(f, &tc_core::ir::Signatures::new())
        .unwrap_or_else(|e| panic!("refused: {e:?}\n{f}"));
    let args: Vec<Arg> = vec![x.into()];
    let want = interp(f, &args).unwrap_or_else(|e| panic!("interpreter: {e}\n{f}"));
    for opts in [EXACT, DET, JitOptions::default()] {
        let got = jit(f, &args, opts);
        assert_bits("strided slice", &got, &want, false);
    }
    want
}

#[test]
fn a_huge_step_runs_on_both_backends() {
    for step in [i64::MAX as usize, i64::MAX as usize - 1, 1 << 62] {
        let k = step as i64;
        // What the user writes for ⌈N / k⌉; the checker's normal form.
        let ret = (Dim::var("N") + Dim::c(k - 1)).div(&Dim::c(k));
        let f = strided(step, ret);
        let x = Tensor::from_vec(&[2, 5], (0..10).map(|i| i as f32).collect()).unwrap();
        let y = runs(&f, x);
        assert_eq!(y.shape(), &[2, 1]);
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 5.0]);
    }
}

#[test]
fn an_axis_near_i64_max_runs_on_both_backends() {
    // An empty [0, N] value: no element, but N is a real size.
    for n in [i64::MAX as usize, i64::MAX as usize - 3] {
        for step in [2usize, 3, 1 << 40] {
            let k = step as i64;
            let ret = (Dim::var("N") + Dim::c(k - 1)).div(&Dim::c(k));
            let f = strided(step, ret);
            let x = Tensor::from_vec::<f32>(&[0, n], vec![]).unwrap();
            let y = runs(&f, x);
            assert_eq!(y.shape(), &[0, n.div_ceil(step)]);
        }
    }
}

/// A declared return dim whose value is past i64 (IR the checker never
/// saw: `N + i64::MAX`): a typed `Eval` error that names the dim, on both
/// backends, not a shape mismatch.
#[test]
fn a_declared_dim_past_i64_is_a_typed_error_naming_it() {
    let mut b = builder("g");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(Type::tensor(
        Dtype::F32,
        vec![Dim::var("N") + Dim::c(i64::MAX)],
    ));
    let y = b.op(Op::Slice {
        axis: 0,
        start: Dim::c(0),
        stop: Dim::var("N"),
        step: 1,
        x,
    });
    let f = b.finish(y);
    let args: Vec<Arg> = vec![Tensor::from_vec(&[3], vec![1f32, 2.0, 3.0]).unwrap().into()];
    let check = |who: &str, e: Error| match &e {
        Error::Rule(RuleError::Eval { context, .. }) => {
            assert!(
                context.contains("dimension 0") && context.contains("N + 9223372036854775807"),
                "{who}: {e}"
            );
        }
        _ => panic!("{who}: expected a typed evaluation error, got {e}"),
    };
    check("interpreter", interp(&f, &args).unwrap_err());
    for opts in [EXACT, JitOptions::default()] {
        let j = jit_with(opts);
        check("jit", j.call(&f, &args, &|_| None).unwrap_err());
    }
}
