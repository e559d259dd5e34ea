//! A scripted OpenAI-compatible upstream for end-to-end tests.
//!
//! Serves `POST /v1/chat/completions` (plain and SSE), `GET /v1/models`,
//! `POST /v1/rerank` (see [`crate::mock::rerank`]), the messages API
//! (`POST /v1/messages` and `/v1/messages/count_tokens`, see
//! [`crate::mock::messages`]), the Gemini API and Vertex AI (see
//! [`crate::mock::google`]) on
//! 127.0.0.1 at a free port, records every request it receives, and replays
//! the current [`Script`]: reply text, token counts, latency, a cut stream, a
//! required key, or a number of scripted failures. The server task stops when
//! the [`MockUpstream`] is dropped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

/// The one model `GET /v1/models` lists.
pub const MODEL: &str = "gpt-4o-mini";

/// A running mock upstream. Dropping it aborts the server task.
pub struct MockUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// How the mock answers chat completions from now on.
#[derive(Debug, Clone)]
pub struct Script {
    /// The assistant's reply; streamed one chunk per word.
    pub reply: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Reported as `usage.prompt_tokens_details.cached_tokens`.
    pub cached_tokens: u32,
    /// Parts of `prompt_tokens` written to the prompt cache for 5 minutes
    /// and for 1 hour: only the messages API reports them
    /// (`cache_creation_input_tokens` and `cache_creation`).
    pub cache_write_5m_tokens: u32,
    pub cache_write_1h_tokens: u32,
    /// Part of `completion_tokens` spent reasoning, reported as
    /// `usage.completion_tokens_details.reasoning_tokens` (the messages API
    /// does not count it apart).
    pub reasoning_tokens: u32,
    /// `false` sends no usage at all, neither in the body nor in the stream.
    pub include_usage: bool,
    /// Wait before answering at all (status line and headers included).
    pub first_byte_delay: Duration,
    /// Wait before every stream chunk after the first.
    pub chunk_delay: Duration,
    /// Abort the connection after this many content chunks: no finish chunk,
    /// no usage, no `[DONE]`, and no clean end of the chunked body.
    pub cut_stream_after: Option<usize>,
    /// When set, any other `Authorization` than `Bearer <key>` gets a 401.
    pub expected_key: Option<String>,
    /// A tool call the messages API makes when the request offers tools
    /// (see [`crate::mock::messages`]).
    pub tool_use: Option<crate::mock::messages::ToolUse>,
    /// Keys (sent as `Bearer <key>` or `x-api-key`) refused with a 401.
    pub refused_keys: Vec<String>,
    /// Keys answered with a 429 carrying the given `Retry-After` value.
    pub throttled_keys: Vec<(String, String)>,
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The query string, if the request had one.
    pub query: Option<String>,
    /// Header names are lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON, `Value::Null` when it is not JSON.
    pub body: Value,
}

struct Shared {
    state: Mutex<MockState>,
    /// Gemini API keys and Vertex access tokens (see `google::auth`).
    google: crate::mock::google::auth::MockGoogle,
    /// Streams whose client went away before the last event was sent.
    abandoned: std::sync::atomic::AtomicUsize,
}

struct MockState {
    script: Script,
    failures: Option<(StatusCode, usize)>,
    requests: Vec<Recorded>,
    next_id: u64,
}

// === impl MockUpstream ===

