//! What metering reads of one stream event: the messages dialect's events
//! (`MessagesEvent`) and the typed events of the responses API and its kin
//! (`TypedEvent`). Each is read in one pass over the event's data, keeping
//! only its usage and its answer text and skipping the rest (a completed
//! response repeats the whole answer), where parsing it into a value built
//! all of it, once for the usage and again for the text. A name given
//! twice counts as its last, as in a parsed value; data that is not a JSON
//! object reads as an event that reports nothing.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, Visitor},
};
use serde_json::Value;

use super::answer::usage_of;
use crate::{
    json_body::{MaybeStr, skip_kinds},
    pricing::Usage,
};

/// One event of a messages stream: its `type`, the usage it reports
/// (`message.usage` at the start, `usage` in a `message_delta`), and a
/// content delta's text.
#[derive(Debug, Default)]
pub struct MessagesEvent<'a> {
    kind: Option<Cow<'a, str>>,
    /// `message.usage`.
    message_usage: Option<Value>,
    usage: Option<Value>,
    /// `index`, the content block's.
    index: Option<Value>,
    delta: Delta<'a>,
}

/// One typed event (`response.output_text.delta`, `response.completed`…):
/// the usage it reports (`response.usage`, or a top-level `usage`) and its
/// `delta` text.
#[derive(Debug, Default)]
pub struct TypedEvent<'a> {
    /// `response.usage`.
    response_usage: Option<Value>,
    usage: Option<Value>,
    delta: Option<Cow<'a, str>>,
}

/// The `usage` of an object; `None` for an object without one or a value
/// that is not an object.
struct UsageField(Option<Value>);

/// What a messages event's `delta` says, when it is an object: its `type`,
/// and `text`, `partial_json` and `thinking` (each `Some(None)` when there
/// but not a string).
#[derive(Debug, Default)]
struct Delta<'a> {
    kind: Option<Cow<'a, str>>,
    text: Option<Option<Cow<'a, str>>>,
    partial_json: Option<Option<Cow<'a, str>>>,
    thinking: Option<Cow<'a, str>>,
}

/// The `usage` of the JSON object `data`, if it is one and has one.
pub fn usage_field(data: &[u8]) -> Option<Value> {
    serde_json::from_slice::<UsageField>(data).ok()?.0
}

/// Whether `data` holds `needle` anywhere.
fn holds(data: &[u8], needle: &[u8]) -> bool {
    data.windows(needle.len()).any(|w| w == needle)
}

// === impl MessagesEvent ===

impl<'a> MessagesEvent<'a> {
    /// Reads an event's `data`.
    pub fn read(data: &'a [u8]) -> MessagesEvent<'a> {
        serde_json::from_slice(data).unwrap_or_default()
    }

    /// The event's `type`, if it names one.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// The usage object this event reports, if its type reports one.
    pub fn usage(&self) -> Option<&Value> {
        match self.kind.as_deref() {
            Some("message_start") => self.message_usage.as_ref(),
            Some("message_delta") => self.usage.as_ref(),
            _ => None,
        }
    }

    /// The answer text this event carries: a content block delta's text or
    /// tool arguments. `data` is the event's, to tell a content delta.
    pub fn text(&self, data: &[u8]) -> Option<&str> {
        // As the parsed reading did: the delta of an event naming content:
        // its `text` when there, else its `partial_json`, when a string.
        let Delta { text, partial_json, .. } = &self.delta;
        let text = text.as_ref().map_or_else(|| partial_json.as_ref().and_then(|p| p.as_deref()), |t| t.as_deref());
        text.filter(|_| holds(data, b"content_block_delta"))
    }

    /// A content block delta of text (`text_delta`) or of thinking
    /// (`thinking_delta`): whether it is thinking, and its text, when that
    /// is a non-empty string. `None` for any other event.
    pub fn text_delta(&self) -> Option<(bool, &str)> {
        if self.kind.as_deref() != Some("content_block_delta") {
            return None;
        }
        let delta = &self.delta;
        let (thinking, text) = match delta.kind.as_deref() {
            Some("text_delta") => (false, delta.text.as_ref()?.as_deref()),
            Some("thinking_delta") => (true, delta.thinking.as_deref()),
            _ => return None,
        };
        text.filter(|t| !t.is_empty()).map(|t| (thinking, t))
    }

    /// A content block delta of tool arguments (`input_json_delta`): the
    /// block's index (0 when it names none) and the arguments, when they
    /// are a non-empty string. `None` for any other event.
    pub fn arguments_delta(&self) -> Option<(u64, &str)> {
        if self.kind.as_deref() != Some("content_block_delta") || self.delta.kind.as_deref() != Some("input_json_delta")
        {
            return None;
        }
        let arguments = self.delta.partial_json.as_ref()?.as_deref().filter(|a| !a.is_empty())?;
        Some((self.index.as_ref().and_then(Value::as_u64).unwrap_or(0), arguments))
    }
}

impl<'de> Deserialize<'de> for MessagesEvent<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EventVisitor;
        impl<'de> Visitor<'de> for EventVisitor {
            type Value = MessagesEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a messages event")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut event = MessagesEvent::default();
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "type" => event.kind = map.next_value::<MaybeStr<'de>>()?.0,
                        "message" => event.message_usage = map.next_value::<UsageField>()?.0,
                        "usage" => event.usage = Some(map.next_value()?),
                        "delta" => event.delta = map.next_value::<Delta<'de>>()?,
                        "index" => event.index = Some(map.next_value()?),
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(event)
            }
        }
        deserializer.deserialize_map(EventVisitor)
    }
}

