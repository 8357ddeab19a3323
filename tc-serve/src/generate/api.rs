//! `/v1/chat/completions` and `/v1/completions`: OpenAI's request and
//! response shapes, their streaming chunks over server-sent events, and
//! their JSON errors.
//!
//! Parameters: `model`, `messages` / `prompt`, `max_tokens` (chat also
//! `max_completion_tokens`), `temperature` (default 1, as OpenAI; 0 is
//! greedy), `top_p`, `top_k` (an extension, 0 = off), `seed`, `stop` (a
//! string or up to 4), `stream`, `stream_options.include_usage`, `n` (1
//! only), `return_token_ids` (an extension: the generated ids in each
//! choice, which the tests compare) and `ignore_eos` (an extension, as in
//! vLLM and llama.cpp: generate `max_tokens` whatever the model says, for
//! load tests).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc as tmpsc;

use super::{Event, Finish, Generator, Job, SubmitError};
use crate::app::{overloaded, read_body, ApiError, AppState};
use crate::llama::sampler::SamplerConfig;

/// Which endpoint a request came through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Chat,
    Completion,
}

/// A validated request.
struct Params {
    prompt: Vec<u32>,
    max_tokens: usize,
    sampler: SamplerConfig,
    stop: Vec<String>,
    stream: bool,
    include_usage: bool,
    token_ids: bool,
    ignore_eos: bool,
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    generate(state, headers, body, Kind::Chat).await
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    generate(state, headers, body, Kind::Completion).await
}

fn invalid(msg: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::invalid(msg, Some(param))
}

fn no_model() -> ApiError {
    ApiError::invalid("this server has no generation model", Some("model"))
        .with_status(StatusCode::NOT_FOUND)
        .with_code("model_not_found")
}

/// An optional number field: `None` when absent or null.
fn number(obj: &Map<String, Value>, key: &'static str) -> Result<Option<f64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| invalid(format!("'{key}' must be a number"), key)),
    }
}

/// An optional non-negative integer field.
fn count(obj: &Map<String, Value>, key: &'static str) -> Result<Option<u64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(format!("'{key}' must be a non-negative integer"), key)),
    }
}

fn boolean(obj: &Map<String, Value>, key: &'static str) -> Result<bool, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(format!("'{key}' must be a boolean"), key)),
    }
}

/// A message's content: a string, or an array of `{"type": "text"}` parts.
fn content(v: &Value, i: usize) -> Result<String, ApiError> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                match (
                    p.get("type").and_then(Value::as_str),
                    p.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    _ => {
                        return Err(invalid(
                            format!("messages[{i}].content: only text parts are supported"),
                            "messages",
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(invalid(
            format!("messages[{i}].content must be a string or an array of text parts"),
            "messages",
        )),
    }
}

/// The prompt's token ids, from `messages` through the chat template or
/// from `prompt`.
fn prompt_ids(gen: &Generator, obj: &Map<String, Value>, kind: Kind) -> Result<Vec<u32>, ApiError> {
    let tok = &gen.tok;
    let tokenize = |text: &str, bos: bool| -> Result<Vec<u32>, ApiError> {
        let mut ids = tok
            .encode(text)
            .map_err(|e| invalid(format!("could not tokenize the prompt: {e}"), "prompt"))?;
        if bos && tok.add_bos() {
            ids.insert(0, tok.bos());
        }
        Ok(ids)
    };
    match kind {
        Kind::Chat => {
            let msgs = match obj.get("messages") {
                Some(Value::Array(m)) if !m.is_empty() => m,
                Some(Value::Array(_)) => return Err(invalid("'messages' must not be empty", "messages")),
                None | Some(Value::Null) => {
                    return Err(invalid("'messages' is a required property", "messages"))
                }
                Some(_) => return Err(invalid("'messages' must be an array", "messages")),
            };
            let mut pairs = Vec::with_capacity(msgs.len());
            for (i, m) in msgs.iter().enumerate() {
                let role = m
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(format!("messages[{i}].role must be a string"), "messages"))?;
                if !matches!(role, "system" | "user" | "assistant" | "developer" | "tool") {
                    return Err(invalid(format!("messages[{i}].role `{role}` is not supported"), "messages"));
                }
                let role = if role == "developer" { "system" } else { role };
                pairs.push((role.to_string(), content(m.get("content").unwrap_or(&Value::Null), i)?));
            }
            let refs: Vec<(&str, &str)> = pairs.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
            let text = tok
                .apply_chat_template(&refs, true)
                .map_err(|e| invalid(format!("could not render the chat template: {e}"), "messages"))?;
            // The template spells out the start of the text: no BOS added.
            tokenize(&text, false)
        }
        Kind::Completion => match obj.get("prompt") {
            Some(Value::String(s)) => tokenize(s, true),
            Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
                tokenize(items[0].as_str().unwrap_or_default(), true)
            }
            Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_u64) => {
                let vocab = tok.vocab_size() as u64;
                items
                    .iter()
                    .map(|x| match x.as_u64() {
                        Some(id) if id < vocab => Ok(id as u32),
                        _ => Err(invalid(format!("token id {x} is outside the vocabulary of {vocab}"), "prompt")),
                    })
                    .collect()
            }
            Some(Value::Array(_)) => Err(invalid(
                "'prompt' must be a string, one string in an array, or an array of token ids (one prompt per request)",
                "prompt",
            )),
            None | Some(Value::Null) => Err(invalid("'prompt' is a required property", "prompt")),
            Some(_) => Err(invalid("'prompt' must be a string", "prompt")),
        },
    }
}

