//! A whole Converse answer (`output.message.content`, `stopReason`,
//! `usage`) decoded into the internal form, and encoded back from it.

use serde_json::{Map, Value, json};

use super::{from_converse, stop_of, stop_reason, to_converse};
use crate::translate::{
    Answering,
    ir::{Part, Response, Stop},
};

/// The internal form of the Converse answer `body`; blocks it does not know
/// (citations, guard content) are left out.
pub fn decode_response(body: &Value) -> Response {
    let content = body.pointer("/output/message/content").and_then(Value::as_array);
    let parts: Vec<Part> = content.into_iter().flatten().filter_map(part).collect();
    let called_tools = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let stop = match body.get("stopReason").and_then(Value::as_str) {
        Some(reason) => stop_of(reason),
        None if called_tools => Stop::ToolUse,
        None => Stop::EndTurn,
    };
    Response { id: None, model: String::new(), parts, stop, usage: body.get("usage").and_then(from_converse) }
}

/// `response` as a Converse answer.
pub fn encode_response(response: &Response, answering: &Answering) -> Value {
    let _ = answering;
    let content: Vec<Value> = response.parts.iter().filter_map(block).collect();
    let mut body = Map::new();
    body.insert("output".into(), json!({ "message": { "role": "assistant", "content": content } }));
    body.insert("stopReason".into(), json!(stop_reason(response.stop)));
    if let Some(usage) = &response.usage {
        body.insert("usage".into(), to_converse(usage));
    }
    body.insert("metrics".into(), json!({ "latencyMs": 0 }));
    Value::Object(body)
}

/// One Converse content block of an answer as a part.
pub(super) fn part(block: &Value) -> Option<Part> {
    if let Some(text) = block.get("text").and_then(Value::as_str) {
        return Some(Part::Text { text: text.to_owned(), cache: None });
    }
    if let Some(call) = block.get("toolUse") {
        let input = call.get("input").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
        return Some(Part::ToolCall {
            id: call.get("toolUseId").and_then(Value::as_str).unwrap_or_default().to_owned(),
            name: call.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: input,
        });
    }
    let reasoning = block.get("reasoningContent")?;
    if let Some(data) = reasoning.get("redactedContent").and_then(Value::as_str) {
        return Some(Part::RedactedThinking { data: data.to_owned() });
    }
    let text = reasoning.get("reasoningText")?;
    Some(Part::Thinking {
        text: text.get("text").and_then(Value::as_str).unwrap_or_default().to_owned(),
        signature: text.get("signature").and_then(Value::as_str).map(str::to_owned),
    })
}

/// One part as a Converse content block of an answer.
fn block(part: &Part) -> Option<Value> {
    Some(match part {
        Part::Text { text, .. } => json!({ "text": text }),
        Part::ToolCall { id, name, arguments } => {
            json!({ "toolUse": { "toolUseId": id, "name": name, "input": arguments } })
        }
        Part::Thinking { text, signature } => {
            let mut reasoning = json!({ "text": text });
            if let Some(signature) = signature {
                reasoning["signature"] = json!(signature);
            }
            json!({ "reasoningContent": { "reasoningText": reasoning } })
        }
        Part::RedactedThinking { data } => json!({ "reasoningContent": { "redactedContent": data } }),
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::pricing::Usage;

    fn answer() -> Value {
        json!({
            "output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
                {"text": "Let me check."},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "weather", "input": {"city": "Paris"}}},
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 12, "outputTokens": 30, "totalTokens": 62, "cacheReadInputTokens": 20},
            "metrics": {"latencyMs": 310},
        })
    }

    #[test]
    fn a_converse_answer_decodes_with_its_tool_call_and_usage() {
        let response = decode_response(&answer());
        assert_eq!(response.stop, Stop::ToolUse);
        assert_eq!(
            response.usage,
            Some(Usage { prompt_tokens: 32, completion_tokens: 30, cached_tokens: 20, ..Usage::default() })
        );
        assert_eq!(response.parts.len(), 3);
        assert_eq!(
            response.parts[2],
            Part::ToolCall { id: "tooluse_1".into(), name: "weather".into(), arguments: json!({"city": "Paris"}) }
        );
        assert_eq!(response.parts[0], Part::Thinking { text: "think".into(), signature: Some("sig".into()) });
    }

    #[test]
    fn an_answer_survives_encoding_and_decoding() {
        let response = decode_response(&answer());
        let encoded = encode_response(&response, &Answering::default());
        assert_eq!(encoded["output"], answer()["output"]);
        assert_eq!(decode_response(&encoded), response);
    }

    #[test]
    fn a_guardrail_stop_is_a_refusal() {
        let body =
            json!({"output": {"message": {"content": [{"text": "blocked"}]}}, "stopReason": "guardrail_intervened"});
        assert_eq!(decode_response(&body).stop, Stop::Refusal);
    }
}
