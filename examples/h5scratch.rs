use tc_core::build::FnBuilder;
use tc_core::ir::{Function, Op, ReduceOp};
use tc_core::{Dim, Dtype, Pred, Type};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;

fn t(dt: Dtype, s: &[&str]) -> Type {
    Type::tensor(
        dt,
        s.iter()
            .map(|x| {
                x.parse::<i64>()
                    .map(Dim::c)
                    .unwrap_or_else(|_| Dim::var(*x))
            })
            .collect(),
    )
}

fn run(f: &Function, args: Vec<Arg>) {
    println!("{f}");
    tc_core::check::check_function(f, &Default::default())
        .map_err(|d| d[0].message.clone())
        .unwrap();
    let want = tc_runtime::exec::call(f, &args, &|_| None);
    println!(
        "interp: {:?}",
        want.as_ref().map(|t| (
            t.shape().to_vec(),
            t.bytes().iter().take(8).copied().collect::<Vec<_>>()
        ))
    );
    let j = Jit::new(CacheConfig {
        capacity: 4,
        specialize_after: 1,
        options: JitOptions::default(),
    });
    let got = j.call(f, &args, &|_| None);
    println!(
        "jit:    {:?}",
        got.as_ref().map(|t| (
            t.shape().to_vec(),
            t.bytes().iter().take(8).copied().collect::<Vec<_>>()
        ))
    );
}

fn main() {
    let which = std::env::args().nth(1).unwrap();
    match which.as_str() {
        "nanmax" => {
            let mut b = FnBuilder::new("f");
            let x = b.param("x", t(Dtype::BF16, &["A"]));
            b.returns(t(Dtype::BF16, &["1"]));
            let r = b.op(Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![0],
                keepdims: true,
                x,
            });
            let f = b.finish(r);
            run(
                &f,
                vec![Tensor::from_raw(Dtype::BF16, &[1], vec![0xC0, 0xFF])
                    .unwrap()
                    .into()],
            );
            run(
                &f,
                vec![
                    Tensor::from_raw(Dtype::BF16, &[2], vec![0xC0, 0xFF, 0x80, 0x3F])
                        .unwrap()
                        .into(),
                ],
            );
        }
        "concat0" => {
            let mut b = FnBuilder::new("f");
            let dt: Dtype = std::env::args().nth(2).unwrap().parse().unwrap();
            let mut b = FnBuilder::new("f");
            let x = b.param("x", t(dt, &["A"]));
            let y = b.param("y", t(dt, &["B"]));
            b.requires(Pred::ge(Dim::var("B"), 0));
            b.returns(Type::tensor(dt, vec![Dim::var("A") * 2 + Dim::var("B")]));
            let r = b.op(Op::Concat(0, vec![x, y, x]));
            let f = b.finish(r);
            run(
                &f,
                vec![
                    Tensor::zeros(dt, &[3]).into(),
                    Tensor::zeros(dt, &[0]).into(),
                ],
            );
        }
        "bcast" => {
            let mut b = FnBuilder::new("f");
            let x = b.param("x", t(Dtype::Bool, &["N"]));
            b.returns(t(Dtype::Bool, &["N", "N"]));
            let r = b.op(Op::Broadcast(vec![Dim::var("N"), Dim::var("N")], x));
            let f = b.finish(r);
            run(&f, vec![Tensor::zeros(Dtype::Bool, &[65536]).into()]);
        }
        "zerohuge" => {
            let mut b = FnBuilder::new("f");
            let x = b.param("x", t(Dtype::I64, &["Z", "A"]));
            b.requires(Pred::ge(Dim::var("Z"), 0));
            b.returns(t(Dtype::I64, &["A"]));
            let r = b.op(Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0],
                keepdims: false,
                x,
            });
            let f = b.finish(r);
            run(&f, vec![Tensor::zeros(Dtype::I64, &[0, 1 << 32]).into()]);
        }
        _ => {}
    }
}
