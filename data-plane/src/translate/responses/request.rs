//! Responses requests to and from the internal form. `input` is a string or
//! a list of items; consecutive items of one speaker make one message
//! (an assistant's text, reasoning and function calls are one turn, a run
//! of `function_call_output` items one user turn of tool results), and
//! `system`/`developer` messages, like `instructions`, become the system
//! prompt. State kept by OpenAI (`previous_response_id`, `conversation`,
//! `prompt`) cannot be carried and is refused; hosted tools are dropped.

use serde_json::{Map, Value, json};

use super::super::{
    Dropped, TranslateError, arguments_to_input,
    ir::{Effort, Media, Message, Part, Reasoning, Request, ResponseFormat, Role, Tool, ToolChoice},
    parse_data_url, str_field,
};

/// Request fields a non-OpenAI channel cannot serve: they name state only
/// OpenAI holds.
const REFUSED: &[&str] = &["previous_response_id", "conversation", "prompt"];

/// Request fields read into the internal form.
const HANDLED: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "text",
    "stream",
    "parallel_tool_calls",
    "user",
    "stop",
];

/// Fields with no place in the internal form that are harmless to leave
/// out, noted by name.
const DROPPED: &[&str] = &[
    "store",
    "include",
    "metadata",
    "truncation",
    "service_tier",
    "background",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "top_logprobs",
    "max_tool_calls",
    "stream_options",
];

/// A responses request body as the internal form, with what was dropped.
/// Fails on a body that is not an object, an `input` that is neither a
/// string nor a list, and on fields that need state kept by OpenAI.
pub fn decode(body: &Value) -> Result<(Request, Dropped), TranslateError> {
    let object = body.as_object().ok_or(TranslateError::NotAnObject)?;
    for field in REFUSED {
        if object.get(*field).is_some_and(|v| !v.is_null()) {
            return Err(TranslateError::Invalid {
                field: (*field).to_owned(),
                reason: "names state kept by OpenAI, which this channel cannot reach; send the whole conversation as `input`",
            });
        }
    }
    let mut dropped = Dropped::new();
    let mut request = Request {
        model: str_field(body, "model").unwrap_or_default().to_owned(),
        max_tokens: body.get("max_output_tokens").and_then(Value::as_i64),
        temperature: body.get("temperature").and_then(Value::as_f64),
        top_p: body.get("top_p").and_then(Value::as_f64),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        parallel_tool_calls: body.get("parallel_tool_calls").and_then(Value::as_bool),
        user: str_field(body, "user").map(str::to_owned),
        ..Request::default()
    };
    if let Some(instructions) = str_field(body, "instructions").filter(|s| !s.is_empty()) {
        request.system.push(text(instructions));
    }
    match body.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(input)) => request.messages.push(Message { role: Role::User, parts: vec![text(input)] }),
        Some(Value::Array(items)) => decode_items(items, &mut request, &mut dropped),
        Some(_) => {
            return Err(TranslateError::Invalid {
                field: "input".into(),
                reason: "must be a string or a list of items",
            });
        }
    }
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        match str_field(tool, "type") {
            Some("function") => request.tools.push(Tool {
                name: str_field(tool, "name").unwrap_or_default().to_owned(),
                description: str_field(tool, "description").map(str::to_owned),
                parameters: tool.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"})),
            }),
            _ => dropped.note("hosted_tool"),
        }
    }
    request.tool_choice = match body.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(word)) => match word.as_str() {
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => Some(ToolChoice::Auto),
        },
        Some(choice) => match (str_field(choice, "type"), str_field(choice, "name")) {
            (Some("function"), Some(name)) => Some(ToolChoice::Tool(name.to_owned())),
            _ => {
                dropped.note("tool_choice");
                None
            }
        },
    };
    if let Some(effort) = body.get("reasoning").and_then(|r| str_field(r, "effort")) {
        request.reasoning = match effort {
            "none" => Some(Reasoning::Off),
            word => Effort::parse(word).map(Reasoning::Effort),
        };
    }
    if let Some(format) = body.get("text").and_then(|t| t.get("format")) {
        request.response_format = match str_field(format, "type") {
            Some("json_object") => Some(ResponseFormat::Json),
            Some("json_schema") => Some(ResponseFormat::Schema {
                name: str_field(format, "name").unwrap_or("response").to_owned(),
                schema: format.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: format.get("strict").and_then(Value::as_bool).unwrap_or(false),
            }),
            _ => None,
        };
    }
    request.stop = match body.get("stop") {
        Some(Value::String(stop)) => vec![stop.clone()],
        Some(Value::Array(stops)) => stops.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    for (key, value) in object {
        if HANDLED.contains(&key.as_str()) || value.is_null() {
            continue;
        }
        match DROPPED.iter().find(|name| **name == key) {
            Some(name) if *name == "store" && value == &Value::Bool(false) => {}
            Some(name) => dropped.note(name),
            None => dropped.note("unknown_field"),
        }
    }
    Ok((request, dropped))
}

