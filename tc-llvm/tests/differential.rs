//! Differential tests: every op × admissible dtype, JIT vs the reference
//! interpreter. Bit-identical where Section 2 fixes the bits (integers,
//! bools, casts, elementwise ops on every float dtype in exact mode, and on
//! narrow floats always); float reductions and matmul within the documented
//! bound (see the crate docs), and bit-identical in deterministic mode.
use crate::util;

use tc_core::concrete::RuleError;
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, RopeLayout, Scalar, UnaryOp};
use tc_core::{Dim, Dtype, Type};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

#[test]
fn unary_every_dtype() {
    let mut rng = Rng(11);
    for op in UnaryOp::ALL {
        for dt in Dtype::ALL {
            if !op.admits(dt) {
                continue;
            }
            let f = unary_fn(op, dt);
            let args: Vec<Arg> = vec![random(&mut rng, dt, &[3, 37], true).into()];
            let want = interp(&f, &args).unwrap();
            let got = jit(&f, &args, EXACT);
            assert_bits(
                &format!("{} at {dt} (exact)", op.name()),
                &got,
                &want,
                false,
            );
            if dt == Dtype::F32 {
                let fast = jit(&f, &args, JitOptions::default());
                let (r, a) = tc_llvm::TOLERANCE;
                assert_close(&format!("{} at f32 (fast)", op.name()), &fast, &want, r, a);
            } else if dt.is_float() {
                // Narrow floats are exact whatever the mode.
                let fast = jit(&f, &args, JitOptions::default());
                assert_bits(
                    &format!("{} at {dt} (fast)", op.name()),
                    &fast,
                    &want,
                    false,
                );
            }
        }
    }
}

#[test]
fn fast_transcendentals_dense_f32() {
    // A dense sweep (including tails) of the polynomial paths.
    let mut xs: Vec<f32> = (0..20000).map(|i| (i as f32 - 10000.0) * 0.01).collect();
    xs.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        1e-5,
        88.0,
        -87.0,
        -100.0,
        100.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        3e-39,
    ]);
    let n = xs.len();
    let t = tc_runtime::Tensor::from_vec(&[1, n], xs).unwrap();
    for op in FAST_MATH_OPS {
        let f = unary_fn(op, Dtype::F32);
        let args: Vec<Arg> = vec![t.clone().into()];
        let want = interp(&f, &args).unwrap();
        let fast = jit(&f, &args, JitOptions::default());
        let (r, a) = tc_llvm::TOLERANCE;
        assert_close(&format!("{} fast sweep", op.name()), &fast, &want, r, a);
    }
}

fn binary_fn(op: BinaryOp, dt: Dtype) -> Function {
    let mut b = builder("b");
    let x = b.param("x", tt(dt, &["A", "B"]));
    let y = b.param("y", tt(dt, &["A", "B"]));
    b.returns(tt(op.result_dtype(dt), &["A", "B"]));
    let r = b.op(Op::Binary(op, x, y));
    b.finish(r)
}

#[test]
fn binary_every_dtype() {
    let mut rng = Rng(12);
    for op in BinaryOp::ALL {
        for dt in Dtype::ALL {
            if !op.admits(dt) {
                continue;
            }
            let f = binary_fn(op, dt);
            let args: Vec<Arg> = vec![
                random(&mut rng, dt, &[4, 33], true).into(),
                random(&mut rng, dt, &[4, 33], true).into(),
            ];
            let want = interp(&f, &args).unwrap();
            let got = jit(&f, &args, EXACT);
            assert_bits(&format!("{} at {dt}", op.name()), &got, &want, false);
        }
    }
}

#[test]
fn scalar_binary_literal_and_param() {
    let mut rng = Rng(13);
    for op in [
        BinaryOp::Add,
        BinaryOp::Mul,
        BinaryOp::Sub,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Lt,
        BinaryOp::Rem,
        BinaryOp::And,
    ] {
        for dt in Dtype::ALL {
            if !op.admits(dt) {
                continue;
            }
            for left in [false, true] {
                let lit = if dt.is_float() {
                    Scalar::Float(1.5)
                } else if dt.is_int() {
                    Scalar::Int(3)
                } else {
                    Scalar::Bool(true)
                };
                // literal
                let mut b = builder("s");
                let x = b.param("x", tt(dt, &["N"]));
                b.returns(tt(op.result_dtype(dt), &["N"]));
                let r = b.op(Op::ScalarBinary {
                    op,
                    x,
                    s: lit,
                    scalar_left: left,
                });
                let f = b.finish(r);
                let args: Vec<Arg> = vec![random(&mut rng, dt, &[41], true).into()];
                assert_bits(
                    &format!("{}.scalar lit at {dt}", op.name()),
                    &jit(&f, &args, EXACT),
                    &interp(&f, &args).unwrap(),
                    false,
                );
                // parameter
                let mut b = builder("sp");
                let x = b.param("x", tt(dt, &["N"]));
                let s = b.param("s", tc_core::Type::Scalar(dt));
                b.returns(tt(op.result_dtype(dt), &["N"]));
                let r = b.op(Op::ScalarBinary {
                    op,
                    x,
                    s: b.scalar_param(s),
                    scalar_left: left,
                });
                let f = b.finish(r);
                let sv: Arg = if dt.is_float() {
                    (-2.25f32).into()
                } else if dt.is_int() {
                    (-3i64).into()
                } else {
                    false.into()
                };
                let args: Vec<Arg> = vec![random(&mut rng, dt, &[41], true).into(), sv];
                assert_bits(
                    &format!("{}.scalar param at {dt}", op.name()),
                    &jit(&f, &args, EXACT),
                    &interp(&f, &args).unwrap(),
                    false,
                );
            }
        }
    }
}

