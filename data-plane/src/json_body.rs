//! JSON request bodies of the OpenAI endpoints: read once as top-level fields
//! in their original order with verbatim values, so the body goes upstream
//! byte for byte unless the gateway must rewrite `model` or ask a stream
//! for usage; then only those fields change.

use std::{borrow::Cow, fmt, marker::PhantomData, ops::Range};

use bytes::Bytes;
use serde::{
    Deserialize,
    de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
};
use serde_json::value::RawValue;

use crate::error::ProxyError;

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

/// A value read only if it is a string (borrowed from the body when it has
/// no escapes); any other kind is skipped.
pub(crate) struct MaybeStr<'a>(pub(crate) Option<Cow<'a, str>>);

/// The top-level fields of a JSON object, borrowed from the body, and
/// what was read of the value of the field `FieldsSeed` names (its last,
/// when repeated).
struct Fields<'de, T> {
    found: Vec<(NameText<'de>, Value<'de>)>,
    read: Option<T>,
}

/// A top-level value as the parser hands it over: borrowed from the body,
/// or read as the caller asked, in which case its place is found after.
enum Value<'de> {
    Raw(&'de RawValue),
    Read,
}

/// Reads an object's fields, and the value of field `name` as a `T`.
struct FieldsSeed<'n, T> {
    name: Option<&'n str>,
    read: PhantomData<T>,
}

