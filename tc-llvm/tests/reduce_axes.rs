//! Reductions that keep the operand's last axis (over axis 0 of `[R, C]`,
//! a middle axis of `[A, B, C]`, two non-last axes of a rank-4 tensor):
//! the column form (codegen `KernelShape::Cols`), JIT vs the reference
//! interpreter, σ-specialised and shape-generic, every op × dtype, widths
//! that leave vector tails, fused producers, thread splits.
//!
//! The column form folds every output element sequentially in the
//! interpreter's order (Section 4 §5.5), in every mode: float sums,
//! products and means are bit-identical to the interpreter even outside
//! deterministic mode (float max/min outside it may pick either sign of a
//! ±0 tie, as for every reduction).
use crate::util;

use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, UnaryOp};
use tc_core::{Dim, Dtype, Sigma};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;
use util::*;

const EXACT: JitOptions = JitOptions {
    fast_math: false,
    deterministic: false,
    threads: 1,
    fast_quant: false,
};
const DET: JitOptions = JitOptions {
    fast_math: false,
    deterministic: true,
    threads: 1,
    fast_quant: false,
};

fn reduce_fn(
    op: ReduceOp,
    dt: Dtype,
    axes: &[usize],
    keep: bool,
    shape: &[&str],
    out: &[&str],
) -> Function {
    let mut b = builder("r");
    let x = b.param("x", tt(dt, shape));
    b.returns(tt(dt, out));
    let r = b.op(Op::Reduce {
        op,
        axes: axes.to_vec(),
        keepdims: keep,
        x,
    });
    b.finish(r)
}

/// The output dims of reducing `shape` over `axes`.
fn out_dims<'a>(shape: &[&'a str], axes: &[usize], keep: bool) -> Vec<&'a str> {
    (0..shape.len())
        .filter_map(|a| {
            if !axes.contains(&a) {
                Some(shape[a])
            } else if keep {
                Some("1")
            } else {
                None
            }
        })
        .collect()
}

/// Run through the shape-generic kernel (first call of a σ with
/// `specialize_after` = 2), then the σ-specialised one (second call).
fn generic_then_specialised(f: &Function, args: &[Arg], opts: JitOptions) -> (Tensor, Tensor) {
    let j = Jit::new(CacheConfig {
        capacity: 8,
        specialize_after: 2,
        options: opts,
    });
    let g = j.call(f, args, &|_| None).expect("generic run");
    let s = j.call(f, args, &|_| None).expect("specialised run");
    let st = j.stats();
    assert_eq!(st.fallbacks, 0, "fell back: {:?}", j.last_fallback());
    assert_eq!(st.generic_runs, 1, "{st:?}");
    assert_eq!(st.compiles, 1, "{st:?}");
    (g, s)
}

/// JIT (specialised and generic, default and deterministic mode) against
/// the interpreter.
fn check(what: &str, f: &Function, args: &[Arg], op: ReduceOp, dt: Dtype) {
    let want = interp(f, args).unwrap();
    let float_maxmin = dt.is_float() && matches!(op, ReduceOp::Max | ReduceOp::Min);
    let (g, s) = generic_then_specialised(f, args, EXACT);
    let (gd, sd) = generic_then_specialised(f, args, DET);
    for (mode, got) in [
        ("specialised", &s),
        ("generic", &g),
        ("specialised det", &sd),
        ("generic det", &gd),
    ] {
        let what = format!("{what} ({mode})");
        if float_maxmin && !mode.ends_with("det") {
            // The value is exact; a ±0 tie may pick either sign (crate docs).
            assert_close(&what, got, &want, 0.0, 0.0);
        } else {
            assert_bits(&what, got, &want, float_maxmin);
        }
    }
}

fn elems_of(shape: &[usize]) -> usize {
    shape.iter().product()
}

