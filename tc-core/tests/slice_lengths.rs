//! A strided slice's type is its length under every σ: the dim the checker
//! synthesises (docs/syntax.md §12 "Strided slice") evaluates without
//! overflow to exactly `tc_core::concrete::slice`'s length (what both
//! backends produce), for any step up to i64::MAX and any axis up to
//! i64::MAX. The form `(n + k − 1) / k` overflowed for a huge step or an
//! axis near i64::MAX although the slice exists (Section 1 §2: dims are
//! exact i64 integers), so every call failed to evaluate the shape; a
//! constant length with a huge step was refused as E0106.

use proptest::prelude::*;

use tc_core::build::FnBuilder;
use tc_core::check::check_function;
use tc_core::concrete::{self, Operand};
use tc_core::ir::{Op, Signatures};
use tc_core::{Dim, Dtype, Pred, Sigma, Type};

/// `f(x: [N]) -> [N]` with `y = slice[0, start, stop, step] x` in its body
/// (returned `x`, so that only the slice's own type is under test): the
/// checker's type of `y`.
fn slice_type(start: Dim, stop: Dim, step: usize, requires: Option<Pred>) -> Option<Dim> {
    let mut b = FnBuilder::new("f");
    let x = b.param("x", Type::tensor(Dtype::F32, vec![Dim::var("N")]));
    if let Some(p) = requires {
        b.requires(p);
    }
    b.returns(Type::tensor(Dtype::F32, vec![Dim::var("N")]));
    let y = b.op(Op::Slice {
        axis: 0,
        start,
        stop,
        step,
        x,
    });
    let f = b.finish(x);
    let ck = check_function(&f, &Signatures::new()).ok()?;
    ck.types[y].as_tensor().map(|t| t.shape[0].clone())
}

/// The slice's type evaluated at `N = n` equals the concrete length.
fn agrees(n: i64, start: i64, symbolic_stop: bool, step: usize) {
    let stop = if symbolic_stop {
        Dim::var("N")
    } else {
        Dim::c(n)
    };
    let req = (!symbolic_stop || start > 0).then(|| Pred::ge(Dim::var("N"), n.max(start + 1)));
    let Some(d) = slice_type(Dim::c(start), stop, step, req) else {
        panic!("slice {start}..{n} step {step} refused");
    };
    let sigma: Sigma = [("N".to_string(), n)].into_iter().collect();
    let shape = [n as usize];
    let x = Operand {
        dtype: Dtype::F32,
        shape: &shape,
    };
    let (_, out) = concrete::slice(0, start, n, step, x).expect("a valid slice");
    let got = d.eval(&sigma);
    assert_eq!(
        got,
        Ok(out[0] as i64),
        "slice {start}..{n} step {step}: type `{d}` at N = {n}"
    );
}

#[test]
fn a_huge_step_over_a_symbolic_axis() {
    for step in [2usize, 3, 1 << 62, i64::MAX as usize - 1, i64::MAX as usize] {
        for n in [1i64, 2, 5, 1000] {
            agrees(n, 0, true, step);
        }
    }
}

#[test]
fn an_axis_near_i64_max() {
    for n in [i64::MAX, i64::MAX - 1, i64::MAX - 5, 1 << 62] {
        for step in [2usize, 3, 7, 1 << 40, i64::MAX as usize] {
            agrees(n, 0, true, step);
            agrees(n, 1, true, step);
        }
    }
}

#[test]
fn the_form_is_the_ceiling() {
    // ⌈S / 2⌉ at S = 1..6: 1, 1, 2, 2, 3, 3.
    let d = slice_type(Dim::c(0), Dim::var("N"), 2, None).unwrap();
    for (s, want) in [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)] {
        let sigma: Sigma = [("N".to_string(), s)].into_iter().collect();
        assert_eq!(d.eval(&sigma), Ok(want), "`{d}` at N = {s}");
    }
    // The normal form keeps the remainder's constant in [0, k).
    assert_eq!(d.to_string(), "(N + 1) / 2");
}

fn near_max() -> impl Strategy<Value = i64> {
    prop_oneof![
        1i64..=40,
        (0i64..=40).prop_map(|k| i64::MAX - k),
        (0i64..=40).prop_map(|k| (1i64 << 62) + k),
        any::<i64>().prop_map(|x| x.checked_abs().unwrap_or(i64::MAX).max(1)),
    ]
}

fn step() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..=9,
        (0u64..=9).prop_map(|k| (i64::MAX as u64 - k) as usize),
        (1u32..=62).prop_map(|e| 1usize << e),
        (1u64..=i64::MAX as u64).prop_map(|x| x as usize),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The class: every slice of an axis of any size in 1..=i64::MAX, from
    /// a constant start, to the symbolic end or a constant stop, with any
    /// step up to i64::MAX.
    #[test]
    fn the_slice_type_is_the_concrete_length(n in near_max(), s in step(), start_frac in 0u32..=4, symbolic in any::<bool>()) {
        // A start in 0..n (a quarter steps of n), so the slice is non-empty.
        let start = ((n as i128 - 1) * start_frac as i128 / 4) as i64;
        agrees(n, start, symbolic, s);
    }
}
