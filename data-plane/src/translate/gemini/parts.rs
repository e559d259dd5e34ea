//! Gemini `parts` read into internal parts and written from them, shared by
//! requests (`contents`, `systemInstruction`) and answers (`candidates`).
//! The reader gives function calls their ids and tool results the id of the
//! call they answer; the writer names tool results' functions and moves a
//! thought signature onto the part after its thought, where Gemini has it.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::translate::{
    Dropped,
    ir::{Media, Part},
};

/// The thought signature Gemini accepts on replayed function calls that no
/// Gemini model made (a conversation begun on another provider).
const FOREIGN_SIGNATURE: &str = "skip_thought_signature_validator";

/// Reads parts, keeping what calls were made and not yet answered.
#[derive(Debug, Default)]
pub(super) struct Reader {
    /// Prefix of synthesized call ids.
    prefix: String,
    /// Calls made so far, for synthesized ids.
    calls: usize,
    /// `(name, id)` of calls not answered yet, oldest first.
    unanswered: Vec<(String, String)>,
}

/// Writes parts, knowing each call's function by id.
#[derive(Debug, Default)]
pub(super) struct Writer {
    names: HashMap<String, String>,
    /// Whether written calls and results carry their `id` (answers to
    /// Gemini clients do; upstream requests do not).
    ids: bool,
    /// Whether a model turn's first call without a signature gets the
    /// signature Gemini accepts for foreign calls (upstream requests).
    sign_calls: bool,
}

// === impl Reader ===

impl Reader {
    /// A reader whose synthesized call ids start with `prefix`.
    pub(super) fn new(prefix: impl Into<String>) -> Reader {
        Reader { prefix: prefix.into(), ..Reader::default() }
    }

    /// Synthesized ids from now on start with `prefix` and count from 0.
    pub(super) fn set_prefix(&mut self, prefix: String) {
        self.prefix = prefix;
        self.calls = 0;
    }

    /// The id of the next call named `name` (its own `id` when given).
    pub(super) fn call_id(&mut self, name: &str, id: Option<&str>) -> String {
        let id = match id.filter(|id| !id.is_empty()) {
            Some(id) => id.to_owned(),
            None => format!("{}{}", self.prefix, self.calls),
        };
        self.calls += 1;
        self.unanswered.push((name.to_owned(), id.clone()));
        id
    }

