//! A mock realtime provider: OpenAI's `/v1/realtime` over a real
//! WebSocket. It sends `session.created`, and for each `response.create`
//! a `response.created`, a few transcript and audio deltas and a
//! `response.done` whose usage is `USAGE`; an `input_audio_buffer.commit`
//! starts a response of the server's own, as its turn detection does. While
//! `hold` is on, responses stop before their `response.done` (so several
//! are open at once) until it is lifted; a `response.cancel` ends an open
//! response with a `response.done` of status `cancelled` carrying
//! `PARTIAL` usage (unless `ignore_cancels` is on: a stuck upstream), and
//! the cancels are recorded. It records each handshake (the
//! path, the credential, the model asked for, `OpenAI-Beta`), counts the
//! sessions open, and can refuse upgrades with a status (a channel that is
//! down). It also answers as an Azure OpenAI resource does: at
//! `/openai/v1/realtime?model=…`, and at the deployment form
//! `/openai/realtime?api-version=…&deployment=…`, whose parameters it
//! requires (404 without); once `azure_key` is set, an Azure address without
//! that `api-key` is refused 401.

use std::sync::{
    Arc, Mutex, PoisonError,
    atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering},
};

use axum::{
    Router,
    extract::{
        Query, State,
        ws::{Message, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse as _, Response},
    routing::get,
};
use serde_json::{Value, json};

/// The transcript each response speaks, in `DELTAS` parts.
pub const TRANSCRIPT: &str = "Hello from the realtime mock";
/// Transcript deltas per response.
pub const DELTAS: usize = 3;
/// Every response's usage: 200 in (120 audio; 64 cached, 32 of them audio),
/// 130 out (100 audio).
pub const USAGE: Usage =
    Usage { input: 200, audio_input: 120, cached: 64, audio_cached: 32, output: 130, audio_output: 100 };

/// What a response cancelled mid-way used: all its input, 40 tokens out
/// (30 audio).
pub const PARTIAL: Usage =
    Usage { input: 200, audio_input: 120, cached: 64, audio_cached: 32, output: 40, audio_output: 30 };

/// The token counts of `USAGE`.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub input: i64,
    pub audio_input: i64,
    pub cached: i64,
    pub audio_cached: i64,
    pub output: i64,
    pub audio_output: i64,
}

/// One upgrade the mock was asked for.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// The path asked for, without the query.
    pub path: String,
    /// The query's `api-version` (Azure's deployment form).
    pub api_version: Option<String>,
    pub authorization: Option<String>,
    pub api_key: Option<String>,
    pub beta: Option<String>,
    /// The query's `model`, or `deployment` for Azure's URL.
    pub model: Option<String>,
    pub refused: bool,
}

/// The running mock.
pub struct MockRealtime {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    handshakes: Mutex<Vec<Handshake>>,
    open: AtomicUsize,
    /// Non-zero: refuse upgrades with this status.
    refuse: AtomicU16,
    /// The `api-key` the Azure addresses require, once set.
    azure_key: Mutex<Option<String>>,
    /// Whether responses stop before their `response.done`.
    hold: tokio::sync::watch::Sender<bool>,
    /// The `response.cancel`s received: the `response_id` each named.
    cancels: Mutex<Vec<Option<String>>>,
    /// Whether a `response.cancel` goes unanswered.
    deaf: AtomicBool,
}

// === impl MockRealtime ===

