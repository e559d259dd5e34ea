//! Whole responses answers to and from the internal form, and the output
//! items and usage the stream encoder shares. Each text part is one
//! `message` item, each tool call one `function_call` item and each piece
//! of reasoning one `reasoning` item (its signature, or the provider's
//! encrypted reasoning, carried as `encrypted_content` so a client replaying
//! it gives it back).

use serde_json::{Value, json};

use super::super::{
    Answering, arguments_to_input,
    ir::{Part, Response, Stop},
    str_field,
};
use crate::{meter::answer::usage_of, pricing::Usage};

/// `response` as a responses API answer.
pub fn encode(response: &Response, answering: &Answering) -> Value {
    let id = response_id(response.id.as_deref());
    let output: Vec<Value> =
        response.parts.iter().enumerate().filter_map(|(index, part)| item(&id, index, part)).collect();
    let mut answer = envelope(&id, answering, status(response.stop));
    answer["output"] = Value::Array(output);
    answer["incomplete_details"] = incomplete_details(response.stop);
    answer["usage"] = response.usage.as_ref().map_or(Value::Null, to_responses);
    answer
}

/// A responses API answer as the internal form: text of `message` items,
/// `function_call` and `reasoning` items; `status` `incomplete` for the
/// token limit is `MaxTokens`.
pub fn decode(body: &Value) -> Response {
    let mut parts = Vec::new();
    for item in body.get("output").and_then(Value::as_array).into_iter().flatten() {
        match str_field(item, "type") {
            Some("message") => {
                for content in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    let text = str_field(content, "text").or_else(|| str_field(content, "refusal"));
                    if let Some(text) = text {
                        parts.push(Part::Text { text: text.to_owned(), cache: None });
                    }
                }
            }
            Some("function_call") => parts.push(Part::ToolCall {
                id: str_field(item, "call_id").unwrap_or_default().to_owned(),
                name: str_field(item, "name").unwrap_or_default().to_owned(),
                arguments: arguments_to_input(item.get("arguments")),
            }),
            Some("reasoning") => {
                let summary: Vec<&str> = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| str_field(s, "text"))
                    .collect();
                let encrypted = str_field(item, "encrypted_content").map(str::to_owned);
                match (summary.is_empty(), encrypted) {
                    (true, Some(data)) => parts.push(Part::RedactedThinking { data }),
                    (true, None) => {}
                    (false, signature) => parts.push(Part::Thinking { text: summary.join("\n\n"), signature }),
                }
            }
            _ => {}
        }
    }
    let called = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let stop = match (str_field(body, "status"), body.get("incomplete_details").and_then(|d| str_field(d, "reason"))) {
        (Some("incomplete"), Some("max_output_tokens")) => Stop::MaxTokens,
        (Some("incomplete"), Some("content_filter")) => Stop::Refusal,
        _ if called => Stop::ToolUse,
        _ => Stop::EndTurn,
    };
    Response {
        id: str_field(body, "id").map(str::to_owned),
        model: str_field(body, "model").unwrap_or_default().to_owned(),
        parts,
        stop,
        usage: body.get("usage").and_then(usage_of),
    }
}

/// The gateway's usage as a responses `usage` object: `input_tokens` is
/// the whole prompt with cache reads as `cached_tokens`; cache writes have
/// no field of their own and stay inside `input_tokens`.
pub fn to_responses(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": { "cached_tokens": usage.cached_tokens },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": { "reasoning_tokens": usage.reasoning_tokens },
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
    })
}

/// The answer's fields besides `output`, `usage` and `incomplete_details`,
/// with the values a stateless answer has.
pub(super) fn envelope(id: &str, answering: &Answering, status: &str) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": answering.created,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": answering.model,
        "output": [],
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": { "effort": null, "summary": null },
        "store": false,
        "temperature": null,
        "text": { "format": { "type": "text" } },
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": null,
        "metadata": {},
    })
}

/// The answer's `status` for how it ended.
pub(super) fn status(stop: Stop) -> &'static str {
    match stop {
        Stop::MaxTokens | Stop::Refusal => "incomplete",
        _ => "completed",
    }
}

/// Why an answer is incomplete, or `null`.
pub(super) fn incomplete_details(stop: Stop) -> Value {
    match stop {
        Stop::MaxTokens => json!({ "reason": "max_output_tokens" }),
        Stop::Refusal => json!({ "reason": "content_filter" }),
        _ => Value::Null,
    }
}

/// A responses id for the upstream's `id` (`resp_` added when it lacks
/// it); `resp_gateway` when the upstream gave none.
pub(super) fn response_id(upstream: Option<&str>) -> String {
    match upstream {
        Some(id) if id.starts_with("resp_") => id.to_owned(),
        Some(id) if !id.is_empty() => format!("resp_{id}"),
        _ => "resp_gateway".to_owned(),
    }
}

/// The id of the `index`th output item of response `id`, with the item
/// type's prefix (`msg`, `fc`, `rs`).
pub(super) fn item_id(prefix: &str, response: &str, index: usize) -> String {
    let base = response.strip_prefix("resp_").unwrap_or(response);
    format!("{prefix}_{base}_{index}")
}

/// A finished output item for `part`; `None` for parts an answer does not
/// hold.
fn item(response: &str, index: usize, part: &Part) -> Option<Value> {
    Some(match part {
        Part::Text { text, .. } => message_item(&item_id("msg", response, index), text, "completed"),
        Part::ToolCall { id, name, arguments } => {
            function_call_item(&item_id("fc", response, index), id, name, &arguments.to_string(), "completed")
        }
        Part::Thinking { text, signature } => {
            reasoning_item(&item_id("rs", response, index), Some(text), signature.as_deref())
        }
        Part::RedactedThinking { data } => reasoning_item(&item_id("rs", response, index), None, Some(data)),
        _ => return None,
    })
}

/// A `message` item of one `output_text` part.
pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "id": id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [text_part(text)],
    })
}

/// An `output_text` content part.
pub(super) fn text_part(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
}

/// A `function_call` item.
pub(super) fn function_call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "id": id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    })
}

/// A `reasoning` item: its summary text, and the signature or encrypted
/// reasoning as `encrypted_content`.
pub(super) fn reasoning_item(id: &str, summary: Option<&str>, encrypted: Option<&str>) -> Value {
    let summary: Vec<Value> = summary.map(|text| json!({ "type": "summary_text", "text": text })).into_iter().collect();
    let mut item = json!({ "id": id, "type": "reasoning", "summary": summary });
    if let Some(encrypted) = encrypted {
        item["encrypted_content"] = json!(encrypted);
    }
    item
}