#[test]
fn axis0_every_op_and_dtype_with_vector_tails() {
    let mut rng = Rng(41);
    let main = [
        Dtype::F32,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::I8,
        Dtype::Bool,
    ];
    for op in ReduceOp::ALL {
        for dt in Dtype::ALL {
            if !op.admits(dt) {
                continue;
            }
            let widths: &[usize] = if main.contains(&dt) {
                &[1, 3, 17, 33, 1000]
            } else {
                &[17]
            };
            for (k, &c) in widths.iter().enumerate() {
                let keep = k % 2 == 0;
                let shape = ["R", "C"];
                let f = reduce_fn(op, dt, &[0], keep, &shape, &out_dims(&shape, &[0], keep));
                let specials = op != ReduceOp::Prod;
                let args: Vec<Arg> = vec![random(&mut rng, dt, &[5, c], specials).into()];
                check(
                    &format!(
                        "reduce.{} axis 0 of [5, {c}] keep={keep} at {dt}",
                        op.name()
                    ),
                    &f,
                    &args,
                    op,
                    dt,
                );
            }
        }
    }
}

#[test]
fn middle_axis_and_two_non_last_axes() {
    let mut rng = Rng(42);
    // (shape names, concrete shape, axes)
    let cases: Vec<(Vec<&str>, Vec<usize>, Vec<usize>)> = vec![
        (vec!["A", "B", "C"], vec![4, 7, 3], vec![1]),
        (vec!["A", "B", "C"], vec![3, 9, 33], vec![1]),
        (vec!["A", "B", "C"], vec![2, 5, 1], vec![1]),
        (vec!["A", "B", "C"], vec![3, 4, 17], vec![0, 1]),
        (vec!["A", "B", "C", "D"], vec![3, 5, 4, 17], vec![0, 2]),
        // The axes' order is the fold order (row-major over the axes as given).
        (vec!["A", "B", "C", "D"], vec![3, 5, 4, 17], vec![2, 0]),
        (vec!["A", "B", "C", "D"], vec![2, 3, 6, 33], vec![1, 2]),
    ];
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Mean,
        ReduceOp::Any,
        ReduceOp::All,
    ];
    for op in ops {
        for dt in [Dtype::F32, Dtype::BF16, Dtype::I32, Dtype::I8, Dtype::Bool] {
            if !op.admits(dt) {
                continue;
            }
            for (i, (names, shape, axes)) in cases.iter().enumerate() {
                let keep = i % 2 == 1;
                let f = reduce_fn(op, dt, axes, keep, names, &out_dims(names, axes, keep));
                let specials = op != ReduceOp::Prod;
                let args: Vec<Arg> = vec![random(&mut rng, dt, shape, specials).into()];
                check(
                    &format!(
                        "reduce.{} {axes:?} of {shape:?} keep={keep} at {dt}",
                        op.name()
                    ),
                    &f,
                    &args,
                    op,
                    dt,
                );
            }
        }
    }
}

/// `sum(exp(x) · y, axis 0)`: the producer is computed inside the column
/// loop (one kernel, no intermediate buffer).
fn exp_mul_sum(dt: Dtype, keep: bool) -> Function {
    let mut b = builder("exp_mul_sum");
    let x = b.param("x", tt(dt, &["R", "C"]));
    let y = b.param("y", tt(dt, &["R", "C"]));
    b.returns(tt(dt, &out_dims(&["R", "C"], &[0], keep)));
    let e = b.op(Op::Unary(UnaryOp::Exp, x));
    let p = b.op(Op::Binary(BinaryOp::Mul, e, y));
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0],
        keepdims: keep,
        x: p,
    });
    b.finish(r)
}

fn sigma(pairs: &[(&str, i64)]) -> Sigma {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn fused_exp_mul_producer() {
    let mut rng = Rng(43);
    for dt in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for (k, c) in [3usize, 17, 33, 1000].into_iter().enumerate() {
            let keep = k % 2 == 1;
            let r = 9;
            let f = exp_mul_sum(dt, keep);
            let args: Vec<Arg> = vec![
                random(&mut rng, dt, &[r, c], false).into(),
                random(&mut rng, dt, &[r, c], false).into(),
            ];
            let what = format!("sum(exp(x)·y, 0) [{r}, {c}] at {dt}");
            check(&what, &f, &args, ReduceOp::Sum, dt);
            // One kernel: exp and the product are fused into the reduction.
            let c1 =
                tc_llvm::compile(&f, &sigma(&[("R", r as i64), ("C", c as i64)]), EXACT).unwrap();
            assert_eq!(c1.kernel_count(), 1, "{what}: {:?}", c1.steps());
            assert_eq!(c1.steps().len(), 1, "{what}: {:?}", c1.steps());
            if dt == Dtype::F32 {
                // Fast exp: each term within TOLERANCE of the exact one
                // (|exp(x)·y| ≤ e⁴·4), summed in the same order.
                let want = interp(&f, &args).unwrap();
                let (g, s) = generic_then_specialised(&f, &args, JitOptions::default());
                let (rt, at) = tc_llvm::TOLERANCE;
                let bound = r as f32 * (rt * 4.0 * 4f32.exp() + at) * 2.0;
                assert_close(&format!("{what} fast"), &s, &want, 1e-6, bound);
                assert_close(&format!("{what} fast generic"), &g, &want, 1e-6, bound);
            }
        }
    }
}

