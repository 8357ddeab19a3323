//! The real OpenAI Python client against the tc-serve binary:
//! `scripts/openai-client-test.sh` (a pinned venv under target/py-openai,
//! created on first use) runs `scripts/openai_client_test.py`. The greedy
//! answer the script must see is computed here by the smollm2 example's
//! own decode loop (`examples/smollm2.rs`: prefill with `forward`, then
//! one-sequence `step`s, greedy, streamed through `StreamDecoder`).

use crate::common;

use std::process::Command;

use tc_serve::llama::model::{tokenizer_parts, Model, StepSeq};
use tc_serve::llama::sampler::{Sampler, SamplerConfig};
use tc_serve::llama::tokenizer::{ChatTokenizer, StreamDecoder};

/// What `cargo run --example smollm2 -- --max-tokens <n> <message>` prints
/// (without its final newline).
fn example_greedy(message: &str, max_tokens: usize) -> String {
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.specialize_after = u32::MAX;
    cfg.options.fast_quant = false;
    jit.set_config(cfg);
    let (m, file) = Model::load(&common::smollm2_path())
        .map_err(|e| e.to_string())
        .unwrap();
    let tok = ChatTokenizer::from_parts(tokenizer_parts(&file).map_err(|e| e.to_string()).unwrap())
        .unwrap();
    let text = tok.apply_chat_template(&[("user", message)], true).unwrap();
    let ids = tok.encode(&text).unwrap();
    let mut cache = m.cache(ids.len() + max_tokens).unwrap();
    let mut sampler = Sampler::new(SamplerConfig::default());
    let mut stream = StreamDecoder::new();
    let mut out = String::new();
    let mut logits = m.forward(&mut cache, &ids, 0).unwrap();
    let (mut generated, mut pos) = (0, ids.len());
    while generated < max_tokens {
        let next = sampler.sample(&logits.to_vec::<f32>().unwrap());
        generated += 1;
        if next == tok.eos() {
            break;
        }
        out.push_str(&stream.push(&tok, next).unwrap());
        if generated == max_tokens {
            break;
        }
        logits = m
            .step(&mut [StepSeq {
                cache: &mut cache,
                tokens: &[next],
                pos,
            }])
            .unwrap();
        pos += 1;
    }
    out.push_str(&stream.finish());
    out
}

#[test]
fn the_openai_python_client_passes_its_checks() {
    let message = "Give me three tips for staying healthy.";
    let max_tokens = 48;
    let expect = serde_json::json!({
        "message": message,
        "max_tokens": max_tokens,
        "text": example_greedy(message, max_tokens),
    });
    let dir = common::root().join("target/tmp");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("openai-expect-{}.json", std::process::id()));
    std::fs::write(&path, expect.to_string()).unwrap();
    let out = Command::new("bash")
        .arg(common::root().join("scripts/openai-client-test.sh"))
        .env("TC_SERVE_BIN", env!("CARGO_BIN_EXE_tc-serve"))
        .env("TC_EXPECT_GREEDY", &path)
        .output()
        .expect("run scripts/openai-client-test.sh");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the OpenAI client checks failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("checks passed"), "{stdout}\n{stderr}");
}
