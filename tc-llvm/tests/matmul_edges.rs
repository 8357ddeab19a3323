//! The edge-row kernels (the last row panel when m is not a multiple of
//! MR, computed straight into C by a kernel of exactly that many rows) are
//! bit-identical to the full kernel run into a scratch tile, on both
//! blockings, with A packed or read in place, and with threads; and match
//! the interpreter within tolerance through the JIT. One test in its own
//! binary: it toggles process-wide switches.
mod util;

use tc_core::ir::Op;
use tc_core::Dtype;
use tc_llvm::kernels::matmul::{set_a_in_place, set_edge_kernels, set_stream_b};
use tc_llvm::JitOptions;
use tc_runtime::contract::Arg;
use util::*;

fn product(m: usize, n: usize, k: usize, seed: u64, threads: usize) -> Vec<f32> {
    guarded_sgemm(m, n, k, seed, threads).0
}

#[test]
fn edge_row_kernels_match_the_tile_path_bitwise() {
    // m: below MR, MR ± 1, multiples of 16/32/128 (MiniLM and GPT-2
    // sequence lengths), past the streamed-path threshold (140) and
    // across row blocks; n: whole 32-wide panels and a ragged last one;
    // k: one and several K-blocks.
    let ms = [
        1usize, 2, 5, 13, 15, 16, 29, 32, 64, 127, 128, 141, 150, 300,
    ];
    for (i, &m) in ms.iter().enumerate() {
        for &(n, k) in &[(64usize, 37usize), (96, 300), (45, 64)] {
            for threads in [1, 0] {
                // The streamed path's edge kernels read A packed, or in
                // place (where they are its only kernels for those rows).
                for (stream, in_place) in [(true, false), (true, true), (false, false)] {
                    set_stream_b(stream);
                    set_a_in_place(false);
                    set_edge_kernels(false);
                    let tile = product(m, n, k, 100 + i as u64, threads);
                    set_edge_kernels(true);
                    set_a_in_place(in_place);
                    let edge = product(m, n, k, 100 + i as u64, threads);
                    set_stream_b(true);
                    set_a_in_place(true);
                    let same = tile
                        .iter()
                        .zip(&edge)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "m={m} n={n} k={k} threads={threads} stream={stream} in_place={in_place}"
                    );
                    assert!(edge.iter().all(|x| x.is_finite()), "every element written");
                }
            }
        }
    }
    // Through the JIT, against the interpreter.
    let mut b = builder("mm");
    let x = b.param("a", tt(Dtype::F32, &["M", "K"]));
    let w = b.param("b", tt(Dtype::F32, &["K", "N"]));
    b.returns(tt(Dtype::F32, &["M", "N"]));
    let r = b.op(Op::Matmul(x, w));
    let f = b.finish(r);
    let mut rng = Rng(7);
    for m in [3usize, 16, 33] {
        let args: Vec<Arg> = vec![
            random(&mut rng, Dtype::F32, &[m, 200], false).into(),
            random(&mut rng, Dtype::F32, &[200, 64], false).into(),
        ];
        let got = jit(&f, &args, JitOptions::default());
        let want = interp(&f, &args).unwrap();
        assert_close(&format!("m={m}"), &got, &want, 1e-4, 1e-3);
    }
}
