//! Fast and exact `qmatmul` on real SmolLM2-135M weights with activations
//! shaped like the model's (RMSNorm'd: mostly N(0, 1), a few outlier
//! channels ×50–×300, exact zeros, an all-zero block), on every kernel
//! path, against the f64 dot of the dequantized weights and the bounds in
//! `tc_quant::quant`'s docs. Skips when the model has not been fetched.

use crate::common;

use common::{normal, Rng};
use tc_quant::{
    available_paths, dequantize, qmatmul_packed, qmatmul_with, Format, Gguf, Numerics,
    PackedWeights, Path,
};

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
);

const U: f64 = 1.0 / (1u64 << 24) as f64;

fn gamma(n: usize) -> f64 {
    n as f64 * U / (1.0 - n as f64 * U)
}

/// `rows × k` activations like RMSNorm outputs: N(0, 1), the same few
/// outlier channels scaled ×50..×300 in every row, ~10% exact zeros, and
/// one all-zero 32-block per row.
fn real_like_acts(rng: &mut Rng, rows: usize, k: usize) -> Vec<f32> {
    let outliers: Vec<(usize, f32)> = (0..4)
        .map(|i| {
            let ch = (rng.next() % k as u64) as usize;
            let mag = [50.0, 120.0, 300.0, -250.0][i];
            (ch, mag)
        })
        .collect();
    let zero_blk = (rng.next() % (k as u64 / 32)) as usize;
    let mut x = Vec::with_capacity(rows * k);
    for _ in 0..rows {
        let mut row: Vec<f32> = (0..k)
            .map(|_| {
                if rng.next().is_multiple_of(10) {
                    0.0
                } else {
                    normal(rng)
                }
            })
            .collect();
        for &(ch, mag) in &outliers {
            row[ch] = mag * (1.0 + 0.1 * rng.unit());
        }
        row[zero_blk * 32..zero_blk * 32 + 32].fill(0.0);
        x.extend(row);
    }
    x
}

fn exact_bound(x: &[f32], w: &[f32]) -> f64 {
    let s: f64 = x
        .iter()
        .zip(w)
        .map(|(&a, &b)| (a as f64 * b as f64).abs())
        .sum();
    gamma(x.len()) * s
}

fn fast_bound(blk: usize, x: &[f32], w: &[f32]) -> f64 {
    let g = gamma(x.len() / blk + 6);
    let mut total = 0.0;
    for (xb, wb) in x.chunks(blk).zip(w.chunks(blk)) {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
        let d = amax / 127.0 * (1.0 + 2.0 * U);
        for (&a, &b) in xb.iter().zip(wb) {
            total += (b as f64).abs() * ((0.5 + 1.0 / 32768.0) * d + g * ((a as f64).abs() + d));
        }
    }
    total
}

/// Runs `name` (first `max_rows` weight rows) with `rows` activation rows
/// on every path and both numerics.
fn check_tensor(g: &Gguf<'_>, name: &str, max_rows: usize, rows: usize, seed: u64) {
    let t = g.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
    let f = Format::from_ggml(t.kind).expect("quantized");
    let shape = t.shape_row_major();
    let (n_out, k) = (shape[0].min(max_rows), shape[1]);
    let row_bytes = k / f.block_elems() * f.block_bytes();
    let w = &g.tensor_data(t)[..n_out * row_bytes];
    let mut wf = vec![0f32; n_out * k];
    dequantize(f, w, &mut wf).unwrap();
    let x = real_like_acts(&mut Rng(seed), rows, k);
    let blk = f.block_elems();
    let run = |path: Path, num: Numerics| {
        let mut y = vec![f32::NAN; rows * n_out];
        qmatmul_with(path, f, num, &x, rows, k, w, n_out, &mut y).unwrap();
        y
    };
    for num in [Numerics::Exact, Numerics::Fast] {
        let reference = run(Path::Scalar, num);
        for path in available_paths() {
            let y = run(path, num);
            for m in 0..rows {
                let xr = &x[m * k..(m + 1) * k];
                for j in 0..n_out {
                    let wr = &wf[j * k..(j + 1) * k];
                    let exact: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let got = y[m * n_out + j];
                    let err = (got as f64 - exact).abs();
                    let bound = match num {
                        Numerics::Exact => exact_bound(xr, wr),
                        Numerics::Fast => fast_bound(blk, xr, wr),
                    };
                    assert!(
                        err <= bound,
                        "{name} {path:?} {num:?} rows={rows} m={m} j={j}: \
                         got {got:e}, exact {exact:e}, err {err:e} > bound {bound:e}"
                    );
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&y) == bits(&reference),
                "{name} {path:?} {num:?} rows={rows}: differs from the scalar path"
            );
        }
        // The packed weight (where the host packs this format) too.
        if let (Numerics::Fast, Some(p)) = (num, PackedWeights::new(f, w, n_out, k).unwrap()) {
            let mut y = vec![f32::NAN; rows * n_out];
            qmatmul_packed(&p, &x, rows, &mut y).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&y) == bits(&reference),
                "{name} packed rows={rows}: differs from the scalar path"
            );
        }
    }
}

fn with_model(f: impl FnOnce(&Gguf<'_>)) {
    let Ok(bytes) = std::fs::read(MODEL) else {
        println!("skipped: model not fetched");
        return;
    };
    let g = Gguf::parse(&bytes).expect("parses");
    f(&g);
}

#[test]
fn fast_real_attn_q_q4_1() {
    with_model(|g| {
        for (i, rows) in [1, 37].into_iter().enumerate() {
            check_tensor(g, "blk.0.attn_q.weight", usize::MAX, rows, 11 + i as u64);
        }
    });
}

#[test]
fn fast_real_ffn_down_q4_1_k1536() {
    with_model(|g| {
        for (i, rows) in [1, 37].into_iter().enumerate() {
            check_tensor(g, "blk.0.ffn_down.weight", usize::MAX, rows, 21 + i as u64);
        }
    });
}

#[test]
fn fast_real_token_embd_q8_0_head() {
    with_model(|g| {
        for (i, rows) in [1, 37].into_iter().enumerate() {
            check_tensor(g, "token_embd.weight", 2048, rows, 31 + i as u64);
        }
    });
}
