//! Messages requests as chat-completions requests (see `request` for the
//! decisions both directions share).

use serde_json::{Map, Value, json};

use super::{invalid, joined_text, meaningful, note_fields};
use crate::translate::{Dropped, TranslateError, pass_through, str_field};

/// Messages-request fields this module maps or drops; any other passes
/// through. Dropped: `thinking`, `top_k`, `service_tier` (its values differ
/// between the dialects), `container`, `mcp_servers`, `context_management`
/// and `metadata` fields other than `user_id`.
const MESSAGES_HANDLED: &[&str] = &[
    "model",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "temperature",
    "top_p",
    "stop_sequences",
    "stream",
    "metadata",
    "thinking",
    "top_k",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
];

/// Messages-request fields dropped without further thought (see
/// [`MESSAGES_HANDLED`]); `thinking` and `metadata` are noted on their own.
const MESSAGES_DROPPED: &[&str] = &["top_k", "service_tier", "container", "mcp_servers", "context_management"];

/// A messages request as a chat-completions request; the body of
/// [`messages_to_chat_request_noted`] without its notes.
#[cfg(test)]
pub fn messages_to_chat_request(request: &Value) -> Result<Value, TranslateError> {
    messages_to_chat_request_noted(request).map(|(body, _)| body)
}

/// A messages request as a chat-completions request, and what it dropped.
///
/// Content blocks map to chat content parts (`image` sources to
/// `image_url`, base64 PDF `document`s to `file` parts); `tool_use` blocks
/// become the assistant's `tool_calls`, and `tool_result` blocks become
/// `tool` messages placed before the rest of their user turn (images in a
/// tool result, which a chat `tool` message cannot hold, join that turn).
/// `system` and `developer` turns become chat messages of the same role, in
/// place, their text blocks joined by a blank line. Dropped, and listed in
/// the [`Dropped`]: `thinking` and `redacted_thinking` blocks,
/// `cache_control` markers, `citations`, `is_error`, server tools and their
/// blocks, and the request fields `MESSAGES_HANDLED` lists as dropped
/// (`thinking` as `thinking_config`). Fails only on a body whose structure
/// is not a messages request (no `messages` array, a role other than user,
/// assistant, system or developer).
pub fn messages_to_chat_request_noted(request: &Value) -> Result<(Value, Dropped), TranslateError> {
    let request = request.as_object().ok_or(TranslateError::NotAnObject)?;
    let mut dropped = Dropped::new();
    let mut out = Map::new();
    if let Some(model) = request.get("model") {
        out.insert("model".into(), model.clone());
    }

    let mut messages = Vec::new();
    if let Some(system) = request.get("system").and_then(|s| system_to_chat("system", s, &mut dropped)) {
        messages.push(system);
    }
    let Some(Value::Array(turns)) = request.get("messages") else {
        return Err(invalid("messages", "must be an array"));
    };
    for (i, turn) in turns.iter().enumerate() {
        let content = match turn.get("content") {
            Some(content @ (Value::String(_) | Value::Array(_))) => content,
            _ => {
                let field = format!("messages[{i}].content");
                return Err(invalid(field, "must be a string or an array of content blocks"));
            }
        };
        if turn.get("cache_control").is_some() {
            dropped.note("cache_control");
        }
        match str_field(turn, "role") {
            Some("user") => user_to_chat(content, &mut messages, &mut dropped),
            Some("assistant") => assistant_to_chat(content, &mut messages, &mut dropped),
            Some(role @ ("system" | "developer")) => {
                let role = if role == "system" { "system" } else { "developer" };
                messages.extend(system_to_chat(role, content, &mut dropped));
            }
            _ => {
                let reason = "must be \"user\", \"assistant\", \"system\" or \"developer\"";
                return Err(invalid(format!("messages[{i}].role"), reason));
            }
        }
    }
    out.insert("messages".into(), Value::Array(messages));

    let mut tools = Vec::new();
    for tool in request.get("tools").and_then(Value::as_array).into_iter().flatten() {
        if tool.get("cache_control").is_some() {
            dropped.note("cache_control");
        }
        match chat_tool(tool) {
            Some(tool) => tools.push(tool),
            None => dropped.note("server_tool"),
        }
    }
    let choice = request.get("tool_choice");
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = choice {
            match chat_tool_choice(choice) {
                Some(mapped) => {
                    out.insert("tool_choice".into(), mapped);
                }
                None => dropped.note("tool_choice"),
            }
            if choice.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
                out.insert("parallel_tool_calls".into(), Value::Bool(false));
            }
        }
    } else if choice.is_some_and(|c| matches!(str_field(c, "type"), Some("any" | "tool"))) {
        dropped.note("tool_choice");
    }

    if let Some(max_tokens) = request.get("max_tokens") {
        out.insert("max_completion_tokens".into(), max_tokens.clone());
    }
    for key in ["temperature", "top_p"] {
        if let Some(value) = request.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(stop) = request.get("stop_sequences").filter(|s| s.as_array().is_some_and(|s| !s.is_empty())) {
        out.insert("stop".into(), stop.clone());
    }
    if let Some(stream) = request.get("stream") {
        out.insert("stream".into(), stream.clone());
        if stream.as_bool() == Some(true) {
            out.insert("stream_options".into(), json!({ "include_usage": true }));
        }
    }
    let metadata = request.get("metadata").and_then(Value::as_object);
    if let Some(user) = metadata.and_then(|m| m.get("user_id")).filter(|u| u.is_string()) {
        out.insert("user".into(), user.clone());
    }
    if metadata.is_some_and(|m| m.keys().any(|key| key != "user_id")) {
        dropped.note("metadata");
    }
    if request.get("thinking").is_some_and(|t| meaningful(t) && str_field(t, "type") != Some("disabled")) {
        dropped.note("thinking_config");
    }
    note_fields(request, MESSAGES_DROPPED, &mut dropped);
    pass_through(request, MESSAGES_HANDLED, &mut out);
    Ok((Value::Object(out), dropped))
}