#[test]
fn fused_casts_broadcasts_and_transposes() {
    let mut rng = Rng(44);
    // sum(cast[i32](x: i8), axis 0)
    {
        let mut b = builder("cast_sum");
        let x = b.param("x", tt(Dtype::I8, &["R", "C"]));
        b.returns(tt(Dtype::I32, &["C"]));
        let c = b.op(Op::Cast(Dtype::I32, x));
        let r = b.op(Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keepdims: false,
            x: c,
        });
        let f = b.finish(r);
        for c in [1usize, 17, 1000] {
            let args: Vec<Arg> = vec![random(&mut rng, Dtype::I8, &[11, c], false).into()];
            check(
                &format!("sum(cast[i32](i8 [11, {c}]), 0)"),
                &f,
                &args,
                ReduceOp::Sum,
                Dtype::I32,
            );
        }
    }
    // mean(cast[f32](x: f16), axis 1) of [A, B, C]
    {
        let mut b = builder("cast_mean");
        let x = b.param("x", tt(Dtype::F16, &["A", "B", "C"]));
        b.returns(tt(Dtype::F32, &["A", "1", "C"]));
        let c = b.op(Op::Cast(Dtype::F32, x));
        let r = b.op(Op::Reduce {
            op: ReduceOp::Mean,
            axes: vec![1],
            keepdims: true,
            x: c,
        });
        let f = b.finish(r);
        let args: Vec<Arg> = vec![random(&mut rng, Dtype::F16, &[3, 13, 33], true).into()];
        check(
            "mean(cast[f32](f16), 1)",
            &f,
            &args,
            ReduceOp::Mean,
            Dtype::F32,
        );
    }
    // any(cast[bool](x: i32), axis 0), max(cast[bf16](x: f32), axis 0)
    for (to, op) in [(Dtype::Bool, ReduceOp::Any), (Dtype::BF16, ReduceOp::Max)] {
        let from = if to == Dtype::Bool {
            Dtype::I32
        } else {
            Dtype::F32
        };
        let mut b = builder("cast_red");
        let x = b.param("x", tt(from, &["R", "C"]));
        b.returns(tt(to, &["C"]));
        let c = b.op(Op::Cast(to, x));
        let r = b.op(Op::Reduce {
            op,
            axes: vec![0],
            keepdims: false,
            x: c,
        });
        let f = b.finish(r);
        let args: Vec<Arg> = vec![random(&mut rng, from, &[6, 33], true).into()];
        check(
            &format!("{}(cast[{to}]({from}), 0)", op.name()),
            &f,
            &args,
            op,
            to,
        );
    }
    // sum(x · broadcast(y), axis 0) and sum(transpose(x), axis 0)
    {
        let mut b = builder("bcast_sum");
        let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
        let y = b.param("y", tt(Dtype::F32, &["C"]));
        b.returns(tt(Dtype::F32, &["C"]));
        let yb = b.op(Op::Broadcast(vec![Dim::var("R"), Dim::var("C")], y));
        let p = b.op(Op::Binary(BinaryOp::Mul, x, yb));
        let r = b.op(Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keepdims: false,
            x: p,
        });
        let f = b.finish(r);
        for c in [1usize, 33] {
            let args: Vec<Arg> = vec![
                random(&mut rng, Dtype::F32, &[7, c], true).into(),
                random(&mut rng, Dtype::F32, &[c], true).into(),
            ];
            check(
                &format!("sum(x·bcast(y), 0) [7, {c}]"),
                &f,
                &args,
                ReduceOp::Sum,
                Dtype::F32,
            );
        }
        let mut b = builder("tr_sum");
        let x = b.param("x", tt(Dtype::F32, &["C", "R"]));
        b.returns(tt(Dtype::F32, &["C"]));
        let t = b.op(Op::Transpose(vec![1, 0], x));
        let r = b.op(Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keepdims: false,
            x: t,
        });
        let f = b.finish(r);
        let args: Vec<Arg> = vec![random(&mut rng, Dtype::F32, &[17, 6], true).into()];
        check("sum(transpose(x), 0)", &f, &args, ReduceOp::Sum, Dtype::F32);
    }
}

