//! Whole messages responses and the internal form. Decoding keeps thinking
//! with its signature and redacted thinking; server-tool blocks and
//! `citations` are dropped. Encoding writes a thinking part without a
//! signature with an empty one (the shape requires the field; empty says
//! there is none, and such a block replayed to a messages provider is
//! refused as it would be without it), `stop_sequence` as null (the form
//! does not say which sequence matched) and a missing usage as zeros (the
//! shape requires one).

use serde_json::{Value, json};

use super::super::{
    Answering, Dropped,
    chat::response::answer_model,
    ir::{self, Part, Stop},
    str_field, usage,
};

/// A messages response as the internal form, and what the form could not
/// hold.
pub fn decode(response: &Value) -> (ir::Response, Dropped) {
    let mut dropped = Dropped::new();
    let mut parts = Vec::new();
    for block in response.get("content").and_then(Value::as_array).into_iter().flatten() {
        let kind = str_field(block, "type");
        match kind {
            Some("text") => {
                if block.get("citations").is_some_and(|c| !c.is_null()) {
                    dropped.note("citations");
                }
                let text = str_field(block, "text").unwrap_or_default().to_owned();
                parts.push(Part::Text { text, cache: None });
            }
            Some("thinking") => parts.push(Part::Thinking {
                text: str_field(block, "thinking").unwrap_or_default().to_owned(),
                signature: str_field(block, "signature").filter(|s| !s.is_empty()).map(str::to_owned),
            }),
            Some("redacted_thinking") => {
                parts.push(Part::RedactedThinking { data: str_field(block, "data").unwrap_or_default().to_owned() });
            }
            Some("tool_use") => parts.push(Part::ToolCall {
                id: str_field(block, "id").unwrap_or_default().to_owned(),
                name: str_field(block, "name").unwrap_or_default().to_owned(),
                arguments: block.get("input").filter(|i| i.is_object()).cloned().unwrap_or_else(|| json!({})),
            }),
            _ => dropped.note_block(kind),
        }
    }
    let decoded = ir::Response {
        id: str_field(response, "id").map(str::to_owned),
        model: str_field(response, "model").unwrap_or_default().to_owned(),
        parts,
        stop: str_field(response, "stop_reason").map_or(Stop::EndTurn, stop),
        usage: response.get("usage").and_then(usage::from_messages),
    };
    (decoded, dropped)
}

/// A `stop_reason` as a stop: `pause_turn` and words this gateway does not
/// know are a natural end; a full context window is `MaxTokens`.
pub(crate) fn stop(stop_reason: &str) -> Stop {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => Stop::MaxTokens,
        "stop_sequence" => Stop::Sequence,
        "tool_use" => Stop::ToolUse,
        "refusal" => Stop::Refusal,
        _ => Stop::EndTurn,
    }
}

/// A stop as a `stop_reason`.
pub(crate) fn stop_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::MaxTokens => "max_tokens",
        Stop::Sequence => "stop_sequence",
        Stop::ToolUse => "tool_use",
        Stop::Refusal => "refusal",
    }
}

fn note(dropped: &mut Dropped, name: &'static str) -> Option<Value> {
    dropped.note(name);
    None
}

/// The internal form as a messages response, and what it dropped.
pub fn encode(response: &ir::Response, answering: &Answering) -> (Value, Dropped) {
    let mut dropped = Dropped::new();
    let content: Vec<Value> = response
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Thinking { text, signature } => Some(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature.as_deref().unwrap_or_default(),
            })),
            Part::Text { text, .. } => Some(json!({ "type": "text", "text": text })),
            Part::Image(_) => note(&mut dropped, "image"),
            Part::Document(_) => note(&mut dropped, "document"),
            Part::ToolResult { .. } => note(&mut dropped, "tool_result"),
            other => super::request::encode_part(other, &mut dropped),
        })
        .collect();
    let body = json!({
        "id": response.id,
        "type": "message",
        "role": "assistant",
        "model": answer_model(&response.model, answering),
        "content": content,
        "stop_reason": stop_reason(response.stop),
        "stop_sequence": Value::Null,
        "usage": usage::to_messages(&response.usage.unwrap_or_default()),
    });
    (body, dropped)
}
