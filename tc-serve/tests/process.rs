//! The tc-serve binary as a process: a real SIGTERM (`kill -TERM`) with
//! streams in flight drains them and exits 0; a client's `x-request-id`
//! cannot forge fields in the text log format; `--warmup` compiles the
//! generation kernels before the server reports ready; `--embedding-precision
//! int8`, `q8_0` and `bf16` serve embeddings within cosine 0.999 of the f32
//! model's.

use crate::common;

use std::time::{Duration, Instant};

use common::{get_at, post_at, sse_data, Process};
use serde_json::json;

fn gguf() -> String {
    common::smollm2_path().display().to_string()
}

/// Wait for the process to exit, at most `secs` seconds.
fn wait_exit(p: &mut Process, secs: u64) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = p.child.try_wait().expect("wait") {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "no exit after {secs} s:\n{}",
            p.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_drains_the_running_streams_then_exits_0() {
    let mut p = Process::spawn(&["--model", &gguf(), "--threads", "2"]);
    let addr = p.addr;
    let n = 4;
    let threads: Vec<_> = (0..n)
        .map(|i| {
            std::thread::spawn(move || {
                let body = json!({"messages": [{"role": "user", "content": format!("List {} fruits.", i + 3)}],
                                  "max_tokens": 40, "temperature": 0, "stream": true});
                post_at(addr, "/v1/chat/completions", &body.to_string())
            })
        })
        .collect();
    // Every stream admitted and decoding.
    let t = Instant::now();
    loop {
        let m = get_at(addr, "/metrics").body;
        let running = common::metric(&m, "tc_gen_running_sequences");
        let tokens = common::metric(&m, "tc_gen_generated_tokens_total");
        if running == n as f64 && tokens >= n as f64 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "streams did not start:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    p.signal("TERM");
    for t in threads {
        let r = t.join().expect("client");
        assert_eq!(r.status, 200, "{}", r.body);
        let data = sse_data(&r.body);
        assert_eq!(
            data.last().map(String::as_str),
            Some("[DONE]"),
            "{}",
            r.body
        );
        let last: serde_json::Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
        assert!(
            last["choices"][0]["finish_reason"].is_string(),
            "{}",
            r.body
        );
    }
    let status = wait_exit(&mut p, 60);
    assert_eq!(status.code(), Some(0), "{}", p.logs());
    let logs = p.logs();
    assert!(logs.contains("SIGTERM"), "{logs}");
    assert!(logs.contains("drained"), "{logs}");
}

#[test]
fn a_request_id_cannot_forge_log_fields() {
    let mut p = Process::spawn(&["--model", &gguf()]);
    let forged = r#"evil" status=200 route=/forged x="#;
    let r = common::raw_at(
        p.addr,
        "GET",
        "/health",
        &format!("x-request-id: {forged}\r\n"),
        b"",
    );
    assert_eq!(r.status, 200);
    p.signal("TERM");
    wait_exit(&mut p, 60);
    let logs = p.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("tc_server::request") && l.contains("evil"))
        .unwrap_or_else(|| panic!("no request line:\n{logs}"));
    // The id is one quoted, escaped value; the real fields follow it.
    assert!(
        line.contains(r#"id="evil\" status=200 route=/forged x=""#),
        "{line}"
    );
    assert!(
        line.contains("route=\"/health\"") || line.contains("route=/health"),
        "{line}"
    );
    let after_id = line.split(r#"route=/forged x=""#).nth(1).unwrap_or("");
    assert!(after_id.contains("status=200"), "{line}");
    assert_eq!(line.matches(" route=").count(), 2, "{line}");
}

/// Kernels compiled so far (either kind, and quick-tier kernels compiled
/// again at the optimized tier), from the server's metrics.
fn compiled(addr: std::net::SocketAddr) -> f64 {
    let m = get_at(addr, "/metrics").body;
    common::metric(&m, "tc_kernel_cache_compiles_total")
        + common::metric(&m, "tc_kernel_cache_generic_compiles_total")
        + common::metric(&m, "tc_kernel_cache_tier_ups_total")
}

/// From an empty kernel cache (a folder of its own), so that the warm-up
/// compiles everything itself: a request must then compile nothing, not
/// even the optimized tier of something the warm-up ran at the quick
/// tier (calls handed to the pool's workers without the warm-up's
/// `tc::CallContext` did, and tiered up under the first requests).
#[test]
fn warm_up_compiles_the_generation_kernels_before_it_reports_ready() {
    let kernels = std::env::temp_dir().join(format!("tc-serve-warm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&kernels);
    let p = Process::spawn(&[
        "--model",
        &gguf(),
        "--threads",
        "2",
        "--warmup",
        "--kernel-cache-dir",
        &kernels.display().to_string(),
    ]);
    let addr = p.addr;
    let t = Instant::now();
    while get_at(addr, "/health").status != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "never ready:\n{}",
            p.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = compiled(addr);
    assert!(
        before > 0.0,
        "nothing compiled by the warm-up:\n{}",
        p.logs()
    );
    assert!(
        p.logs().contains("generation kernels compiled"),
        "{}",
        p.logs()
    );
    let body = json!({"messages": [{"role": "user", "content": "Name a colour."}],
                      "max_tokens": 6, "temperature": 0});
    let r = post_at(addr, "/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    // A warm-up compiles at the optimized tier only (a dry run's calls,
    // on whichever thread they run): a quick-tier kernel would be
    // compiled again under traffic.
    let quick = common::metric(
        &get_at(addr, "/metrics").body,
        "tc_kernel_cache_quick_compiles_total",
    );
    assert_eq!(quick, 0.0, "quick-tier compiles:\n{}", p.logs());
    assert_eq!(
        compiled(addr),
        before,
        "the first request compiled kernels:\n{}",
        p.logs()
    );
    drop(p);
    let _ = std::fs::remove_dir_all(&kernels);
}

/// The int8 embedding model behind the flag: the same response shape,
/// each embedding within cosine 0.999 of the f32 model's in this process,
/// and not the f32 model's bits (the int8 products really ran).
#[test]
fn int8_embeddings_are_served_within_their_bound() {
    served_within_cosine_0_999("int8", "Int8");
}

/// The same for the BF16 embedding model.
#[test]
fn bf16_embeddings_are_served_within_their_bound() {
    served_within_cosine_0_999("bf16", "Bf16");
}

/// The same for the `Q8_0` blocks' int8 model.
#[test]
fn q8_0_embeddings_are_served_within_their_bound() {
    served_within_cosine_0_999("q8_0", "Q8_0");
}

/// `--embedding-precision flag`: embeddings within cosine 0.999 of the
/// f32 model's and not its bits, the precision (`logged`) in the log.
fn served_within_cosine_0_999(flag: &str, logged: &str) {
    let dir = common::minilm_dir().expect("model folder");
    let p = Process::spawn(&[
        "--model",
        &dir.display().to_string(),
        "--embedding-precision",
        flag,
        "--threads",
        "2",
    ]);
    let sentences = [
        "A man is eating food.",
        "A woman is playing violin.",
        "Why is the sky blue?",
    ];
    let r = post_at(
        p.addr,
        "/v1/embeddings",
        &json!({"input": sentences, "model": "all-MiniLM-L6-v2"}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let f32m = tc_serve::minilm::MiniLm::load(&dir).expect("load");
    let want = f32m.embed(&sentences).expect("embed");
    let data = r.json()["data"].as_array().expect("data").clone();
    assert_eq!(data.len(), sentences.len());
    for (d, w) in data.iter().zip(&want) {
        let e: Vec<f32> = d["embedding"]
            .as_array()
            .expect("embedding")
            .iter()
            .map(|x| x.as_f64().expect("number") as f32)
            .collect();
        let c = tc_serve::minilm::cosine(&e, w);
        assert!(c >= 0.999 && e != *w, "{flag}: cosine {c}");
    }
    assert!(p.logs().contains(logged), "{}", p.logs());
}
