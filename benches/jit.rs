//! tc-llvm benchmarks against peers, run in one process and interleaved
//! (this host is noisy: the same run can land at two levels 2× apart, so
//! only ratios from one run mean anything).
//!
//! Each case prints a table: median [min–max] time per peer over
//! interleaved rounds and the ratio of medians `peer / tc` (> 1: tc is
//! faster). `TC_BENCH_QUICK=1` runs fewer rounds. The matmul case measures
//! each side both ways it can: tc keeping its packed B across calls (a
//! weight) and packing it per call, `gemm` (which has no packed-B API, so
//! always packs per call) writing into a new zeroed `Vec` per call and into
//! one reused. Peers: ndarray op-by-op and `Zip`, ndarray `dot`
//! (matrixmultiply), the `gemm` crate with feature `x86-v4` and with its
//! default features (AVX2; version 0.18, so the features do not unify),
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

/// `TC_BENCH_ONLY=block,softmax` runs only the named cases.
fn skip(case: &str) -> bool {
    match std::env::var("TC_BENCH_ONLY") {
        Ok(v) if !v.is_empty() => !v.split(',').any(|c| c.trim() == case),
        _ => false,
    }
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

/// Run every peer once per round, interleaved (the order rotates each
/// round); print medians and ratios against the first peer (tc).
fn table(title: &str, rounds: usize, mut peers: Vec<Peer>) -> Vec<(String, f64)> {
    for p in peers.iter_mut() {
        (p.f)(); // warm-up (compilation, page faults)
    }
    // The starting peer rotates from round to round, so no peer always runs
    // right after the same one (on this VM the first parallel run after a
    // single-threaded one pays for waking the idle vCPU, and a peer that
    // follows one reading the same data finds it in cache).
    let np = peers.len();
    for r in 0..rounds {
        for i in 0..np {
            let p = &mut peers[(r + i) % np];
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
    println!("\n### {title}  ({rounds} interleaved rounds, median [min–max])\n");
    println!("| peer | time | {} / peer |", peers[0].name);
    println!("| --- | ---: | ---: |");
    for (p, m) in peers.iter().zip(&med) {
        let (lo, hi) = (
            p.times[0].as_secs_f64(),
            p.times[p.times.len() - 1].as_secs_f64(),
        );
        println!(
            "| {} | {} [{}–{}] | {:.2}× |",
            p.name,
            fmt(*m),
            fmt(lo),
            fmt(hi),
            m / med[0]
        );
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

/// A cache of `threads` that compiles the optimized tier at once: the
/// benches time steady-state kernels.
fn jit(threads: usize) -> Jit {
    let j = Jit::new(CacheConfig {
        options: JitOptions {
            threads,
            ..Default::default()
        },
        ..Default::default()
    });
    j.set_tiered(false);
    j
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
    if skip("fused") {
        return;
    }
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
    let mut reused = vec![0f32; n];
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
            peer("tc (1 thread, no pool, no streaming stores)", || {
                tc_llvm::exec::set_streaming(false);
                tc_runtime::pool::set_enabled(false);
                black_box(j1.call(&f, &args, &|_| None).unwrap());
                tc_runtime::pool::set_enabled(true);
                tc_llvm::exec::set_streaming(true);
            }),
            peer("ndarray op-by-op (`(&a * &b + &c).mapv(relu)`)", || {
                black_box(((&a * &b) + &cc).mapv(|x| x.max(0.0)));
            }),
            peer("ndarray op-by-op, in place (`mapv_into`)", || {
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
            peer("plain Rust loop (new Vec)", || {
                let out: Vec<f32> = av
                    .iter()
                    .zip(&bv)
                    .zip(&cv)
                    .map(|((x, y), z)| (x * y + z).max(0.0))
                    .collect();
                black_box(out);
            }),
            peer("plain Rust loop (into a reused Vec)", || {
                for (o, ((x, y), z)) in reused.iter_mut().zip(av.iter().zip(&bv).zip(&cv)) {
                    *o = (x * y + z).max(0.0);
                }
                black_box(&reused);
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
    if skip("softmax") {
        return;
    }
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
    if skip("layernorm") {
        return;
    }
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

/// `c = a · b` by the `gemm` crate (x86-v4 kernels), all row-major.
///
/// # Safety
/// `a` holds `m·k` floats, `b` `k·n`, `c` `m·n`, `c` overlapping neither.
unsafe fn gemm_x86v4(
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    par: gemm::Parallelism,
) {
    // SAFETY: the strides address exactly those row-major extents.
    unsafe {
        gemm::gemm(
            m, n, k, c, 1, n as isize, false, a, 1, k as isize, b, 1, n as isize, 0.0, 1.0, false,
            false, false, par,
        )
    }
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
    if skip("matmul") {
        return;
    }
    // What `#[tensor_fn]` code calls: IR in a `'static`, identified by its
    // address (`call` would compare the whole IR on every call).
    let f: &'static Function = Box::leak(Box::new(matmul_fn()));
    let sizes: &[usize] = if quick() {
        &[128, 512, 1024]
    } else {
        &[128, 256, 512, 1024, 2048]
    };
    let mut summary = Vec::new();
    for &threads in &[1usize, 2] {
        // `threads` splits on the global pool, called from this thread:
        // what `gemm`'s `Parallelism::Rayon(threads)` does too.
        let j = jit(threads);
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
            // This host has two speed levels (other tenants); enough rounds
            // that the median is not decided by which level a few landed on.
            let rounds = if n >= 2048 {
                5
            } else if n >= 1024 {
                21
            } else if n >= 512 {
                41
            } else {
                // Tens of µs per call: many rounds, or one preemption decides the median.
                101
            };
            let gemm_run = |out: &mut Vec<f32>| {
                let par = if threads == 1 {
                    gemm::Parallelism::None
                } else {
                    gemm::Parallelism::Rayon(threads)
                };
                // SAFETY: A and B are `n × n` and `out` holds `n·n` floats.
                unsafe { gemm_x86v4((n, n, n), av.as_ptr(), bv.as_ptr(), out.as_mut_ptr(), par) }
            };
            // Its own copies of the operands: every peer reads inputs that
            // the previous peer did not just bring into cache.
            let (av2, bv2) = (av.clone(), bv.clone());
            let gemm_default_run = |out: &mut Vec<f32>| unsafe {
                gemm_default::gemm(
                    n,
                    n,
                    n,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    av2.as_ptr(),
                    1,
                    n as isize,
                    bv2.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    if threads == 1 {
                        gemm_default::Parallelism::None
                    } else {
                        gemm_default::Parallelism::Rayon(threads)
                    },
                )
            };
            // tc packing B on every call, like `gemm`: B a tensor of new
            // storage each call (one made ahead per call, kept alive until
            // the table is done), which `prepack` sees for the first time
            // and so packs per call, panel by panel, keeping nothing.
            let mut fresh: Vec<Vec<Arg>> = (0..rounds + 1)
                .map(|_| {
                    vec![
                        args[0].clone(),
                        Tensor::from_slice(&[n, n], &bv).unwrap().into(),
                    ]
                })
                .collect();
            let mut used: Vec<Vec<Arg>> = Vec::with_capacity(rounds + 1);
            let mut kept_out = vec![0f32; n * n];
            let mut peers = vec![
                peer("tc, B packing kept across calls", || {
                    // On the calling thread, like the peers: a product too
                    // small to split never leaves it (a `pool.install` hop
                    // per call costs a thread wake-up, ~30–100 µs on a VM,
                    // more than the n = 128 product itself).
                    black_box(j.call_static(f, &args, &|_| None).unwrap());
                }),
                peer("tc, B packed per call", || {
                    let a = fresh.pop().expect("one B per call");
                    black_box(j.call_static(f, &a, &|_| None).unwrap());
                    used.push(a);
                }),
                peer("gemm x86-v4, B packed and output zeroed per call", || {
                    let mut out = vec![0f32; n * n];
                    gemm_run(&mut out);
                    black_box(out);
                }),
                peer("gemm x86-v4, B packed per call, output reused", || {
                    gemm_run(&mut kept_out);
                    black_box(&mut kept_out);
                }),
                peer("gemm default (0.18, AVX2), output zeroed per call", || {
                    let mut out = vec![0f32; n * n];
                    gemm_default_run(&mut out);
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
    if skip("latency") {
        return;
    }
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
    // What `#[tensor_fn]` code calls: IR in a `'static` (identified by address).
    let fs: &'static Function = Box::leak(Box::new(f.clone()));
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
            peer("tc call_static (#[tensor_fn] path)", || {
                for _ in 0..reps {
                    black_box(j.call_static(fs, &tiny, &|_| None).unwrap());
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
        "\ncache-hit call overhead: {} per call (call), {} per call (call_static)",
        fmt(res[0].1 / reps as f64),
        fmt(res[1].1 / reps as f64)
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
    generic.set_tiered(false);
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

// ---- transformer block (BERT layer, D = 768, H = 12, S = 128) -------------

const TD: usize = 768;
const TH: usize = 12;
const TS: usize = 128;
const TF: usize = 3072;

fn dv(ds: &[&str]) -> Vec<Dim> {
    ds.iter()
        .map(|d| {
            d.parse::<i64>()
                .map(Dim::c)
                .unwrap_or_else(|_| Dim::var(*d))
        })
        .collect()
}

/// `x · wᵀ + b` as the model writes it (tc-serve/src/minilm.rs `linear`).
fn t_linear(
    b: &mut FnBuilder,
    x: tc_core::ir::Value,
    w: tc_core::ir::Value,
    bias: tc_core::ir::Value,
    i: &str,
    o: &str,
) -> tc_core::ir::Value {
    let wt = b.op(Op::Transpose(vec![1, 0], w));
    let wb = b.op(Op::Broadcast(dv(&["B", i, o]), wt));
    let mm = b.op(Op::Matmul(x, wb));
    let bb = b.op(Op::Broadcast(dv(&["B", "S", o]), bias));
    b.op(Op::Binary(BinaryOp::Add, mm, bb))
}

fn t_layer_norm(
    b: &mut FnBuilder,
    x: tc_core::ir::Value,
    g: tc_core::ir::Value,
    be: tc_core::ir::Value,
) -> tc_core::ir::Value {
    let full = dv(&["B", "S", "768"]);
    let mu = b.op(Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![2],
        keepdims: true,
        x,
    });
    let mub = b.op(Op::Broadcast(full.clone(), mu));
    let xc = b.op(Op::Binary(BinaryOp::Sub, x, mub));
    let sq = b.op(Op::Binary(BinaryOp::Mul, xc, xc));
    let var = b.op(Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![2],
        keepdims: true,
        x: sq,
    });
    let ve = b.op(Op::ScalarBinary {
        op: BinaryOp::Add,
        x: var,
        s: Scalar::Float(1e-12),
        scalar_left: false,
    });
    let inv = b.op(Op::Unary(UnaryOp::Rsqrt, ve));
    let ib = b.op(Op::Broadcast(full.clone(), inv));
    let y = b.op(Op::Binary(BinaryOp::Mul, xc, ib));
    let gb = b.op(Op::Broadcast(full.clone(), g));
    let yg = b.op(Op::Binary(BinaryOp::Mul, y, gb));
    let bb = b.op(Op::Broadcast(full, be));
    b.op(Op::Binary(BinaryOp::Add, yg, bb))
}

/// One BERT encoder layer, written with the model's op patterns (weights in
/// PyTorch layout `[out, in]`, head splits by transpose(reshape)).
fn block_fn() -> Function {
    let mut b = FnBuilder::new("block");
    let x = b.param("x", tt(Dtype::F32, &["B", "S", "768"]));
    let mut w = Vec::new();
    for (name, o, i) in [
        ("q", "768", "768"),
        ("k", "768", "768"),
        ("v", "768", "768"),
        ("o", "768", "768"),
    ] {
        let wv = b.param(&format!("w{name}"), tt(Dtype::F32, &[o, i]));
        let bv = b.param(&format!("b{name}"), tt(Dtype::F32, &[o]));
        w.push((wv, bv));
    }
    let g1 = b.param("g1", tt(Dtype::F32, &["768"]));
    let be1 = b.param("be1", tt(Dtype::F32, &["768"]));
    let w1 = b.param("w1", tt(Dtype::F32, &["3072", "768"]));
    let b1 = b.param("b1", tt(Dtype::F32, &["3072"]));
    let w2 = b.param("w2", tt(Dtype::F32, &["768", "3072"]));
    let b2 = b.param("b2", tt(Dtype::F32, &["768"]));
    let g2 = b.param("g2", tt(Dtype::F32, &["768"]));
    let be2 = b.param("be2", tt(Dtype::F32, &["768"]));
    b.returns(tt(Dtype::F32, &["B", "S", "768"]));
    let split = dv(&["B", "S", "12", "64"]);
    let lq = t_linear(&mut b, x, w[0].0, w[0].1, "768", "768");
    let rq = b.op(Op::Reshape(split.clone(), lq));
    let q = b.op(Op::Transpose(vec![0, 2, 1, 3], rq));
    let lk = t_linear(&mut b, x, w[1].0, w[1].1, "768", "768");
    let rk = b.op(Op::Reshape(split.clone(), lk));
    let k = b.op(Op::Transpose(vec![0, 2, 3, 1], rk));
    let lv = t_linear(&mut b, x, w[2].0, w[2].1, "768", "768");
    let rv = b.op(Op::Reshape(split, lv));
    let v = b.op(Op::Transpose(vec![0, 2, 1, 3], rv));
    let sc = b.op(Op::Matmul(q, k));
    let scores = b.op(Op::ScalarBinary {
        op: BinaryOp::Mul,
        x: sc,
        s: Scalar::Float(0.125),
        scalar_left: false,
    });
    let full = dv(&["B", "12", "S", "S"]);
    let m = b.op(Op::Reduce {
        op: ReduceOp::Max,
        axes: vec![3],
        keepdims: true,
        x: scores,
    });
    let mb = b.op(Op::Broadcast(full.clone(), m));
    let d = b.op(Op::Binary(BinaryOp::Sub, scores, mb));
    let e = b.op(Op::Unary(UnaryOp::Exp, d));
    let sm = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![3],
        keepdims: true,
        x: e,
    });
    let sb = b.op(Op::Broadcast(full, sm));
    let probs = b.op(Op::Binary(BinaryOp::Div, e, sb));
    let ctx = b.op(Op::Matmul(probs, v));
    let ct = b.op(Op::Transpose(vec![0, 2, 1, 3], ctx));
    let cr = b.op(Op::Reshape(dv(&["B", "S", "768"]), ct));
    let a = t_linear(&mut b, cr, w[3].0, w[3].1, "768", "768");
    let ax = b.op(Op::Binary(BinaryOp::Add, a, x));
    let h = t_layer_norm(&mut b, ax, g1, be1);
    let f1 = t_linear(&mut b, h, w1, b1, "768", "3072");
    let ge = b.op(Op::Unary(UnaryOp::Gelu, f1));
    let f2 = t_linear(&mut b, ge, w2, b2, "3072", "768");
    let fh = b.op(Op::Binary(BinaryOp::Add, f2, h));
    let out = t_layer_norm(&mut b, fh, g2, be2);
    b.finish(out)
}

/// erf (Abramowitz–Stegun 7.1.26, |error| ≤ 1.5e-7) for the ndarray peer's GELU.
fn erf_as(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_7) * t - 0.284_496_72) * t
            + 0.254_829_6)
            * t
            * (-x * x).exp();
    y.copysign(x)
}

fn nd_layer_norm(x: &Array2<f32>, g: &Array1<f32>, b: &Array1<f32>) -> Array2<f32> {
    let mean = x.mean_axis(Axis(1)).unwrap().insert_axis(Axis(1));
    let xc = x - &mean;
    let var = (&xc * &xc).mean_axis(Axis(1)).unwrap().insert_axis(Axis(1));
    xc / &var.mapv(|v| (v + 1e-12).sqrt()) * g + b
}

fn bench_block(c: &mut Criterion) {
    if skip("block") {
        return;
    }
    let mk = |r: usize, cc: usize, seed: u64| -> Vec<f32> {
        rand_vec(r * cc, seed)
            .into_iter()
            .map(|v| v * 0.05)
            .collect()
    };
    let xv = rand_vec(TS * TD, 40);
    let mut weights: Vec<(Vec<usize>, Vec<f32>)> = Vec::new();
    for i in 0..4 {
        weights.push((vec![TD, TD], mk(TD, TD, 41 + i)));
        weights.push((vec![TD], mk(1, TD, 51 + i)));
    }
    weights.push((vec![TD], vec![1.0; TD]));
    weights.push((vec![TD], vec![0.0; TD]));
    weights.push((vec![TF, TD], mk(TF, TD, 61)));
    weights.push((vec![TF], mk(1, TF, 62)));
    weights.push((vec![TD, TF], mk(TD, TF, 63)));
    weights.push((vec![TD], mk(1, TD, 64)));
    weights.push((vec![TD], vec![1.0; TD]));
    weights.push((vec![TD], vec![0.0; TD]));
    let mut args: Vec<Arg> = vec![Tensor::from_slice(&[1, TS, TD], &xv).unwrap().into()];
    for (shape, v) in &weights {
        args.push(Tensor::from_slice(shape, v).unwrap().into());
    }
    let a2 = |i: usize| -> Array2<f32> {
        let (s, v) = &weights[i];
        Array2::from_shape_vec((s[0], s[1]), v.clone()).unwrap()
    };
    let a1 = |i: usize| -> Array1<f32> { Array1::from(weights[i].1.clone()) };
    let (wq, bq, wk, bk, wv, bvv, wo, bo) =
        (a2(0), a1(1), a2(2), a1(3), a2(4), a1(5), a2(6), a1(7));
    let (g1, be1, w1, b1, w2, b2, g2, be2) =
        (a1(8), a1(9), a2(10), a1(11), a2(12), a1(13), a1(14), a1(15));
    let x = Array2::from_shape_vec((TS, TD), xv.clone()).unwrap();
    let dh = TD / TH;
    let nd_block = || -> Array2<f32> {
        let q = x.dot(&wq.t()) + &bq;
        let k = x.dot(&wk.t()) + &bk;
        let v = x.dot(&wv.t()) + &bvv;
        let mut ctx = Array2::<f32>::zeros((TS, TD));
        for h in 0..TH {
            let sl = ndarray::s![.., h * dh..(h + 1) * dh];
            let s = q.slice(sl).dot(&k.slice(sl).t()) * 0.125;
            let m = s.map_axis(Axis(1), |r| r.fold(f32::NEG_INFINITY, |a, &b| a.max(b)));
            let e = (&s - &m.insert_axis(Axis(1))).mapv_into(f32::exp);
            let sum = e.sum_axis(Axis(1));
            let p = e / &sum.insert_axis(Axis(1));
            ctx.slice_mut(sl).assign(&p.dot(&v.slice(sl)));
        }
        let a = ctx.dot(&wo.t()) + &bo;
        let h = nd_layer_norm(&(a + &x), &g1, &be1);
        let f = (h.dot(&w1.t()) + &b1)
            .mapv_into(|v| 0.5 * v * (1.0 + erf_as(v * std::f32::consts::FRAC_1_SQRT_2)));
        let f2 = f.dot(&w2.t()) + &b2;
        nd_layer_norm(&(f2 + &h), &g2, &be2)
    };
    let f = block_fn();
    let (j1, jp) = (jit(1), jit(0));
    // Agreement check (ndarray's GELU uses a 1.5e-7 erf; tolerance is loose).
    let got = j1.call(&f, &args, &|_| None).unwrap();
    let want = nd_block();
    let maxdiff = got
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(want.iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let rounds = if quick() { 5 } else { 11 };
    table(
        "transformer block (BERT layer, D = 768, H = 12, S = 128, B = 1)",
        rounds,
        vec![
            peer("tc (1 thread)", || {
                black_box(j1.call(&f, &args, &|_| None).unwrap());
            }),
            peer("tc (pool, 2 threads)", || {
                black_box(jp.call(&f, &args, &|_| None).unwrap());
            }),
            peer("ndarray (dot + axis ops)", || {
                black_box(nd_block());
            }),
        ],
    );
    println!("max |tc − ndarray| over the block output: {maxdiff:.2e}");
    c.bench_function("tc transformer block", |bch| {
        bch.iter(|| black_box(j1.call(&f, &args, &|_| None).unwrap()))
    });
}

fn reduce_fn(name: &str, shape: &[&str], axis: usize, out: &[&str]) -> Function {
    let mut b = FnBuilder::new(name);
    let x = b.param("x", tt(Dtype::F32, shape));
    b.returns(tt(Dtype::F32, out));
    let r = b.op(Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![axis],
        keepdims: false,
        x,
    });
    b.finish(r)
}

/// Reductions over a non-last axis: the kept innermost axis is the
/// vectorized inner loop, accumulating into the output row.
fn bench_reduce(c: &mut Criterion) {
    if skip("reduce") {
        return;
    }
    let rounds = if quick() { 5 } else { 15 };
    let (j1, jp) = (jit(1), jit(0));
    // Column sum: [4096, 1024] over axis 0.
    let (r, cdim) = (4096, 1024);
    let v = rand_vec(r * cdim, 11);
    let x = Array2::from_shape_vec((r, cdim), v.clone()).unwrap();
    let args: Vec<Arg> = vec![Tensor::from_slice(&[r, cdim], &v).unwrap().into()];
    let f = reduce_fn("colsum", &["R", "C"], 0, &["C"]);
    table(
        "column sum [4096, 1024] f32 over axis 0",
        rounds,
        vec![
            peer("tc (1 thread)", || {
                black_box(j1.call(&f, &args, &|_| None).unwrap());
            }),
            peer("tc (pool, 2 threads)", || {
                black_box(jp.call(&f, &args, &|_| None).unwrap());
            }),
            peer("ndarray sum_axis", || {
                black_box(x.sum_axis(Axis(0)));
            }),
            peer("plain Rust loop", || {
                let mut out = vec![0f32; cdim];
                for row in v.chunks_exact(cdim) {
                    for (o, &xv) in out.iter_mut().zip(row) {
                        *o += xv;
                    }
                }
                black_box(out);
            }),
        ],
    );
    // Middle axis: [64, 512, 256] over axis 1.
    let (a, bd, cd) = (64, 512, 256);
    let v3 = rand_vec(a * bd * cd, 12);
    let x3 = ndarray::Array3::from_shape_vec((a, bd, cd), v3.clone()).unwrap();
    let args3: Vec<Arg> = vec![Tensor::from_slice(&[a, bd, cd], &v3).unwrap().into()];
    let f3 = reduce_fn("midsum", &["A", "B", "C"], 1, &["A", "C"]);
    table(
        "sum [64, 512, 256] f32 over axis 1",
        rounds,
        vec![
            peer("tc (1 thread)", || {
                black_box(j1.call(&f3, &args3, &|_| None).unwrap());
            }),
            peer("tc (pool, 2 threads)", || {
                black_box(jp.call(&f3, &args3, &|_| None).unwrap());
            }),
            peer("ndarray sum_axis", || {
                black_box(x3.sum_axis(Axis(1)));
            }),
            peer("plain Rust loop", || {
                let mut out = vec![0f32; a * cd];
                for (blk, o) in v3.chunks_exact(bd * cd).zip(out.chunks_exact_mut(cd)) {
                    for row in blk.chunks_exact(cd) {
                        for (y, &xv) in o.iter_mut().zip(row) {
                            *y += xv;
                        }
                    }
                }
                black_box(out);
            }),
        ],
    );
    c.bench_function("tc column sum 4096x1024", |bch| {
        bch.iter(|| black_box(j1.call(&f, &args, &|_| None).unwrap()))
    });
}

fn batched_fn() -> Function {
    let mut b = FnBuilder::new("batched");
    let x = b.param("a", tt(Dtype::F32, &["P", "M", "K"]));
    let y = b.param("b", tt(Dtype::F32, &["P", "K", "N"]));
    b.returns(tt(Dtype::F32, &["P", "M", "N"]));
    let r = b.op(Op::Matmul(x, y));
    b.finish(r)
}

/// Many tiny products in one call: MiniLM at 32 × 16 tokens has 384 of
/// 16 × 32 × 16 per attention step. What it measures is the cost of each
/// product's dispatch (kernel choice, packing, edge handling), which the
/// big products hide: a per-product feature-string search once made this
/// step 2–3× slower (benches/README change 50).
fn bench_batched(c: &mut Criterion) {
    if skip("batched") {
        return;
    }
    let rounds = if quick() { 21 } else { 51 };
    let f: &'static Function = Box::leak(Box::new(batched_fn()));
    let j1 = jit(1);
    let (p, m, k, n) = (384usize, 16usize, 32usize, 16usize);
    let (av, bv) = (rand_vec(p * m * k, 13), rand_vec(p * k * n, 14));
    let args: Vec<Arg> = vec![
        Tensor::from_slice(&[p, m, k], &av).unwrap().into(),
        Tensor::from_slice(&[p, k, n], &bv).unwrap().into(),
    ];
    let items: Vec<(Array2<f32>, Array2<f32>)> = (0..p)
        .map(|i| {
            (
                Array2::from_shape_vec((m, k), av[i * m * k..(i + 1) * m * k].to_vec()).unwrap(),
                Array2::from_shape_vec((k, n), bv[i * k * n..(i + 1) * k * n].to_vec()).unwrap(),
            )
        })
        .collect();
    let mut out = vec![0f32; p * m * n];
    table(
        "batched matmul [384, 16, 32] x [384, 32, 16] f32, 1 thread",
        rounds,
        vec![
            peer("tc", || {
                black_box(j1.call_static(f, &args, &|_| None).unwrap());
            }),
            peer("gemm x86-v4, per item", || {
                for i in 0..p {
                    // SAFETY: item `i` of A (`m × k`), B (`k × n`) and C
                    // (`m × n`), row-major, inside their vectors.
                    unsafe {
                        gemm_x86v4(
                            (m, n, k),
                            av.as_ptr().add(i * m * k),
                            bv.as_ptr().add(i * k * n),
                            out.as_mut_ptr().add(i * m * n),
                            gemm::Parallelism::None,
                        )
                    };
                }
                black_box(&out);
            }),
            peer("ndarray dot, per item", || {
                for (a, b) in &items {
                    black_box(a.dot(b));
                }
            }),
        ],
    );
    c.bench_function("tc batched matmul 384x16x32x16", |bch| {
        bch.iter(|| black_box(j1.call_static(f, &args, &|_| None).unwrap()))
    });
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
    targets = bench_latency, bench_fused, bench_softmax, bench_layernorm, bench_matmul, bench_batched, bench_block, bench_reduce
}
criterion_main!(benches);
