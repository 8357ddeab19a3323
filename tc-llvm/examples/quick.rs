//! Quick timing of the main cases (tc only, plus a plain loop), for tuning:
//! `cargo run --release -p tc-llvm --example quick -- [case]`.
use std::hint::black_box;
use std::time::Instant;

use tc_core::build::FnBuilder;
use tc_core::ir::{BinaryOp, Op, ReduceOp, UnaryOp};
use tc_core::{Dim, Dtype, Type};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;

fn tt(dims: &[&str]) -> Type {
    Type::tensor(
        Dtype::F32,
        dims.iter()
            .map(|d| {
                d.parse::<i64>()
                    .map(Dim::c)
                    .unwrap_or_else(|_| Dim::var(*d))
            })
            .collect(),
    )
}

fn jit(threads: usize) -> Jit {
    Jit::new(CacheConfig {
        capacity: 64,
        specialize_after: 1,
        options: JitOptions {
            threads,
            ..JitOptions::default()
        },
    })
}

fn time(name: &str, reps: usize, mut f: impl FnMut()) {
    f();
    let mut ts = Vec::new();
    for _ in 0..reps {
        let t0 = Instant::now();
        f();
        ts.push(t0.elapsed().as_secs_f64());
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name}: median {:.3} ms, min {:.3} ms",
        ts[reps / 2] * 1e3,
        ts[0] * 1e3
    );
    if let Some(fl) = name
        .strip_prefix("sgemm ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
    {
        println!("   {:.1} GFLOP/s at min", 2.0 * fl * fl * fl / ts[0] / 1e9);
    }
}

