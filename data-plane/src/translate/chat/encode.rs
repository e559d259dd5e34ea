//! The internal form written out as a chat-completions request body,
//! straight into one buffer: the bytes `serde_json` would write for the
//! `Value` of the same request (names sorted, compact), with no `Value`
//! built but for the opaque parts the form holds as values (schemas, tool
//! arguments, unknown fields). The rules are `request`'s (see its header).

use std::borrow::Cow;

use serde_json::Value;

use super::super::{
    Dropped,
    ir::{self, Media, Part, Reasoning, ResponseFormat, Role, Tool, ToolChoice},
    json_out::{self, Object},
    meaningful, media_url, messages,
};
use crate::json_body::BodyEdit;

/// A top-level field written so far: its name and where its value lies in
/// the scratch buffer (or, for an edit's, its own text).
struct Top<'a> {
    name: Cow<'a, str>,
    value: TopValue,
}

enum TopValue {
    At(std::ops::Range<usize>),
    Text(Vec<u8>),
}

/// `request` as a chat request body with `edit` applied to its top-level
/// fields (as `BodyEdit::apply` would to its `Value`); what chat cannot
/// carry is noted in `dropped`.
pub fn request(request: &ir::Request, dropped: &mut Dropped, edit: &BodyEdit) -> Vec<u8> {
    let mut scratch = Vec::with_capacity(estimate(request));
    let mut top: Vec<Top<'_>> = Vec::with_capacity(16);
    if !request.model.is_empty() {
        field(&mut top, &mut scratch, "model", |out| json_out::string(out, &request.model));
    }
    let start = scratch.len();
    write_messages(request, dropped, &mut scratch);
    top.push(Top { name: Cow::Borrowed("messages"), value: TopValue::At(start..scratch.len()) });
    if !request.cache_marks.is_empty() {
        dropped.note("cache_control");
    }

    if !request.tools.is_empty() {
        field(&mut top, &mut scratch, "tools", |out| {
            out.push(b'[');
            for (i, tool) in request.tools.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_tool(tool, out);
            }
            out.push(b']');
        });
        if let Some(choice) = &request.tool_choice {
            field(&mut top, &mut scratch, "tool_choice", |out| write_tool_choice(choice, out));
        }
        if let Some(parallel) = request.parallel_tool_calls {
            field(&mut top, &mut scratch, "parallel_tool_calls", |out| json_out::value(out, &parallel));
        }
    } else if matches!(request.tool_choice, Some(ToolChoice::Required | ToolChoice::Tool(_))) {
        dropped.note("tool_choice");
    }
    if let Some(max_tokens) = request.max_tokens {
        field(&mut top, &mut scratch, "max_completion_tokens", |out| json_out::value(out, &max_tokens));
    }
    if let Some(temperature) = request.temperature {
        field(&mut top, &mut scratch, "temperature", |out| json_out::value(out, &Value::from(temperature)));
    }
    if let Some(top_p) = request.top_p {
        field(&mut top, &mut scratch, "top_p", |out| json_out::value(out, &Value::from(top_p)));
    }
    if request.top_k.is_some() {
        dropped.note("top_k");
    }
    if !request.stop.is_empty() {
        field(&mut top, &mut scratch, "stop", |out| json_out::value(out, &request.stop));
    }
    if request.stream {
        field(&mut top, &mut scratch, "stream", |out| out.extend_from_slice(b"true"));
        field(&mut top, &mut scratch, "stream_options", |out| out.extend_from_slice(br#"{"include_usage":true}"#));
    }
    if let Some(user) = &request.user {
        field(&mut top, &mut scratch, "user", |out| json_out::string(out, user));
    }
    match request.reasoning {
        Some(Reasoning::Effort(effort)) => {
            field(&mut top, &mut scratch, "reasoning_effort", |out| json_out::string(out, effort.as_str()));
        }
        Some(Reasoning::Budget(_)) => dropped.note("thinking_config"),
        Some(Reasoning::Off) | None => {}
    }
    if let Some(format) = &request.response_format {
        field(&mut top, &mut scratch, "response_format", |out| write_response_format(format, out));
    }
    for name in messages::request::MESSAGES_ONLY {
        if request.extra.get(*name).is_some_and(meaningful) {
            dropped.note(name);
        }
    }
    for (key, value) in &request.extra {
        if !messages::request::MESSAGES_ONLY.contains(&key.as_str()) && !top.iter().any(|t| t.name == key.as_str()) {
            let start = scratch.len();
            json_out::value(&mut scratch, value);
            top.push(Top { name: Cow::Borrowed(key.as_str()), value: TopValue::At(start..scratch.len()) });
        }
    }
    apply(edit, &mut top);
    top.sort_by(|a, b| a.name.cmp(&b.name));

    let mut body = Vec::with_capacity(scratch.len() + 32 * top.len() + 2);
    body.push(b'{');
    for (i, field) in top.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        json_out::string(&mut body, &field.name);
        body.push(b':');
        match &field.value {
            TopValue::At(range) => body.extend_from_slice(&scratch[range.clone()]),
            TopValue::Text(text) => body.extend_from_slice(text),
        }
    }
    body.push(b'}');
    body
}

