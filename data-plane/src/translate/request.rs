//! Request bodies between the dialects. `model` is copied as given: the
//! caller maps it to the channel's upstream name afterwards, as it does for
//! untranslated requests.
//!
//! Decisions worth knowing:
//! - `max_tokens` of a messages request becomes `max_completion_tokens`, the
//!   field current OpenAI models require (older servers ignore it rather than
//!   fail); a chat request without either limit gets [`DEFAULT_MAX_TOKENS`],
//!   because the messages API insists on one.
//! - `thinking` and `reasoning_effort` are dropped: whether an upstream model
//!   reasons cannot be known here, and either field makes non-reasoning models
//!   fail. A client that wants them can call the native endpoint.
//! - Messages `system` blocks become one chat system message, joined by a
//!   blank line; `system` and `developer` turns inside `messages` (as newer
//!   coding agents send) become chat messages of that role where they stand.
//!   Chat system and developer messages anywhere in the conversation are
//!   hoisted into `system`, one text block each, as the messages API has
//!   only one system prompt.
//! - Assistant `thinking` blocks in history are dropped: chat has no way to
//!   replay them (and some chat servers refuse `reasoning_content` in a
//!   request), and their signatures only mean something to the messages
//!   provider. Chat `reasoning_content` in history is dropped for the same
//!   reason the other way: a thinking block without its signature would be
//!   refused.
//! - `cache_control` markers are dropped towards chat (chat servers cache by
//!   prefix on their own) and kept towards messages, on the block they mark;
//!   a marker on a whole chat message or tool marks its last block or the
//!   tool.
//! - A `tool_result`'s `is_error` has no chat equivalent and is dropped; the
//!   result's text is what tells the model what failed.
//! - Chat `temperature` (0–2) is clamped to the messages range (0–1).

use serde_json::{Map, Value, json};

use super::{Dropped, TranslateError, arguments_to_input, parse_data_url, pass_through, str_field};

/// `max_tokens` sent to a messages upstream when the chat request sets none.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

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

/// Chat-request fields this module maps or drops; any other passes through.
/// Dropped because the messages API has no such feature: sampling penalties,
/// `seed`, `logit_bias`, `logprobs`, `top_logprobs`, `response_format`,
/// `modalities`, `audio`, `prediction`, `store`, `metadata`, `service_tier`,
/// `reasoning_effort`, `verbosity`, `web_search_options`,
/// `prompt_cache_key`, `stream_options` (messages streams always report
/// usage) and the deprecated `functions`/`function_call`.
const CHAT_HANDLED: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
    "user",
    "safety_identifier",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "n",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "response_format",
    "modalities",
    "audio",
    "prediction",
    "store",
    "metadata",
    "service_tier",
    "reasoning_effort",
    "verbosity",
    "web_search_options",
    "prompt_cache_key",
    "functions",
    "function_call",
];

/// Chat-request fields dropped (see [`CHAT_HANDLED`]), noted when set.
/// `stream_options` is not among them: a messages stream reports usage
/// anyway, so dropping it loses nothing.
const CHAT_DROPPED: &[&str] = &[
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "response_format",
    "modalities",
    "audio",
    "prediction",
    "store",
    "metadata",
    "service_tier",
    "reasoning_effort",
    "verbosity",
    "web_search_options",
    "prompt_cache_key",
    "functions",
    "function_call",
];

// === messages → chat ===

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

// === chat → messages ===

/// A chat-completions request as a messages request; the body of
/// [`chat_to_messages_request_noted`] without its notes.
#[cfg(test)]
pub fn chat_to_messages_request(request: &Value) -> Result<Value, TranslateError> {
    chat_to_messages_request_noted(request).map(|(body, _)| body)
}

