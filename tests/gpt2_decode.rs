//! The decoder example (`examples/gpt2_decode.rs`) on 2 blocks and a
//! 1,000-token vocabulary: decoding with the KV cache gives the logits of a
//! full pass over the same tokens, and the steps compile no kernels once
//! every tensor fn has its generic set.
#![allow(dead_code)]

#[path = "../examples/gpt2_decode.rs"]
mod example;

use example::{forward, weights};
use tc::Tensor;

#[test]
fn cached_decode_equals_a_full_pass_and_does_not_compile_per_step() {
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.specialize_after = u32::MAX;
    jit.set_config(cfg);
    let (e, blocks) = weights(2, 1000);
    let empty = || Tensor::zeros(tc::core::Dtype::F32, &[1]);
    let mut cache: Vec<(Tensor, Tensor)> = (0..2).map(|_| (empty(), empty())).collect();
    let mut ids: Vec<i64> = vec![5, 17, 256, 999];
    let mut logits = forward(&e, &blocks, &mut cache, &ids, 0).unwrap();
    let mut compiles_after_first_step = None;
    for step in 0..4 {
        let v = logits.to_vec::<f32>().unwrap();
        let next = (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as i64;
        ids.push(next);
        logits = forward(&e, &blocks, &mut cache, &[next], ids.len() - 1).unwrap();
        let s = tc::kernel_cache_stats();
        match compiles_after_first_step {
            None => compiles_after_first_step = Some(s.compiles + s.generic_compiles),
            Some(c) => assert_eq!(s.compiles + s.generic_compiles, c, "step {step} compiled"),
        }
    }
    let mut fresh: Vec<(Tensor, Tensor)> = (0..2).map(|_| (empty(), empty())).collect();
    let full = forward(&e, &blocks, &mut fresh, &ids, 0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let stepped = logits.to_vec::<f32>().unwrap();
    assert_eq!(full.len(), 1000);
    let diff = full
        .iter()
        .zip(&stepped)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff <= 1e-4, "cached decode vs full pass: {diff}");
}
