//! Developer probe: print the optimised IR / assembly of generated kernels
//! and time their pieces. `cargo run --release -p tc-llvm --example probe -- asm-ukr`.
use std::time::Instant;

fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    match what.as_str() {
        "asm-ukr" => {
            let ir = tc_llvm::kernels::matmul::ukernel_ir(16);
            println!("{}", tc_llvm::jit::assembly(&ir).unwrap());
        }
        "sgemm" => {
            let n: usize = std::env::args()
                .nth(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(512);
            let a = vec![1.0f32; n * n];
            let b = vec![1.0f32; n * n];
            let mut c = vec![0f32; n * n];
            for _ in 0..3 {
                let t0 = Instant::now();
                unsafe {
                    tc_llvm::kernels::matmul::sgemm(
                        n,
                        n,
                        n,
                        tc_llvm::kernels::matmul::View::new(a.as_ptr(), n, 1),
                        tc_llvm::kernels::matmul::View::new(b.as_ptr(), n, 1),
                        c.as_mut_ptr(),
                        &tc_llvm::ctx::ExecCtx::on_this_thread(1),
                    )
                    .unwrap();
                }
                let t = t0.elapsed().as_secs_f64();
                println!(
                    "n={n}: {:.2} ms, {:.1} GFLOP/s",
                    t * 1e3,
                    2.0 * (n as f64).powi(3) / t / 1e9
                );
            }
        }
        "fused" => {
            use tc_core::build::FnBuilder;
            use tc_core::ir::{BinaryOp, Op, UnaryOp};
            use tc_core::{Dim, Dtype, Type};
            let n = 16usize << 20;
            let t = |_: ()| Type::tensor(Dtype::F32, vec![Dim::var("N")]);
            let mut b = FnBuilder::new("fused");
            let x = b.param("a", t(()));
            let y = b.param("b", t(()));
            let z = b.param("c", t(()));
            b.returns(t(()));
            let m = b.op(Op::Binary(BinaryOp::Mul, x, y));
            let s = b.op(Op::Binary(BinaryOp::Add, m, z));
            let r = b.op(Op::Unary(UnaryOp::Relu, s));
            let f = b.finish(r);
            let sigma = [("N".to_string(), n as i64)].into_iter().collect();
            let c = tc_llvm::compile(
                &f,
                &sigma,
                tc_llvm::JitOptions {
                    threads: 1,
                    ..Default::default()
                },
            )
            .unwrap();
            let v = vec![1.5f32; n];
            let args: Vec<tc_runtime::contract::Arg> = (0..3)
                .map(|_| tc_runtime::Tensor::from_slice(&[n], &v).unwrap().into())
                .collect();
            for _ in 0..4 {
                let t0 = Instant::now();
                let out = c.run(&args).unwrap();
                let t1 = t0.elapsed();
                let t0 = Instant::now();
                let bytes = vec![0u8; n * 4];
                let t2 = t0.elapsed();
                let t0 = Instant::now();
                let tt = tc_runtime::Tensor::from_raw(Dtype::F32, &[n], bytes).unwrap();
                let t3 = t0.elapsed();
                let t0 = Instant::now();
                let mut o2 = Vec::with_capacity(n);
                for &x in &v[..n] {
                    o2.push((x * x + x).max(0.0));
                }
                let t4 = t0.elapsed();
                std::hint::black_box((out, tt, o2));
                println!("run {t1:?}  alloc {t2:?}  from_raw {t3:?}  loop {t4:?}");
            }
        }
        "softmax-asm" => {
            use tc_core::build::FnBuilder;
            use tc_core::ir::{BinaryOp, Op, ReduceOp, UnaryOp};
            use tc_core::{Dim, Dtype, Type};
            let mut b = FnBuilder::new("softmax");
            let x = b.param(
                "x",
                Type::tensor(Dtype::F32, vec![Dim::var("R"), Dim::var("C")]),
            );
            b.returns(Type::tensor(Dtype::F32, vec![Dim::var("R"), Dim::var("C")]));
            let rc = vec![Dim::var("R"), Dim::var("C")];
            let m = b.op(Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keepdims: true,
                x,
            });
            let mb = b.op(Op::Broadcast(rc.clone(), m));
            let d = b.op(Op::Binary(BinaryOp::Sub, x, mb));
            let e = b.op(Op::Unary(UnaryOp::Exp, d));
            let s = b.op(Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keepdims: true,
                x: e,
            });
            let sb = b.op(Op::Broadcast(rc, s));
            let r = b.op(Op::Binary(BinaryOp::Div, e, sb));
            let f = b.finish(r);
            let sigma = [("R".to_string(), 4096), ("C".to_string(), 1024)]
                .into_iter()
                .collect();
            let c = tc_llvm::compile(
                &f,
                &sigma,
                tc_llvm::JitOptions {
                    threads: 1,
                    ..Default::default()
                },
            )
            .unwrap();
            if std::env::args().nth(2).as_deref() == Some("ir") {
                println!("{}", tc_llvm::jit::optimised_ir(c.ir()).unwrap());
            } else {
                println!("{}", tc_llvm::jit::assembly(c.ir()).unwrap());
            }
        }
        _ => eprintln!("asm-ukr | sgemm N | fused | softmax-asm"),
    }
}