#[test]
fn casts_every_pair() {
    let mut rng = Rng(14);
    for from in Dtype::ALL {
        let src = random(&mut rng, from, &[5, 51], true);
        for to in Dtype::ALL {
            let mut b = builder("c");
            let x = b.param("x", tt(from, &["A", "B"]));
            b.returns(tt(to, &["A", "B"]));
            let r = b.op(Op::Cast(to, x));
            let f = b.finish(r);
            let args: Vec<Arg> = vec![src.clone().into()];
            assert_bits(
                &format!("cast {from} → {to}"),
                &jit(&f, &args, EXACT),
                &interp(&f, &args).unwrap(),
                false,
            );
        }
    }
}

#[test]
fn casts_exhaustive_16bit_patterns() {
    // Every F16 and BF16 bit pattern through decode, then to each narrower float.
    for from in [Dtype::F16, Dtype::BF16] {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        let src = tc_runtime::Tensor::from_raw(from, &[65536], bytes).unwrap();
        for to in [
            Dtype::F32,
            Dtype::F16,
            Dtype::BF16,
            Dtype::F8E4M3,
            Dtype::F8E5M2,
            Dtype::I32,
            Dtype::I16,
            Dtype::I8,
            Dtype::I4,
        ] {
            let mut b = builder("c");
            let x = b.param("x", tt(from, &["N"]));
            b.returns(tt(to, &["N"]));
            let r = b.op(Op::Cast(to, x));
            let f = b.finish(r);
            let args: Vec<Arg> = vec![src.clone().into()];
            // Every mode and the shape-generic kernels: the decode is
            // integer code that the vectorizer must keep exact in each.
            assert_every_mode(
                &format!("cast {from} → {to} (all patterns)"),
                &f,
                &args,
                &generic_jit(),
            );
        }
    }
    // f32 values around every rounding boundary of the narrow formats.
    let mut rng = Rng(99);
    let xs: Vec<f32> = (0..200000)
        .map(|_| f32::from_bits(rng.next() as u32))
        .collect();
    let src = tc_runtime::Tensor::from_vec(&[xs.len()], xs).unwrap();
    for to in [
        Dtype::F16,
        Dtype::BF16,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
        Dtype::I64,
        Dtype::I8,
        Dtype::Bool,
    ] {
        let mut b = builder("c");
        let x = b.param("x", tt(Dtype::F32, &["N"]));
        b.returns(tt(to, &["N"]));
        let r = b.op(Op::Cast(to, x));
        let f = b.finish(r);
        let args: Vec<Arg> = vec![src.clone().into()];
        assert_bits(
            &format!("cast f32 → {to} (random bits)"),
            &jit(&f, &args, EXACT),
            &interp(&f, &args).unwrap(),
            false,
        );
    }
}

#[test]
fn select_fill_iota() {
    let mut rng = Rng(15);
    for dt in Dtype::ALL {
        let mut b = builder("sel");
        let c = b.param("c", tt(Dtype::Bool, &["A", "B"]));
        let x = b.param("x", tt(dt, &["A", "B"]));
        let y = b.param("y", tt(dt, &["A", "B"]));
        b.returns(tt(dt, &["A", "B"]));
        let r = b.op(Op::Select(c, x, y));
        let f = b.finish(r);
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::Bool, &[3, 7], false).into(),
            random(&mut rng, dt, &[3, 7], true).into(),
            random(&mut rng, dt, &[3, 7], true).into(),
        ];
        assert_bits(
            &format!("select {dt}"),
            &jit(&f, &args, EXACT),
            &interp(&f, &args).unwrap(),
            false,
        );

        let lit = if dt.is_float() {
            Scalar::Float(-0.7)
        } else if dt.is_int() {
            Scalar::Int(-5)
        } else {
            Scalar::Bool(true)
        };
        let mut b = builder("fi");
        let x = b.param("x", tt(dt, &["A", "B"]));
        b.returns(tt(dt, &["A", "B"]));
        let fl = b.op(Op::Fill(dt, vec![Dim::var("A"), Dim::var("B")], lit));
        let io = b.op(Op::Iota(dt, vec![Dim::var("A"), Dim::var("B")], 1));
        let c = b.op(Op::Binary(BinaryOp::Eq, x, fl));
        let s = b.op(Op::Select(c, fl, io));
        let f = b.finish(s);
        let args: Vec<Arg> = vec![random(&mut rng, dt, &[3, 19], true).into()];
        assert_bits(
            &format!("fill/iota {dt}"),
            &jit(&f, &args, EXACT),
            &interp(&f, &args).unwrap(),
            false,
        );
    }
}

