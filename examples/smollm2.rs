//! SmolLM2-135M-Instruct from its Q4_1 GGUF file, generating text as it
//! streams: the Llama architecture written as tensor fns
//! (`tc-serve/src/llama/model.rs`, shared with the server,
//! shapes proven at build time), weights kept in their quantized blocks,
//! the tokenizer and chat template read from the file's metadata.
//!
//! `cargo run --release --example smollm2 -- "What is the capital of France?"`
//!
//! Options: `--raw` (no chat template), `--max-tokens N` (default 128),
//! `--numerics exact|fast` (qmatmul's F32 dequantization, the default, or
//! 8-bit activations as llama.cpp: faster on decode, logits within the
//! bound `tests/smollm2.rs` states), `--kv-cache f32|f16` (what the KV
//! cache stores: f32, the default, or f16 at half the memory, logits within
//! the bound `tests/smollm2.rs` states), `--temperature T`, `--top-k K`,
//! `--top-p P`, `--seed S` (greedy unless a temperature is given),
//! `--model PATH` (default: the file scripts/fetch-smollm2.sh fetches),
//! `--print-ids` (print the prompt's token ids, with BOS where the tokenizer
//! adds one, comma-separated on one stdout line, and exit without
//! generating: other engines can then run the very same ids).
//! Generated text goes to stdout, statistics to stderr.

use std::io::Write;
use std::time::Instant;

// tc-serve's model: its batched-serving helpers are unused here.
#[path = "../tc-serve/src/llama/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../tc-serve/src/llama/sampler.rs"]
mod sampler;
#[path = "../tc-serve/src/llama/tokenizer.rs"]
mod tokenizer;

use sampler::{Sampler, SamplerConfig};
use tokenizer::{ChatTokenizer, StreamDecoder};

struct Options {
    prompt: String,
    raw: bool,
    max_tokens: usize,
    fast: bool,
    kv: model::KvDtype,
    sampler: SamplerConfig,
    model: std::path::PathBuf,
    print_ids: bool,
}

fn value<T: std::str::FromStr>(
    args: &mut impl Iterator<Item = String>,
    flag: &str,
) -> Result<T, String> {
    args.next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        prompt: String::new(),
        raw: false,
        max_tokens: 128,
        fast: false,
        kv: model::KvDtype::F32,
        sampler: SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        },
        model: model::default_model_path(),
        print_ids: false,
    };
    let mut args = std::env::args().skip(1);
    let mut words = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--raw" => o.raw = true,
            "--max-tokens" => o.max_tokens = value(&mut args, &a)?,
            "--numerics" => {
                o.fast = match value::<String>(&mut args, &a)?.as_str() {
                    "fast" => true,
                    "exact" => false,
                    other => return Err(format!("--numerics exact|fast, not `{other}`")),
                }
            }
            "--kv-cache" => o.kv = value::<String>(&mut args, &a)?.parse()?,
            "--temperature" => o.sampler.temperature = value(&mut args, &a)?,
            "--top-k" => o.sampler.top_k = value(&mut args, &a)?,
            "--top-p" => o.sampler.top_p = value(&mut args, &a)?,
            "--seed" => o.sampler.seed = value(&mut args, &a)?,
            "--model" => o.model = value::<String>(&mut args, &a)?.into(),
            "--print-ids" => o.print_ids = true,
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ => words.push(a),
        }
    }
    o.prompt = if words.is_empty() {
        "What is the capital of France?".into()
    } else {
        words.join(" ")
    };
    Ok(o)
}

