//! The Section 4 reference interpreter: every operation on every admissible
//! dtype against hand-computed values, with the heap invariant (§3.3) checked
//! after every step.

use crate::support;

use support::*;
use tc_core::concrete::RuleError;
use tc_core::ir::{BinaryOp, Op, ReduceOp, Scalar, UnaryOp, Value};
use tc_core::{Dim, Dtype, Pred, TensorType, Type};
use tc_runtime::contract::Arg;
use tc_runtime::interp::{denote, no_calls, Interpreter, Val};
use tc_runtime::{cast, Elem, Error, Tensor};

const FLOATS: [Dtype; 5] = [
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F8E4M3,
    Dtype::F8E5M2,
];
const INTS: [Dtype; 5] = [Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8, Dtype::I4];

fn un(op: UnaryOp, x: &Tensor) -> Result<Tensor, Error> {
    apply1(x, |v| Op::Unary(op, v))
}

fn bin(op: BinaryOp, x: &Tensor, y: &Tensor) -> Result<Tensor, Error> {
    apply2(x, y, |a, b| Op::Binary(op, a, b))
}

fn round(dt: Dtype, x: f32) -> f32 {
    cast::round_to(x, dt)
}

fn assert_f(t: &Tensor, expected: &[f32]) {
    let got = fv(t);
    assert_eq!(got.len(), expected.len(), "{got:?} vs {expected:?}");
    for (g, e) in got.iter().zip(expected) {
        assert!(
            g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
            "got {got:?}, expected {expected:?}"
        );
    }
}

// ---------------------------------------------------------------- unary

#[test]
fn float_unary_f32_hand_values() {
    let dt = Dtype::F32;
    let cases: Vec<(UnaryOp, Vec<f32>, Vec<f32>)> = vec![
        (UnaryOp::Neg, vec![1.5, -0.0, -2.0], vec![-1.5, 0.0, 2.0]),
        (UnaryOp::Abs, vec![-2.25, 3.0], vec![2.25, 3.0]),
        (
            UnaryOp::Relu,
            vec![-1.0, 3.0, f32::NAN],
            vec![0.0, 3.0, f32::NAN],
        ),
        (
            UnaryOp::Exp,
            vec![0.0, 1.0],
            vec![1.0, std::f64::consts::E as f32],
        ),
        (
            UnaryOp::Log,
            vec![1.0, 2.0],
            vec![0.0, std::f64::consts::LN_2 as f32],
        ),
        (
            UnaryOp::Sqrt,
            vec![4.0, 2.0],
            vec![2.0, std::f64::consts::SQRT_2 as f32],
        ),
        (UnaryOp::Rsqrt, vec![4.0, 0.25], vec![0.5, 2.0]),
        (
            UnaryOp::Tanh,
            vec![0.0, 0.5],
            vec![0.0, 0.46211715726000974_f64 as f32],
        ),
        (
            UnaryOp::Sigmoid,
            vec![0.0, 1.0],
            vec![0.5, 0.7310585786300049_f64 as f32],
        ),
        (
            UnaryOp::Gelu,
            vec![0.0, 1.0, -1.0],
            vec![
                0.0,
                0.8413447460685429_f64 as f32,
                -0.15865525393145707_f64 as f32,
            ],
        ),
        (
            UnaryOp::Sin,
            vec![0.0, 1.0],
            vec![0.0, 0.8414709848078965_f64 as f32],
        ),
        (
            UnaryOp::Cos,
            vec![0.0, 1.0],
            vec![1.0, 0.5403023058681398_f64 as f32],
        ),
        (
            UnaryOp::Erf,
            vec![0.0, 0.5, -2.0],
            vec![
                0.0,
                0.5204998778130465_f64 as f32,
                -0.9953222650189527_f64 as f32,
            ],
        ),
        (UnaryOp::Recip, vec![4.0, -0.5], vec![0.25, -2.0]),
        (UnaryOp::Floor, vec![-1.5, 1.5], vec![-2.0, 1.0]),
        (UnaryOp::Ceil, vec![-1.5, 1.5], vec![-1.0, 2.0]),
        (
            UnaryOp::Round,
            vec![0.5, 1.5, 2.5, -0.5, -2.5, 2.6],
            vec![0.0, 2.0, 2.0, -0.0, -2.0, 3.0],
        ),
    ];
    for (op, x, e) in cases {
        let out = un(op, &ft(dt, &[x.len()], &x)).unwrap();
        assert_eq!(out.dtype(), dt);
        assert_f(&out, &e);
    }
}

#[test]
fn float_unary_narrow_dtypes_round_after_the_op() {
    // exp(1) = 2.71828…: bf16/f16 → 2.71875, f8e4m3 (spacing 0.25) → 2.75, f8e5m2 (spacing 0.5) → 2.5.
    let want = [
        (Dtype::F16, 2.71875),
        (Dtype::BF16, 2.71875),
        (Dtype::F8E4M3, 2.75),
        (Dtype::F8E5M2, 2.5),
    ];
    for (dt, w) in want {
        let out = un(UnaryOp::Exp, &ft(dt, &[1], &[1.0])).unwrap();
        assert_eq!(out.dtype(), dt);
        assert_f(&out, &[w]);
    }
    // Out of range saturates (Section 2 §5): exp(8) = 2981 → 448 in f8e4m3, 3072 in f8e5m2.
    assert_f(
        &un(UnaryOp::Exp, &ft(Dtype::F8E4M3, &[1], &[8.0])).unwrap(),
        &[448.0],
    );
    assert_f(
        &un(UnaryOp::Exp, &ft(Dtype::F8E5M2, &[1], &[8.0])).unwrap(),
        &[3072.0],
    );
    // Every float op at every float dtype = the f32 result rounded once.
    let x = [0.5f32, 1.0, 1.5, 2.0, -1.5, 4.0];
    for dt in FLOATS {
        for op in UnaryOp::ALL.into_iter().filter(|o| o.admits(dt)) {
            let out = un(op, &ft(dt, &[x.len()], &x)).unwrap();
            let f32_out = fv(&un(op, &ft(Dtype::F32, &[x.len()], &x)).unwrap());
            let expect: Vec<f32> = f32_out.iter().map(|&v| round(dt, v)).collect();
            assert_f(&out, &expect);
        }
    }
}

