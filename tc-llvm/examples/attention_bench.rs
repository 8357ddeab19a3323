//! Memory throughput of the fused attention kernel on a decode step's
//! shapes: many sequences' caches (SmolLM2: 3 key/value heads of 64, 3
//! query rows each), each read once, as a server's batched step reads
//! them: the best of 20 passes over every sequence's 30 layers, and the
//! cache bytes read per second.
//!
//! `cargo run --release -p tc-llvm --example attention_bench -- [SEQS] [T] [f32|f16] [THREADS]`
//! (defaults 16 190 f32 1). `ATTN_FLUSH_MB=512` writes that much memory
//! before each pass, so the caches are read from beyond the CPU's caches
//! as a server's are after its weights have streamed through.
use std::time::Instant;
use tc_llvm::kernels::attention::{run, Elem, Numerics, Operand, Problem};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let seqs: usize = a.get(1).map_or(16, |s| s.parse().unwrap());
    let t: usize = a.get(2).map_or(190, |s| s.parse().unwrap());
    let elem = match a.get(3).map(String::as_str) {
        Some("f16") => Elem::F16,
        _ => Elem::F32,
    };
    let threads: usize = a.get(4).map_or(1, |s| s.parse().unwrap());
    // Room for more positions than are read, as a server's caches have.
    let (layers, kv, hd, g, c) = (30usize, 3usize, 64usize, 3usize, t + 150);
    let eb = elem.bytes();
    // Two f16 ones per word (about 0.0078 as an f32): finite either way.
    let cache = |n: usize| vec![0x3c00_3c00u32; n * eb / 4];
    let ks: Vec<Vec<u32>> = (0..seqs * layers).map(|_| cache(kv * hd * c)).collect();
    let vs: Vec<Vec<u32>> = (0..seqs * layers).map(|_| cache(kv * c * hd)).collect();
    let q = vec![0.01f32; kv * g * hd];
    let mask = vec![0f32; g * t];
    let lead = [kv];
    let (qs, ksd, vsd, ms) = (
        [(g * hd) as isize, hd as isize, 1],
        [(hd * c) as isize, c as isize, 1],
        [(c * hd) as isize, hd as isize, 1],
        [0, t as isize, 1],
    );
    let call = |i: usize, out: &mut [f32]| {
        let p = Problem {
            lead: &lead,
            m: g,
            d: hd,
            t,
            e: hd,
            q: Operand {
                ptr: q.as_ptr().cast(),
                elem: Elem::F32,
                strides: &qs,
            },
            k: Operand {
                ptr: ks[i].as_ptr().cast(),
                elem,
                strides: &ksd,
            },
            v: Operand {
                ptr: vs[i].as_ptr().cast(),
                elem,
                strides: &vsd,
            },
            mask: Operand {
                ptr: mask.as_ptr().cast(),
                elem: Elem::F32,
                strides: &ms,
            },
            scale: 0.125,
            numerics: Numerics {
                fma: true,
                fast_exp: true,
            },
        };
        // SAFETY: every operand is a live buffer of the shapes above; `out`
        // holds kv·g·hd floats.
        unsafe { run(&p, out.as_mut_ptr(), 0..kv) };
    };
    let bytes = (seqs * layers * 2 * kv * hd * t * eb) as f64;
    let mut best = f64::MAX;
    // `ATTN_FLUSH_MB=N`: N MiB written between passes, so that the caches
    // come from beyond the caches a server's weights have just streamed
    // through.
    let flush_mb: usize = std::env::var("ATTN_FLUSH_MB").map_or(0, |v| v.parse().unwrap_or(0));
    let mut junk = vec![0u8; flush_mb << 20];
    for pass in 0..20 {
        for (i, b) in junk.iter_mut().enumerate().step_by(64) {
            *b = (i + pass) as u8;
        }
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for th in 0..threads {
                let call = &call;
                s.spawn(move || {
                    let mut out = vec![0f32; kv * g * hd];
                    for i in (th..seqs * layers).step_by(threads) {
                        call(i, &mut out);
                    }
                });
            }
        });
        best = best.min(t0.elapsed().as_secs_f64());
    }
    println!(
        "seqs {seqs} T {t} {elem:?} threads {threads}: {:.2} ms, {:.1} GB/s",
        best * 1e3,
        bytes / best / 1e9
    );
}
