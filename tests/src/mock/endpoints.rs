//! The mock upstream's other OpenAI endpoints, served on the same address as
//! [`crate::mock::upstream::MockUpstream`]: completions (plain and SSE, with
//! the usage chunk only when `stream_options.include_usage` asks),
//! responses (plain and SSE with `response.completed` carrying usage),
//! `responses/compact`, embeddings, moderations, image generations and
//! edits (multipart), transcriptions and translations (multipart; usage by
//! tokens for `gpt-4o*` models, by duration for the others, none for
//! `text` answers) and speech (binary audio, sent in chunks).
//!
//! Every request is recorded ([`Received`]), multipart files byte for byte.
//! Find a mock's side with [`MockEndpoints::of`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::mock::upstream::MockUpstream;

/// The text every completion and response answers.
pub const REPLY: &str = "Hello from the mock endpoints";
/// Completion usage.
pub const COMPLETION_PROMPT_TOKENS: i64 = 11;
pub const COMPLETION_TOKENS: i64 = 7;
/// Responses usage (`input_tokens`, `output_tokens`, cached part).
pub const RESPONSE_INPUT_TOKENS: i64 = 21;
pub const RESPONSE_OUTPUT_TOKENS: i64 = 9;
pub const RESPONSE_CACHED_TOKENS: i64 = 5;
/// `responses/compact` usage.
pub const COMPACT_INPUT_TOKENS: i64 = 300;
pub const COMPACT_OUTPUT_TOKENS: i64 = 40;
/// Embedding usage per input.
pub const EMBEDDING_TOKENS_PER_INPUT: i64 = 6;
/// Dimensions of each embedding.
pub const EMBEDDING_DIMENSIONS: usize = 8;
/// Image usage: input tokens per request, output tokens per image.
pub const IMAGE_INPUT_TOKENS: i64 = 12;
pub const IMAGE_OUTPUT_TOKENS_PER_IMAGE: i64 = 64;
/// Transcript of every audio file.
pub const TRANSCRIPT: &str = "The quick brown fox jumped over the lazy dog.";
/// Duration reported for every audio file, in seconds.
pub const AUDIO_SECONDS: f64 = 3.5;
/// Token usage of `gpt-4o*` transcriptions.
pub const TRANSCRIBE_INPUT_TOKENS: i64 = 40;
pub const TRANSCRIBE_OUTPUT_TOKENS: i64 = 10;

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    /// The JSON body, `Value::Null` for multipart or other bodies.
    pub json: Value,
    /// Multipart text fields in arrival order.
    pub fields: Vec<(String, String)>,
    pub files: Vec<File>,
}

/// A multipart file as received.
#[derive(Debug, Clone)]
pub struct File {
    pub field: String,
    pub filename: String,
    pub content_type: String,
    pub bytes: Bytes,
}

/// The endpoints side of one mock upstream.
#[derive(Clone)]
pub struct MockEndpoints {
    state: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    next: u64,
}

static REGISTRY: LazyLock<Mutex<HashMap<SocketAddr, Arc<Mutex<Inner>>>>> = LazyLock::new(Mutex::default);

const PATHS: [&str; 10] = [
    "/v1/completions",
    "/v1/responses",
    "/v1/responses/compact",
    "/v1/embeddings",
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/audio/speech",
];

/// The routes of the mock at `addr` (merged into its router).
pub fn routes<S: Clone + Send + Sync + 'static>(addr: SocketAddr) -> Router<S> {
    let state = Arc::new(Mutex::new(Inner::default()));
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).insert(addr, state.clone());
    PATHS.into_iter().fold(Router::new(), |router, path| router.route(path, post(handle))).with_state(state)
}

/// The audio every speech request gets: 48 KiB of deterministic noise
/// behind an ID3 header, so it spans many chunks and is not text.
pub fn speech_bytes() -> Bytes {
    static AUDIO: LazyLock<Bytes> = LazyLock::new(|| {
        let mut out = b"ID3\x04\0\0\0\0\0\0".to_vec();
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..48 * 1024 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            out.push((x >> 24) as u8);
        }
        Bytes::from(out)
    });
    AUDIO.clone()
}

// === impl MockEndpoints ===

impl MockEndpoints {
    /// The endpoints side of `upstream`.
    pub fn of(upstream: &MockUpstream) -> MockEndpoints {
        let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let state = registry.get(&upstream.addr()).cloned().expect("the mock upstream serves no endpoint routes");
        MockEndpoints { state }
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state).received.clone()
    }

    /// The most recent request to `path`.
    pub fn last(&self, path: &str) -> Option<Received> {
        lock(&self.state).received.iter().rev().find(|r| r.path == path).cloned()
    }
}