#[test]
fn layout_ops_every_dtype() {
    let mut rng = Rng(16);
    for dt in Dtype::ALL {
        // transpose + broadcast + slice + reshape + concat, fused with an elementwise op.
        let mut b = builder("lay");
        let x = b.param("x", tt(dt, &["A", "B", "C"]));
        let y = b.param("y", tt(dt, &["C"]));
        b.returns(tt(dt, &["C", "B", "A"]));
        let t = b.op(Op::Transpose(vec![2, 1, 0], x));
        let r = b.op(Op::Reshape(
            vec![Dim::var("C"), Dim::var("B") * Dim::var("A")],
            t,
        ));
        let r2 = b.op(Op::Reshape(
            vec![Dim::var("C"), Dim::var("B"), Dim::var("A")],
            r,
        ));
        let yb = b.op(Op::Reshape(vec![Dim::var("C"), Dim::c(1), Dim::c(1)], y));
        let bb = b.op(Op::Broadcast(
            vec![Dim::var("C"), Dim::var("B"), Dim::var("A")],
            yb,
        ));
        let z = b.op(Op::Cast(Dtype::Bool, bb));
        let s = b.op(Op::Select(z, r2, bb));
        let f = b.finish(s);
        let args: Vec<Arg> = vec![
            random(&mut rng, dt, &[3, 4, 5], true).into(),
            random(&mut rng, dt, &[5], true).into(),
        ];
        assert_bits(
            &format!("layout chain {dt}"),
            &jit(&f, &args, EXACT),
            &interp(&f, &args).unwrap(),
            false,
        );

        let mut b = builder("slc");
        let x = b.param("x", tt(dt, &["A", "B"]));
        let y = b.param("y", tt(dt, &["A", "C"]));
        b.returns(tt(dt, &["A", "D"]));
        let sl = b.op(Op::Slice {
            axis: 1,
            start: Dim::c(1),
            stop: Dim::var("B") - Dim::c(1),
            step: 1,
            x,
        });
        let cc = b.op(Op::Concat(1, vec![y, sl, x]));
        let f = b.finish(cc);
        let args: Vec<Arg> = vec![
            random(&mut rng, dt, &[3, 7], true).into(),
            random(&mut rng, dt, &[3, 2], true).into(),
        ];
        // D is not in the signature's inputs: the return check skips unbound dims.
        let want = interp(&f, &args).unwrap();
        assert_bits(
            &format!("slice+concat {dt}"),
            &jit(&f, &args, EXACT),
            &want,
            false,
        );
    }
}

fn reduce_fn(
    op: ReduceOp,
    dt: Dtype,
    axes: Vec<usize>,
    keep: bool,
    shape: &[&str],
    out: &[&str],
) -> Function {
    let mut b = builder("r");
    let x = b.param("x", tt(dt, shape));
    b.returns(tt(dt, out));
    let r = b.op(Op::Reduce {
        op,
        axes,
        keepdims: keep,
        x,
    });
    b.finish(r)
}

#[test]
fn reductions_every_dtype() {
    let mut rng = Rng(17);
    let cases: Vec<(Vec<usize>, bool, Vec<&str>)> = vec![
        (vec![1], false, vec!["A"]),
        (vec![0], true, vec!["1", "B"]),
        (vec![1, 0], false, vec![]),
    ];
    for op in ReduceOp::ALL {
        for dt in Dtype::ALL {
            if !op.admits(dt) {
                continue;
            }
            for (axes, keep, out) in &cases {
                let f = reduce_fn(op, dt, axes.clone(), *keep, &["A", "B"], out);
                let specials = !matches!(op, ReduceOp::Prod);
                let args: Vec<Arg> = vec![random(&mut rng, dt, &[6, 45], specials).into()];
                let want = interp(&f, &args).unwrap();
                let what = format!("reduce.{} {axes:?} keep={keep} at {dt}", op.name());
                if dt.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Mean) {
                    // Reassociated: |Σ| ≤ 45·4 ·… relative bound (crate docs); narrow: + 1 ulp of the dtype.
                    let got = jit(&f, &args, EXACT);
                    let ulp = match dt {
                        Dtype::F32 => 1e-5,
                        Dtype::F16 => 2e-3,
                        Dtype::BF16 => 1.6e-2,
                        _ => 0.26,
                    };
                    assert_close(&what, &got, &want, ulp, 1e-3);
                    assert_bits(
                        &format!("{what} deterministic"),
                        &jit(&f, &args, DET),
                        &want,
                        false,
                    );
                } else if dt.is_float() {
                    // max/min: the value is exact; a ±0 tie may pick either sign
                    // outside deterministic mode (crate docs).
                    assert_close(&what, &jit(&f, &args, EXACT), &want, 0.0, 0.0);
                    assert_bits(
                        &format!("{what} deterministic"),
                        &jit(&f, &args, DET),
                        &want,
                        true,
                    );
                } else {
                    assert_bits(&what, &jit(&f, &args, EXACT), &want, true);
                }
            }
        }
    }
}