/// A seed for a request that gives none: distinct per request.
fn fresh_seed() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ N.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

fn parse(gen: &Generator, body: &[u8], kind: Kind) -> Result<Params, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("could not parse the JSON body: {e}"), None))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid("the request body must be a JSON object", None))?;
    match obj.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if gen.answers_to(m) => {}
        Some(Value::String(m)) => {
            return Err(ApiError::invalid(
                format!(
                    "the model `{m}` does not exist; this server serves `{}`",
                    gen.model_name
                ),
                Some("model"),
            )
            .with_status(StatusCode::NOT_FOUND)
            .with_code("model_not_found"))
        }
        Some(_) => return Err(invalid("'model' must be a string", "model")),
    }
    if let Some(n) = count(obj, "n")? {
        if n != 1 {
            return Err(invalid("only n = 1 is supported", "n"));
        }
    }
    let temperature = number(obj, "temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(invalid(
            "'temperature' must be between 0 and 2",
            "temperature",
        ));
    }
    let top_p = number(obj, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(invalid("'top_p' must be in (0, 1]", "top_p"));
    }
    let top_k = count(obj, "top_k")?.unwrap_or(0) as usize;
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => fresh_seed(),
        Some(s) => s
            .as_u64()
            .or_else(|| s.as_i64().map(|x| x as u64))
            .ok_or_else(|| invalid("'seed' must be an integer", "seed"))?,
    };
    let stop: Vec<String> = match obj.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.len() <= 4 => items
            .iter()
            .map(|x| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    invalid("'stop' must be a string or an array of strings", "stop")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Array(_)) => return Err(invalid("'stop' takes at most 4 sequences", "stop")),
        Some(_) => {
            return Err(invalid(
                "'stop' must be a string or an array of strings",
                "stop",
            ))
        }
    };
    let stop = stop.into_iter().filter(|s| !s.is_empty()).collect();
    let stream = boolean(obj, "stream")?;
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => boolean(o, "include_usage")?,
        Some(_) => {
            return Err(invalid(
                "'stream_options' must be an object",
                "stream_options",
            ))
        }
    };
    let token_ids = boolean(obj, "return_token_ids")?;
    let ignore_eos = boolean(obj, "ignore_eos")?;
    let mut max_key = "max_tokens";
    let mut max_tokens = count(obj, "max_tokens")?;
    if kind == Kind::Chat {
        if let Some(m) = count(obj, "max_completion_tokens")? {
            max_tokens = Some(m);
            max_key = "max_completion_tokens";
        }
    }
    if max_tokens == Some(0) {
        return Err(invalid(format!("'{max_key}' must be at least 1"), max_key));
    }
    let prompt = prompt_ids(gen, obj, kind)?;
    let param = if kind == Kind::Chat {
        "messages"
    } else {
        "prompt"
    };
    if prompt.is_empty() {
        return Err(invalid("the prompt is empty", param));
    }
    let room = gen.context.saturating_sub(prompt.len());
    if room == 0 {
        return Err(invalid(
            format!(
                "this model's maximum context length is {} tokens; the prompt has {} tokens",
                gen.context,
                prompt.len()
            ),
            param,
        )
        .with_code("context_length_exceeded"));
    }
    let max_tokens = match max_tokens {
        Some(m) if m as usize > room => {
            return Err(invalid(
                format!(
                    "this model's maximum context length is {} tokens; the prompt has {} and {max_key} asks for {m}",
                    gen.context,
                    prompt.len()
                ),
                max_key,
            )
            .with_code("context_length_exceeded"))
        }
        Some(m) => m as usize,
        None => gen.config.default_max_tokens.min(room),
    };
    Ok(Params {
        prompt,
        max_tokens,
        sampler: SamplerConfig {
            temperature: temperature as f32,
            top_k,
            top_p: top_p as f32,
            seed,
        },
        stop,
        stream,
        include_usage,
        token_ids,
        ignore_eos,
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A response id, unique within the process and across restarts.
fn response_id(kind: Kind) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let prefix = if kind == Kind::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    format!(
        "{prefix}-{:x}{:04x}",
        unix_now(),
        N.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

async fn generate(
    state: Arc<AppState>,
    headers: HeaderMap,
    body: Body,
    kind: Kind,
) -> Result<Response, ApiError> {
    let gen = state.generator.clone().ok_or_else(no_model)?;
    let bytes = read_body(
        &headers,
        body,
        state.config.body_limit,
        state.config.body_read_timeout,
    )
    .await?;
    let g = gen.clone();
    let params = tokio::task::spawn_blocking(move || parse(&g, &bytes, kind))
        .await
        .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))??;
    let (tx, rx) = tmpsc::unbounded_channel();
    let job = Job {
        prompt: params.prompt.clone(),
        max_tokens: params.max_tokens,
        sampler: params.sampler,
        stop: params.stop.clone(),
        ignore_eos: params.ignore_eos,
        events: tx,
        enqueued: Instant::now(),
    };
    match gen.submit(job) {
        Ok(()) => {}
        Err(SubmitError::Overloaded) => {
            state.metrics.shed.fetch_add(1, Ordering::Relaxed);
            return Ok(overloaded());
        }
        Err(SubmitError::TooLarge { need, budget }) => {
            return Err(invalid(
                format!(
                    "the request needs {} MiB of KV cache (prompt + max_tokens); the server's budget is {} MiB",
                    need >> 20,
                    budget >> 20
                ),
                "max_tokens",
            ))
        }
        Err(SubmitError::Stopped) => return Err(ApiError::internal("the scheduler has stopped")),
    }
    let meta = Meta {
        id: response_id(kind),
        created: unix_now(),
        model: gen.model_name.clone(),
        kind,
    };
    if params.stream {
        Ok(stream_response(
            meta,
            rx,
            params.include_usage,
            params.token_ids,
        ))
    } else {
        whole_response(meta, rx, params.token_ids).await
    }
}

struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
}

