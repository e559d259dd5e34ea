//! Messages request bodies and the internal form.
//!
//! Decoding: `system` and `developer` turns inside `messages` (as coding
//! agents send) join the system prompt and are noted as turns where they
//! stood (`Request::system_turns`);
//! `cache_control` stays on the part, tool or block it marks; a
//! `tool_result` is named after the `tool_use` it answers; server tools
//! (`web_search_…`, `bash_…`, …) and their blocks run inside the provider
//! and are dropped, as are `citations` and `metadata` fields other than
//! `user_id`. `thinking` becomes a reasoning budget (or off).
//!
//! Encoding: consecutive messages of one role are merged, tool results
//! first in their turn, as the API requires; empty text is skipped; a
//! request without a limit gets [`DEFAULT_MAX_TOKENS`], because the API
//! insists on one; `temperature` is clamped to the API's 0–1. Reasoning is
//! dropped, a level or a budget alike: whether the upstream model reasons
//! cannot be known here, and `thinking` fails models that do not (and
//! constrains `max_tokens` and `temperature`). Thinking without a signature
//! is dropped: the provider would refuse it.

use serde_json::{Map, Value, json};

use super::super::{
    Dropped, TranslateError, cache_mark,
    chat::request::{CHAT_ONLY, empty_schema},
    encode_cache_mark, invalid,
    ir::{self, CacheAt, CacheMark, Media, Message, Part, Reasoning, Role, SystemTurn, Tool, ToolChoice},
    meaningful, str_field,
};

/// `max_tokens` sent upstream when the request sets none.
pub const DEFAULT_MAX_TOKENS: i64 = 4096;

/// Request fields the decoder reads; every other goes to `extra`.
const HANDLED: &[&str] = &[
    "model",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "metadata",
    "thinking",
];

/// Messages request fields no other dialect has: encoders of other
/// dialects drop them from `extra`, noted by name.
pub(crate) const MESSAGES_ONLY: &[&str] = &["service_tier", "container", "mcp_servers", "context_management"];

/// A messages request as the internal form, and what the form could not
/// hold. Fails only on a body whose structure is not a messages request (no
/// `messages` array, a role other than user, assistant, system or
/// developer, content that is neither a string nor blocks).
pub fn decode(body: &Value) -> Result<(ir::Request, Dropped), TranslateError> {
    let body = body.as_object().ok_or(TranslateError::NotAnObject)?;
    let mut dropped = Dropped::new();
    let mut request = ir::Request {
        model: body.get("model").and_then(Value::as_str).unwrap_or_default().to_owned(),
        ..ir::Request::default()
    };
    if let Some(system) = body.get("system") {
        request.system = system_parts(system, &mut dropped);
    }
    let Some(Value::Array(turns)) = body.get("messages") else {
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
        let role = match str_field(turn, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some(role @ ("system" | "developer")) => {
                let start = request.system.len();
                request.system.extend(system_parts(content, &mut dropped));
                let parts = start..request.system.len();
                if !parts.is_empty() {
                    let before = request.messages.len();
                    request.system_turns.push(SystemTurn { before, parts, developer: role == "developer" });
                }
                continue;
            }
            _ => {
                let reason = "must be \"user\", \"assistant\", \"system\" or \"developer\"";
                return Err(invalid(format!("messages[{i}].role"), reason));
            }
        };
        let at = request.messages.len();
        let parts = match content {
            Value::String(text) => vec![Part::Text { text: text.clone(), cache: None }],
            _ => blocks(content, at, &mut request, &mut dropped),
        };
        if !parts.is_empty() {
            request.messages.push(Message { role, parts });
        }
    }

    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        match decode_tool(tool) {
            Some(decoded) => {
                if let Some(mark) = cache_mark(tool.get("cache_control")) {
                    request.cache_marks.push((CacheAt::Tool(request.tools.len()), mark));
                }
                request.tools.push(decoded);
            }
            None => dropped.note("server_tool"),
        }
    }
    if let Some(choice) = body.get("tool_choice") {
        request.tool_choice = match str_field(choice, "type") {
            Some("auto") => Some(ToolChoice::Auto),
            Some("any") => Some(ToolChoice::Required),
            Some("none") => Some(ToolChoice::None),
            Some("tool") => str_field(choice, "name").map(|name| ToolChoice::Tool(name.to_owned())),
            _ => None,
        };
        if request.tool_choice.is_none() {
            dropped.note("tool_choice");
        }
        if choice.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            request.parallel_tool_calls = Some(false);
        }
    }
    request.max_tokens = body.get("max_tokens").and_then(Value::as_i64);
    request.temperature = body.get("temperature").and_then(Value::as_f64);
    request.top_p = body.get("top_p").and_then(Value::as_f64);
    request.top_k = body.get("top_k").and_then(Value::as_i64);
    let stops = body.get("stop_sequences").and_then(Value::as_array);
    request.stop = stops.into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
    request.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let metadata = body.get("metadata").and_then(Value::as_object);
    request.user = metadata.and_then(|m| m.get("user_id")).and_then(Value::as_str).map(str::to_owned);
    if metadata.is_some_and(|m| m.keys().any(|key| key != "user_id")) {
        dropped.note("metadata");
    }
    if let Some(thinking) = body.get("thinking").filter(|t| meaningful(t)) {
        request.reasoning = match str_field(thinking, "type") {
            Some("disabled") => Some(Reasoning::Off),
            Some("enabled") => thinking.get("budget_tokens").and_then(Value::as_i64).map(Reasoning::Budget),
            _ => None,
        };
        if request.reasoning.is_none() {
            dropped.note("thinking_config");
        }
    }
    for (key, value) in body {
        if !HANDLED.contains(&key.as_str()) {
            request.extra.insert(key.clone(), value.clone());
        }
    }
    Ok((request, dropped))
}

