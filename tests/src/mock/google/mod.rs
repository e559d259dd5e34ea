//! The mock upstream's Google APIs, answering from the same
//! [`Script`] as chat completions (the shared handler in `upstream` records
//! each request and applies scripted failures first):
//!
//! - the Gemini API under `/v1beta/models/{model}:{method}`:
//!   `generateContent`, `streamGenerateContent` (SSE with `alt=sse`, else a
//!   JSON array sent as it is made), `countTokens` and `embedContent`, with
//!   the key as `x-goog-api-key` (or `key=`);
//! - Vertex AI under `/v1/projects/{p}/locations/{l}/publishers/…`: the same
//!   Gemini methods under `google`, and Anthropic's `rawPredict`,
//!   `streamRawPredict` (messages bodies without `model`, with
//!   `anthropic_version` = `vertex-2023-10-16`) and
//!   `count-tokens:rawPredict` under `anthropic`, each with an access token
//!   from the mock's token endpoint (see `auth`).
//!
//! Requests are checked as Google checks them: unknown fields, roles other
//! than `user` and `model`, empty parts, in Google's error shape
//! `{"error":{"code","message","status"}}`. Usage is the script's, split
//! the Gemini way: `promptTokenCount` is the whole prompt with
//! `cachedContentTokenCount` a part of it, `candidatesTokenCount` leaves
//! out `thoughtsTokenCount`; streamed chunks carry running usage, the last
//! one the final counts. A tool call (`functionCall`) is made when the
//! script has one, the request declares functions and its last turn is no
//! function response.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use self::auth::{MockGoogle, Refused};
use self::check::{check_generate, field, known};
use crate::mock::upstream::Script;

pub mod auth;
mod check;

/// `anthropic_version` Vertex requires in Anthropic bodies.
pub const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// Dimensions of each embedding, unless `outputDimensionality` asks.
pub const EMBEDDING_DIMENSIONS: usize = 8;
/// The text of the thought part sent when thoughts are asked for.
pub const THOUGHT: &str = "Thinking it over.";

/// A Google API call, once its path is understood.
struct Call<'a> {
    /// Vertex AI (token auth), else the Gemini API (key auth).
    vertex: bool,
    publisher: &'a str,
    model: &'a str,
    method: &'a str,
}

/// One Gemini answer: what the plain and the streamed forms say.
struct Answer {
    id: u64,
    model: String,
    script: Script,
    vertex: bool,
    /// The function call to make, `{"name", "args"}`.
    call: Option<Value>,
    thoughts: bool,
}

/// Answers `uri` when it is one of Google's paths (else `None`): checks
/// the key or token, then serves the method. `on_abandon` runs if a
/// client leaves a stream early.
pub(crate) async fn serve(
    google: &MockGoogle,
    request: (&Method, &Uri, &HeaderMap, &[u8]),
    script: Script,
    id: u64,
    on_abandon: impl FnOnce() + Send + 'static,
) -> Option<Response> {
    let (method, uri, headers, body) = request;
    let call = parse_path(uri.path())?;
    if *method != Method::POST {
        return Some(error(StatusCode::NOT_FOUND, &format!("Method {method} is not allowed on {}", uri.path())));
    }
    let refusal = {
        let auth = google.lock();
        if call.vertex {
            auth.check_bearer(headers).err().map(unauthenticated)
        } else {
            auth.check_api_key(headers, uri.query())
        }
    };
    if let Some(refusal) = refusal {
        return Some(refusal);
    }
    let request: Value = match serde_json::from_slice(body) {
        Ok(request @ Value::Object(_)) => request,
        _ => return Some(error(StatusCode::BAD_REQUEST, "Invalid JSON payload received. Expected an object.")),
    };
    if call.publisher == "anthropic" {
        return Some(anthropic(&call, script, id, request, on_abandon).await);
    }
    let sse = uri.query().is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
    Some(match call.method {
        "generateContent" | "streamGenerateContent" => {
            if let Err(message) = check_generate(&request) {
                return Some(error(StatusCode::BAD_REQUEST, &message));
            }
            if !script.first_byte_delay.is_zero() {
                tokio::time::sleep(script.first_byte_delay).await;
            }
            let answer = Answer::new(&call, script, id, &request);
            if call.method == "generateContent" { answer.whole() } else { answer.stream(sse, on_abandon) }
        }
        "countTokens" => count_tokens(&call, &script, &request),
        "embedContent" if !call.vertex => embed(&request),
        other => error(StatusCode::NOT_FOUND, &format!("models/{}:{other} is not found", call.model)),
    })
}

