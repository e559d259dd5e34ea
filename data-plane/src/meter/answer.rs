//! What upstream answers say, read in one place for both dialects: token
//! usage (chat, responses and messages namings, bodies and stream events),
//! the answer's text (for estimates when no usage comes), and whether a
//! stream event is the answer's last.
//!
//! Usage is normalised here and nowhere else (see `gw_pricing::Usage`): the
//! prompt counts everything sent, cache reads and writes included, and the
//! completion everything generated, reasoning included.
//! - OpenAI (chat and responses): `prompt_tokens`/`input_tokens` already
//!   include the cached part (`*_tokens_details.cached_tokens`), and
//!   `completion_tokens`/`output_tokens` the reasoning part
//!   (`completion_tokens_details`/`output_tokens_details.reasoning_tokens`).
//!   Cache writes, which OpenAI does not bill apart, are read from
//!   `prompt_tokens_details.cache_write_tokens` (as OpenAI-compatible
//!   relays of other providers report them), kept five minutes.
//! - Messages: `input_tokens` excludes both `cache_read_input_tokens` and
//!   `cache_creation_input_tokens`, which are added to the prompt. The
//!   writes split by `cache_creation.ephemeral_1h_input_tokens`; the rest
//!   (all of them when the split is absent) are 5-minute writes, the
//!   provider's default. `output_tokens` includes thinking, which the
//!   dialect does not count apart, so reasoning is 0.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    event::MessagesEvent,
    member::{self, Member},
};
use crate::pricing::Usage;

/// An OpenAI usage object in either naming: chat's (`prompt_tokens`,
/// `completion_tokens`, `*_tokens_details`) or the responses API's
/// (`input_tokens`, `output_tokens`, `*_tokens_details`). Chat's names win
/// when an upstream sends both.
#[derive(Debug, Default, Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    input_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
    #[serde(default)]
    output_tokens: Option<i64>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
    #[serde(default)]
    input_tokens_details: Option<Details>,
    #[serde(default)]
    completion_tokens_details: Option<Details>,
    #[serde(default)]
    output_tokens_details: Option<Details>,
}

/// A `*_tokens_details` object: the parts of a prompt or of a completion.
#[derive(Debug, Default, Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<i64>,
    #[serde(default)]
    cache_write_tokens: Option<i64>,
    #[serde(default)]
    reasoning_tokens: Option<i64>,
    /// Audio in or out (chat completions with audio, realtime).
    #[serde(default)]
    audio_tokens: Option<i64>,
}

/// A streamed chunk, as far as usage stripping needs it.
#[derive(Debug, Deserialize)]
struct ChunkProbe {
    #[serde(default)]
    choices: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    usage: Option<UsageJson>,
}

// === impl UsageJson ===

impl UsageJson {
    /// Whether it counts any tokens (a `{"type":"duration"}` usage does not).
    fn counts_tokens(&self) -> bool {
        [self.prompt_tokens, self.input_tokens, self.completion_tokens, self.output_tokens].iter().any(Option::is_some)
    }

    fn usage(&self) -> Usage {
        let prompt = self.prompt_tokens_details.as_ref().or(self.input_tokens_details.as_ref());
        let completion = self.completion_tokens_details.as_ref().or(self.output_tokens_details.as_ref());
        let part = |details: Option<&Details>, pick: fn(&Details) -> Option<i64>| details.and_then(pick).unwrap_or(0);
        Usage {
            prompt_tokens: self.prompt_tokens.or(self.input_tokens).unwrap_or(0),
            completion_tokens: self.completion_tokens.or(self.output_tokens).unwrap_or(0),
            cached_tokens: part(prompt, |d| d.cached_tokens),
            cache_write_5m_tokens: part(prompt, |d| d.cache_write_tokens),
            cache_write_1h_tokens: 0,
            reasoning_tokens: part(completion, |d| d.reasoning_tokens),
            audio_prompt_tokens: part(prompt, |d| d.audio_tokens),
            audio_completion_tokens: part(completion, |d| d.audio_tokens),
            audio_cached_tokens: 0,
        }
    }
}

