//! Azure OpenAI's wire protocol on the mock upstream's address (a channel's
//! base URL is then `http://127.0.0.1:PORT`, the resource endpoint): chat
//! completions and embeddings at a deployment's URL
//! (`/openai/deployments/{deployment}/…?api-version=…`) and on the v1 API
//! (`/openai/v1/…`, the deployment named by the body's `model`).
//!
//! Refuses as Azure does, in its error shape `{"error":{"code","message"}}`:
//! a missing `api-version` on a deployment URL (404), an unknown one (400),
//! an unknown deployment (404 `DeploymentNotFound`), a wrong `api-key` or,
//! in Entra mode, a wrong bearer token (401). Answers like OpenAI with
//! Azure's additions (content filter results, a first stream chunk that only
//! carries `prompt_filter_results`, the deployment's model version as
//! `model`), including a tool call when tools are offered and the last turn
//! is not a tool result. Every request is recorded ([`Received`]); find a
//! mock's side with [`MockAzure::of`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use crate::mock::upstream::MockUpstream;

/// The text every chat completion answers.
pub const REPLY: &str = "Hello from the mock Azure deployment";
/// Chat usage: the whole prompt, the part of it read from the cache, the
/// completion and the part of it spent reasoning.
pub const PROMPT_TOKENS: i64 = 2000;
pub const CACHED_TOKENS: i64 = 1024;
pub const COMPLETION_TOKENS: i64 = 300;
pub const REASONING_TOKENS: i64 = 0;
/// Embedding usage per input, and dimensions of each embedding.
pub const EMBEDDING_TOKENS_PER_INPUT: i64 = 5;
pub const EMBEDDING_DIMENSIONS: usize = 4;
/// The arguments of every tool call the mock makes.
pub const TOOL_ARGUMENTS: &str = r#"{"location":"Paris"}"#;
/// The `api-version` values deployment URLs accept (the v1 API takes none,
/// `v1` or `preview`).
pub const API_VERSIONS: [&str; 4] = ["2024-06-01", "2024-10-21", "2025-01-01-preview", "2025-04-01-preview"];
/// The key (or Entra token) of a mock that was not set up.
pub const DEFAULT_KEY: &str = "azure-resource-key-0123456789abcdef";

/// How the resource authenticates callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// The resource's key in the `api-key` header.
    ApiKey,
    /// A Microsoft Entra ID token as `Authorization: Bearer`.
    Entra,
}

/// What the mock resource holds.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The key (`Auth::ApiKey`) or token (`Auth::Entra`) it accepts.
    pub key: String,
    pub auth: Auth,
    /// Deployment name and the model version it runs (answered as `model`).
    pub deployments: Vec<(String, String)>,
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// The `api-key` header.
    pub api_key: Option<String>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The JSON body, `Value::Null` when it is not JSON.
    pub json: Value,
}

/// The Azure side of one mock upstream.
#[derive(Clone)]
pub struct MockAzure {
    state: Arc<Mutex<Inner>>,
}

struct Inner {
    setup: Setup,
    received: Vec<Received>,
    next: u64,
}

/// What a request asks for, once its URL is understood.
struct Call {
    /// The deployment's model version.
    model: String,
    operation: Operation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Chat,
    Embeddings,
}

/// Azure's refusal of a request: status, error code and message.
type Refusal = (StatusCode, &'static str, &'static str);

static REGISTRY: LazyLock<Mutex<HashMap<SocketAddr, Arc<Mutex<Inner>>>>> = LazyLock::new(Mutex::default);

/// The routes of the mock at `addr` (merged into its router): everything
/// under `/openai/`.
pub fn routes<S: Clone + Send + Sync + 'static>(addr: SocketAddr) -> Router<S> {
    let state = Arc::new(Mutex::new(Inner { setup: Setup::default(), received: Vec::new(), next: 0 }));
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).insert(addr, state.clone());
    Router::new().route("/openai/{*rest}", any(handle)).with_state(state)
}

// === impl MockAzure ===

