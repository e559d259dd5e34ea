//! The chat chunks most of a stream is made of, recognised without building
//! a value of them: its first choice's delta adds non-empty `content` text,
//! or arguments to one tool call (its only `tool_calls` entry), and nothing
//! else in it is anything a translator acts on (no `error`, no `usage`, no
//! reasoning, no finish reason). A name given twice counts as its last, as
//! in a parsed value; a chunk naming any of those fields, even as null where
//! null would not count, reads as not one, and the caller parses it whole.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
};

use super::{super::lenient::Key, text_scan};
use crate::json_body::{MaybeStr, skip_kinds};

/// What a chunk read lean adds; `None` for any other chunk.
pub(super) struct TextChunk<'a>(Option<Lean<'a>>);

/// What a lean chunk adds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Lean<'a> {
    /// Answer text (`content`).
    Text(Cow<'a, str>),
    /// Arguments of the tool call numbered `call` (its `index`).
    Arguments { call: u64, arguments: Cow<'a, str> },
}

/// The first choice of `choices`, if it is lean.
struct Choices<'a>(Option<Lean<'a>>);

/// A lean choice: its delta's, with no finish reason.
struct Choice<'a>(Option<Lean<'a>>);

/// A lean delta.
struct Delta<'a>(Option<Lean<'a>>);

/// A delta's `tool_calls`.
enum ToolCalls<'a> {
    Null,
    /// One call, with non-empty string arguments: its number and them.
    One(u64, Cow<'a, str>),
    /// None, several, or one without arguments to pass on.
    Other,
}

/// One `tool_calls` entry's number and its arguments, when a non-empty
/// string.
struct Call<'a>(Option<(u64, Cow<'a, str>)>);

/// A call's `function.arguments`, when a string.
struct Function<'a>(Option<Cow<'a, str>>);

// === impl TextChunk ===

impl<'a> TextChunk<'a> {
    /// Reads one chunk's `data`.
    pub(super) fn read(data: &'a [u8]) -> Option<Lean<'a>> {
        // Most chunks are plain text, which a scan of the bytes finds
        // sooner; where it is unsure the chunk is deserialized.
        if let Some(text) = text_scan::text(data) {
            return Some(Lean::Text(text));
        }
        Self::deserialized(data)
    }

    /// `read` by deserializing the chunk.
    pub(super) fn deserialized(data: &'a [u8]) -> Option<Lean<'a>> {
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
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    match &*name {
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
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    match &*name {
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
                let (mut text, mut calls, mut other) = (None, ToolCalls::Null, false);
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    match &*name {
                        "content" => text = map.next_value::<MaybeStr<'de>>()?.0,
                        // Reasoning counts when it is a non-empty string.
                        "reasoning_content" | "reasoning" => {
                            other |= map.next_value::<MaybeStr<'de>>()?.0.is_some_and(|t| !t.is_empty());
                        }
                        "tool_calls" => calls = map.next_value()?,
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                let lean = match (text.filter(|t| !t.is_empty()), calls) {
                    (Some(text), ToolCalls::Null) => Some(Lean::Text(text)),
                    (None, ToolCalls::One(call, arguments)) => Some(Lean::Arguments { call, arguments }),
                    _ => None,
                };
                Ok(Delta(lean.filter(|_| !other)))
            }
            skip_kinds!('de, Delta(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(DeltaVisitor)
    }
}

// === impl ToolCalls ===

impl<'de> Deserialize<'de> for ToolCalls<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CallsVisitor;
        impl<'de> Visitor<'de> for CallsVisitor {
            type Value = ToolCalls<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("tool calls")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Call<'de>>()?.and_then(|c| c.0);
                let more = seq.next_element::<IgnoredAny>()?.is_some();
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(match first {
                    Some((call, arguments)) if !more => ToolCalls::One(call, arguments),
                    _ => ToolCalls::Other,
                })
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(ToolCalls::Null)
            }
            skip_kinds!('de, ToolCalls::Other; map, str, bool, numbers);
        }
        deserializer.deserialize_any(CallsVisitor)
    }
}

// === impl Call ===

impl<'de> Deserialize<'de> for Call<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CallVisitor;
        impl<'de> Visitor<'de> for CallVisitor {
            type Value = Call<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tool call")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut index, mut arguments) = (None, None);
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    match &*name {
                        "index" => index = Some(map.next_value::<serde_json::Value>()?),
                        "function" => arguments = map.next_value::<Function<'de>>()?.0,
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                // As a parsed value is read: an index that is not a count
                // is the call's place, the first.
                let call = index.as_ref().and_then(serde_json::Value::as_u64).unwrap_or(0);
                Ok(Call(arguments.filter(|a| !a.is_empty()).map(|a| (call, a))))
            }
            skip_kinds!('de, Call(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(CallVisitor)
    }
}

// === impl Function ===

impl<'de> Deserialize<'de> for Function<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FunctionVisitor;
        impl<'de> Visitor<'de> for FunctionVisitor {
            type Value = Function<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a function")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut arguments = None;
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    match &*name {
                        "arguments" => arguments = map.next_value::<MaybeStr<'de>>()?.0,
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(Function(arguments))
            }
            skip_kinds!('de, Function(None); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(FunctionVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(data: &str) -> Option<String> {
        match TextChunk::read(data.as_bytes()) {
            Some(Lean::Text(text)) => Some(text.into_owned()),
            _ => None,
        }
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

    #[test]
    fn a_chunk_of_one_tool_calls_arguments_is_one() {
        fn arguments(data: &str) -> Option<Lean<'_>> {
            TextChunk::read(data.as_bytes())
        }
        let one = r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"t","function":{"name":"f","arguments":"{\"a"}}]}}]}"#;
        assert_eq!(arguments(one), Some(Lean::Arguments { call: 1, arguments: Cow::Borrowed(r#"{"a"#) }));
        let unnumbered = r#"{"choices":[{"delta":{"content":"","tool_calls":[{"function":{"arguments":"x"}}]}}]}"#;
        assert_eq!(arguments(unnumbered), Some(Lean::Arguments { call: 0, arguments: Cow::Borrowed("x") }));
        let not = [
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"x"}},{"function":{"arguments":"y"}}]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a","tool_calls":[{"function":{"arguments":"x"}}]}}]}"#,
        ];
        for data in not {
            assert_eq!(arguments(data), None, "{data}");
        }
    }
}