/// A system prompt (string or text blocks) as one chat message of `role`;
/// `None` when it has no text.
fn system_to_chat(role: &'static str, content: &Value, dropped: &mut Dropped) -> Option<Value> {
    if let Value::Array(blocks) = content {
        for block in blocks {
            if block.get("cache_control").is_some() {
                dropped.note("cache_control");
            }
            if str_field(block, "type") != Some("text") {
                dropped.note_block(str_field(block, "type"));
            }
        }
    }
    let text = joined_text(content, "\n\n");
    (!text.is_empty()).then(|| json!({ "role": role, "content": text }))
}

/// A user turn: its tool results first, as `tool` messages, then whatever
/// else it holds as one user message.
fn user_to_chat(content: &Value, out: &mut Vec<Value>, dropped: &mut Dropped) {
    let Value::Array(content) = content else {
        out.push(json!({ "role": "user", "content": content }));
        return;
    };
    let mut parts = Vec::new();
    for block in content {
        if block.get("cache_control").is_some() {
            dropped.note("cache_control");
        }
        let kind = str_field(block, "type");
        match kind {
            Some("text") => parts.push(text_part(block, dropped)),
            Some("image") => match image_part(block) {
                Some(part) => parts.push(part),
                None => dropped.note("image"),
            },
            Some("document") => match document_part(block) {
                Some(part) => parts.push(part),
                None => dropped.note("document"),
            },
            Some("tool_result") => {
                if block.get("is_error").is_some_and(meaningful) {
                    dropped.note("is_error");
                }
                let result = block.get("content");
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id").cloned().unwrap_or(Value::Null),
                    "content": result.map(|c| joined_text(c, "\n")).unwrap_or_default(),
                }));
                for inner in result.and_then(Value::as_array).into_iter().flatten() {
                    if inner.get("cache_control").is_some() {
                        dropped.note("cache_control");
                    }
                    match str_field(inner, "type") {
                        Some("text") => {}
                        Some("image") => match image_part(inner) {
                            Some(part) => parts.push(part),
                            None => dropped.note("image"),
                        },
                        other => dropped.note_block(other),
                    }
                }
            }
            _ => dropped.note_block(kind),
        }
    }
    if !parts.is_empty() {
        out.push(json!({ "role": "user", "content": collapse_parts(parts) }));
    }
}

