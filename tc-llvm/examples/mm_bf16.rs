//! Micro-benchmark of BF16 products against a kept weight packing, as a
//! BF16 linear layer runs them: the AMX tiles where the CPU has them, and
//! `vdpbf16ps` (`TC_MM_AMX=0`) or the widened path (`TC_MM_BF16=0`)
//! otherwise. Prints one table row per shape: median and range of the
//! rounds, in ms and GMAC/s.
//!
//! `cargo run --release -p tc-llvm --example mm_bf16 [THREADS]`
//! (`MM_SHAPES="m,k,n;…"` for other shapes; `MM_DTYPE=i8`: `matmul_i32`
//! products of I8 operands, on AMX-INT8 tiles or the integer GEMM;
//! `MM_DTYPE=f32`: F32 ones; `MM_DTYPE=dq`: `dq_matmul`, F32 activations
//! of k + 16 channels quantized per row against an I8 weight, 16 outlier
//! channels in F32)
use std::sync::{Arc, Mutex};
use tc_core::Dtype;
use tc_llvm::ctx::ExecCtx;
use tc_llvm::kernels::matmul::{
    matmul_i32_strided, matmul_strided, Lookup, PackCache, PackedB, ViewKey,
};

/// Keeps every packing from the first call on.
struct Keep(Mutex<Option<Arc<PackedB>>>);

impl PackCache for Keep {
    fn get(&self, _: &ViewKey) -> Lookup {
        match &*self.0.lock().unwrap() {
            Some(p) => Lookup::Hit(p.clone()),
            None => Lookup::Pack,
        }
    }
    fn put(&self, _: ViewKey, packed: Arc<PackedB>) {
        *self.0.lock().unwrap() = Some(packed);
    }
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .unwrap();
    let ctx = ExecCtx::new(threads, threads > 1);
    let bits = |i: usize, m: usize| half::bf16::from_f32(((i % m) as f32 - 3.0) * 0.125).to_bits();
    println!("| m × k × n | ms (median [range]) | GMAC/s |");
    println!("|---|---|---|");
    // `MM_SHAPES="m,k,n;m,k,n"` replaces the default shapes (MiniLM's
    // products at 32 × 16 and 8 × 128 tokens, a 16-row decode step's).
    let shapes: Vec<(usize, usize, usize)> = match std::env::var("MM_SHAPES") {
        Ok(v) => v
            .split(';')
            .map(|t| {
                let d: Vec<usize> = t.split(',').map(|x| x.trim().parse().unwrap()).collect();
                (d[0], d[1], d[2])
            })
            .collect(),
        Err(_) => vec![
            (512, 384, 1152),
            (512, 384, 1536),
            (512, 1536, 384),
            (1024, 384, 1536),
            (1024, 1536, 384),
            (16, 576, 1536),
            (64, 384, 384),
        ],
    };
    for (m, k, n) in shapes {
        // Two BF16 elements per F32 one, so that every dtype has room.
        let a: Vec<u16> = (0..2 * m * k).map(|i| bits(i, 7)).collect();
        // `MM_COLD=W`: W weights taken in turn, as a model's layers
        // take theirs, so each call's B (and output) comes from beyond L2.
        let w = std::env::var("MM_COLD").map_or(1, |v| v.parse().unwrap());
        let bs: Vec<Vec<u16>> = (0..w)
            .map(|s| (0..2 * k * n).map(|i| bits(i + s, 5)).collect())
            .collect();
        // Outputs in turn too, as a model's pool hands out buffers that
        // have left the caches.
        let mut cs = vec![vec![0u32; m * n]; w];
        let dtype = std::env::var("MM_DTYPE").unwrap_or_default();
        let i8 = dtype == "i8";
        let dq = dtype == "dq";
        let x: Vec<f32> = (0..m * (k + 16)).map(|i| (i % 13) as f32 - 6.0).collect();
        let (scale, outliers) = (vec![0.01f32; n], vec![0.5f32; 16 * n]);
        let mut y = vec![0f32; m * n];
        let dt = if dtype == "f32" {
            Dtype::F32
        } else {
            Dtype::BF16
        };
        let keeps: Vec<Keep> = (0..w).map(|_| Keep(Mutex::new(None))).collect();
        let macs = (m * k * n) as f64;
        let reps = ((2e9 / macs) as usize).clamp(5, 500);
        let mut rounds = Vec::new();
        for r in 0..6 {
            let t = std::time::Instant::now();
            for i in 0..reps {
                let (b, keep) = (&bs[i % w], &keeps[i % w]);
                // SAFETY: contiguous `[m, k]`, `[k, n]` and `[m, n]`
                // buffers of at least those sizes (two bytes an operand
                // element, four an output one), strides to match.
                if dq {
                    let o = tc_llvm::kernels::matmul::DqOperands {
                        x: &x,
                        // SAFETY: any byte is an I8 value; `b` holds `k·n`.
                        w: unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), k * n) },
                        scale: &scale,
                        outliers: &outliers,
                        rows: m,
                        k,
                        j: 16,
                        n,
                    };
                    tc_llvm::kernels::matmul::dq_matmul(&o, &mut y, &ctx, Some(keep)).unwrap();
                    continue;
                }
                unsafe {
                    if i8 {
                        matmul_i32_strided(
                            a.as_ptr().cast(),
                            &[k as isize, 1],
                            b.as_ptr().cast(),
                            &[n as isize, 1],
                            cs[i % w].as_mut_ptr().cast(),
                            &[m, k],
                            &[k, n],
                            &ctx,
                            Some(keep),
                        )
                    } else {
                        matmul_strided(
                            dt,
                            a.as_ptr().cast(),
                            &[k as isize, 1],
                            b.as_ptr().cast(),
                            &[n as isize, 1],
                            cs[i % w].as_mut_ptr().cast(),
                            &[m, k],
                            &[k, n],
                            &ctx,
                            Some(keep),
                        )
                    }
                }
                .unwrap();
            }
            if r > 0 {
                rounds.push(t.elapsed().as_secs_f64() * 1e3 / reps as f64);
            }
        }
        rounds.sort_by(f64::total_cmp);
        let med = rounds[rounds.len() / 2];
        println!(
            "| {m} × {k} × {n} | {med:.3} [{:.3}–{:.3}] | {:.0} |",
            rounds[0],
            rounds[rounds.len() - 1],
            macs / med / 1e6
        );
    }
}
