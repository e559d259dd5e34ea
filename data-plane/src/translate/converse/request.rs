//! The internal request as a Converse body: `messages` of content blocks,
//! `system`, `inferenceConfig`, `toolConfig`, and the fields Converse has no
//! place for but Anthropic models take (`top_k`, `thinking`) in
//! `additionalModelRequestFields`. The model is in the path, never the body.
//!
//! Left out, and noted: images and documents by URL (Converse takes bytes
//! or S3 locations only), images in system prompts, `tool_choice` none
//! (Converse has no word for it; the tools stay, as Bedrock requires them
//! when the history holds tool calls), `parallel_tool_calls`,
//! `response_format`, `user` and the client dialect's own fields.

use serde_json::{Map, Value, json};

use crate::translate::{
    Dropped,
    ir::{CacheAt, CacheMark, Media, Message, Part, Request, Role, ToolChoice},
};

/// `request` as a Converse body; what Converse cannot carry is noted in
/// `dropped`.
pub fn encode_request(request: &Request, dropped: &mut Dropped) -> Value {
    let mut body = Map::new();
    let messages = messages(request, dropped);
    body.insert("messages".into(), Value::Array(messages));
    let system = system(&request.system, dropped);
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let mut config = Map::new();
    if let Some(max) = request.max_tokens {
        config.insert("maxTokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if !request.stop.is_empty() {
        config.insert("stopSequences".into(), json!(request.stop));
    }
    if !config.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(config));
    }
    if let Some(tools) = tool_config(request, dropped) {
        body.insert("toolConfig".into(), tools);
    }
    let mut additional = Map::new();
    if let Some(top_k) = request.top_k {
        additional.insert("top_k".into(), json!(top_k));
    }
    if let Some(budget) = request.reasoning.and_then(|r| r.budget()) {
        additional.insert("thinking".into(), json!({ "type": "enabled", "budget_tokens": budget }));
    }
    if !additional.is_empty() {
        body.insert("additionalModelRequestFields".into(), Value::Object(additional));
    }
    if request.parallel_tool_calls.is_some() {
        dropped.note("parallel_tool_calls");
    }
    if request.response_format.is_some() {
        dropped.note("response_format");
    }
    if request.user.is_some() {
        dropped.note("user");
    }
    if !request.extra.is_empty() {
        dropped.note("extra_fields");
    }
    Value::Object(body)
}

/// The conversation, turns of one role in a row merged into one message.
fn messages(request: &Request, dropped: &mut Dropped) -> Vec<Value> {
    let mut out: Vec<(Role, Vec<Value>)> = Vec::new();
    for (index, message) in request.messages.iter().enumerate() {
        let content = content(request, index, message, dropped);
        match out.last_mut() {
            Some((role, blocks)) if *role == message.role => blocks.extend(content),
            _ => out.push((message.role, content)),
        }
    }
    out.into_iter()
        .map(|(role, content)| {
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({ "role": role, "content": content })
        })
        .collect()
}

/// The content blocks of message `index`, a `cachePoint` after each part
/// marked for the prompt cache.
fn content(request: &Request, index: usize, message: &Message, dropped: &mut Dropped) -> Vec<Value> {
    let mut blocks = Vec::with_capacity(message.parts.len());
    for (at, part) in message.parts.iter().enumerate() {
        if let Some(block) = block(part, (index, at), dropped) {
            blocks.push(block);
        }
        let marked = request
            .cache_marks
            .iter()
            .find(|(place, _)| *place == CacheAt::Part { message: index, part: at })
            .map(|(_, mark)| *mark);
        if let Some(mark) = text_mark(part).or(marked) {
            blocks.push(cache_point(mark));
        }
    }
    blocks
}