impl MockAzure {
    /// The Azure side of `upstream`.
    pub fn of(upstream: &MockUpstream) -> MockAzure {
        let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let state = registry.get(&upstream.addr()).cloned().expect("the mock upstream serves no Azure routes");
        MockAzure { state }
    }

    /// Replaces what the resource holds, for requests from now on.
    pub fn set_up(&self, setup: Setup) {
        lock(&self.state).setup = setup;
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state).received.clone()
    }
}

fn lock(state: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

// === impl Setup ===

impl Default for Setup {
    /// [`DEFAULT_KEY`] as `api-key`, one deployment `gpt-4o` running
    /// `gpt-4o-2024-11-20`.
    fn default() -> Setup {
        Setup {
            key: DEFAULT_KEY.into(),
            auth: Auth::ApiKey,
            deployments: vec![("gpt-4o".into(), "gpt-4o-2024-11-20".into())],
        }
    }
}

impl Setup {
    fn model_of(&self, deployment: &str) -> Option<&str> {
        self.deployments.iter().find(|(d, _)| d == deployment).map(|(_, m)| m.as_str())
    }
}

// === impl Received ===

impl Received {
    /// The value of query parameter `name`, if given.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').filter_map(|p| p.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

async fn handle(State(state): State<Arc<Mutex<Inner>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let text = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        api_key: text("api-key"),
        authorization: text("authorization"),
        json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let (setup, id) = {
        let mut inner = lock(&state);
        inner.received.push(received.clone());
        inner.next += 1;
        (inner.setup.clone(), inner.next)
    };
    let call = match authenticate(&setup, &parts.headers).and_then(|()| route(&setup, &received)) {
        Ok(call) => call,
        Err((status, code, message)) => return error(status, code, message),
    };
    if !received.json.is_object() {
        return error(StatusCode::BAD_REQUEST, "BadRequest", "The request body must be a JSON object.");
    }
    match call.operation {
        Operation::Chat => chat(&received.json, &call.model, id),
        Operation::Embeddings => json_ok(embeddings(&received.json, &call.model)),
    }
}

/// Whether the caller holds the resource's credential the way it is set up.
fn authenticate(setup: &Setup, headers: &HeaderMap) -> Result<(), Refusal> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match setup.auth {
        Auth::ApiKey if header("api-key") == Some(setup.key.as_str()) => Ok(()),
        Auth::ApiKey => Err((
            StatusCode::UNAUTHORIZED,
            "401",
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key \
             for an active subscription and use a correct regional API endpoint for your resource.",
        )),
        Auth::Entra if header("authorization") == Some(format!("Bearer {}", setup.key).as_str()) => Ok(()),
        Auth::Entra => Err((
            StatusCode::UNAUTHORIZED,
            "401",
            "Unauthorized. Access token is missing, invalid, audience is incorrect \
             (https://cognitiveservices.azure.com), or have expired.",
        )),
    }
}

/// The deployment and operation a request's URL names, or Azure's refusal.
fn route(setup: &Setup, r: &Received) -> Result<Call, Refusal> {
    let not_found = || (StatusCode::NOT_FOUND, "404", "Resource not found");
    let operation = |rest: &str| match rest {
        "chat/completions" => Some(Operation::Chat),
        "embeddings" => Some(Operation::Embeddings),
        _ => None,
    };
    let version = r.query_param("api-version");
    if r.method != "POST" {
        return Err(not_found());
    }
    if let Some(rest) = r.path.strip_prefix("/openai/v1/") {
        let operation = operation(rest).ok_or_else(not_found)?;
        if version.is_some_and(|v| v != "v1" && v != "preview") {
            return Err(unsupported_version());
        }
        let Some(deployment) = r.json.get("model").and_then(Value::as_str) else {
            return Err((StatusCode::BAD_REQUEST, "BadRequest", "model is required"));
        };
        let model = setup.model_of(deployment).ok_or_else(deployment_not_found)?;
        return Ok(Call { model: model.to_owned(), operation });
    }
    let rest = r.path.strip_prefix("/openai/deployments/").ok_or_else(not_found)?;
    let (deployment, rest) = rest.split_once('/').ok_or_else(not_found)?;
    let operation = operation(rest).ok_or_else(not_found)?;
    match version {
        None => return Err(not_found()),
        Some(v) if !API_VERSIONS.contains(&v) => return Err(unsupported_version()),
        Some(_) => {}
    }
    let model = setup.model_of(deployment).ok_or_else(deployment_not_found)?;
    Ok(Call { model: model.to_owned(), operation })
}

fn unsupported_version() -> Refusal {
    (StatusCode::BAD_REQUEST, "BadRequest", "API version not supported")
}

fn deployment_not_found() -> Refusal {
    (
        StatusCode::NOT_FOUND,
        "DeploymentNotFound",
        "The API deployment for this resource does not exist. If you created the deployment within the last 5 \
         minutes, please wait a moment and try again.",
    )
}

/// Azure's error shape.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({ "error": { "code": code, "message": message } });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn json_ok(body: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn usage() -> Value {
    json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        "prompt_tokens_details": { "cached_tokens": CACHED_TOKENS, "audio_tokens": 0 },
        "completion_tokens_details": {
            "reasoning_tokens": REASONING_TOKENS,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0
        }
    })
}