    /// The id of the call a response to `name` answers: its own `id` when
    /// given, else the oldest unanswered call of that name.
    fn answered_id(&mut self, name: &str, id: Option<&str>) -> String {
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            self.unanswered.retain(|(_, open)| open != id);
            return id.to_owned();
        }
        match self.unanswered.iter().position(|(open, _)| open == name) {
            Some(at) => self.unanswered.remove(at).1,
            None => {
                let id = format!("{}{}", self.prefix, self.calls);
                self.calls += 1;
                id
            }
        }
    }

    /// The internal parts of a Gemini `parts` array (anything else reads
    /// as no parts). A signature on a part that is not a thought becomes
    /// the signature of the thought before it, or of an empty thought.
    pub(super) fn parts(&mut self, parts: Option<&Value>, dropped: &mut Dropped) -> Vec<Part> {
        let mut out = Vec::new();
        for part in parts.and_then(Value::as_array).into_iter().flatten() {
            let signature = part.get("thoughtSignature").and_then(Value::as_str).map(str::to_owned);
            let thought = part.get("thought").and_then(Value::as_bool).unwrap_or(false);
            if thought {
                let text = part.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
                out.push(Part::Thinking { text, signature });
                continue;
            }
            if let Some(signature) = signature {
                match out.last_mut() {
                    Some(Part::Thinking { signature: slot @ None, .. }) => *slot = Some(signature),
                    _ => out.push(Part::Thinking { text: String::new(), signature: Some(signature) }),
                }
            }
            if let Some(part) = self.part(part, dropped) {
                out.push(part);
            }
        }
        out
    }

    /// One part that is not a thought.
    fn part(&mut self, part: &Value, dropped: &mut Dropped) -> Option<Part> {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            // Gemini CLI sends empty texts; other providers refuse them.
            return (!text.is_empty()).then(|| Part::Text { text: text.to_owned(), cache: None });
        }
        if let Some(data) = part.get("inlineData") {
            let media_type = str_of(data, "mimeType").unwrap_or("application/octet-stream").to_owned();
            let media = Media::Base64 { data: str_of(data, "data").unwrap_or_default().to_owned(), media_type };
            return Some(media_part(media));
        }
        if let Some(file) = part.get("fileData") {
            let media = Media::Url {
                url: str_of(file, "fileUri").unwrap_or_default().to_owned(),
                media_type: str_of(file, "mimeType").map(str::to_owned),
            };
            return Some(media_part(media));
        }
        if let Some(call) = part.get("functionCall") {
            let name = str_of(call, "name").unwrap_or_default().to_owned();
            let id = self.call_id(&name, str_of(call, "id"));
            let arguments = match call.get("args") {
                Some(args @ Value::Object(_)) => args.clone(),
                _ => Value::Object(Map::new()),
            };
            return Some(Part::ToolCall { id, name, arguments });
        }
        if let Some(response) = part.get("functionResponse") {
            let name = str_of(response, "name").unwrap_or_default().to_owned();
            let id = self.answered_id(&name, str_of(response, "id"));
            let (mut content, is_error) = result_content(response.get("response"));
            for nested in response.get("parts").and_then(Value::as_array).into_iter().flatten() {
                if let Some(part) = self.part(nested, dropped) {
                    content.push(part);
                }
            }
            return Some(Part::ToolResult { id, name: Some(name), content, is_error });
        }
        dropped.note(match part.as_object().and_then(|p| p.keys().find(|k| *k != "thoughtSignature")) {
            Some(key) if key == "executableCode" => "executable_code",
            Some(key) if key == "codeExecutionResult" => "code_execution_result",
            _ => "unknown_part",
        });
        None
    }
}

/// An image for `image/*`, a document otherwise.
fn media_part(media: Media) -> Part {
    let media_type = match &media {
        Media::Base64 { media_type, .. } => Some(media_type.as_str()),
        Media::Url { media_type, .. } => media_type.as_deref(),
    };
    if media_type.is_some_and(|t| t.starts_with("image/")) { Part::Image(media) } else { Part::Document(media) }
}