/// Writes a top-level field's value with `write`.
fn field(top: &mut Vec<Top<'_>>, scratch: &mut Vec<u8>, name: &'static str, write: impl FnOnce(&mut Vec<u8>)) {
    let start = scratch.len();
    write(scratch);
    top.push(Top { name: Cow::Borrowed(name), value: TopValue::At(start..scratch.len()) });
}

/// `edit` on the top-level fields: drops, then sets (a set whose text is not
/// JSON is skipped), each value as its `Value` would be written.
fn apply<'a>(edit: &'a BodyEdit, top: &mut Vec<Top<'a>>) {
    for name in &edit.drop {
        top.retain(|field| field.name != *name);
    }
    for (name, text) in &edit.set {
        let Ok(value) = serde_json::from_str::<Value>(text) else { continue };
        let mut written = Vec::with_capacity(text.len());
        json_out::value(&mut written, &value);
        top.retain(|field| field.name != *name);
        top.push(Top { name: Cow::Borrowed(name), value: TopValue::Text(written) });
    }
}

/// About how long the body will be: its text, with room for the JSON
/// around it.
fn estimate(request: &ir::Request) -> usize {
    fn part_len(part: &Part) -> usize {
        match part {
            Part::Text { text, .. } | Part::Thinking { text, .. } => text.len() + 32,
            Part::ToolResult { content, .. } => content.iter().map(part_len).sum::<usize>() + 64,
            Part::Image(Media::Base64 { data, .. }) | Part::Document(Media::Base64 { data, .. }) => data.len() + 64,
            _ => 128,
        }
    }
    let parts: usize = request.messages.iter().flat_map(|m| &m.parts).map(part_len).sum();
    let system: usize = request.system.iter().map(part_len).sum();
    parts + system + 512 * request.tools.len() + 64 * request.messages.len() + 256
}

/// `messages`: the system prompt, system turns where they stood, then each
/// message.
fn write_messages(request: &ir::Request, dropped: &mut Dropped, out: &mut Vec<u8>) {
    let mut first = true;
    let mut next = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    out.push(b'[');
    let in_turn = |i: usize| request.system_turns.iter().any(|turn| turn.parts.contains(&i));
    let leading: Vec<&Part> = request.system.iter().enumerate().filter(|(i, _)| !in_turn(*i)).map(|(_, p)| p).collect();
    let system = system_text(leading.iter().copied(), dropped);
    if !system.is_empty() {
        next(out);
        write_text_message("system", &system, out);
    }
    for at in 0..=request.messages.len() {
        for turn in request.system_turns.iter().filter(|turn| turn.before == at) {
            let parts = request.system.get(turn.parts.clone()).unwrap_or_default();
            let text = system_text(parts.iter(), dropped);
            if !text.is_empty() {
                next(out);
                write_text_message(if turn.developer { "developer" } else { "system" }, &text, out);
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
                write_user(&message.parts, name, &mut next, out, dropped);
            }
            Role::Assistant => write_assistant(&message.parts, &mut next, out, dropped),
        }
    }
    out.push(b']');
}

/// `{"content":<text>,"role":<role>}`.
fn write_text_message(role: &str, text: &str, out: &mut Vec<u8>) {
    let mut message = Object::begin(out);
    message.str("content", text);
    message.str("role", role);
    message.end();
}

/// The system prompt's text, parts joined by a blank line.
fn system_text<'p>(parts: impl Iterator<Item = &'p Part>, dropped: &mut Dropped) -> String {
    let mut text = String::new();
    for part in parts {
        match part {
            Part::Text { text: more, cache } => {
                if cache.is_some() {
                    dropped.note("cache_control");
                }
                if !more.is_empty() {
                    if !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    text.push_str(more);
                }
            }
            other => dropped.note(other.block_type()),
        }
    }
    text
}

/// A user message: its tool results first, as `tool` messages, then the
/// rest as one user message (images inside results join that rest).
fn write_user<'a>(
    parts: &'a [Part],
    name: impl Fn(usize) -> Option<&'a str>,
    next: &mut impl FnMut(&mut Vec<u8>),
    out: &mut Vec<u8>,
    dropped: &mut Dropped,
) {
    let mut content: Vec<(&Part, Option<&str>)> = Vec::new();
    for (p, part) in parts.iter().enumerate() {
        match part {
            Part::ToolResult { id, content: result, is_error, .. } => {
                if *is_error {
                    dropped.note("is_error");
                }
                let mut texts = String::new();
                let mut first = true;
                for inner in result {
                    match inner {
                        Part::Text { text, cache } => {
                            if cache.is_some() {
                                dropped.note("cache_control");
                            }
                            if !std::mem::take(&mut first) {
                                texts.push('\n');
                            }
                            texts.push_str(text);
                        }
                        other if content_part_kind(other) => content.push((other, None)),
                        other => dropped.note(other.block_type()),
                    }
                }
                next(out);
                let mut message = Object::begin(out);
                message.str("content", &texts);
                message.str("role", "tool");
                message.str("tool_call_id", id);
                message.end();
            }
            other if content_part_kind(other) => content.push((other, name(p))),
            other => dropped.note(other.block_type()),
        }
    }
    if content.is_empty() {
        return;
    }
    next(out);
    let mut message = Object::begin(out);
    write_content(&content, message.field("content"), dropped);
    message.str("role", "user");
    message.end();
}