/// Big enough to split across the pool (tiles are output rows × column
/// blocks; several blocks per row beyond 1024 columns, with a tail): the
/// result is the same bits for every thread count and equals the
/// interpreter's.
#[test]
fn threads_split_tiles_not_reductions() {
    let mut rng = Rng(45);
    for (names, shape, axis) in [
        (vec!["R", "C"], vec![300usize, 1000], 0usize),
        (vec!["A", "B", "C"], vec![3, 40, 2500], 1),
        (vec!["A", "B", "C"], vec![70, 29, 130], 1),
    ] {
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let f = reduce_fn(op, Dtype::F32, &[axis], false, &names, &{
                let mut o = names.clone();
                o.remove(axis);
                o
            });
            let args: Vec<Arg> = vec![random(&mut rng, Dtype::F32, &shape, false).into()];
            assert!(elems_of(&shape) >= tc_llvm::exec::PAR_MIN_WORK);
            let want = interp(&f, &args).unwrap();
            let what = format!("reduce.{} axis {axis} of {shape:?}", op.name());
            let one = jit(&f, &args, EXACT);
            let pool = jit(
                &f,
                &args,
                JitOptions {
                    threads: 0,
                    ..EXACT
                },
            );
            assert_bits(&format!("{what} 1 thread"), &one, &want, false);
            assert_bits(&format!("{what} pool"), &pool, &want, false);
            let (g, _) = generic_then_specialised(
                &f,
                &args,
                JitOptions {
                    threads: 0,
                    ..EXACT
                },
            );
            assert_bits(&format!("{what} generic pool"), &g, &want, false);
        }
    }
}

/// Which form the kernels take: the column form (an accumulator row on the
/// stack) when the last axis is kept, in the specialised and the generic
/// kernel; the element-at-a-time form for last-axis reductions and, when
/// specialised, for a kept last axis of one element.
#[test]
fn column_form_is_chosen_when_the_last_axis_is_kept() {
    // The column form's accumulator row (a float sum over the last axis
    // has a row of lanes instead, `%lanes…`).
    let has_row = |ir: &str| {
        ir.lines()
            .any(|l| l.trim_start().starts_with("%acc") && l.contains(" x float], align 64"))
    };
    let shape = ["R", "C"];
    let cols = reduce_fn(ReduceOp::Sum, Dtype::F32, &[0], false, &shape, &["C"]);
    let last = reduce_fn(ReduceOp::Sum, Dtype::F32, &[1], false, &shape, &["R"]);
    let s = sigma(&[("R", 64), ("C", 100)]);
    assert!(has_row(tc_llvm::compile(&cols, &s, EXACT).unwrap().ir()));
    assert!(!has_row(tc_llvm::compile(&last, &s, EXACT).unwrap().ir()));
    let one = sigma(&[("R", 64), ("C", 1)]);
    assert!(!has_row(tc_llvm::compile(&cols, &one, EXACT).unwrap().ir()));
    let g = tc_llvm::compile_with(&cols, &s, &|_| None, EXACT, true).unwrap();
    assert!(g.is_generic());
    assert!(has_row(g.ir()));
}