impl MockUpstream {
    /// Binds 127.0.0.1:0 and serves in a spawned task with the default
    /// [`Script`]. Fails only if the socket cannot be bound.
    pub async fn start() -> anyhow::Result<MockUpstream> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the mock upstream")?;
        let addr = listener.local_addr().context("reading the mock upstream address")?;
        let shared = Arc::new(Shared {
            state: Mutex::new(MockState {
                script: Script::default(),
                failures: None,
                requests: Vec::new(),
                next_id: 0,
            }),
            abandoned: std::sync::atomic::AtomicUsize::new(0),
            google: crate::mock::google::auth::MockGoogle::new(addr),
        });
        let app = Router::new()
            .merge(crate::mock::video::routes(addr))
            .merge(crate::mock::batches::routes(addr))
            .merge(crate::mock::endpoints::routes(addr))
            .merge(crate::mock::google::auth::routes(shared.google.clone()))
            .merge(crate::mock::azure::routes(addr))
            .fallback(handle)
            .layer(DefaultBodyLimit::disable())
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "mock upstream stopped");
            }
        });
        Ok(MockUpstream { addr, shared, server })
    }

    /// The address the mock listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base address to give a channel, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Google side: the Gemini API key it accepts, its service accounts
    /// and token endpoint, and the base URLs of its Gemini and Vertex APIs.
    pub fn google(&self) -> crate::mock::google::auth::MockGoogle {
        self.shared.google.clone()
    }

    /// Replaces the script for requests that arrive from now on.
    pub fn set_script(&self, script: Script) {
        self.shared.lock().script = script;
    }

    /// Answers the next `times` requests, whatever their path, with `status`
    /// and an OpenAI error body. Replaces any failures still pending.
    pub fn fail_next(&self, status: u16, times: usize) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.shared.lock().failures = (times > 0).then_some((status, times));
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// The most recent request, if any.
    pub fn last_request(&self) -> Option<Recorded> {
        self.shared.lock().requests.last().cloned()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// How many streamed answers were abandoned by their client (the
    /// connection closed) before the mock sent everything it meant to.
    pub fn abandoned_streams(&self) -> usize {
        self.shared.abandoned.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

// === impl Script ===

impl Default for Script {
    fn default() -> Script {
        Script {
            reply: "Hello from the mock upstream".to_string(),
            prompt_tokens: 11,
            completion_tokens: 7,
            cached_tokens: 0,
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
            include_usage: true,
            first_byte_delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            cut_stream_after: None,
            expected_key: None,
            tool_use: None,
            refused_keys: Vec::new(),
            throttled_keys: Vec::new(),
        }
    }
}

impl Script {
    fn usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": { "cached_tokens": self.cached_tokens, "audio_tokens": 0 },
            "completion_tokens_details": {
                "reasoning_tokens": self.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        })
    }

    /// The reply cut into words, each piece keeping the space before the
    /// next word, so the pieces join back into the reply exactly.
    pub(crate) fn pieces(&self) -> Vec<&str> {
        if self.reply.is_empty() {
            return vec![""];
        }
        self.reply.split_inclusive(' ').collect()
    }
}

// === impl Recorded ===