/// `/v1beta/models/{model}:{method}` or
/// `/v1/projects/{p}/locations/{l}/publishers/{publisher}/models/{model}:{method}`.
fn parse_path(path: &str) -> Option<Call<'_>> {
    if let Some(rest) = path.strip_prefix("/v1beta/models/") {
        let (model, method) = rest.split_once(':')?;
        return Some(Call { vertex: false, publisher: "google", model, method });
    }
    let rest = path.strip_prefix("/v1/projects/")?;
    let mut segments = rest.splitn(6, '/');
    let (_project, locations, _location, publishers, publisher, rest) =
        (segments.next()?, segments.next()?, segments.next()?, segments.next()?, segments.next()?, segments.next()?);
    if locations != "locations" || publishers != "publishers" {
        return None;
    }
    let (model, method) = rest.strip_prefix("models/")?.split_once(':')?;
    Some(Call { vertex: true, publisher, model, method })
}

/// Anthropic on Vertex: `rawPredict`, `streamRawPredict`, and
/// `count-tokens:rawPredict`, answered by the messages mock once the
/// Vertex rules are checked.
async fn anthropic(
    call: &Call<'_>,
    script: Script,
    id: u64,
    mut request: Value,
    on_abandon: impl FnOnce() + Send + 'static,
) -> Response {
    let messages_error = crate::mock::messages::error;
    let mut headers = HeaderMap::new();
    headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    if call.model == "count-tokens" && call.method == "rawPredict" {
        let body = Bytes::from(request.to_string());
        return crate::mock::messages::count_tokens(&script, &headers, &body);
    }
    let stream = match call.method {
        "rawPredict" => false,
        "streamRawPredict" => true,
        other => return error(StatusCode::NOT_FOUND, &format!("method {other} is not found")),
    };
    match request.get("anthropic_version").and_then(Value::as_str) {
        Some(VERTEX_ANTHROPIC_VERSION) => {}
        Some(other) => {
            let message = format!("anthropic_version: Input should be '{VERTEX_ANTHROPIC_VERSION}', got {other:?}");
            return messages_error(StatusCode::BAD_REQUEST, &message);
        }
        None => return messages_error(StatusCode::BAD_REQUEST, "anthropic_version: Field required"),
    }
    if request.get("model").is_some() {
        return messages_error(StatusCode::BAD_REQUEST, "model: Extra inputs are not permitted");
    }
    if request.get("stream").and_then(Value::as_bool).unwrap_or(false) != stream {
        let message = format!("stream must be {stream} on {}", call.method);
        return messages_error(StatusCode::BAD_REQUEST, &message);
    }
    let Some(object) = request.as_object_mut() else { return messages_error(StatusCode::BAD_REQUEST, "not an object") };
    object.remove("anthropic_version");
    object.insert("model".into(), json!(call.model));
    crate::mock::messages::messages(script, id, &headers, request.to_string().as_bytes(), on_abandon).await
}

