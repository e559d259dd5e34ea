//! Whole chat completions and the internal form. Only the first choice is
//! read (a translated request never asks for more). Reasoning
//! (`reasoning_content`, or `reasoning` as some routers name it) is a
//! thinking part without a signature, first; a `refusal` is a text part and
//! stops the answer with `Refusal`. Decoding drops `logprobs`,
//! `annotations`, `audio` and further choices; encoding drops thinking
//! signatures and redacted thinking (noted), and joins the answer's text
//! parts into `content`, its thinking into `reasoning_content` (a blank line
//! between).

use serde_json::{Map, Value, json};

use super::super::{
    Answering, Dropped, arguments_to_input,
    ir::{self, Part, Stop},
    str_field, usage,
};

/// A chat completion as the internal form.
pub fn decode(completion: &Value) -> ir::Response {
    let choice = completion.get("choices").and_then(|c| c.get(0));
    let message = choice.and_then(|c| c.get("message"));
    let mut parts = Vec::new();
    if let Some(reasoning) = message.and_then(reasoning_text) {
        parts.push(Part::Thinking { text: reasoning.to_owned(), signature: None });
    }
    match message.and_then(|m| m.get("content")) {
        Some(Value::String(text)) if !text.is_empty() => parts.push(text_part(text)),
        Some(Value::Array(content)) => {
            parts.extend(content.iter().filter_map(|p| str_field(p, "text").filter(|t| !t.is_empty())).map(text_part))
        }
        _ => {}
    }
    let refusal = message.and_then(|m| str_field(m, "refusal")).filter(|r| !r.is_empty());
    if let Some(refusal) = refusal {
        parts.push(text_part(refusal));
    }
    let calls = message.and_then(|m| m.get("tool_calls")).and_then(Value::as_array);
    for call in calls.into_iter().flatten() {
        let function = call.get("function");
        parts.push(Part::ToolCall {
            id: str_field(call, "id").unwrap_or_default().to_owned(),
            name: function.and_then(|f| str_field(f, "name")).unwrap_or_default().to_owned(),
            arguments: arguments_to_input(function.and_then(|f| f.get("arguments"))),
        });
    }
    let finish = choice.and_then(|c| str_field(c, "finish_reason"));
    ir::Response {
        id: str_field(completion, "id").map(str::to_owned),
        model: str_field(completion, "model").unwrap_or_default().to_owned(),
        stop: answer_stop(finish, calls.is_some_and(|c| !c.is_empty()), refusal.is_some()),
        parts,
        usage: completion.get("usage").and_then(usage::from_chat),
    }
}

fn text_part(text: &str) -> Part {
    Part::Text { text: text.to_owned(), cache: None }
}

/// The reasoning text of a chat message or delta: `reasoning_content`, or
/// `reasoning` as some routers name it; `None` when empty.
pub(crate) fn reasoning_text(message: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"].into_iter().find_map(|key| str_field(message, key).filter(|t| !t.is_empty()))
}

/// Why a chat answer stopped: a cut answer stays `MaxTokens`; otherwise an
/// answer that called tools stops with `ToolUse` and a refusal with
/// `Refusal`, whatever `finish_reason` the upstream gave (some give `stop`
/// for both).
pub(crate) fn answer_stop(finish_reason: Option<&str>, called_tools: bool, refused: bool) -> Stop {
    match finish_reason {
        Some("length") => Stop::MaxTokens,
        _ if called_tools => Stop::ToolUse,
        _ if refused => Stop::Refusal,
        Some("tool_calls" | "function_call") => Stop::ToolUse,
        Some("content_filter") => Stop::Refusal,
        _ => Stop::EndTurn,
    }
}

/// A stop as a chat `finish_reason`.
pub(crate) fn finish_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn | Stop::Sequence => "stop",
        Stop::MaxTokens => "length",
        Stop::ToolUse => "tool_calls",
        Stop::Refusal => "content_filter",
    }
}

/// The model an answer names: the client's, when the caller knows it.
pub(crate) fn answer_model<'a>(response_model: &'a str, answering: &'a Answering) -> &'a str {
    if answering.model.is_empty() { response_model } else { &answering.model }
}

/// The internal form as a chat completion, and what it dropped.
pub fn encode(response: &ir::Response, answering: &Answering) -> (Value, Dropped) {
    let mut dropped = Dropped::new();
    let mut text = String::new();
    let mut reasoning = Vec::new();
    let mut calls = Vec::new();
    for part in &response.parts {
        match part {
            Part::Text { text: more, .. } => text.push_str(more),
            Part::Thinking { text, signature } => {
                if !text.is_empty() {
                    reasoning.push(text.as_str());
                }
                if signature.is_some() {
                    dropped.note("signature");
                }
            }
            Part::ToolCall { id, name, arguments } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() },
            })),
            Part::RedactedThinking { .. } => dropped.note("redacted_thinking"),
            Part::Image(_) => dropped.note("image"),
            Part::Document(_) => dropped.note("document"),
            Part::ToolResult { .. } => dropped.note("tool_result"),
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    let content = if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) };
    message.insert("content".into(), content);
    message.insert("refusal".into(), Value::Null);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), reasoning.join("\n\n").into());
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let choice = json!({
        "index": 0,
        "message": message,
        "logprobs": Value::Null,
        "finish_reason": finish_reason(response.stop),
    });
    let mut completion = json!({
        "id": response.id,
        "object": "chat.completion",
        "created": answering.created,
        "model": answer_model(&response.model, answering),
        "choices": [choice],
    });
    if let Some(usage) = &response.usage {
        completion["usage"] = usage::to_chat(usage);
    }
    (completion, dropped)
}
