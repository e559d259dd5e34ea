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

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{
    super::{
        Dropped, TranslateError,
        chat::request::{CHAT_ONLY, empty_schema},
        encode_cache_mark, invalid,
        ir::{self, CacheAt, CacheMark, Media, Message, Part, Reasoning, Role, SystemTurn, Tool, ToolChoice},
        lenient::Object,
        meaningful, str_field,
    },
    wire::{self, Block, Content},
};

/// `max_tokens` sent upstream when the request sets none.
pub const DEFAULT_MAX_TOKENS: i64 = 4096;

/// Messages request fields no other dialect has: encoders of other
/// dialects drop them from `extra`, noted by name.
pub(crate) const MESSAGES_ONLY: &[&str] = &["service_tier", "container", "mcp_servers", "context_management"];

/// A messages request as the internal form, and what the form could not
/// hold. Fails only on a body whose structure is not a messages request (no
/// `messages` array, a role other than user, assistant, system or
/// developer, content that is neither a string nor blocks).
pub fn decode(body: &Value) -> Result<(ir::Request, Dropped), TranslateError> {
    match wire::Body::deserialize(body) {
        Ok(wire::Body(Some(request))) => decode_view(request),
        _ => Err(TranslateError::NotAnObject),
    }
}

/// `decode` of the raw body `raw`, read without building a `Value` of it;
/// `None` when `raw` is not JSON this reading takes (not JSON at all, or an
/// object naming a field twice below the top level), for the caller to
/// parse it and `decode` that.
pub fn decode_raw(raw: &[u8]) -> Option<Result<(ir::Request, Dropped), TranslateError>> {
    // A body that is UTF-8 throughout, as a well-formed one is, is read as
    // text: checked once, its strings are not checked again one by one.
    // Anything else is read as bytes, to fail as it always has.
    let body = match std::str::from_utf8(raw) {
        Ok(text) => serde_json::from_str::<wire::Body>(text),
        Err(_) => serde_json::from_slice::<wire::Body>(raw),
    };
    match body.ok()? {
        wire::Body(Some(request)) => Some(decode_view(request)),
        wire::Body(None) => Some(Err(TranslateError::NotAnObject)),
    }
}

