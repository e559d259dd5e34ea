//! Non-streamed response bodies between the dialects. Only the first choice
//! of a chat completion is read (a translated request never asks for more).
//! The upstream's `id` and `model` are kept verbatim; `stop_sequence` is
//! always null because a chat upstream does not say which stop sequence
//! ended the answer.
//!
//! Reasoning crosses in both directions: messages `thinking` blocks become
//! the chat message's `reasoning_content` (the field reasoning chat servers
//! use), and a chat `reasoning_content` becomes a `thinking` block. Thinking
//! signatures have no chat equivalent and are dropped; a thinking block made
//! from chat reasoning carries an empty `signature` (see
//! [`chat_to_messages_response`]).

use serde_json::{Map, Value, json};

use super::{Dropped, answer_stop_reason, arguments_to_input, finish_reason, str_field, usage};

/// A chat completion as a messages response. `finish_reason` maps to
/// `stop_reason` (`content_filter` → `refusal`); an answer with tool calls
/// stops with `tool_use` unless it was cut at the token limit, whatever the
/// upstream's reason; a `refusal` becomes a text block and stops with
/// `refusal`. A missing `usage` is reported as zeros (the messages shape
/// requires one).
///
/// The message's reasoning (`reasoning_content`, or `reasoning` as some
/// routers name it) becomes a leading `thinking` block with an empty
/// `signature`: the messages shape requires the field, so typed clients can
/// read the block, and empty says there is none. Such a block replayed to a
/// chat upstream is dropped like any thinking; replayed to a messages
/// provider it would be refused, as it would be without the field. Dropped
/// without a note (a response has nowhere to put one): `logprobs`,
/// `annotations`, `audio` and choices after the first.
pub fn chat_to_messages_response(completion: &Value) -> Value {
    let choice = completion.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message"));
    let mut content = Vec::new();
    if let Some(reasoning) = message.and_then(reasoning_text) {
        content.push(json!({ "type": "thinking", "thinking": reasoning, "signature": "" }));
    }
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
/// seconds), and what it dropped. Text blocks are concatenated into
/// `content` (the messages API splits one answer into several blocks around
/// citations); `thinking` blocks into `reasoning_content`, separated by a
/// blank line; `tool_use` blocks become `tool_calls` with JSON-encoded
/// arguments, and `content` is null when there is no text but tool calls.
/// Dropped, and listed in the [`Dropped`]: thinking `signature`s,
/// `redacted_thinking` and server-tool blocks, and `citations`.
pub fn messages_to_chat_response_noted(response: &Value, created: i64) -> (Value, Dropped) {
    let blocks = response.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut dropped = Dropped::new();
    let mut text = String::new();
    let mut reasoning = Vec::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        let kind = str_field(block, "type");
        match kind {
            Some("text") => {
                text.push_str(str_field(block, "text").unwrap_or_default());
                if block.get("citations").is_some_and(|c| !c.is_null()) {
                    dropped.note("citations");
                }
            }
            Some("thinking") => {
                reasoning.extend(str_field(block, "thinking").filter(|t| !t.is_empty()));
                if str_field(block, "signature").is_some_and(|s| !s.is_empty()) {
                    dropped.note("signature");
                }
            }
            Some("tool_use") => tool_calls.push(json!({
                "id": block.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": block.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": block.get("input").cloned().unwrap_or_else(|| json!({})).to_string(),
                },
            })),
            _ => dropped.note_block(kind),
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    let content = if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) };
    message.insert("content".into(), content);
    message.insert("refusal".into(), Value::Null);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), reasoning.join("\n\n").into());
    }
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
    (completion, dropped)
}

/// The reasoning text of a chat message or delta: `reasoning_content`, or
/// `reasoning` as some routers name it; `None` when empty.
pub(super) fn reasoning_text(message: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"].into_iter().find_map(|key| str_field(message, key).filter(|t| !t.is_empty()))
}