impl MockRealtime {
    /// Starts the mock on a free port.
    pub async fn start() -> anyhow::Result<MockRealtime> {
        let shared = Arc::new(Shared {
            handshakes: Mutex::default(),
            open: AtomicUsize::new(0),
            refuse: AtomicU16::new(0),
            azure_key: Mutex::default(),
            hold: tokio::sync::watch::Sender::new(false),
            cancels: Mutex::default(),
            deaf: AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/v1/realtime", get(upgrade))
            .route("/openai/v1/realtime", get(upgrade))
            .route("/openai/realtime", get(upgrade))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(MockRealtime { addr, shared, task })
    }

    /// The base URL an openai channel names (`http://…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The resource endpoint an azure channel names (`http://…`).
    pub fn azure_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requires `key` as the `api-key` header on the Azure addresses.
    pub fn azure_key(&self, key: &str) {
        *self.shared.azure_key.lock().unwrap_or_else(PoisonError::into_inner) = Some(key.to_owned());
    }

    /// Refuses every later upgrade with `status` (0: accept again).
    pub fn refuse_with(&self, status: u16) {
        self.shared.refuse.store(status, Ordering::SeqCst);
    }

    /// Holds every later response before its `response.done` (`true`), or
    /// lets the held ones complete (`false`).
    pub fn hold(&self, hold: bool) {
        self.shared.hold.send_replace(hold);
    }

    /// Leaves every later `response.cancel` unanswered (its response held).
    pub fn ignore_cancels(&self) {
        self.shared.deaf.store(true, Ordering::SeqCst);
    }

    /// The `response.cancel`s received so far, by the `response_id` each named.
    pub fn cancels(&self) -> Vec<Option<String>> {
        self.shared.cancels.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The handshakes so far, in order.
    pub fn handshakes(&self) -> Vec<Handshake> {
        self.shared.handshakes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for MockRealtime {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn upgrade(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let param = |name: &str| query.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.clone());
    let path = uri.path().to_owned();
    let api_key = header("api-key");
    let refuse = match shared.refuse.load(Ordering::SeqCst) {
        0 => refusal(&shared, &path, api_key.as_deref(), &param),
        status => {
            Some((StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE), "realtime is down here"))
        }
    };
    shared.handshakes.lock().unwrap_or_else(PoisonError::into_inner).push(Handshake {
        api_version: param("api-version"),
        model: param("model").or_else(|| param("deployment")),
        path,
        authorization: header("authorization"),
        api_key,
        beta: header("openai-beta"),
        refused: refuse.is_some(),
    });
    if let Some((status, message)) = refuse {
        let body =
            json!({ "error": { "message": message, "type": "server_error", "code": status.as_u16().to_string() } });
        return (status, axum::Json(body)).into_response();
    }
    upgrade.on_upgrade(move |socket| session(shared, socket))
}

/// Why an Azure resource would refuse an upgrade to `path` with `api_key`
/// and the query's `param`s, as it answers: `None` when it would not.
fn refusal(
    shared: &Shared,
    path: &str,
    api_key: Option<&str>,
    param: &dyn Fn(&str) -> Option<String>,
) -> Option<(StatusCode, &'static str)> {
    if !path.starts_with("/openai/") {
        return None;
    }
    let expected = shared.azure_key.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if expected.is_some_and(|key| api_key != Some(key.as_str())) {
        return Some((StatusCode::UNAUTHORIZED, "Access denied due to invalid subscription key"));
    }
    let addressed = match path {
        "/openai/v1/realtime" => param("model").is_some(),
        _ => param("api-version").is_some() && param("deployment").is_some(),
    };
    (!addressed).then_some((StatusCode::NOT_FOUND, "Resource not found"))
}

async fn session(shared: Arc<Shared>, mut socket: WebSocket) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let created = json!({ "type": "session.created", "event_id": "event_1",
        "session": { "id": "sess_mock", "object": "realtime.session", "type": "realtime", "model": "gpt-realtime" } });
    if socket.send(Message::Text(created.to_string().into())).await.is_ok() {
        let _ = serve(&shared, &mut socket).await;
    }
    shared.open.fetch_sub(1, Ordering::SeqCst);
}

/// Answers one session's events until it ends.
async fn serve(shared: &Shared, socket: &mut WebSocket) -> Result<(), axum::Error> {
    let mut hold = shared.hold.subscribe();
    let mut responses = 0;
    // Responses waiting for their `response.done`, oldest first.
    let mut held: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            message = socket.recv() => {
                let Some(Ok(message)) = message else { return Ok(()) };
                let Message::Text(text) = message else { continue };
                let event: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                match event["type"].as_str().unwrap_or_default() {
                    kind @ ("response.create" | "input_audio_buffer.commit") => {
                        if kind == "input_audio_buffer.commit" {
                            let committed = json!({ "type": "input_audio_buffer.committed", "item_id": "item_in" });
                            socket.send(Message::Text(committed.to_string().into())).await?;
                        }
                        responses += 1;
                        let id = format!("resp_{responses}");
                        start(socket, &id, responses).await?;
                        if *hold.borrow_and_update() {
                            held.push(id);
                        } else {
                            done(socket, &id, "completed", USAGE).await?;
                        }
                    }
                    "response.cancel" => {
                        let named = event["response_id"].as_str().map(str::to_owned);
                        shared.cancels.lock().unwrap_or_else(PoisonError::into_inner).push(named.clone());
                        if shared.deaf.load(Ordering::SeqCst) {
                            continue;
                        }
                        let at = match &named {
                            Some(id) => held.iter().position(|h| h == id),
                            None => held.len().checked_sub(1),
                        };
                        match at {
                            Some(at) => done(socket, &held.remove(at), "cancelled", PARTIAL).await?,
                            None => {
                                let error = json!({ "type": "error", "error": { "type": "invalid_request_error",
                                    "code": "response_cancel_not_active", "message": "no active response found" } });
                                socket.send(Message::Text(error.to_string().into())).await?;
                            }
                        }
                    }
                    _ => {}
                }
            }
            changed = hold.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                if !*hold.borrow_and_update() {
                    for id in std::mem::take(&mut held) {
                        done(socket, &id, "completed", USAGE).await?;
                    }
                }
            }
        }
    }
}