fn decode_view(body: wire::Request<'_>) -> Result<(ir::Request, Dropped), TranslateError> {
    let mut dropped = Dropped::new();
    let mut request =
        ir::Request { model: body.model.as_deref().unwrap_or_default().to_owned(), ..ir::Request::default() };
    if let Some(system) = &body.system.0 {
        request.system = system_parts(system, &mut dropped);
    }
    let Some(turns) = body.messages.0 else {
        return Err(invalid("messages", "must be an array"));
    };
    for (i, turn) in turns.into_iter().enumerate() {
        let turn = turn.0.unwrap_or_default();
        let content = match turn.content.0 {
            Some(content @ (Content::Text(_) | Content::Blocks(_))) => content,
            _ => {
                let field = format!("messages[{i}].content");
                return Err(invalid(field, "must be a string or an array of content blocks"));
            }
        };
        if turn.cache_control.0 {
            dropped.note("cache_control");
        }
        let role = match turn.role.as_deref() {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some(role @ ("system" | "developer")) => {
                let start = request.system.len();
                request.system.extend(system_parts(&content, &mut dropped));
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
            Content::Text(text) => vec![Part::Text { text: text.into_owned(), cache: None }],
            Content::Blocks(content) => blocks(content, at, &mut request, &mut dropped),
            Content::Other => Vec::new(),
        };
        if !parts.is_empty() {
            request.messages.push(Message { role, parts });
        }
    }

    for tool in body.tools.0.into_iter().flatten() {
        let tool = tool.0.unwrap_or_default();
        let mark = cache_mark(&tool.cache_control);
        match decode_tool(tool) {
            Some(decoded) => {
                if let Some(mark) = mark {
                    request.cache_marks.push((CacheAt::Tool(request.tools.len()), mark));
                }
                request.tools.push(decoded);
            }
            None => dropped.note("server_tool"),
        }
    }
    if let Some(choice) = body.tool_choice.0 {
        let choice = choice.0.unwrap_or_default();
        request.tool_choice = match choice.kind.as_deref() {
            Some("auto") => Some(ToolChoice::Auto),
            Some("any") => Some(ToolChoice::Required),
            Some("none") => Some(ToolChoice::None),
            Some("tool") => choice.name.0.map(|name| ToolChoice::Tool(name.into_owned())),
            _ => None,
        };
        if request.tool_choice.is_none() {
            dropped.note("tool_choice");
        }
        if choice.disable_parallel_tool_use.0 == Some(true) {
            request.parallel_tool_calls = Some(false);
        }
    }
    request.max_tokens = body.max_tokens.0;
    request.temperature = body.temperature.0;
    request.top_p = body.top_p.0;
    request.top_k = body.top_k.0;
    let stops = body.stop_sequences.0.into_iter().flatten();
    request.stop = stops.filter_map(|stop| stop.0).map(Cow::into_owned).collect();
    request.stream = body.stream.0.unwrap_or(false);
    if let Some(metadata) = body.metadata.0 {
        request.user = metadata.user_id.0.map(Cow::into_owned);
        if metadata.other {
            dropped.note("metadata");
        }
    }
    let thinking = body.thinking;
    if thinking.meaningful {
        request.reasoning = match thinking.kind.as_deref() {
            Some("disabled") => Some(Reasoning::Off),
            Some("enabled") => thinking.budget_tokens.0.map(Reasoning::Budget),
            _ => None,
        };
        if request.reasoning.is_none() {
            dropped.note("thinking_config");
        }
    }
    request.extra = body.extra;
    Ok((request, dropped))
}

/// A system prompt (string or text blocks) as text parts; other blocks are
/// noted.
fn system_parts(system: &Content<'_>, dropped: &mut Dropped) -> Vec<Part> {
    match system {
        Content::Text(text) if !text.is_empty() => vec![Part::Text { text: text.as_ref().to_owned(), cache: None }],
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|block| {
                if block.kind.as_deref() != Some("text") {
                    dropped.note_block(block.kind.as_deref());
                    return None;
                }
                let text = block.text.as_deref().filter(|t| !t.is_empty())?;
                Some(Part::Text { text: text.to_owned(), cache: cache_mark(&block.cache_control) })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The content blocks of message `at` as parts; cache marks of blocks other
/// than text go to `request.cache_marks`.
fn blocks(content: Vec<Block<'_>>, at: usize, request: &mut ir::Request, dropped: &mut Dropped) -> Vec<Part> {
    let mut parts = Vec::with_capacity(content.len());
    for mut block in content {
        let input = block.input.0.take();
        let kind = block.kind.as_deref();
        let part = match kind {
            Some("text") => text_block(&block, dropped),
            Some("image") => media(&block.source).map(Part::Image),
            Some("document") => {
                let document = document(&block);
                if let (Some(Part::Document(_)), Some(title)) = (&document, block.title.as_deref()) {
                    request.document_names.push((at, parts.len(), title.to_owned()));
                }
                document
            }
            Some("tool_use") => Some(Part::ToolCall {
                id: block.id.as_deref().unwrap_or_default().to_owned(),
                name: block.name.as_deref().unwrap_or_default().to_owned(),
                arguments: input.filter(Value::is_object).unwrap_or_else(|| json!({})),
            }),
            Some("tool_result") => Some(tool_result(&block, request, dropped)),
            Some("thinking") => Some(Part::Thinking {
                text: block.thinking.as_deref().unwrap_or_default().to_owned(),
                signature: block.signature.as_deref().filter(|s| !s.is_empty()).map(str::to_owned),
            }),
            Some("redacted_thinking") => {
                Some(Part::RedactedThinking { data: block.data.as_deref().unwrap_or_default().to_owned() })
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
        if let Some(mark) = cache_mark(&block.cache_control) {
            match part {
                Part::Text { .. } => {}
                _ => request.cache_marks.push((CacheAt::Part { message: at, part: parts.len() }, mark)),
            }
        }
        parts.push(part);
    }
    parts
}

fn text_block(block: &Block<'_>, dropped: &mut Dropped) -> Option<Part> {
    if block.citations.0 {
        dropped.note("citations");
    }
    let text = block.text.as_deref().unwrap_or_default().to_owned();
    Some(Part::Text { text, cache: cache_mark(&block.cache_control) })
}

/// A `cache_control` marker as a cache mark: an object, with `ttl: "1h"`
/// for the long one.
fn cache_mark(marker: &Object<wire::CacheControl<'_>>) -> Option<CacheMark> {
    let marker = marker.0.as_ref()?;
    Some(match marker.ttl.as_deref() {
        Some("1h") => CacheMark::OneHour,
        _ => CacheMark::FiveMinutes,
    })
}

/// A base64 or URL `source`; `None` for others (uploads by file id).
fn media(source: &Object<wire::Source<'_>>) -> Option<Media> {
    let source = source.0.as_ref()?;
    match source.kind.as_deref()? {
        "base64" => Some(Media::Base64 {
            media_type: source.media_type.as_deref()?.to_owned(),
            data: source.data.as_deref()?.to_owned(),
        }),
        "url" => Some(Media::Url { url: source.url.as_deref()?.to_owned(), media_type: None }),
        _ => None,
    }
}

/// A `document` block: base64 or URL sources as documents, plain text as
/// text.
fn document(block: &Block<'_>) -> Option<Part> {
    let source = block.source.0.as_ref()?;
    if source.kind.as_deref() == Some("text") {
        return Some(Part::Text { text: source.data.as_deref()?.to_owned(), cache: None });
    }
    media(&block.source).map(Part::Document)
}

fn tool_result(block: &Block<'_>, request: &ir::Request, dropped: &mut Dropped) -> Part {
    let id = block.tool_use_id.as_deref().unwrap_or_default().to_owned();
    let name = request.messages.iter().rev().flat_map(|m| &m.parts).find_map(|part| match part {
        Part::ToolCall { id: call, name, .. } if *call == id => Some(name.clone()),
        _ => None,
    });
    let content = match &block.content.0 {
        Some(Content::Text(text)) if !text.is_empty() => {
            vec![Part::Text { text: text.as_ref().to_owned(), cache: None }]
        }
        Some(Content::Blocks(inner)) => inner
            .iter()
            .filter_map(|inner| match inner.kind.as_deref() {
                Some("text") => text_block(inner, dropped),
                Some("image") => {
                    let image = media(&inner.source).map(Part::Image);
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
    let is_error = block.is_error.0.unwrap_or(false);
    Part::ToolResult { id, name, content, is_error }
}

/// A custom tool; `None` for server tools.
fn decode_tool(tool: wire::ToolDef<'_>) -> Option<Tool> {
    if !matches!(tool.kind.as_deref(), None | Some("custom")) {
        return None;
    }
    Some(Tool {
        name: tool.name.0?.into_owned(),
        description: tool.description.0.map(Cow::into_owned),
        parameters: tool.input_schema.0.unwrap_or_else(empty_schema),
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
            other => dropped.note(other.block_type()),
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
                    other => dropped.note(other.block_type()),
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
