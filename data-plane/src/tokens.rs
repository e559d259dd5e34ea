//! Local token counts for the usage records an upstream left without usage
//! (a stream cut short, an upstream that never reports any), and for
//! `count_tokens` requests to channels that cannot count. Models of the
//! GPT and `o` families are counted with their real BPE (tiktoken's
//! `o200k_base` / `cl100k_base`, embedded in the binary, so no download);
//! every other model is estimated at one token per four characters, rounded
//! up, the rule of thumb the providers themselves publish. Records built from
//! these counts are marked `estimated`.

use serde_json::Value;
use tiktoken_rs::CoreBPE;

/// Tokens a chat message costs besides its text (role, separators), as
/// OpenAI's own counting guide adds per message.
const PER_MESSAGE: i64 = 3;

/// Keys whose string values are not text the model reads as tokens
/// (identifiers, base64 payloads, addresses).
const NOT_TEXT: &[&str] = &["model", "data", "url", "image_url", "file_data", "signature", "id", "tool_call_id"];

/// Tokens in `text` for `model`: exact for known families, else
/// `ceil(chars / 4)`.
pub fn count(model: &str, text: &str) -> i64 {
    if text.is_empty() {
        return 0;
    }
    let n = match tokenizer(model) {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        None => text.chars().count().div_ceil(4),
    };
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Prompt tokens of a JSON request body (either chat dialect, or any JSON
/// with text in it) for `model`: the text of every string value except
/// identifiers and binary payloads, plus `PER_MESSAGE` per message. A body
/// that is not JSON counts as text.
pub fn count_request(model: &str, body: &[u8]) -> i64 {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return count(model, &String::from_utf8_lossy(body));
    };
    let mut text = String::new();
    collect_text(&request, &mut text);
    let messages = request.get("messages").and_then(Value::as_array).map_or(0, Vec::len);
    count(model, &text).saturating_add(PER_MESSAGE * i64::try_from(messages).unwrap_or(0))
}

/// Input tokens of a messages request (the body of
/// `POST /v1/messages/count_tokens`) as a chat upstream would see it, for
/// `model`: the system prompt (a string or text blocks), every message's
/// text, `tool_use` name and input JSON and `tool_result` content, and each
/// custom tool's name, description and `input_schema` JSON, plus
/// `PER_MESSAGE` per message. What the translation to chat drops is not
/// counted (thinking blocks, server tools); nor are images and documents,
/// whose cost is unknown without decoding them. A body without any of
/// these counts 0.
pub fn count_messages_input(model: &str, body: &Value) -> i64 {
    let mut text = String::new();
    if let Some(system) = body.get("system") {
        push_content(system, &mut text);
    }
    let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for message in messages {
        if let Some(content) = message.get("content") {
            push_content(content, &mut text);
        }
    }
    let tools = body.get("tools").and_then(Value::as_array).into_iter().flatten();
    for tool in tools.filter(|t| matches!(t.get("type").and_then(Value::as_str), None | Some("custom"))) {
        for key in ["name", "description"] {
            push_line(tool.get(key).and_then(Value::as_str).unwrap_or_default(), &mut text);
        }
        if let Some(schema) = tool.get("input_schema") {
            push_line(&schema.to_string(), &mut text);
        }
    }
    let per_message = PER_MESSAGE.saturating_mul(i64::try_from(messages.len()).unwrap_or(i64::MAX));
    count(model, &text).saturating_add(per_message)
}

/// Builds the embedded tokenizers now (a fraction of a second in release
/// builds), so that counting never waits for them.
pub fn warm_up() {
    tiktoken_rs::o200k_base_singleton();
    tiktoken_rs::cl100k_base_singleton();
}

/// The BPE for `model`, if its family is known.
fn tokenizer(model: &str) -> Option<&'static CoreBPE> {
    let model = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let o200k = ["gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4"];
    let cl100k = ["gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada"];
    if o200k.iter().any(|p| model.starts_with(p)) {
        Some(tiktoken_rs::o200k_base_singleton())
    } else if cl100k.iter().any(|p| model.starts_with(p)) {
        Some(tiktoken_rs::cl100k_base_singleton())
    } else {
        None
    }
}