#[test]
fn argmax_argmin_every_dtype() {
    let mut rng = Rng(18);
    for dt in Dtype::ALL {
        for max in [true, false] {
            for (axis, keep) in [(1usize, false), (0, true)] {
                let mut b = builder("am");
                let x = b.param("x", tt(dt, &["A", "B"]));
                let out: Vec<&str> = if axis == 1 { vec!["A"] } else { vec!["1", "B"] };
                b.returns(tt(Dtype::I64, &out));
                let r = b.op(Op::ArgReduce {
                    max,
                    axis,
                    keepdims: keep,
                    x,
                });
                let f = b.finish(r);
                let args: Vec<Arg> = vec![random(&mut rng, dt, &[5, 29], true).into()];
                assert_bits(
                    &format!("arg{} {dt}", if max { "max" } else { "min" }),
                    &jit(&f, &args, EXACT),
                    &interp(&f, &args).unwrap(),
                    false,
                );
            }
        }
    }
}

#[test]
fn matmul_every_numeric_dtype() {
    let mut rng = Rng(19);
    for dt in Dtype::ALL {
        if !dt.is_numeric() {
            continue;
        }
        for (m, k, n) in [
            (1usize, 1usize, 1usize),
            (7, 13, 5),
            (33, 70, 65),
            (2, 300, 40),
        ] {
            let mut b = builder("mm");
            let x = b.param("x", tt(dt, &["P", "M", "K"]));
            let y = b.param("y", tt(dt, &["P", "K", "N"]));
            b.returns(tt(dt, &["P", "M", "N"]));
            let r = b.op(Op::Matmul(x, y));
            let f = b.finish(r);
            let args: Vec<Arg> = vec![
                random(&mut rng, dt, &[2, m, k], false).into(),
                random(&mut rng, dt, &[2, k, n], false).into(),
            ];
            let want = interp(&f, &args).unwrap();
            let got = jit(&f, &args, JitOptions::default());
            let what = format!("matmul {m}x{k}x{n} at {dt}");
            if dt.is_float() {
                // |a|,|b| ≤ 4: Σ|ab| ≤ 16k; bound 2(k+2)2⁻²⁴·16k, plus one ulp of the narrow dtype.
                let atol = 2.0 * (k as f32 + 2.0) * 16.0 * k as f32 / 16777216.0;
                let rtol = match dt {
                    Dtype::F32 => 0.0,
                    Dtype::F16 => 1e-3,
                    Dtype::BF16 => 8e-3,
                    _ => 0.13,
                };
                assert_close(&what, &got, &want, rtol, atol);
            } else {
                assert_bits(&what, &got, &want, false);
            }
        }
    }
}

fn gather_fn(dt: Dtype, axis: usize) -> Function {
    let mut b = builder("gather");
    let t = b.param("t", tt(dt, &["A", "B", "C"]));
    let ids = b.param("ids", tt(Dtype::I64, &["M", "N"]));
    // Empty ids are legal once M opts into 0 (Section 2 §16).
    b.requires(tc_core::Pred::ge(Dim::var("M"), Dim::c(0)));
    let mut out: Vec<&str> = vec!["A", "B", "C"];
    out.splice(axis..=axis, ["M", "N"]);
    b.returns(tt(dt, &out));
    let g = b.op(Op::Gather {
        axis,
        table: t,
        ids,
    });
    b.finish(g)
}

fn ids(shape: &[usize], v: &[i64]) -> Arg {
    tc_runtime::Tensor::from_slice(shape, v).unwrap().into()
}

#[test]
fn gather_every_dtype_and_axis() {
    let mut rng = Rng(21);
    for dt in Dtype::ALL {
        for axis in 0..3 {
            let f = gather_fn(dt, axis);
            let table = random(&mut rng, dt, &[3, 4, 5], true);
            let bound = table.shape()[axis] as i64;
            let v: Vec<i64> = (0..6).map(|i| (i * 7 + 2) % bound).collect();
            let args: Vec<Arg> = vec![table.clone().into(), ids(&[2, 3], &v)];
            let want = interp(&f, &args).unwrap();
            for opts in [EXACT, DET] {
                assert_bits(
                    &format!("gather {dt} axis {axis}"),
                    &jit(&f, &args, opts),
                    &want,
                    false,
                );
            }
            // Empty ids: an empty result, whatever the ids' other dim.
            let args: Vec<Arg> = vec![table.into(), ids(&[0, 3], &[])];
            let want = interp(&f, &args).unwrap();
            assert_eq!(want.shape().iter().product::<usize>(), 0);
            assert_bits(
                &format!("gather {dt} empty"),
                &jit(&f, &args, EXACT),
                &want,
                false,
            );
        }
    }
}