/// One part as a Converse content block (`None`: dropped, noted).
/// `position` (message, part) names documents, which Converse insists on
/// naming, uniquely within a request.
fn block(part: &Part, position: (usize, usize), dropped: &mut Dropped) -> Option<Value> {
    Some(match part {
        Part::Text { text, .. } => json!({ "text": text }),
        Part::Image(media) => {
            let Some((format, data)) = bytes(media, image_format) else {
                dropped.note("image");
                return None;
            };
            json!({ "image": { "format": format, "source": { "bytes": data } } })
        }
        Part::Document(media) => {
            let Some((format, data)) = bytes(media, document_format) else {
                dropped.note("document");
                return None;
            };
            let name = format!("document {}-{}", position.0 + 1, position.1 + 1);
            json!({ "document": { "format": format, "name": name, "source": { "bytes": data } } })
        }
        Part::Thinking { text, signature } => {
            let mut reasoning = json!({ "text": text });
            if let Some(signature) = signature {
                reasoning["signature"] = json!(signature);
            }
            json!({ "reasoningContent": { "reasoningText": reasoning } })
        }
        Part::RedactedThinking { data } => json!({ "reasoningContent": { "redactedContent": data } }),
        Part::ToolCall { id, name, arguments } => {
            json!({ "toolUse": { "toolUseId": id, "name": name, "input": arguments } })
        }
        Part::ToolResult { id, content, is_error, .. } => {
            let mut inner = Vec::with_capacity(content.len());
            for part in content {
                match part {
                    Part::Text { text, .. } => inner.push(json!({ "text": text })),
                    Part::Image(_) | Part::Document(_) => {
                        if let Some(block) = block(part, position, dropped) {
                            inner.push(block);
                        }
                    }
                    _ => dropped.note("tool_result_part"),
                }
            }
            let mut result = json!({ "toolUseId": id, "content": inner });
            if *is_error {
                result["status"] = json!("error");
            }
            json!({ "toolResult": result })
        }
    })
}

/// The system prompt as Converse system blocks (text and cache points).
fn system(parts: &[Part], dropped: &mut Dropped) -> Vec<Value> {
    let mut blocks = Vec::new();
    for part in parts {
        match part {
            Part::Text { text, cache } => {
                blocks.push(json!({ "text": text }));
                if let Some(mark) = cache {
                    blocks.push(cache_point(*mark));
                }
            }
            _ => dropped.note("system_media"),
        }
    }
    blocks
}

/// `toolConfig` for the request's tools and choice; `None` without tools.
fn tool_config(request: &Request, dropped: &mut Dropped) -> Option<Value> {
    if request.tools.is_empty() {
        if request.tool_choice.is_some() {
            dropped.note("tool_choice");
        }
        return None;
    }
    let mut tools = Vec::with_capacity(request.tools.len());
    for (index, tool) in request.tools.iter().enumerate() {
        let mut spec = json!({ "name": tool.name, "inputSchema": { "json": tool.parameters } });
        if let Some(description) = &tool.description {
            spec["description"] = json!(description);
        }
        tools.push(json!({ "toolSpec": spec }));
        if let Some((_, mark)) = request.cache_marks.iter().find(|(place, _)| *place == CacheAt::Tool(index)) {
            tools.push(cache_point(*mark));
        }
    }
    let mut config = json!({ "tools": tools });
    match &request.tool_choice {
        None | Some(ToolChoice::Auto) => {}
        Some(ToolChoice::Required) => config["toolChoice"] = json!({ "any": {} }),
        Some(ToolChoice::Tool(name)) => config["toolChoice"] = json!({ "tool": { "name": name } }),
        Some(ToolChoice::None) => dropped.note("tool_choice"),
    }
    Some(config)
}

fn text_mark(part: &Part) -> Option<CacheMark> {
    match part {
        Part::Text { cache, .. } => *cache,
        _ => None,
    }
}

fn cache_point(mark: CacheMark) -> Value {
    match mark {
        CacheMark::FiveMinutes => json!({ "cachePoint": { "type": "default" } }),
        CacheMark::OneHour => json!({ "cachePoint": { "type": "default", "ttl": "1h" } }),
    }
}

/// The Converse format and base64 data of `media` given inline; `None` for
/// a URL or a type Converse does not take.
fn bytes(media: &Media, format: fn(&str) -> Option<&'static str>) -> Option<(&'static str, &str)> {
    match media {
        Media::Base64 { media_type, data } => Some((format(media_type)?, data)),
        Media::Url { .. } => None,
    }
}

fn image_format(media_type: &str) -> Option<&'static str> {
    match media_type {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        "image/gif" => Some("gif"),
        "image/webp" => Some("webp"),
        _ => None,
    }
}

