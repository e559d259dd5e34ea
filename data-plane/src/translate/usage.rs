//! Usage in the messages dialect, read into the gateway's [`Usage`] and
//! written back out. The messages API counts prompt tokens in three parts
//! (`input_tokens` excludes both cache counts); the gateway, like the chat
//! dialect, counts the whole prompt in `prompt_tokens` with the cache hits
//! as a part of it. Cache writes are billed as ordinary prompt tokens.

use serde_json::{Value, json};

use crate::pricing::Usage;

/// Accumulates usage over a messages event stream: `message_start` carries
/// the prompt counts, each `message_delta` the cumulative output count (and,
/// from newer upstreams, final prompt counts too).
#[derive(Debug, Default, Clone)]
pub struct MessagesStreamUsage {
    input: i64,
    cache_read: i64,
    cache_creation: i64,
    output: i64,
    seen: bool,
}

// === impl MessagesStreamUsage ===

impl MessagesStreamUsage {
    /// Reads the usage of one event's data, if it is JSON and has any.
    pub fn observe_data(&mut self, data: &[u8]) {
        if let Ok(event) = serde_json::from_slice::<Value>(data) {
            self.observe(&event);
        }
    }

    /// Reads the usage of one parsed event, if it has any.
    pub fn observe(&mut self, event: &Value) {
        let usage = match event.get("type").and_then(Value::as_str) {
            Some("message_start") => event.pointer("/message/usage"),
            Some("message_delta") => event.get("usage"),
            _ => None,
        };
        let Some(usage @ Value::Object(_)) = usage else { return };
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
        }
        if let Some(n) = count("output_tokens") {
            self.output = n;
        }
    }

    /// The usage so far; `None` until an event reported any.
    pub fn usage(&self) -> Option<Usage> {
        self.seen.then(|| Usage {
            prompt_tokens: self.input + self.cache_read + self.cache_creation,
            completion_tokens: self.output,
            cached_tokens: self.cache_read,
        })
    }
}

/// The usage of a non-streamed messages response body, if it reports any.
pub fn messages_body_usage(body: &[u8]) -> Option<Usage> {
    let body = serde_json::from_slice::<Value>(body).ok()?;
    from_messages(body.get("usage")?)
}

/// A messages `usage` object as the gateway's usage.
pub(super) fn from_messages(usage: &Value) -> Option<Usage> {
    let mut acc = MessagesStreamUsage::default();
    acc.observe(&json!({ "type": "message_delta", "usage": usage }));
    acc.usage()
}

/// A chat `usage` object as the gateway's usage.
pub(super) fn from_chat(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
    Some(Usage {
        prompt_tokens: count("/prompt_tokens"),
        completion_tokens: count("/completion_tokens"),
        cached_tokens: count("/prompt_tokens_details/cached_tokens"),
    })
}

/// The gateway's usage as a messages `usage` object. Chat upstreams do not
/// report cache writes, so `cache_creation_input_tokens` is always 0.
pub(super) fn to_messages(usage: &Usage) -> Value {
    let cached = usage.cached_tokens.clamp(0, usage.prompt_tokens.max(0));
    json!({
        "input_tokens": usage.prompt_tokens.max(0) - cached,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    })
}

/// The gateway's usage as a chat `usage` object.
pub(super) fn to_chat(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": usage.cached_tokens },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_prompt_parts_add_up_to_the_prompt() {
        let usage = json!({
            "input_tokens": 5, "output_tokens": 9,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20
        });
        let usage = from_messages(&usage);
        assert_eq!(usage, Some(Usage { prompt_tokens: 125, completion_tokens: 9, cached_tokens: 100 }));
        assert_eq!(
            messages_body_usage(br#"{"usage":{"input_tokens":3,"output_tokens":4}}"#).map(|u| u.prompt_tokens),
            Some(3)
        );
        assert_eq!(messages_body_usage(br#"{"id":"msg"}"#), None);
    }

    #[test]
    fn stream_usage_takes_prompt_from_start_and_last_output_from_deltas() {
        let mut acc = MessagesStreamUsage::default();
        assert_eq!(acc.usage(), None);
        acc.observe_data(br#"{"type":"ping"}"#);
        assert_eq!(acc.usage(), None);
        acc.observe_data(
            br#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}"#,
        );
        acc.observe_data(br#"{"type":"message_delta","delta":{},"usage":{"output_tokens":6}}"#);
        acc.observe_data(br#"{"type":"message_delta","delta":{},"usage":{"output_tokens":8}}"#);
        assert_eq!(acc.usage(), Some(Usage { prompt_tokens: 14, completion_tokens: 8, cached_tokens: 4 }));
    }

    #[test]
    fn chat_usage_round_trips_through_the_messages_shape() {
        let usage = Usage { prompt_tokens: 30, completion_tokens: 7, cached_tokens: 12 };
        assert_eq!(from_messages(&to_messages(&usage)), Some(usage));
        assert_eq!(from_chat(&to_chat(&usage)), Some(usage));
        assert_eq!(from_chat(&Value::Null), None);
    }
}
