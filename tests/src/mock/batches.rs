//! The mock upstream's files and batches, served on the same address as
//! [`crate::mock::upstream::MockUpstream`], in the real shapes:
//!
//! - OpenAI: `POST /v1/files` (multipart, records the JSONL), `GET
//!   /v1/files/{id}/content`, `DELETE /v1/files/{id}`; `POST /v1/batches`,
//!   `GET /v1/batches/{id}`, `POST /v1/batches/{id}/cancel`;
//! - Anthropic: `POST /v1/messages/batches`, `GET /v1/messages/batches/{id}`,
//!   `POST /v1/messages/batches/{id}/cancel`, `GET
//!   /v1/messages/batches/{id}/results`.
//!
//! A batch runs until the test ends it: [`MockBatches::finish`] completes
//! every line; [`MockBatches::set_done`] completes some, and a cancellation
//! then ends the batch with only those. Every completed line reports
//! [`LINE_PROMPT_TOKENS`] and [`LINE_COMPLETION_TOKENS`] of usage.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::mock::upstream::MockUpstream;

/// Usage every completed line reports.
pub const LINE_PROMPT_TOKENS: i64 = 1_000;
pub const LINE_COMPLETION_TOKENS: i64 = 500;

/// The files and batches side of one mock upstream.
#[derive(Clone)]
pub struct MockBatches {
    state: Arc<State_>,
}

struct State_ {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    files: HashMap<String, Bytes>,
    /// Uploads in arrival order: (id, filename, content).
    uploads: Vec<(String, String, Bytes)>,
    batches: HashMap<String, Batch>,
    deleted: Vec<String>,
    status_polls: usize,
    next: u64,
}

struct Batch {
    anthropic: bool,
    created_at: u64,
    /// custom ids and models of the lines, in order.
    lines: Vec<(String, String)>,
    input_file_id: String,
    endpoint: String,
    done: usize,
    status: &'static str,
    output_file_id: Option<String>,
    key: Option<String>,
}

static REGISTRY: LazyLock<Mutex<HashMap<SocketAddr, Arc<State_>>>> = LazyLock::new(Mutex::default);

/// The routes of the mock at `addr` (merged into its router).
pub fn routes<S: Clone + Send + Sync + 'static>(addr: SocketAddr) -> Router<S> {
    let state = Arc::new(State_ { inner: Mutex::new(Inner::default()) });
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).insert(addr, state.clone());
    Router::new()
        .route("/v1/files", post(upload))
        .route("/v1/files/{id}", axum::routing::delete(delete_file))
        .route("/v1/files/{id}/content", get(content))
        .route("/v1/batches", post(create))
        .route("/v1/batches/{id}", get(retrieve))
        .route("/v1/batches/{id}/cancel", post(cancel))
        .route("/v1/messages/batches", post(create_messages))
        .route("/v1/messages/batches/{id}", get(retrieve_messages))
        .route("/v1/messages/batches/{id}/cancel", post(cancel_messages))
        .route("/v1/messages/batches/{id}/results", get(results))
        .with_state(state)
}

// === impl MockBatches ===

impl MockBatches {
    /// The files and batches side of `upstream`.
    pub fn of(upstream: &MockUpstream) -> MockBatches {
        let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let state = registry.get(&upstream.addr()).cloned().expect("the mock upstream serves no batch routes");
        MockBatches { state }
    }

    /// Every upload: (upstream id, filename, content).
    pub fn uploads(&self) -> Vec<(String, String, Bytes)> {
        self.state.lock().uploads.clone()
    }

    /// Ids of the batches created, in no order.
    pub fn batch_ids(&self) -> Vec<String> {
        self.state.lock().batches.keys().cloned().collect()
    }

    /// The key a batch was created with (`Authorization` or `x-api-key`).
    pub fn key_of(&self, id: &str) -> Option<String> {
        self.state.lock().batches.get(id).and_then(|b| b.key.clone())
    }

    /// The models its lines named, as the upstream received them.
    pub fn models_of(&self, id: &str) -> Vec<String> {
        self.state.lock().batches.get(id).map(|b| b.lines.iter().map(|l| l.1.clone()).collect()).unwrap_or_default()
    }

    /// Ids of the files deleted.
    pub fn deleted(&self) -> Vec<String> {
        self.state.lock().deleted.clone()
    }

    /// Status queries of any batch so far.
    pub fn status_polls(&self) -> usize {
        self.state.lock().status_polls
    }