/// `countTokens`: the script's prompt, for a `contents` or a whole
/// `generateContentRequest`.
fn count_tokens(call: &Call<'_>, script: &Script, request: &Value) -> Response {
    let checked = match field(request, "generateContentRequest") {
        Some(inner) => known(request, &["generatecontentrequest"], "").and_then(|()| check_generate(inner)),
        None => known(request, &["contents", "model", "systeminstruction", "tools", "generationconfig"], "").and_then(
            |()| check_generate(&json!({ "contents": request.get("contents").cloned().unwrap_or(Value::Null) })),
        ),
    };
    if let Err(message) = checked {
        return error(StatusCode::BAD_REQUEST, &message);
    }
    let mut body = json!({
        "totalTokens": script.prompt_tokens,
        "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": script.prompt_tokens }],
    });
    if call.vertex {
        body["totalBillableCharacters"] = json!(script.reply.len());
    }
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// `embedContent`: one embedding of `outputDimensionality` (else
/// `EMBEDDING_DIMENSIONS`) values. The Gemini API reports no usage for it.
fn embed(request: &Value) -> Response {
    let parts = field(request, "content").and_then(|c| c.get("parts")).and_then(Value::as_array);
    if parts.is_none_or(Vec::is_empty) {
        return error(StatusCode::BAD_REQUEST, "* EmbedContentRequest.content: content is not specified");
    }
    let dimensions =
        field(request, "outputDimensionality").and_then(Value::as_u64).map_or(EMBEDDING_DIMENSIONS, |d| d as usize);
    let values: Vec<f64> = (0..dimensions).map(|i| ((i as f64) * 0.37).sin() / 2.0).collect();
    (StatusCode::OK, axum::Json(json!({ "embedding": { "values": values } }))).into_response()
}

// === impl Answer ===

impl Answer {
    fn new(call: &Call<'_>, script: Script, id: u64, request: &Value) -> Answer {
        let thoughts = field(request, "generationConfig")
            .and_then(|c| field(c, "thinkingConfig"))
            .and_then(|t| field(t, "includeThoughts"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let call_made = function_call(&script, request);
        Answer { id, model: call.model.to_owned(), script, vertex: call.vertex, call: call_made, thoughts }
    }

    /// `usageMetadata`: final when `done`, else what a chunk mid-stream
    /// reports (the prompt and thoughts, no candidates yet).
    fn usage(&self, done: bool) -> Value {
        let s = &self.script;
        let prompt = s.prompt_tokens;
        let thoughts = s.reasoning_tokens.min(s.completion_tokens);
        let candidates = if done { s.completion_tokens - thoughts } else { 0 };
        let mut usage = Map::new();
        usage.insert("promptTokenCount".into(), json!(prompt));
        if candidates > 0 {
            usage.insert("candidatesTokenCount".into(), json!(candidates));
        }
        usage.insert("totalTokenCount".into(), json!(prompt + thoughts + candidates));
        let cached = s.cached_tokens.min(prompt);
        if cached > 0 {
            usage.insert("cachedContentTokenCount".into(), json!(cached));
        }
        usage.insert("promptTokensDetails".into(), json!([{ "modality": "TEXT", "tokenCount": prompt }]));
        if cached > 0 {
            usage.insert("cacheTokensDetails".into(), json!([{ "modality": "TEXT", "tokenCount": cached }]));
        }
        if thoughts > 0 {
            usage.insert("thoughtsTokenCount".into(), json!(thoughts));
        }
        if self.vertex {
            usage.insert("trafficType".into(), json!("ON_DEMAND"));
        }
        Value::Object(usage)
    }

    /// One response object with `parts`; `finish` adds the finish reason
    /// and final usage.
    fn response(&self, parts: Vec<Value>, finish: bool) -> Value {
        let mut candidate = json!({ "content": { "parts": parts, "role": "model" }, "index": 0 });
        if finish {
            candidate["finishReason"] = json!("STOP");
        }
        let mut response = json!({
            "candidates": [candidate],
            "modelVersion": self.model,
            "responseId": format!("mock-gemini-{}", self.id),
        });
        if self.script.include_usage {
            response["usageMetadata"] = self.usage(finish);
        }
        if self.vertex {
            response["createTime"] = json!("2026-01-01T00:00:00.000000Z");
        }
        response
    }

    fn thought_part(&self) -> Option<Value> {
        (self.thoughts && self.script.reasoning_tokens > 0).then(|| json!({ "text": THOUGHT, "thought": true }))
    }

    fn call_part(&self) -> Option<Value> {
        let call = self.call.clone()?;
        let mut part = json!({ "functionCall": call });
        if self.script.reasoning_tokens > 0 {
            part["thoughtSignature"] = json!("bW9jay10aG91Z2h0LXNpZ25hdHVyZQ==");
        }
        Some(part)
    }

    fn whole(&self) -> Response {
        let mut parts: Vec<Value> = self.thought_part().into_iter().collect();
        if !self.script.reply.is_empty() || self.call.is_none() {
            parts.push(json!({ "text": self.script.reply }));
        }
        parts.extend(self.call_part());
        (StatusCode::OK, axum::Json(self.response(parts, true))).into_response()
    }

    /// The streamed chunks: the thought, one per word of the reply, the
    /// function call whole; the last carries the finish reason and final
    /// usage. The second value of each says whether it is content (what
    /// `cut_stream_after` counts).
    fn chunks(&self) -> Vec<(Value, bool)> {
        let mut parts: Vec<(Value, bool)> = self.thought_part().into_iter().map(|p| (p, false)).collect();
        if !self.script.reply.is_empty() || self.call.is_none() {
            parts.extend(self.script.pieces().into_iter().map(|piece| (json!({ "text": piece }), true)));
        }
        parts.extend(self.call_part().map(|p| (p, true)));
        let last = parts.len() - 1;
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (part, content))| (self.response(vec![part], i == last), content))
            .collect()
    }

