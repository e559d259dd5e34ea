//! The mock upstream's messages API: `POST /v1/messages`, plain and SSE,
//! answering from the same [`Script`] as chat completions, and
//! `POST /v1/messages/count_tokens`, which counts the script's prompt. The
//! shared handler in `upstream` records each request (headers included:
//! `x-api-key`, `anthropic-version`, `anthropic-beta`) and applies scripted
//! failures and the expected key before a request gets here.
//!
//! Token counts are read the chat way: `Script::prompt_tokens` is the whole
//! prompt and `cached_tokens` a part of it, so the answer reports
//! `input_tokens = prompt_tokens - cached_tokens` and
//! `cache_read_input_tokens = cached_tokens`, and a gateway that meters
//! either dialect correctly bills the same numbers.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::mock::upstream::Script;

/// A tool call the mock makes when a messages request offers tools.
#[derive(Debug, Clone)]
pub struct ToolUse {
    /// The tool to call; `None` calls the first tool the request offers.
    pub name: Option<String>,
    /// The call's arguments, sent as its `input`.
    pub input: Value,
}

/// One SSE event of a streamed answer.
struct Event {
    name: &'static str,
    data: Value,
    /// A content delta: what `Script::cut_stream_after` counts.
    content: bool,
}

/// Answers `POST /v1/messages` with `script`; `id` numbers the message.
/// Requires the `anthropic-version` header, a `model`, an integer
/// `max_tokens` and a `messages` array (else 400 in the messages error
/// shape). `on_abandon` runs if the client leaves a stream before its end.
pub(crate) async fn messages(
    script: Script,
    id: u64,
    headers: &HeaderMap,
    body: &[u8],
    on_abandon: impl FnOnce() + Send + 'static,
) -> Response {
    if !headers.contains_key("anthropic-version") {
        return error(StatusCode::BAD_REQUEST, "anthropic-version: header is required");
    }
    let request: Value = match serde_json::from_slice(body) {
        Ok(request @ Value::Object(_)) => request,
        _ => return error(StatusCode::BAD_REQUEST, "There was an error parsing the body of your request"),
    };
    let Some(model) = request.get("model").and_then(Value::as_str) else {
        return error(StatusCode::BAD_REQUEST, "model: Field required");
    };
    if !request.get("max_tokens").is_some_and(Value::is_u64) {
        return error(StatusCode::BAD_REQUEST, "max_tokens: Field required");
    }
    if !request.get("messages").is_some_and(Value::is_array) {
        return error(StatusCode::BAD_REQUEST, "messages: Field required");
    }
    let tool = tool_call(&script, &request, id);
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if !script.first_byte_delay.is_zero() {
        tokio::time::sleep(script.first_byte_delay).await;
    }
    let answer = Answer { id: format!("msg_mock{id}"), model: model.to_string(), script, tool };
    if stream { answer.stream(on_abandon) } else { answer.whole() }
}

/// Answers `POST /v1/messages/count_tokens` with
/// `{"input_tokens": Script::prompt_tokens}`, the whole prompt as the
/// messages answer reports it. Requires the `anthropic-version` header, a
/// `model` and a `messages` array (else 400 in the messages error shape).
pub(crate) fn count_tokens(script: &Script, headers: &HeaderMap, body: &[u8]) -> Response {
    if !headers.contains_key("anthropic-version") {
        return error(StatusCode::BAD_REQUEST, "anthropic-version: header is required");
    }
    let request: Value = match serde_json::from_slice(body) {
        Ok(request @ Value::Object(_)) => request,
        _ => return error(StatusCode::BAD_REQUEST, "There was an error parsing the body of your request"),
    };
    if !request.get("model").is_some_and(Value::is_string) {
        return error(StatusCode::BAD_REQUEST, "model: Field required");
    }
    if !request.get("messages").is_some_and(Value::is_array) {
        return error(StatusCode::BAD_REQUEST, "messages: Field required");
    }
    (StatusCode::OK, axum::Json(json!({ "input_tokens": script.prompt_tokens }))).into_response()
}

/// A messages error body: `{"type":"error","error":{"type","message"}}`
/// with the error type the messages API uses for `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    let body = json!({ "type": "error", "error": { "type": kind, "message": message } });
    (status, axum::Json(body)).into_response()
}

