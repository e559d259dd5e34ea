//! The chat chunk most of a stream is made of, recognised without building
//! a value of it: its first choice's delta adds non-empty `content` text,
//! and nothing else in it is anything a translator acts on (no `error`, no
//! `usage`, no reasoning, no tool calls, no finish reason). A name given
//! twice counts as its last, as in a parsed value; a chunk naming any of
//! those fields, even as null where null would not count, reads as not one,
//! and the caller parses it whole.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
};

use crate::json_body::{MaybeStr, skip_kinds};

/// The text of a text-only chunk; `None` for any other.
pub(super) struct TextChunk<'a>(pub(super) Option<Cow<'a, str>>);

/// The first choice of `choices`, if it only adds text.
struct Choices<'a>(Option<Cow<'a, str>>);

/// A choice that only adds text: its delta's, with no finish reason.
struct Choice<'a>(Option<Cow<'a, str>>);

/// A delta that only adds text.
struct Delta<'a>(Option<Cow<'a, str>>);

// === impl TextChunk ===

impl<'a> TextChunk<'a> {
    /// Reads one chunk's `data`.
    pub(super) fn read(data: &'a [u8]) -> Option<Cow<'a, str>> {
        serde_json::from_slice::<TextChunk<'a>>(data).ok()?.0
    }
}

/// Whether a value read as `Option<IgnoredAny>` was there and not null.
fn given(value: Option<IgnoredAny>) -> bool {
    value.is_some()
}

impl<'de> Deserialize<'de> for TextChunk<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChunkVisitor;
        impl<'de> Visitor<'de> for ChunkVisitor {
            type Value = TextChunk<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a chat chunk")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut text, mut other) = (None, false);
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "choices" => text = map.next_value::<Choices<'de>>()?.0,
                        "usage" => other |= given(map.next_value()?),
                        "error" => {
                            map.next_value::<IgnoredAny>()?;
                            other = true;
                        }
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(TextChunk(text.filter(|_| !other)))
            }
            skip_kinds!('de, TextChunk(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(ChunkVisitor)
    }
}

// === impl Choices ===

impl<'de> Deserialize<'de> for Choices<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChoicesVisitor;
        impl<'de> Visitor<'de> for ChoicesVisitor {
            type Value = Choices<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                // Only the first choice is translated; the rest are skipped.
                let first = seq.next_element::<Choice<'de>>()?.and_then(|c| c.0);
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Choices(first))
            }
            skip_kinds!('de, Choices(None); map, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(ChoicesVisitor)
    }
}

// === impl Choice ===

impl<'de> Deserialize<'de> for Choice<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChoiceVisitor;
        impl<'de> Visitor<'de> for ChoiceVisitor {
            type Value = Choice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a choice")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut text, mut other) = (None, false);
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "delta" => text = map.next_value::<Delta<'de>>()?.0,
                        "finish_reason" => other |= given(map.next_value()?),
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(Choice(text.filter(|_| !other)))
            }
            skip_kinds!('de, Choice(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(ChoiceVisitor)
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
                let (mut text, mut other) = (None, false);
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "content" => text = map.next_value::<MaybeStr<'de>>()?.0,
                        // Reasoning counts when it is a non-empty string.
                        "reasoning_content" | "reasoning" => {
                            other |= map.next_value::<MaybeStr<'de>>()?.0.is_some_and(|t| !t.is_empty());
                        }
                        "tool_calls" => other |= given(map.next_value()?),
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(Delta(text.filter(|t| !t.is_empty() && !other)))
            }
            skip_kinds!('de, Delta(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(DeltaVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(data: &str) -> Option<String> {
        TextChunk::read(data.as_bytes()).map(Cow::into_owned)
    }

    #[test]
    fn only_a_chunk_that_just_adds_text_is_one() {
        let plain = r#"{"id":"c","choices":[{"index":0,"delta":{"content":"h\u00e9","reasoning_content":null,"tool_calls":null},"finish_reason":null},{"x":1}],"usage":null}"#;
        assert_eq!(text(plain).as_deref(), Some("hé"));
        assert_eq!(text(r#"{"choices":[{"delta":{"content":"a","reasoning":""}}]}"#).as_deref(), Some("a"));
        // The last of a name given twice, as a parsed value has it.
        assert_eq!(text(r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#).as_deref(), Some("b"));
        assert_eq!(text(r#"{"choices":[{"delta":{"content":"a"},"delta":{"content":"b"}}]}"#).as_deref(), Some("b"));
        let not = [
            r#"{"choices":[{"delta":{"content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{"content":"a","reasoning_content":"r"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a","tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"choices":[]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"usage":{}}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"error":null}"#,
            r#"{"choices":[{"delta":{"content":1}}]}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":{"delta":{"content":"a"}}}"#,
            r#"[{"choices":[{"delta":{"content":"a"}}]}]"#,
            r#"{"choices":[{"delta":{"content":"a"}}]"#,
        ];
        for data in not {
            assert_eq!(text(data), None, "{data}");
        }
    }
}