#[test]
fn gather_out_of_range_ids_are_the_same_typed_error_in_both_backends() {
    let f = gather_fn(Dtype::F32, 1);
    let mut rng = Rng(22);
    let table = random(&mut rng, Dtype::F32, &[2, 4, 3], false);
    for (bad, pos) in [(4i64, vec![0, 2]), (-1, vec![1, 0]), (i64::MIN, vec![0, 2])] {
        let mut v = vec![0i64, 3, 1, 2, 2, 1];
        v[pos[0] * 3 + pos[1]] = bad;
        if bad == i64::MIN {
            v[5] = 9;
        }
        let args: Vec<Arg> = vec![table.clone().into(), ids(&[2, 3], &v)];
        let want = tc_runtime::Error::Rule(RuleError::IndexOutOfRange {
            op: "gather".into(),
            axis: 1,
            position: pos.clone(),
            index: bad,
            bound: 4,
        });
        assert_eq!(
            interp(&f, &args).unwrap_err(),
            want,
            "interpreter, id {bad}"
        );
        let j = jit_with(EXACT);
        assert_eq!(
            j.call(&f, &args, &|_| None).unwrap_err(),
            want,
            "JIT, id {bad}"
        );
        assert_eq!(j.stats().fallbacks, 0, "the JIT reported it itself");
    }
}

#[test]
fn gather_of_a_computed_table_and_computed_ids_fuses_around_the_step() {
    // An embedding lookup as a model writes it: ids computed (argmax), the
    // table computed (scaled), the result consumed by an elementwise op.
    let mut b = builder("emb");
    let w = b.param("w", tt(Dtype::F32, &["V", "D"]));
    let x = b.param("x", tt(Dtype::F32, &["B", "V"]));
    b.returns(tt(Dtype::F32, &["B", "D"]));
    let t = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: w,
        s: Scalar::Float(2.0),
        scalar_left: false,
    });
    let i = b.op(Op::ArgReduce {
        max: true,
        axis: 1,
        keepdims: false,
        x,
    });
    let g = b.op(Op::Gather {
        axis: 0,
        table: t,
        ids: i,
    });
    let r = b.op(Op::Unary(UnaryOp::Relu, g));
    let f = b.finish(r);
    let mut rng = Rng(23);
    let args: Vec<Arg> = vec![
        random(&mut rng, Dtype::F32, &[7, 5], false).into(),
        random(&mut rng, Dtype::F32, &[4, 7], false).into(),
    ];
    let want = interp(&f, &args).unwrap();
    for opts in [EXACT, DET] {
        assert_bits("computed gather", &jit(&f, &args, opts), &want, false);
    }
}

fn strided_fn(dt: Dtype, start: i64, stop: Dim, step: usize) -> Function {
    let mut b = builder("strided");
    let x = b.param("x", tt(dt, &["A", "B"]));
    let len = stop.clone() - Dim::c(start);
    let out = if step == 1 {
        len
    } else {
        (len + Dim::c(step as i64 - 1)).div(&Dim::c(step as i64))
    };
    b.returns(Type::tensor(dt, vec![Dim::var("A"), out]));
    let s = b.op(Op::Slice {
        axis: 1,
        start: Dim::c(start),
        stop,
        step,
        x,
    });
    b.finish(s)
}

#[test]
fn strided_slices_every_dtype_specialised_and_generic() {
    let mut rng = Rng(24);
    let generic = tc_llvm::Jit::new(tc_llvm::CacheConfig {
        capacity: 64,
        specialize_after: 100,
        options: EXACT,
    });
    for dt in Dtype::ALL {
        for (start, stop, step) in [
            (1, Dim::c(10), 3),
            (0, Dim::var("B"), 4),
            (2, Dim::c(3), 5),
            (0, Dim::var("B"), 1),
            (3, Dim::var("B") - Dim::c(1), 2),
        ] {
            let f = strided_fn(dt, start, stop.clone(), step);
            let x = random(&mut rng, dt, &[3, 10], true);
            let args: Vec<Arg> = vec![x.into()];
            let want = interp(&f, &args).unwrap();
            let what = format!("slice {start}..{stop} step {step} at {dt}");
            assert_bits(&what, &jit(&f, &args, EXACT), &want, false);
            assert_bits(&what, &jit(&f, &args, DET), &want, false);
            let g = generic.call(&f, &args, &|_| None).unwrap();
            assert_bits(&format!("{what} (generic)"), &g, &want, false);
        }
    }
    assert!(generic.stats().generic_runs > 0, "{:?}", generic.stats());
}

fn topk_fn(dt: Dtype, k: Dim, axis: usize, indices: bool) -> Function {
    let mut b = builder("topk");
    let x = b.param("x", tt(dt, &["A", "B"]));
    b.requires(tc_core::Pred::ge(Dim::var("B"), Dim::c(3)));
    let mut out = vec![Dim::var("A"), Dim::var("B")];
    out[axis] = k.clone();
    b.returns(Type::tensor(if indices { Dtype::I64 } else { dt }, out));
    let t = b.op(Op::TopK {
        k,
        axis,
        indices,
        x,
    });
    b.finish(t)
}

