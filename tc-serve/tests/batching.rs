//! Batching does not change results, checked on the model itself: a
//! batched decode step's logits equal, bit for bit, the same sequences'
//! one-at-a-time steps (so the quantized matmuls, the norms and `mix`
//! compute each row the same whatever the row count), and the decode path
//! the server and the smollm2 example share gives the reference's greedy
//! tokens.

use crate::common;

use std::sync::OnceLock;

use tc_serve::llama::model::{Model, StepSeq};
use tc_serve::llama::sampler::{Sampler, SamplerConfig};

struct Loaded {
    model: Model,
    _file: tc::runtime::gguf::GgufFile,
}

fn loaded() -> &'static Loaded {
    static L: OnceLock<Loaded> = OnceLock::new();
    L.get_or_init(|| {
        let jit = tc::llvm::Jit::global();
        let mut cfg = jit.config();
        cfg.specialize_after = u32::MAX;
        cfg.options.fast_quant = false;
        jit.set_config(cfg);
        let (model, file) = Model::load(&common::smollm2_path()).expect("load the GGUF");
        Loaded { model, _file: file }
    })
}

fn prompts() -> Vec<Vec<u32>> {
    let text =
        std::fs::read_to_string(common::root().join("tests/fixtures/smollm2/reference.json"))
            .expect("fixture");
    let r: serde_json::Value = serde_json::from_str(&text).expect("json");
    r["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| {
            p["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|x| x.as_u64().expect("id") as u32)
                .collect()
        })
        .collect()
}

#[test]
fn a_batched_step_equals_each_sequence_alone_bit_for_bit() {
    let m = &loaded().model;
    let prompts = prompts();
    let steps = 4;
    // Each sequence alone, and all together, from the same prefill.
    let mut alone = Vec::new();
    let mut caches = Vec::new();
    let mut firsts = Vec::new();
    for p in &prompts {
        let mut cache = m.cache(p.len() + steps + 1).unwrap();
        let logits = m
            .forward(&mut cache, p, 0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        firsts.push(Sampler::new(SamplerConfig::default()).sample(&logits));
        caches.push(cache);
    }
    let mut solo_caches = caches.clone();
    let mut batch_caches: Vec<_> = caches
        .iter()
        .map(|c| m.grow_cache(c, c[0].0.shape()[2]).unwrap())
        .collect();
    for (i, p) in prompts.iter().enumerate() {
        let mut tok = firsts[i];
        let mut rows = Vec::new();
        for s in 0..steps {
            let l = m
                .step(&mut [StepSeq {
                    cache: &mut solo_caches[i],
                    token: tok,
                    pos: p.len() + s,
                }])
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            tok = Sampler::new(SamplerConfig::default()).sample(&l);
            rows.push(l);
        }
        alone.push(rows);
    }
    let mut toks = firsts.clone();
    for s in 0..steps {
        let mut batch: Vec<StepSeq<'_>> = batch_caches
            .iter_mut()
            .enumerate()
            .map(|(i, c)| StepSeq {
                cache: c,
                token: toks[i],
                pos: prompts[i].len() + s,
            })
            .collect();
        let l = m.step(&mut batch).unwrap().to_vec::<f32>().unwrap();
        let v = l.len() / prompts.len();
        for (i, row) in l.chunks(v).enumerate() {
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(row) == bits(&alone[i][s]),
                "sequence {i}, step {s}: batched logits differ from the solo run"
            );
            toks[i] = Sampler::new(SamplerConfig::default()).sample(row);
        }
    }
}

/// The decode loop of `examples/smollm2.rs` (prefill with `forward`, then
/// one-sequence `step`s, greedy sampling) gives the reference's greedy
/// tokens: the server's decode step is this one, batched.
#[test]
fn the_shared_decode_path_gives_the_reference_greedy_tokens() {
    let m = &loaded().model;
    let text =
        std::fs::read_to_string(common::root().join("tests/fixtures/smollm2/reference.json"))
            .expect("fixture");
    let r: serde_json::Value = serde_json::from_str(&text).expect("json");
    for (i, p) in prompts().iter().enumerate() {
        let want: Vec<u32> = r["prompts"][i]["greedy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let mut cache = m.cache(p.len() + want.len()).unwrap();
        let mut sampler = Sampler::new(SamplerConfig::default());
        let mut logits = m.forward(&mut cache, p, 0).unwrap();
        let mut got = Vec::new();
        for s in 0..want.len() {
            let next = sampler.sample(&logits.to_vec::<f32>().unwrap());
            got.push(next);
            if s + 1 < want.len() {
                logits = m
                    .step(&mut [StepSeq {
                        cache: &mut cache,
                        token: next,
                        pos: p.len() + s,
                    }])
                    .unwrap();
            }
        }
        assert_eq!(got, want, "prompt {i}");
    }
}
