//! Quantized matmul throughput for SmolLM2-135M's shapes (1 row: decode;
//! 16: a batched decode step; 128: prefill), every path and both numerics: `cargo run --release -p tc-quant --example qbench`.
//! Arguments filter the rows: each word must match the path, format,
//! numerics or row count (`qbench Avx512 q4_1 Fast 1`).

use std::time::{Duration, Instant};
use tc_quant::{
    available_paths, qmatmul_packed, qmatmul_with, Format, Numerics, PackedWeights, Path,
};

fn cpu_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let line = info.lines().find(|l| l.starts_with("model name"));
    line.and_then(|l| l.split(':').nth(1))
        .map_or("unknown".into(), |s| s.trim().to_owned())
}

/// Deterministic pseudo-random bytes with small, finite f16 scales.
fn weights(f: Format, n_out: usize, k: usize) -> Vec<u8> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut w: Vec<u8> = (0..n_out * k / f.block_elems() * f.block_bytes())
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    for blk in w.chunks_exact_mut(f.block_bytes()) {
        blk[0..2].copy_from_slice(&0x2c00u16.to_le_bytes()); // 1/16
        if f == Format::Q4_1 {
            blk[2..4].copy_from_slice(&0xac00u16.to_le_bytes());
        }
    }
    w
}

/// Median seconds per call over ~0.3 s of calls.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut samples = Vec::new();
    let start = Instant::now();
    let flush = std::env::var_os("QBENCH_FLUSH").is_some();
    let mut junk = vec![0u8; if flush { 64 << 20 } else { 0 }];
    while start.elapsed() < Duration::from_millis(300) || samples.len() < 5 {
        for (i, b) in junk.iter_mut().enumerate().step_by(64) {
            *b = b.wrapping_add(i as u8);
        }
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_secs_f64());
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "cpu: {}  threads: {}",
        cpu_name(),
        rayon::current_num_threads()
    );
    println!(
        "{:<7} {:<5} {:<6} {:>4} {:>6} {:>6} {:>10} {:>9} {:>9}",
        "path", "fmt", "num", "rows", "n_out", "k", "us/call", "GB/s", "GFLOP/s"
    );
    // `QBENCH_SHAPES="k,n;…"` and `QBENCH_ROWS="1,16"` replace the
    // shapes and row counts (MiniLM int8: `384,1152;384,384;384,1536;1536,384`
    // at 1024 rows).
    let parse =
        |v: &str| -> Vec<usize> { v.split(',').map(|x| x.trim().parse().unwrap()).collect() };
    let shapes: Vec<(usize, usize)> = match std::env::var("QBENCH_SHAPES") {
        Ok(v) => v.split(';').map(|t| (parse(t)[0], parse(t)[1])).collect(),
        Err(_) => vec![(576, 1536), (1536, 576), (576, 49152)],
    };
    let row_counts = std::env::var("QBENCH_ROWS").map_or(vec![1, 16, 128], |v| parse(&v));
    // How many weights (`QBENCH_COLD`, packed path), inputs
    // (`QBENCH_COLDX`) and outputs (`QBENCH_COLDY`) the calls take in
    // turn, so that each call's comes from beyond L2, as a model's do.
    let copies = |var: &str| std::env::var(var).map_or(1, |v| v.parse::<usize>().unwrap().max(1));
    let (cold_w, cold_x, cold_y) = (
        copies("QBENCH_COLD"),
        copies("QBENCH_COLDX"),
        copies("QBENCH_COLDY"),
    );
    // Every path with both numerics, then weights packed once
    // (`PackedWeights`, fast numerics only) as the "Packed" path.
    let mut runs: Vec<(String, Option<Path>, Numerics)> = Vec::new();
    for path in available_paths() {
        for num in [Numerics::Fast, Numerics::Exact] {
            runs.push((format!("{path:?}"), Some(path), num));
        }
    }
    runs.push(("Packed".into(), None, Numerics::Fast));
    for (name, path, num) in runs {
        for f in [Format::Q4_1, Format::Q8_0, Format::Q4_K, Format::Q6_K] {
            for &rows in &row_counts {
                let tags = [
                    name.clone(),
                    f.name().to_owned(),
                    format!("{num:?}"),
                    rows.to_string(),
                ];
                if !words.iter().all(|w| tags.contains(w)) {
                    continue;
                }
                for &(k, n_out) in &shapes {
                    if !k.is_multiple_of(f.block_elems()) {
                        continue;
                    }
                    let w = weights(f, n_out, k);
                    let x: Vec<f32> = (0..rows * k)
                        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                        .collect();
                    let xs = vec![x; cold_x];
                    let mut ys = vec![vec![0f32; rows * n_out]; cold_y];
                    let mut i = 0;
                    let mut turn = || {
                        i += 1;
                        (i, &xs[i % cold_x])
                    };
                    let s = match path {
                        Some(path) => time(|| {
                            let (i, x) = turn();
                            let y = &mut ys[i % cold_y];
                            qmatmul_with(path, f, num, x, rows, k, &w, n_out, y).unwrap()
                        }),
                        None => {
                            let ps: Vec<PackedWeights> = (0..cold_w)
                                .filter_map(|_| PackedWeights::new(f, &w, n_out, k).unwrap())
                                .collect();
                            if ps.is_empty() {
                                continue;
                            }
                            time(|| {
                                let (i, x) = turn();
                                let y = &mut ys[i % cold_y];
                                qmatmul_packed(&ps[i % ps.len()], x, rows, y).unwrap()
                            })
                        }
                    };
                    println!(
                        "{:<7} {:<5} {:<6} {:>4} {:>6} {:>6} {:>10.1} {:>9.2} {:>9.2}",
                        name,
                        f.name(),
                        format!("{num:?}"),
                        rows,
                        n_out,
                        k,
                        s * 1e6,
                        w.len() as f64 / s / 1e9,
                        2.0 * (rows * k * n_out) as f64 / s / 1e9
                    );
                }
            }
        }
    }
}