// === impl TypedEvent ===

impl<'a> TypedEvent<'a> {
    /// Reads an event's `data`.
    pub fn read(data: &'a [u8]) -> TypedEvent<'a> {
        serde_json::from_slice(data).unwrap_or_default()
    }

    /// The usage this event reports: `response.usage` when that is an
    /// object, else a top-level `usage`.
    pub fn usage(&self) -> Option<Usage> {
        let response = self.response_usage.as_ref().filter(|u| u.is_object());
        response.or(self.usage.as_ref()).and_then(usage_of)
    }

    /// The answer text this event carries (`delta` of a `….delta` event,
    /// function-call arguments too). `data` is the event's.
    pub fn text(self, data: &[u8]) -> Option<Cow<'a, str>> {
        holds(data, b".delta").then_some(self.delta).flatten()
    }

    /// Whether a typed event ends the answer (`response.completed`,
    /// `response.failed`, `response.incomplete`).
    pub fn is_terminal(data: &[u8]) -> bool {
        holds(data, b"\"response.completed\"")
            || holds(data, b"\"response.failed\"")
            || holds(data, b"\"response.incomplete\"")
    }
}

impl<'de> Deserialize<'de> for TypedEvent<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EventVisitor;
        impl<'de> Visitor<'de> for EventVisitor {
            type Value = TypedEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a typed event")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut event = TypedEvent::default();
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "response" => event.response_usage = map.next_value::<UsageField>()?.0,
                        "usage" => event.usage = Some(map.next_value()?),
                        "delta" => event.delta = map.next_value::<MaybeStr<'de>>()?.0,
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(event)
            }
        }
        deserializer.deserialize_map(EventVisitor)
    }
}

// === impl UsageField ===

impl<'de> Deserialize<'de> for UsageField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UsageVisitor;
        impl<'de> Visitor<'de> for UsageVisitor {
            type Value = UsageField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object with usage")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut usage = None;
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "usage" => usage = Some(map.next_value()?),
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(UsageField(usage))
            }
            skip_kinds!('de, UsageField(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(UsageVisitor)
    }
}

// === impl Delta ===