/// Writes the `visit_*` methods of a serde visitor for the kinds of value
/// it does not read: each skips the value and gives `$value`. The kinds are
/// `bool`, `numbers`, `unit` (null), `str`, `seq` and `map`; `$de` is the
/// visitor's lifetime. For visitors that read one or two kinds of value
/// and take any other as "something else".
macro_rules! skip_kinds {
    ($de:lifetime, $value:expr; $($kind:ident),+) => {
        $( $crate::json_body::skip_kinds!(@ $de, $value; $kind); )+
    };
    (@ $de:lifetime, $value:expr; bool) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    (@ $de:lifetime, $value:expr; numbers) => {
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    (@ $de:lifetime, $value:expr; unit) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    (@ $de:lifetime, $value:expr; str) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    (@ $de:lifetime, $value:expr; seq) => {
        fn visit_seq<A: serde::de::SeqAccess<$de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
    (@ $de:lifetime, $value:expr; map) => {
        fn visit_map<A: serde::de::MapAccess<$de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}
pub(crate) use skip_kinds;

/// Changes to a body's top-level fields: what an adapter's upstream wants
/// different from what the client sent (a mapped model, a version field, a
/// field the upstream refuses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyEdit {
    /// Fields left out.
    pub drop: Vec<&'static str>,
    /// Fields set, with their JSON text.
    pub set: Vec<(&'static str, String)>,
}

// === impl BodyEdit ===

impl BodyEdit {
    /// True when the edit changes nothing.
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.set.is_empty()
    }

    /// Sets field `name` to the string `value`.
    pub fn set_str(&mut self, name: &'static str, value: &str) {
        let mut text = String::with_capacity(value.len() + 2);
        push_json_string(&mut text, value);
        self.set.push((name, text));
    }

    /// Applies the edit to a parsed body `value` (an object; anything else
    /// is left as it is).
    pub fn apply(&self, value: &mut serde_json::Value) {
        let Some(object) = value.as_object_mut() else { return };
        for name in &self.drop {
            object.remove(*name);
        }
        for (name, text) in &self.set {
            if let Ok(v) = serde_json::from_str(text) {
                object.insert((*name).to_owned(), v);
            }
        }
    }
}

// === impl JsonBody ===

impl JsonBody {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: Bytes) -> Result<JsonBody, ProxyError> {
        JsonBody::split::<IgnoredAny>(raw, None).map(|(body, _)| body)
    }

    /// Parses `raw` as `parse` does and, in the same pass over the body,
    /// reads the value of field `name` (its last, when repeated) as a `T`:
    /// a large field (a prompt) is read once, not once to be split off and
    /// again to be read. Fails as `parse` does, and when that value is not
    /// a `T`; `None` when there is no such field.
    pub fn parse_reading<T: DeserializeOwned>(raw: Bytes, name: &str) -> Result<(JsonBody, Option<T>), ProxyError> {
        JsonBody::split(raw, Some(name))
    }

    /// `parse`, and `parse_reading` when `name` is given.
    fn split<T: DeserializeOwned>(raw: Bytes, name: Option<&str>) -> Result<(JsonBody, Option<T>), ProxyError> {
        let seed = FieldsSeed { name, read: PhantomData::<T> };
        let mut reader = serde_json::Deserializer::from_slice(&raw);
        let found = seed.deserialize(&mut reader).and_then(|found| reader.end().map(|()| found));
        let Fields { found, read } = found.map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
        // Every borrowed text is a slice of `raw`: its place is its
        // distance from the body's start.
        let base = raw.as_ptr().addr();
        let place = |text: &str| {
            let start = text.as_ptr().addr() - base;
            start..start + text.len()
        };
        // Fields whose value was read as a `T`: placed below.
        let mut unplaced = Vec::new();
        let mut fields: Vec<Field> = found
            .into_iter()
            .enumerate()
            .map(|(i, (name, value))| Field {
                name: match name {
                    NameText::Borrowed(name) => Name::At(place(name)),
                    NameText::Unescaped(name) => Name::Unescaped(name.into_boxed_str()),
                },
                value: match value {
                    Value::Raw(value) => place(value.get()),
                    Value::Read => {
                        unplaced.push(i);
                        0..0
                    }
                },
            })
            .collect();
        for i in unplaced {
            match value_between(&raw, &fields[i].name, fields.get(i + 1).map(|next| &next.name)) {
                Some(value) => fields[i].value = value,
                // A neighbouring name had escapes, so has no place to count
                // from. Rare: the body is split again.
                None => return Ok((JsonBody::parse(raw)?, read)),
            }
        }
        Ok((JsonBody { raw, fields }, read))
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

    /// The body with `edit` applied: the fields it drops left out, the
    /// fields it sets given its JSON text (in place when present, appended
    /// otherwise); every other field byte for byte, in order. The body as
    /// it is when the edit changes nothing.
    pub fn edit(&self, edit: &BodyEdit) -> Bytes {
        if edit.is_empty() || self.unchanged_by(edit) {
            return self.raw.clone();
        }
        let mut out = String::with_capacity(self.raw.len() + 64);
        out.push('{');
        let mut set: Vec<bool> = vec![false; edit.set.len()];
        for field in &self.fields {
            let name = self.name(field);
            let setting = edit.set.iter().position(|(n, _)| *n == name);
            // A field dropped, or a repeat of one already set, is left out.
            if edit.drop.contains(&name) || setting.is_some_and(|i| set[i]) {
                continue;
            }
            comma(&mut out);
            push_json_string(&mut out, name);
            out.push(':');
            match setting {
                Some(i) => {
                    set[i] = true;
                    out.push_str(&edit.set[i].1);
                }
                None => out.push_str(self.text(field.value.clone())),
            }
        }
        for ((name, value), done) in edit.set.iter().zip(set) {
            if !done {
                comma(&mut out);
                push_json_string(&mut out, name);
                out.push(':');
                out.push_str(value);
            }
        }
        out.push('}');
        Bytes::from(out)
    }

    /// Whether `edit` would change nothing but spacing: no field it drops
    /// is here, and each field it sets is here once, with just that JSON
    /// text (a passed-through request naming the model its channel calls
    /// it by: the body then goes upstream as it came, not rewritten).
    fn unchanged_by(&self, edit: &BodyEdit) -> bool {
        let named = |name: &'static str| self.fields.iter().filter(move |field| self.name(field) == name);
        edit.drop.iter().all(|name| named(name).next().is_none())
            && edit.set.iter().all(|(name, text)| {
                let mut fields = named(name);
                match (fields.next(), fields.next()) {
                    (Some(field), None) => self.text(field.value.clone()) == text,
                    _ => false,
                }
            })
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

/// Where the value of a field lies in the valid JSON object `raw`, from the
/// text around it: after the colon that follows its name (`name`), up to the
/// comma before the `next` field's name or the object's closing brace.
/// `None` when a name has no place in the body (it had escapes).
fn value_between(raw: &[u8], name: &Name, next: Option<&Name>) -> Option<Range<usize>> {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let Name::At(name) = name else { return None };
    // Past the name's closing quote, spaces, the colon, spaces.
    let mut start = name.end + 1;
    while raw.get(start).is_some_and(space) {
        start += 1;
    }
    (raw.get(start) == Some(&b':')).then_some(())?;
    start += 1;
    while raw.get(start).is_some_and(space) {
        start += 1;
    }
    // Back from the next name's opening quote (or the body's end), over
    // spaces, the comma (or brace), spaces.
    let (mut end, stop) = match next {
        Some(Name::At(next)) => (next.start.checked_sub(1)?, b','),
        Some(Name::Unescaped(_)) => return None,
        None => (raw.len(), b'}'),
    };
    while end > start && raw.get(end - 1).is_some_and(space) {
        end -= 1;
    }
    (end > start && raw[end - 1] == stop).then_some(())?;
    end -= 1;
    while end > start && raw.get(end - 1).is_some_and(space) {
        end -= 1;
    }
    (end > start).then_some(start..end)
}

// === impl FieldsSeed ===

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for FieldsSeed<'_, T> {
    type Value = Fields<'de, T>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for FieldsSeed<'_, T> {
    type Value = Fields<'de, T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = Vec::with_capacity(map.size_hint().unwrap_or(8));
        let mut read = None;
        while let Some(name) = map.next_key::<NameText<'de>>()? {
            let value = if self.name.is_some_and(|wanted| name.as_str() == wanted) {
                read = Some(map.next_value::<T>()?);
                Value::Read
            } else {
                Value::Raw(map.next_value::<&'de RawValue>()?)
            };
            found.push((name, value));
        }
        Ok(Fields { found, read })
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
            skip_kinds!('de, Kind::Other; map, bool, numbers, unit);
        }
        deserializer.deserialize_any(KindVisitor)
    }
}

// === impl MaybeStr ===

impl<'de> Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = MaybeStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Borrowed(text))))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Owned(text.to_owned()))))
            }
            skip_kinds!('de, MaybeStr(None); map, seq, bool, numbers, unit);
        }
        deserializer.deserialize_any(StrVisitor)
    }
}