fn lock(state: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

// === impl Received ===

impl Received {
    /// Text field `name` of a multipart request.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

async fn handle(State(state): State<Arc<Mutex<Inner>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let header = |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let content_type = header(header::CONTENT_TYPE);
    let mut received = Received {
        path: parts.uri.path().to_owned(),
        authorization: header(header::AUTHORIZATION),
        content_type: content_type.clone(),
        json: Value::Null,
        fields: Vec::new(),
        files: Vec::new(),
    };
    let boundary = content_type.as_deref().and_then(|ct| multer::parse_boundary(ct).ok());
    if let Some(boundary) = boundary {
        let mut form = multer::Multipart::new(body.into_data_stream(), boundary);
        loop {
            let field = match form.next_field().await {
                Ok(Some(field)) => field,
                Ok(None) => break,
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad multipart body: {e}")),
            };
            let name = field.name().unwrap_or_default().to_owned();
            let filename = field.file_name().map(str::to_owned);
            let file_type = field.content_type().map(ToString::to_string).unwrap_or_default();
            let Ok(bytes) = field.bytes().await else {
                return error(StatusCode::BAD_REQUEST, "bad multipart field");
            };
            match filename {
                Some(filename) => received.files.push(File { field: name, filename, content_type: file_type, bytes }),
                None => received.fields.push((name, String::from_utf8_lossy(&bytes).into_owned())),
            }
        }
    } else {
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return error(StatusCode::BAD_REQUEST, "unreadable body");
        };
        received.json = match serde_json::from_slice(&bytes) {
            Ok(json @ Value::Object(_)) => json,
            _ => return error(StatusCode::BAD_REQUEST, "the body must be a JSON object"),
        };
    }
    let id = {
        let mut inner = lock(&state);
        inner.received.push(received.clone());
        inner.next += 1;
        inner.next
    };
    answer(&received, id)
}

fn answer(r: &Received, id: u64) -> Response {
    let param = |name: &str| -> Option<String> {
        match &r.json {
            Value::Object(map) => map.get(name).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
            _ => r.field(name).map(str::to_owned),
        }
    };
    let model = param("model").unwrap_or_else(|| "omni-moderation-latest".into());
    let stream = param("stream").as_deref() == Some("true");
    match r.path.as_str() {
        "/v1/completions" if stream => {
            let usage = r.json["stream_options"]["include_usage"] == true;
            sse(completion_events(id, &model, usage))
        }
        "/v1/completions" => json_ok(completion(id, &model)),
        "/v1/responses" if stream => sse(response_events(id, &model)),
        "/v1/responses" => json_ok(response(id, &model, "completed")),
        "/v1/responses/compact" => json_ok(compaction(id)),
        "/v1/embeddings" => json_ok(embeddings(&r.json, &model)),
        "/v1/moderations" => json_ok(moderation(id, &r.json, &model)),
        "/v1/images/generations" | "/v1/images/edits" => {
            let n = param("n").and_then(|n| n.parse::<i64>().ok()).unwrap_or(1);
            json_ok(images(n))
        }
        "/v1/audio/transcriptions" | "/v1/audio/translations" => {
            let Some(file) = r.files.iter().find(|f| f.field == "file") else {
                return error(StatusCode::BAD_REQUEST, "a file is required");
            };
            let translation = r.path.ends_with("translations");
            transcript(&model, param("response_format").as_deref().unwrap_or("json"), translation, file)
        }
        "/v1/audio/speech" => {
            if param("input").is_none_or(|i| i.is_empty()) {
                return error(StatusCode::BAD_REQUEST, "input is required");
            }
            speech()
        }
        path => error(StatusCode::NOT_FOUND, &format!("Invalid URL (POST {path})")),
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn json_ok(body: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// An SSE answer of `events` (already framed), sent one by one.
fn sse(events: Vec<String>) -> Response {
    let stream = futures_util::stream::iter(events.into_iter().map(|e| Ok::<_, Infallible>(Bytes::from(e))));
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream"));
    response
}

fn words() -> Vec<&'static str> {
    REPLY.split_inclusive(' ').collect()
}

fn completion_usage() -> Value {
    json!({
        "prompt_tokens": COMPLETION_PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": COMPLETION_PROMPT_TOKENS + COMPLETION_TOKENS
    })
}

fn completion(id: u64, model: &str) -> Value {
    json!({
        "id": format!("cmpl-mock{id}"),
        "object": "text_completion",
        "created": now(),
        "model": model,
        "system_fingerprint": "fp_mock",
        "choices": [{"text": REPLY, "index": 0, "logprobs": null, "finish_reason": "stop"}],
        "usage": completion_usage()
    })
}

fn completion_events(id: u64, model: &str, usage: bool) -> Vec<String> {
    let chunk = |choices: Value, usage: Value| {
        let body = json!({
            "id": format!("cmpl-mock{id}"),
            "object": "text_completion",
            "created": now(),
            "model": model,
            "system_fingerprint": "fp_mock",
            "choices": choices,
            "usage": usage
        });
        format!("data: {body}\n\n")
    };
    let mut events: Vec<String> = words()
        .into_iter()
        .map(|w| chunk(json!([{"text": w, "index": 0, "logprobs": null, "finish_reason": null}]), Value::Null))
        .collect();
    events.push(chunk(json!([{"text": "", "index": 0, "logprobs": null, "finish_reason": "stop"}]), Value::Null));
    if usage {
        events.push(chunk(json!([]), completion_usage()));
    }
    events.push("data: [DONE]\n\n".into());
    events
}

fn response_usage(input: i64, output: i64, cached: i64) -> Value {
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output
    })
}

fn message(id: u64, text: &str) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_mock{id}"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    })
}