/// A chat-completions request as a messages request, and what it dropped.
///
/// `system` and `developer` messages become `system`; `tool` messages become
/// `tool_result` blocks in a user turn (consecutive turns of one role are
/// merged, tool results first, as the messages API requires); `tool_calls`
/// become `tool_use` blocks with the arguments parsed (`{}` when they are
/// not a JSON object); `image_url` data URLs become base64 image sources,
/// other URLs URL sources; base64 PDF `file` parts become documents.
/// `cache_control` on a part is kept on its block, on a message it marks
/// the message's last block, on a tool the tool. Empty text is skipped;
/// dropped, and listed in the [`Dropped`]: audio parts, uploaded-file
/// references, refusal parts, participant `name`s, replayed
/// `reasoning_content`, the deprecated `function` role, tools other than
/// functions and the request fields `CHAT_HANDLED` lists as dropped. Fails
/// on a body that is not a chat request (no `messages` array, an unknown
/// role) and on `n` above 1, which the messages API cannot produce.
pub fn chat_to_messages_request_noted(request: &Value) -> Result<(Value, Dropped), TranslateError> {
    let request = request.as_object().ok_or(TranslateError::NotAnObject)?;
    let mut dropped = Dropped::new();
    let mut out = Map::new();
    if let Some(model) = request.get("model") {
        out.insert("model".into(), model.clone());
    }
    if request.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err(invalid("n", "only 1 choice can be generated by this model"));
    }

    let Some(Value::Array(messages)) = request.get("messages") else {
        return Err(invalid("messages", "must be an array"));
    };
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let content = message.get("content");
        let (role, mut blocks) = match str_field(message, "role") {
            Some("system" | "developer") => ("system", text_blocks(content, &mut dropped)),
            Some("user") => ("user", user_blocks(content, &mut dropped)),
            Some("assistant") => ("assistant", assistant_blocks(message, &mut dropped)),
            Some("tool") => ("user", vec![tool_result(message, &mut dropped)]),
            Some("function") => {
                dropped.note("function_message");
                continue;
            }
            _ => {
                return Err(invalid(
                    format!("messages[{i}].role"),
                    "must be one of system, developer, user, assistant or tool",
                ));
            }
        };
        if message.get("name").is_some_and(meaningful) {
            dropped.note("name");
        }
        let unmarked_last = blocks.last_mut().filter(|last| last.get("cache_control").is_none());
        if let (Some(cache_control), Some(last)) = (message.get("cache_control"), unmarked_last) {
            last["cache_control"] = cache_control.clone();
        }
        if role == "system" {
            system.extend(blocks);
            continue;
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, previous)) if *last == role => previous.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    if !system.is_empty() {
        out.insert("system".into(), collapse_blocks(system));
    }
    let turns = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results must lead their turn; the sort is stable.
            blocks.sort_by_key(|b| str_field(b, "type") != Some("tool_result"));
            json!({ "role": role, "content": collapse_blocks(blocks) })
        })
        .collect();
    out.insert("messages".into(), Value::Array(turns));

    let mut tools = Vec::new();
    for tool in request.get("tools").and_then(Value::as_array).into_iter().flatten() {
        match messages_tool(tool) {
            Some(tool) => tools.push(tool),
            None => dropped.note("custom_tool"),
        }
    }
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        let mut choice = request.get("tool_choice").and_then(messages_tool_choice);
        if request.get("tool_choice").is_some_and(meaningful) && choice.is_none() {
            dropped.note("tool_choice");
        }
        if request.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
            let choice = choice.get_or_insert_with(|| json!({ "type": "auto" }));
            choice["disable_parallel_tool_use"] = Value::Bool(true);
        }
        if let Some(choice) = choice {
            out.insert("tool_choice".into(), choice);
        }
    } else if request.get("tool_choice").and_then(Value::as_str).is_some_and(|c| c != "auto" && c != "none") {
        dropped.note("tool_choice");
    }

    let max_tokens = request
        .get("max_completion_tokens")
        .filter(|v| v.is_u64())
        .or_else(|| request.get("max_tokens").filter(|v| v.is_u64()))
        .cloned()
        .unwrap_or_else(|| DEFAULT_MAX_TOKENS.into());
    out.insert("max_tokens".into(), max_tokens);
    if let Some(temperature) = request.get("temperature") {
        let clamped = temperature.as_f64().filter(|t| *t > 1.0).map(|_| json!(1.0));
        out.insert("temperature".into(), clamped.unwrap_or_else(|| temperature.clone()));
    }
    if let Some(top_p) = request.get("top_p") {
        out.insert("top_p".into(), top_p.clone());
    }
    let stop: Vec<Value> = match request.get("stop") {
        Some(stop @ Value::String(_)) => vec![stop.clone()],
        Some(Value::Array(stops)) => stops.clone(),
        _ => Vec::new(),
    };
    if !stop.is_empty() {
        out.insert("stop_sequences".into(), Value::Array(stop));
    }
    if let Some(stream) = request.get("stream") {
        out.insert("stream".into(), stream.clone());
    }
    let user = request.get("user").or_else(|| request.get("safety_identifier")).filter(|u| u.is_string());
    if let Some(user) = user {
        out.insert("metadata".into(), json!({ "user_id": user }));
    }
    note_fields(request, CHAT_DROPPED, &mut dropped);
    pass_through(request, CHAT_HANDLED, &mut out);
    Ok((Value::Object(out), dropped))
}

