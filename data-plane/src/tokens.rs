//! Local token counts for the usage records an upstream left without usage
//! (a stream cut short, an upstream that never reports any). Models of the
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
    fn requests_count_their_text_and_a_few_tokens_per_message() {
        let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"Hello world"}]}"#;
        // "user\nHello world\n" plus 3 for the message.
        let text = count("gpt-4o", "user\nHello world\n");
        assert_eq!(count_request("gpt-4o", body), text + 3);
        let image = br#"{"messages":[{"role":"user","content":[{"type":"image","source":{"data":"QUJDRA=="}}]}]}"#;
        assert_eq!(count_request("x", image), count("x", "user\nimage\n") + 3, "base64 data is not text");
    }
}