/// A whole response object; `in_progress` ones have no output or usage yet.
fn response(id: u64, model: &str, status: &str) -> Value {
    let done = status == "completed";
    json!({
        "id": format!("resp_mock{id}"),
        "object": "response",
        "created_at": now(),
        "status": status,
        "completed_at": if done { json!(now()) } else { Value::Null },
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": if done { json!([message(id, REPLY)]) } else { json!([]) },
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": true,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": if done {
            response_usage(RESPONSE_INPUT_TOKENS, RESPONSE_OUTPUT_TOKENS, RESPONSE_CACHED_TOKENS)
        } else {
            Value::Null
        },
        "metadata": {}
    })
}

fn response_events(id: u64, model: &str) -> Vec<String> {
    let mut seq = 0;
    let mut events = Vec::new();
    let mut push = |kind: &str, mut body: Value| {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(seq);
        seq += 1;
        events.push(format!("event: {kind}\ndata: {body}\n\n"));
    };
    let item_id = format!("msg_mock{id}");
    push("response.created", json!({"response": response(id, model, "in_progress")}));
    push("response.in_progress", json!({"response": response(id, model, "in_progress")}));
    let mut item = message(id, "");
    item["status"] = json!("in_progress");
    item["content"] = json!([]);
    push("response.output_item.added", json!({"output_index": 0, "item": item}));
    let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
    push(
        "response.content_part.added",
        json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
    );
    for word in words() {
        push(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": word, "logprobs": []}),
        );
    }
    push(
        "response.output_text.done",
        json!({"item_id": item_id, "output_index": 0, "content_index": 0, "text": REPLY, "logprobs": []}),
    );
    let part = json!({"type": "output_text", "text": REPLY, "annotations": [], "logprobs": []});
    push(
        "response.content_part.done",
        json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": part}),
    );
    push("response.output_item.done", json!({"output_index": 0, "item": message(id, REPLY)}));
    push("response.completed", json!({"response": response(id, model, "completed")}));
    events
}

fn compaction(id: u64) -> Value {
    json!({
        "id": format!("resp_cmp_mock{id}"),
        "object": "response.compaction",
        "created_at": now(),
        "output": [
            {"type": "compaction", "id": format!("cmp_mock{id}"), "encrypted_content": "bW9jay1jb21wYWN0aW9u"}
        ],
        "usage": response_usage(COMPACT_INPUT_TOKENS, COMPACT_OUTPUT_TOKENS, 0)
    })
}