/// A system prompt (string or text blocks) as text parts; other blocks are
/// noted.
fn system_parts(system: &Value, dropped: &mut Dropped) -> Vec<Part> {
    match system {
        Value::String(text) if !text.is_empty() => vec![Part::Text { text: text.clone(), cache: None }],
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| {
                if str_field(block, "type") != Some("text") {
                    dropped.note_block(str_field(block, "type"));
                    return None;
                }
                let text = str_field(block, "text").filter(|t| !t.is_empty())?;
                Some(Part::Text { text: text.to_owned(), cache: cache_mark(block.get("cache_control")) })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The content blocks of message `at` as parts; cache marks of blocks other
/// than text go to `request.cache_marks`.
fn blocks(content: &Value, at: usize, request: &mut ir::Request, dropped: &mut Dropped) -> Vec<Part> {
    let mut parts = Vec::new();
    for block in content.as_array().into_iter().flatten() {
        let kind = str_field(block, "type");
        let part = match kind {
            Some("text") => text_block(block, dropped),
            Some("image") => media(block.get("source")).map(Part::Image),
            Some("document") => {
                let document = document(block);
                if let (Some(Part::Document(_)), Some(title)) = (&document, str_field(block, "title")) {
                    request.document_names.push((at, parts.len(), title.to_owned()));
                }
                document
            }
            Some("tool_use") => Some(Part::ToolCall {
                id: str_field(block, "id").unwrap_or_default().to_owned(),
                name: str_field(block, "name").unwrap_or_default().to_owned(),
                arguments: block.get("input").filter(|i| i.is_object()).cloned().unwrap_or_else(|| json!({})),
            }),
            Some("tool_result") => Some(tool_result(block, request, dropped)),
            Some("thinking") => Some(Part::Thinking {
                text: str_field(block, "thinking").unwrap_or_default().to_owned(),
                signature: str_field(block, "signature").filter(|s| !s.is_empty()).map(str::to_owned),
            }),
            Some("redacted_thinking") => {
                Some(Part::RedactedThinking { data: str_field(block, "data").unwrap_or_default().to_owned() })
            }
            _ => None,
        };
        let Some(part) = part else {
            match kind {
                Some("image" | "document") => dropped.note(if kind == Some("image") { "image" } else { "document" }),
                _ => dropped.note_block(kind),
            }
            continue;
        };
        if let Some(mark) = cache_mark(block.get("cache_control")) {
            match part {
                Part::Text { .. } => {}
                _ => request.cache_marks.push((CacheAt::Part { message: at, part: parts.len() }, mark)),
            }
        }
        parts.push(part);
    }
    parts
}

fn text_block(block: &Value, dropped: &mut Dropped) -> Option<Part> {
    if block.get("citations").is_some_and(meaningful) {
        dropped.note("citations");
    }
    let text = str_field(block, "text").unwrap_or_default().to_owned();
    Some(Part::Text { text, cache: cache_mark(block.get("cache_control")) })
}

/// A base64 or URL `source`; `None` for others (uploads by file id).
fn media(source: Option<&Value>) -> Option<Media> {
    let source = source?;
    match str_field(source, "type")? {
        "base64" => Some(Media::Base64 {
            media_type: str_field(source, "media_type")?.to_owned(),
            data: str_field(source, "data")?.to_owned(),
        }),
        "url" => Some(Media::Url { url: str_field(source, "url")?.to_owned(), media_type: None }),
        _ => None,
    }
}

/// A `document` block: base64 or URL sources as documents, plain text as
/// text.
fn document(block: &Value) -> Option<Part> {
    let source = block.get("source")?;
    if str_field(source, "type") == Some("text") {
        return Some(Part::Text { text: str_field(source, "data")?.to_owned(), cache: None });
    }
    media(Some(source)).map(Part::Document)
}

fn tool_result(block: &Value, request: &ir::Request, dropped: &mut Dropped) -> Part {
    let id = str_field(block, "tool_use_id").unwrap_or_default().to_owned();
    let name = request.messages.iter().rev().flat_map(|m| &m.parts).find_map(|part| match part {
        Part::ToolCall { id: call, name, .. } if *call == id => Some(name.clone()),
        _ => None,
    });
    let content = match block.get("content") {
        Some(Value::String(text)) if !text.is_empty() => vec![Part::Text { text: text.clone(), cache: None }],
        Some(Value::Array(inner)) => inner
            .iter()
            .filter_map(|inner| match str_field(inner, "type") {
                Some("text") => text_block(inner, dropped),
                Some("image") => {
                    let image = media(inner.get("source")).map(Part::Image);
                    if image.is_none() {
                        dropped.note("image");
                    }
                    image
                }
                other => {
                    dropped.note_block(other);
                    None
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    let is_error = block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    Part::ToolResult { id, name, content, is_error }
}

/// A custom tool; `None` for server tools.
fn decode_tool(tool: &Value) -> Option<Tool> {
    if !matches!(str_field(tool, "type"), None | Some("custom")) {
        return None;
    }
    Some(Tool {
        name: str_field(tool, "name")?.to_owned(),
        description: str_field(tool, "description").map(str::to_owned),
        parameters: tool.get("input_schema").cloned().unwrap_or_else(empty_schema),
    })
}

// === encode ===

/// The internal form as a messages request; what the API cannot carry is
/// noted in `dropped`.
pub fn encode(request: &ir::Request, dropped: &mut Dropped) -> Value {
    let mut out = Map::new();
    if !request.model.is_empty() {
        out.insert("model".into(), request.model.clone().into());
    }
    let mut system = Vec::new();
    for part in &request.system {
        match part {
            Part::Text { text, cache } if !text.is_empty() => system.push(text_json(text, *cache)),
            Part::Text { .. } => {}
            other => note_part(other, dropped),
        }
    }
    if !system.is_empty() {
        out.insert("system".into(), collapse(system));
    }
    let mut turns: Vec<(Role, Vec<Value>)> = Vec::new();
    for (m, message) in request.messages.iter().enumerate() {
        let mut blocks = Vec::new();
        for (p, part) in message.parts.iter().enumerate() {
            let mark = request.cache_marks.iter().find(|(at, _)| *at == CacheAt::Part { message: m, part: p });
            if let Some(mut block) = encode_part(part, dropped) {
                if let Some((_, mark)) = mark {
                    block["cache_control"] = encode_cache_mark(*mark);
                }
                if let Some((_, _, name)) = request.document_names.iter().find(|(at, n, _)| (*at, *n) == (m, p)) {
                    block["title"] = name.clone().into();
                }
                blocks.push(block);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((role, previous)) if *role == message.role => previous.extend(blocks),
            _ => turns.push((message.role, blocks)),
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results must lead their turn; the sort is stable.
            blocks.sort_by_key(|b| str_field(b, "type") != Some("tool_result"));
            let role = if role == Role::User { "user" } else { "assistant" };
            json!({ "role": role, "content": collapse(blocks) })
        })
        .collect();
    out.insert("messages".into(), Value::Array(turns));

    if !request.tools.is_empty() {
        let tools = request.tools.iter().enumerate().map(|(i, tool)| {
            let mut out = json!({ "name": tool.name, "input_schema": tool.parameters });
            if let Some(description) = &tool.description {
                out["description"] = description.clone().into();
            }
            if let Some((_, mark)) = request.cache_marks.iter().find(|(at, _)| *at == CacheAt::Tool(i)) {
                out["cache_control"] = encode_cache_mark(*mark);
            }
            out
        });
        out.insert("tools".into(), Value::Array(tools.collect()));
        let mut choice = request.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => json!({ "type": "auto" }),
            ToolChoice::Required => json!({ "type": "any" }),
            ToolChoice::None => json!({ "type": "none" }),
            ToolChoice::Tool(name) => json!({ "type": "tool", "name": name }),
        });
        if request.parallel_tool_calls == Some(false) {
            let choice = choice.get_or_insert_with(|| json!({ "type": "auto" }));
            choice["disable_parallel_tool_use"] = Value::Bool(true);
        }
        if let Some(choice) = choice {
            out.insert("tool_choice".into(), choice);
        }
    } else if matches!(request.tool_choice, Some(ToolChoice::Required | ToolChoice::Tool(_))) {
        dropped.note("tool_choice");
    }
    out.insert("max_tokens".into(), request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).into());
    if let Some(temperature) = request.temperature {
        out.insert("temperature".into(), temperature.min(1.0).into());
    }
    if let Some(top_p) = request.top_p {
        out.insert("top_p".into(), top_p.into());
    }
    if let Some(top_k) = request.top_k {
        out.insert("top_k".into(), top_k.into());
    }
    if !request.stop.is_empty() {
        out.insert("stop_sequences".into(), request.stop.clone().into());
    }
    if request.stream {
        out.insert("stream".into(), true.into());
    }
    if let Some(user) = &request.user {
        out.insert("metadata".into(), json!({ "user_id": user }));
    }
    match request.reasoning {
        Some(Reasoning::Effort(_)) => dropped.note("reasoning_effort"),
        Some(Reasoning::Budget(_)) => dropped.note("thinking_config"),
        Some(Reasoning::Off) | None => {}
    }
    if request.response_format.is_some() {
        dropped.note("response_format");
    }
    for name in CHAT_ONLY {
        if request.extra.get(*name).is_some_and(meaningful) {
            dropped.note(name);
        }
    }
    for (key, value) in &request.extra {
        if !CHAT_ONLY.contains(&key.as_str()) && !out.contains_key(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

fn text_json(text: &str, cache: Option<CacheMark>) -> Value {
    let mut block = json!({ "type": "text", "text": text });
    if let Some(mark) = cache {
        block["cache_control"] = encode_cache_mark(mark);
    }
    block
}

/// Notes a part the messages API has no place for where it stands.
fn note_part(part: &Part, dropped: &mut Dropped) {
    dropped.note(match part {
        Part::Text { .. } => "text",
        Part::Image(_) => "image",
        Part::Document(_) => "document",
        Part::Thinking { .. } => "thinking",
        Part::RedactedThinking { .. } => "redacted_thinking",
        Part::ToolCall { .. } => "tool_use",
        Part::ToolResult { .. } => "tool_result",
    });
}

/// One part as a content block; `None` for empty text and unsigned
/// thinking.
pub(super) fn encode_part(part: &Part, dropped: &mut Dropped) -> Option<Value> {
    Some(match part {
        Part::Text { text, .. } if text.is_empty() => return None,
        Part::Text { text, cache } => text_json(text, *cache),
        Part::Image(media) => json!({ "type": "image", "source": source(media) }),
        Part::Document(media) => json!({ "type": "document", "source": source(media) }),
        Part::Thinking { text, signature: Some(signature) } => {
            json!({ "type": "thinking", "thinking": text, "signature": signature })
        }
        Part::Thinking { .. } => {
            dropped.note("thinking");
            return None;
        }
        Part::RedactedThinking { data } => json!({ "type": "redacted_thinking", "data": data }),
        Part::ToolCall { id, name, arguments } => {
            let input = if arguments.is_object() { arguments.clone() } else { json!({}) };
            json!({ "type": "tool_use", "id": id, "name": name, "input": input })
        }
        Part::ToolResult { id, content, is_error, .. } => {
            let mut inner = Vec::new();
            for part in content {
                match part {
                    Part::Text { .. } | Part::Image(_) => inner.extend(encode_part(part, dropped)),
                    other => note_part(other, dropped),
                }
            }
            let content = if inner.is_empty() { Value::String(String::new()) } else { collapse(inner) };
            let mut block = json!({ "type": "tool_result", "tool_use_id": id, "content": content });
            if *is_error {
                block["is_error"] = true.into();
            }
            block
        }
    })
}

fn source(media: &Media) -> Value {
    match media {
        Media::Base64 { media_type, data } => json!({ "type": "base64", "media_type": media_type, "data": data }),
        Media::Url { url, .. } => json!({ "type": "url", "url": url }),
    }
}

/// A lone plain text block becomes a string, the compact form.
fn collapse(mut blocks: Vec<Value>) -> Value {
    let plain = blocks.len() == 1
        && str_field(&blocks[0], "type") == Some("text")
        && blocks[0].as_object().is_some_and(|b| b.len() == 2);
    if plain {
        return blocks.swap_remove(0).get("text").cloned().unwrap_or_else(|| "".into());
    }
    Value::Array(blocks)
}
