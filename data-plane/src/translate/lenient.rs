//! JSON read leniently into borrowed fields: a value of the wrong kind reads
//! as absent, as `Value::get(…).and_then(Value::as_…)` would have it, so a
//! request's view built of these types deserializes from any JSON text or
//! from any `Value` without failing. Strings are borrowed from the body
//! where they have no escapes. Decoders read these views either from the
//! raw body (no `Value` tree built) or from a parsed `Value` (same result).

use std::{borrow::Cow, fmt, marker::PhantomData};

use serde::{
    Deserialize, Deserializer,
    de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor, value::MapAccessDeserializer},
};
use serde_json::Value;

use crate::json_body::skip_kinds;

/// An object's field name, borrowed from the body unless it had escapes
/// (serde's `Cow<str>` always copies).
pub(crate) struct Key<'a>(pub Cow<'a, str>);

/// A string, or `None` for any other kind of value (or none).
#[derive(Debug, Default, Clone)]
pub(super) struct Str<'a>(pub Option<Cow<'a, str>>);

/// An integer that fits an `i64` (as `Value::as_i64`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Int(pub Option<i64>);

/// Any number, as an `f64` (as `Value::as_f64`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Float(pub Option<f64>);

/// A boolean.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Bool(pub Option<bool>);

/// Whether a field was given at all (any value, `null` included).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Given(pub bool);

/// Whether a field was given and `meaningful` (not `null`, `false`, an
/// empty string or an empty array).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Meaningful(pub bool);

/// A field's value whatever its kind, as a `Value` (`null` included); for
/// the opaque parts a decoder keeps whole (a schema, a tool's input).
#[derive(Debug, Default, Clone)]
pub(super) struct Json(pub Option<Value>);

/// An array of `T` (each entry read by `T`, which must take any kind), or
/// `None` for any other kind of value.
#[derive(Debug, Clone)]
pub(super) struct List<T>(pub Option<Vec<T>>);

/// An object read as `T` (a struct of lenient fields), or `None` for any
/// other kind of value.
#[derive(Debug, Clone)]
pub(super) struct Object<T>(pub Option<T>);

/// A field that may be absent, read by `T` (which must take any kind) when
/// given, `null` included.
#[derive(Debug, Clone)]
pub(super) struct Field<T>(pub Option<T>);

// === impl Key ===

impl std::ops::Deref for Key<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for KeyVisitor<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(name)))
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(name.to_owned())))
            }
            fn visit_string<E: de::Error>(self, name: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(name)))
            }
        }
        deserializer.deserialize_str(KeyVisitor(PhantomData))
    }
}

// === impl Str ===

impl Str<'_> {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for StrVisitor<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Borrowed(text))))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(text.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(text))))
            }
            skip_kinds!('de, Str(None); map, seq, bool, numbers, unit);
        }
        deserializer.deserialize_any(StrVisitor(PhantomData))
    }
}

// === impl Int ===

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntVisitor;
        impl<'de> Visitor<'de> for IntVisitor {
            type Value = Int;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Int, E> {
                Ok(Int(Some(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Int, E> {
                Ok(Int(i64::try_from(n).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Int, E> {
                Ok(Int(None))
            }
            skip_kinds!('de, Int(None); map, seq, bool, str, unit);
        }
        deserializer.deserialize_any(IntVisitor)
    }
}

// === impl Float ===

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FloatVisitor;
        impl<'de> Visitor<'de> for FloatVisitor {
            type Value = Float;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            #[allow(clippy::cast_precision_loss)] // as `Value::as_f64` reads it
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Float, E> {
                Ok(Float(Some(n as f64)))
            }
            #[allow(clippy::cast_precision_loss)] // as `Value::as_f64` reads it
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Float, E> {
                Ok(Float(Some(n as f64)))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Float, E> {
                Ok(Float(Some(n)))
            }
            skip_kinds!('de, Float(None); map, seq, bool, str, unit);
        }
        deserializer.deserialize_any(FloatVisitor)
    }
}

// === impl Bool ===

impl<'de> Deserialize<'de> for Bool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BoolVisitor;
        impl<'de> Visitor<'de> for BoolVisitor {
            type Value = Bool;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Bool, E> {
                Ok(Bool(Some(b)))
            }
            skip_kinds!('de, Bool(None); map, seq, numbers, str, unit);
        }
        deserializer.deserialize_any(BoolVisitor)
    }
}

// === impl Given ===

impl<'de> Deserialize<'de> for Given {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Given(true))
    }
}

// === impl Meaningful ===

impl<'de> Deserialize<'de> for Meaningful {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MeaningfulVisitor;
        impl<'de> Visitor<'de> for MeaningfulVisitor {
            type Value = Meaningful;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Meaningful, E> {
                Ok(Meaningful(b))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Meaningful, E> {
                Ok(Meaningful(!text.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Meaningful, E> {
                Ok(Meaningful(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Meaningful, A::Error> {
                let mut any = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Meaningful(any))
            }
            skip_kinds!('de, Meaningful(true); map, numbers);
        }
        deserializer.deserialize_any(MeaningfulVisitor)
    }
}

// === impl Json ===

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(|value| Json(Some(value)))
    }
}

// === impl List ===

impl<T> Default for List<T> {
    fn default() -> Self {
        List(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(List(Some(items)))
            }
            skip_kinds!('de, List(None); map, bool, numbers, str, unit);
        }
        deserializer.deserialize_any(ListVisitor(PhantomData))
    }
}

// === impl Object ===

impl<T> Default for Object<T> {
    fn default() -> Self {
        Object(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|fields| Object(Some(fields)))
            }
            skip_kinds!('de, Object(None); seq, bool, numbers, str, unit);
        }
        deserializer.deserialize_any(ObjectVisitor(PhantomData))
    }
}

// === impl Field ===

impl<T> Default for Field<T> {
    fn default() -> Self {
        Field(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(|value| Field(Some(value)))
    }
}