/// An assistant turn: its text as `content`, its `tool_use` blocks as
/// `tool_calls` (with `content: null` when there is no text).
fn assistant_to_chat(content: &Value, out: &mut Vec<Value>, dropped: &mut Dropped) {
    let Value::Array(content) = content else {
        out.push(json!({ "role": "assistant", "content": content }));
        return;
    };
    let mut parts = Vec::new();
    let mut tool_calls = Vec::new();
    for block in content {
        if block.get("cache_control").is_some() {
            dropped.note("cache_control");
        }
        let kind = str_field(block, "type");
        match kind {
            Some("text") => parts.push(text_part(block, dropped)),
            Some("tool_use") => {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(json!({
                    "id": block.get("id").cloned().unwrap_or(Value::Null),
                    "type": "function",
                    "function": {
                        "name": block.get("name").cloned().unwrap_or(Value::Null),
                        "arguments": input.to_string(),
                    },
                }));
            }
            _ => dropped.note_block(kind),
        }
    }
    if parts.is_empty() && tool_calls.is_empty() {
        return;
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), if parts.is_empty() { Value::Null } else { collapse_parts(parts) });
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    out.push(Value::Object(message));
}

fn text_part(block: &Value, dropped: &mut Dropped) -> Value {
    if block.get("citations").is_some_and(meaningful) {
        dropped.note("citations");
    }
    json!({ "type": "text", "text": block.get("text").cloned().unwrap_or_else(|| "".into()) })
}

/// An `image` block as an `image_url` part; `None` for a `file` source,
/// which names an upload the chat upstream cannot see.
fn image_part(block: &Value) -> Option<Value> {
    let source = block.get("source")?;
    let url = match str_field(source, "type")? {
        "base64" => {
            let media_type = str_field(source, "media_type")?;
            format!("data:{media_type};base64,{}", str_field(source, "data")?)
        }
        "url" => str_field(source, "url")?.to_owned(),
        _ => return None,
    };
    Some(json!({ "type": "image_url", "image_url": { "url": url } }))
}

/// A `document` block: a base64 PDF as a `file` part, plain text as text;
/// other sources (URLs, uploads) have no chat equivalent and are dropped.
fn document_part(block: &Value) -> Option<Value> {
    let source = block.get("source")?;
    match str_field(source, "type")? {
        "base64" => {
            let media_type = str_field(source, "media_type")?;
            let data = str_field(source, "data")?;
            let filename = str_field(block, "title").unwrap_or("document.pdf");
            Some(json!({
                "type": "file",
                "file": { "filename": filename, "file_data": format!("data:{media_type};base64,{data}") },
            }))
        }
        "text" => Some(json!({ "type": "text", "text": str_field(source, "data")? })),
        _ => None,
    }
}

/// One text part becomes a plain string, which every chat server accepts.
fn collapse_parts(mut parts: Vec<Value>) -> Value {
    if parts.len() == 1 && str_field(&parts[0], "type") == Some("text") {
        return parts.swap_remove(0).get("text").cloned().unwrap_or_else(|| "".into());
    }
    Value::Array(parts)
}

/// A custom tool as a function tool; server tools (`web_search_…`,
/// `bash_…`, …) run inside the messages provider and are dropped.
fn chat_tool(tool: &Value) -> Option<Value> {
    if !matches!(str_field(tool, "type"), None | Some("custom")) {
        return None;
    }
    let mut function = Map::new();
    function.insert("name".into(), tool.get("name").filter(|n| n.is_string())?.clone());
    if let Some(description) = tool.get("description") {
        function.insert("description".into(), description.clone());
    }
    let parameters = tool.get("input_schema").cloned().unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
    function.insert("parameters".into(), parameters);
    Some(json!({ "type": "function", "function": function }))
}

fn chat_tool_choice(choice: &Value) -> Option<Value> {
    Some(match str_field(choice, "type")? {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => json!({ "type": "function", "function": { "name": str_field(choice, "name")? } }),
        _ => return None,
    })
}