/// A `/proc/self/status` field in MiB (`VmHWM`: peak resident memory;
/// `RssFile`: file pages resident now — the mapped model and the LLVM
/// library's code; `RssAnon`: heap and stacks), where /proc has it.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Before any other thread runs: one heap for every thread, so that
    // what a forward pass frees on a pool worker can be given back.
    tc::runtime::resident::share_one_heap();
    let o = options()?;
    if !o.model.exists() {
        return Err(format!(
            "{} is missing: run scripts/fetch-smollm2.sh",
            o.model.display()
        )
        .into());
    }
    // Decode steps see each cache length once: they run the shape-generic
    // kernels rather than compiling a σ-specialised set per step.
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.specialize_after = u32::MAX;
    cfg.options.fast_quant = o.fast;
    jit.set_config(cfg);

    let t0 = Instant::now();
    let (mut m, file) = model::Model::load(&o.model)?;
    m.kv_dtype = o.kv;
    let mut tok = ChatTokenizer::from_parts(model::tokenizer_parts(&file)?)?;
    let text = if o.raw {
        o.prompt.clone()
    } else {
        tok.apply_chat_template(&[("user", o.prompt.as_str())], true)?
    };
    let mut ids = tok.encode(&text)?;
    if tok.add_bos() {
        ids.insert(0, tok.bos());
    }
    if o.print_ids {
        let list: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        println!("{}", list.join(","));
        return Ok(());
    }
    // The prompt is encoded: only decoding is left (the BPE model's
    // vocabulary and merges are freed).
    tok.release_encoder();
    if ids.is_empty() || ids.len() + o.max_tokens > m.context {
        return Err(format!(
            "{} prompt tokens + {} to generate do not fit the context of {}",
            ids.len(),
            o.max_tokens,
            m.context
        )
        .into());
    }
    let load_s = t0.elapsed().as_secs_f64();

    let mut cache = m.cache(ids.len() + o.max_tokens)?;
    let mut sampler = Sampler::new(o.sampler);
    let mut stream = StreamDecoder::new();
    let stdout = std::io::stdout();
    // The prefill's time includes getting the kernels ready, as when its
    // forward pass compiled them as it went: here they are all compiled
    // or linked first, and what only setup touched is given back, so that
    // the peak resident set is the weights, the KV cache and what the
    // steps use (docs/models.md, SmolLM2, "Memory"). Under fast numerics
    // this is also where the weights are packed, after the compiler's
    // pages are given back; the packing counts as load time, as before.
    let t_prefill = Instant::now();
    // SAFETY: nothing in this program writes to or unmaps a file mapping,
    // or loads a library, while this runs: its only other threads are the
    // pool's workers, idle between tc's calls.
    let ready = unsafe { m.get_ready(&mut cache, ids.len())? };
    eprintln!(
        "loaded {} layers from {} in {:.2} s",
        m.layers.len(),
        o.model.display(),
        load_s + ready.packing_s
    );
    let mut logits = m.forward(&mut cache, &ids, 0)?;
    let prefill_s = t_prefill.elapsed().as_secs_f64() - ready.packing_s;
    let t_decode = Instant::now();
    let mut generated = 0usize;
    let mut pos = ids.len();
    while generated < o.max_tokens {
        let next = sampler.sample(&logits.to_vec::<f32>()?);
        generated += 1;
        if next == tok.eos() {
            break;
        }
        let piece = stream.push(&tok, next)?;
        let mut out = stdout.lock();
        out.write_all(piece.as_bytes())?;
        out.flush()?;
        if generated == o.max_tokens {
            break;
        }
        // The decode step tc-serve batches, here with one sequence: the
        // server's greedy output is this example's, token for token.
        logits = m.step(&mut [model::StepSeq {
            cache: &mut cache,
            tokens: &[next],
            pos,
        }])?;
        pos += 1;
    }
    let tail = stream.finish();
    println!("{tail}");
    let decode_s = t_decode.elapsed().as_secs_f64();
    let stats = jit.stats();
    eprintln!(
        "prefill: {} tokens in {:.3} s ({:.1} tokens/s); decode: {} tokens in {:.3} s ({:.1} tokens/s)",
        ids.len(),
        prefill_s,
        ids.len() as f64 / prefill_s,
        generated,
        decode_s,
        generated.saturating_sub(1) as f64 / decode_s.max(1e-9),
    );
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    let file_bytes = std::fs::metadata(&o.model)?.len() as f64;
    let kv_bytes = m.cache_bytes(ids.len() + o.max_tokens) as f64;
    eprintln!(
        "kernels: {} specialised + {} generic compiles ({:.0} ms), numerics {}; peak RSS {:.1} MiB, budget {:.1} MiB (1.2 × the {:.1} MiB model file + the {:.1} MiB {} KV cache); setup pages given back: {:.0} MiB; resident now: {:.0} MiB file pages, {:.0} MiB anonymous",
        stats.compiles,
        stats.generic_compiles,
        stats.compile_ms,
        if o.fast { "fast" } else { "exact" },
        status_mib("VmHWM:"),
        mib(1.2 * file_bytes + kv_bytes),
        mib(file_bytes),
        mib(kv_bytes),
        if o.kv == model::KvDtype::F16 { "f16" } else { "f32" },
        mib(ready.released as f64),
        status_mib("RssFile:"),
        status_mib("RssAnon:"),
    );
    // The model, and the packed copies of its weights with it, go before
    // the process exits: libLLVM's destructors, which run at exit, map
    // some of its code again.
    drop((m, file, cache, logits));
    tc::llvm::kernels::prepack::quant::drop_unused();
    Ok(())
}
