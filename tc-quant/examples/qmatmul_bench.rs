//! Time of `qmatmul_packed` (fast numerics) on SmolLM2-135M's weight
//! shapes (Q4_1, random blocks) at one and 16 activation rows: the median
//! of 200 calls, and (16-row weight tile × 32-element block) pairs per µs.
//! `RAYON_NUM_THREADS=2 cargo run --release -p tc-quant --example qmatmul_bench`.
use std::time::Instant;
use tc_quant::quant::{qmatmul_packed, Format, PackedWeights};

fn main() {
    println!("| weight (out × in) | rows | µs/call | tile-blocks/µs |");
    println!("|---|---|---|---|");
    for (n_out, k) in [(576usize, 576usize), (192, 576), (1536, 576), (576, 1536)] {
        shape(n_out, k);
    }
}

fn shape(n_out: usize, k: usize) {
    let nb = k / 32;
    let mut w = Vec::with_capacity(n_out * nb * 20);
    let mut seed = 12345u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..n_out * nb {
        w.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        w.extend_from_slice(&half::f16::from_f32(-0.05).to_le_bytes());
        for _ in 0..16 {
            w.push(next() as u8);
        }
    }
    let Some(p) = PackedWeights::new(Format::Q4_1, &w, n_out, k).expect("whole blocks") else {
        println!("| {n_out} × {k} | – | this host has no VNNI: weights are not packed | |");
        return;
    };
    for rows in [1usize, 16] {
        let x: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let mut y = vec![0f32; rows * n_out];
        let mut ts = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            qmatmul_packed(&p, &x, rows, &mut y).unwrap();
            ts.push(t.elapsed().as_secs_f64() * 1e6);
        }
        ts.sort_by(f64::total_cmp);
        let med = ts[ts.len() / 2];
        let blocks = (n_out / 16 * nb * rows.div_ceil(16)) as f64;
        println!(
            "| {n_out} × {k} | {rows} | {med:.1} | {:.1} |",
            blocks / med
        );
    }
}