// === impl NameText ===

impl NameText<'_> {
    fn as_str(&self) -> &str {
        match self {
            NameText::Borrowed(name) => name,
            NameText::Unescaped(name) => name,
        }
    }
}

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

/// Appends `s` to `out` as a JSON string, quoted and escaped.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    // Serialising a str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// `options` (raw JSON) with `include_usage: true`, other fields kept.
pub(crate) fn with_include_usage(options: &str) -> String {
    let mut map = match serde_json::from_str::<serde_json::Value>(options) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    map.insert("include_usage".into(), serde_json::Value::Bool(true));
    serde_json::Value::Object(map).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn parse(body: &str) -> JsonBody {
        JsonBody::parse(Bytes::from(body.to_owned())).unwrap()
    }

    #[test]
    fn an_edit_drops_sets_and_appends_keeping_every_other_byte() {
        let body = parse(r#"{"model":"a", "stream":true,"messages":[ {"x" :1} ],"model":"b"}"#);
        let mut edit = BodyEdit::default();
        assert_eq!(body.edit(&edit), body.raw().clone(), "an empty edit is the body");
        edit.drop.push("stream");
        edit.set_str("model", "m\"1");
        edit.set_str("anthropic_version", "v");
        let edited = body.edit(&edit);
        assert_eq!(
            std::str::from_utf8(&edited).unwrap(),
            r#"{"model":"m\"1","messages":[ {"x" :1} ],"anthropic_version":"v"}"#
        );
        let mut value: serde_json::Value = serde_json::from_slice(body.raw()).unwrap();
        edit.apply(&mut value);
        assert_eq!(value, serde_json::from_slice::<serde_json::Value>(&edited).unwrap());
        // Setting a field to the text it has changes nothing, unless the
        // name is repeated (the edit keeps one).
        let body = parse(r#"{"model": "a", "stream": true}"#);
        let mut same = BodyEdit::default();
        same.set_str("model", "a");
        assert_eq!(body.edit(&same), body.raw().clone());
        same.drop.push("max_tokens");
        assert_eq!(body.edit(&same), body.raw().clone(), "dropping an absent field changes nothing");
        same.set_str("stream", "b");
        assert_eq!(body.edit(&same), r#"{"model":"a","stream":"b"}"#.as_bytes());
        let twice = parse(r#"{"model":"a","model":"a"}"#);
        let mut same = BodyEdit::default();
        same.set_str("model", "a");
        assert_eq!(twice.edit(&same), r#"{"model":"a"}"#.as_bytes());
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

    /// Each field's name and the place of its value, as text.
    fn places(body: &JsonBody) -> Vec<(String, String)> {
        body.fields.iter().map(|f| (body.name(f).to_owned(), body.text(f.value.clone()).to_owned())).collect()
    }

    #[test]
    fn a_value_read_in_the_same_pass_is_placed_where_a_split_finds_it() {
        let bodies = [
            "{\"messages\":[1,{\"a\":\"}\"}],\"model\":\"m\"}",
            "{ \"model\" :\t\"m\" ,\r\n \"messages\" : [ \",\" ] \n}\n ",
            "{\"messages\":null,\"messages\":\"x\" , \"b\":{}}",
            "{\"messages\":\"\\\",\"}",
        ];
        for body in bodies {
            let split = parse(body);
            let (read, value) = JsonBody::parse_reading::<serde_json::Value>(Bytes::from(body), "messages").unwrap();
            assert_eq!(places(&read), places(&split), "{body}");
            assert_eq!(
                value,
                serde_json::from_str::<serde_json::Value>(split.field("messages").unwrap()).ok(),
                "{body}"
            );
            // Placed from the text around it, not by splitting again.
            let i = read.fields.iter().rposition(|f| read.name(f) == "messages").unwrap();
            let around = value_between(read.raw(), &read.fields[i].name, read.fields.get(i + 1).map(|f| &f.name));
            assert_eq!(around, Some(split.fields[i].value.clone()), "{body}");
        }
        // Beside a name written with escapes there is no place to count
        // from: the body is split again, with the same result.
        let body = r#"{"messages":[],"mod\u0065l":"m"}"#;
        let (read, value) = JsonBody::parse_reading::<serde_json::Value>(Bytes::from(body), "messages").unwrap();
        assert_eq!((places(&read), value), (places(&parse(body)), Some(serde_json::json!([]))));
        let (_, absent) = JsonBody::parse_reading::<serde_json::Value>(Bytes::from(body), "other").unwrap();
        assert_eq!(absent, None);
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

        #[test]
        fn an_edit_that_changes_nothing_gives_the_body_a_rewrite_would_equal(
            body in crate::fuzz::body(),
            drop in proptest::sample::select(&["model", "stream", "absent"][..]),
        ) {
            // Setting each of a field's own text (and dropping a field that
            // may not be there): the body when that changes nothing, else
            // the body rewritten; as a value, the same either way.
            let Ok(json) = JsonBody::parse(Bytes::from(body)) else { return Ok(()) };
            let mut edit = BodyEdit::default();
            edit.drop.push(drop);
            for name in ["model", "stream", "max_tokens"] {
                if let Some(text) = json.field(name) {
                    edit.set.push((name, text.to_owned()));
                }
            }
            let edited = json.edit(&edit);
            let mut rewritten = BodyEdit { drop: edit.drop.clone(), set: edit.set.clone() };
            rewritten.set.push(("absent", "1".to_owned()));
            let general = json.edit(&rewritten);
            if json.unchanged_by(&edit) {
                proptest::prop_assert_eq!(&edited, json.raw());
            }
            if let (Ok(mut ours), Ok(mut theirs)) = (
                serde_json::from_slice::<serde_json::Value>(&edited),
                serde_json::from_slice::<serde_json::Value>(&general),
            ) {
                if let Some(theirs) = theirs.as_object_mut() {
                    theirs.remove("absent");
                }
                if let Some(ours) = ours.as_object_mut() {
                    ours.remove("absent");
                }
                proptest::prop_assert_eq!(ours, theirs);
            }
        }

        #[test]
        fn reading_a_field_in_the_same_pass_splits_the_body_alike(body in crate::fuzz::body(), pretty in proptest::bool::ANY) {
            // Pretty-printed, a body has spaces and line breaks around its
            // names, colons and commas.
            let body = match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(value) if pretty => serde_json::to_vec_pretty(&value).unwrap(),
                _ => body,
            };
            let Ok(split) = JsonBody::parse(Bytes::from(body.clone())) else { return Ok(()) };
            for name in split.fields.iter().map(|f| split.name(f)).chain(["absent"]) {
                let (read, value) = JsonBody::parse_reading::<IgnoredAny>(Bytes::from(body.clone()), name).unwrap();
                proptest::prop_assert_eq!(places(&read), places(&split));
                proptest::prop_assert_eq!(value.is_some(), split.field(name).is_some());
            }
        }
    }
}
