//! The `Value` reading of messages requests and the `Value` writing of
//! chat requests that `messages::wire` and `chat::encode` replaced, kept
//! for tests to hold the new ones to (byte for byte).

#![allow(dead_code)] // a reference: parts of it only some tests call

use serde_json::{Map, Value, json};

use super::{
    Dropped, TranslateError, cache_mark,
    chat::request::empty_schema,
    invalid,
    ir::{self, CacheAt, Media, Message, Part, Reasoning, ResponseFormat, Role, SystemTurn, Tool, ToolChoice},
    meaningful, media_url, messages, str_field,
};

// === decode (messages) ===

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

/// A messages request as the internal form, and what the form could not
/// hold. Fails only on a body whose structure is not a messages request (no
/// `messages` array, a role other than user, assistant, system or
/// developer, content that is neither a string nor blocks).
pub fn messages_decode(body: &Value) -> Result<(ir::Request, Dropped), TranslateError> {
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

// === encode (chat) ===

/// The internal form as a chat request; what chat cannot carry is noted in
/// `dropped`.
pub fn chat_encode(request: &ir::Request, dropped: &mut Dropped) -> Value {
    let mut out = Map::new();
    if !request.model.is_empty() {
        out.insert("model".into(), request.model.clone().into());
    }
    let mut messages = Vec::new();
    let in_turn = |i: &usize| request.system_turns.iter().any(|turn| turn.parts.contains(i));
    let leading: Vec<Part> =
        request.system.iter().enumerate().filter(|(i, _)| !in_turn(i)).map(|(_, part)| part.clone()).collect();
    let system = system_text(&leading, dropped);
    if !system.is_empty() {
        messages.push(json!({ "role": "system", "content": system }));
    }
    if !request.cache_marks.is_empty() {
        dropped.note("cache_control");
    }
    for at in 0..=request.messages.len() {
        for turn in request.system_turns.iter().filter(|turn| turn.before == at) {
            let parts = request.system.get(turn.parts.clone()).unwrap_or_default();
            let text = system_text(parts, dropped);
            if !text.is_empty() {
                let role = if turn.developer { "developer" } else { "system" };
                messages.push(json!({ "role": role, "content": text }));
            }
        }
        let Some(message) = request.messages.get(at) else {
            break;
        };
        match message.role {
            Role::User => {
                let name = |part: usize| {
                    let name = request.document_names.iter().find(|(m, p, _)| (*m, *p) == (at, part));
                    name.map(|(_, _, name)| name.as_str())
                };
                encode_user(&message.parts, name, &mut messages, dropped);
            }
            Role::Assistant => messages.extend(encode_assistant(&message.parts, dropped)),
        }
    }
    out.insert("messages".into(), Value::Array(messages));

    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(encode_tool).collect();
        out.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &request.tool_choice {
            out.insert("tool_choice".into(), encode_tool_choice(choice));
        }
        if let Some(parallel) = request.parallel_tool_calls {
            out.insert("parallel_tool_calls".into(), parallel.into());
        }
    } else if matches!(request.tool_choice, Some(ToolChoice::Required | ToolChoice::Tool(_))) {
        dropped.note("tool_choice");
    }
    if let Some(max_tokens) = request.max_tokens {
        out.insert("max_completion_tokens".into(), max_tokens.into());
    }
    if let Some(temperature) = request.temperature {
        out.insert("temperature".into(), temperature.into());
    }
    if let Some(top_p) = request.top_p {
        out.insert("top_p".into(), top_p.into());
    }
    if request.top_k.is_some() {
        dropped.note("top_k");
    }
    if !request.stop.is_empty() {
        out.insert("stop".into(), request.stop.clone().into());
    }
    if request.stream {
        out.insert("stream".into(), true.into());
        out.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if let Some(user) = &request.user {
        out.insert("user".into(), user.clone().into());
    }
    match request.reasoning {
        Some(Reasoning::Effort(effort)) => {
            out.insert("reasoning_effort".into(), effort.as_str().into());
        }
        Some(Reasoning::Budget(_)) => dropped.note("thinking_config"),
        Some(Reasoning::Off) | None => {}
    }
    match &request.response_format {
        Some(ResponseFormat::Json) => {
            out.insert("response_format".into(), json!({ "type": "json_object" }));
        }
        Some(ResponseFormat::Schema { name, schema, strict }) => {
            let spec = json!({ "name": name, "schema": schema, "strict": strict });
            out.insert("response_format".into(), json!({ "type": "json_schema", "json_schema": spec }));
        }
        None => {}
    }
    for name in messages::request::MESSAGES_ONLY {
        if request.extra.get(*name).is_some_and(meaningful) {
            dropped.note(name);
        }
    }
    for (key, value) in &request.extra {
        if !messages::request::MESSAGES_ONLY.contains(&key.as_str()) && !out.contains_key(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

/// The system prompt's text, parts joined by a blank line.
fn system_text(parts: &[Part], dropped: &mut Dropped) -> String {
    let mut texts = Vec::new();
    for part in parts {
        match part {
            Part::Text { text, cache } => {
                if cache.is_some() {
                    dropped.note("cache_control");
                }
                if !text.is_empty() {
                    texts.push(text.as_str());
                }
            }
            other => dropped.note(other.block_type()),
        }
    }
    texts.join("\n\n")
}

/// A user message: its tool results first, as `tool` messages, then the
/// rest as one user message.
fn encode_user<'a>(
    parts: &[Part],
    name: impl Fn(usize) -> Option<&'a str>,
    out: &mut Vec<Value>,
    dropped: &mut Dropped,
) {
    let mut content = Vec::new();
    for (p, part) in parts.iter().enumerate() {
        match part {
            Part::ToolResult { id, content: result, is_error, .. } => {
                if *is_error {
                    dropped.note("is_error");
                }
                let mut texts = Vec::new();
                for inner in result {
                    match inner {
                        Part::Text { text, cache } => {
                            if cache.is_some() {
                                dropped.note("cache_control");
                            }
                            texts.push(text.as_str());
                        }
                        other => match content_part(other, None, dropped) {
                            Some(part) => content.push(part),
                            None => dropped.note(other.block_type()),
                        },
                    }
                }
                out.push(json!({ "role": "tool", "tool_call_id": id, "content": texts.join("\n") }));
            }
            other => {
                if let Some(part) = content_part(other, name(p), dropped) {
                    content.push(part);
                } else {
                    dropped.note(other.block_type());
                }
            }
        }
    }
    if !content.is_empty() {
        out.push(json!({ "role": "user", "content": collapse(content) }));
    }
}

/// A text, image or document part (named `name`) as a chat content part;
/// `None` for any other, and for documents by URL, which chat cannot
/// reference.
fn content_part(part: &Part, name: Option<&str>, dropped: &mut Dropped) -> Option<Value> {
    match part {
        Part::Text { text, cache } => {
            if cache.is_some() {
                dropped.note("cache_control");
            }
            Some(json!({ "type": "text", "text": text }))
        }
        Part::Image(media) => Some(json!({ "type": "image_url", "image_url": { "url": media_url(media) } })),
        Part::Document(media @ Media::Base64 { .. }) => Some(json!({
            "type": "file",
            "file": { "filename": name.unwrap_or("document.pdf"), "file_data": media_url(media) },
        })),
        _ => None,
    }
}

/// An assistant message: text as `content` (null when there is only tool
/// calls), calls as `tool_calls`; `None` when nothing is left.
fn encode_assistant(parts: &[Part], dropped: &mut Dropped) -> Option<Value> {
    let mut content = Vec::new();
    let mut calls = Vec::new();
    for part in parts {
        match part {
            Part::Text { .. } => content.extend(content_part(part, None, dropped)),
            Part::ToolCall { id, name, arguments } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() },
            })),
            other => dropped.note(other.block_type()),
        }
    }
    if content.is_empty() && calls.is_empty() {
        return None;
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), if content.is_empty() { Value::Null } else { collapse(content) });
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Some(Value::Object(message))
}

/// One text part becomes a plain string, which every chat server accepts.
fn collapse(mut parts: Vec<Value>) -> Value {
    if parts.len() == 1 && str_field(&parts[0], "type") == Some("text") {
        return parts.swap_remove(0).get("text").cloned().unwrap_or_else(|| "".into());
    }
    Value::Array(parts)
}

fn encode_tool(tool: &Tool) -> Value {
    let mut function = Map::new();
    function.insert("name".into(), tool.name.clone().into());
    if let Some(description) = &tool.description {
        function.insert("description".into(), description.clone().into());
    }
    function.insert("parameters".into(), tool.parameters.clone());
    json!({ "type": "function", "function": function })
}

fn encode_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({ "type": "function", "function": { "name": name } }),
    }
}
