//! JSON request bodies of the OpenAI endpoints: read once as top-level fields
//! in their original order with verbatim values, so the body goes upstream
//! byte for byte unless the gateway must rewrite `model` or ask a stream
//! for usage; then only those fields change.

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::{
    error::ProxyError,
    openai::{OrderedFields, push_json_string, with_include_usage},
};

/// A JSON object body.
#[derive(Debug)]
pub struct JsonBody {
    raw: Bytes,
    /// Top-level fields in their original order, values verbatim.
    fields: Vec<(String, Box<RawValue>)>,
}

// === impl JsonBody ===

impl JsonBody {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: Bytes) -> Result<JsonBody, ProxyError> {
        let OrderedFields(fields) = serde_json::from_slice(&raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
        Ok(JsonBody { raw, fields })
    }

    /// Size of the client's body in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// The body as the client sent it.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// The raw JSON of field `name` (the last one if repeated).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.get())
    }

    /// Field `name` when it is a JSON string.
    pub fn string(&self, name: &str) -> Option<String> {
        self.field(name).and_then(|v| serde_json::from_str::<String>(v).ok())
    }

    /// Field `name` when it is `true`.
    pub fn is_true(&self, name: &str) -> bool {
        self.field(name) == Some("true")
    }

    /// Whether `stream_options.include_usage` is `true`.
    pub fn wants_usage(&self) -> bool {
        self.field("stream_options")
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
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
        for (key, value) in &self.fields {
            comma(&mut out);
            push_json_string(&mut out, key);
            out.push(':');
            match (key.as_str(), model) {
                ("model", Some(model)) => {
                    saw_model = true;
                    push_json_string(&mut out, model);
                }
                ("stream_options", _) if force_usage => {
                    saw_options = true;
                    out.push_str(&with_include_usage(value.get()));
                }
                _ => out.push_str(value.get()),
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
                    let _ = (json.string("model"), json.is_true("stream"), json.wants_usage());
                    let rewritten = json.rewrite(Some("other"), usage);
                    proptest::prop_assert!(serde_json::from_slice::<&RawValue>(&rewritten).is_ok());
                    if as_value {
                        proptest::prop_assert!(serde_json::from_slice::<serde_json::Value>(&rewritten).is_ok());
                    }
                }
                Err(error) => crate::fuzz::assert_client_error(&error)?,
            }
        }
    }
}
