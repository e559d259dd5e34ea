//! An upstream that thinks before its first token, as reasoning models do:
//! it answers a streamed chat completion (`POST /v1/chat/completions`),
//! response (`POST /v1/responses`) or messages request (`POST
//! /v1/messages`) with its status line, headers and opening events at once
//! (the role-only chunk; `response.created` and `response.in_progress`;
//! `message_start`, `content_block_start` and `ping`), stays silent for the
//! scripted time,
//! then streams the reply one word per event with its usage (11 prompt
//! tokens, 7 completion tokens). Chunk ids name the upstream, so a test can
//! tell whose events reached the client. The server stops when the
//! [`Thinking`] is dropped.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{StatusCode, header},
    response::Response,
    routing::post,
};
use serde_json::{Value, json};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_stream::wrappers::ReceiverStream;

/// Prompt and completion tokens every answer reports.
pub const USAGE: (u32, u32) = (11, 7);

/// A running thinking upstream. Dropping it aborts the server task.
pub struct Thinking {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

struct Shared {
    /// Who answers, in the reply and the chunk ids.
    name: String,
    silence: Mutex<Duration>,
    requests: AtomicUsize,
}

// === impl Thinking ===

impl Thinking {
    /// Binds 127.0.0.1:0 and serves, replying `reply from <name>` after
    /// `silence`.
    pub async fn start(name: &str, silence: Duration) -> anyhow::Result<Thinking> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the thinking upstream")?;
        let addr = listener.local_addr().context("reading its address")?;
        let shared =
            Arc::new(Shared { name: name.to_owned(), silence: Mutex::new(silence), requests: AtomicUsize::new(0) });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/messages", post(messages))
            .route("/v1/responses", post(responses))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Thinking { addr, shared, server })
    }

    /// The base address to give a channel, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The reply it streams.
    pub fn reply(&self) -> String {
        format!("reply from {}", self.shared.name)
    }

    /// How many requests it received.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Sets the silence before the first token of requests from now on.
    pub fn set_silence(&self, silence: Duration) {
        *self.shared.silence.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = silence;
    }
}

impl Drop for Thinking {
    fn drop(&mut self) {
        self.server.abort();
    }
}

// === impl Shared ===

impl Shared {
    /// Counts the request; its silence and the words of the reply.
    fn take(&self) -> (Duration, Vec<String>) {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let silence = *self.silence.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let reply = format!("reply from {}", self.name);
        (silence, reply.split_inclusive(' ').map(str::to_owned).collect())
    }
}

/// An SSE response whose events are `opening` at once, then `rest` after
/// `silence`.
fn sse(opening: Vec<String>, silence: Duration, rest: Vec<String>) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for event in opening {
            if tx.send(Ok(Bytes::from(event))).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(silence).await;
        for event in rest {
            if tx.send(Ok(Bytes::from(event))).await.is_err() {
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_default()
}

async fn chat(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let (silence, words) = shared.take();
    let id = format!("chatcmpl-{}", shared.name);
    let chunk = |choices: Value, usage: Value| {
        let chunk = json!({
            "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
            "choices": choices, "usage": usage,
        });
        format!("data: {chunk}\n\n")
    };
    let opening = vec![chunk(
        json!([{ "index": 0, "delta": { "role": "assistant", "content": "" }, "finish_reason": null }]),
        Value::Null,
    )];
    let mut rest: Vec<String> = words
        .iter()
        .map(|word| chunk(json!([{ "index": 0, "delta": { "content": word }, "finish_reason": null }]), Value::Null))
        .collect();
    rest.push(chunk(json!([{ "index": 0, "delta": {}, "finish_reason": "stop" }]), Value::Null));
    let (prompt, completion) = USAGE;
    let usage =
        json!({ "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion });
    rest.push(chunk(json!([]), usage));
    rest.push("data: [DONE]\n\n".to_owned());
    sse(opening, silence, rest)
}

async fn messages(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let (silence, words) = shared.take();
    let event = |kind: &str, data: Value| format!("event: {kind}\ndata: {data}\n\n");
    let (prompt, completion) = USAGE;
    let message = json!({
        "id": format!("msg_{}", shared.name), "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": { "input_tokens": prompt, "output_tokens": 1 },
    });
    let opening = vec![
        event("message_start", json!({ "type": "message_start", "message": message })),
        event(
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
        ),
        event("ping", json!({ "type": "ping" })),
    ];
    let mut rest: Vec<String> = words
        .iter()
        .map(|word| {
            let delta =
                json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": word } });
            event("content_block_delta", delta)
        })
        .collect();
    rest.push(event("content_block_stop", json!({ "type": "content_block_stop", "index": 0 })));
    rest.push(event(
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": "end_turn", "stop_sequence": null },
            "usage": { "output_tokens": completion },
        }),
    ));
    rest.push(event("message_stop", json!({ "type": "message_stop" })));
    sse(opening, silence, rest)
}

async fn responses(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let (silence, words) = shared.take();
    let (prompt, completion) = USAGE;
    let id = format!("resp_{}", shared.name);
    let text: String = words.concat();
    let response = |status: &str, output: Value, usage: Value| {
        json!({
            "id": id, "object": "response", "created_at": 1_700_000_000, "model": model, "status": status,
            "output": output, "usage": usage,
        })
    };
    let mut sequence = 0;
    let mut event = |kind: &str, mut data: Value| {
        data["type"] = kind.into();
        data["sequence_number"] = sequence.into();
        sequence += 1;
        format!("event: {kind}\ndata: {data}\n\n")
    };
    let opening = vec![
        event("response.created", json!({ "response": response("in_progress", json!([]), Value::Null) })),
        event("response.in_progress", json!({ "response": response("in_progress", json!([]), Value::Null) })),
    ];
    let item_id = format!("msg_{}", shared.name);
    let mut rest = vec![event(
        "response.output_item.added",
        json!({ "output_index": 0, "item": { "id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": [] } }),
    )];
    for word in &words {
        rest.push(event(
            "response.output_text.delta",
            json!({ "item_id": item_id, "output_index": 0, "content_index": 0, "delta": word, "logprobs": [] }),
        ));
    }
    let message = json!({
        "id": item_id, "type": "message", "role": "assistant", "status": "completed",
        "content": [{ "type": "output_text", "text": text, "annotations": [], "logprobs": [] }],
    });
    let usage = json!({
        "input_tokens": prompt, "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": completion, "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": prompt + completion,
    });
    rest.push(event("response.output_item.done", json!({ "output_index": 0, "item": message })));
    rest.push(event("response.completed", json!({ "response": response("completed", json!([message]), usage) })));
    sse(opening, silence, rest)
}
