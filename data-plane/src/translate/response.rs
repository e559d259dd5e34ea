//! Non-streamed response bodies between the dialects. Only the first choice
//! of a chat completion is read (a translated request never asks for more).
//! The upstream's `id` and `model` are kept verbatim; reasoning text
//! (`reasoning_content`, `thinking` blocks) is dropped, as the requests never
//! ask for it; `stop_sequence` is always null because a chat upstream does
//! not say which stop sequence ended the answer.

use serde_json::{Map, Value, json};

use super::{answer_stop_reason, arguments_to_input, finish_reason, str_field, usage};

/// A chat completion as a messages response. `finish_reason` maps to
/// `stop_reason` (`content_filter` → `refusal`); an answer with tool calls
/// stops with `tool_use` unless it was cut at the token limit, whatever the
/// upstream's reason; a `refusal` becomes a text block and stops with
/// `refusal`. A missing `usage` is reported as zeros (the messages shape
/// requires one).
pub fn chat_to_messages_response(completion: &Value) -> Value {
    let choice = completion.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message"));
    let mut content = Vec::new();
    match message.and_then(|m| m.get("content")) {
        Some(Value::String(text)) if !text.is_empty() => content.push(json!({ "type": "text", "text": text })),
        Some(Value::Array(parts)) => content.extend(
            parts
                .iter()
                .filter_map(|p| str_field(p, "text").filter(|t| !t.is_empty()))
                .map(|text| json!({ "type": "text", "text": text })),
        ),
        _ => {}
    }
    let refusal = message.and_then(|m| str_field(m, "refusal")).filter(|r| !r.is_empty());
    if let Some(refusal) = refusal {
        content.push(json!({ "type": "text", "text": refusal }));
    }
    let tool_calls = message.and_then(|m| m.get("tool_calls")).and_then(Value::as_array);
    for call in tool_calls.into_iter().flatten() {
        let function = call.get("function");
        content.push(json!({
            "type": "tool_use",
            "id": call.get("id").cloned().unwrap_or(Value::Null),
            "name": function.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
            "input": arguments_to_input(function.and_then(|f| f.get("arguments"))),
        }));
    }
    let finish = choice.and_then(|c| str_field(c, "finish_reason"));
    let stop = answer_stop_reason(finish, tool_calls.is_some_and(|c| !c.is_empty()), refusal.is_some());
    let usage = completion.get("usage").and_then(usage::from_chat).unwrap_or_default();
    json!({
        "id": completion.get("id").cloned().unwrap_or(Value::Null),
        "type": "message",
        "role": "assistant",
        "model": completion.get("model").cloned().unwrap_or(Value::Null),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": Value::Null,
        "usage": usage::to_messages(&usage),
    })
}

/// A messages response as a chat completion created at `created` (Unix
/// seconds). Text blocks are concatenated into `content` (the messages API
/// splits one answer into several blocks around citations); `tool_use`
/// blocks become `tool_calls` with JSON-encoded arguments, and `content` is
/// null when there is no text but tool calls. Server-tool and thinking
/// blocks are dropped.
pub fn messages_to_chat_response(response: &Value, created: i64) -> Value {
    let blocks = response.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match str_field(block, "type") {
            Some("text") => text.push_str(str_field(block, "text").unwrap_or_default()),
            Some("tool_use") => tool_calls.push(json!({
                "id": block.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": block.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": block.get("input").cloned().unwrap_or_else(|| json!({})).to_string(),
                },
            })),
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    let content = if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) };
    message.insert("content".into(), content);
    message.insert("refusal".into(), Value::Null);
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    let finish = str_field(response, "stop_reason").map_or("stop", finish_reason);
    let mut completion = json!({
        "id": response.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion",
        "created": created,
        "model": response.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{ "index": 0, "message": message, "logprobs": Value::Null, "finish_reason": finish }],
    });
    if let Some(usage) = response.get("usage").and_then(usage::from_messages) {
        completion["usage"] = usage::to_chat(&usage);
    }
    completion
}
