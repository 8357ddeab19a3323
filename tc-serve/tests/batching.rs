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
                    tokens: &[tok],
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
                tokens: std::slice::from_ref(&toks[i]),
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
                        tokens: &[next],
                        pos: p.len() + s,
                    }])
                    .unwrap();
            }
        }
        assert_eq!(got, want, "prompt {i}");
    }
}

/// A step that mixes prefill chunks with decode rows (how the scheduler
/// admits a request while others decode) gives every sequence the bits
/// it gets alone: a decoding sequence's logits equal its solo decode
/// step's, and a prefilling one's its solo chunk's, whatever the chunk
/// lengths beside it. Also the caches: the next solo step from each
/// batched cache equals the next step from the solo cache.
#[test]
fn a_step_mixing_prefill_chunks_and_decode_rows_equals_each_alone_bit_for_bit() {
    mixed_step_equals_each_alone(&loaded().model);
}

/// The same with an f16 KV cache: each sequence's rows of the step's keys
/// and values are rounded once for the whole step, then copied into its
/// own cache at its own positions, which must be the bits a solo pass
/// writes.
#[test]
fn a_mixed_step_over_f16_caches_equals_each_alone_bit_for_bit() {
    loaded();
    let (mut m, _file) = Model::load(&common::smollm2_path()).expect("load the GGUF");
    m.kv_dtype = tc_serve::llama::model::KvDtype::F16;
    mixed_step_equals_each_alone(&m);
}

fn mixed_step_equals_each_alone(m: &Model) {
    let prompts = prompts();
    let bits = |t: &tc::Tensor| {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|f| f.to_bits())
            .collect::<Vec<_>>()
    };
    // Sequence 0 decodes (its prompt prefilled); the others prefill a
    // chunk of their prompt after a first chunk of `cut` tokens, chunks of
    // different lengths.
    let cuts = [3usize, 1];
    let room = prompts.iter().map(Vec::len).max().unwrap() + 2;
    let mut solo: Vec<_> = prompts.iter().map(|_| m.cache(room).unwrap()).collect();
    let first = m.forward(&mut solo[0], &prompts[0], 0).unwrap();
    let tok0 = Sampler::new(SamplerConfig::default()).sample(&first.to_vec::<f32>().unwrap());
    for (i, &cut) in cuts.iter().enumerate() {
        m.forward(&mut solo[i + 1], &prompts[i + 1][..cut], 0)
            .unwrap();
    }
    // Copies with storage of their own (a clone shares it).
    let mut batched: Vec<_> = solo
        .iter()
        .map(|c| m.grow_cache(c, room).unwrap())
        .collect();
    let mut want = vec![bits(
        &m.step(&mut [StepSeq {
            cache: &mut solo[0],
            tokens: &[tok0],
            pos: prompts[0].len(),
        }])
        .unwrap(),
    )];
    for (i, &cut) in cuts.iter().enumerate() {
        let p = &prompts[i + 1];
        want.push(bits(&m.forward(&mut solo[i + 1], &p[cut..], cut).unwrap()));
    }
    let tok0 = [tok0];
    let mut it = batched.iter_mut();
    let mut step = vec![StepSeq {
        cache: it.next().unwrap(),
        tokens: &tok0,
        pos: prompts[0].len(),
    }];
    for ((c, p), &cut) in it.zip(&prompts[1..]).zip(&cuts) {
        step.push(StepSeq {
            cache: c,
            tokens: &p[cut..],
            pos: cut,
        });
    }
    let got = bits(&m.step(&mut step).unwrap());
    let v = got.len() / want.len();
    for (i, w) in want.iter().enumerate() {
        assert!(
            got[i * v..(i + 1) * v] == w[..],
            "sequence {i}: the mixed step's logits differ from its solo pass"
        );
    }
    // The caches hold the same keys and values: one more solo step from
    // each gives the same bits.
    for (i, (s, b)) in solo.iter_mut().zip(batched.iter_mut()).enumerate() {
        let pos = if i == 0 {
            prompts[0].len() + 1
        } else {
            prompts[i].len()
        };
        let next = |c: &mut [(tc::Tensor, tc::Tensor)]| {
            bits(
                &m.step(&mut [StepSeq {
                    cache: c,
                    tokens: &[7],
                    pos,
                }])
                .unwrap(),
            )
        };
        assert!(
            next(s) == next(b),
            "sequence {i}: the caches differ after the mixed step"
        );
    }
}