    /// Completes every line of batch `id`: it ends `completed` (`ended`).
    pub fn finish(&self, id: &str) {
        let mut inner = self.state.lock();
        let Some(batch) = inner.batches.get_mut(id) else { panic!("no mock batch {id}") };
        batch.done = batch.lines.len();
        batch.status = if batch.anthropic { "ended" } else { "completed" };
        if !batch.anthropic {
            end_with_output(&mut inner, id);
        }
    }

    /// Marks the first `done` lines of batch `id` completed (it runs on).
    pub fn set_done(&self, id: &str, done: usize) {
        let mut inner = self.state.lock();
        let Some(batch) = inner.batches.get_mut(id) else { panic!("no mock batch {id}") };
        batch.done = done.min(batch.lines.len());
    }
}

// === impl State_ ===

impl State_ {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn rfc3339(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"message": format!("no such {what}"), "type": "invalid_request_error"}})),
    )
        .into_response()
}

fn key(request: &axum::http::HeaderMap) -> Option<String> {
    request
        .get(header::AUTHORIZATION)
        .or_else(|| request.get("x-api-key"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn upload(State(state): State<Arc<State_>>, request: Request) -> Response {
    let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let Ok(boundary) = multer::parse_boundary(content_type) else {
        return (StatusCode::BAD_REQUEST, "not multipart").into_response();
    };
    let body = request.into_body().into_data_stream();
    let mut form = multer::Multipart::new(body, boundary);
    let (mut purpose, mut file) = (String::new(), None);
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().unwrap_or_default().to_owned();
        let bytes = field.bytes().await.unwrap_or_default();
        match name.as_str() {
            "purpose" => purpose = String::from_utf8_lossy(&bytes).into_owned(),
            "file" => file = Some((filename, bytes)),
            _ => {}
        }
    }
    let Some((filename, bytes)) = file.filter(|_| purpose == "batch") else {
        return (StatusCode::BAD_REQUEST, "a batch file is required").into_response();
    };
    let mut inner = state.lock();
    inner.next += 1;
    let id = format!("file-up{}", inner.next);
    inner.files.insert(id.clone(), bytes.clone());
    inner.uploads.push((id.clone(), filename.clone(), bytes.clone()));
    Json(json!({"id": id, "object": "file", "bytes": bytes.len(), "created_at": now(), "filename": filename, "purpose": "batch"}))
        .into_response()
}

async fn content(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    match state.lock().files.get(&id) {
        Some(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes.clone()).into_response(),
        None => not_found("file"),
    }
}

async fn delete_file(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    let mut inner = state.lock();
    if inner.files.remove(&id).is_none() {
        return not_found("file");
    }
    inner.deleted.push(id.clone());
    Json(json!({"id": id, "object": "file", "deleted": true})).into_response()
}

async fn create(State(state): State<Arc<State_>>, headers: axum::http::HeaderMap, Json(body): Json<Value>) -> Response {
    let mut inner = state.lock();
    let input = body["input_file_id"].as_str().unwrap_or_default().to_owned();
    let Some(file) = inner.files.get(&input).cloned() else { return not_found("file") };
    let lines = file
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .map(|line| {
            (
                line["custom_id"].as_str().unwrap_or_default().to_owned(),
                line["body"]["model"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    inner.next += 1;
    let id = format!("batch_up{}", inner.next);
    let batch = Batch {
        anthropic: false,
        created_at: now(),
        lines,
        input_file_id: input,
        endpoint: body["endpoint"].as_str().unwrap_or_default().to_owned(),
        done: 0,
        status: "validating",
        output_file_id: None,
        key: key(&headers),
    };
    let answer = openai_object(&id, &batch);
    inner.batches.insert(id, batch);
    Json(answer).into_response()
}

async fn retrieve(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    let mut inner = state.lock();
    inner.status_polls += 1;
    let Some(batch) = inner.batches.get_mut(&id) else { return not_found("batch") };
    batch.status = match batch.status {
        "validating" => "in_progress",
        "cancelling" => "cancelled",
        other => other,
    };
    if batch.status == "cancelled" && batch.output_file_id.is_none() {
        end_with_output(&mut inner, &id);
    }
    Json(openai_object(&id, &inner.batches[&id])).into_response()
}

async fn cancel(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    let mut inner = state.lock();
    let Some(batch) = inner.batches.get_mut(&id) else { return not_found("batch") };
    if matches!(batch.status, "validating" | "in_progress") {
        batch.status = "cancelling";
    }
    Json(openai_object(&id, batch)).into_response()
}

/// Writes batch `id`'s output file: one answer per completed line.
fn end_with_output(inner: &mut Inner, id: &str) {
    let batch = &inner.batches[id];
    let mut out = String::new();
    for (i, (custom_id, model)) in batch.lines.iter().take(batch.done).enumerate() {
        let line = json!({
            "id": format!("batch_req_{i}"),
            "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": format!("req_{i}"), "body": {
                "id": format!("chatcmpl-{i}"), "object": "chat.completion", "created": batch.created_at, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": LINE_PROMPT_TOKENS, "completion_tokens": LINE_COMPLETION_TOKENS,
                          "total_tokens": LINE_PROMPT_TOKENS + LINE_COMPLETION_TOKENS}
            }},
            "error": null
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    inner.next += 1;
    let file = format!("file-out{}", inner.next);
    inner.files.insert(file.clone(), Bytes::from(out));
    if let Some(batch) = inner.batches.get_mut(id) {
        batch.output_file_id = Some(file);
    }
}

fn openai_object(id: &str, batch: &Batch) -> Value {
    json!({
        "id": id, "object": "batch", "endpoint": batch.endpoint, "errors": null,
        "input_file_id": batch.input_file_id, "completion_window": "24h", "status": batch.status,
        "output_file_id": batch.output_file_id, "error_file_id": null,
        "created_at": batch.created_at, "expires_at": batch.created_at + 86_400,
        "request_counts": {"total": batch.lines.len(), "completed": batch.done, "failed": 0},
        "metadata": null
    })
}

async fn create_messages(
    State(state): State<Arc<State_>>,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = state.lock();
    let lines = body["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["custom_id"].as_str().unwrap_or_default().to_owned(),
                r["params"]["model"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    inner.next += 1;
    let id = format!("msgbatch_up{}", inner.next);
    let batch = Batch {
        anthropic: true,
        created_at: now(),
        lines,
        input_file_id: String::new(),
        endpoint: String::new(),
        done: 0,
        status: "in_progress",
        output_file_id: None,
        key: key(&headers),
    };
    let answer = messages_object(&id, &batch);
    inner.batches.insert(id, batch);
    Json(answer).into_response()
}

async fn retrieve_messages(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    let mut inner = state.lock();
    inner.status_polls += 1;
    let Some(batch) = inner.batches.get_mut(&id) else { return not_found("message batch") };
    if batch.status == "canceling" {
        batch.status = "ended";
    }
    Json(messages_object(&id, batch)).into_response()
}

async fn cancel_messages(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    let mut inner = state.lock();
    let Some(batch) = inner.batches.get_mut(&id) else { return not_found("message batch") };
    if batch.status == "in_progress" {
        batch.status = "canceling";
    }
    Json(messages_object(&id, batch)).into_response()
}

async fn results(State(state): State<Arc<State_>>, Path(id): Path<String>) -> Response {
    let inner = state.lock();
    let Some(batch) = inner.batches.get(&id).filter(|b| b.status == "ended") else {
        return not_found("message batch results");
    };
    let mut out = String::new();
    for (i, (custom_id, model)) in batch.lines.iter().enumerate() {
        let result = if i < batch.done {
            json!({"type": "succeeded", "message": {
                "id": format!("msg_{i}"), "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": LINE_PROMPT_TOKENS, "output_tokens": LINE_COMPLETION_TOKENS}
            }})
        } else {
            json!({"type": "canceled"})
        };
        out.push_str(&json!({"custom_id": custom_id, "result": result}).to_string());
        out.push('\n');
    }
    ([(header::CONTENT_TYPE, "application/binary")], out).into_response()
}

fn messages_object(id: &str, batch: &Batch) -> Value {
    let ended = batch.status == "ended";
    let total = batch.lines.len();
    let (succeeded, canceled) = if ended { (batch.done, total - batch.done) } else { (0, 0) };
    json!({
        "id": id, "type": "message_batch", "processing_status": batch.status,
        "request_counts": {"processing": if ended { 0 } else { total }, "succeeded": succeeded, "errored": 0, "canceled": canceled, "expired": 0},
        "ended_at": if ended { Value::from(rfc3339(now())) } else { Value::Null },
        "created_at": rfc3339(batch.created_at), "expires_at": rfc3339(batch.created_at + 86_400),
        "cancel_initiated_at": null, "archived_at": null,
        "results_url": if ended { Value::from(format!("http://upstream.invalid/v1/messages/batches/{id}/results")) } else { Value::Null }
    })
}
