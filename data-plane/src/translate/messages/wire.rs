//! A messages request as its decoder reads it: every field the decoder
//! acts on, read leniently (`lenient`), strings borrowed from the body.
//! The same view deserializes from the raw body, building no `Value` but
//! for the opaque parts the form keeps whole (schemas, tool inputs, fields
//! it does not know), or from a parsed `Value`, with the same result: the
//! decoder has one reading whichever it is given.

use std::{borrow::Cow, fmt, marker::PhantomData};

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, Visitor},
};
use serde_json::{Map, Value};

use super::super::lenient::{Bool, Field, Float, Given, Int, Json, Key, List, Meaningful, Object, Str};
use crate::json_body::skip_kinds;

/// A request body: its fields, or `None` when it is not a JSON object.
pub(super) struct Body<'a>(pub Option<Request<'a>>);

/// The fields of a request body.
#[derive(Default)]
pub(super) struct Request<'a> {
    pub model: Str<'a>,
    pub system: Field<Content<'a>>,
    pub messages: List<Object<Turn<'a>>>,
    pub tools: List<Object<ToolDef<'a>>>,
    pub tool_choice: Field<Object<Choice<'a>>>,
    pub max_tokens: Int,
    pub temperature: Float,
    pub top_p: Float,
    pub top_k: Int,
    pub stop_sequences: List<Str<'a>>,
    pub stream: Bool,
    pub metadata: Object<Metadata<'a>>,
    pub thinking: Thinking<'a>,
    /// Every other field, whole.
    pub extra: Map<String, Value>,
}

/// A message's or the system prompt's `content`: a string, blocks, or
/// anything else.
pub(super) enum Content<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
    Other,
}

/// A conversation turn.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct Turn<'a> {
    #[serde(borrow)]
    pub role: Str<'a>,
    #[serde(borrow)]
    pub content: Field<Content<'a>>,
    pub cache_control: Given,
}

/// A content block (every field empty for an entry that is not an
/// object).
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct Block<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow)]
    pub text: Str<'a>,
    pub citations: Meaningful,
    #[serde(borrow)]
    pub cache_control: Object<CacheControl<'a>>,
    #[serde(borrow)]
    pub source: Object<Source<'a>>,
    #[serde(borrow)]
    pub title: Str<'a>,
    #[serde(borrow)]
    pub id: Str<'a>,
    #[serde(borrow)]
    pub name: Str<'a>,
    pub input: Json,
    #[serde(borrow)]
    pub tool_use_id: Str<'a>,
    #[serde(borrow)]
    pub content: Field<Content<'a>>,
    pub is_error: Bool,
    #[serde(borrow)]
    pub thinking: Str<'a>,
    #[serde(borrow)]
    pub signature: Str<'a>,
    #[serde(borrow)]
    pub data: Str<'a>,
}

/// A block's `cache_control` object.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct CacheControl<'a> {
    #[serde(borrow)]
    pub ttl: Str<'a>,
}

/// An image's or document's `source`.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct Source<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow)]
    pub media_type: Str<'a>,
    #[serde(borrow)]
    pub data: Str<'a>,
    #[serde(borrow)]
    pub url: Str<'a>,
}

/// A tool definition.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct ToolDef<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow)]
    pub name: Str<'a>,
    #[serde(borrow)]
    pub description: Str<'a>,
    pub input_schema: Json,
    #[serde(borrow)]
    pub cache_control: Object<CacheControl<'a>>,
}

/// `tool_choice`.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct Choice<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow)]
    pub name: Str<'a>,
    pub disable_parallel_tool_use: Bool,
}

/// `metadata`: the user id, and whether any other field was given.
#[derive(Default)]
pub(super) struct Metadata<'a> {
    pub user_id: Str<'a>,
    pub other: bool,
}

/// `thinking`: whether it was given meaningfully, and its fields when an
/// object.
#[derive(Default)]
pub(super) struct Thinking<'a> {
    pub meaningful: bool,
    pub kind: Str<'a>,
    pub budget_tokens: Int,
}

/// The fields of a `thinking` object.
#[derive(Default, Deserialize)]
#[serde(default)]
struct ThinkingFields<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    budget_tokens: Int,
}

// === impl Body ===

impl<'de> Deserialize<'de> for Body<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = Body<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a messages request")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body<'de>, A::Error> {
                let mut request = Request::default();
                // A name given twice counts as its last, as in a `Value`.
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    match &*name {
                        "model" => request.model = map.next_value()?,
                        "system" => request.system = map.next_value()?,
                        "messages" => request.messages = map.next_value()?,
                        "tools" => request.tools = map.next_value()?,
                        "tool_choice" => request.tool_choice = map.next_value()?,
                        "max_tokens" => request.max_tokens = map.next_value()?,
                        "temperature" => request.temperature = map.next_value()?,
                        "top_p" => request.top_p = map.next_value()?,
                        "top_k" => request.top_k = map.next_value()?,
                        "stop_sequences" => request.stop_sequences = map.next_value()?,
                        "stream" => request.stream = map.next_value()?,
                        "metadata" => request.metadata = map.next_value()?,
                        "thinking" => request.thinking = map.next_value()?,
                        _ => {
                            let value = map.next_value()?;
                            request.extra.insert(name.0.into_owned(), value);
                        }
                    }
                }
                Ok(Body(Some(request)))
            }
            skip_kinds!('de, Body(None); seq, bool, numbers, str, unit);
        }
        deserializer.deserialize_any(BodyVisitor)
    }
}

// === impl Content ===

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for ContentVisitor<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(text.to_owned())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(block) = seq.next_element::<Object<Block<'a>>>()? {
                    blocks.push(block.0.unwrap_or_default());
                }
                Ok(Content::Blocks(blocks))
            }
            skip_kinds!('de, Content::Other; map, bool, numbers, unit);
        }
        deserializer.deserialize_any(ContentVisitor(PhantomData))
    }
}

// === impl Metadata ===

impl<'de> Deserialize<'de> for Metadata<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MetadataVisitor;
        impl<'de> Visitor<'de> for MetadataVisitor {
            type Value = Metadata<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata<'de>, A::Error> {
                let mut metadata = Metadata::default();
                while let Some(name) = map.next_key::<Key<'de>>()? {
                    if &*name == "user_id" {
                        metadata.user_id = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                        metadata.other = true;
                    }
                }
                Ok(metadata)
            }
        }
        deserializer.deserialize_map(MetadataVisitor)
    }
}

// === impl Thinking ===

impl<'de> Deserialize<'de> for Thinking<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ThinkingVisitor;
        impl<'de> Visitor<'de> for ThinkingVisitor {
            type Value = Thinking<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Thinking<'de>, A::Error> {
                let fields = ThinkingFields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Thinking { meaningful: true, kind: fields.kind, budget_tokens: fields.budget_tokens })
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Thinking<'de>, E> {
                Ok(Thinking { meaningful: b, ..Thinking::default() })
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Thinking<'de>, E> {
                Ok(Thinking { meaningful: !text.is_empty(), ..Thinking::default() })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Thinking<'de>, A::Error> {
                let mut meaningful = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    meaningful = true;
                }
                Ok(Thinking { meaningful, ..Thinking::default() })
            }
            skip_kinds!('de, Thinking { meaningful: true, ..Thinking::default() }; numbers);
            skip_kinds!('de, Thinking::default(); unit);
        }
        deserializer.deserialize_any(ThinkingVisitor)
    }
}
