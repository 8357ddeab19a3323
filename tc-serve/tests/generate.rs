//! The generation endpoints over real HTTP on loopback, against a server
//! started in-process with SmolLM2-135M-Instruct (Q4_1 GGUF, fetched on
//! first use by scripts/fetch-smollm2.sh): response shapes, streaming,
//! stop sequences, seeds, errors, continuous batching (16 concurrent greedy
//! streams equal their solo runs) and KV memory freed on disconnect.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{get_at, metric, post_at, sse_data, Reply};
use serde_json::{json, Value};
use tc_serve::app::{AppState, Config};
use tc_serve::generate::{GenConfig, Generator};

struct Server {
    addr: SocketAddr,
    state: Arc<AppState>,
}

fn start(gen: GenConfig) -> Server {
    let jit = tc::llvm::Jit::global();
    let mut cfg = jit.config();
    cfg.specialize_after = u32::MAX;
    cfg.options.fast_quant = false;
    jit.set_config(cfg);
    let g = Generator::load(&common::smollm2_path(), gen)
        .map_err(|e| e.to_string())
        .expect("load the GGUF");
    let state = AppState::new(Config::default(), None, Some(Arc::new(g)));
    let (tx, rx) = std::sync::mpsc::channel();
    let st = state.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let app = tc_serve::app::router(st.clone());
            tc_serve::serve::serve(listener, app, st, std::future::pending())
                .await
                .unwrap();
        });
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("server started");
    Server { addr, state }
}

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| start(GenConfig::default()))
}

fn model_name() -> String {
    server()
        .state
        .generator
        .as_ref()
        .unwrap()
        .model_name
        .clone()
}

fn completion(addr: SocketAddr, body: Value) -> Reply {
    post_at(addr, "/v1/completions", &body.to_string())
}

fn chat(addr: SocketAddr, body: Value) -> Reply {
    post_at(addr, "/v1/chat/completions", &body.to_string())
}

fn token_ids(v: &Value) -> Vec<u64> {
    v["choices"][0]["token_ids"]
        .as_array()
        .expect("token_ids")
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// A streamed reply's chunks (JSON) and whether it ended with `[DONE]`.
fn chunks(r: &Reply) -> (Vec<Value>, bool) {
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.headers.to_ascii_lowercase().contains("text/event-stream"),
        "{}",
        r.headers
    );
    let data = sse_data(&r.body);
    let done = data.last().map(String::as_str) == Some("[DONE]");
    let json = data
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("chunk {d}: {e}")))
        .collect();
    (json, done)
}

fn assert_error(r: &Reply, status: u16, needle: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    let e = &v["error"];
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "error lacks `{k}`: {}", r.body);
    }
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
    v
}

#[test]
fn models_lists_the_gguf() {
    let v = get_at(server().addr, "/v1/models").json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], model_name());
    assert_eq!(v["data"][0]["object"], "model");
}

#[test]
fn chat_completion_shape_usage_and_length() {
    let r = chat(
        server().addr,
        json!({"model": model_name(), "messages": [{"role": "user", "content": "What is the capital of France?"}],
               "max_tokens": 5, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], model_name());
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert!(!c["message"]["content"].as_str().unwrap().is_empty());
    assert_eq!(c["finish_reason"], "length");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 5);
    // The chat template's prompt: the reference's 37 ids for this message.
    assert_eq!(u["prompt_tokens"], 37);
    assert_eq!(u["total_tokens"], 42);
}

#[test]
fn greedy_completions_equal_the_reference_and_stop_at_eos() {
    let text =
        std::fs::read_to_string(common::root().join("tests/fixtures/smollm2/reference.json"))
            .unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    for p in r["prompts"].as_array().unwrap() {
        let want: Vec<u64> = p["greedy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let v = completion(
            server().addr,
            json!({"prompt": p["ids"], "max_tokens": want.len(), "temperature": 0, "return_token_ids": true}),
        )
        .json();
        // EOS (id 2) ends the sequence: the reference runs past it.
        let eos = want.iter().position(|&t| t == 2);
        let expect = &want[..eos.unwrap_or(want.len())];
        assert_eq!(token_ids(&v), expect, "{v}");
        let reason = if eos.is_some() { "stop" } else { "length" };
        assert_eq!(v["choices"][0]["finish_reason"], reason);
    }
}

#[test]
fn streaming_chunks_concatenate_to_the_whole_answer() {
    let body = json!({"messages": [{"role": "user", "content": "Name three colours."}],
                      "max_tokens": 20, "temperature": 0});
    let whole = chat(server().addr, body.clone()).json();
    let mut s = body.clone();
    s["stream"] = json!(true);
    s["stream_options"] = json!({"include_usage": true});
    let (chunks, done) = chunks(&chat(server().addr, s));
    assert!(done, "no [DONE]");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut text = String::new();
    let mut finish = None;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(ch) = c["choices"].as_array().and_then(|a| a.first()) {
            if let Some(t) = ch["delta"]["content"].as_str() {
                text.push_str(t);
            }
            if !ch["finish_reason"].is_null() {
                finish = Some(ch["finish_reason"].clone());
            }
        }
    }
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(finish, Some(whole["choices"][0]["finish_reason"].clone()));
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage, &whole["usage"]);
    // Completions stream too.
    let (chunks, done) = chunks_of(completion(
        server().addr,
        json!({"prompt": "The sky is", "max_tokens": 6, "temperature": 0, "stream": true}),
    ));
    assert!(done);
    assert_eq!(chunks[0]["object"], "text_completion");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
}