/// One embedding per input (a string or an array of them).
fn embeddings(request: &Value, model: &str) -> Value {
    let inputs = match &request["input"] {
        Value::Array(items) => items.len(),
        _ => 1,
    };
    let data: Vec<Value> = (0..inputs)
        .map(|i| {
            let vector: Vec<f64> = (0..EMBEDDING_DIMENSIONS).map(|d| ((i * 10 + d) as f64) / 100.0).collect();
            json!({"object": "embedding", "index": i, "embedding": vector})
        })
        .collect();
    let tokens = EMBEDDING_TOKENS_PER_INPUT * inputs as i64;
    json!({"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
}

const CATEGORIES: [&str; 13] = [
    "hate",
    "hate/threatening",
    "harassment",
    "harassment/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
];

/// One result per input; an input containing "kill" is flagged `violence`.
fn moderation(id: u64, request: &Value, model: &str) -> Value {
    let inputs: Vec<String> = match &request["input"] {
        Value::Array(items) => items.iter().map(|i| i.as_str().unwrap_or_default().to_owned()).collect(),
        other => vec![other.as_str().unwrap_or_default().to_owned()],
    };
    let results: Vec<Value> = inputs
        .iter()
        .map(|input| {
            let violent = input.contains("kill");
            let flag = |c: &str| violent && c == "violence";
            let categories: serde_json::Map<String, Value> =
                CATEGORIES.iter().map(|c| (c.to_string(), json!(flag(c)))).collect();
            let scores: serde_json::Map<String, Value> =
                CATEGORIES.iter().map(|c| (c.to_string(), json!(if flag(c) { 0.97 } else { 0.001 }))).collect();
            let applied: serde_json::Map<String, Value> =
                CATEGORIES.iter().map(|c| (c.to_string(), json!(["text"]))).collect();
            json!({
                "flagged": violent,
                "categories": categories,
                "category_scores": scores,
                "category_applied_input_types": applied
            })
        })
        .collect();
    json!({"id": format!("modr-mock{id}"), "model": model, "results": results})
}

/// The PNG every image answer carries (base64 in `b64_json`).
pub const IMAGE_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn images(n: i64) -> Value {
    let data: Vec<Value> =
        (0..n.max(1)).map(|_| json!({"b64_json": IMAGE_B64, "revised_prompt": "a mock image"})).collect();
    let output = IMAGE_OUTPUT_TOKENS_PER_IMAGE * n.max(1);
    json!({
        "created": now(),
        "data": data,
        "background": "opaque",
        "output_format": "png",
        "size": "1024x1024",
        "quality": "low",
        "usage": {
            "total_tokens": IMAGE_INPUT_TOKENS + output,
            "input_tokens": IMAGE_INPUT_TOKENS,
            "output_tokens": output,
            "input_tokens_details": {"text_tokens": IMAGE_INPUT_TOKENS, "image_tokens": 0}
        }
    })
}

/// A transcription or translation of `file` in `format`.
fn transcript(model: &str, format: &str, translation: bool, file: &File) -> Response {
    if file.bytes.is_empty() {
        return error(StatusCode::BAD_REQUEST, "the audio file is empty");
    }
    let usage = if model.starts_with("gpt-4o") {
        json!({
            "type": "tokens",
            "input_tokens": TRANSCRIBE_INPUT_TOKENS,
            "input_token_details": {"text_tokens": 0, "audio_tokens": TRANSCRIBE_INPUT_TOKENS},
            "output_tokens": TRANSCRIBE_OUTPUT_TOKENS,
            "total_tokens": TRANSCRIBE_INPUT_TOKENS + TRANSCRIBE_OUTPUT_TOKENS
        })
    } else {
        json!({"type": "duration", "seconds": AUDIO_SECONDS})
    };
    match format {
        "text" => (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{TRANSCRIPT}\n"))
            .into_response(),
        "verbose_json" => {
            let mut body = json!({
                "task": if translation { "translate" } else { "transcribe" },
                "language": "english",
                "duration": AUDIO_SECONDS,
                "text": TRANSCRIPT,
                "segments": [{
                    "id": 0, "seek": 0, "start": 0.0, "end": AUDIO_SECONDS, "text": TRANSCRIPT,
                    "tokens": [50364, 440, 1702], "temperature": 0.0, "avg_logprob": -0.2,
                    "compression_ratio": 1.1, "no_speech_prob": 0.01
                }]
            });
            if !translation {
                body["usage"] = usage;
            }
            json_ok(body)
        }
        // Translations report no usage in their plain JSON, as OpenAI's.
        _ if translation => json_ok(json!({"text": TRANSCRIPT})),
        _ => json_ok(json!({"text": TRANSCRIPT, "usage": usage})),
    }
}

/// [`speech_bytes`] in 4 KiB chunks, a millisecond apart.
fn speech() -> Response {
    let audio = speech_bytes();
    let chunks: Vec<Bytes> =
        (0..audio.len()).step_by(4096).map(|i| audio.slice(i..(i + 4096).min(audio.len()))).collect();
    let stream = futures_util::StreamExt::then(futures_util::stream::iter(chunks), |chunk| async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok::<_, Infallible>(chunk)
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("audio/mpeg"));
    response
}
