//! What one socket remembers between its responses, so a client may
//! continue without resending the conversation: the last completed
//! response's request and output. A `response.create` naming that
//! response as `previous_response_id` is sent as one whole request (its
//! input, its output, then the new input); a `response.append` (Codex's
//! continuation) adds its input to the last request's. Every turn reaches
//! the channel as a complete HTTP request, which every channel kind can
//! take (OpenAI's own connection state is never relied on).

use serde_json::{Map, Value};

use crate::error::ProxyError;

/// The event types a client may send on the socket.
pub const CREATE: &str = "response.create";
pub const APPEND: &str = "response.append";

/// Envelope fields of a client event that are not part of the HTTP body.
const ENVELOPE: [&str; 2] = ["type", "stream_id"];

/// The last completed response of a socket.
#[derive(Debug, Default)]
pub struct Chain {
    last: Option<Turn>,
}

/// One response's request as it was sent (its whole input), with the
/// response's id and output items once it completed.
#[derive(Debug)]
struct Turn {
    request: Map<String, Value>,
    response_id: String,
    output: Vec<Value>,
}

/// One client event made into an HTTP `POST /v1/responses` body.
#[derive(Debug)]
pub struct Next {
    /// The body, `stream: true`, without the envelope fields.
    pub request: Map<String, Value>,
    /// The `stream_id` the client gave, echoed on each event it gets.
    pub stream_id: Option<Value>,
}

// === impl Chain ===

impl Chain {
    /// The request `event` (a client event's JSON object) stands for. Fails
    /// with a 400 for an event of another type, or an append with nothing
    /// to continue.
    pub fn next(&self, mut event: Map<String, Value>) -> Result<Next, ProxyError> {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
        let stream_id = event.get("stream_id").cloned();
        for field in ENVELOPE {
            event.remove(field);
        }
        let mut request = match kind.as_str() {
            CREATE => self.continued(event),
            APPEND => {
                let Some(last) = &self.last else {
                    return Err(invalid_type(
                        "response.append continues a response completed on this socket, and there is none",
                    ));
                };
                let mut request = last.request.clone();
                let mut input = items(request.remove("input"));
                input.extend(items(event.remove("input")));
                request.insert("input".into(), Value::Array(input));
                request
            }
            "" => return Err(invalid_type("an event needs a \"type\" (response.create or response.append)")),
            other => {
                return Err(invalid_type(&format!(
                    "{other:?} is not an event this socket takes (response.create, response.append)"
                )));
            }
        };
        request.insert("stream".into(), Value::Bool(true));
        Ok(Next { request, stream_id })
    }

    /// Notes the response to `request` that completed as `response` (the
    /// `response` object of its `response.completed` event).
    pub fn completed(&mut self, request: Map<String, Value>, response: &Value) {
        let response_id = response.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
        let output = response.get("output").and_then(Value::as_array).cloned().unwrap_or_default();
        self.last = Some(Turn { request, response_id, output });
    }

    /// Forgets the last response: one that failed leaves nothing to
    /// continue, as on OpenAI's own sockets.
    pub fn broken(&mut self) {
        self.last = None;
    }

    /// A `response.create` body; one continuing the last response by its
    /// id is given that response's input and output before its own input.
    fn continued(&self, mut event: Map<String, Value>) -> Map<String, Value> {
        let Some(last) = &self.last else {
            return event;
        };
        let previous = event.get("previous_response_id").and_then(Value::as_str);
        if last.response_id.is_empty() || previous != Some(last.response_id.as_str()) {
            return event;
        }
        event.remove("previous_response_id");
        let mut input = items(last.request.get("input").cloned());
        input.extend(last.output.iter().cloned());
        input.extend(items(event.remove("input")));
        event.insert("input".into(), Value::Array(input));
        event
    }
}

/// An `input` as a list of items: a string is one user message.
fn items(input: Option<Value>) -> Vec<Value> {
    match input {
        Some(Value::Array(items)) => items,
        Some(Value::String(text)) => {
            vec![serde_json::json!({ "type": "message", "role": "user", "content": text })]
        }
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other],
    }
}

fn invalid_type(reason: &str) -> ProxyError {
    ProxyError::InvalidField { field: "type", reason: reason.to_owned() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("not an object"),
        }
    }

    fn completed(chain: &mut Chain, request: &Next, id: &str, output: Value) {
        chain.completed(request.request.clone(), &json!({ "id": id, "output": output }));
    }

    #[test]
    fn a_create_is_its_http_body_streamed_without_the_envelope() {
        let event = json!({"type": CREATE, "model": "m", "input": "hi", "stream_id": "lane-1", "store": false});
        let next = Chain::default().next(object(event)).unwrap();
        assert_eq!(Value::Object(next.request), json!({"model": "m", "input": "hi", "store": false, "stream": true}));
        assert_eq!(next.stream_id, Some(json!("lane-1")));
    }

    #[test]
    fn a_create_naming_the_last_response_carries_its_conversation() {
        let mut chain = Chain::default();
        let first = chain.next(object(json!({"type": CREATE, "model": "m", "input": "one"}))).unwrap();
        let said = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "1"}]});
        completed(&mut chain, &first, "resp_1", json!([said.clone()]));
        let second = json!({"type": CREATE, "model": "m", "previous_response_id": "resp_1", "input": "two"});
        let next = chain.next(object(second)).unwrap();
        let user = |text: &str| json!({"type": "message", "role": "user", "content": text});
        assert_eq!(next.request["input"], json!([user("one"), said, user("two")]));
        assert!(!next.request.contains_key("previous_response_id"));
        // Another id is the upstream's to know: passed on as it is.
        let other =
            chain.next(object(json!({"type": CREATE, "previous_response_id": "resp_0", "input": "x"}))).unwrap();
        assert_eq!(other.request["previous_response_id"], "resp_0");
        assert_eq!(other.request["input"], "x");
    }

    #[test]
    fn an_append_adds_its_input_to_the_last_request_and_needs_one() {
        let mut chain = Chain::default();
        let append =
            json!({"type": APPEND, "input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}]});
        let refused = chain.next(object(append.clone())).unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::BAD_REQUEST);
        let input = json!([{"role": "user", "content": "hi"}]);
        let first = json!({"type": CREATE, "model": "m", "instructions": "be brief", "input": input});
        let first = chain.next(object(first)).unwrap();
        completed(&mut chain, &first, "resp_1", json!([]));
        let next = chain.next(object(append)).unwrap();
        assert_eq!(next.request["instructions"], "be brief");
        assert_eq!(next.request["input"].as_array().unwrap().len(), 2);
        assert_eq!(next.request["input"][1]["type"], "function_call_output");
        chain.broken();
        assert!(chain.next(object(json!({"type": APPEND, "input": []}))).is_err());
    }

    #[test]
    fn other_events_are_refused_with_a_400() {
        for event in [json!({"type": "response.cancel"}), json!({"model": "m"})] {
            let refused = Chain::default().next(object(event)).unwrap_err();
            assert_eq!(refused.status(), axum::http::StatusCode::BAD_REQUEST);
            assert!(refused.message().contains("response.create"), "{}", refused.message());
        }
    }
}