    /// The stream: SSE events (`data: …\r\n\r\n`) with `alt=sse`, else one
    /// JSON array written as it is made. Each chunk is a body frame sent
    /// after `chunk_delay` (but the first); `cut_stream_after` aborts after
    /// that many content chunks.
    fn stream(self, sse: bool, on_abandon: impl FnOnce() + Send + 'static) -> Response {
        let chunks = self.chunks();
        let cut = self.script.cut_stream_after.map(|n| {
            let mut seen = 0;
            chunks
                .iter()
                .position(|(_, content)| {
                    seen += usize::from(*content);
                    *content && seen == n
                })
                .map_or(chunks.len(), |i| i + 1)
        });
        let total = cut.unwrap_or(chunks.len());
        let delay = self.script.chunk_delay;
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        tokio::spawn(async move {
            for (i, (chunk, _)) in chunks.into_iter().take(total).enumerate() {
                if i > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let frame = match (sse, i) {
                    (true, _) => format!("data: {chunk}\r\n\r\n"),
                    (false, 0) => format!("[{chunk}"),
                    (false, _) => format!("\n,\r\n{chunk}"),
                };
                if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                    on_abandon();
                    return;
                }
            }
            let last = match cut {
                Some(_) => Err(std::io::Error::other("mock upstream cut the stream")),
                None if sse => return,
                None => Ok(Bytes::from_static(b"]")),
            };
            let _ = tx.send(last).await;
        });
        let content_type = if sse { "text/event-stream" } else { "application/json; charset=UTF-8" };
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from_stream(ReceiverStream::new(rx)))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }
}

/// The function call to make: the script's, when the request declares
/// functions and its last turn is not a function response.
fn function_call(script: &Script, request: &Value) -> Option<Value> {
    let tool = script.tool_use.as_ref()?;
    let tools = field(request, "tools").and_then(Value::as_array)?;
    let first = tools
        .iter()
        .filter_map(|t| field(t, "functionDeclarations").and_then(Value::as_array))
        .flatten()
        .find_map(|d| d.get("name").and_then(Value::as_str))?;
    let last = field(request, "contents").and_then(Value::as_array).and_then(|c| c.last());
    let parts = last.and_then(|c| c.get("parts")).and_then(Value::as_array);
    if parts.into_iter().flatten().any(|p| field(p, "functionResponse").is_some()) {
        return None;
    }
    let name = tool.name.clone().unwrap_or_else(|| first.to_owned());
    Some(json!({ "name": name, "args": tool.input }))
}