/// The column form over an empty output whose last dim is 2^63 − 1
/// (`sum` over axis 0 of `[3, 0, 2^63 − 1]`): codegen sized its column
/// blocks by multiplying the block count by the block size unchecked,
/// which overflowed at compile time (a panic in debug builds; the fuzzer's
/// seed 4296970452 of 2026-12-01). Both backends return the empty value.
#[test]
fn column_form_over_an_empty_output_with_a_huge_last_dim() {
    let v = Dim::var;
    let mut b = builder("colsum");
    let x = b.param(
        "x",
        tc_core::Type::Tensor(
            tc_core::TensorType::new(Dtype::F32, vec![v("R"), v("Z"), v("N")])
                .with_refs(vec![tc_core::Pred::ge(v("Z"), 0)]),
        ),
    );
    b.returns(tc_core::Type::tensor(Dtype::F32, vec![v("Z"), v("N")]));
    let y = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0],
        keepdims: false,
        x,
    });
    let f = b.finish(y);
    let n = i64::MAX as usize;
    let args: Vec<Arg> = vec![Tensor::from_vec::<f32>(&[3, 0, n], vec![]).unwrap().into()];
    let want = interp(&f, &args).unwrap();
    assert_eq!(want.shape(), &[0, n]);
    for opts in [EXACT, DET, JitOptions::default()] {
        let got = jit(&f, &args, opts);
        assert_eq!(got.shape(), &[0, n]);
    }
}

/// The lane order of a float sum outside deterministic mode (crate docs,
/// "Numerics"), written out: over the outer reduced indices in row-major
/// order (`rows`), element `i` of the last reduced axis into lane
/// `i mod 16`, then the lanes summed by halving.
fn lane_sum(rows: &[&[f32]]) -> f32 {
    let mut lanes = [0f32; 16];
    for row in rows {
        for (i, x) in row.iter().enumerate() {
            lanes[i % 16] += x;
        }
    }
    let mut h = 8;
    while h > 0 {
        for j in 0..h {
            lanes[j] += lanes[j + h];
        }
        h /= 2;
    }
    lanes[0]
}

/// Float sums and means over the last axis (and over the last two) outside
/// deterministic mode are the lane order exactly, bit for bit, whatever
/// the length (tails of every size, lengths below one vector), specialised
/// and shape-generic, on one thread and on the pool. Magnitudes spread
/// over 2⁰…2¹⁹, so another order rounds differently.
#[test]
fn non_deterministic_sums_are_in_the_lane_order() {
    let mut rng = Rng(0x1a4e);
    let mut value = |k: usize| (rng.unit() * 2.0 - 1.0) * (1u32 << (k % 20)) as f32;
    for (op, name) in [(ReduceOp::Sum, "sum"), (ReduceOp::Mean, "mean")] {
        for c in [1usize, 2, 15, 16, 17, 31, 32, 33, 100, 385] {
            let r = 3;
            let xs: Vec<f32> = (0..r * c).map(&mut value).collect();
            let f = reduce_fn(op, Dtype::F32, &[1], false, &["R", "C"], &["R"]);
            let want: Vec<f32> = xs
                .chunks(c)
                .map(|row| {
                    let s = lane_sum(&[row]);
                    if op == ReduceOp::Mean {
                        s / c as f32
                    } else {
                        s
                    }
                })
                .collect();
            let x = Tensor::from_vec(&[r, c], xs.clone()).unwrap();
            lane_case(&format!("{name} [{r}, {c}]"), &f, x, &want);
        }
        for (a, b) in [(3usize, 5usize), (2, 17), (4, 40)] {
            let r = 2;
            let xs: Vec<f32> = (0..r * a * b).map(&mut value).collect();
            let f = reduce_fn(op, Dtype::F32, &[1, 2], false, &["R", "A", "B"], &["R"]);
            let want: Vec<f32> = xs
                .chunks(a * b)
                .map(|block| {
                    let rows: Vec<&[f32]> = block.chunks(b).collect();
                    let s = lane_sum(&rows);
                    if op == ReduceOp::Mean {
                        s / (a * b) as f32
                    } else {
                        s
                    }
                })
                .collect();
            let x = Tensor::from_vec(&[r, a, b], xs.clone()).unwrap();
            lane_case(
                &format!("{name} [{r}, {a}, {b}] over the last two"),
                &f,
                x,
                &want,
            );
        }
    }
}

fn lane_case(what: &str, f: &Function, x: Tensor, want: &[f32]) {
    let args: Vec<Arg> = vec![x.into()];
    let want = Tensor::from_vec(&[want.len()], want.to_vec()).unwrap();
    for opts in [
        EXACT,
        JitOptions {
            threads: 0,
            ..EXACT
        },
        JitOptions::default(),
    ] {
        let (g, s) = generic_then_specialised(f, &args, opts);
        assert_bits(&format!("{what} specialised {opts:?}"), &s, &want, false);
        assert_bits(&format!("{what} generic {opts:?}"), &g, &want, false);
    }
}