fn document_format(media_type: &str) -> Option<&'static str> {
    match media_type {
        "application/pdf" => Some("pdf"),
        "text/csv" => Some("csv"),
        "application/msword" => Some("doc"),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => Some("docx"),
        "application/vnd.ms-excel" => Some("xls"),
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => Some("xlsx"),
        "text/html" => Some("html"),
        "text/plain" => Some("txt"),
        "text/markdown" => Some("md"),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::translate::ir::{Reasoning, Tool};

    fn text(text: &str) -> Part {
        Part::Text { text: text.into(), cache: None }
    }

    #[test]
    fn a_tool_conversation_becomes_converse_blocks() {
        let request = Request {
            model: "amazon.nova-pro-v1:0".into(),
            system: vec![Part::Text { text: "be brief".into(), cache: Some(CacheMark::FiveMinutes) }],
            messages: vec![
                Message { role: Role::User, parts: vec![text("weather in Paris?")] },
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking { text: "use the tool".into(), signature: Some("sig".into()) },
                        Part::ToolCall { id: "t1".into(), name: "weather".into(), arguments: json!({"city": "Paris"}) },
                    ],
                },
                Message {
                    role: Role::User,
                    parts: vec![Part::ToolResult {
                        id: "t1".into(),
                        name: Some("weather".into()),
                        content: vec![text("sunny")],
                        is_error: false,
                    }],
                },
                Message { role: Role::User, parts: vec![text("and tomorrow?")] },
            ],
            tools: vec![Tool {
                name: "weather".into(),
                description: Some("forecast".into()),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: Some(ToolChoice::Required),
            max_tokens: Some(100),
            temperature: Some(0.5),
            top_k: Some(40),
            stop: vec!["END".into()],
            reasoning: Some(Reasoning::Budget(2048)),
            stream: true,
            ..Request::default()
        };
        let mut dropped = Dropped::new();
        let body = encode_request(&request, &mut dropped);
        assert!(dropped.is_empty(), "{dropped}");
        assert_eq!(
            body,
            json!({
                "messages": [
                    {"role": "user", "content": [{"text": "weather in Paris?"}]},
                    {"role": "assistant", "content": [
                        {"reasoningContent": {"reasoningText": {"text": "use the tool", "signature": "sig"}}},
                        {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}},
                    ]},
                    {"role": "user", "content": [
                        {"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}},
                        {"text": "and tomorrow?"},
                    ]},
                ],
                "system": [{"text": "be brief"}, {"cachePoint": {"type": "default"}}],
                "inferenceConfig": {"maxTokens": 100, "temperature": 0.5, "stopSequences": ["END"]},
                "toolConfig": {
                    "tools": [{"toolSpec": {"name": "weather", "description": "forecast", "inputSchema": {"json": {"type": "object"}}}}],
                    "toolChoice": {"any": {}},
                },
                "additionalModelRequestFields": {"top_k": 40, "thinking": {"type": "enabled", "budget_tokens": 2048}},
            })
        );
    }

    #[test]
    fn images_are_sent_as_bytes_and_urls_are_dropped() {
        let request = Request {
            messages: vec![Message {
                role: Role::User,
                parts: vec![
                    Part::Image(Media::Base64 { media_type: "image/png".into(), data: "iVBO".into() }),
                    Part::Image(Media::Url { url: "https://example.com/a.png".into(), media_type: None }),
                    Part::Document(Media::Base64 { media_type: "application/pdf".into(), data: "JVBE".into() }),
                ],
            }],
            tool_choice: Some(ToolChoice::None),
            ..Request::default()
        };
        let mut dropped = Dropped::new();
        let body = encode_request(&request, &mut dropped);
        assert_eq!(dropped.names(), ["image", "tool_choice"]);
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"image": {"format": "png", "source": {"bytes": "iVBO"}}},
                {"document": {"format": "pdf", "name": "document 1-3", "source": {"bytes": "JVBE"}}},
            ])
        );
        assert!(body.get("toolConfig").is_none());
    }

    #[test]
    fn cache_marks_on_tools_and_parts_become_cache_points() {
        let request = Request {
            messages: vec![Message {
                role: Role::User,
                parts: vec![Part::Text { text: "long".into(), cache: Some(CacheMark::OneHour) }, text("q")],
            }],
            tools: vec![Tool { name: "f".into(), description: None, parameters: json!({"type": "object"}) }],
            cache_marks: vec![(CacheAt::Tool(0), CacheMark::FiveMinutes)],
            ..Request::default()
        };
        let body = encode_request(&request, &mut Dropped::new());
        assert_eq!(body["messages"][0]["content"][1], json!({"cachePoint": {"type": "default", "ttl": "1h"}}));
        assert_eq!(body["toolConfig"]["tools"][1], json!({"cachePoint": {"type": "default"}}));
    }
}