impl Meta {
    /// One choice of a whole (non-streamed) response.
    fn choice(&self, text: String, finish: Finish, ids: Option<Vec<u32>>) -> Value {
        let mut c = match self.kind {
            Kind::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish.as_str(),
            }),
            Kind::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": finish.as_str(),
            }),
        };
        if let (Some(ids), Some(o)) = (ids, c.as_object_mut()) {
            o.insert("token_ids".into(), json!(ids));
        }
        c
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    /// One streamed chunk: `text` (chat: a content delta; `role` on the
    /// first), the finish reason on the last.
    fn chunk(
        &self,
        text: Option<&str>,
        role: bool,
        finish: Option<Finish>,
        ids: Option<&[u32]>,
    ) -> Value {
        let mut choice = match self.kind {
            Kind::Chat => {
                let mut delta = Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish.map(Finish::as_str)})
            }
            Kind::Completion => json!({
                "index": 0,
                "text": text.unwrap_or(""),
                "logprobs": null,
                "finish_reason": finish.map(Finish::as_str),
            }),
        };
        if let (Some(ids), Some(o)) = (ids, choice.as_object_mut()) {
            o.insert("token_ids".into(), json!(ids));
        }
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        })
    }
}

/// Wait for the whole generation, then answer with one JSON object.
async fn whole_response(
    meta: Meta,
    mut rx: tmpsc::UnboundedReceiver<Event>,
    token_ids: bool,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut ids = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token { id, text: t } => {
                text.push_str(&t);
                ids.push(id);
            }
            Event::Error(e) => return Err(ApiError::internal(format!("generation failed: {e}"))),
            Event::Done {
                finish,
                prompt_tokens,
                completion_tokens,
            } => {
                let body = json!({
                    "id": meta.id,
                    "object": meta.object(false),
                    "created": meta.created,
                    "model": meta.model,
                    "choices": [meta.choice(text, finish, token_ids.then_some(ids))],
                    "usage": usage(prompt_tokens, completion_tokens),
                    "system_fingerprint": null,
                });
                return Ok((
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    body.to_string(),
                )
                    .into_response());
            }
        }
    }
    Err(ApiError::internal("the scheduler dropped the request"))
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// Stream the generation as server-sent events: one chunk per token with
/// text, a last chunk with the finish reason, the usage chunk when asked
/// for, then `data: [DONE]`. Dropping the body (client gone, write
/// timeout) drops `rx`, which takes the sequence out of the batch.
fn stream_response(
    meta: Meta,
    rx: tmpsc::UnboundedReceiver<Event>,
    include_usage: bool,
    token_ids: bool,
) -> Response {
    struct St {
        meta: Meta,
        rx: tmpsc::UnboundedReceiver<Event>,
        started: bool,
        over: bool,
        include_usage: bool,
        token_ids: bool,
    }
    let st = St {
        meta,
        rx,
        started: false,
        over: false,
        include_usage,
        token_ids,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.over {
            return None;
        }
        let mut out = String::new();
        if !st.started && st.meta.kind == Kind::Chat {
            // The first chunk names the role, with empty content.
            out.push_str(&format!(
                "data: {}\n\n",
                st.meta.chunk(Some(""), true, None, None)
            ));
        }
        st.started = true;
        loop {
            match st.rx.recv().await {
                Some(Event::Token { id, text }) => {
                    if text.is_empty() && !st.token_ids {
                        continue;
                    }
                    let ids = [id];
                    let ids = st.token_ids.then_some(&ids[..]);
                    out.push_str(&format!(
                        "data: {}\n\n",
                        st.meta.chunk(Some(&text), false, None, ids)
                    ));
                    break;
                }
                Some(Event::Done {
                    finish,
                    prompt_tokens,
                    completion_tokens,
                }) => {
                    let text = (st.meta.kind == Kind::Completion).then_some("");
                    out.push_str(&format!(
                        "data: {}\n\n",
                        st.meta.chunk(text, false, Some(finish), None)
                    ));
                    if st.include_usage {
                        let u = json!({
                            "id": st.meta.id,
                            "object": st.meta.object(true),
                            "created": st.meta.created,
                            "model": st.meta.model,
                            "choices": [],
                            "usage": usage(prompt_tokens, completion_tokens),
                        });
                        out.push_str(&String::from_utf8_lossy(&sse(&u)));
                    }
                    out.push_str("data: [DONE]\n\n");
                    st.over = true;
                    break;
                }
                Some(Event::Error(e)) => {
                    let err = json!({"error": {"message": format!("generation failed: {e}"),
                        "type": "server_error", "param": null, "code": null}});
                    out.push_str(&String::from_utf8_lossy(&sse(&err)));
                    out.push_str("data: [DONE]\n\n");
                    st.over = true;
                    break;
                }
                None => {
                    st.over = true;
                    break;
                }
            }
        }
        Some((Ok::<_, Infallible>(Bytes::from(out)), st))
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
