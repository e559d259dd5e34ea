//! A whole Gemini answer (`GenerateContentResponse`) read into the internal
//! answer and written from it: the first candidate's parts, its
//! `finishReason`, `usageMetadata`, `responseId` and `modelVersion`. A
//! prompt blocked before any candidate (`promptFeedback.blockReason`) is a
//! refusal with no parts.

use serde_json::{Value, json};

use super::{
    finish_reason,
    parts::{Reader, Writer},
    stop_of, usage,
};
use crate::translate::{
    Answering, Dropped,
    ir::{Part, Response, Stop},
};

/// `body`, a Gemini answer, as the internal form. Calls get ids from the
/// answer's `responseId` (or a random one), unique across a conversation.
pub fn decode_response(body: &Value) -> Response {
    let id = body.get("responseId").and_then(Value::as_str).map(str::to_owned);
    let mut reader = Reader::new(call_prefix(id.as_deref()));
    let candidate = body.get("candidates").and_then(|c| c.get(0));
    let parts = candidate.and_then(|c| c.get("content")).and_then(|c| c.get("parts"));
    let parts = reader.parts(parts, &mut Dropped::new());
    let called = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let stop = match candidate.and_then(|c| c.get("finishReason")).and_then(Value::as_str) {
        Some(reason) => stop_of(reason, called),
        None if body.pointer("/promptFeedback/blockReason").is_some() => Stop::Refusal,
        None => stop_of("STOP", called),
    };
    Response {
        id,
        model: body.get("modelVersion").and_then(Value::as_str).unwrap_or_default().to_owned(),
        parts,
        stop,
        usage: body.get("usageMetadata").and_then(usage::from_gemini),
    }
}

/// The prefix of call ids in the answer `response_id`.
pub(super) fn call_prefix(response_id: Option<&str>) -> String {
    match response_id {
        Some(id) if !id.is_empty() => format!("call_{id}_"),
        _ => format!("call_{:016x}_", rand::random::<u64>()),
    }
}

/// `response` as a Gemini answer for a client that asked for `answering`'s
/// model. Calls keep their ids, so the client's function responses can
/// name them.
pub fn encode_response(response: &Response, answering: &Answering) -> Value {
    let parts = Writer::for_answers().parts(&response.parts, true, &mut Dropped::new());
    let mut answer = json!({
        "candidates": [{
            "content": { "role": "model", "parts": parts },
            "finishReason": finish_reason(response.stop),
            "index": 0,
        }],
        "modelVersion": answering.model,
    });
    if let Some(usage) = &response.usage {
        answer["usageMetadata"] = usage::to_gemini(usage);
    }
    if let Some(id) = &response.id {
        answer["responseId"] = json!(id);
    }
    answer
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::pricing::Usage;

    #[test]
    fn an_answer_with_thoughts_calls_and_usage_is_read() {
        let body = json!({
            "candidates": [{
                "content": {"role": "model", "parts": [
                    {"text": "thinking…", "thought": true},
                    {"text": "Calling."},
                    {"functionCall": {"name": "get", "args": {"k": 1}}, "thoughtSignature": "s1"},
                ]},
                "finishReason": "STOP",
            }],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 7, "totalTokenCount": 22},
            "modelVersion": "gemini-2.5-flash",
            "responseId": "r1",
        });
        let answer = decode_response(&body);
        assert_eq!(answer.id.as_deref(), Some("r1"));
        assert_eq!(answer.model, "gemini-2.5-flash");
        assert_eq!(answer.stop, Stop::ToolUse);
        assert_eq!(
            answer.parts,
            [
                Part::Thinking { text: "thinking…".into(), signature: None },
                Part::Text { text: "Calling.".into(), cache: None },
                Part::Thinking { text: String::new(), signature: Some("s1".into()) },
                Part::ToolCall { id: "call_r1_0".into(), name: "get".into(), arguments: json!({"k": 1}) },
            ]
        );
        assert_eq!(
            answer.usage,
            Some(Usage { prompt_tokens: 10, completion_tokens: 12, reasoning_tokens: 7, ..Usage::default() })
        );
    }

    #[test]
    fn an_answer_survives_encoding_and_decoding() {
        let answer = Response {
            id: Some("r2".into()),
            model: "client-model".into(),
            parts: vec![
                Part::Thinking { text: "hm".into(), signature: Some("sig".into()) },
                Part::Text { text: "hello".into(), cache: None },
                Part::ToolCall { id: "call_r2_0".into(), name: "f".into(), arguments: json!({"x": 1}) },
            ],
            stop: Stop::ToolUse,
            usage: Some(Usage { prompt_tokens: 3, completion_tokens: 4, cached_tokens: 1, ..Usage::default() }),
        };
        let answering = Answering { model: "client-model".into(), ..Answering::default() };
        let body = encode_response(&answer, &answering);
        assert_eq!(body["candidates"][0]["content"]["parts"][2]["functionCall"]["id"], "call_r2_0");
        assert_eq!(decode_response(&body), answer);
    }

    #[test]
    fn a_blocked_prompt_is_a_refusal_and_cut_answers_say_so() {
        let blocked = decode_response(&json!({"promptFeedback": {"blockReason": "SAFETY"}}));
        assert_eq!((blocked.stop, blocked.parts.len()), (Stop::Refusal, 0));
        let cut = json!({"candidates": [{"content": {"parts": [{"text": "a"}]}, "finishReason": "MAX_TOKENS"}]});
        assert_eq!(decode_response(&cut).stop, Stop::MaxTokens);
        let answer = Response { stop: Stop::MaxTokens, ..Response::default() };
        assert_eq!(encode_response(&answer, &Answering::default())["candidates"][0]["finishReason"], "MAX_TOKENS");
    }
}