impl<'de> Deserialize<'de> for Delta<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DeltaVisitor;
        impl<'de> Visitor<'de> for DeltaVisitor {
            type Value = Delta<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a delta")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut delta = Delta::default();
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "type" => delta.kind = map.next_value::<MaybeStr<'de>>()?.0,
                        "text" => delta.text = Some(map.next_value::<MaybeStr<'de>>()?.0),
                        "partial_json" => delta.partial_json = Some(map.next_value::<MaybeStr<'de>>()?.0),
                        "thinking" => delta.thinking = map.next_value::<MaybeStr<'de>>()?.0,
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(delta)
            }
            skip_kinds!('de, Delta::default(); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(DeltaVisitor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub(crate) mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::meter::answer::MessagesStreamUsage;

    #[test]
    fn a_content_delta_gives_its_text_or_its_arguments() {
        let text = |data: &[u8]| MessagesEvent::read(data).text(data).map(str::to_owned);
        let delta = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"h\u00e9"}}"#;
        assert_eq!(text(delta).as_deref(), Some("hé"));
        let arguments = br#"{"type":"content_block_delta","delta":{"partial_json":"{\"a\""}}"#;
        assert_eq!(text(arguments).as_deref(), Some(r#"{"a""#));
        assert_eq!(text(br#"{"type":"content_block_delta","delta":{"text":1,"partial_json":"x"}}"#), None);
        assert_eq!(text(br#"{"type":"message_delta","delta":{"text":"x"}}"#), None);
        assert_eq!(text(b"content_block_delta"), None);
    }

    #[test]
    fn a_completed_response_gives_its_usage_and_a_delta_its_text() {
        let completed = br#"{"type":"response.completed","response":{"output":[{"x":1}],"usage":{"input_tokens":1,"output_tokens":2}}}"#;
        assert_eq!(TypedEvent::read(completed).usage().map(|u| u.completion_tokens), Some(2));
        assert!(TypedEvent::is_terminal(completed));
        let delta = br#"{"type":"response.output_text.delta","delta":"usage"}"#;
        assert_eq!(TypedEvent::read(delta).usage(), None);
        assert_eq!(TypedEvent::read(delta).text(delta).as_deref(), Some("usage"));
        assert!(!TypedEvent::is_terminal(delta));
    }

    /// A JSON object written out by hand (names may repeat, in any order),
    /// with names from `names` and values from `value`.
    fn object(names: &'static [&'static str], value: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
        prop::collection::vec((prop::sample::select(names), value), 0..6).prop_map(|fields| {
            let fields: Vec<String> =
                fields.iter().map(|(name, value)| format!("{}:{value}", Value::from(*name))).collect();
            format!("{{{}}}", fields.join(","))
        })
    }

    /// A stream event with the names metering reads, holding counts,
    /// deltas (with text, arguments, both or neither), objects with usage,
    /// or anything; and the events that report usage, as upstreams send
    /// them.
    pub(crate) fn event() -> impl Strategy<Value = Vec<u8>> {
        const NAMES: &[&str] = &["type", "message", "response", "usage", "delta", "text", "partial_json", "index"];
        const KINDS: &[&str] =
            &["message_start", "message_delta", "content_block_delta", "response.output_text.delta", "ping"];
        const COUNTS: &[&str] = &["input_tokens", "output_tokens", "cache_read_input_tokens", "prompt_tokens"];
        const DELTA: &[&str] = &["type", "text", "partial_json"];
        let anything = || crate::fuzz::json().prop_map(|value| value.to_string());
        let counts = || object(COUNTS, any::<i64>().prop_map(|n| n.to_string()));
        let text = prop_oneof![".{0,12}".prop_map(|text| Value::from(text).to_string()), anything()];
        // What the names metering reads hold, often enough that an event
        // names several of them, some twice.
        let read = || {
            prop_oneof![
                prop::sample::select(KINDS).prop_map(|kind| Value::from(kind).to_string()),
                counts(),
                counts().prop_map(|usage| format!(r#"{{"id":"m","usage":{usage}}}"#)),
                Just(r#"{"id":"m"}"#.to_owned()),
                object(DELTA, text.clone()),
            ]
        };
        let value = prop_oneof![anything(), text.clone(), read()];
        let start =
            counts().prop_map(|usage| format!(r#"{{"type":"message_start","message":{{"id":"m","usage":{usage}}}}}"#));
        let end = counts().prop_map(|usage| format!(r#"{{"type":"message_delta","delta":{{}},"usage":{usage}}}"#));
        let completed =
            counts().prop_map(|usage| format!(r#"{{"type":"response.completed","response":{{"usage":{usage}}}}}"#));
        const READ: &[&str] = &["type", "message", "response", "usage", "delta"];
        prop_oneof![3 => object(NAMES, value), 3 => object(READ, read()), 1 => start, 1 => end, 1 => completed]
            .prop_map(String::into_bytes)
    }

    /// A stream of `event()`s (some with a name written with a `\u`
    /// escape), framed as SSE in any line-ending style, between comments
    /// and a `message_stop`, cut into chunks anywhere.
    pub(crate) fn event_stream() -> impl Strategy<Value = Vec<Vec<u8>>> {
        let escaped = event()
            .prop_map(|data| String::from_utf8_lossy(&data).replacen("\"usage\"", "\"\\u0075sage\"", 1).into_bytes());
        let data = prop_oneof![6 => event(), 1 => escaped, 1 => Just(br#"{"type":"message_stop"}"#.to_vec())];
        let ending = prop::sample::select(&["\n", "\r\n", "\r"][..]);
        let framed = (data, ending, any::<bool>()).prop_map(|(data, end, named)| {
            let mut event = Vec::new();
            if named {
                event.extend_from_slice(format!("event: e{end}").as_bytes());
            }
            event.extend_from_slice(b"data: ");
            event.extend_from_slice(&data);
            event.extend_from_slice(format!("{end}{end}").as_bytes());
            event
        });
        let comment = Just(b": ping\n\n".to_vec());
        let stream = prop::collection::vec(prop_oneof![8 => framed, 1 => comment], 0..16).prop_map(|e| e.concat());
        (stream, prop::collection::vec(any::<prop::sample::Index>(), 0..8)).prop_map(|(bytes, cuts)| {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                chunks.push(bytes[from..cut].to_vec());
                from = cut;
            }
            chunks
        })
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn an_event_read_in_one_pass_gives_what_the_parsed_event_gives(data in prop_oneof![event(), crate::fuzz::body()]) {
            // The readings these replaced: the event parsed into a value,
            // once for its usage and once for its text.
            if let Ok(parsed) = serde_json::from_slice::<Value>(&data) {
                let mut expected = MessagesStreamUsage::default();
                expected.observe(&parsed);
                let delta = holds(&data, b"content_block_delta").then(|| parsed.get("delta")).flatten();
                let text = delta.and_then(|d| d.get("text").or_else(|| d.get("partial_json"))).and_then(Value::as_str);
                let mut usage = MessagesStreamUsage::default();
                let event = MessagesEvent::read(&data);
                usage.observe_event(&event);
                prop_assert_eq!(usage.usage(), expected.usage());
                prop_assert_eq!(event.text(&data), text);

                let response = parsed.get("response").and_then(|r| r.get("usage")).filter(|u| u.is_object());
                let expected = response.or_else(|| parsed.get("usage")).and_then(usage_of);
                let text = holds(&data, b".delta").then(|| parsed.get("delta")).flatten().and_then(Value::as_str);
                let event = TypedEvent::read(&data);
                prop_assert_eq!(event.usage(), expected);
                let usage = usage_field(&data);
                prop_assert_eq!(usage.as_ref(), parsed.get("usage"));
                let read = event.text(&data);
                prop_assert_eq!(read.as_deref(), text);
            }
        }
    }

    #[test]
    fn a_name_given_twice_counts_as_its_last() {
        let twice = br#"{"type":"response.completed","response":{"usage":{"input_tokens":1}},"response":{"id":"r"}}"#;
        assert_eq!(TypedEvent::read(twice).usage(), None);
        let twice = br#"{"type":"message_delta","usage":{"output_tokens":2},"type":"ping"}"#;
        assert_eq!(MessagesEvent::read(twice).usage(), None);
        let twice = br#"{"type":"message_start","message":{"usage":{"input_tokens":3},"usage":{"input_tokens":4}}}"#;
        assert_eq!(MessagesEvent::read(twice).usage(), Some(&json!({ "input_tokens": 4 })));
        let twice = br#"{"type":"content_block_delta","delta":{"text":"a","text":"b"},"delta":{"partial_json":"c"}}"#;
        assert_eq!(MessagesEvent::read(twice).text(twice), Some("c"));
    }

    #[test]
    fn usage_objects_anywhere_else_are_not_read() {
        let event = json!({ "type": "message_start", "message": { "content": [{ "usage": { "input_tokens": 1 } }] } });
        let data = event.to_string();
        assert_eq!(MessagesEvent::read(data.as_bytes()).usage(), None);
    }
}