fn chunks_of(r: Reply) -> (Vec<Value>, bool) {
    chunks(&r)
}

#[test]
fn stop_sequences_end_the_text_before_them() {
    let base = json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 30, "temperature": 0});
    let free = completion(server().addr, base.clone()).json();
    let text = free["choices"][0]["text"].as_str().unwrap().to_string();
    // Stop at the text's first "1" after its start (e.g. " 10" → " ").
    let at = text[1..]
        .find('1')
        .map(|i| i + 1)
        .expect("a 1 in the counting");
    let mut b = base.clone();
    b["stop"] = json!(["1"]);
    let v = completion(server().addr, b.clone()).json();
    assert_eq!(
        v["choices"][0]["text"].as_str().unwrap(),
        &text[..at],
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Streamed, the held-back text never leaks past the stop sequence.
    b["stream"] = json!(true);
    let (chunks, done) = chunks_of(completion(server().addr, b));
    assert!(done);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, &text[..at]);
}

#[test]
fn a_seed_reproduces_sampled_text() {
    let body = |seed: u64| {
        json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0.9,
               "top_p": 0.95, "top_k": 50, "seed": seed, "return_token_ids": true})
    };
    let a = completion(server().addr, body(7)).json();
    let b = completion(server().addr, body(7)).json();
    assert_eq!(token_ids(&a), token_ids(&b));
    let c = completion(server().addr, body(8)).json();
    let d = completion(server().addr, body(9)).json();
    assert!(
        token_ids(&a) != token_ids(&c) || token_ids(&a) != token_ids(&d),
        "three seeds, one text"
    );
}

#[test]
fn bad_requests_get_openai_errors() {
    let a = server().addr;
    assert_error(&post_at(a, "/v1/chat/completions", "{"), 400, "JSON");
    assert_error(&chat(a, json!({"messages": []})), 400, "empty");
    assert_error(
        &chat(
            a,
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        404,
        "does not exist",
    );
    assert_error(
        &chat(
            a,
            json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 3}),
        ),
        400,
        "temperature",
    );
    assert_error(
        &chat(
            a,
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
        ),
        400,
        "max_tokens",
    );
    assert_error(
        &chat(
            a,
            json!({"messages": [{"role": "user", "content": "hi"}], "n": 2}),
        ),
        400,
        "n = 1",
    );
    assert_error(
        &completion(a, json!({"prompt": [1, 99999999]})),
        400,
        "vocabulary",
    );
    assert_error(&completion(a, json!({"max_tokens": 3})), 400, "required");
    // A prompt longer than the context (8192 positions).
    let ctx = server().state.generator.as_ref().unwrap().context;
    let long: Vec<u32> = vec![504; ctx + 1];
    let v = assert_error(
        &completion(a, json!({"prompt": long})),
        400,
        "maximum context length",
    );
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let v = assert_error(
        &completion(a, json!({"prompt": "hi", "max_tokens": ctx})),
        400,
        "maximum context length",
    );
    assert_eq!(v["error"]["param"], "max_tokens");
}

