//! A ragged last column panel (n not a multiple of the 32-wide tile, e.g.
//! attention's `S × S` scores at 10 or 16 tokens) is written by the
//! kernels' masked forms straight into C: bit-identical to the kernel run
//! into a scratch tile and copied, on both blockings, with A packed or
//! read in place, with edge rows, across K-blocks (the masked add into
//! C), with threads; and never a write past the tile's columns (C sits in
//! a larger buffer whose tail must come back untouched). One test in its
//! own binary: it toggles process-wide switches.
mod util;

use tc_llvm::kernels::matmul::{set_a_in_place, set_column_kernels, set_stream_b};
use util::guarded_sgemm;

#[test]
fn masked_column_kernels_match_the_tile_path_bitwise() {
    // n: every width of one and two vectors, then ragged panels after
    // whole ones (GPT-2's vocabulary 50257 = 1570·32 + 17 in small); m:
    // one row, an edge, a whole 14-row panel, in-place row counts, the
    // blocked path; k: one K-block and two (the second adds into C).
    let ns: Vec<usize> = (1..=40).chain([47, 63, 65, 100, 529]).collect();
    let cases = [
        (1usize, 7usize),
        (5, 300),
        (14, 33),
        (16, 32),
        (29, 520),
        (150, 70),
    ];
    for (ci, &(m, k)) in cases.iter().enumerate() {
        for &n in &ns {
            for threads in [1, 0] {
                for (stream, in_place) in [(true, false), (true, true), (false, false)] {
                    let seed = (ci * 1000 + n) as u64;
                    set_stream_b(stream);
                    set_a_in_place(in_place);
                    set_column_kernels(false);
                    let (tile, ..) = guarded_sgemm(m, n, k, seed, threads);
                    set_column_kernels(true);
                    let (masked, ..) = guarded_sgemm(m, n, k, seed, threads);
                    set_stream_b(true);
                    set_a_in_place(true);
                    let same = tile
                        .iter()
                        .zip(&masked)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "m={m} n={n} k={k} threads={threads} stream={stream} in_place={in_place}"
                    );
                    assert!(
                        masked.iter().all(|x| x.is_finite()),
                        "every element written"
                    );
                }
            }
        }
    }
}