/// The text parts of chat `content` as text blocks, empty ones skipped and
/// other parts noted as dropped. A `cache_control` marker on a part (as
/// some clients send) is kept.
fn text_blocks(content: Option<&Value>, dropped: &mut Dropped) -> Vec<Value> {
    match content {
        Some(Value::String(text)) if !text.is_empty() => vec![json!({ "type": "text", "text": text })],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| {
                if str_field(part, "type") != Some("text") {
                    dropped.note_part(str_field(part, "type"));
                }
                text_block(part)
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn text_block(part: &Value) -> Option<Value> {
    if str_field(part, "type") != Some("text") {
        return None;
    }
    let text = str_field(part, "text").filter(|t| !t.is_empty())?;
    Some(with_cache_control(json!({ "type": "text", "text": text }), part))
}

/// `block` with the `cache_control` marker of the chat `part` it came from,
/// if that has one.
fn with_cache_control(mut block: Value, part: &Value) -> Value {
    if let Some(cache_control) = part.get("cache_control") {
        block["cache_control"] = cache_control.clone();
    }
    block
}

fn user_blocks(content: Option<&Value>, dropped: &mut Dropped) -> Vec<Value> {
    let Some(Value::Array(parts)) = content else {
        return text_blocks(content, dropped);
    };
    let mut blocks = Vec::new();
    for part in parts {
        let kind = str_field(part, "type");
        let block = match kind {
            Some("text") => {
                blocks.extend(text_block(part));
                continue;
            }
            Some("image_url") => image_block(part),
            Some("file") => document_block(part),
            _ => None,
        };
        match block {
            Some(block) => blocks.push(with_cache_control(block, part)),
            None => dropped.note_part(kind),
        }
    }
    blocks
}

/// An `image_url` part as an image block: a data URL as a base64 source,
/// any other URL as a URL source.
fn image_block(part: &Value) -> Option<Value> {
    let url = part.get("image_url").and_then(|i| str_field(i, "url"))?;
    let source = match parse_data_url(url) {
        Some((media_type, data)) => json!({ "type": "base64", "media_type": media_type, "data": data }),
        None => json!({ "type": "url", "url": url }),
    };
    Some(json!({ "type": "image", "source": source }))
}

/// A `file` part with inline data as a document block; `None` for a
/// reference to an upload, which the messages upstream cannot see.
fn document_block(part: &Value) -> Option<Value> {
    let file = part.get("file")?;
    let (media_type, data) = parse_data_url(str_field(file, "file_data")?)?;
    let mut block = json!({
        "type": "document",
        "source": { "type": "base64", "media_type": media_type, "data": data },
    });
    if let Some(name) = file.get("filename") {
        block["title"] = name.clone();
    }
    Some(block)
}

fn assistant_blocks(message: &Value, dropped: &mut Dropped) -> Vec<Value> {
    if message.get("reasoning_content").is_some_and(meaningful) {
        dropped.note("reasoning_content");
    }
    let mut blocks = text_blocks(message.get("content"), dropped);
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let function = call.get("function");
        blocks.push(json!({
            "type": "tool_use",
            "id": call.get("id").cloned().unwrap_or(Value::Null),
            "name": function.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
            "input": arguments_to_input(function.and_then(|f| f.get("arguments"))),
        }));
    }
    blocks
}

fn tool_result(message: &Value, dropped: &mut Dropped) -> Value {
    let content = match message.get("content") {
        Some(Value::Array(_)) => Value::Array(text_blocks(message.get("content"), dropped)),
        Some(text @ Value::String(_)) => text.clone(),
        _ => Value::String(String::new()),
    };
    json!({
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id").cloned().unwrap_or(Value::Null),
        "content": content,
    })
}

/// A lone plain text block becomes a string, the compact form.
fn collapse_blocks(mut blocks: Vec<Value>) -> Value {
    let plain = blocks.len() == 1
        && str_field(&blocks[0], "type") == Some("text")
        && blocks[0].as_object().is_some_and(|b| b.len() == 2);
    if plain {
        return blocks.swap_remove(0).get("text").cloned().unwrap_or_else(|| "".into());
    }
    Value::Array(blocks)
}

/// A function tool as a messages tool, with the tool's `cache_control` if it
/// has one; other kinds (custom grammar tools) have no messages equivalent.
fn messages_tool(tool: &Value) -> Option<Value> {
    if str_field(tool, "type") != Some("function") {
        return None;
    }
    let function = tool.get("function")?;
    let mut out = Map::new();
    out.insert("name".into(), function.get("name").filter(|n| n.is_string())?.clone());
    if let Some(description) = function.get("description") {
        out.insert("description".into(), description.clone());
    }
    let schema = function.get("parameters").cloned().unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
    out.insert("input_schema".into(), schema);
    Some(with_cache_control(Value::Object(out), tool))
}

fn messages_tool_choice(choice: &Value) -> Option<Value> {
    Some(match choice {
        Value::String(mode) => match mode.as_str() {
            "auto" => json!({ "type": "auto" }),
            "required" => json!({ "type": "any" }),
            "none" => json!({ "type": "none" }),
            _ => return None,
        },
        Value::Object(_) if str_field(choice, "type") == Some("function") => {
            json!({ "type": "tool", "name": choice.get("function").and_then(|f| str_field(f, "name"))? })
        }
        _ => return None,
    })
}

// === shared ===

/// Text of a string or of the text blocks of an array, joined by `sep`.
fn joined_text(content: &Value, sep: &str) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| str_field(b, "type") == Some("text"))
            .filter_map(|b| str_field(b, "text"))
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

/// False for the values a client sends to mean "not set" (`null`, `false`,
/// an empty string or array), whose loss is not worth a note.
fn meaningful(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

/// Notes each field of `names` that `request` sets.
fn note_fields(request: &Map<String, Value>, names: &[&'static str], dropped: &mut Dropped) {
    for name in names {
        if request.get(*name).is_some_and(meaningful) {
            dropped.note(name);
        }
    }
}

fn invalid(field: impl Into<String>, reason: &'static str) -> TranslateError {
    TranslateError::Invalid { field: field.into(), reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structural_errors_name_the_field() {
        assert_eq!(messages_to_chat_request(&json!([])), Err(TranslateError::NotAnObject));
        let err = messages_to_chat_request(&json!({ "model": "m" })).unwrap_err();
        assert_eq!(err.to_string(), "invalid messages: must be an array");
        let err = messages_to_chat_request(&json!({ "messages": [{ "role": "tool", "content": "x" }] })).unwrap_err();
        let reason = "must be \"user\", \"assistant\", \"system\" or \"developer\"";
        assert_eq!(err.to_string(), format!("invalid messages[0].role: {reason}"));
        let err = messages_to_chat_request(&json!({ "messages": [{ "role": "user", "content": 3 }] })).unwrap_err();
        assert!(err.to_string().starts_with("invalid messages[0].content"), "{err}");

        let err = chat_to_messages_request(&json!({ "messages": [{ "role": "robot" }] })).unwrap_err();
        assert!(err.to_string().starts_with("invalid messages[0].role"), "{err}");
        let err = chat_to_messages_request(&json!({ "messages": [], "n": 2 })).unwrap_err();
        assert_eq!(err, invalid("n", "only 1 choice can be generated by this model"));
        assert!(chat_to_messages_request(&json!({ "messages": [], "n": 1 })).is_ok());
    }

    #[test]
    fn a_chat_request_without_a_limit_gets_the_default_max_tokens() {
        let out = chat_to_messages_request(&json!({ "model": "m", "messages": [] })).unwrap();
        assert_eq!(out["max_tokens"], DEFAULT_MAX_TOKENS);
        let out = chat_to_messages_request(&json!({ "messages": [], "max_tokens": 10 })).unwrap();
        assert_eq!(out["max_tokens"], 10);
        let out = chat_to_messages_request(&json!({ "messages": [], "max_tokens": 10, "max_completion_tokens": 20 }));
        assert_eq!(out.unwrap()["max_tokens"], 20);
    }

    #[test]
    fn system_and_developer_turns_stay_where_they_are() {
        let request = json!({ "messages": [
            { "role": "user", "content": "a" },
            { "role": "system", "content": [{ "type": "text", "text": "b" }, { "type": "text", "text": "c" }] },
            { "role": "developer", "content": "d" },
            { "role": "system", "content": "" },
        ] });
        let (out, dropped) = messages_to_chat_request_noted(&request).unwrap();
        let roles: Vec<_> = out["messages"].as_array().unwrap().iter().map(|m| m["role"].clone()).collect();
        assert_eq!(roles, ["user", "system", "developer"], "an empty system turn is left out");
        assert_eq!(out["messages"][1]["content"], "b\n\nc");
        assert!(dropped.is_empty(), "{dropped}");
    }

    #[test]
    fn thinking_and_cache_markers_are_noted_when_dropped_for_chat() {
        let request = json!({ "messages": [
            { "role": "user", "content": [{ "type": "text", "text": "q", "cache_control": { "type": "ephemeral" } }] },
            { "role": "assistant", "content": [
                { "type": "thinking", "thinking": "hmm", "signature": "s" },
                { "type": "text", "text": "a" },
            ] },
        ] });
        let (out, dropped) = messages_to_chat_request_noted(&request).unwrap();
        assert_eq!(dropped.names(), ["cache_control", "thinking"]);
        assert_eq!(out["messages"][1], json!({ "role": "assistant", "content": "a" }));
        assert!(!out.to_string().contains("cache_control"), "{out}");
        assert_eq!(messages_to_chat_request(&request).unwrap(), out, "both entry points translate alike");
    }

    #[test]
    fn a_message_cache_marker_lands_on_its_last_block_unless_that_has_one() {
        let marker = json!({ "type": "ephemeral" });
        let request = json!({ "messages": [
            { "role": "user", "content": "a", "cache_control": marker },
            { "role": "assistant", "content": "b", "tool_calls": [
                { "id": "c1", "type": "function", "function": { "name": "f", "arguments": "{}" } },
            ], "cache_control": marker },
            { "role": "user", "cache_control": { "type": "ephemeral", "ttl": "1h" }, "content": [
                { "type": "text", "text": "c", "cache_control": marker },
            ] },
        ] });
        let (out, dropped) = chat_to_messages_request_noted(&request).unwrap();
        assert!(dropped.is_empty(), "{dropped}");
        assert_eq!(out["messages"][0]["content"], json!([{ "type": "text", "text": "a", "cache_control": marker }]));
        assert_eq!(out["messages"][1]["content"][0].get("cache_control"), None);
        assert_eq!(out["messages"][1]["content"][1]["cache_control"], marker, "the tool_use block");
        assert_eq!(out["messages"][2]["content"][0]["cache_control"], marker, "the part's own marker wins");
    }

    #[test]
    fn unset_chat_fields_are_not_noted_but_set_ones_are() {
        let request = json!({ "messages": [], "seed": null, "logprobs": false, "stream_options": {} });
        assert!(chat_to_messages_request_noted(&request).unwrap().1.is_empty());
        let request = json!({ "messages": [], "seed": 7, "top_logprobs": 2 });
        assert_eq!(chat_to_messages_request_noted(&request).unwrap().1.names(), ["seed", "top_logprobs"]);
    }

    #[test]
    fn tool_choice_without_tools_is_not_sent() {
        let out = chat_to_messages_request(&json!({ "messages": [], "tool_choice": "required" })).unwrap();
        assert!(out.get("tool_choice").is_none(), "{out}");
        let out = messages_to_chat_request(&json!({ "messages": [], "tool_choice": { "type": "any" } })).unwrap();
        assert!(out.get("tool_choice").is_none(), "{out}");
    }
}