#[test]
fn topk_values_and_indices_every_numeric_dtype() {
    let mut rng = Rng(25);
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_numeric()) {
        for (k, axis) in [
            (Dim::c(3), 1),
            (Dim::var("B"), 1),
            (Dim::c(1), 0),
            (Dim::var("A"), 0),
        ] {
            for indices in [false, true] {
                let f = topk_fn(dt, k.clone(), axis, indices);
                // Ties and specials (NaN, ±0, ±inf) included.
                let x = random(&mut rng, dt, &[4, 9], true);
                let args: Vec<Arg> = vec![x.into()];
                let want = interp(&f, &args).unwrap();
                let what = format!("topk k={k} axis={axis} indices={indices} at {dt}");
                assert_bits(&what, &jit(&f, &args, EXACT), &want, false);
                assert_bits(&what, &jit(&f, &args, DET), &want, false);
            }
        }
    }
}

#[test]
fn topk_orders_like_argmax() {
    // NaN first, then descending, ties by the lower index, −0 = +0.
    let f = topk_fn(Dtype::F32, Dim::var("B"), 1, true);
    let x = tc_runtime::Tensor::from_vec(
        &[1, 7],
        vec![1.0f32, f32::NAN, -0.0, 3.0, 0.0, 3.0, f32::NEG_INFINITY],
    )
    .unwrap();
    let args: Vec<Arg> = vec![x.into()];
    let got = jit(&f, &args, EXACT).to_vec::<i64>().unwrap();
    assert_eq!(got, vec![1, 3, 5, 0, 2, 4, 6]);
    assert_eq!(interp(&f, &args).unwrap().to_vec::<i64>().unwrap(), got);
}

#[test]
fn cumsum_every_numeric_dtype() {
    let mut rng = Rng(26);
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_numeric()) {
        for axis in [0, 1] {
            let mut b = builder("cumsum");
            let x = b.param("x", tt(dt, &["A", "B"]));
            b.returns(tt(dt, &["A", "B"]));
            let c = b.op(Op::CumSum { axis, x });
            // A fused consumer reads the host step's result.
            let r = b.op(Op::Binary(BinaryOp::Add, c, x));
            let f = b.finish(r);
            let args: Vec<Arg> = vec![random(&mut rng, dt, &[5, 7], true).into()];
            let want = interp(&f, &args).unwrap();
            for opts in [EXACT, DET] {
                assert_bits(
                    &format!("cumsum axis {axis} at {dt}"),
                    &jit(&f, &args, opts),
                    &want,
                    false,
                );
            }
        }
    }
}

