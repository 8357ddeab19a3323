//! The fused attention kernel on an encoder's shapes (MiniLM: 12 heads of
//! 32, every position attending to every other), its operands laid out
//! as the model's views give them (heads interleaved in `[B, S, 384]`
//! rows, the keys transposed): median and range of 7 rounds, and the
//! multiply-adds per second of its two products.
//!
//! `cargo run --release -p tc-llvm --example attention_prefill -- [B] [S] [exact|fma]`
//! (defaults 8 128 exact: the interpreter's rounding, as the model runs it).
use std::time::Instant;
use tc_llvm::kernels::attention::{run, Elem, Numerics, Operand, Problem};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let b: usize = a.get(1).map_or(8, |s| s.parse().unwrap());
    let s: usize = a.get(2).map_or(128, |s| s.parse().unwrap());
    let fma = a.get(3).is_some_and(|m| m == "fma");
    let (h, d) = (12usize, 32usize);
    let hidden = h * d;
    let x: Vec<f32> = (0..b * s * hidden)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    let mask = vec![0f32; b * s];
    let lead = [b, h];
    let row = (s * hidden) as isize;
    // q, v: [B, H, S, D] views of [B, S, H·D]; k: [B, H, D, S].
    let (qs, ks, ms) = (
        [row, d as isize, hidden as isize, 1],
        [row, d as isize, 1, hidden as isize],
        [s as isize, 0, 0, 1],
    );
    let p = Problem {
        lead: &lead,
        m: s,
        d,
        t: s,
        e: d,
        q: Operand {
            ptr: x.as_ptr().cast(),
            elem: Elem::F32,
            strides: &qs,
        },
        k: Operand {
            ptr: x.as_ptr().cast(),
            elem: Elem::F32,
            strides: &ks,
        },
        v: Operand {
            ptr: x.as_ptr().cast(),
            elem: Elem::F32,
            strides: &qs,
        },
        mask: Operand {
            ptr: mask.as_ptr().cast(),
            elem: Elem::F32,
            strides: &ms,
        },
        scale: 0.176_776_7,
        numerics: Numerics {
            fma,
            fast_exp: true,
        },
    };
    let mut out = vec![0f32; b * h * s * d];
    let mut rounds = Vec::new();
    for _ in 0..8 {
        let t0 = Instant::now();
        for _ in 0..5 {
            // SAFETY: every operand addresses inside `x` or `mask` for
            // these shapes; `out` holds B·H·S·D floats.
            unsafe { run(&p, out.as_mut_ptr(), 0..b * h) };
        }
        rounds.push(t0.elapsed().as_secs_f64() * 1e3 / 5.0);
    }
    rounds.remove(0);
    rounds.sort_by(f64::total_cmp);
    let med = rounds[rounds.len() / 2];
    let macs = (2 * b * h * s * s * d) as f64;
    println!(
        "B {b} S {s} ({}): {med:.2} ms [{:.2}–{:.2}], {:.1} GMAC/s",
        if fma { "fma" } else { "exact" },
        rounds[0],
        rounds[rounds.len() - 1],
        macs / med / 1e6
    );
}
