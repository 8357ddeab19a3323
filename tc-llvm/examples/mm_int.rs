//! Micro-benchmark of the integer matmul: the generated IR kernels of
//! `tc_llvm::kernels::matmul_int` (1 thread, and the default kernel on the rayon
//! pool) against the scalar i64 triple loop they replaced (kept here as the
//! baseline), square n × n × n products; GOP/s counts 2·n³ operations.
//! `cargo run --release -p tc-llvm --example mm_int [n ...]` (default 256 512).
use std::time::Instant;

use tc_core::Dtype;
use tc_llvm::kernels::matmul_int::{kernel_for, matmul_int_using, pair_available, IntKernel};
use tc_runtime::cast;

/// The former `d if d.is_int()` branch of `tc_llvm::kernels::matmul::matmul`, verbatim.
#[allow(clippy::manual_is_multiple_of)]
#[allow(clippy::too_many_arguments)]
unsafe fn scalar(
    d: Dtype,
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
) {
    let (na, nb, nc) = (m * k, k * n, m * n);
    let rd = |ptr: *const u8, i: usize| -> i64 {
        match d {
            Dtype::I64 => (ptr as *const i64).add(i).read_unaligned(),
            Dtype::I32 => (ptr as *const i32).add(i).read_unaligned() as i64,
            Dtype::I16 => (ptr as *const i16).add(i).read_unaligned() as i64,
            Dtype::I8 => *(ptr as *const i8).add(i) as i64,
            _ => {
                let byte = *ptr.add(i / 2);
                let nib = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
                (((nib as i8) << 4) >> 4) as i64
            }
        }
    };
    let mut acc = vec![0i64; n];
    for p in 0..batch {
        for i in 0..m {
            acc.iter_mut().for_each(|x| *x = 0);
            for l in 0..k {
                let x = rd(a, p * na + i * k + l);
                for (j, s) in acc.iter_mut().enumerate() {
                    *s = s.wrapping_add(x.wrapping_mul(rd(b, p * nb + l * n + j)));
                }
            }
            for (j, s) in acc.iter().enumerate() {
                let v = cast::wrap_int(*s, d);
                let idx = p * nc + i * n + j;
                match d {
                    Dtype::I64 => (out as *mut i64).add(idx).write_unaligned(v),
                    Dtype::I32 => (out as *mut i32).add(idx).write_unaligned(v as i32),
                    Dtype::I16 => (out as *mut i16).add(idx).write_unaligned(v as i16),
                    Dtype::I8 => *(out as *mut i8).add(idx) = v as i8,
                    _ => {
                        let byte = out.add(idx / 2);
                        let nib = (v as u8) & 0xF;
                        *byte = if idx % 2 == 0 {
                            (*byte & 0xF0) | nib
                        } else {
                            (*byte & 0x0F) | (nib << 4)
                        };
                    }
                }
            }
        }
    }
}

/// Best of `reps` runs, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![256, 512]
    } else {
        sizes
    };
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut byte = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u8
    };
    for &n in &sizes {
        for dt in [Dtype::I8, Dtype::I32, Dtype::I16, Dtype::I4, Dtype::I64] {
            let bytes = dt.storage_bytes(n * n);
            let a: Vec<u8> = (0..bytes).map(|_| byte()).collect();
            let b: Vec<u8> = (0..bytes).map(|_| byte()).collect();
            let mut want = vec![0u8; bytes];
            let mut got = vec![0u8; bytes];
            let ops = 2.0 * (n * n * n) as f64;
            let shape = [n, n];
            // SAFETY: every buffer holds an n × n matrix of `dt`.
            let t_old = best(2, || unsafe {
                scalar(dt, a.as_ptr(), b.as_ptr(), want.as_mut_ptr(), 1, n, n, n)
            });
            let mut kinds = vec![kernel_for(dt)];
            if kinds[0] == IntKernel::Pair16 {
                kinds.push(IntKernel::I32);
            }
            let mut line = format!(
                "{dt:>3} n={n:4}: scalar loop {:7.2} ms ({:6.2} GOP/s)",
                t_old * 1e3,
                ops / t_old / 1e9
            );
            for (kind, threads) in kinds.iter().map(|&k| (k, 1)).chain([(kernel_for(dt), 0)]) {
                let run = |got: &mut Vec<u8>| {
                    // SAFETY: as above.
                    unsafe {
                        matmul_int_using(
                            kind,
                            dt,
                            a.as_ptr(),
                            b.as_ptr(),
                            got.as_mut_ptr(),
                            &shape,
                            &shape,
                            &tc_llvm::ctx::ExecCtx::on_this_thread(threads),
                        )
                        .unwrap()
                    }
                };
                run(&mut got); // compile the kernel, warm the caches
                assert_eq!(
                    got, want,
                    "{dt} n={n} {kind:?}: result differs from the scalar loop"
                );
                let t = best(5, || run(&mut got));
                let who = if threads == 1 {
                    format!("{kind:?}")
                } else {
                    format!("{kind:?}, pool")
                };
                line += &format!(
                    " | {who} {:7.2} ms ({:6.2} GOP/s, {:5.1}x)",
                    t * 1e3,
                    ops / t / 1e9,
                    t_old / t
                );
            }
            println!("{line}");
        }
    }
    if !pair_available() {
        println!("(no AVX-512BW/AVX2: the narrow dtypes use the i32 kernel)");
    }
}