/// A function response's `response` as tool-result content: an object
/// whose only field is a string `output`, `result` or `error` is that text
/// (an error for `error`); any other value is its JSON text.
fn result_content(response: Option<&Value>) -> (Vec<Part>, bool) {
    let text = |text: &str| vec![Part::Text { text: text.to_owned(), cache: None }];
    match response {
        None | Some(Value::Null) => (Vec::new(), false),
        Some(Value::Object(fields)) if fields.len() == 1 => match fields.iter().next() {
            Some((key, Value::String(s))) if key == "output" || key == "result" => (text(s), false),
            Some((key, Value::String(s))) if key == "error" => (text(s), true),
            _ => (text(&Value::Object(fields.clone()).to_string()), false),
        },
        Some(other) => (text(&other.to_string()), false),
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

// === impl Writer ===

impl Writer {
    /// A writer for answers to Gemini clients: calls and results keep ids.
    pub(super) fn for_answers() -> Writer {
        Writer { ids: true, ..Writer::default() }
    }

    /// A writer for requests to a Gemini upstream: no ids, and foreign
    /// calls signed so that Gemini accepts them.
    pub(super) fn for_requests() -> Writer {
        Writer { sign_calls: true, ..Writer::default() }
    }

    /// Gemini `parts` for `parts` of one turn (`model` for the model's
    /// turns).
    pub(super) fn parts(&mut self, parts: &[Part], model: bool, dropped: &mut Dropped) -> Vec<Value> {
        let mut out = Vec::new();
        let mut signature: Option<String> = None;
        // A turn with a signature of its own needs no foreign one.
        let mut signed = parts.iter().any(|p| matches!(p, Part::Thinking { signature: Some(_), .. }));
        for part in parts {
            let mut value = match part {
                Part::Text { text, cache } => {
                    if cache.is_some() {
                        dropped.note("cache_control");
                    }
                    json!({ "text": text })
                }
                Part::Image(media) | Part::Document(media) => media_value(media),
                Part::Thinking { text, signature: sig } if text.is_empty() => {
                    signature = sig.clone();
                    continue;
                }
                Part::Thinking { text, signature: sig } => {
                    let mut thought = json!({ "text": text, "thought": true });
                    if let Some(sig) = sig {
                        thought["thoughtSignature"] = json!(sig);
                    }
                    out.push(thought);
                    continue;
                }
                Part::RedactedThinking { .. } => {
                    dropped.note("redacted_thinking");
                    continue;
                }
                Part::ToolCall { id, name, arguments } => {
                    self.names.insert(id.clone(), name.clone());
                    let mut call = json!({ "name": name, "args": arguments });
                    if self.ids {
                        call["id"] = json!(id);
                    }
                    let mut value = json!({ "functionCall": call });
                    if self.sign_calls && model && !signed {
                        value["thoughtSignature"] = json!(FOREIGN_SIGNATURE);
                    }
                    signed = true;
                    value
                }
                Part::ToolResult { id, name, content, is_error } => {
                    let name = name.clone().or_else(|| self.names.get(id).cloned()).unwrap_or_default();
                    let mut response = json!({ "name": name, "response": result_value(content, *is_error, dropped) });
                    if self.ids {
                        response["id"] = json!(id);
                    }
                    json!({ "functionResponse": response })
                }
            };
            if let Some(signature) = signature.take() {
                value["thoughtSignature"] = json!(signature);
            }
            out.push(value);
        }
        if signature.is_some() {
            dropped.note("signature");
        }
        out
    }
}

/// `inlineData` for data, `fileData` for a reference (a `data:` URL is
/// data).
fn media_value(media: &Media) -> Value {
    match media {
        Media::Base64 { media_type, data } => json!({ "inlineData": { "mimeType": media_type, "data": data } }),
        Media::Url { url, media_type } => {
            if let Some((media_type, data)) = crate::translate::parse_data_url(url) {
                return json!({ "inlineData": { "mimeType": media_type, "data": data } });
            }
            let media_type = media_type.clone().unwrap_or_else(|| guess_media_type(url).to_owned());
            json!({ "fileData": { "mimeType": media_type, "fileUri": url } })
        }
    }
}

/// A media type for a URL by its extension (Gemini requires one).
fn guess_media_type(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url).to_ascii_lowercase();
    let ext = path.rsplit_once('.').map_or("", |(_, ext)| ext);
    match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        _ => "application/octet-stream",
    }
}

