//! JSON request bodies of the OpenAI endpoints: read once as top-level fields
//! in their original order with verbatim values, so the body goes upstream
//! byte for byte unless the gateway must rewrite `model` or ask a stream
//! for usage; then only those fields change.

use std::{fmt, ops::Range};

use bytes::Bytes;
use serde::{
    Deserialize,
    de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor},
};
use serde_json::value::RawValue;

use crate::{
    error::ProxyError,
    openai::{push_json_string, with_include_usage},
};

/// A JSON object body.
#[derive(Debug)]
pub struct JsonBody {
    raw: Bytes,
    /// Top-level fields in their original order, as places in `raw`: read
    /// without copying a name or a value (a prompt is most of a body).
    fields: Vec<Field>,
}

/// One top-level field of a `JsonBody`.
#[derive(Debug)]
struct Field {
    name: Name,
    /// Where the value's JSON text lies in the body, verbatim.
    value: Range<usize>,
}

/// A field's name: where it lies in the body (between its quotes), or,
/// when written with escapes, unescaped.
#[derive(Debug)]
enum Name {
    At(Range<usize>),
    Unescaped(Box<str>),
}

/// A field's name as the parser hands it over: borrowed from the body
/// unless it had escapes to undo.
enum NameText<'de> {
    Borrowed(&'de str),
    Unescaped(String),
}

/// The kind of a JSON value, read without keeping the value: a string, an
/// array (with how many entries it has), or anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Array(usize),
    Other,
}

/// The top-level fields of a JSON object, borrowed from the body.
struct Fields<'de>(Vec<(NameText<'de>, &'de RawValue)>);

// === impl JsonBody ===

impl JsonBody {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: Bytes) -> Result<JsonBody, ProxyError> {
        let Fields(found) = serde_json::from_slice(&raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
        // Every borrowed text is a slice of `raw`: its place is its
        // distance from the body's start.
        let base = raw.as_ptr().addr();
        let place = |text: &str| {
            let start = text.as_ptr().addr() - base;
            start..start + text.len()
        };
        let fields = found
            .into_iter()
            .map(|(name, value)| Field {
                name: match name {
                    NameText::Borrowed(name) => Name::At(place(name)),
                    NameText::Unescaped(name) => Name::Unescaped(name.into_boxed_str()),
                },
                value: place(value.get()),
            })
            .collect();
        Ok(JsonBody { raw, fields })
    }

    /// Size of the client's body in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// The body as the client sent it.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The raw JSON of field `name` (the last one if repeated).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.field_bytes(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The raw JSON of field `name` as bytes (the last one if repeated).
    pub fn field_bytes(&self, name: &str) -> Option<&[u8]> {
        let name = name.as_bytes();
        self.fields.iter().rev().find(|f| self.name_bytes(f) == name).map(|f| &self.raw[f.value.clone()])
    }

    /// Field `name` read as a `T` (a `String`, a `Value`, its `Kind`…);
    /// `None` when it is absent or is not one.
    pub fn value<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        serde_json::from_slice(self.field_bytes(name)?).ok()
    }

    /// Field `name` when it is `true`.
    pub fn is_true(&self, name: &str) -> bool {
        self.field_bytes(name) == Some(b"true")
    }

    /// Whether `stream_options.include_usage` is `true`.
    pub fn wants_usage(&self) -> bool {
        self.value::<serde_json::Value>("stream_options")
            .is_some_and(|v| v.get("include_usage") == Some(&serde_json::Value::Bool(true)))
    }

    /// The body to send upstream: the client's bytes, except that `model`
    /// (when given) replaces the model field, or is added when the client
    /// sent none, and `force_usage` sets `stream_options.include_usage`.
    pub fn rewrite(&self, model: Option<&str>, force_usage: bool) -> Bytes {
        if model.is_none() && !force_usage {
            return self.raw.clone();
        }
        let mut out = String::with_capacity(self.raw.len() + 64);
        out.push('{');
        let (mut saw_model, mut saw_options) = (false, false);
        for field in &self.fields {
            comma(&mut out);
            let name = self.name(field);
            push_json_string(&mut out, name);
            out.push(':');
            let value = self.text(field.value.clone());
            match (name, model) {
                ("model", Some(model)) => {
                    saw_model = true;
                    push_json_string(&mut out, model);
                }
                ("stream_options", _) if force_usage => {
                    saw_options = true;
                    out.push_str(&with_include_usage(value));
                }
                _ => out.push_str(value),
            }
        }
        if let Some(model) = model.filter(|_| !saw_model) {
            comma(&mut out);
            out.push_str(r#""model":"#);
            push_json_string(&mut out, model);
        }
        if force_usage && !saw_options {
            comma(&mut out);
            out.push_str(r#""stream_options":{"include_usage":true}"#);
        }
        out.push('}');
        Bytes::from(out)
    }

    fn name<'a>(&'a self, field: &'a Field) -> &'a str {
        match &field.name {
            Name::At(at) => self.text(at.clone()),
            Name::Unescaped(name) => name,
        }
    }

    /// What `name` gives, as bytes: compared without reading it as UTF-8.
    fn name_bytes<'a>(&'a self, field: &'a Field) -> &'a [u8] {
        match &field.name {
            Name::At(at) => &self.raw[at.clone()],
            Name::Unescaped(name) => name.as_bytes(),
        }
    }

    /// The text at `at`, a place `parse` found: the parser has read it as
    /// UTF-8 already.
    fn text(&self, at: Range<usize>) -> &str {
        std::str::from_utf8(&self.raw[at]).unwrap_or_default()
    }
}

// === impl Fields ===

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<NameText<'de>, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

// === impl Kind ===

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KindVisitor;
        impl<'de> Visitor<'de> for KindVisitor {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Kind, E> {
                Ok(Kind::String)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
                let mut entries = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    entries += 1;
                }
                Ok(Kind::Array(entries))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Kind::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
        }
        deserializer.deserialize_any(KindVisitor)
    }
}

