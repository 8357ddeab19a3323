//! tc-llvm benchmarks against peers, run in one process and interleaved
//! (this host is noisy: the same run can land at two levels 2× apart, so
//! only ratios from one run mean anything).
//!
//! Each case prints a table: median time per peer over interleaved rounds
//! and the ratio `peer / tc` (> 1: tc is faster). `TC_BENCH_QUICK=1` runs
//! fewer rounds. Peers: ndarray op-by-op and `Zip`, ndarray `dot`
//! (matrixmultiply, default features), the `gemm` crate (feature `x86-v4`),
//! and a plain Rust loop.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ndarray::{Array1, Array2, Axis, Zip};
use tc_core::build::FnBuilder;
use tc_core::ir::{BinaryOp, Function, Op, ReduceOp, Scalar, UnaryOp};
use tc_core::{Dim, Dtype, Type};
use tc_llvm::{CacheConfig, Jit, JitOptions};
use tc_runtime::contract::Arg;
use tc_runtime::Tensor;

fn tt(dt: Dtype, dims: &[&str]) -> Type {
    Type::tensor(
        dt,
        dims.iter()
            .map(|d| {
                d.parse::<i64>()
                    .map(Dim::c)
                    .unwrap_or_else(|_| Dim::var(*d))
            })
            .collect(),
    )
}

fn quick() -> bool {
    std::env::var("TC_BENCH_QUICK").is_ok_and(|v| v != "0")
}

struct Peer<'a> {
    name: String,
    f: Box<dyn FnMut() + 'a>,
    times: Vec<Duration>,
}

fn peer<'a>(name: &str, f: impl FnMut() + 'a) -> Peer<'a> {
    Peer {
        name: name.to_string(),
        f: Box::new(f),
        times: Vec::new(),
    }
}

/// Run every peer once per round, interleaved; print medians and ratios
/// against the first peer (tc).
fn table(title: &str, rounds: usize, mut peers: Vec<Peer>) -> Vec<(String, f64)> {
    for p in peers.iter_mut() {
        (p.f)(); // warm-up (compilation, page faults)
    }
    for _ in 0..rounds {
        for p in peers.iter_mut() {
            let t0 = Instant::now();
            (p.f)();
            p.times.push(t0.elapsed());
        }
    }
    let med: Vec<f64> = peers
        .iter_mut()
        .map(|p| {
            p.times.sort();
            p.times[p.times.len() / 2].as_secs_f64()
        })
        .collect();
    println!("\n### {title}  ({rounds} interleaved rounds, median)\n");
    println!("| peer | time | {} / peer |", peers[0].name);
    println!("| --- | ---: | ---: |");
    for (p, m) in peers.iter().zip(&med) {
        println!("| {} | {} | {:.2}× |", p.name, fmt(*m), m / med[0]);
    }
    peers
        .iter()
        .zip(med)
        .map(|(p, m)| (p.name.clone(), m))
        .collect()
}

fn fmt(s: f64) -> String {
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        })
        .collect()
}