/// A tool result's content as a function `response` object: text that is
/// a JSON object is that object, other text is `{"result": text}` (or
/// `{"error": text}` for an error). Media in results is dropped.
fn result_value(content: &[Part], is_error: bool, dropped: &mut Dropped) -> Value {
    let mut text = String::new();
    for part in content {
        match part {
            Part::Text { text: t, .. } => text.push_str(t),
            Part::Image(_) => dropped.note("image"),
            Part::Document(_) => dropped.note("document"),
            _ => dropped.note("unknown_block"),
        }
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) if !is_error => object,
        _ if is_error => json!({ "error": text }),
        _ => json!({ "result": text }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn responses_answer_the_oldest_open_call_of_their_name() {
        let mut reader = Reader::new("call_");
        let mut dropped = Dropped::new();
        let model = json!([
            {"functionCall": {"name": "read", "args": {"p": "a"}}},
            {"functionCall": {"name": "list", "args": {}}},
            {"functionCall": {"name": "read", "args": {"p": "b"}}},
        ]);
        let calls = reader.parts(Some(&model), &mut dropped);
        let ids: Vec<_> =
            calls.iter().map(|p| if let Part::ToolCall { id, .. } = p { id.clone() } else { panic!() }).collect();
        assert_eq!(ids, ["call_0", "call_1", "call_2"]);
        let user = json!([
            {"functionResponse": {"name": "read", "response": {"output": "A"}}},
            {"functionResponse": {"name": "read", "response": {"error": "gone"}}},
            {"functionResponse": {"name": "list", "response": {"files": [1]}}},
        ]);
        let results = reader.parts(Some(&user), &mut dropped);
        let text = |t: &str| vec![Part::Text { text: t.into(), cache: None }];
        assert_eq!(
            results,
            [
                Part::ToolResult {
                    id: "call_0".into(),
                    name: Some("read".into()),
                    content: text("A"),
                    is_error: false
                },
                Part::ToolResult {
                    id: "call_2".into(),
                    name: Some("read".into()),
                    content: text("gone"),
                    is_error: true
                },
                Part::ToolResult {
                    id: "call_1".into(),
                    name: Some("list".into()),
                    content: text(r#"{"files":[1]}"#),
                    is_error: false
                },
            ]
        );
        assert!(dropped.is_empty());
    }

    #[test]
    fn signatures_move_between_the_part_after_a_thought_and_the_thought() {
        let gemini = json!([
            {"text": "plan", "thought": true},
            {"functionCall": {"name": "f", "args": {"x": 1}}, "thoughtSignature": "c2ln"},
        ]);
        let parts = Reader::new("c").parts(Some(&gemini), &mut Dropped::new());
        assert_eq!(parts[0], Part::Thinking { text: "plan".into(), signature: Some("c2ln".into()) });
        let unsigned = json!([{"text": "hi", "thoughtSignature": "s"}]);
        let parts = Reader::new("c").parts(Some(&unsigned), &mut Dropped::new());
        assert_eq!(parts[0], Part::Thinking { text: String::new(), signature: Some("s".into()) });
        let back = Writer::for_requests().parts(&parts, true, &mut Dropped::new());
        assert_eq!(back, [json!({"text": "hi", "thoughtSignature": "s"})]);
    }

    #[test]
    fn results_are_named_from_their_call_and_foreign_calls_are_signed() {
        let mut writer = Writer::for_requests();
        let mut dropped = Dropped::new();
        let call = Part::ToolCall { id: "toolu_1".into(), name: "weather".into(), arguments: json!({"c": "Oslo"}) };
        let model = writer.parts(&[call], true, &mut dropped);
        assert_eq!(
            model,
            [
                json!({"functionCall": {"name": "weather", "args": {"c": "Oslo"}}, "thoughtSignature": FOREIGN_SIGNATURE})
            ]
        );
        let result = Part::ToolResult {
            id: "toolu_1".into(),
            name: None,
            content: vec![Part::Text { text: "sunny".into(), cache: None }],
            is_error: false,
        };
        let user = writer.parts(&[result], false, &mut dropped);
        assert_eq!(user, [json!({"functionResponse": {"name": "weather", "response": {"result": "sunny"}}})]);
    }

    #[test]
    fn media_keeps_its_type_and_urls_get_one() {
        let image = Media::Url { url: "https://x.test/cat.PNG?s=1".into(), media_type: None };
        assert_eq!(
            media_value(&image),
            json!({"fileData": {"mimeType": "image/png", "fileUri": "https://x.test/cat.PNG?s=1"}})
        );
        let data = Media::Url { url: "data:image/gif;base64,R0lG".into(), media_type: None };
        assert_eq!(media_value(&data), json!({"inlineData": {"mimeType": "image/gif", "data": "R0lG"}}));
        let pdf = json!([{"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}}]);
        let parts = Reader::new("c").parts(Some(&pdf), &mut Dropped::new());
        assert!(matches!(parts[0], Part::Document(_)));
    }
}