/// 16 concurrent greedy streams: each stream's tokens equal its solo run,
/// and the decode steps did batch them.
#[test]
fn sixteen_concurrent_greedy_streams_equal_their_solo_runs() {
    let s = start(GenConfig::default());
    let addr = s.addr;
    let n = 16;
    let body = |i: usize, stream: bool| {
        json!({"messages": [{"role": "user", "content": format!("What is {i} plus {}?", i * 3)}],
               "max_tokens": 12 + (i % 5), "temperature": 0, "stream": stream,
               "return_token_ids": true})
    };
    let solo: Vec<Vec<u64>> = (0..n)
        .map(|i| token_ids(&chat(addr, body(i, false)).json()))
        .collect();
    assert!(solo.iter().all(|t| t.len() >= 5), "{solo:?}");
    let stats = s.state.generator.as_ref().unwrap().stats.clone();
    let steps0 = stats
        .decode_steps
        .load(std::sync::atomic::Ordering::Relaxed);
    let barrier = Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (b, req) = (barrier.clone(), body(i, true));
            std::thread::spawn(move || {
                b.wait();
                let (chunks, done) = chunks_of(chat(addr, req));
                assert!(done);
                chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["token_ids"].as_array().cloned())
                    .flatten()
                    .map(|x| x.as_u64().unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let batched: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for i in 0..n {
        assert_eq!(batched[i], solo[i], "stream {i}");
    }
    let steps = stats
        .decode_steps
        .load(std::sync::atomic::Ordering::Relaxed)
        - steps0;
    let tokens: usize = batched.iter().map(Vec::len).sum();
    assert!(
        (steps as usize) * 3 < tokens,
        "{steps} decode steps for {tokens} tokens: the streams were not batched"
    );
}

/// A client that disconnects mid-stream leaves the batch, and its KV
/// memory is freed (seen through /metrics).
#[test]
fn a_disconnect_frees_the_sequence_and_its_kv_memory() {
    let s = start(GenConfig::default());
    let body =
        json!({"messages": [{"role": "user", "content": "Write a long story about a dragon."}],
                      "max_tokens": 2000, "temperature": 0, "stream": true})
        .to_string();
    let mut stream = TcpStream::connect(s.addr).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Read until the stream has produced some tokens.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.windows(6).filter(|w| w == b"data: ").count() < 3 {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    let m = get_at(s.addr, "/metrics").body;
    assert_eq!(metric(&m, "tc_gen_running_sequences"), 1.0, "{m}");
    assert!(metric(&m, "tc_gen_kv_cache_bytes") > 0.0);
    assert!(metric(&m, "tc_gen_kv_cache_reserved_bytes") > 0.0);
    drop(stream);
    let t = Instant::now();
    loop {
        let m = get_at(s.addr, "/metrics").body;
        if metric(&m, "tc_gen_running_sequences") == 0.0 {
            assert_eq!(metric(&m, "tc_gen_kv_cache_bytes"), 0.0, "{m}");
            assert_eq!(metric(&m, "tc_gen_kv_cache_reserved_bytes"), 0.0);
            assert_eq!(metric(&m, "tc_gen_cancelled_total"), 1.0);
            assert!(metric(&m, "tc_gen_generated_tokens_total") < 2000.0);
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the sequence was not freed:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still serving.
    let r = completion(
        s.addr,
        json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Past the KV budget requests wait; past the queue limit, 503 + Retry-After.
#[test]
fn admission_is_bounded_by_the_kv_budget_then_the_queue() {
    let per_pos = tc_serve::llama::model::Model::load(&common::smollm2_path())
        .map(|(m, _)| m.cache_bytes(1))
        .map_err(|e| e.to_string())
        .unwrap();
    // Room for one sequence of up to 250 positions, and a queue of one.
    let s = start(GenConfig {
        kv_budget_bytes: 250 * per_pos,
        max_waiting: 1,
        ..GenConfig::default()
    });
    let addr = s.addr;
    let long = json!({"messages": [{"role": "user", "content": "Count to a thousand."}],
                      "max_tokens": 150, "temperature": 0})
    .to_string();
    let first = {
        let b = long.clone();
        std::thread::spawn(move || post_at(addr, "/v1/chat/completions", &b))
    };
    let stats = s.state.generator.as_ref().unwrap().stats.clone();
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    use std::sync::atomic::Ordering::Relaxed;
    wait("one running", &|| stats.running.load(Relaxed) == 1);
    let second = {
        let b = long.clone();
        std::thread::spawn(move || post_at(addr, "/v1/chat/completions", &b))
    };
    wait("one waiting", &|| stats.waiting.load(Relaxed) == 1);
    let r = post_at(addr, "/v1/chat/completions", &long);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.headers.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        r.headers
    );
    // More than the whole budget can never run: a 400, not a wait.
    let huge = json!({"prompt": "hi", "max_tokens": 300});
    assert_error(&completion(addr, huge), 400, "KV cache");
    assert_eq!(first.join().unwrap().status, 200);
    assert_eq!(second.join().unwrap().status, 200);
}

/// `kv_dtype: F16` (`--kv-cache f16`): a position reserves half an f32
/// cache's bytes, so the same budget admits twice the positions, and
/// greedy requests run on it (its logits' bound is `tests/smollm2.rs`'s).
#[test]
fn an_f16_kv_cache_reserves_half_the_bytes() {
    use tc_serve::llama::model::{KvDtype, Model};
    let f32_per_pos = Model::load(&common::smollm2_path())
        .map(|(m, _)| m.cache_bytes(1))
        .map_err(|e| e.to_string())
        .unwrap();
    let s = start(GenConfig {
        kv_dtype: KvDtype::F16,
        kv_budget_bytes: 24 * f32_per_pos,
        ..GenConfig::default()
    });
    let g = s.state.generator.as_ref().unwrap();
    assert_eq!(2 * g.kv_bytes_per_position, f32_per_pos);
    // The prompt's few tokens + 32: over the budget in f32, within it in f16.
    let v = completion(
        s.addr,
        json!({"prompt": "The quick brown fox", "max_tokens": 32, "temperature": 0,
               "return_token_ids": true}),
    );
    assert_eq!(v.status, 200, "{}", v.body);
    assert!(!token_ids(&v.json()).is_empty(), "{}", v.body);
}