/// Google's error body, `{"error":{"code","message","status"}}`, with the
/// status name Google uses for `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({ "error": { "code": status.as_u16(), "message": message, "status": status_name(status) } });
    (status, axum::Json(body)).into_response()
}

/// `error` with an `ErrorInfo` detail naming `reason` (as for a bad key).
pub(crate) fn error_with_reason(status: StatusCode, message: &str, reason: &str) -> Response {
    let detail = json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": { "service": "generativelanguage.googleapis.com" }
    });
    let body = json!({
        "error": { "code": status.as_u16(), "message": message, "status": status_name(status), "details": [detail] }
    });
    (status, axum::Json(body)).into_response()
}

/// Whether `path` is one of Google's (its errors take Google's shape),
/// except Anthropic's methods on Vertex, which answer in the messages shape.
pub(crate) fn is_google_path(path: &str) -> bool {
    parse_path(path).is_some_and(|call| call.publisher != "anthropic")
}

fn status_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

/// Vertex's answer to a missing, unknown or expired access token.
fn unauthenticated(refused: Refused) -> Response {
    let message = match refused {
        Refused::Missing | Refused::Invalid => {
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
        }
        Refused::Expired => "Request had invalid authentication credentials. The access token has expired.",
    };
    error(StatusCode::UNAUTHORIZED, message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::mock::google::auth::GEMINI_KEY;
    use crate::mock::messages::ToolUse;
    use crate::mock::upstream::MockUpstream;

    fn request() -> Value {
        json!({
            "systemInstruction": { "parts": [{ "text": "be brief" }] },
            "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }],
            "generationConfig": { "maxOutputTokens": 64, "thinkingConfig": { "includeThoughts": true } }
        })
    }

    async fn post(mock: &MockUpstream, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
        let mut request = reqwest::Client::new().post(format!("{}{path}", mock.google().gemini_base_url())).json(body);
        if let Some(key) = key {
            request = request.header("x-goog-api-key", key);
        }
        request.send().await.unwrap()
    }

    /// The JSON of each `data:` event of an SSE body.
    fn events(text: &str) -> Vec<Value> {
        assert!(text.ends_with("\r\n\r\n"), "{text:?}");
        text.split("\r\n\r\n")
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn whole_answers_split_usage_the_gemini_way() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script {
            prompt_tokens: 100,
            cached_tokens: 40,
            completion_tokens: 30,
            reasoning_tokens: 12,
            ..Script::default()
        });
        let response = post(&mock, "/models/gemini-2.5-pro:generateContent", Some(GEMINI_KEY), &request()).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let candidate = &body["candidates"][0];
        assert_eq!(candidate["finishReason"], "STOP");
        assert_eq!(candidate["content"]["role"], "model");
        assert_eq!(candidate["content"]["parts"][0], json!({ "text": THOUGHT, "thought": true }));
        assert_eq!(candidate["content"]["parts"][1], json!({ "text": "Hello from the mock upstream" }));
        let usage = &body["usageMetadata"];
        assert_eq!(usage["promptTokenCount"], 100);
        assert_eq!(usage["cachedContentTokenCount"], 40);
        assert_eq!(usage["candidatesTokenCount"], 18);
        assert_eq!(usage["thoughtsTokenCount"], 12);
        assert_eq!(usage["totalTokenCount"], 130);
        assert_eq!(body["modelVersion"], "gemini-2.5-pro");

        let recorded = mock.last_request().unwrap();
        assert_eq!(recorded.path, "/v1beta/models/gemini-2.5-pro:generateContent");
        assert_eq!(recorded.header("x-goog-api-key"), Some(GEMINI_KEY));
    }

    #[tokio::test]
    async fn streams_send_running_usage_and_the_final_counts_last() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { reply: "one two three".into(), reasoning_tokens: 3, ..Script::default() });
        let path = "/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
        let response = post(&mock, path, Some(GEMINI_KEY), &request()).await;
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let chunks = events(&response.text().await.unwrap());
        assert_eq!(chunks.len(), 4, "a thought and three words");
        assert_eq!(chunks[0]["candidates"][0]["content"]["parts"][0]["thought"], true);
        let text: String =
            chunks[1..].iter().map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap()).collect();
        assert_eq!(text, "one two three");
        assert!(chunks[..3].iter().all(|c| c["candidates"][0].get("finishReason").is_none()));
        assert_eq!(chunks[1]["usageMetadata"]["totalTokenCount"], 14, "the prompt and thoughts so far");
        assert_eq!(chunks[3]["candidates"][0]["finishReason"], "STOP");
        assert_eq!(chunks[3]["usageMetadata"]["candidatesTokenCount"], 4);
        assert_eq!(chunks[3]["usageMetadata"]["totalTokenCount"], 18);

        let path = "/models/gemini-2.5-flash:streamGenerateContent";
        let response = post(&mock, path, Some(GEMINI_KEY), &request()).await;
        let array: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(array.as_array().unwrap().len(), 4, "without alt=sse the stream is one JSON array");
    }

    #[tokio::test]
    async fn declared_functions_are_called_until_a_function_answers() {
        let mock = MockUpstream::start().await.unwrap();
        let tool_use = ToolUse { name: None, input: json!({ "city": "Paris" }) };
        mock.set_script(Script { reply: String::new(), tool_use: Some(tool_use), ..Script::default() });
        let mut body = request();
        body["tools"] =
            json!([{ "functionDeclarations": [{ "name": "get_weather", "parameters": { "type": "object" } }] }]);
        let answer: Value =
            post(&mock, "/models/m:generateContent", Some(GEMINI_KEY), &body).await.json().await.unwrap();
        let parts = answer["candidates"][0]["content"]["parts"].as_array().unwrap();
        assert_eq!(parts.len(), 1, "{answer}");
        assert_eq!(parts[0]["functionCall"], json!({ "name": "get_weather", "args": { "city": "Paris" } }));

        body["contents"] = json!([
            { "role": "user", "parts": [{ "text": "weather?" }] },
            { "role": "model", "parts": [{ "functionCall": { "name": "get_weather", "args": {} } }] },
            { "role": "user", "parts": [{ "functionResponse": { "name": "get_weather", "response": { "t": 20 } } }] }
        ]);
        let answer: Value =
            post(&mock, "/models/m:generateContent", Some(GEMINI_KEY), &body).await.json().await.unwrap();
        assert!(answer["candidates"][0]["content"]["parts"][0].get("functionCall").is_none(), "{answer}");
    }

    #[tokio::test]
    async fn requests_google_would_refuse_get_its_error_shape() {
        let mock = MockUpstream::start().await.unwrap();
        let path = "/models/m:generateContent";
        let cases = [
            (json!({ "contents": [] }), "contents is not specified"),
            (json!({ "contents": [{ "role": "assistant", "parts": [{ "text": "x" }] }] }), "Please use a valid role"),
            (json!({ "contents": [{ "role": "user", "content": "x" }] }), "Unknown name \"content\""),
            (json!({ "contents": [{ "role": "user", "parts": [{}] }] }), "oneof field 'data'"),
            (json!({ "messages": [], "contents": [] }), "Unknown name \"messages\""),
            (
                json!({ "contents": [{ "parts": [{ "text": "x" }] }], "generationConfig": { "max_tokens": 5 } }),
                "Unknown name \"max_tokens\"",
            ),
        ];
        for (body, message) in cases {
            let response = post(&mock, path, Some(GEMINI_KEY), &body).await;
            assert_eq!(response.status(), 400, "{body}");
            let error: Value = response.json().await.unwrap();
            assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");
            assert!(error["error"]["message"].as_str().unwrap().contains(message), "{error}");
        }
        let snake = json!({ "system_instruction": { "parts": [{ "text": "s" }] }, "contents": [{ "parts": [{ "text": "x" }] }] });
        assert_eq!(post(&mock, path, Some(GEMINI_KEY), &snake).await.status(), 200, "snake_case names are accepted");

        let response = post(&mock, path, Some("AIza-wrong"), &request()).await;
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["details"][0]["reason"], "API_KEY_INVALID");
        let response = post(&mock, path, None, &request()).await;
        assert_eq!(response.status(), 403);
        assert_eq!(response.json::<Value>().await.unwrap()["error"]["status"], "PERMISSION_DENIED");

        mock.fail_next(429, 1);
        let response = post(&mock, path, Some(GEMINI_KEY), &request()).await;
        assert_eq!(response.status(), 429);
        assert_eq!(response.json::<Value>().await.unwrap()["error"]["status"], "RESOURCE_EXHAUSTED");
    }

    #[tokio::test]
    async fn tokens_are_counted_and_contents_embedded() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { prompt_tokens: 23, ..Script::default() });
        let body = json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] });
        let count: Value =
            post(&mock, "/models/gemini-2.5-pro:countTokens", Some(GEMINI_KEY), &body).await.json().await.unwrap();
        assert_eq!(count["totalTokens"], 23);
        let wrapped =
            json!({ "generateContentRequest": { "model": "models/gemini-2.5-pro", "contents": body["contents"] } });
        let count: Value =
            post(&mock, "/models/gemini-2.5-pro:countTokens", Some(GEMINI_KEY), &wrapped).await.json().await.unwrap();
        assert_eq!(count["totalTokens"], 23);

        let body = json!({ "content": { "parts": [{ "text": "embed me" }] }, "outputDimensionality": 4 });
        let embedding: Value = post(&mock, "/models/gemini-embedding-001:embedContent", Some(GEMINI_KEY), &body)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(embedding["embedding"]["values"].as_array().unwrap().len(), 4);
    }

    #[tokio::test]
    async fn vertex_serves_claude_bodies_without_model_and_with_its_anthropic_version() {
        let mock = MockUpstream::start().await.unwrap();
        let google = mock.google();
        google.state.lock().unwrap().grant_for_test("tok");
        let base = google.vertex_base_url("proj", "us-east5");
        let post = |method: &str, body: Value| {
            reqwest::Client::new()
                .post(format!("{base}/publishers/anthropic/models/claude-sonnet-4-5@20250929:{method}"))
                .bearer_auth("tok")
                .json(&body)
                .send()
        };
        let body = json!({
            "anthropic_version": VERTEX_ANTHROPIC_VERSION,
            "max_tokens": 64,
            "messages": [{ "role": "user", "content": "hi" }]
        });
        let answer: Value = post("rawPredict", body.clone()).await.unwrap().json().await.unwrap();
        assert_eq!(answer["type"], "message", "{answer}");
        assert_eq!(answer["model"], "claude-sonnet-4-5@20250929");

        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let response = post("streamRawPredict", streamed).await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert!(response.text().await.unwrap().contains("event: message_stop"));

        let mut with_model = body.clone();
        with_model["model"] = json!("claude-sonnet-4-5");
        let refused = post("rawPredict", with_model).await.unwrap();
        assert_eq!(refused.status(), 400);
        assert_eq!(refused.json::<Value>().await.unwrap()["error"]["type"], "invalid_request_error");
        let mut old = body.clone();
        old["anthropic_version"] = json!("2023-06-01");
        assert_eq!(post("rawPredict", old).await.unwrap().status(), 400);
        assert_eq!(post("streamRawPredict", body).await.unwrap().status(), 400, "stream must match the method");

        let count = reqwest::Client::new()
            .post(format!("{base}/publishers/anthropic/models/count-tokens:rawPredict"))
            .bearer_auth("tok")
            .json(&json!({ "model": "claude-sonnet-4-5@20250929", "messages": [{ "role": "user", "content": "hi" }] }))
            .send()
            .await
            .unwrap();
        assert_eq!(count.json::<Value>().await.unwrap(), json!({ "input_tokens": 11 }));
    }
}