// === impl NameText ===

impl<'de> Deserialize<'de> for NameText<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = NameText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, name: &'de str) -> Result<NameText<'de>, E> {
                Ok(NameText::Borrowed(name))
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<NameText<'de>, E> {
                Ok(NameText::Unescaped(name.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, name: String) -> Result<NameText<'de>, E> {
                Ok(NameText::Unescaped(name))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

fn comma(out: &mut String) {
    if out.len() > 1 {
        out.push(',');
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn parse(body: &str) -> JsonBody {
        JsonBody::parse(Bytes::from(body.to_owned())).unwrap()
    }

    #[test]
    fn untouched_bodies_pass_byte_for_byte() {
        let body = "{ \"model\" : \"m\",\n \"prompt\": \"hi\", \"x\": {\"y\":1} }";
        assert_eq!(parse(body).rewrite(None, false), body.as_bytes());
        assert!(matches!(JsonBody::parse(Bytes::from_static(b"[1]")), Err(ProxyError::InvalidJson(_))));
    }

    #[test]
    fn model_is_replaced_or_added_and_usage_forced() {
        let body = parse(r#"{"prompt":"p","model":"m","stream":true}"#);
        assert_eq!(body.rewrite(Some("up"), false), r#"{"prompt":"p","model":"up","stream":true}"#.as_bytes());
        assert_eq!(
            body.rewrite(None, true),
            r#"{"prompt":"p","model":"m","stream":true,"stream_options":{"include_usage":true}}"#.as_bytes()
        );
        let no_model = parse(r#"{"input":"x","stream_options":{"a":1}}"#);
        assert_eq!(
            no_model.rewrite(Some("mod"), true),
            r#"{"input":"x","stream_options":{"a":1,"include_usage":true},"model":"mod"}"#.as_bytes()
        );
        assert!(parse(r#"{"stream_options":{"include_usage":true}}"#).wants_usage());
    }

    #[test]
    fn names_written_with_escapes_are_read_unescaped() {
        let body = parse(r#"{"mod\u0065l":"m","pr\u00f6mpt":"é","stream":true}"#);
        assert_eq!(body.value::<String>("model").as_deref(), Some("m"));
        assert_eq!(body.field("prömpt"), Some(r#""é""#));
        assert!(body.is_true("stream"));
        assert_eq!(body.rewrite(Some("up"), false), r#"{"model":"up","prömpt":"é","stream":true}"#.as_bytes());
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_body_is_parsed_or_refused_with_a_4xx(body in crate::fuzz::body(), usage in proptest::bool::ANY) {
            // A body can be well-formed JSON that `Value` refuses (a number
            // past f64's range, a lone surrogate escape): it goes upstream
            // as it came, so the rewrite must be as well-formed as the body,
            // and parse as a `Value` whenever the body does.
            let as_value = serde_json::from_slice::<serde_json::Value>(&body).is_ok();
            match JsonBody::parse(Bytes::from(body)) {
                Ok(json) => {
                    let _ = (json.value::<String>("model"), json.is_true("stream"), json.wants_usage());
                    let rewritten = json.rewrite(Some("other"), usage);
                    proptest::prop_assert!(serde_json::from_slice::<&RawValue>(&rewritten).is_ok());
                    if as_value {
                        proptest::prop_assert!(serde_json::from_slice::<serde_json::Value>(&rewritten).is_ok());
                    }
                    // Each field is found where it is, as `Value` reads it
                    // (the last of a repeated name).
                    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(json.raw()) {
                        for (name, value) in &map {
                            let field = json.field(name).and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok());
                            proptest::prop_assert_eq!(field.as_ref(), Some(value));
                        }
                    }
                }
                Err(error) => crate::fuzz::assert_client_error(&error)?,
            }
        }
    }
}