/// The `tool_use` block to answer with: when the script has a call and the
/// request offers tools.
fn tool_call(script: &Script, request: &Value, id: u64) -> Option<Value> {
    let call = script.tool_use.as_ref()?;
    let tools = request.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty())?;
    let name = match &call.name {
        Some(name) => name.clone(),
        None => tools[0].get("name").and_then(Value::as_str).unwrap_or("tool").to_string(),
    };
    Some(json!({ "type": "tool_use", "id": format!("toolu_mock{id}"), "name": name, "input": call.input }))
}

/// One answer: what both the plain and the streamed form say.
struct Answer {
    id: String,
    model: String,
    script: Script,
    tool: Option<Value>,
}

// === impl Answer ===

impl Answer {
    fn stop_reason(&self) -> &'static str {
        if self.tool.is_some() { "tool_use" } else { "end_turn" }
    }

    /// The usage object with `output_tokens` as given: the script's prompt
    /// split the messages way, `input_tokens` without cache reads and writes.
    fn usage(&self, output_tokens: u32) -> Value {
        let prompt = self.script.prompt_tokens;
        let cached = self.script.cached_tokens.min(prompt);
        let write_5m = self.script.cache_write_5m_tokens.min(prompt - cached);
        let write_1h = self.script.cache_write_1h_tokens.min(prompt - cached - write_5m);
        json!({
            "input_tokens": prompt - cached - write_5m - write_1h,
            "cache_creation_input_tokens": write_5m + write_1h,
            "cache_read_input_tokens": cached,
            "cache_creation": { "ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h },
            "output_tokens": output_tokens,
        })
    }

    /// The message object; `content` and `stop_reason` as given.
    fn message(&self, content: Value, stop_reason: Value, output_tokens: u32) -> Value {
        let mut message = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
        });
        if self.script.include_usage {
            message["usage"] = self.usage(output_tokens);
        }
        message
    }

    fn whole(&self) -> Response {
        let mut content = Vec::new();
        if !self.script.reply.is_empty() || self.tool.is_none() {
            content.push(json!({ "type": "text", "text": self.script.reply }));
        }
        content.extend(self.tool.clone());
        let body = self.message(Value::Array(content), self.stop_reason().into(), self.script.completion_tokens);
        (StatusCode::OK, axum::Json(body)).into_response()
    }

    /// Every event of the streamed answer, in order, as the messages API
    /// sends them: `message_start` (with an early `output_tokens` of at most
    /// 1, as the real API reports), a text block with one delta per word, a
    /// `ping`, the tool block with its input in two pieces, `message_delta`
    /// with the final usage, `message_stop`.
    fn events(&self) -> Vec<Event> {
        let event = |name, data| Event { name, data, content: false };
        let delta = |index: usize, delta: Value| Event {
            name: "content_block_delta",
            data: json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            content: true,
        };
        let mut events = vec![event(
            "message_start",
            json!({
                "type": "message_start",
                "message": self.message(json!([]), Value::Null, self.script.completion_tokens.min(1)),
            }),
        )];
        let mut index = 0;
        if !self.script.reply.is_empty() || self.tool.is_none() {
            let start =
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } });
            events.push(event("content_block_start", start));
            events.push(event("ping", json!({ "type": "ping" })));
            for piece in self.script.pieces() {
                events.push(delta(0, json!({ "type": "text_delta", "text": piece })));
            }
            events.push(event("content_block_stop", json!({ "type": "content_block_stop", "index": 0 })));
            index = 1;
        }
        if let Some(tool) = &self.tool {
            let mut block = tool.clone();
            block["input"] = json!({});
            let start = json!({ "type": "content_block_start", "index": index, "content_block": block });
            events.push(event("content_block_start", start));
            let input = tool["input"].to_string();
            let mut cut = input.len() / 2;
            while !input.is_char_boundary(cut) {
                cut -= 1;
            }
            for piece in [&input[..cut], &input[cut..]] {
                events.push(delta(index, json!({ "type": "input_json_delta", "partial_json": piece })));
            }
            events.push(event("content_block_stop", json!({ "type": "content_block_stop", "index": index })));
        }
        let mut finish = json!({
            "type": "message_delta",
            "delta": { "stop_reason": self.stop_reason(), "stop_sequence": null },
        });
        if self.script.include_usage {
            finish["usage"] = json!({ "output_tokens": self.script.completion_tokens });
        }
        events.push(event("message_delta", finish));
        events.push(event("message_stop", json!({ "type": "message_stop" })));
        events
    }

    /// SSE answer: each event its own body frame, sent after `chunk_delay`
    /// (but the first). With `cut_stream_after: Some(n)` the connection is
    /// aborted right after the n-th content delta.
    fn stream(self, on_abandon: impl FnOnce() + Send + 'static) -> Response {
        let mut events = self.events();
        let cut = self.script.cut_stream_after.map(|n| {
            let mut seen = 0;
            let end = events.iter().position(|e| {
                seen += usize::from(e.content);
                e.content && seen == n
            });
            end.map_or(events.len(), |i| i + 1)
        });
        if let Some(cut) = cut {
            events.truncate(cut);
        }
        let delay = self.script.chunk_delay;
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        tokio::spawn(async move {
            for (i, event) in events.into_iter().enumerate() {
                if i > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let frame = Bytes::from(format!("event: {}\ndata: {}\n\n", event.name, event.data));
                if tx.send(Ok(frame)).await.is_err() {
                    on_abandon();
                    return;
                }
            }
            if cut.is_some() {
                // An error frame makes hyper abort the connection mid-body.
                let _ = tx.send(Err(std::io::Error::other("mock upstream cut the stream"))).await;
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::mock::upstream::MockUpstream;

    fn request(stream: bool) -> Value {
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "messages": [{ "role": "user", "content": "hi" }],
            "stream": stream
        })
    }

    async fn post(mock: &MockUpstream, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/messages?beta=true", mock.base_url()))
            .header("x-api-key", "sk-ant-upstream")
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", "prompt-caching-2024-07-31")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `(event name, data)` of each event of a finished SSE body.
    fn events(text: &str) -> Vec<(String, Value)> {
        assert!(text.ends_with("\n\n"), "{text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let name = name.strip_prefix("event: ").unwrap().to_string();
                let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(data["type"], name.as_str());
                (name, data)
            })
            .collect()
    }

    #[tokio::test]
    async fn plain_answer_is_a_message_with_usage_split_the_messages_way() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { cached_tokens: 4, ..Script::default() });
        let response = post(&mock, &request(false)).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "message");
        assert_eq!(body["role"], "assistant");
        assert_eq!(body["model"], "claude-sonnet-4-5");
        assert!(body["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(body["content"], json!([{ "type": "text", "text": "Hello from the mock upstream" }]));
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["stop_sequence"], Value::Null);
        assert_eq!(body["usage"]["input_tokens"], 7);
        assert_eq!(body["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(body["usage"]["output_tokens"], 7);

        let recorded = mock.last_request().unwrap();
        assert_eq!(recorded.path, "/v1/messages");
        assert_eq!(recorded.header("x-api-key"), Some("sk-ant-upstream"));
        assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(recorded.header("anthropic-beta"), Some("prompt-caching-2024-07-31"));
        assert_eq!(recorded.body["max_tokens"], 256);
    }

    #[tokio::test]
    async fn stream_sends_the_messages_events_in_order() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { reply: "one two three".into(), cached_tokens: 4, ..Script::default() });
        let response = post(&mock, &request(true)).await;
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let events = events(&response.text().await.unwrap());
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let start = &events[0].1["message"];
        assert_eq!(start["usage"]["input_tokens"], 7);
        assert_eq!(start["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(start["usage"]["output_tokens"], 1);
        let text: String = events[3..6].iter().map(|(_, d)| d["delta"]["text"].as_str().unwrap()).collect();
        assert_eq!(text, "one two three");
        assert_eq!(events[7].1["delta"]["stop_reason"], "end_turn");
        assert_eq!(events[7].1["usage"]["output_tokens"], 7);
    }

    #[tokio::test]
    async fn scripted_tool_use_answers_requests_that_offer_tools() {
        let mock = MockUpstream::start().await.unwrap();
        let tool_use = ToolUse { name: None, input: json!({ "city": "Paris" }) };
        mock.set_script(Script { reply: String::new(), tool_use: Some(tool_use), ..Script::default() });
        let mut body = request(false);
        body["tools"] = json!([{ "name": "get_weather", "input_schema": { "type": "object" } }]);
        let answer: Value = post(&mock, &body).await.json().await.unwrap();
        assert_eq!(answer["stop_reason"], "tool_use");
        let content = answer["content"].as_array().unwrap();
        assert_eq!(content.len(), 1, "{answer}");
        assert_eq!(content[0]["type"], "tool_use");
        assert_eq!(content[0]["name"], "get_weather");
        assert_eq!(content[0]["input"], json!({ "city": "Paris" }));

        body["stream"] = json!(true);
        let events = events(&post(&mock, &body).await.text().await.unwrap());
        assert_eq!(events[1].1["content_block"]["type"], "tool_use");
        assert_eq!(events[1].1["content_block"]["input"], json!({}));
        let json: String = events
            .iter()
            .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), json!({ "city": "Paris" }));
        let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
        assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");

        // Without tools in the request the script's call is not made.
        let plain: Value = post(&mock, &request(false)).await.json().await.unwrap();
        assert_eq!(plain["stop_reason"], "end_turn");
    }

    #[tokio::test]
    async fn count_tokens_counts_the_scripted_prompt_and_checks_the_request() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { prompt_tokens: 23, ..Script::default() });
        let count = |body: Value| {
            reqwest::Client::new()
                .post(format!("{}/messages/count_tokens?beta=true", mock.base_url()))
                .header("x-api-key", "sk-ant-upstream")
                .header("anthropic-version", "2023-06-01")
                .json(&body)
                .send()
        };
        let mut body = request(false);
        body.as_object_mut().unwrap().remove("max_tokens");
        let response = count(body).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.json::<Value>().await.unwrap(), json!({ "input_tokens": 23 }));
        let recorded = mock.last_request().unwrap();
        assert_eq!(
            (recorded.path.as_str(), recorded.query.as_deref()),
            ("/v1/messages/count_tokens", Some("beta=true"))
        );

        let response = count(json!({ "model": "claude-sonnet-4-5" })).await.unwrap();
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["message"], "messages: Field required");

        mock.fail_next(529, 1);
        let response = count(request(false)).await.unwrap();
        assert_eq!(response.status(), 529);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "overloaded_error", "failures on count_tokens use the messages shape");
    }

    #[tokio::test]
    async fn invalid_requests_get_messages_error_bodies() {
        let mock = MockUpstream::start().await.unwrap();
        let mut body = request(false);
        body.as_object_mut().unwrap().remove("max_tokens");
        let response = post(&mock, &body).await;
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error["error"]["message"], "max_tokens: Field required");

        let response = reqwest::Client::new()
            .post(format!("{}/messages", mock.base_url()))
            .json(&request(false))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["message"], "anthropic-version: header is required");
    }

    #[tokio::test]
    async fn keys_and_failures_use_the_messages_shape() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { expected_key: Some("sk-ant-upstream".into()), ..Script::default() });
        assert_eq!(post(&mock, &request(false)).await.status(), 200);
        mock.set_script(Script { expected_key: Some("sk-other".into()), ..Script::default() });
        let response = post(&mock, &request(false)).await;
        assert_eq!(response.status(), 401);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "authentication_error");

        mock.set_script(Script::default());
        mock.fail_next(529, 1);
        let response = post(&mock, &request(false)).await;
        assert_eq!(response.status(), 529);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "overloaded_error");
    }

    #[tokio::test]
    async fn cut_stream_aborts_after_the_nth_delta() {
        let mock = MockUpstream::start().await.unwrap();
        mock.set_script(Script { reply: "a b c d".into(), cut_stream_after: Some(2), ..Script::default() });
        let mut response = post(&mock, &request(true)).await;
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
        assert_eq!(text.matches("event: content_block_delta").count(), 2, "{text}");
        assert!(!text.contains("message_stop"));
    }

    #[tokio::test]
    async fn delays_hold_back_the_answer_and_each_event() {
        let mock = MockUpstream::start().await.unwrap();
        let delay = Duration::from_millis(100);
        mock.set_script(Script {
            reply: "a".into(),
            first_byte_delay: delay,
            chunk_delay: Duration::from_millis(20),
            ..Script::default()
        });
        let started = Instant::now();
        let response = post(&mock, &request(true)).await;
        assert!(started.elapsed() >= delay);
        let text = response.text().await.unwrap();
        // 7 events: six gaps after the first
        assert!(started.elapsed() >= delay + Duration::from_millis(120));
        assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), "{text}");
    }
}