/// Appends the text a model reads in messages `content` (a string or
/// blocks) to `out`, one piece per line.
fn push_content(content: &Value, out: &mut String) {
    let blocks = match content {
        Value::String(text) => return push_line(text, out),
        Value::Array(blocks) => blocks,
        _ => return,
    };
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => push_line(str_at(block, "/text"), out),
            Some("tool_use") => {
                push_line(str_at(block, "/name"), out);
                push_line(&block.get("input").map(Value::to_string).unwrap_or_default(), out);
            }
            Some("tool_result") => {
                if let Some(result) = block.get("content") {
                    push_content(result, out);
                }
            }
            Some("document") if str_at(block, "/source/type") == "text" => {
                push_line(str_at(block, "/source/data"), out);
            }
            _ => {}
        }
    }
}

/// The string at `pointer` in `value`; empty if there is none.
fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn push_line(text: &str, out: &mut String) {
    if !text.is_empty() {
        out.push_str(text);
        out.push('\n');
    }
}

/// Appends the text of every string in `value` to `out`, one per line.
fn collect_text(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|v| collect_text(v, out)),
        Value::Object(map) => {
            for (key, v) in map {
                if !NOT_TEXT.contains(&key.as_str()) {
                    collect_text(v, out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt_models_are_counted_with_their_bpe() {
        // "Hello world" is two tokens in both o200k_base and cl100k_base.
        assert_eq!(count("gpt-4o-mini", "Hello world"), 2);
        assert_eq!(count("openai/gpt-4-turbo", "Hello world"), 2);
        assert_eq!(count("o3-mini", ""), 0);
    }

    #[test]
    fn other_models_are_estimated_at_four_characters_a_token() {
        assert_eq!(count("claude-sonnet-4", "Hello world"), 3);
        assert_eq!(count("mystery", "ab"), 1);
    }

    #[test]
    fn a_messages_request_counts_its_system_prompt_messages_and_tools() {
        let model = "gpt-4o";
        let bare = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "messages": [{ "role": "user", "content": "Hello world" }],
        });
        assert_eq!(count_messages_input(model, &bare), count(model, "Hello world\n") + 3);

        let mut with_system = bare.clone();
        with_system["system"] = serde_json::json!([{ "type": "text", "text": "You are terse." }]);
        let system = count_messages_input(model, &with_system);
        assert_eq!(system, count(model, "You are terse.\nHello world\n") + 3);
        with_system["system"] = serde_json::json!("You are terse.");
        assert_eq!(count_messages_input(model, &with_system), system, "a string system prompt counts the same");

        let schema = serde_json::json!({ "type": "object", "properties": { "city": { "type": "string" } } });
        let mut with_tools = bare.clone();
        with_tools["tools"] = serde_json::json!([
            { "name": "weather", "description": "Current weather", "input_schema": schema },
            { "type": "web_search_20250305", "name": "web_search" },
        ]);
        let expected = count(model, &format!("Hello world\nweather\nCurrent weather\n{schema}\n")) + 3;
        assert_eq!(count_messages_input(model, &with_tools), expected, "server tools are not counted");
        assert!(expected > count_messages_input(model, &bare));
    }

    #[test]
    fn tool_calls_and_results_count_but_thinking_does_not() {
        let model = "gpt-4o";
        let body = serde_json::json!({
            "messages": [
                { "role": "user", "content": "Weather in Paris?" },
                { "role": "assistant", "content": [
                    { "type": "thinking", "thinking": "The user wants weather.", "signature": "c2ln" },
                    { "type": "tool_use", "id": "toolu_1", "name": "weather", "input": { "city": "Paris" } },
                ] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "toolu_1", "content": [{ "type": "text", "text": "Sunny" }] },
                    { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "QUJD" } },
                ] },
            ],
        });
        let text = "Weather in Paris?\nweather\n{\"city\":\"Paris\"}\nSunny\n";
        assert_eq!(count_messages_input(model, &body), count(model, text) + 9);
        assert_eq!(count_messages_input(model, &serde_json::json!({})), 0);
    }

    #[test]
    fn requests_count_their_text_and_a_few_tokens_per_message() {
        let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"Hello world"}]}"#;
        // "user\nHello world\n" plus 3 for the message.
        let text = count("gpt-4o", "user\nHello world\n");
        assert_eq!(count_request("gpt-4o", body), text + 3);
        let image = br#"{"messages":[{"role":"user","content":[{"type":"image","source":{"data":"QUJDRA=="}}]}]}"#;
        assert_eq!(count_request("x", image), count("x", "user\nimage\n") + 3, "base64 data is not text");
    }
}
