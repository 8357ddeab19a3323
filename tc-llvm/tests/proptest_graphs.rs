//! Random well-typed op graphs (checked by `tc_core::check::check_function`)
//! over random shapes, run by the JIT (deterministic, exact mode: bit-exact
//! expected, reductions included) and by the interpreter.
use crate::util;

use proptest::prelude::*;
use tc_core::ir::Signatures;
use tc_core::ir::{BinaryOp, Op, ReduceOp, Scalar, UnaryOp, Value};
use tc_core::{Dim, Dtype};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

const DTS: [Dtype; 6] = [
    Dtype::F32,
    Dtype::BF16,
    Dtype::F16,
    Dtype::I32,
    Dtype::I8,
    Dtype::Bool,
];

#[derive(Clone, Debug)]
struct Plan {
    a: usize,
    b: usize,
    params: Vec<usize>,
    ops: Vec<(u8, usize, usize, usize)>,
    seed: u64,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        1usize..6,
        2usize..9,
        prop::collection::vec(0usize..DTS.len(), 1..4),
        prop::collection::vec((0u8..12, 0usize..64, 0usize..64, 0usize..64), 1..10),
        any::<u64>(),
    )
        .prop_map(|(a, b, params, ops, seed)| Plan {
            a,
            b,
            params,
            ops,
            seed: seed | 1,
        })
}

fn build(p: &Plan) -> tc_core::ir::Function {
    let mut fb = builder("g");
    let ab = vec![Dim::var("A"), Dim::var("B")];
    let mut vals: Vec<(Value, Dtype)> = Vec::new();
    for (i, &d) in p.params.iter().enumerate() {
        let v = fb.param(&format!("p{i}"), tt(DTS[d], &["A", "B"]));
        vals.push((v, DTS[d]));
    }
    fb.requires(tc_core::Pred::ge(Dim::var("B"), Dim::c(2)));
    for &(kind, x, y, z) in &p.ops {
        let (xv, xd) = vals[x % vals.len()];
        let same: Vec<(Value, Dtype)> = vals.iter().copied().filter(|(_, d)| *d == xd).collect();
        let (yv, _) = same[y % same.len()];
        let next = match kind {
            0 | 1 => {
                let ops: Vec<UnaryOp> = UnaryOp::ALL.into_iter().filter(|o| o.admits(xd)).collect();
                let o = ops[z % ops.len()];
                (fb.op(Op::Unary(o, xv)), xd)
            }
            2 | 3 => {
                let ops: Vec<BinaryOp> = BinaryOp::ALL
                    .into_iter()
                    .filter(|o| o.admits(xd) && *o != BinaryOp::Pow)
                    .collect();
                let o = ops[z % ops.len()];
                (fb.op(Op::Binary(o, xv, yv)), o.result_dtype(xd))
            }
            4 => {
                let to = DTS[z % DTS.len()];
                (fb.op(Op::Cast(to, xv)), to)
            }
            5 => {
                let s = if xd.is_float() {
                    Scalar::Float(0.5 + z as f64 / 8.0)
                } else if xd.is_int() {
                    Scalar::Int(z as i64 - 30)
                } else {
                    Scalar::Bool(z % 2 == 0)
                };
                let ops: Vec<BinaryOp> = [
                    BinaryOp::Add,
                    BinaryOp::Mul,
                    BinaryOp::Max,
                    BinaryOp::Lt,
                    BinaryOp::Xor,
                ]
                .into_iter()
                .filter(|o| o.admits(xd))
                .collect();
                if ops.is_empty() {
                    continue;
                }
                let o = ops[z % ops.len()];
                (
                    fb.op(Op::ScalarBinary {
                        op: o,
                        x: xv,
                        s,
                        scalar_left: z % 3 == 0,
                    }),
                    o.result_dtype(xd),
                )
            }
            6 => {
                let conds: Vec<Value> = vals
                    .iter()
                    .filter(|(_, d)| *d == Dtype::Bool)
                    .map(|(v, _)| *v)
                    .collect();
                if conds.is_empty() {
                    continue;
                }
                (fb.op(Op::Select(conds[z % conds.len()], xv, yv)), xd)
            }
            7 => {
                let ops: Vec<ReduceOp> =
                    ReduceOp::ALL.into_iter().filter(|o| o.admits(xd)).collect();
                let o = ops[z % ops.len()];
                let axis = z % 2;
                let r = fb.op(Op::Reduce {
                    op: o,
                    axes: vec![axis],
                    keepdims: true,
                    x: xv,
                });
                (fb.op(Op::Broadcast(ab.clone(), r)), xd)
            }
            8 => {
                let t = fb.op(Op::Transpose(vec![1, 0], xv));
                let u = fb.op(Op::Unary(
                    if xd.is_bool() {
                        UnaryOp::Not
                    } else {
                        UnaryOp::Neg
                    },
                    t,
                ));
                (fb.op(Op::Transpose(vec![1, 0], u)), xd)
            }
            9 => {
                let lo = fb.op(Op::Slice {
                    axis: 1,
                    start: Dim::c(0),
                    stop: Dim::c(1),
                    step: 1,
                    x: xv,
                });
                let hi = fb.op(Op::Slice {
                    axis: 1,
                    start: Dim::c(1),
                    stop: Dim::var("B"),
                    step: 1,
                    x: yv,
                });
                (
                    fb.op_annot(Op::Concat(1, vec![lo, hi]), tt(xd, &["A", "B"])),
                    xd,
                )
            }
            10 if xd.is_numeric() => {
                let r = fb.op(Op::ArgReduce {
                    max: z % 2 == 0,
                    axis: 1,
                    keepdims: true,
                    x: xv,
                });
                (fb.op(Op::Broadcast(ab.clone(), r)), Dtype::I64)
            }
            _ => {
                let r = fb.op(Op::Reshape(
                    vec![Dim::var("A"), Dim::c(1), Dim::var("B")],
                    xv,
                ));
                (fb.op(Op::Reshape(ab.clone(), r)), xd)
            }
        };
        vals.push(next);
    }
    let (ret, rd) = *vals.last().unwrap();
    fb.returns(tt(rd, &["A", "B"]));
    fb.finish(ret)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn random_graphs_match_interpreter(p in plan()) {
        let f = build(&p);
        if let Err(ds) = tc_core::check::check_function(&f, &Signatures::new()) {
            panic!("generator produced an ill-typed function:\n{f}\n{:?}", ds.iter().map(|d| d.message.clone()).collect::<Vec<_>>());
        }
        let mut rng = Rng(p.seed);
        let args: Vec<Arg> = p.params.iter().map(|&d| random(&mut rng, DTS[d], &[p.a, p.b], true).into()).collect();
        let want = interp(&f, &args).unwrap();
        let got = jit(&f, &args, JitOptions { fast_math: false, deterministic: true, threads: 0, fast_quant: false });
        assert_bits(&format!("{f}"), &got, &want, true);
    }
}