fn jit(threads: usize) -> Jit {
    Jit::new(CacheConfig {
        options: JitOptions {
            threads,
            ..Default::default()
        },
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------

fn fused_fn() -> Function {
    let mut b = FnBuilder::new("fused");
    let x = b.param("a", tt(Dtype::F32, &["N"]));
    let y = b.param("b", tt(Dtype::F32, &["N"]));
    let z = b.param("c", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let m = b.op(Op::Binary(BinaryOp::Mul, x, y));
    let s = b.op(Op::Binary(BinaryOp::Add, m, z));
    let r = b.op(Op::Unary(UnaryOp::Relu, s));
    b.finish(r)
}

fn bench_fused(c: &mut Criterion) {
    let n = 16 << 20;
    let (av, bv, cv) = (rand_vec(n, 1), rand_vec(n, 2), rand_vec(n, 3));
    let (a, b, cc) = (
        Array1::from(av.clone()),
        Array1::from(bv.clone()),
        Array1::from(cv.clone()),
    );
    let args: Vec<Arg> = [&av, &bv, &cv]
        .iter()
        .map(|v| Tensor::from_slice(&[n], v).unwrap().into())
        .collect();
    let f = fused_fn();
    let (j1, jp) = (jit(1), jit(0));
    let rounds = if quick() { 5 } else { 15 };
    table(
        "fused relu(a*b + c), 16M f32",
        rounds,
        vec![
            peer("tc (1 thread)", || {
                black_box(j1.call(&f, &args, &|_| None).unwrap());
            }),
            peer("tc (pool, 2 threads)", || {
                black_box(jp.call(&f, &args, &|_| None).unwrap());
            }),
            peer("ndarray op-by-op", || {
                black_box(((&a * &b) + &cc).mapv_into(|x| x.max(0.0)));
            }),
            peer("ndarray Zip", || {
                black_box(
                    Zip::from(&a)
                        .and(&b)
                        .and(&cc)
                        .map_collect(|&x, &y, &z| (x * y + z).max(0.0)),
                );
            }),
            peer("plain Rust loop", || {
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    out.push((av[i] * bv[i] + cv[i]).max(0.0));
                }
                black_box(out);
            }),
        ],
    );
    c.bench_function("tc fused relu(a*b+c) 16M", |bch| {
        bch.iter(|| black_box(j1.call(&f, &args, &|_| None).unwrap()))
    });
}

fn softmax_fn() -> Function {
    let mut b = FnBuilder::new("softmax");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    b.returns(tt(Dtype::F32, &["R", "C"]));
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
    b.finish(r)
}

fn bench_softmax(c: &mut Criterion) {
    let (r, cdim) = (4096, 1024);
    let v = rand_vec(r * cdim, 4);
    let x = Array2::from_shape_vec((r, cdim), v.clone()).unwrap();
    let args: Vec<Arg> = vec![Tensor::from_slice(&[r, cdim], &v).unwrap().into()];
    let f = softmax_fn();
    let (j1, jp) = (jit(1), jit(0));
    let rounds = if quick() { 5 } else { 15 };
    table(
        "row softmax [4096, 1024] f32",
        rounds,
        vec![
            peer("tc (1 thread)", || {
                black_box(j1.call(&f, &args, &|_| None).unwrap());
            }),
            peer("tc (pool, 2 threads)", || {
                black_box(jp.call(&f, &args, &|_| None).unwrap());
            }),
            peer("ndarray axis ops", || {
                let m = x.map_axis(Axis(1), |row| row.fold(f32::NEG_INFINITY, |a, &b| a.max(b)));
                let e = (&x - &m.insert_axis(Axis(1))).mapv_into(f32::exp);
                let s = e.sum_axis(Axis(1));
                black_box(e / &s.insert_axis(Axis(1)));
            }),
            peer("plain Rust loop", || {
                let mut out = vec![0f32; r * cdim];
                for (row, o) in v.chunks(cdim).zip(out.chunks_mut(cdim)) {
                    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                    let mut s = 0.0;
                    for (y, &xv) in o.iter_mut().zip(row) {
                        *y = (xv - m).exp();
                        s += *y;
                    }
                    for y in o.iter_mut() {
                        *y /= s;
                    }
                }
                black_box(out);
            }),
        ],
    );
    c.bench_function("tc softmax 4096x1024", |bch| {
        bch.iter(|| black_box(j1.call(&f, &args, &|_| None).unwrap()))
    });
}

fn layernorm_fn() -> Function {
    let mut b = FnBuilder::new("layernorm");
    let x = b.param("x", tt(Dtype::F32, &["R", "C"]));
    let g = b.param("g", tt(Dtype::F32, &["C"]));
    let be = b.param("b", tt(Dtype::F32, &["C"]));
    b.returns(tt(Dtype::F32, &["R", "C"]));
    let rc = vec![Dim::var("R"), Dim::var("C")];
    let mean = b.op(Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![1],
        keepdims: true,
        x,
    });
    let mb = b.op(Op::Broadcast(rc.clone(), mean));
    let xc = b.op(Op::Binary(BinaryOp::Sub, x, mb));
    let sq = b.op(Op::Binary(BinaryOp::Mul, xc, xc));
    let var = b.op(Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![1],
        keepdims: true,
        x: sq,
    });
    let ve = b.op(Op::ScalarBinary {
        op: BinaryOp::Add,
        x: var,
        s: Scalar::Float(1e-5),
        scalar_left: false,
    });
    let rs = b.op(Op::Unary(UnaryOp::Rsqrt, ve));
    let rb = b.op(Op::Broadcast(rc.clone(), rs));
    let nrm = b.op(Op::Binary(BinaryOp::Mul, xc, rb));
    let gb = b.op(Op::Broadcast(rc.clone(), g));
    let bb = b.op(Op::Broadcast(rc, be));
    let y = b.op(Op::Binary(BinaryOp::Mul, nrm, gb));
    let z = b.op(Op::Binary(BinaryOp::Add, y, bb));
    b.finish(z)
}

fn bench_layernorm(c: &mut Criterion) {
    let (r, d) = (4096, 768);
    let v = rand_vec(r * d, 5);
    let (gv, bv) = (rand_vec(d, 6), rand_vec(d, 7));
    let x = Array2::from_shape_vec((r, d), v.clone()).unwrap();
    let (g, bb) = (Array1::from(gv.clone()), Array1::from(bv.clone()));
    let args: Vec<Arg> = vec![
        Tensor::from_slice(&[r, d], &v).unwrap().into(),
        Tensor::from_slice(&[d], &gv).unwrap().into(),
        Tensor::from_slice(&[d], &bv).unwrap().into(),
    ];
    let f = layernorm_fn();
    let (j1, jp) = (jit(1), jit(0));
    let rounds = if quick() { 5 } else { 15 };
    table(
        "layer norm [4096, 768] f32",
        rounds,
        vec![
            peer("tc (1 thread)", || {
                black_box(j1.call(&f, &args, &|_| None).unwrap());
            }),
            peer("tc (pool, 2 threads)", || {
                black_box(jp.call(&f, &args, &|_| None).unwrap());
            }),
            peer("ndarray axis ops", || {
                let mean = x.mean_axis(Axis(1)).unwrap().insert_axis(Axis(1));
                let xc = &x - &mean;
                let var = (&xc * &xc).mean_axis(Axis(1)).unwrap().insert_axis(Axis(1));
                let y = xc / &var.mapv(|v| (v + 1e-5).sqrt()) * &g + &bb;
                black_box(y);
            }),
            peer("plain Rust loop", || {
                let mut out = vec![0f32; r * d];
                for (row, o) in v.chunks(d).zip(out.chunks_mut(d)) {
                    let mean = row.iter().sum::<f32>() / d as f32;
                    let var = row.iter().map(|&x| (x - mean) * (x - mean)).sum::<f32>() / d as f32;
                    let rs = 1.0 / (var + 1e-5).sqrt();
                    for i in 0..d {
                        o[i] = (row[i] - mean) * rs * gv[i] + bv[i];
                    }
                }
                black_box(out);
            }),
        ],
    );
    c.bench_function("tc layernorm 4096x768", |bch| {
        bch.iter(|| black_box(j1.call(&f, &args, &|_| None).unwrap()))
    });
}

fn matmul_fn() -> Function {
    let mut b = FnBuilder::new("matmul");
    let x = b.param("a", tt(Dtype::F32, &["M", "K"]));
    let y = b.param("b", tt(Dtype::F32, &["K", "N"]));
    b.returns(tt(Dtype::F32, &["M", "N"]));
    let r = b.op(Op::Matmul(x, y));
    b.finish(r)
}

fn bench_matmul(c: &mut Criterion) {
    let f = matmul_fn();
    let sizes: &[usize] = if quick() {
        &[128, 512, 1024]
    } else {
        &[128, 256, 512, 1024, 2048]
    };
    let mut summary = Vec::new();
    for &threads in &[1usize, 2] {
        let j = jit(if threads == 1 { 1 } else { 0 });
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for &n in sizes {
            let (av, bv) = (rand_vec(n * n, 8), rand_vec(n * n, 9));
            let (a, b) = (
                Array2::from_shape_vec((n, n), av.clone()).unwrap(),
                Array2::from_shape_vec((n, n), bv.clone()).unwrap(),
            );
            let args: Vec<Arg> = vec![
                Tensor::from_slice(&[n, n], &av).unwrap().into(),
                Tensor::from_slice(&[n, n], &bv).unwrap().into(),
            ];
            let flops = 2.0 * (n as f64).powi(3);
            let rounds = if n >= 2048 {
                3
            } else if n >= 1024 {
                5
            } else {
                11
            };
            let gemm_run = |out: &mut Vec<f32>| unsafe {
                gemm::gemm(
                    n,
                    n,
                    n,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    av.as_ptr(),
                    1,
                    n as isize,
                    bv.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    if threads == 1 {
                        gemm::Parallelism::None
                    } else {
                        gemm::Parallelism::Rayon(threads)
                    },
                )
            };
            let mut peers = vec![
                peer("tc", || {
                    black_box(pool.install(|| j.call(&f, &args, &|_| None).unwrap()));
                }),
                peer("gemm x86-v4", || {
                    let mut out = vec![0f32; n * n];
                    gemm_run(&mut out);
                    black_box(out);
                }),
            ];
            if threads == 1 {
                peers.push(peer("ndarray dot (matrixmultiply)", || {
                    black_box(a.dot(&b));
                }));
            }
            let res = table(
                &format!("matmul f32 n = {n}, {threads} thread(s)"),
                rounds,
                peers,
            );
            for (name, t) in &res {
                summary.push(format!(
                    "| {n} | {threads} | {name} | {:.1} |",
                    flops / t / 1e9
                ));
            }
        }
    }
    println!(
        "\n### matmul GFLOP/s\n\n| n | threads | peer | GFLOP/s |\n| --- | --- | --- | ---: |"
    );
    for l in summary {
        println!("{l}");
    }
    let n = 512;
    let av = rand_vec(n * n, 8);
    let args: Vec<Arg> = vec![
        Tensor::from_slice(&[n, n], &av).unwrap().into(),
        Tensor::from_slice(&[n, n], &av).unwrap().into(),
    ];
    let j = jit(1);
    c.bench_function("tc matmul 512", |bch| {
        bch.iter(|| black_box(j.call(&f, &args, &|_| None).unwrap()))
    });
}

/// A 10-op fused chain (first-call latency).
fn chain_fn(k: f64) -> Function {
    let mut b = FnBuilder::new("chain");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    let y = b.param("y", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let mut v = b.op(Op::Binary(BinaryOp::Mul, x, y));
    v = b.op(Op::ScalarBinary {
        op: BinaryOp::Add,
        x: v,
        s: Scalar::Float(k),
        scalar_left: false,
    });
    v = b.op(Op::Unary(UnaryOp::Tanh, v));
    v = b.op(Op::Binary(BinaryOp::Sub, v, x));
    v = b.op(Op::Unary(UnaryOp::Exp, v));
    v = b.op(Op::Binary(BinaryOp::Max, v, y));
    v = b.op(Op::Unary(UnaryOp::Sqrt, v));
    v = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: v,
        s: Scalar::Float(0.5),
        scalar_left: false,
    });
    v = b.op(Op::Unary(UnaryOp::Relu, v));
    v = b.op(Op::Binary(BinaryOp::Add, v, x));
    b.finish(v)
}