/// The text of a chat completion's choices (content and tool-call
/// arguments), for an estimate when the answer reports no usage.
pub fn answer_text(body: &[u8]) -> String {
    let Ok(answer) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    let mut text = String::new();
    for choice in answer.get("choices").and_then(|c| c.as_array()).into_iter().flatten() {
        let message = choice.get("message").or_else(|| choice.get("delta"));
        push_message_text(message, &mut text);
        if let Some(t) = choice.get("text").and_then(|t| t.as_str()) {
            text.push_str(t);
        }
    }
    text
}

/// Appends a chat message's (or delta's) content and tool-call arguments.
pub fn push_message_text(message: Option<&serde_json::Value>, text: &mut String) {
    let Some(message) = message else { return };
    if let Some(content) = message.get("content").and_then(|c| c.as_str()) {
        text.push_str(content);
    }
    for call in message.get("tool_calls").and_then(|c| c.as_array()).into_iter().flatten() {
        if let Some(arguments) = call.get("function").and_then(|f| f.get("arguments")).and_then(|a| a.as_str()) {
            text.push_str(arguments);
        }
    }
}

/// Usage of a non-streamed response body, if it reports any.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(default)]
        usage: Option<UsageJson>,
    }
    // The member alone when the walk is sure of it; else the whole body.
    let usage = match member::top_level(body, b"usage") {
        Some(Member::Absent) => None,
        Some(Member::Value(usage)) => serde_json::from_slice::<Option<UsageJson>>(usage).ok()?,
        None => serde_json::from_slice::<Body>(body).ok()?.usage,
    };
    usage.map(|u| u.usage())
}

/// What a stream chunk's JSON says: its usage, and whether it is the extra
/// usage-only chunk (`choices` empty) that `include_usage` adds.
pub fn chunk_usage(data: &[u8]) -> Option<(Usage, bool)> {
    let probe = serde_json::from_slice::<ChunkProbe>(data).ok()?;
    let usage = probe.usage?.usage();
    Some((usage, probe.choices.is_none_or(|c| c.is_empty())))
}

/// Token usage in an OpenAI usage object, in either naming: chat's
/// (`prompt_tokens`, `completion_tokens`, `*_tokens_details`) or the
/// responses API's (`input_tokens`, `output_tokens`, `*_tokens_details`).
/// `None` when it counts no tokens (e.g. `{"type":"duration"}`) or is not
/// an object of integer counts.
pub fn usage_of(usage: &Value) -> Option<Usage> {
    UsageJson::deserialize(usage).ok().filter(UsageJson::counts_tokens).map(|u| u.usage())
}

/// Accumulates usage over a messages event stream: `message_start` carries
/// the prompt counts, each `message_delta` the cumulative output count (and,
/// from newer upstreams, final prompt counts too).
#[derive(Debug, Default, Clone)]
pub struct MessagesStreamUsage {
    input: i64,
    cache_read: i64,
    cache_creation: i64,
    /// `cache_creation.ephemeral_5m_input_tokens`, if reported.
    cache_5m: Option<i64>,
    /// `cache_creation.ephemeral_1h_input_tokens`, if reported.
    cache_1h: Option<i64>,
    /// Whether `cache_creation_input_tokens` was reported.
    creation_reported: bool,
    output: i64,
    seen: bool,
}

// === impl MessagesStreamUsage ===

impl MessagesStreamUsage {
    /// Reads the usage of one event, if it has any.
    pub fn observe_event(&mut self, event: &MessagesEvent<'_>) {
        if let Some(usage) = event.usage() {
            self.take(usage);
        }
    }

    /// Reads the usage of one parsed event, if it has any.
    pub fn observe(&mut self, event: &Value) {
        let usage = match event.get("type").and_then(Value::as_str) {
            Some("message_start") => event.pointer("/message/usage"),
            Some("message_delta") => event.get("usage"),
            _ => None,
        };
        if let Some(usage) = usage {
            self.take(usage);
        }
    }