/// Whether `content_part` writes `part` (text, images, documents by data).
fn content_part_kind(part: &Part) -> bool {
    matches!(part, Part::Text { .. } | Part::Image(_) | Part::Document(Media::Base64 { .. }))
}

/// Content parts as chat `content`: one text part as a plain string, which
/// every chat server accepts, else an array of parts.
fn write_content(parts: &[(&Part, Option<&str>)], out: &mut Vec<u8>, dropped: &mut Dropped) {
    if let [(Part::Text { text, cache }, _)] = parts {
        if cache.is_some() {
            dropped.note("cache_control");
        }
        json_out::string(out, text);
        return;
    }
    out.push(b'[');
    for (i, (part, name)) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_content_part(part, *name, out, dropped);
    }
    out.push(b']');
}

/// A text, image or document part (named `name`) as a chat content part.
fn write_content_part(part: &Part, name: Option<&str>, out: &mut Vec<u8>, dropped: &mut Dropped) {
    let mut object = Object::begin(out);
    match part {
        Part::Text { text, cache } => {
            if cache.is_some() {
                dropped.note("cache_control");
            }
            object.str("text", text);
            object.str("type", "text");
        }
        Part::Image(media) => {
            let mut image = Object::begin(object.field("image_url"));
            image.str("url", &media_url(media));
            image.end();
            object.str("type", "image_url");
        }
        _ => {
            let mut file = Object::begin(object.field("file"));
            if let Part::Document(media) = part {
                file.str("file_data", &media_url(media));
            }
            file.str("filename", name.unwrap_or("document.pdf"));
            file.end();
            object.str("type", "file");
        }
    }
    object.end();
}

/// An assistant message: text as `content` (null when there is only tool
/// calls), calls as `tool_calls`; nothing when nothing is left.
fn write_assistant(parts: &[Part], next: &mut impl FnMut(&mut Vec<u8>), out: &mut Vec<u8>, dropped: &mut Dropped) {
    let mut content = Vec::new();
    let mut calls = 0;
    for part in parts {
        match part {
            Part::Text { .. } => content.push((part, None)),
            Part::ToolCall { .. } => calls += 1,
            other => dropped.note(other.block_type()),
        }
    }
    if content.is_empty() && calls == 0 {
        return;
    }
    next(out);
    let mut message = Object::begin(out);
    if content.is_empty() {
        message.field("content").extend_from_slice(b"null");
    } else {
        write_content(&content, message.field("content"), dropped);
    }
    message.str("role", "assistant");
    if calls > 0 {
        let out = message.field("tool_calls");
        out.push(b'[');
        let mut first = true;
        for part in parts {
            let Part::ToolCall { id, name, arguments } = part else { continue };
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            let mut call = Object::begin(out);
            let mut function = Object::begin(call.field("function"));
            function.str("arguments", &arguments.to_string());
            function.str("name", name);
            function.end();
            call.str("id", id);
            call.str("type", "function");
            call.end();
        }
        out.push(b']');
    }
    message.end();
}

fn write_tool(tool: &Tool, out: &mut Vec<u8>) {
    let mut object = Object::begin(out);
    let mut function = Object::begin(object.field("function"));
    if let Some(description) = &tool.description {
        function.str("description", description);
    }
    function.str("name", &tool.name);
    json_out::value(function.field("parameters"), &tool.parameters);
    function.end();
    object.str("type", "function");
    object.end();
}

fn write_tool_choice(choice: &ToolChoice, out: &mut Vec<u8>) {
    match choice {
        ToolChoice::Auto => json_out::string(out, "auto"),
        ToolChoice::None => json_out::string(out, "none"),
        ToolChoice::Required => json_out::string(out, "required"),
        ToolChoice::Tool(name) => {
            let mut object = Object::begin(out);
            let mut function = Object::begin(object.field("function"));
            function.str("name", name);
            function.end();
            object.str("type", "function");
            object.end();
        }
    }
}

fn write_response_format(format: &ResponseFormat, out: &mut Vec<u8>) {
    let mut object = Object::begin(out);
    match format {
        ResponseFormat::Json => object.str("type", "json_object"),
        ResponseFormat::Schema { name, schema, strict } => {
            let mut spec = Object::begin(object.field("json_schema"));
            spec.str("name", name);
            json_out::value(spec.field("schema"), schema);
            json_out::value(spec.field("strict"), strict);
            spec.end();
            object.str("type", "json_schema");
        }
    }
    object.end();
}