/// Sends response `n`'s (`id`) start: its `response.created` and deltas.
async fn start(socket: &mut WebSocket, id: &str, n: usize) -> Result<(), axum::Error> {
    let mut events = vec![json!({ "type": "response.created", "event_id": format!("event_{n}_0"),
        "response": { "id": id, "object": "realtime.response", "status": "in_progress", "output": [] } })];
    let words: Vec<&str> = TRANSCRIPT.split_inclusive(' ').collect();
    for (i, part) in words.chunks(words.len().div_ceil(DELTAS)).enumerate() {
        let common = json!({ "response_id": id, "item_id": "item_1", "output_index": 0, "content_index": 0 });
        let mut transcript = json!({ "type": "response.output_audio_transcript.delta",
            "event_id": format!("event_{n}_t{i}"), "delta": part.concat() });
        let mut audio = json!({ "type": "response.output_audio.delta",
            "event_id": format!("event_{n}_a{i}"), "delta": "AAAAAAAA" });
        for event in [&mut transcript, &mut audio] {
            event.as_object_mut().into_iter().for_each(|o| o.extend(common.as_object().cloned().unwrap_or_default()));
        }
        events.extend([transcript, audio]);
    }
    for event in events {
        socket.send(Message::Text(event.to_string().into())).await?;
    }
    Ok(())
}

/// Sends response `id`'s `response.done` with `status` and usage `u`.
async fn done(socket: &mut WebSocket, id: &str, status: &str, u: Usage) -> Result<(), axum::Error> {
    let event = json!({ "type": "response.done", "event_id": format!("event_{id}_done"),
        "response": { "id": id, "object": "realtime.response", "status": status, "output": [],
            "usage": { "total_tokens": u.input + u.output, "input_tokens": u.input, "output_tokens": u.output,
                "input_token_details": { "text_tokens": u.input - u.audio_input, "audio_tokens": u.audio_input,
                    "cached_tokens": u.cached,
                    "cached_tokens_details": { "text_tokens": u.cached - u.audio_cached, "audio_tokens": u.audio_cached } },
                "output_token_details": { "text_tokens": u.output - u.audio_output, "audio_tokens": u.audio_output } } } });
    socket.send(Message::Text(event.to_string().into())).await
}