    /// Takes the counts of an event's `usage`, if it is an object.
    fn take(&mut self, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        self.seen = true;
        let count = |key: &str| usage.get(key).and_then(Value::as_i64);
        if let Some(n) = count("input_tokens") {
            self.input = n;
        }
        if let Some(n) = count("cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = count("cache_creation_input_tokens") {
            self.cache_creation = n;
            self.creation_reported = true;
        }
        let split = |key: &str| usage.pointer(&format!("/cache_creation/{key}")).and_then(Value::as_i64);
        if let Some(n) = split("ephemeral_5m_input_tokens") {
            self.cache_5m = Some(n);
        }
        if let Some(n) = split("ephemeral_1h_input_tokens") {
            self.cache_1h = Some(n);
        }
        if let Some(n) = count("output_tokens") {
            self.output = n;
        }
    }

    /// The usage so far; `None` until an event reported any.
    pub fn usage(&self) -> Option<Usage> {
        // The total, when reported, is what the prompt counts; the split
        // only says how long its parts are kept.
        let writes = if self.creation_reported {
            self.cache_creation
        } else {
            self.cache_5m.unwrap_or(0).saturating_add(self.cache_1h.unwrap_or(0))
        };
        let write_1h = self.cache_1h.unwrap_or(0).clamp(0, writes.max(0));
        self.seen.then(|| Usage {
            prompt_tokens: self.input.saturating_add(self.cache_read).saturating_add(writes),
            completion_tokens: self.output,
            cached_tokens: self.cache_read,
            cache_write_5m_tokens: writes - write_1h,
            cache_write_1h_tokens: write_1h,
            reasoning_tokens: 0,
            ..Usage::default()
        })
    }
}

/// The usage of a non-streamed messages response body, if it reports any;
/// the rest of the body (the answer) is skipped, not parsed into a value.
pub fn messages_body_usage(body: &[u8]) -> Option<Usage> {
    from_messages(&super::event::usage_field(body)?)
}

/// A messages `usage` object as the gateway's usage.
pub fn from_messages(usage: &Value) -> Option<Usage> {
    let mut acc = MessagesStreamUsage::default();
    acc.observe(&json!({ "type": "message_delta", "usage": usage }));
    acc.usage()
}