/// Every category of Azure's content filter, none triggered.
fn filter_results() -> Value {
    let safe = json!({ "filtered": false, "severity": "safe" });
    json!({ "hate": safe, "self_harm": safe, "sexual": safe, "violence": safe })
}

fn prompt_filter_results() -> Value {
    json!([{ "prompt_index": 0, "content_filter_results": filter_results() }])
}

/// The tool the answer calls: the first one offered, unless the last turn
/// is a tool's result or `tool_choice` is `none`.
fn tool_to_call(request: &Value) -> Option<String> {
    let tools = request.get("tools")?.as_array()?;
    let last_role = request["messages"].as_array().and_then(|m| m.last()).map(|m| m["role"].clone());
    if last_role == Some(json!("tool")) || request["tool_choice"] == "none" {
        return None;
    }
    tools.first()?["function"]["name"].as_str().map(str::to_owned)
}

fn chat(request: &Value, model: &str, id: u64) -> Response {
    let completion_id = format!("chatcmpl-azure{id}");
    let tool = tool_to_call(request);
    let call_id = format!("call_azure{id}");
    if request["stream"] != true {
        let (message, finish) = match &tool {
            Some(name) => (
                json!({
                    "role": "assistant", "content": null, "refusal": null, "annotations": [],
                    "tool_calls": [{
                        "id": call_id, "type": "function",
                        "function": { "name": name, "arguments": TOOL_ARGUMENTS }
                    }]
                }),
                "tool_calls",
            ),
            None => (json!({ "role": "assistant", "content": REPLY, "refusal": null, "annotations": [] }), "stop"),
        };
        return json_ok(json!({
            "id": completion_id,
            "object": "chat.completion",
            "created": now(),
            "model": model,
            "system_fingerprint": "fp_azure",
            "prompt_filter_results": prompt_filter_results(),
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish,
                "content_filter_results": filter_results()
            }],
            "usage": usage()
        }));
    }
    let include_usage = request["stream_options"]["include_usage"] == true;
    let chunk = |choices: Value| {
        json!({
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": now(),
            "model": model,
            "system_fingerprint": "fp_azure",
            "choices": choices
        })
    };
    let choice = |delta: Value, finish: Value| {
        let mut choice = json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish });
        if finish.is_null() {
            choice["content_filter_results"] = filter_results();
        }
        choice
    };
    // Azure's first chunk has no choices, only the prompt's filter results.
    let mut events = vec![json!({
        "id": "", "object": "", "created": 0, "model": "", "choices": [],
        "prompt_filter_results": prompt_filter_results()
    })];
    let finish = match &tool {
        Some(name) => {
            let call = json!([{
                "index": 0, "id": call_id, "type": "function",
                "function": { "name": name, "arguments": "" }
            }]);
            let delta = json!({ "role": "assistant", "content": null, "refusal": null, "tool_calls": call });
            events.push(chunk(json!([choice(delta, Value::Null)])));
            let (head, tail) = TOOL_ARGUMENTS.split_at(TOOL_ARGUMENTS.len() / 2);
            for piece in [head, tail] {
                let delta = json!({ "tool_calls": [{ "index": 0, "function": { "arguments": piece } }] });
                events.push(chunk(json!([choice(delta, Value::Null)])));
            }
            "tool_calls"
        }
        None => {
            let delta = json!({ "role": "assistant", "content": "", "refusal": null });
            events.push(chunk(json!([choice(delta, Value::Null)])));
            for word in REPLY.split_inclusive(' ') {
                events.push(chunk(json!([choice(json!({ "content": word }), Value::Null)])));
            }
            "stop"
        }
    };
    events.push(chunk(json!([choice(json!({}), json!(finish))])));
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage();
        events.push(last);
    }
    let mut frames: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    frames.push("data: [DONE]\n\n".into());
    let stream = futures_util::stream::iter(frames.into_iter().map(|f| Ok::<_, Infallible>(Bytes::from(f))));
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream"));
    response
}