fn rv(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let all = case == "all";
    if all || case == "fused" {
        let mut b = FnBuilder::new("fused");
        let x = b.param("a", tt(&["N"]));
        let y = b.param("b", tt(&["N"]));
        let z = b.param("c", tt(&["N"]));
        b.returns(tt(&["N"]));
        let m = b.op(Op::Binary(BinaryOp::Mul, x, y));
        let s = b.op(Op::Binary(BinaryOp::Add, m, z));
        let r = b.op(Op::Unary(UnaryOp::Relu, s));
        let f = b.finish(r);
        let n = 16 << 20;
        let (a, bb, c) = (rv(n), rv(n), rv(n));
        let args: Vec<Arg> = [&a, &bb, &c]
            .iter()
            .map(|v| Tensor::from_slice(&[n], v).unwrap().into())
            .collect();
        let j = jit(1);
        time("fused 16M tc 1t", 9, || {
            black_box(j.call(&f, &args, &|_| None).unwrap());
        });
        let j2 = jit(0);
        time("fused 16M tc pool", 9, || {
            black_box(j2.call(&f, &args, &|_| None).unwrap());
        });
        time("fused 16M plain loop (collect)", 9, || {
            let out: Vec<f32> = a
                .iter()
                .zip(&bb)
                .zip(&c)
                .map(|((x, y), z)| (x * y + z).max(0.0))
                .collect();
            black_box(out);
        });
    }
    if all || case == "softmax" {
        let mut b = FnBuilder::new("softmax");
        let x = b.param("x", tt(&["R", "C"]));
        b.returns(tt(&["R", "C"]));
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
        let args: Vec<Arg> = vec![Tensor::from_slice(&[4096, 1024], &rv(4096 * 1024))
            .unwrap()
            .into()];
        let j = jit(1);
        time("softmax 4096x1024 tc 1t", 9, || {
            black_box(j.call(&f, &args, &|_| None).unwrap());
        });
    }
    if all || case == "matmul" {
        let ns: Vec<usize> = match std::env::args().nth(2).and_then(|s| s.parse().ok()) {
            Some(n) => vec![n],
            None => vec![128, 256, 512, 1024],
        };
        for n in ns {
            let a = rv(n * n);
            let bm = rv(n * n);
            let mut c = vec![0f32; n * n];
            let reps = if n <= 256 { 201 } else { 9 };
            let t0 = Instant::now();
            time(&format!("sgemm {n} 1t"), reps, || unsafe {
                tc_llvm::kernels::matmul::sgemm(
                    n,
                    n,
                    n,
                    tc_llvm::kernels::matmul::View::new(a.as_ptr(), n, 1),
                    tc_llvm::kernels::matmul::View::new(bm.as_ptr(), n, 1),
                    c.as_mut_ptr(),
                    &tc_llvm::ctx::ExecCtx::on_this_thread(1),
                )
                .unwrap();
            });
            let _ = t0;
        }
    }
    if all || case == "mm128" {
        let mut b = FnBuilder::new("mm");
        let x = b.param("a", tt(&["M", "K"]));
        let y = b.param("b", tt(&["K", "N"]));
        b.returns(tt(&["M", "N"]));
        let r = b.op(Op::Matmul(x, y));
        let f = b.finish(r);
        let n = 128;
        let args: Vec<Arg> = vec![
            Tensor::from_slice(&[n, n], &rv(n * n)).unwrap().into(),
            Tensor::from_slice(&[n, n], &rv(n * n)).unwrap().into(),
        ];
        for th in [1, 0] {
            let j = jit(th);
            time(&format!("jit matmul 128 threads={th}"), 201, || {
                black_box(j.call(&f, &args, &|_| None).unwrap());
            });
        }
        let (a, bm) = (rv(n * n), rv(n * n));
        let mut c = vec![0f32; n * n];
        time("sgemm 128 direct", 201, || unsafe {
            tc_llvm::kernels::matmul::sgemm(
                n,
                n,
                n,
                tc_llvm::kernels::matmul::View::new(a.as_ptr(), n, 1),
                tc_llvm::kernels::matmul::View::new(bm.as_ptr(), n, 1),
                c.as_mut_ptr(),
                &tc_llvm::ctx::ExecCtx::on_this_thread(1),
            )
            .unwrap();
        });
    }
    if all || case == "ffn" {
        // [128, 768] x W^T with W [3072, 768] (a transposed operand).
        let (m, k, n) = (128usize, 768usize, 3072usize);
        let a = rv(m * k);
        let w = rv(n * k);
        let mut c = vec![0f32; m * n];
        let fl = 2.0 * (m * k * n) as f64;
        for (name, rs, cs) in [("transposed", 1usize, k), ("row-major", n, 1)] {
            let t = {
                let mut best = f64::MAX;
                for _ in 0..40 {
                    let t0 = Instant::now();
                    unsafe {
                        tc_llvm::kernels::matmul::sgemm(
                            m,
                            n,
                            k,
                            tc_llvm::kernels::matmul::View::new(a.as_ptr(), k, 1),
                            tc_llvm::kernels::matmul::View::new(w.as_ptr(), rs, cs),
                            c.as_mut_ptr(),
                            &tc_llvm::ctx::ExecCtx::on_this_thread(1),
                        )
                        .unwrap();
                    }
                    best = best.min(t0.elapsed().as_secs_f64());
                }
                best
            };
            println!(
                "ffn 128x768x3072 B {name}: {:.3} ms, {:.1} GFLOP/s",
                t * 1e3,
                fl / t / 1e9
            );
        }
    }
    if all || case == "linear" {
        // BERT linear: [B,S,I] x broadcast(transpose(w)) + bias, D=768.
        let mut b = FnBuilder::new("linear");
        let x = b.param("x", tt(&["B", "S", "I"]));
        let w = b.param("w", tt(&["O", "I"]));
        let bias = b.param("b", tt(&["O"]));
        b.returns(tt(&["B", "S", "O"]));
        let wt = b.op(Op::Transpose(vec![1, 0], w));
        let wb = b.op(Op::Broadcast(
            vec![Dim::var("B"), Dim::var("I"), Dim::var("O")],
            wt,
        ));
        let mm = b.op(Op::Matmul(x, wb));
        let bb = b.op(Op::Broadcast(
            vec![Dim::var("B"), Dim::var("S"), Dim::var("O")],
            bias,
        ));
        let r = b.op(Op::Binary(BinaryOp::Add, mm, bb));
        let f = b.finish(r);
        let (bn, s, i, o) = (8, 128, 768, 768);
        let args: Vec<Arg> = vec![
            Tensor::from_slice(&[bn, s, i], &rv(bn * s * i))
                .unwrap()
                .into(),
            Tensor::from_slice(&[o, i], &rv(o * i)).unwrap().into(),
            Tensor::from_slice(&[o], &rv(o)).unwrap().into(),
        ];
        let j = jit(1);
        let fl = 2.0 * (bn * s * i * o) as f64;
        black_box(j.call(&f, &args, &|_| None).unwrap());
        let t0 = Instant::now();
        for _ in 0..5 {
            black_box(j.call(&f, &args, &|_| None).unwrap());
        }
        let dt = t0.elapsed().as_secs_f64() / 5.0;
        println!(
            "linear 8x128x768→768 tc 1t: {:.3} ms, {:.1} GFLOP/s",
            dt * 1e3,
            fl / dt / 1e9
        );
    }
}