/// Cumsum is a scan kernel: its producer fused into the lane loop, every
/// axis of a rank-3 value (the middle one strided), lanes split across
/// threads on a large input, empty axes, σ-specialised and shape-generic,
/// all bit for bit with the interpreter.
#[test]
fn cumsum_is_a_fused_scan_kernel_in_every_mode() {
    let mut rng = Rng(28);
    for dt in [Dtype::F32, Dtype::F16, Dtype::I8, Dtype::I64] {
        for axis in 0..3 {
            let mut b = builder("scan");
            let x = b.param("x", tt(dt, &["A", "B", "C"]));
            b.requires(tc_core::Pred::ge(Dim::var("B"), Dim::c(0)));
            b.returns(tt(dt, &["A", "B", "C"]));
            let y = b.op(Op::Binary(BinaryOp::Add, x, x));
            let c = b.op(Op::CumSum { axis, x: y });
            let f = b.finish(c);
            let sigma: tc_core::Sigma = [("A", 3), ("B", 5), ("C", 4)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let compiled = tc_llvm::exec::compile(&f, &sigma, EXACT).unwrap();
            assert!(
                compiled
                    .steps()
                    .iter()
                    .all(|s| matches!(s, tc_llvm::plan::Step::Kernel { .. })),
                "one fused kernel: {:?}",
                compiled.steps()
            );
            let generic = tc_llvm::Jit::new(tc_llvm::CacheConfig {
                capacity: 8,
                specialize_after: 100,
                options: EXACT,
            });
            for shape in [[3, 5, 4], [2, 0, 3], [64, 64, 65]] {
                let args: Vec<Arg> = vec![random(&mut rng, dt, &shape, true).into()];
                let what = format!("cumsum axis {axis} of {shape:?} at {dt}");
                assert_every_mode(&what, &f, &args, &generic);
            }
        }
    }
}

#[test]
fn cumsum_is_the_prefix_sum_in_order() {
    let mut b = builder("cumsum");
    let x = b.param("x", tt(Dtype::I8, &["N"]));
    b.returns(tt(Dtype::I8, &["N"]));
    let c = b.op(Op::CumSum { axis: 0, x });
    let f = b.finish(c);
    // i8 wraps: 100 + 100 = -56.
    let x = tc_runtime::Tensor::from_vec(&[4], vec![100i8, 100, -1, 1]).unwrap();
    let args: Vec<Arg> = vec![x.into()];
    let got = jit(&f, &args, EXACT).to_vec::<i8>().unwrap();
    assert_eq!(got, vec![100, -56, -57, -56]);
    assert_eq!(interp(&f, &args).unwrap().to_vec::<i8>().unwrap(), got);
}

fn pad_fn(dt: Dtype, axis: usize, before: Dim, after: Dim, value: Scalar) -> Function {
    let mut b = builder("pad");
    let x = b.param("x", tt(dt, &["A", "B"]));
    // P (bound by w) makes a width symbolic, so generic kernels read it at run time.
    let _w = b.param("w", tt(dt, &["P"]));
    b.requires(tc_core::Pred::ge(Dim::var("A"), Dim::c(0)));
    let mut out = vec![Dim::var("A"), Dim::var("B")];
    out[axis] = before.clone() + out[axis].clone() + after.clone();
    b.returns(Type::tensor(dt, out));
    let p = b.op(Op::Pad {
        axis,
        before,
        after,
        value,
        x,
    });
    b.finish(p)
}

#[test]
fn pad_every_dtype_specialised_and_generic() {
    let mut rng = Rng(27);
    let generic = tc_llvm::Jit::new(tc_llvm::CacheConfig {
        capacity: 64,
        specialize_after: 100,
        options: EXACT,
    });
    for dt in Dtype::ALL {
        let value = if dt.is_float() {
            Scalar::Float(-2.5)
        } else if dt.is_int() {
            Scalar::Int(-3)
        } else {
            Scalar::Bool(true)
        };
        for (axis, before, after) in [
            (1, Dim::c(2), Dim::c(1)),
            (0, Dim::var("P"), Dim::c(0)),
            (1, Dim::c(0), Dim::var("P")),
        ] {
            let f = pad_fn(dt, axis, before.clone(), after.clone(), value.clone());
            // A = 0 too: padding an empty axis reads nothing.
            for a in [3, 0] {
                let args: Vec<Arg> = vec![
                    random(&mut rng, dt, &[a, 4], true).into(),
                    random(&mut rng, dt, &[2], true).into(),
                ];
                let want = interp(&f, &args).unwrap();
                let what = format!("pad axis {axis} ({before}, {after}) of [{a}, 4] at {dt}");
                assert_bits(&what, &jit(&f, &args, EXACT), &want, false);
                assert_bits(&what, &jit(&f, &args, DET), &want, false);
                let g = generic.call(&f, &args, &|_| None).unwrap();
                assert_bits(&format!("{what} (generic)"), &g, &want, false);
            }
        }
    }
}

/// `reshape` merging trailing axes of a transposed value (attention's head
/// merge, `[B, S, H·D]` from `[B, H, S, D]`), with and without elementwise
/// work under it, and with its operand materialized by another use: the
/// σ-specialised kernel loops over the operand's trailing dims instead of
/// dividing the flat index; float, integer and 4-bit dtypes, small and
/// empty shapes, bit for
/// bit with the interpreter (and with the shape-generic kernel).
#[test]
fn a_reshape_merging_trailing_axes_is_a_nested_copy() {
    let mut rng = Rng(0x5E);
    let generic = generic_jit();
    for dt in [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I8,
        Dtype::I4,
        Dtype::I64,
    ] {
        for (with_op, shared) in [(false, false), (true, false), (false, true)] {
            let mut b = builder("merge_heads");
            let x = b.param("x", tt(dt, &["B", "H", "S", "D"]));
            b.requires(tc_core::Pred::ge(Dim::var("S"), Dim::c(0)));
            let hd = Dim::var("H") * Dim::var("D");
            let out = Type::tensor(dt, vec![Dim::var("B"), Dim::var("S"), hd.clone()]);
            b.returns(out);
            let mut t = b.op(Op::Transpose(vec![0, 2, 1, 3], x));
            if with_op {
                t = b.op(Op::Binary(BinaryOp::Max, t, t));
            }
            let mut r = b.op(Op::Reshape(
                vec![Dim::var("B"), Dim::var("S"), hd.clone()],
                t,
            ));
            if shared {
                // `t` also feeds a second kernel: materialized, loaded.
                let back = b.op(Op::Reshape(vec![Dim::var("B"), Dim::var("S"), hd], t));
                let neg = b.op(Op::Binary(BinaryOp::Max, back, r));
                r = b.op(Op::Binary(BinaryOp::Max, neg, r));
            }
            let f = b.finish(r);
            for shape in [[1, 1, 1, 1], [2, 3, 4, 5], [1, 12, 7, 32], [3, 2, 0, 4]] {
                let args: Vec<Arg> = vec![random(&mut rng, dt, &shape, true).into()];
                let what = format!("merge heads of {shape:?} at {dt} op={with_op} shared={shared}");
                assert_every_mode(&what, &f, &args, &generic);
            }
        }
    }
}

/// `rope[layout]` of `x · y` (a fused producer, computed at both
/// coordinates of each pair) with `[S, H]` tables broadcast over the
/// heads; `composed`: the same rotation written with the core layout ops
/// instead (the form the op replaces, docs/syntax.md §12e).
pub fn rope_fn(dt: Dtype, layout: RopeLayout, composed: bool) -> Function {
    let (s, n, h) = (Dim::var("S"), Dim::var("N"), Dim::var("H"));
    let full = vec![s.clone(), n.clone(), h.clone() + h.clone()];
    let half = vec![s.clone(), n.clone(), h.clone()];
    let mut b = builder("rope");
    let x = b.param("x", Type::tensor(dt, full.clone()));
    let y = b.param("y", Type::tensor(dt, full.clone()));
    let cos = b.param("cos", tt(dt, &["S", "H"]));
    let sin = b.param("sin", tt(dt, &["S", "H"]));
    b.returns(Type::tensor(dt, full.clone()));
    // Empty sequences and heads admitted.
    b.requires(tc_core::Pred::ge(s.clone(), Dim::c(0)));
    b.requires(tc_core::Pred::ge(h.clone(), Dim::c(0)));
    let p = b.op(Op::Binary(BinaryOp::Mul, x, y));
    let mut table = |t| {
        let r = b.op(Op::Reshape(vec![s.clone(), Dim::c(1), h.clone()], t));
        b.op(Op::Broadcast(half.clone(), r))
    };
    let (c, sn) = (table(cos), table(sin));
    if !composed {
        let r = b.op(Op::Rope {
            layout,
            x: p,
            cos: c,
            sin: sn,
        });
        return b.finish(r);
    }
    let bin = |b: &mut tc_core::build::FnBuilder, o, u, v| b.op(Op::Binary(o, u, v));
    let slice = |b: &mut tc_core::build::FnBuilder, start, stop, step, x| {
        b.op(Op::Slice {
            axis: 2,
            start,
            stop,
            step,
            x,
        })
    };
    let (x0, x1) = match layout {
        RopeLayout::Pairs => (
            slice(&mut b, Dim::c(0), full[2].clone(), 2, p),
            slice(&mut b, Dim::c(1), full[2].clone(), 2, p),
        ),
        RopeLayout::Halves => (
            slice(&mut b, Dim::c(0), h.clone(), 1, p),
            slice(&mut b, h.clone(), full[2].clone(), 1, p),
        ),
    };
    let (a, bb) = (
        bin(&mut b, BinaryOp::Mul, x0, c),
        bin(&mut b, BinaryOp::Mul, x1, sn),
    );
    let lo = bin(&mut b, BinaryOp::Sub, a, bb);
    let (a, bb) = (
        bin(&mut b, BinaryOp::Mul, x0, sn),
        bin(&mut b, BinaryOp::Mul, x1, c),
    );
    let hi = bin(&mut b, BinaryOp::Add, a, bb);
    let r = match layout {
        // Interleave: [S, N, H, 2] back to [S, N, 2H].
        RopeLayout::Pairs => {
            let mut quarter = half.clone();
            quarter.push(Dim::c(1));
            let lo = b.op(Op::Reshape(quarter.clone(), lo));
            let hi = b.op(Op::Reshape(quarter, hi));
            let both = b.op(Op::Concat(3, vec![lo, hi]));
            b.op(Op::Reshape(full, both))
        }
        RopeLayout::Halves => b.op(Op::Concat(2, vec![lo, hi])),
    };
    b.finish(r)
}

/// Every float dtype, both layouts, specials (NaN, ±∞, −0, subnormals),
/// empty sequences and heads, a single pair: every JIT mode and the shape-generic
/// kernel bit for bit with the interpreter, and the interpreter's rope bit
/// for bit with the composition of core ops it stands for.
#[test]
fn rope_every_float_dtype_both_layouts() {
    let mut rng = Rng(0x2027);
    let generic = generic_jit();
    for dt in Dtype::ALL.into_iter().filter(|d| d.is_float()) {
        for layout in [RopeLayout::Pairs, RopeLayout::Halves] {
            let f = rope_fn(dt, layout, false);
            let g = rope_fn(dt, layout, true);
            for (s, n, h) in [(3, 2, 4), (1, 3, 1), (0, 2, 4), (2, 1, 16), (2, 2, 0)] {
                let args: Vec<Arg> = vec![
                    random(&mut rng, dt, &[s, n, 2 * h], true).into(),
                    random(&mut rng, dt, &[s, n, 2 * h], true).into(),
                    random(&mut rng, dt, &[s, h], true).into(),
                    random(&mut rng, dt, &[s, h], true).into(),
                ];
                let what = format!("{} of [{s}, {n}, {}] at {dt}", layout.name(), 2 * h);
                assert_every_mode(&what, &f, &args, &generic);
                // The pairs' strided slice `1..2H` needs a pair.
                if h > 0 {
                    let want = interp(&f, &args).unwrap();
                    let composed = interp(&g, &args).unwrap();
                    assert_bits(
                        &format!("{what} ≡ its composition"),
                        &composed,
                        &want,
                        false,
                    );
                }
            }
        }
    }
}