fn bench_latency(c: &mut Criterion) {
    // First call: IR → callable kernel (planning, IR text, parse, O3, MCJIT).
    let n = 1024;
    let xs = rand_vec(n, 10);
    let args: Vec<Arg> = vec![
        Tensor::from_slice(&[n], &xs).unwrap().into(),
        Tensor::from_slice(&[n], &xs).unwrap().into(),
    ];
    let mut times = Vec::new();
    for i in 0..if quick() { 5 } else { 11 } {
        let f = chain_fn(1.0 + i as f64); // a new function each time: never a cache hit
        let j = jit(1);
        let t0 = Instant::now();
        black_box(j.call(&f, &args, &|_| None).unwrap());
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("\n### first call of a 10-op fused kernel (compile + run, N = 1024)\n\nmedian {}, min {}, max {}", fmt(times[times.len() / 2]), fmt(times[0]), fmt(*times.last().unwrap()));

    // Cache hit on a tiny tensor vs the plain loop.
    let mut b = FnBuilder::new("tiny");
    let x = b.param("x", tt(Dtype::F32, &["N"]));
    b.returns(tt(Dtype::F32, &["N"]));
    let r = b.op(Op::Unary(UnaryOp::Relu, x));
    let f = b.finish(r);
    let tiny: Vec<Arg> = vec![Tensor::from_slice(&[4], &[1f32, -2.0, 3.0, -4.0])
        .unwrap()
        .into()];
    let j = jit(0);
    let reps = 10_000;
    let res = table(
        "cache hit on a tiny tensor (relu of 4 floats; time per 10,000 calls)",
        if quick() { 5 } else { 11 },
        vec![
            peer("tc::call (bind + cache + kernel + Tensor)", || {
                for _ in 0..reps {
                    black_box(j.call(&f, &tiny, &|_| None).unwrap());
                }
            }),
            peer("interpreter", || {
                for _ in 0..reps {
                    black_box(tc_runtime::exec::call(&f, &tiny, &|_| None).unwrap());
                }
            }),
            peer("plain Rust (Vec)", || {
                for _ in 0..reps {
                    let v: Vec<f32> = black_box([1f32, -2.0, 3.0, -4.0])
                        .iter()
                        .map(|x| x.max(0.0))
                        .collect();
                    black_box(v);
                }
            }),
        ],
    );
    println!(
        "\ncache-hit call overhead: {} per call",
        fmt(res[0].1 / reps as f64)
    );
    let s = j.stats();
    println!("cache stats: {s:?}");
    c.bench_function("tc cache hit tiny", |bch| {
        bch.iter(|| black_box(j.call(&f, &tiny, &|_| None).unwrap()))
    });

    // Generic vs specialised kernels (recompile-storm policy).
    let big = 1 << 20;
    let xs = rand_vec(big, 11);
    let args: Vec<Arg> = vec![
        Tensor::from_slice(&[big], &xs).unwrap().into(),
        Tensor::from_slice(&[big], &xs).unwrap().into(),
    ];
    let f = chain_fn(3.0);
    let generic = Jit::new(CacheConfig {
        specialize_after: u32::MAX,
        options: JitOptions {
            threads: 1,
            ..Default::default()
        },
        ..Default::default()
    });
    let special = jit(1);
    table(
        "shape-generic vs σ-specialised kernel (10-op chain, 1M f32, 1 thread)",
        if quick() { 5 } else { 11 },
        vec![
            peer("specialised", || {
                black_box(special.call(&f, &args, &|_| None).unwrap());
            }),
            peer("generic", || {
                black_box(generic.call(&f, &args, &|_| None).unwrap());
            }),
        ],
    );
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_latency, bench_fused, bench_softmax, bench_layernorm, bench_matmul
}
criterion_main!(benches);
