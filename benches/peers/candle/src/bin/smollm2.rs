//! candle side of the SmolLM2 peer benchmark (`scripts/llm-peer-bench.sh`):
//! SmolLM2-135M-Instruct from its Q4_1 GGUF file through
//! `candle_transformers::models::quantized_llama::ModelWeights::from_gguf`
//! (CPU), on prompt token ids given by the caller (the script takes them
//! from tc's `examples/smollm2.rs --print-ids`, so both engines run the same
//! ids). Each round: a fresh KV cache, prefill of the whole prompt in one
//! forward call, then greedy (argmax) decoding of `DECODE` tokens, the first
//! from the prefill's logits and each later one from a one-token forward
//! call, as tc's example does.
//!
//! One untimed warm-up round, then `ROUNDS` timed rounds, all in this
//! process. One JSON line per timed round with prefill and decode tokens/s
//! (decode: `DECODE - 1` forward steps over the time from the end of the
//! prefill to the last token, as tc's example counts), and a last line with
//! the generated ids and their text (decoded with candle's GGUF tokenizer).
//!
//! `smollm2 MODEL.gguf IDS ROUNDS [DECODE]`: IDS comma-separated, or `-` to
//! read them from stdin; DECODE defaults to 64. Threads: candle's,
//! `RAYON_NUM_THREADS`.

use std::io::Read;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::{Device, Tensor, D};
use candle_transformers::models::quantized_llama::ModelWeights;

const USAGE: &str = "usage: smollm2 MODEL.gguf IDS|- ROUNDS [DECODE]";

fn parse_ids(text: &str) -> Result<Vec<u32>> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().with_context(|| format!("bad token id `{s}`")))
        .collect()
}

fn argmax(logits: &Tensor) -> Result<u32> {
    Ok(logits.squeeze(0)?.argmax(D::Minus1)?.to_scalar::<u32>()?)
}

struct Round {
    prefill_s: f64,
    decode_s: f64,
    generated: Vec<u32>,
}

fn round(model: &mut ModelWeights, prompt: &[u32], decode: usize, dev: &Device) -> Result<Round> {
    model.clear_kv_cache();
    let input = Tensor::new(prompt, dev)?.unsqueeze(0)?;
    let t0 = Instant::now();
    let mut logits = model.forward(&input, 0)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut generated = Vec::with_capacity(decode);
    let mut pos = prompt.len();
    loop {
        let next = argmax(&logits)?;
        generated.push(next);
        if generated.len() == decode {
            break;
        }
        let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
        logits = model.forward(&input, pos)?;
        pos += 1;
    }
    Ok(Round {
        prefill_s,
        decode_s: t1.elapsed().as_secs_f64(),
        generated,
    })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 || args.len() > 4 {
        bail!(USAGE);
    }
    let ids_text = if args[1] == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        args[1].clone()
    };
    let prompt = parse_ids(&ids_text)?;
    let rounds: usize = args[2].parse().context(USAGE)?;
    let decode: usize = args.get(3).map_or(Ok(64), |d| d.parse()).context(USAGE)?;
    ensure!(
        !prompt.is_empty() && decode > 0,
        "empty prompt or nothing to decode"
    );

    let dev = Device::Cpu;
    let t0 = Instant::now();
    let mut file = std::fs::File::open(&args[0]).with_context(|| args[0].clone())?;
    let content = gguf_file::Content::read(&mut file)?;
    let tokenizer = tokenizers::Tokenizer::from_gguf(&content)?;
    let mut model = ModelWeights::from_gguf(content, &mut file, &dev)?;
    let load_s = t0.elapsed().as_secs_f64();
    let threads = candle_core::utils::get_num_threads();

    // Warm-up: first-touch of the weights, candle's lazily repacked x86
    // weight layouts, the causal mask of this prompt length.
    let first = round(&mut model, &prompt, decode, &dev)?;
    for r in 1..=rounds {
        let x = round(&mut model, &prompt, decode, &dev)?;
        ensure!(
            x.generated == first.generated,
            "round {r} generated other tokens than the warm-up"
        );
        println!(
            "{{\"system\": \"candle\", \"threads\": {threads}, \"round\": {r}, \
             \"prefill_tokens\": {}, \"prefill_s\": {:.6}, \"prefill_tok_s\": {:.3}, \
             \"decode_tokens\": {}, \"decode_s\": {:.6}, \"decode_tok_s\": {:.3}}}",
            prompt.len(),
            x.prefill_s,
            prompt.len() as f64 / x.prefill_s,
            x.generated.len(),
            x.decode_s,
            (x.generated.len() - 1) as f64 / x.decode_s.max(1e-9),
        );
    }
    let text = tokenizer
        .decode(&first.generated, true)
        .map_err(anyhow::Error::msg)?;
    println!(
        "{}",
        serde_json::json!({
            "system": "candle",
            "threads": threads,
            "load_s": load_s,
            "generated_ids": first.generated,
            "text": text,
        })
    );
    Ok(())
}