fn embeddings(request: &Value, model: &str) -> Value {
    let inputs = match &request["input"] {
        Value::Array(items) => items.len().max(1),
        _ => 1,
    };
    let data: Vec<Value> = (0..inputs)
        .map(|i| {
            let vector: Vec<f64> = (0..EMBEDDING_DIMENSIONS).map(|d| ((i + d) as f64 + 1.0) / 10.0).collect();
            json!({ "object": "embedding", "index": i, "embedding": vector })
        })
        .collect();
    let tokens = EMBEDDING_TOKENS_PER_INPUT * inputs as i64;
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": { "prompt_tokens": tokens, "total_tokens": tokens }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    async fn post(mock: &MockUpstream, path: &str, headers: &[(&str, &str)], body: &Value) -> (u16, String) {
        let mut request = reqwest::Client::new().post(format!("http://{}{path}", mock.addr())).json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    fn chat_body(stream: bool) -> Value {
        json!({ "model": "gpt-4o", "messages": [{ "role": "user", "content": "hi" }], "stream": stream,
                "stream_options": if stream { json!({ "include_usage": true }) } else { Value::Null } })
    }

    const KEY: (&str, &str) = ("api-key", DEFAULT_KEY);

    /// A refusal case: path, headers, status and error code.
    type Case = (&'static str, &'static [(&'static str, &'static str)], u16, &'static str);

    #[tokio::test]
    async fn deployment_url_answers_with_the_model_version_usage_and_filter_results() {
        let mock = MockUpstream::start().await.unwrap();
        let path = "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21";
        let (status, text) = post(&mock, path, &[KEY], &chat_body(false)).await;
        assert_eq!(status, 200, "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["model"], "gpt-4o-2024-11-20");
        assert_eq!(body["choices"][0]["message"]["content"], REPLY);
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], CACHED_TOKENS);
        assert_eq!(body["prompt_filter_results"][0]["prompt_index"], 0);
        let seen = MockAzure::of(&mock).received();
        assert_eq!(seen[0].path, "/openai/deployments/gpt-4o/chat/completions");
        assert_eq!(seen[0].query_param("api-version"), Some("2024-10-21"));
        assert_eq!(seen[0].api_key.as_deref(), Some(DEFAULT_KEY));
    }

    #[tokio::test]
    async fn refusals_come_in_azures_error_shape() {
        let mock = MockUpstream::start().await.unwrap();
        let cases: [Case; 6] = [
            ("/openai/deployments/gpt-4o/chat/completions", &[KEY], 404, "404"),
            ("/openai/deployments/gpt-4o/chat/completions?api-version=1999-01-01", &[KEY], 400, "BadRequest"),
            ("/openai/deployments/nope/chat/completions?api-version=2024-10-21", &[KEY], 404, "DeploymentNotFound"),
            ("/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", &[("api-key", "x")], 401, "401"),
            ("/openai/v1/chat/completions", &[("authorization", "Bearer x")], 401, "401"),
            ("/openai/v1/rerank", &[KEY], 404, "404"),
        ];
        for (path, headers, status, code) in cases {
            let (got, text) = post(&mock, path, headers, &chat_body(false)).await;
            assert_eq!(got, status, "{path}: {text}");
            let body: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(body["error"]["code"], code, "{path}: {text}");
            assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{text}");
        }
    }

    #[tokio::test]
    async fn v1_api_takes_the_deployment_from_the_body_and_entra_tokens_as_bearer() {
        let mock = MockUpstream::start().await.unwrap();
        let azure = MockAzure::of(&mock);
        azure.set_up(Setup {
            key: "entra-token".into(),
            auth: Auth::Entra,
            deployments: vec![("prod".into(), "gpt-4.1-2025-04-14".into())],
        });
        let mut body = chat_body(false);
        body["model"] = json!("prod");
        let (status, text) = post(&mock, "/openai/v1/chat/completions", &[KEY], &body).await;
        assert_eq!(status, 401, "an api-key is not an Entra token: {text}");
        let bearer = ("authorization", "Bearer entra-token");
        let (status, text) = post(&mock, "/openai/v1/chat/completions", &[bearer], &body).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["model"], "gpt-4.1-2025-04-14");
        body["model"] = json!("gpt-4o");
        let (status, text) = post(&mock, "/openai/v1/chat/completions", &[bearer], &body).await;
        assert_eq!((status, text.contains("DeploymentNotFound")), (404, true), "{text}");
    }

    #[tokio::test]
    async fn stream_opens_with_prompt_filter_results_and_ends_with_usage_then_done() {
        let mock = MockUpstream::start().await.unwrap();
        let path = "/openai/deployments/gpt-4o/chat/completions?api-version=2025-04-01-preview";
        let (status, text) = post(&mock, path, &[KEY], &chat_body(true)).await;
        assert_eq!(status, 200, "{text}");
        let data: Vec<&str> = text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect();
        assert_eq!(data.last(), Some(&"[DONE]"));
        let events: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
        assert_eq!(events[0]["choices"], json!([]));
        assert!(events[0]["prompt_filter_results"].is_array());
        let streamed: String =
            events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect::<String>();
        assert_eq!(streamed, REPLY);
        let last = events.last().unwrap();
        assert_eq!(last["usage"]["prompt_tokens"], PROMPT_TOKENS);
        assert_eq!(last["usage"]["completion_tokens"], COMPLETION_TOKENS);
    }

    #[tokio::test]
    async fn offered_tools_are_called_until_a_tool_result_comes_back() {
        let mock = MockUpstream::start().await.unwrap();
        let path = "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21";
        let tool = json!({ "type": "function", "function": { "name": "weather", "parameters": { "type": "object" } } });
        let mut body = chat_body(false);
        body["tools"] = json!([tool]);
        let (_, text) = post(&mock, path, &[KEY], &body).await;
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
        let call = &answer["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(
            (call["function"]["name"].as_str(), call["function"]["arguments"].as_str()),
            (Some("weather"), Some(TOOL_ARGUMENTS))
        );
        body["stream"] = json!(true);
        let (_, text) = post(&mock, path, &[KEY], &body).await;
        let arguments: String = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|e| {
                e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().map(str::to_owned)
            })
            .collect();
        assert_eq!(arguments, TOOL_ARGUMENTS);
        body["stream"] = json!(false);
        body["messages"] = json!([
            { "role": "user", "content": "weather?" },
            { "role": "assistant", "content": null, "tool_calls": [call] },
            { "role": "tool", "tool_call_id": call["id"], "content": "sunny" }
        ]);
        let (_, text) = post(&mock, path, &[KEY], &body).await;
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], REPLY);
    }

    #[tokio::test]
    async fn embeddings_are_served_at_the_deployment() {
        let mock = MockUpstream::start().await.unwrap();
        let path = "/openai/deployments/gpt-4o/embeddings?api-version=2024-10-21";
        let (status, text) = post(&mock, path, &[KEY], &json!({ "input": ["a", "b"] })).await;
        assert_eq!(status, 200, "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["data"].as_array().unwrap().len(), 2);
        assert_eq!(body["usage"]["prompt_tokens"], 2 * EMBEDDING_TOKENS_PER_INPUT);
    }
}