/// A chat `usage` object as the gateway's usage: [`usage_of`], with an
/// object that counts nothing taken as all zeros.
pub fn from_chat(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    Some(UsageJson::deserialize(usage).map(|u| u.usage()).unwrap_or_default())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_bodies_and_chunks() {
        let body = br#"{"id":"x","usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        assert_eq!(
            response_usage(body),
            Some(Usage { prompt_tokens: 10, completion_tokens: 5, cached_tokens: 4, ..Usage::default() })
        );
        assert_eq!(response_usage(br#"{"usage":null}"#), None);
        assert_eq!(response_usage(b"not json"), None);
        let extra = br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
        assert_eq!(chunk_usage(extra).map(|(_, only)| only), Some(true));
        let inline = br#"{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1}}"#;
        assert_eq!(chunk_usage(inline).map(|(_, only)| only), Some(false));
        assert_eq!(chunk_usage(br#"{"choices":[{}],"usage":null}"#), None);
    }
    #[test]
    fn usage_is_read_in_both_namings() {
        let chat = serde_json::json!({"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}});
        assert_eq!(
            usage_of(&chat),
            Some(Usage { prompt_tokens: 5, completion_tokens: 2, cached_tokens: 1, ..Usage::default() })
        );
        let responses =
            serde_json::json!({"input_tokens": 9, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 3}});
        assert_eq!(
            usage_of(&responses),
            Some(Usage { prompt_tokens: 9, completion_tokens: 4, cached_tokens: 3, ..Usage::default() })
        );
        assert_eq!(usage_of(&serde_json::json!({"type": "duration", "seconds": 3})), None);
    }

    #[test]
    fn messages_prompt_parts_add_up_to_the_prompt() {
        let usage = json!({
            "input_tokens": 5, "output_tokens": 9,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20
        });
        let usage = from_messages(&usage);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 125,
                completion_tokens: 9,
                cached_tokens: 100,
                cache_write_5m_tokens: 20,
                ..Usage::default()
            })
        );
        assert_eq!(
            messages_body_usage(br#"{"usage":{"input_tokens":3,"output_tokens":4}}"#).map(|u| u.prompt_tokens),
            Some(3)
        );
        assert_eq!(messages_body_usage(br#"{"id":"msg"}"#), None);
    }

    #[test]
    fn openai_reasoning_and_cache_counts_are_parts_of_their_wholes() {
        let chat = json!({
            "prompt_tokens": 50, "completion_tokens": 30,
            "prompt_tokens_details": { "cached_tokens": 20, "cache_write_tokens": 10 },
            "completion_tokens_details": { "reasoning_tokens": 25 }
        });
        let expected = Usage {
            prompt_tokens: 50,
            completion_tokens: 30,
            cached_tokens: 20,
            cache_write_5m_tokens: 10,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 25,
            ..Usage::default()
        };
        assert_eq!(usage_of(&chat), Some(expected));
        assert_eq!(from_chat(&chat), Some(expected));
        let chunk = json!({ "choices": [], "usage": chat }).to_string();
        assert_eq!(chunk_usage(chunk.as_bytes()), Some((expected, true)));
        let responses = json!({
            "input_tokens": 50, "output_tokens": 30,
            "input_tokens_details": { "cached_tokens": 20 },
            "output_tokens_details": { "reasoning_tokens": 25 }
        });
        let completed = json!({ "type": "response.completed", "response": { "usage": responses } }).to_string();
        let responses_usage = Usage { cache_write_5m_tokens: 0, ..expected };
        assert_eq!(crate::meter::event::TypedEvent::read(completed.as_bytes()).usage(), Some(responses_usage));
        let body = json!({ "usage": responses }).to_string();
        assert_eq!(response_usage(body.as_bytes()), Some(responses_usage));
    }

    #[test]
    fn messages_cache_writes_split_by_how_long_they_are_kept() {
        let split = json!({
            "input_tokens": 5, "output_tokens": 9,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 30,
            "cache_creation": { "ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20 }
        });
        let usage = from_messages(&split).unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens),
            (135, 100, 10, 20)
        );
        // The split alone still counts towards the prompt.
        let split_only = json!({ "input_tokens": 5, "cache_creation": { "ephemeral_1h_input_tokens": 7 } });
        let usage = from_messages(&split_only).unwrap();
        assert_eq!((usage.prompt_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens), (12, 0, 7));
        // A stream reports the writes at its start.
        let mut acc = MessagesStreamUsage::default();
        acc.observe(&json!({ "type": "message_start", "message": { "usage": split } }));
        acc.observe(&json!({ "type": "message_delta", "usage": { "output_tokens": 40 } }));
        let usage = acc.usage().unwrap();
        assert_eq!((usage.prompt_tokens, usage.cache_write_1h_tokens, usage.completion_tokens), (135, 20, 40));
    }

    #[test]
    fn stream_usage_takes_prompt_from_start_and_last_output_from_deltas() {
        let mut acc = MessagesStreamUsage::default();
        assert_eq!(acc.usage(), None);
        acc.observe_event(&MessagesEvent::read(br#"{"type":"ping"}"#));
        assert_eq!(acc.usage(), None);
        acc.observe_event(&MessagesEvent::read(
            br#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}"#,
        ));
        acc.observe_event(&MessagesEvent::read(br#"{"type":"message_delta","delta":{},"usage":{"output_tokens":6}}"#));
        acc.observe_event(&MessagesEvent::read(br#"{"type":"message_delta","delta":{},"usage":{"output_tokens":8}}"#));
        assert_eq!(
            acc.usage(),
            Some(Usage { prompt_tokens: 14, completion_tokens: 8, cached_tokens: 4, ..Usage::default() })
        );
    }
}