/// `request` as a responses body (stateless: `store` is false, earlier
/// turns are items of `input`).
pub fn encode(request: &Request, dropped: &mut Dropped) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let instructions: Vec<&str> = request
        .system
        .iter()
        .filter_map(|part| match part {
            Part::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    let mut input = Vec::new();
    for message in &request.messages {
        encode_message(message, &mut input, dropped);
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let mut out = json!({"type": "function", "name": tool.name, "parameters": tool.parameters});
                if let Some(description) = &tool.description {
                    out["description"] = json!(description);
                }
                out
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &request.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    let numbers = [
        ("max_output_tokens", request.max_tokens.map(Value::from)),
        ("temperature", request.temperature.map(Value::from)),
        ("top_p", request.top_p.map(Value::from)),
        ("parallel_tool_calls", request.parallel_tool_calls.map(Value::from)),
        ("user", request.user.clone().map(Value::from)),
    ];
    for (key, value) in numbers {
        if let Some(value) = value {
            body.insert(key.into(), value);
        }
    }
    if let Some(reasoning) = request.reasoning {
        let effort = reasoning.effort().map_or("none", Effort::as_str);
        body.insert("reasoning".into(), json!({"effort": effort, "summary": "auto"}));
    }
    match &request.response_format {
        Some(ResponseFormat::Json) => {
            body.insert("text".into(), json!({"format": {"type": "json_object"}}));
        }
        Some(ResponseFormat::Schema { name, schema, strict }) => {
            let format = json!({"type": "json_schema", "name": name, "schema": schema, "strict": strict});
            body.insert("text".into(), json!({ "format": format }));
        }
        None => {}
    }
    if request.top_k.is_some() {
        dropped.note("top_k");
    }
    if !request.stop.is_empty() {
        dropped.note("stop");
    }
    body.insert("stream".into(), json!(request.stream));
    body.insert("store".into(), json!(false));
    Value::Object(body)
}

// === decoding ===

/// Reads `input` items into `request`'s messages and system prompt.
fn decode_items(items: &[Value], request: &mut Request, dropped: &mut Dropped) {
    for item in items {
        let kind = str_field(item, "type").unwrap_or(if item.get("role").is_some() { "message" } else { "" });
        match kind {
            "message" => match str_field(item, "role") {
                Some("system" | "developer") => request.system.extend(content(item.get("content"), dropped)),
                Some("assistant") => push(request, Role::Assistant, content(item.get("content"), dropped)),
                _ => push(request, Role::User, content(item.get("content"), dropped)),
            },
            "function_call" => {
                let part = Part::ToolCall {
                    id: str_field(item, "call_id").unwrap_or_default().to_owned(),
                    name: str_field(item, "name").unwrap_or_default().to_owned(),
                    arguments: arguments_to_input(item.get("arguments")),
                };
                push(request, Role::Assistant, vec![part]);
            }
            "function_call_output" => {
                let id = str_field(item, "call_id").unwrap_or_default().to_owned();
                let name = request.messages.iter().flat_map(|m| &m.parts).find_map(|part| match part {
                    Part::ToolCall { id: call, name, .. } if *call == id => Some(name.clone()),
                    _ => None,
                });
                let content = match item.get("output") {
                    Some(Value::String(output)) => vec![text(output)],
                    other => content(other, dropped),
                };
                push(request, Role::User, vec![Part::ToolResult { id, name, content, is_error: false }]);
            }
            "reasoning" => {
                let summary: Vec<&str> = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| str_field(s, "text"))
                    .collect();
                let encrypted = str_field(item, "encrypted_content").map(str::to_owned);
                let part = match (summary.is_empty(), encrypted) {
                    (true, Some(data)) => Part::RedactedThinking { data },
                    (true, None) => continue,
                    (false, signature) => Part::Thinking { text: summary.join("\n\n"), signature },
                };
                push(request, Role::Assistant, vec![part]);
            }
            "item_reference" => dropped.note("item_reference"),
            _ => dropped.note("unknown_item"),
        }
    }
}

/// Appends `parts` to the last message when `role` spoke it, else as a new
/// message.
fn push(request: &mut Request, role: Role, parts: Vec<Part>) {
    match request.messages.last_mut() {
        Some(last) if last.role == role => last.parts.extend(parts),
        _ => request.messages.push(Message { role, parts }),
    }
}

/// A message's `content` (a string or a list of parts) as parts.
fn content(content: Option<&Value>, dropped: &mut Dropped) -> Vec<Part> {
    let parts = match content {
        Some(Value::String(s)) => return vec![text(s)],
        Some(Value::Array(parts)) => parts,
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for part in parts {
        match str_field(part, "type") {
            Some("input_text" | "output_text" | "text") => out.push(text(str_field(part, "text").unwrap_or_default())),
            Some("refusal") => out.push(text(str_field(part, "refusal").unwrap_or_default())),
            Some("input_image") => match str_field(part, "image_url").map(media) {
                Some(image) => out.push(Part::Image(image)),
                None => dropped.note("image"),
            },
            Some("input_file") => {
                // `file_data` is a data: URL or bare base64, typed then by
                // the file's name.
                let document = match (str_field(part, "file_data"), str_field(part, "file_url")) {
                    (Some(data), _) => Some(match media(data) {
                        Media::Url { url, .. } => {
                            Media::Base64 { media_type: file_type(str_field(part, "filename")).to_owned(), data: url }
                        }
                        inline => inline,
                    }),
                    (None, Some(url)) => Some(media(url)),
                    (None, None) => None,
                };
                match document {
                    Some(document) => out.push(Part::Document(document)),
                    None => dropped.note("document"),
                }
            }
            _ => dropped.note("unknown_part"),
        }
    }
    out
}

/// An image or file reference: a `data:` URL split into its type and
/// data, any other string kept as a URL.
fn media(url: &str) -> Media {
    match parse_data_url(url) {
        Some((media_type, data)) => Media::Base64 { media_type: media_type.to_owned(), data: data.to_owned() },
        None => Media::Url { url: url.to_owned(), media_type: None },
    }
}

/// The media type of an attached file, by its name's extension (PDF when
/// it has none the gateway knows).
fn file_type(filename: Option<&str>) -> &'static str {
    let extension = filename.and_then(|f| f.rsplit_once('.')).map(|(_, e)| e.to_ascii_lowercase());
    match extension.as_deref() {
        Some("txt") => "text/plain",
        Some("md") => "text/markdown",
        Some("csv") => "text/csv",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        _ => "application/pdf",
    }
}

fn text(text: &str) -> Part {
    Part::Text { text: text.to_owned(), cache: None }
}

// === encoding ===

/// `message` as input items appended to `input`.
fn encode_message(message: &Message, input: &mut Vec<Value>, dropped: &mut Dropped) {
    let (role, text_type) = match message.role {
        Role::User => ("user", "input_text"),
        Role::Assistant => ("assistant", "output_text"),
    };
    let mut content = Vec::new();
    let flush = |content: &mut Vec<Value>, input: &mut Vec<Value>| {
        if !content.is_empty() {
            input.push(json!({"type": "message", "role": role, "content": std::mem::take(content)}));
        }
    };
    for part in &message.parts {
        match part {
            Part::Text { text, .. } => content.push(json!({"type": text_type, "text": text})),
            Part::Image(image) => content.push(json!({"type": "input_image", "image_url": media_url(image)})),
            Part::Document(document) => content.push(json!({"type": "input_file", "file_data": media_url(document)})),
            Part::Thinking { text, signature } => {
                flush(&mut content, input);
                let mut item = json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]});
                if let Some(signature) = signature {
                    item["encrypted_content"] = json!(signature);
                }
                input.push(item);
            }
            Part::RedactedThinking { data } => {
                flush(&mut content, input);
                input.push(json!({"type": "reasoning", "summary": [], "encrypted_content": data}));
            }
            Part::ToolCall { id, name, arguments } => {
                flush(&mut content, input);
                let arguments = arguments.to_string();
                input.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments}));
            }
            Part::ToolResult { id, content: result, is_error, .. } => {
                flush(&mut content, input);
                if *is_error {
                    dropped.note("is_error");
                }
                let output: String = result
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text { text, .. } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                input.push(json!({"type": "function_call_output", "call_id": id, "output": output}));
            }
        }
    }
    flush(&mut content, input);
}

/// An image or document as the URL responses takes (`data:` for inline
/// data).
fn media_url(media: &Media) -> String {
    match media {
        Media::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        Media::Url { url, .. } => url.clone(),
    }
}