impl Recorded {
    /// The first value of header `name` (any case), if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

// === impl Shared ===

impl Shared {
    fn lock(&self) -> MutexGuard<'_, MockState> {
        // A panicking test thread must not hide the requests from the others.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a request gets, decided under the lock at arrival.
enum Plan {
    Fail(StatusCode),
    Serve(Box<Script>, u64),
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = Recorded {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        headers: headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_string(), value)
            })
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let plan = {
        let mut state = shared.lock();
        state.requests.push(recorded);
        state.next_id += 1;
        match &mut state.failures {
            Some((status, left)) => {
                let status = *status;
                *left -= 1;
                if *left == 0 {
                    state.failures = None;
                }
                Plan::Fail(status)
            }
            None => Plan::Serve(Box::new(state.script.clone()), state.next_id),
        }
    };
    let (script, id) = match plan {
        Plan::Fail(status) => {
            return error_at(uri.path(), status, &format!("scripted failure of the mock upstream ({status})"));
        }
        Plan::Serve(script, id) => (*script, id),
    };
    if let Some(key) = &script.expected_key {
        let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {key}").as_str()) && api_key != Some(key.as_str()) {
            // Like OpenAI, name the key that was given.
            let given = given.or(api_key).unwrap_or_default().trim_start_matches("Bearer ");
            return error_at(uri.path(), StatusCode::UNAUTHORIZED, &format!("Incorrect API key provided: {given}"));
        }
    }
    let sent_key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start_matches("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .or_else(|| headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()))
        .unwrap_or_default();
    if script.refused_keys.iter().any(|k| k == sent_key) {
        return error_at(uri.path(), StatusCode::UNAUTHORIZED, "Incorrect API key provided");
    }
    if let Some((_, retry_after)) = script.throttled_keys.iter().find(|(k, _)| k == sent_key) {
        let mut response = error_at(uri.path(), StatusCode::TOO_MANY_REQUESTS, "Rate limit reached for requests");
        if let Ok(value) = header::HeaderValue::from_str(retry_after) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let on_abandon = {
        let shared = shared.clone();
        move || {
            shared.abandoned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    };
    let request = (&method, &uri, &headers, &body[..]);
    if let Some(response) = crate::mock::google::serve(&shared.google, request, script.clone(), id, on_abandon).await {
        return response;
    }
    match (&method, uri.path()) {
        (&Method::POST, "/v1/chat/completions") => chat(script, id, &body, shared.clone()).await,
        (&Method::GET, "/v1/models") => models(),
        (&Method::POST, "/v1/messages") => {
            let shared = shared.clone();
            let on_abandon = move || {
                shared.abandoned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            };
            crate::mock::messages::messages(script, id, &headers, &body, on_abandon).await
        }
        (&Method::POST, "/v1/messages/count_tokens") => crate::mock::messages::count_tokens(&script, &headers, &body),
        (&Method::POST, "/v1/rerank") => crate::mock::rerank::rerank(&body, id),
        _ => error(StatusCode::NOT_FOUND, &format!("Invalid URL ({method} {})", uri.path())),
    }
}

async fn chat(script: Script, id: u64, body: &[u8], shared: Arc<Shared>) -> Response {
    let request: Value = match serde_json::from_slice(body) {
        Ok(request @ Value::Object(_)) => request,
        _ => {
            return error(StatusCode::BAD_REQUEST, "We could not parse the JSON body of your request.");
        }
    };
    let Some(model) = request.get("model").and_then(Value::as_str) else {
        return error(StatusCode::BAD_REQUEST, "you must provide a model parameter");
    };
    let model = model.to_string();
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let usage_requested = request.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);

    if !script.first_byte_delay.is_zero() {
        tokio::time::sleep(script.first_byte_delay).await;
    }
    let completion = Completion { id: format!("chatcmpl-mock{id}"), created: now(), model };
    if stream { completion.stream(script, usage_requested, shared) } else { completion.whole(&script) }
}

/// The fields every object of one completion shares.
struct Completion {
    id: String,
    created: u64,
    model: String,
}

// === impl Completion ===

impl Completion {
    fn whole(&self, script: &Script) -> Response {
        let mut body = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_mock",
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": script.reply, "refusal": null },
                "logprobs": null,
                "finish_reason": "stop"
            }]
        });
        if script.include_usage {
            body["usage"] = script.usage();
        }
        (StatusCode::OK, axum::Json(body)).into_response()
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_mock",
            "choices": choices
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk
    }

    /// SSE answer: one chunk per word (the first also carries the role), a
    /// finish chunk, the usage chunk when asked for and scripted, `[DONE]`.
    /// Each event is its own body frame, sent after `chunk_delay`.
    fn stream(self, script: Script, usage_requested: bool, shared: Arc<Shared>) -> Response {
        let send_usage = usage_requested && script.include_usage;
        // OpenAI sends `"usage": null` on every chunk but the last when the
        // client asked for usage.
        let no_usage = send_usage.then_some(Value::Null);
        let mut events: Vec<Value> = Vec::new();
        for (i, piece) in script.pieces().into_iter().enumerate() {
            let delta =
                if i == 0 { json!({ "role": "assistant", "content": piece }) } else { json!({ "content": piece }) };
            let choice = json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": null }]);
            events.push(self.chunk(choice, no_usage.clone()));
        }
        let cut = script.cut_stream_after.map(|n| n.min(events.len()));
        let finish = json!([{ "index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop" }]);
        events.push(self.chunk(finish, no_usage));
        if send_usage {
            events.push(self.chunk(json!([]), Some(script.usage())));
        }

        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        tokio::spawn(async move {
            let total = cut.unwrap_or(events.len());
            for (i, event) in events.into_iter().take(total).enumerate() {
                if i > 0 && !script.chunk_delay.is_zero() {
                    tokio::time::sleep(script.chunk_delay).await;
                }
                let frame = Bytes::from(format!("data: {event}\n\n"));
                if tx.send(Ok(frame)).await.is_err() {
                    // The client went away.
                    shared.abandoned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
            }
            let last = match cut {
                // An error frame makes hyper abort the connection mid-body.
                Some(_) => Err(std::io::Error::other("mock upstream cut the stream")),
                None => Ok(Bytes::from_static(b"data: [DONE]\n\n")),
            };
            if !script.chunk_delay.is_zero() && cut.is_none() {
                tokio::time::sleep(script.chunk_delay).await;
            }
            if tx.send(last).await.is_err() && cut.is_none() {
                shared.abandoned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(ReceiverStream::new(rx)))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }
}

fn models() -> Response {
    let body = json!({
        "object": "list",
        "data": [{ "id": MODEL, "object": "model", "created": 1_700_000_000, "owned_by": "mock" }]
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// An error body in the dialect of `path`: Google's on the Gemini and
/// Vertex paths, the messages shape on `/v1/messages` and below it and on
/// Anthropic's Vertex methods, else OpenAI's.
fn error_at(path: &str, status: StatusCode, message: &str) -> Response {
    if crate::mock::google::is_google_path(path) {
        crate::mock::google::error(status, message)
    } else if path == "/v1/messages" || path.starts_with("/v1/messages/") || path.contains("/publishers/anthropic/") {
        crate::mock::messages::error(status, message)
    } else {
        error(status, message)
    }
}

/// An OpenAI error body with a type and code that fit the status.
fn error(status: StatusCode, message: &str) -> Response {
    let (kind, code) = match status.as_u16() {
        401 => ("invalid_request_error", json!("invalid_api_key")),
        403 => ("invalid_request_error", json!("unsupported_country_region_territory")),
        404 => ("invalid_request_error", Value::Null),
        429 => ("requests", json!("rate_limit_exceeded")),
        400..=499 => ("invalid_request_error", Value::Null),
        _ => ("server_error", Value::Null),
    };
    let body = json!({
        "error": { "message": message, "type": kind, "param": null, "code": code }
    });
    (status, axum::Json(body)).into_response()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::time::Instant;

    use super::*;

    fn chat_body(stream: bool, include_usage: bool) -> Value {
        let mut body = json!({
            "model": "gpt-4o",
            "messages": [{ "role": "user", "content": "hi" }],
            "stream": stream
        });
        if include_usage {
            body["stream_options"] = json!({ "include_usage": true });
        }
        body
    }

    async fn post(mock: &MockUpstream, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", mock.base_url()))
            .bearer_auth("sk-upstream")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The JSON payloads of a finished SSE body, `[DONE]` kept as a string.
    fn events(text: &str) -> Vec<Value> {
        assert!(text.ends_with("\n\n"), "{text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.strip_prefix("data: ").unwrap();
                serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_string()))
            })
            .collect()
    }

    #[tokio::test]
    async fn plain_completion_echoes_the_model_and_reports_usage() {
        let mock = MockUpstream::start().await.unwrap();
        let response = post(&mock, &chat_body(false, false)).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "gpt-4o");
        assert_eq!(body["choices"][0]["message"]["role"], "assistant");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello from the mock upstream");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], 11);
        assert_eq!(body["usage"]["completion_tokens"], 7);
        assert_eq!(body["usage"]["total_tokens"], 18);
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

        let recorded = mock.requests();
        assert_eq!(mock.request_count(), 1);
        assert_eq!(recorded[0].method, "POST");
        assert_eq!(recorded[0].path, "/v1/chat/completions");
        assert_eq!(recorded[0].header("Authorization"), Some("Bearer sk-upstream"));
        assert_eq!(recorded[0].body["messages"][0]["content"], "hi");
    }

    #[tokio::test]
    async fn script_without_usage_sends_none() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { include_usage: false, ..Script::default() });
        let body: Value = post(&mock, &chat_body(false, false)).await.json().await.unwrap();
        assert!(body.get("usage").is_none(), "{body}");
        let text = post(&mock, &chat_body(true, true)).await.text().await.unwrap();
        assert!(!text.contains("\"usage\""), "{text}");
    }

    #[tokio::test]
    async fn stream_sends_a_chunk_per_word_then_usage_then_done() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { reply: "one two three".into(), cached_tokens: 4, ..Script::default() });
        let response = post(&mock, &chat_body(true, true)).await;
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let events = events(&response.text().await.unwrap());
        // 3 words, finish, usage, [DONE]
        assert_eq!(events.len(), 6, "{events:?}");
        assert_eq!(events[0]["object"], "chat.completion.chunk");
        assert_eq!(events[0]["model"], "gpt-4o");
        assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
        assert!(events[1]["choices"][0]["delta"].get("role").is_none());
        let text: String = events[..3].iter().map(|e| e["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
        assert_eq!(text, "one two three");
        assert_eq!(events[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(events[4]["choices"], json!([]));
        assert_eq!(events[4]["usage"]["total_tokens"], 18);
        assert_eq!(events[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(events[5], "[DONE]");
    }

    #[tokio::test]
    async fn stream_without_include_usage_has_no_usage_chunk() {
        let mock = MockUpstream::start().await.unwrap();
        let text = post(&mock, &chat_body(true, false)).await.text().await.unwrap();
        let events = events(&text);
        assert!(!text.contains("usage"), "{text}");
        assert_eq!(events.last().unwrap(), "[DONE]");
        assert_eq!(events.len(), 5 + 1 + 1, "{events:?}");
    }

    #[tokio::test]
    async fn cut_stream_aborts_without_done() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { cut_stream_after: Some(2), ..Script::default() });
        let mut response = post(&mock, &chat_body(true, true)).await;
        let mut received = Vec::new();
        let outcome = loop {
            match response.chunk().await {
                Ok(Some(chunk)) => received.extend_from_slice(&chunk),
                Ok(None) => break Ok(()),
                Err(err) => break Err(err),
            }
        };
        assert!(outcome.is_err(), "the body should end in an error");
        let text = String::from_utf8(received).unwrap();
        assert_eq!(text.matches("data: ").count(), 2, "{text}");
        assert!(!text.contains("[DONE]"));
    }

    #[tokio::test]
    async fn delays_hold_back_the_answer_and_each_chunk() {
        let mock = MockUpstream::start().await.unwrap();
        let delay = Duration::from_millis(150);
        mock.set_script(Script {
            reply: "a b".into(),
            first_byte_delay: delay,
            chunk_delay: Duration::from_millis(50),
            ..Script::default()
        });
        let started = Instant::now();
        let response = post(&mock, &chat_body(true, false)).await;
        assert!(started.elapsed() >= delay);
        let text = response.text().await.unwrap();
        // two words, finish, [DONE]: three gaps after the first chunk
        assert!(started.elapsed() >= delay + Duration::from_millis(150));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }

    #[tokio::test]
    async fn failures_and_wrong_keys_get_openai_error_bodies() {
        let mock = MockUpstream::start().await.unwrap();
        mock.fail_next(503, 2);
        for _ in 0..2 {
            let response = post(&mock, &chat_body(false, false)).await;
            assert_eq!(response.status(), 503);
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["type"], "server_error");
        }
        mock.set_script(Script { expected_key: Some("sk-other".into()), ..Script::default() });
        let response = post(&mock, &chat_body(false, false)).await;
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert_eq!(mock.request_count(), 3);
    }

    #[tokio::test]
    async fn models_list_one_model_and_unknown_paths_are_404() {
        let mock = MockUpstream::start().await.unwrap();
        let client = reqwest::Client::new();
        let models: Value =
            client.get(format!("{}/models", mock.base_url())).send().await.unwrap().json().await.unwrap();
        assert_eq!(models["data"][0]["id"], MODEL);
        let response = client.post(format!("{}/fine_tuning/jobs", mock.base_url())).send().await.unwrap();
        assert_eq!(response.status(), 404);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], "Invalid URL (POST /v1/fine_tuning/jobs)");
        assert_eq!(mock.last_request().unwrap().path, "/v1/fine_tuning/jobs");
    }
}