#[test]
fn int_unary_wraps() {
    for dt in INTS {
        let (lo, hi) = dt.int_range().unwrap();
        let x = it(dt, &[4], &[lo, -3, 0, hi]);
        assert_eq!(
            iv(&un(UnaryOp::Neg, &x).unwrap()),
            vec![lo, 3, 0, -hi],
            "{dt}"
        );
        assert_eq!(
            iv(&un(UnaryOp::Abs, &x).unwrap()),
            vec![lo, 3, 0, hi],
            "{dt}"
        );
        assert_eq!(
            iv(&un(UnaryOp::Relu, &x).unwrap()),
            vec![0, 0, 0, hi],
            "{dt}"
        );
    }
    // Concretely: abs(i8::MIN) and neg(-8 as i4) wrap to themselves.
    assert_eq!(
        iv(&un(UnaryOp::Abs, &it(Dtype::I8, &[1], &[-128])).unwrap()),
        vec![-128]
    );
    assert_eq!(
        iv(&un(UnaryOp::Neg, &it(Dtype::I4, &[1], &[-8])).unwrap()),
        vec![-8]
    );
}

#[test]
fn bool_not_and_inadmissible_unary() {
    assert_eq!(
        bv(&un(UnaryOp::Not, &bt(&[2], &[true, false])).unwrap()),
        vec![false, true]
    );
    assert!(matches!(
        un(UnaryOp::Exp, &it(Dtype::I32, &[1], &[1])),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
    assert!(matches!(
        un(UnaryOp::Not, &ft(Dtype::F32, &[1], &[1.0])),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
    assert!(matches!(
        un(UnaryOp::Neg, &bt(&[1], &[true])),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
}

#[test]
fn erf_and_gelu_accuracy() {
    let table = [
        (0.1, 0.1124629160182849),
        (0.5, 0.5204998778130465),
        (1.0, 0.8427007929497149),
        (2.0, 0.9953222650189527),
        (2.9, 0.9999589021219005),
        (3.0, 0.9999779095030014),
        (3.5, 0.9999992569016276),
    ];
    for (x, e) in table {
        let r: f64 = denote::erf64(x);
        assert!(
            (r - e).abs() <= 4.0 * f64::EPSILON,
            "erf({x}) = {r}, expected {e}"
        );
        assert!((denote::erf64(-x) + e).abs() <= 4.0 * f64::EPSILON);
    }
    for (x, e) in [
        (3.0, 2.209049699858544e-05),
        (4.0, 1.541725790028002e-08),
        (5.0, 1.537_459_794_428_035e-12),
    ] {
        let r = denote::erfc64(x);
        assert!(((r - e) / e).abs() < 1e-13, "erfc({x}) = {r}, expected {e}");
    }
    // gelu in the far negative tail is tiny but not 0: x·Φ(x) at x = −10 ≈ −7.62e−23.
    let g = denote::gelu64(-10.0);
    assert!((g / -7.619853024160527e-23 - 1.0).abs() < 1e-10, "{g}");
}

// ---------------------------------------------------------------- cast

#[test]
fn cast_follows_section2_conversions() {
    let c = |to: Dtype, x: &Tensor| apply1(x, |v| Op::Cast(to, v)).unwrap();
    let x = ft(Dtype::F32, &[5], &[1000.0, -1000.0, f32::NAN, -2.7, 2.7]);
    assert_eq!(iv(&c(Dtype::I8, &x)), vec![127, -128, 0, -2, 2]);
    assert_f(
        &c(Dtype::F8E4M3, &x),
        &[448.0, -448.0, f32::NAN, -2.75, 2.75],
    );
    assert_eq!(bv(&c(Dtype::Bool, &x)), vec![true, true, true, true, true]);
    assert_eq!(
        iv(&c(Dtype::I4, &it(Dtype::I32, &[3], &[9, -9, 7]))),
        vec![-7, 7, 7]
    );
    assert_f(&c(Dtype::F32, &bt(&[2], &[true, false])), &[1.0, 0.0]);
    assert_eq!(
        iv(&c(Dtype::I64, &it(Dtype::I4, &[2], &[-8, 7]))),
        vec![-8, 7]
    );
}

// ---------------------------------------------------------------- binary

#[test]
fn float_binary_all_dtypes() {
    for dt in FLOATS {
        let x = ft(dt, &[4], &[1.0, -2.0, 4.0, 0.5]);
        let y = ft(dt, &[4], &[2.0, 0.5, -4.0, 0.5]);
        assert_f(&bin(BinaryOp::Add, &x, &y).unwrap(), &[3.0, -1.5, 0.0, 1.0]);
        assert_f(
            &bin(BinaryOp::Sub, &x, &y).unwrap(),
            &[-1.0, -2.5, 8.0, 0.0],
        );
        assert_f(
            &bin(BinaryOp::Mul, &x, &y).unwrap(),
            &[2.0, -1.0, -16.0, 0.25],
        );
        assert_f(
            &bin(BinaryOp::Div, &x, &y).unwrap(),
            &[0.5, -4.0, -1.0, 1.0],
        );
        assert_f(&bin(BinaryOp::Max, &x, &y).unwrap(), &[2.0, 0.5, 4.0, 0.5]);
        assert_f(
            &bin(BinaryOp::Min, &x, &y).unwrap(),
            &[1.0, -2.0, -4.0, 0.5],
        );
        assert_f(
            &bin(BinaryOp::Pow, &x, &ft(dt, &[4], &[2.0, 2.0, 0.5, 1.0])).unwrap(),
            &[1.0, 4.0, 2.0, 0.5],
        );
        assert_eq!(
            bv(&bin(BinaryOp::Eq, &x, &y).unwrap()),
            vec![false, false, false, true]
        );
        assert_eq!(
            bv(&bin(BinaryOp::Ne, &x, &y).unwrap()),
            vec![true, true, true, false]
        );
        assert_eq!(
            bv(&bin(BinaryOp::Lt, &x, &y).unwrap()),
            vec![true, true, false, false]
        );
        assert_eq!(
            bv(&bin(BinaryOp::Le, &x, &y).unwrap()),
            vec![true, true, false, true]
        );
        assert_eq!(
            bv(&bin(BinaryOp::Gt, &x, &y).unwrap()),
            vec![false, false, true, false]
        );
        assert_eq!(
            bv(&bin(BinaryOp::Ge, &x, &y).unwrap()),
            vec![false, false, true, true]
        );
        assert!(matches!(
            bin(BinaryOp::Rem, &x, &y),
            Err(Error::Rule(RuleError::Malformed(_)))
        ));
        assert!(matches!(
            bin(BinaryOp::And, &x, &y),
            Err(Error::Rule(RuleError::Malformed(_)))
        ));
    }
}

#[test]
fn float_max_min_propagate_nan_and_comparisons_are_ieee() {
    let x = ft(Dtype::F32, &[2], &[f32::NAN, 1.0]);
    let y = ft(Dtype::F32, &[2], &[1.0, f32::NAN]);
    assert_f(&bin(BinaryOp::Max, &x, &y).unwrap(), &[f32::NAN, f32::NAN]);
    assert_f(&bin(BinaryOp::Min, &x, &y).unwrap(), &[f32::NAN, f32::NAN]);
    assert_eq!(bv(&bin(BinaryOp::Eq, &x, &y).unwrap()), vec![false, false]);
    assert_eq!(bv(&bin(BinaryOp::Ne, &x, &y).unwrap()), vec![true, true]);
    assert_eq!(bv(&bin(BinaryOp::Lt, &x, &y).unwrap()), vec![false, false]);
}

#[test]
fn narrow_float_rounds_after_every_op() {
    // bf16 has 8 significant bits: 1 + 2⁻⁸ is a tie between 1 and 1 + 2⁻⁷ → 1 (even).
    let tiny = 1.0 / 256.0;
    let build = |dt: Dtype| {
        let mut b = FnBuilder::new("f");
        let x = b.tensor("x", dt, cs(&[1]));
        let y = b.tensor("y", dt, cs(&[1]));
        let s = b.op(Op::Binary(BinaryOp::Add, x, y));
        let t = b.op(Op::Binary(BinaryOp::Add, s, y));
        (b.ret_any(t), ft(dt, &[1], &[1.0]), ft(dt, &[1], &[tiny]))
    };
    let (f, x, y) = build(Dtype::BF16);
    assert_f(&run(&f, vec![x.into(), y.into()]).unwrap(), &[1.0]);
    let (f, x, y) = build(Dtype::F32);
    assert_f(
        &run(&f, vec![x.into(), y.into()]).unwrap(),
        &[1.0 + 2.0 * tiny],
    );
    // f16: 2048 + 1 is a tie → 2048.
    assert_f(
        &bin(
            BinaryOp::Add,
            &ft(Dtype::F16, &[1], &[2048.0]),
            &ft(Dtype::F16, &[1], &[1.0]),
        )
        .unwrap(),
        &[2048.0],
    );
    // f8e5m2: 1.25 · 1.25 = 1.5625 → 1.5.
    let q = ft(Dtype::F8E5M2, &[1], &[1.25]);
    assert_f(&bin(BinaryOp::Mul, &q, &q).unwrap(), &[1.5]);
}

#[test]
fn int_binary_wraps_truncates_and_divides_by_zero_to_zero() {
    let i = |dt, v: &[i64]| it(dt, &[v.len()], v);
    assert_eq!(
        iv(&bin(
            BinaryOp::Add,
            &i(Dtype::I8, &[100, -100]),
            &i(Dtype::I8, &[100, -100])
        )
        .unwrap()),
        vec![-56, 56]
    );
    assert_eq!(
        iv(&bin(
            BinaryOp::Add,
            &i(Dtype::I4, &[7, -8]),
            &i(Dtype::I4, &[1, -1])
        )
        .unwrap()),
        vec![-8, 7]
    );
    assert_eq!(
        iv(&bin(
            BinaryOp::Mul,
            &i(Dtype::I16, &[300]),
            &i(Dtype::I16, &[300])
        )
        .unwrap()),
        vec![24464]
    );
    assert_eq!(
        iv(&bin(
            BinaryOp::Sub,
            &i(Dtype::I32, &[i32::MIN as i64]),
            &i(Dtype::I32, &[1])
        )
        .unwrap()),
        vec![i32::MAX as i64]
    );
    for dt in INTS {
        let x = i(dt, &[-7, 7, 5, -5, 3]);
        let y = i(dt, &[2, -2, 0, 0, 3]);
        assert_eq!(
            iv(&bin(BinaryOp::Div, &x, &y).unwrap()),
            vec![-3, -3, 0, 0, 1],
            "{dt}"
        );
        assert_eq!(
            iv(&bin(BinaryOp::Rem, &x, &y).unwrap()),
            vec![-1, 1, 0, 0, 0],
            "{dt}"
        );
        assert_eq!(
            iv(&bin(BinaryOp::Max, &x, &y).unwrap()),
            vec![2, 7, 5, 0, 3],
            "{dt}"
        );
        assert_eq!(
            iv(&bin(BinaryOp::Min, &x, &y).unwrap()),
            vec![-7, -2, 0, -5, 3],
            "{dt}"
        );
        assert_eq!(
            bv(&bin(BinaryOp::Lt, &x, &y).unwrap()),
            vec![true, false, false, true, false],
            "{dt}"
        );
        assert_eq!(
            bv(&bin(BinaryOp::Eq, &x, &y).unwrap()),
            vec![false, false, false, false, true],
            "{dt}"
        );
        // MIN / −1 wraps to MIN, MIN % −1 = 0: no panic.
        let (lo, _) = dt.int_range().unwrap();
        assert_eq!(
            iv(&bin(BinaryOp::Div, &i(dt, &[lo]), &i(dt, &[-1])).unwrap()),
            vec![lo],
            "{dt}"
        );
        assert_eq!(
            iv(&bin(BinaryOp::Rem, &i(dt, &[lo]), &i(dt, &[-1])).unwrap()),
            vec![0],
            "{dt}"
        );
        assert!(matches!(
            bin(BinaryOp::Pow, &x, &y),
            Err(Error::Rule(RuleError::Malformed(_)))
        ));
    }
}

#[test]
fn bool_binary() {
    let x = bt(&[4], &[false, false, true, true]);
    let y = bt(&[4], &[false, true, false, true]);
    assert_eq!(
        bv(&bin(BinaryOp::And, &x, &y).unwrap()),
        vec![false, false, false, true]
    );
    assert_eq!(
        bv(&bin(BinaryOp::Or, &x, &y).unwrap()),
        vec![false, true, true, true]
    );
    assert_eq!(
        bv(&bin(BinaryOp::Xor, &x, &y).unwrap()),
        vec![false, true, true, false]
    );
    assert_eq!(
        bv(&bin(BinaryOp::Eq, &x, &y).unwrap()),
        vec![true, false, false, true]
    );
    assert_eq!(
        bv(&bin(BinaryOp::Ne, &x, &y).unwrap()),
        vec![false, true, true, false]
    );
    assert_eq!(
        bv(&bin(BinaryOp::Lt, &x, &y).unwrap()),
        vec![false, true, false, false]
    );
    assert_eq!(
        bv(&bin(BinaryOp::Ge, &x, &y).unwrap()),
        vec![true, false, true, true]
    );
    assert!(matches!(
        bin(BinaryOp::Add, &x, &y),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
}

#[test]
fn binary_shape_mismatch_at_run_time_is_an_error() {
    let r = bin(
        BinaryOp::Add,
        &ft(Dtype::F32, &[2], &[1.0, 2.0]),
        &ft(Dtype::F32, &[3], &[1.0, 2.0, 3.0]),
    );
    assert!(matches!(r, Err(Error::Rule(RuleError::Op { .. }))), "{r:?}");
}

#[test]
fn scalar_binary_literals_and_params() {
    let x = ft(Dtype::F32, &[3], &[1.0, 2.0, 3.0]);
    let sb = |op, s, left| {
        move |v| Op::ScalarBinary {
            op,
            x: v,
            s,
            scalar_left: left,
        }
    };
    assert_f(
        &apply1(&x, sb(BinaryOp::Mul, Scalar::Float(2.0), false)).unwrap(),
        &[2.0, 4.0, 6.0],
    );
    assert_f(
        &apply1(&x, sb(BinaryOp::Sub, Scalar::Float(10.0), true)).unwrap(),
        &[9.0, 8.0, 7.0],
    );
    assert_f(
        &apply1(&x, sb(BinaryOp::Sub, Scalar::Float(10.0), false)).unwrap(),
        &[-9.0, -8.0, -7.0],
    );
    assert_eq!(
        bv(&apply1(&x, sb(BinaryOp::Gt, Scalar::Float(1.5), false)).unwrap()),
        vec![false, true, true]
    );
    // An int literal at i8 converts by the cast rules (wraps): 300 → 44.
    let y = it(Dtype::I8, &[2], &[1, -1]);
    assert_eq!(
        iv(&apply1(&y, sb(BinaryOp::Add, Scalar::Int(300), false)).unwrap()),
        vec![45, 43]
    );
    // bf16 literal 0.1 rounds to bf16 and the product rounds again.
    let z = ft(Dtype::BF16, &[1], &[3.0]);
    let want = round(Dtype::BF16, 3.0 * round(Dtype::BF16, 0.1));
    assert_f(
        &apply1(&z, sb(BinaryOp::Mul, Scalar::Float(0.1), false)).unwrap(),
        &[want],
    );
    // A scalar parameter.
    let mut b = FnBuilder::new("scale");
    let xv = b.tensor("x", Dtype::F32, ds(&["N"]));
    let s = b.scalar("s", Dtype::F32);
    let r = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: xv,
        s: b.scalar_param(s),
        scalar_left: false,
    });
    let f = b.ret(r, tt(Dtype::F32, ds(&["N"])));
    assert_f(
        &run(&f, vec![x.clone().into(), 0.5f32.into()]).unwrap(),
        &[0.5, 1.0, 1.5],
    );
}

#[test]
fn select_every_dtype() {
    for dt in Dtype::ALL {
        let a = sample_tensor(dt, &[2, 2]);
        let b = apply1(&a, |v| Op::Unary(UnaryOp::Neg, v))
            .unwrap_or_else(|_| sample_tensor(dt, &[2, 2]));
        let c = bt(&[2, 2], &[true, false, false, true]);
        let r = apply3(&c, &a, &b, Op::Select).unwrap();
        let (ae, be, re) = (a.to_elems(), b.to_elems(), r.to_elems());
        assert!(
            re[0].bit_eq(ae[0])
                && re[1].bit_eq(be[1])
                && re[2].bit_eq(be[2])
                && re[3].bit_eq(ae[3]),
            "{dt}"
        );
    }
}

// ---------------------------------------------------------------- matmul

#[test]
fn matmul_numeric_dtypes() {
    for dt in FLOATS
        .into_iter()
        .chain([Dtype::I64, Dtype::I32, Dtype::I16])
    {
        let mk = |shape: &[usize], v: &[i64]| {
            if dt.is_float() {
                ft(dt, shape, &v.iter().map(|&x| x as f32).collect::<Vec<_>>())
            } else {
                it(dt, shape, v)
            }
        };
        let a = mk(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let b = mk(&[3, 2], &[7, 8, 9, 10, 11, 12]);
        let r = apply2(&a, &b, Op::Matmul).unwrap();
        assert_eq!(r.shape(), &[2, 2]);
        let want = [58.0f32, 64.0, 139.0, 154.0];
        if dt.is_float() {
            assert_f(&r, &want.map(|w| round(dt, w)));
        } else {
            assert_eq!(iv(&r), vec![58, 64, 139, 154]);
        }
    }
}

#[test]
fn matmul_batched_wrapping_and_empty_contraction() {
    // [2, 1, 2] × [2, 2, 1] → [2, 1, 1].
    let a = ft(Dtype::F32, &[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = ft(Dtype::F32, &[2, 2, 1], &[5.0, 6.0, 7.0, 8.0]);
    let r = apply2(&a, &b, Op::Matmul).unwrap();
    assert_eq!(r.shape(), &[2, 1, 1]);
    assert_f(&r, &[17.0, 53.0]);
    // i8: 100·2 + 100·2 = 400 wraps to −112; i4: 3·3 = 9 wraps to −7.
    let r = apply2(
        &it(Dtype::I8, &[1, 2], &[100, 100]),
        &it(Dtype::I8, &[2, 1], &[2, 2]),
        Op::Matmul,
    )
    .unwrap();
    assert_eq!(iv(&r), vec![-112]);
    let r = apply2(
        &it(Dtype::I4, &[1, 1], &[3]),
        &it(Dtype::I4, &[1, 1], &[3]),
        Op::Matmul,
    )
    .unwrap();
    assert_eq!(iv(&r), vec![-7]);
    // K = 0: every output is the empty sum 0.
    let r = apply2(
        &Tensor::zeros(Dtype::F32, &[2, 0]),
        &Tensor::zeros(Dtype::F32, &[0, 3]),
        Op::Matmul,
    )
    .unwrap();
    assert_eq!(r.shape(), &[2, 3]);
    assert_f(&r, &[0.0; 6]);
    // Mismatched contraction at run time.
    let r = apply2(
        &Tensor::zeros(Dtype::F32, &[2, 3]),
        &Tensor::zeros(Dtype::F32, &[2, 3]),
        Op::Matmul,
    );
    assert!(matches!(r, Err(Error::Rule(RuleError::Op { .. }))));
    assert!(matches!(
        apply2(&bt(&[1, 1], &[true]), &bt(&[1, 1], &[true]), Op::Matmul),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
}

#[test]
fn narrow_matmul_accumulates_in_f32_and_rounds_once() {
    // Σ [1, 2⁻⁸, 2⁻⁸] = 1 + 2⁻⁷ exactly in f32, representable in bf16; rounding
    // after each add would give 1.
    let t = 1.0 / 256.0;
    let a = ft(Dtype::BF16, &[1, 3], &[1.0, t, t]);
    let b = ft(Dtype::BF16, &[3, 1], &[1.0, 1.0, 1.0]);
    assert_f(&apply2(&a, &b, Op::Matmul).unwrap(), &[1.0 + 2.0 * t]);
}

// ---------------------------------------------------------------- reduce

fn red(op: ReduceOp, axes: &[usize], keepdims: bool, x: &Tensor) -> Result<Tensor, Error> {
    apply1(x, |v| Op::Reduce {
        op,
        axes: axes.to_vec(),
        keepdims,
        x: v,
    })
}

#[test]
fn reduce_float_and_int() {
    for dt in FLOATS
        .into_iter()
        .chain([Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8])
    {
        let v = [1i64, 2, 3, 4, 5, 6];
        let x = if dt.is_float() {
            ft(dt, &[2, 3], &v.map(|x| x as f32))
        } else {
            it(dt, &[2, 3], &v)
        };
        // Float results are the exact value rounded once into `dt` (f8e5m2: 9 → 8, 21 → 20).
        let get = |t: Tensor| -> Vec<f64> {
            t.to_elems()
                .into_iter()
                .map(|e| {
                    e.as_f32()
                        .map(f64::from)
                        .or(e.as_i64().map(|i| i as f64))
                        .unwrap()
                })
                .collect()
        };
        let w = |v: &[f64]| -> Vec<f64> {
            v.iter()
                .map(|&x| {
                    if dt.is_float() {
                        round(dt, x as f32) as f64
                    } else {
                        x
                    }
                })
                .collect()
        };
        let r = red(ReduceOp::Sum, &[0], false, &x).unwrap();
        assert_eq!(r.shape(), &[3]);
        assert_eq!(get(r), w(&[5.0, 7.0, 9.0]), "{dt}");
        let r = red(ReduceOp::Sum, &[1], true, &x).unwrap();
        assert_eq!(r.shape(), &[2, 1]);
        assert_eq!(get(r), w(&[6.0, 15.0]), "{dt}");
        let r = red(ReduceOp::Sum, &[1, 0], false, &x).unwrap();
        assert_eq!(r.shape(), &[] as &[usize]);
        assert_eq!(get(r), w(&[21.0]), "{dt}");
        let r = red(ReduceOp::Sum, &[0, 1], true, &x).unwrap();
        assert_eq!(r.shape(), &[1, 1]);
        if dt != Dtype::I8 && dt.is_int()
            || dt == Dtype::F32
            || dt == Dtype::F16
            || dt == Dtype::BF16
        {
            assert_eq!(
                get(red(ReduceOp::Prod, &[1], false, &x).unwrap()),
                w(&[6.0, 120.0]),
                "{dt}"
            );
        }
        assert_eq!(
            get(red(ReduceOp::Max, &[0], false, &x).unwrap()),
            w(&[4.0, 5.0, 6.0]),
            "{dt}"
        );
        assert_eq!(
            get(red(ReduceOp::Min, &[1], false, &x).unwrap()),
            w(&[1.0, 4.0]),
            "{dt}"
        );
        if dt.is_float() {
            assert_eq!(
                get(red(ReduceOp::Mean, &[1], false, &x).unwrap()),
                w(&[2.0, 5.0]),
                "{dt}"
            );
        } else {
            assert!(matches!(
                red(ReduceOp::Mean, &[1], false, &x),
                Err(Error::Rule(RuleError::Malformed(_)))
            ));
        }
    }
    // Int sums and products wrap: i8 100 + 100 = −56, i4 4·4 = 16 → 0.
    assert_eq!(
        iv(&red(
            ReduceOp::Sum,
            &[0],
            false,
            &it(Dtype::I8, &[2], &[100, 100])
        )
        .unwrap()),
        vec![-56]
    );
    assert_eq!(
        iv(&red(ReduceOp::Prod, &[0], false, &it(Dtype::I4, &[2], &[4, 4])).unwrap()),
        vec![0]
    );
    // f8e4m3: 1·2·…·6 = 720 saturates into 448 once at the end.
    let x = ft(Dtype::F8E4M3, &[6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_f(&red(ReduceOp::Prod, &[0], false, &x).unwrap(), &[448.0]);
    // Float max propagates NaN.
    let x = ft(Dtype::F32, &[3], &[1.0, f32::NAN, 3.0]);
    assert_f(&red(ReduceOp::Max, &[0], false, &x).unwrap(), &[f32::NAN]);
}

#[test]
fn reduce_bool_and_empty_axes() {
    let x = bt(&[2, 2], &[true, false, true, true]);
    assert_eq!(
        bv(&red(ReduceOp::Any, &[1], false, &x).unwrap()),
        vec![true, true]
    );
    assert_eq!(
        bv(&red(ReduceOp::All, &[1], false, &x).unwrap()),
        vec![false, true]
    );
    assert_eq!(
        bv(&red(ReduceOp::All, &[0], false, &x).unwrap()),
        vec![true, false]
    );
    // Empty axis: sum = 0, prod = 1, any = false, all = true; max/min/mean are errors.
    let e = Tensor::zeros(Dtype::F32, &[2, 0]);
    let r = red(ReduceOp::Sum, &[1], false, &e).unwrap();
    assert_eq!(r.shape(), &[2]);
    assert_f(&r, &[0.0, 0.0]);
    assert_f(&red(ReduceOp::Prod, &[1], false, &e).unwrap(), &[1.0, 1.0]);
    assert_eq!(
        iv(&red(
            ReduceOp::Sum,
            &[1],
            false,
            &Tensor::zeros(Dtype::I32, &[2, 0])
        )
        .unwrap()),
        vec![0, 0]
    );
    assert_eq!(
        iv(&red(
            ReduceOp::Prod,
            &[1],
            false,
            &Tensor::zeros(Dtype::I4, &[1, 0])
        )
        .unwrap()),
        vec![1]
    );
    assert_eq!(
        bv(&red(
            ReduceOp::Any,
            &[1],
            false,
            &Tensor::zeros(Dtype::Bool, &[1, 0])
        )
        .unwrap()),
        vec![false]
    );
    assert_eq!(
        bv(&red(
            ReduceOp::All,
            &[1],
            false,
            &Tensor::zeros(Dtype::Bool, &[1, 0])
        )
        .unwrap()),
        vec![true]
    );
    // Reducing the other axis of an empty tensor gives an empty result.
    assert_eq!(red(ReduceOp::Max, &[0], false, &e).unwrap().shape(), &[0]);
    for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean] {
        assert!(
            matches!(
                red(op, &[1], false, &e),
                Err(Error::Rule(RuleError::Op { .. }))
            ),
            "{op:?}"
        );
    }
    // Bad attributes are reported, not panicked on.
    assert!(matches!(
        red(ReduceOp::Sum, &[2], false, &e),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
    assert!(matches!(
        red(ReduceOp::Sum, &[0, 0], false, &e),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
    assert!(matches!(
        red(ReduceOp::Sum, &[], false, &e),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
}

#[test]
fn narrow_sum_and_mean_accumulate_in_f32() {
    let t = 1.0 / 256.0;
    let x = ft(Dtype::BF16, &[5], &[1.0, t, t, t, t]);
    assert_f(
        &red(ReduceOp::Sum, &[0], false, &x).unwrap(),
        &[1.0 + 4.0 * t],
    );
    // mean = (1 + 4·2⁻⁸)/5 in f32, rounded once to bf16.
    assert_f(
        &red(ReduceOp::Mean, &[0], false, &x).unwrap(),
        &[round(Dtype::BF16, (1.0 + 4.0 * t) / 5.0)],
    );
}

#[test]
fn argmax_argmin_ties_and_nan() {
    let am = |max: bool, axis: usize, keepdims: bool, x: &Tensor| {
        apply1(x, |v| Op::ArgReduce {
            max,
            axis,
            keepdims,
            x: v,
        })
        .unwrap()
    };
    let x = ft(Dtype::F32, &[4], &[1.0, 3.0, 3.0, 2.0]);
    let r = am(true, 0, false, &x);
    assert_eq!((r.dtype(), r.shape()), (Dtype::I64, &[] as &[usize]));
    assert_eq!(iv(&r), vec![1]);
    assert_eq!(
        iv(&am(
            false,
            0,
            false,
            &ft(Dtype::F32, &[3], &[2.0, 1.0, 1.0])
        )),
        vec![1]
    );
    let n = ft(Dtype::F32, &[4], &[1.0, f32::NAN, 5.0, f32::NAN]);
    assert_eq!(iv(&am(true, 0, false, &n)), vec![1]);
    assert_eq!(iv(&am(false, 0, false, &n)), vec![1]);
    assert_eq!(
        iv(&am(
            true,
            0,
            false,
            &ft(Dtype::F32, &[2], &[f32::INFINITY, f32::NAN])
        )),
        vec![1]
    );
    assert_eq!(
        iv(&am(
            false,
            0,
            false,
            &ft(Dtype::F32, &[2], &[f32::NEG_INFINITY, f32::NAN])
        )),
        vec![1]
    );
    // 2-D, both axes, keepdims; every numeric dtype.
    for dt in FLOATS.into_iter().chain(INTS) {
        let x = if dt.is_float() {
            ft(dt, &[2, 3], &[1.0, 4.0, 4.0, 2.0, -1.0, 2.0])
        } else {
            it(dt, &[2, 3], &[1, 4, 4, 2, -1, 2])
        };
        assert_eq!(iv(&am(true, 1, false, &x)), vec![1, 0], "{dt}");
        assert_eq!(iv(&am(false, 1, false, &x)), vec![0, 1], "{dt}");
        let r = am(true, 0, true, &x);
        assert_eq!(r.shape(), &[1, 3]);
        assert_eq!(iv(&r), vec![1, 0, 0], "{dt}");
    }
    let e = apply1(&Tensor::zeros(Dtype::F32, &[0]), |v| Op::ArgReduce {
        max: true,
        axis: 0,
        keepdims: false,
        x: v,
    });
    assert!(matches!(e, Err(Error::Rule(RuleError::Op { .. }))));
}

// ---------------------------------------------------------------- structure

#[test]
fn transpose_every_dtype() {
    for dt in Dtype::ALL {
        let x = sample_tensor(dt, &[2, 3]);
        let r = apply1(&x, |v| Op::Transpose(vec![1, 0], v)).unwrap();
        assert_eq!(r.shape(), &[3, 2]);
        let (xe, re) = (x.to_elems(), r.to_elems());
        for i in 0..2 {
            for j in 0..3 {
                assert!(re[j * 2 + i].bit_eq(xe[i * 3 + j]), "{dt}");
            }
        }
    }
    // Output axis j is input axis perm[j]: [2, 3, 4] with [2, 0, 1] → [4, 2, 3].
    let x = sample_tensor(Dtype::I64, &[2, 3, 4]);
    let r = apply1(&x, |v| Op::Transpose(vec![2, 0, 1], v)).unwrap();
    assert_eq!(r.shape(), &[4, 2, 3]);
    // r[k, i, j] = x[i, j, k].
    assert_eq!(r.get_at(&[3, 1, 2]), x.get_at(&[1, 2, 3]));
    assert!(matches!(
        apply1(&x, |v| Op::Transpose(vec![0, 0, 1], v)),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
}

#[test]
fn reshape_every_dtype_and_volume_backstop() {
    for dt in Dtype::ALL {
        let x = sample_tensor(dt, &[2, 3]);
        let r = apply1(&x, |v| Op::Reshape(ds(&["3", "1", "2"]), v)).unwrap();
        assert_eq!(r.shape(), &[3, 1, 2]);
        assert!(
            r.to_elems()
                .iter()
                .zip(x.to_elems())
                .all(|(a, b)| a.bit_eq(b)),
            "{dt}"
        );
    }
    // The checker's volume assumption is false at run time: a typed error.
    let mut b = FnBuilder::new("r");
    let x = b.tensor("x", Dtype::F32, ds(&["6"]));
    let _y = b.tensor("y", Dtype::F32, ds(&["S"]));
    let r = b.op(Op::Reshape(ds(&["S", "2"]), x));
    let f = b.ret_any(r);
    let err = run(
        &f,
        vec![
            Tensor::zeros(Dtype::F32, &[6]).into(),
            Tensor::zeros(Dtype::F32, &[4]).into(),
        ],
    );
    assert_eq!(
        err.unwrap_err(),
        Error::Rule(RuleError::ReshapeVolume {
            from: vec![6],
            to: vec![4, 2],
            from_volume: 6,
            to_volume: 8
        })
    );
    let ok = run(
        &f,
        vec![
            Tensor::zeros(Dtype::F32, &[6]).into(),
            Tensor::zeros(Dtype::F32, &[3]).into(),
        ],
    )
    .unwrap();
    assert_eq!(ok.shape(), &[3, 2]);
    // A negative target is a volume error too, never a panic.
    let e = apply1(&Tensor::zeros(Dtype::F32, &[1]), |v| {
        Op::Reshape(vec![Dim::c(-1), Dim::c(-1)], v)
    });
    assert!(
        matches!(e, Err(Error::Rule(RuleError::ReshapeVolume { .. }))),
        "{e:?}"
    );
}

#[test]
fn broadcast_every_dtype() {
    for dt in Dtype::ALL {
        let x = sample_tensor(dt, &[3]);
        let r = apply1(&x, |v| Op::Broadcast(ds(&["2", "3"]), v)).unwrap();
        assert_eq!(r.shape(), &[2, 3]);
        let (xe, re) = (x.to_elems(), r.to_elems());
        assert!((0..6).all(|k| re[k].bit_eq(xe[k % 3])), "{dt}");
        let y = sample_tensor(dt, &[2, 1]);
        let r = apply1(&y, |v| Op::Broadcast(ds(&["2", "3"]), v)).unwrap();
        let (ye, re) = (y.to_elems(), r.to_elems());
        assert!((0..6).all(|k| re[k].bit_eq(ye[k / 3])), "{dt}");
    }
    let e = apply1(&Tensor::zeros(Dtype::F32, &[2]), |v| {
        Op::Broadcast(ds(&["3"]), v)
    });
    assert!(matches!(e, Err(Error::Rule(RuleError::Op { .. }))));
    let e = apply1(&Tensor::zeros(Dtype::F32, &[1, 1]), |v| {
        Op::Broadcast(ds(&["3"]), v)
    });
    assert!(matches!(e, Err(Error::Rule(RuleError::Op { .. }))));
}

#[test]
fn slice_and_concat_every_dtype() {
    for dt in Dtype::ALL {
        let x = sample_tensor(dt, &[2, 4]);
        let r = apply1(&x, |v| Op::Slice {
            axis: 1,
            start: d("1"),
            stop: d("3"),
            step: 1,
            x: v,
        })
        .unwrap();
        assert_eq!(r.shape(), &[2, 2]);
        let (xe, re) = (x.to_elems(), r.to_elems());
        assert!(
            [1, 2, 5, 6]
                .iter()
                .enumerate()
                .all(|(k, &s)| re[k].bit_eq(xe[s])),
            "{dt}"
        );
        let a = sample_tensor(dt, &[2, 1]);
        let b = sample_tensor(dt, &[2, 2]);
        let r = apply3(&a, &b, &a, |p, q, s| Op::Concat(1, vec![p, q, s])).unwrap();
        assert_eq!(r.shape(), &[2, 4]);
        let (ae, be, re) = (a.to_elems(), b.to_elems(), r.to_elems());
        let want = [ae[0], be[0], be[1], ae[0], ae[1], be[2], be[3], ae[1]];
        assert!(re.iter().zip(want).all(|(g, w)| g.bit_eq(w)), "{dt}");
    }
    // Symbolic bounds, an empty slice, and an out-of-range slice.
    let mut b = FnBuilder::new("s");
    let x = b.tensor("x", Dtype::I32, ds(&["N"]));
    let r = b.op(Op::Slice {
        axis: 0,
        start: d("K"),
        stop: d("N") - 1,
        step: 1,
        x,
    });
    b.konst("K", 1);
    let f = b.ret(r, tt(Dtype::I32, vec![d("N") - 2]));
    assert_eq!(
        iv(&run(&f, vec![it(Dtype::I32, &[4], &[1, 2, 3, 4]).into()]).unwrap()),
        vec![2, 3]
    );
    assert_eq!(
        run(&f, vec![it(Dtype::I32, &[2], &[1, 2]).into()])
            .unwrap()
            .shape(),
        &[0]
    );
    let e = run(&f, vec![it(Dtype::I32, &[1], &[1]).into()]);
    assert!(matches!(e, Err(Error::Rule(RuleError::Op { .. }))), "{e:?}");
    // Concat with mismatched off-axis dims.
    let e = apply2(
        &Tensor::zeros(Dtype::F32, &[2, 1]),
        &Tensor::zeros(Dtype::F32, &[3, 1]),
        |p, q| Op::Concat(1, vec![p, q]),
    );
    assert!(matches!(e, Err(Error::Rule(RuleError::Op { .. }))));
}

#[test]
fn fill_and_iota() {
    let mut b = FnBuilder::new("f");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
    let s = b.scalar("s", Dtype::I8);
    let f1 = b.op(Op::Fill(Dtype::I8, ds(&["S"]), b.scalar_param(s)));
    let _f2 = b.op(Op::Fill(Dtype::BF16, ds(&["B"]), Scalar::Float(0.1)));
    let i1 = b.op(Op::Iota(Dtype::I64, ds(&["B", "S"]), 1));
    let _i2 = b.op(Op::Iota(Dtype::F8E4M3, ds(&["S"]), 0));
    let _i3 = b.op(Op::Iota(Dtype::Bool, ds(&["S"]), 0));
    let _i4 = b.op(Op::Iota(Dtype::I4, ds(&["S"]), 0));
    let _ = (x, f1);
    let f = b.ret(i1, tt(Dtype::I64, ds(&["B", "S"])));
    let out = run_outcome(
        &f,
        vec![
            Tensor::zeros(Dtype::F32, &[2, 3]).into(),
            Arg::Scalar(Elem::I(-5)),
        ],
    )
    .unwrap();
    assert_eq!(iv(&out.value), vec![0, 1, 2, 0, 1, 2]);
    let cell = |k: u32| out.heap.get(tc_runtime::Handle(k)).unwrap().data.clone();
    // Handles: τ0 = x (the scalar is not on the heap), then one per instruction.
    assert_eq!(iv(&cell(1)), vec![-5, -5, -5]);
    assert_f(&cell(2), &[round(Dtype::BF16, 0.1); 2]);
    assert_f(&cell(4), &[0.0, 1.0, 2.0]);
    assert_eq!(bv(&cell(5)), vec![false, true, true]);
    assert_eq!(iv(&cell(6)), vec![0, 1, 2]);
    // Iota past I4's range wraps by the cast rules (int → int keeps the low bits).
    let g = {
        let mut b = FnBuilder::new("g");
        let r = b.op(Op::Iota(Dtype::I4, ds(&["10"]), 0));
        b.ret_any(r)
    };
    assert_eq!(
        iv(&run(&g, vec![]).unwrap()),
        vec![0, 1, 2, 3, 4, 5, 6, 7, -8, -7]
    );
    // A fill over an unbound variable is an evaluation error.
    let h = {
        let mut b = FnBuilder::new("h");
        let r = b.op(Op::Fill(Dtype::F32, ds(&["Q"]), Scalar::Float(1.0)));
        b.ret_any(r)
    };
    assert!(matches!(
        run(&h, vec![]),
        Err(Error::Rule(RuleError::Eval { .. }))
    ));
}

#[test]
fn dim_bindings_extend_sigma() {
    let mut b = FnBuilder::new("f");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "S"]));
    b.dim("n", x, 1);
    let ones = b.op(Op::Fill(Dtype::F32, vec![d("n")], Scalar::Float(1.0)));
    let bc = b.op(Op::Broadcast(ds(&["B", "n"]), ones));
    let r = b.annot(
        Op::Binary(BinaryOp::Add, x, bc),
        tt(Dtype::F32, ds(&["B", "n"])),
    );
    let f = b.ret(r, tt(Dtype::F32, ds(&["B", "S"])));
    let out = run_outcome(&f, vec![ft(Dtype::F32, &[1, 3], &[1.0, 2.0, 3.0]).into()]).unwrap();
    assert_f(&out.value, &[2.0, 3.0, 4.0]);
    assert_eq!(out.sigma.get("n"), Some(&3));
}

#[test]
fn calls_go_through_the_callee_contract() {
    let callee = {
        let mut b = FnBuilder::new("double");
        let x = b.tensor("x", Dtype::F32, ds(&["N"]));
        b.requires(Pred::le("N", 4));
        let r = b.op(Op::Binary(BinaryOp::Add, x, x));
        b.ret(r, tt(Dtype::F32, ds(&["N"])))
    };
    let caller = {
        let mut b = FnBuilder::new("main");
        let x = b.tensor("x", Dtype::F32, ds(&["M"]));
        let y = b.op(Op::Call("double".into(), vec![x]));
        let z = b.op(Op::Call("double".into(), vec![y]));
        b.ret(z, tt(Dtype::F32, ds(&["M"])))
    };
    let fns = [callee, caller];
    let out = run_in(
        &fns,
        "main",
        vec![ft(Dtype::F32, &[2], &[1.0, -2.0]).into()],
    )
    .unwrap();
    assert_f(&out, &[4.0, -8.0]);
    // The callee's `requires` fails under its own σ.
    let e = run_in(&fns, "main", vec![Tensor::zeros(Dtype::F32, &[5]).into()]).unwrap_err();
    assert_eq!(
        e,
        Error::Predicate {
            kind: "requires".into(),
            pred: "N <= 4".into(),
            sigma: "N = 5".into()
        }
    );
    // Unknown callee.
    let lone = fns[1].clone();
    let e = Interpreter::checked()
        .run(&lone, &[Tensor::zeros(Dtype::F32, &[1]).into()], &no_calls)
        .unwrap_err();
    assert_eq!(e, Error::UnknownFunction("double".into()));
    // The heap is shared and grow-only: x, then double's two steps and main's two.
    let out = Interpreter::checked()
        .run_outcome(
            &fns[1],
            &[Tensor::zeros(Dtype::F32, &[1]).into()],
            &|n: &str| fns.iter().find(|f| f.sig.name == n),
        )
        .unwrap();
    assert_eq!(out.heap.len(), 5);
    assert_eq!(out.steps, 4);
    // Recursion is reported, not a stack overflow.
    let rec = {
        let mut b = FnBuilder::new("rec");
        let x = b.tensor("x", Dtype::F32, ds(&["N"]));
        let y = b.op(Op::Call("rec".into(), vec![x]));
        b.ret_any(y)
    };
    let e = Interpreter::checked().run(
        &rec,
        &[Tensor::zeros(Dtype::F32, &[1]).into()],
        &|_: &str| Some(&rec),
    );
    assert!(
        matches!(&e, Err(Error::CallDepth { callee, max: 64 }) if callee == "rec"),
        "{e:?}"
    );
}

#[test]
fn every_step_is_op_apply_and_preserves_the_heap_invariant() {
    let mut b = FnBuilder::new("mlp");
    let x = b.tensor("x", Dtype::F32, ds(&["B", "D"]));
    let w = b.tensor_refs("w", Dtype::F32, ds(&["D", "H"]), vec![Pred::ge("H", 2)]);
    let h = b.annot(
        Op::Matmul(x, w),
        Type::Tensor(TensorType::new(Dtype::F32, ds(&["B", "H"])).with_refs([Pred::ge("H", 1)])),
    );
    let a = b.op(Op::Unary(UnaryOp::Gelu, h));
    let s = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![1],
        keepdims: false,
        x: a,
    });
    let f = b.ret(s, tt(Dtype::F32, ds(&["B"])));
    let args: Vec<Arg> = vec![
        sample_tensor(Dtype::F32, &[2, 3]).into(),
        sample_tensor(Dtype::F32, &[3, 4]).into(),
    ];
    let resolve = no_calls;
    let mut m = Interpreter::checked().machine(&f, &args, &resolve).unwrap();
    assert_eq!(m.heap().len(), 2);
    m.check().unwrap();
    let mut n = 2;
    while !m.is_value() {
        assert!(m.step().unwrap());
        n += 1;
        assert_eq!(m.heap().len(), n, "one fresh handle per step");
        m.check().unwrap();
        assert!(matches!(m.values().values().last(), Some(Val::Tensor(h)) if h.index() == n - 1));
    }
    assert!(!m.step().unwrap());
    let out = m.finish().unwrap();
    assert_eq!(out.value.shape(), &[2]);
    assert_eq!(out.sigma.get("H"), Some(&4));
    out.heap.check().unwrap();
}

#[test]
fn declared_types_are_checked_by_the_heap_invariant() {
    // An annotation that disagrees with the computed shape violates agreement.
    let mut b = FnBuilder::new("bad");
    let x = b.tensor("x", Dtype::F32, ds(&["N"]));
    let r = b.annot(Op::Unary(UnaryOp::Neg, x), tt(Dtype::F32, vec![d("N") + 1]));
    let f = b.ret_any(r);
    let e = run(&f, vec![Tensor::zeros(Dtype::F32, &[2]).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::HeapInvariant { rule, handle: 1, .. } if rule == "agreement"),
        "{e:?}"
    );
    // Without the check the annotation is not looked at.
    let ok = Interpreter { check_heap: false }.run(
        &f,
        &[Tensor::zeros(Dtype::F32, &[2]).into()],
        &no_calls,
    );
    assert!(ok.is_ok());
    // The declared return type is always checked.
    let mut b = FnBuilder::new("ret");
    let x = b.tensor("x", Dtype::F32, ds(&["N"]));
    let r = b.op(Op::Reshape(vec![Dim::c(1), d("N")], x));
    let f = b.ret(r, tt(Dtype::F32, ds(&["N"])));
    let e = run(&f, vec![Tensor::zeros(Dtype::F32, &[2]).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::Rule(RuleError::Op { op, .. }) if op == "return of `ret`"),
        "{e:?}"
    );
    // Returning a parameter is fine, and a scalar parameter returns as rank 0.
    let mut b = FnBuilder::new("id");
    let s = b.scalar("s", Dtype::BF16);
    let f = b.ret(s, Type::Scalar(Dtype::BF16));
    let r = run(&f, vec![0.1f32.into()]).unwrap();
    assert_eq!((r.dtype(), r.shape()), (Dtype::BF16, &[] as &[usize]));
    assert_f(&r, &[round(Dtype::BF16, 0.1)]);
}

#[test]
fn malformed_ir_is_an_error_not_a_panic() {
    let mut b = FnBuilder::new("m");
    let x = b.tensor("x", Dtype::F32, ds(&["N"]));
    let r = b.op(Op::Binary(BinaryOp::Add, x, Value::from_u32(7)));
    let f = b.ret_any(r);
    assert!(matches!(
        run(&f, vec![Tensor::zeros(Dtype::F32, &[1]).into()]),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
    // A scalar used where a tensor is needed.
    let mut b = FnBuilder::new("m2");
    let s = b.scalar("s", Dtype::F32);
    let r = b.op(Op::Unary(UnaryOp::Neg, s));
    let f = b.ret_any(r);
    assert!(matches!(
        run(&f, vec![1.0f32.into()]),
        Err(Error::Rule(RuleError::Malformed(_)))
    ));
}
