//! Validates JSON against the component schemas of the OpenAI OpenAPI
//! document kept in `tests/reference/` (the schemas the tests use, copied from
//! the official document), so tests can prove that what the gateway returns on
//! OpenAI paths has the official shape.
//!
//! The document is OpenAPI 3.1 (JSON Schema 2020-12) but keeps two 3.0
//! idioms, rewritten on load: `nullable: true` means "or null", and a boolean
//! `exclusiveMinimum`/`exclusiveMaximum` qualifies `minimum`/`maximum`.
//! `$ref`s point into `#/components/schemas`; a validator is built over the
//! schemas its root reaches. Formats are not checked (`unixtime` is not a
//! JSON Schema format).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

use anyhow::{Context, anyhow};
use serde_json::{Map, Value, json};

/// Where the OpenAPI document lives: inside this crate, so a clone of the
/// repository alone has everything the tests read.
pub const OPENAPI_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/reference/openai-openapi.yml");

const REF_PREFIX: &str = "#/components/schemas/";

/// The component schemas of an OpenAPI document, rewritten as JSON Schema.
pub struct OpenApi {
    schemas: Map<String, Value>,
}

/// A compiled validator for one component schema.
pub struct Schema {
    name: String,
    validator: jsonschema::Validator,
}

/// A value that does not match its schema: one line per problem, each
/// naming where in the value it is (a JSON pointer, `/` for the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub schema: String,
    pub problems: Vec<String>,
}

/// Longest rendering of one problem; the validator may quote whole values.
const MAX_PROBLEM: usize = 400;

// === impl OpenApi ===

impl OpenApi {
    /// Parses the OpenAPI document (YAML or JSON) at `path`. Fails if it
    /// cannot be read or parsed or has no `components.schemas`.
    pub fn load(path: &Path) -> anyhow::Result<OpenApi> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let text = widen_huge_integers(&text);
        let document: serde_norway::Value =
            serde_norway::from_str(&text).with_context(|| format!("parsing {} as YAML", path.display()))?;
        OpenApi::from_document(yaml_to_json(document))
    }

    /// The schemas of an already parsed OpenAPI document.
    pub fn from_document(mut document: Value) -> anyhow::Result<OpenApi> {
        let Some(Value::Object(mut schemas)) = document.pointer_mut("/components/schemas").map(Value::take) else {
            return Err(anyhow!("the document has no components.schemas"));
        };
        schemas.values_mut().for_each(rewrite_openapi_idioms);
        Ok(OpenApi { schemas })
    }

    /// The shared document at [`OPENAPI_PATH`], parsed once per process.
    pub fn shared() -> anyhow::Result<&'static OpenApi> {
        static SHARED: LazyLock<Result<OpenApi, String>> =
            LazyLock::new(|| OpenApi::load(Path::new(OPENAPI_PATH)).map_err(|e| format!("{e:#}")));
        SHARED.as_ref().map_err(|e| anyhow!("{e}"))
    }

    /// The rewritten schema called `name`, if the document has one.
    pub fn raw(&self, name: &str) -> Option<&Value> {
        self.schemas.get(name)
    }

    /// Compiles the component schema `name` with every schema it reaches.
    /// Fails if there is no such schema or it does not compile.
    pub fn schema(&self, name: &str) -> anyhow::Result<Schema> {
        if !self.schemas.contains_key(name) {
            return Err(anyhow!("no component schema named {name:?}"));
        }
        let mut reached = BTreeSet::new();
        let mut pending = vec![name.to_string()];
        while let Some(next) = pending.pop() {
            if !reached.insert(next.clone()) {
                continue;
            }
            let schema =
                self.schemas.get(&next).ok_or_else(|| anyhow!("{name:?} refers to missing schema {next:?}"))?;
            collect_refs(schema, &mut pending);
        }
        let subset: Map<String, Value> =
            reached.into_iter().filter_map(|n| self.schemas.get(&n).map(|s| (n, s.clone()))).collect();
        let root = json!({
            "$ref": format!("{REF_PREFIX}{name}"),
            "components": { "schemas": subset },
        });
        let validator =
            jsonschema::draft202012::options().build(&root).map_err(|e| anyhow!("compiling schema {name:?}: {e}"))?;
        Ok(Schema { name: name.to_string(), validator })
    }

    /// Checks `value` against the component schema `name`.
    pub fn validate(&self, name: &str, value: &Value) -> anyhow::Result<()> {
        Ok(self.schema(name)?.validate(value)?)
    }
}

/// Checks `value` against the component schema `name` of the shared
/// document. The error lists every problem, each with its location.
pub fn validate(name: &str, value: &Value) -> anyhow::Result<()> {
    OpenApi::shared()?.validate(name, value)
}

// === impl Schema ===

impl Schema {
    /// Checks `value`; the error lists every problem found.
    pub fn validate(&self, value: &Value) -> Result<(), Mismatch> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(value)
            .map(|error| {
                let at = error.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                let mut text = format!("at {at}: {error}");
                if text.len() > MAX_PROBLEM {
                    let mut cut = MAX_PROBLEM;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                    text.push('…');
                }
                text
            })
            .collect();
        if problems.is_empty() { Ok(()) } else { Err(Mismatch { schema: self.name.clone(), problems }) }
    }
}

// === impl Mismatch ===

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "value does not match schema {}:", self.schema)?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Mismatch {}

/// Rewrites the OpenAPI 3.0 idioms of schema `value`, innermost first, into their JSON Schema 2020-12 meaning.
fn rewrite_openapi_idioms(value: &mut Value) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(rewrite_openapi_idioms),
        Value::Object(map) => {
            map.values_mut().for_each(rewrite_openapi_idioms);
            for (flag, bound) in [("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")] {
                if let Some(Value::Bool(exclusive)) = map.get(flag) {
                    let exclusive = *exclusive;
                    map.remove(flag);
                    match map.remove(bound) {
                        Some(limit) if exclusive => {
                            map.insert(flag.to_string(), limit);
                        }
                        // A non-exclusive bound stays as it was.
                        Some(limit) => {
                            map.insert(bound.to_string(), limit);
                        }
                        None => {}
                    }
                }
            }
            let Some(Value::Bool(nullable)) = map.get("nullable") else { return };
            let nullable = *nullable;
            map.remove("nullable");
            if !nullable {
                return;
            }
            if let Some(Value::Array(allowed)) = map.get_mut("enum")
                && !allowed.contains(&Value::Null)
            {
                allowed.push(Value::Null);
            }
            match map.get_mut("type") {
                Some(Value::String(kind)) => {
                    let kind = std::mem::take(kind);
                    map.insert("type".into(), json!([kind, "null"]));
                }
                Some(Value::Array(kinds)) => {
                    if !kinds.contains(&json!("null")) {
                        kinds.push(json!("null"));
                    }
                }
                _ => {
                    // No type to widen ($ref, allOf, …): either this or null.
                    let inner = Value::Object(std::mem::take(map));
                    map.insert("anyOf".into(), json!([inner, { "type": "null" }]));
                }
            }
        }
        _ => {}
    }
}

/// `text` with every plain integer scalar outside the 64-bit range written
/// as a float (`…000` → `…000.0`): the YAML parser refuses such integers,
/// and the document bounds `seed` by ±9223372036854776000.
fn widen_huge_integers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let scalar = body.rsplit_once(": ").map_or(body.trim_start().trim_start_matches("- "), |(_, v)| v);
        let digits = scalar.strip_prefix('-').unwrap_or(scalar);
        let huge = digits.len() >= 19
            && digits.bytes().all(|b| b.is_ascii_digit())
            && scalar.parse::<i64>().is_err()
            && scalar.parse::<u64>().is_err();
        if huge {
            out.push_str(body);
            out.push_str(".0");
            out.push_str(&line[body.len()..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

/// A YAML value as JSON. Integers become JSON integers, other numbers
/// floats; non-string keys are written as their YAML text; tags are
/// dropped.
fn yaml_to_json(value: serde_norway::Value) -> Value {
    use serde_norway::Value as Yaml;
    match value {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(b),
        Yaml::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into(),
            (None, Some(u)) => u.into(),
            _ => n.as_f64().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number),
        },
        Yaml::String(s) => Value::String(s),
        Yaml::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Yaml::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    let key = match key {
                        Yaml::String(s) => s,
                        other => serde_norway::to_string(&other).unwrap_or_default().trim_end().to_string(),
                    };
                    (key, yaml_to_json(value))
                })
                .collect(),
        ),
        Yaml::Tagged(tagged) => yaml_to_json(tagged.value),
    }
}

/// Adds the names of the component schemas `value` refers to.
fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        Value::Object(map) => {
            if let Some(name) = map.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(REF_PREFIX)) {
                out.push(name.to_string());
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::upstream::MockUpstream;

    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../data-plane/tests/golden/translate");

    fn chat_body(stream: bool) -> Value {
        json!({
            "model": "gpt-4o-mini",
            "messages": [{ "role": "user", "content": "hi" }],
            "stream": stream,
            "stream_options": { "include_usage": true }
        })
    }

    #[test]
    fn integers_past_64_bits_are_read_as_floats() {
        let text = "a:\n  minimum: -9223372036854776000\n  maximum: 9223372036854776000\n  n: 12\nb: [1]\n";
        let widened = widen_huge_integers(text);
        // The maximum fits in a u64 and stays an integer.
        assert_eq!(widened, text.replace("-9223372036854776000", "-9223372036854776000.0"));
        let yaml: serde_norway::Value = serde_norway::from_str(&widened).unwrap();
        let json = yaml_to_json(yaml);
        assert_eq!(json["a"]["minimum"], json!(-9.223372036854776e18));
        assert_eq!(json["a"]["maximum"], json!(9_223_372_036_854_776_000_u64));
        assert_eq!(json["a"]["n"], json!(12));
    }

    #[test]
    fn nullable_and_boolean_bounds_are_read_as_json_schema() {
        let document = json!({ "components": { "schemas": {
            "Thing": {
                "type": "object",
                "required": ["name", "size", "kind", "child"],
                "properties": {
                    "name": { "type": "string", "nullable": true },
                    "size": { "type": "number", "minimum": 0, "exclusiveMinimum": true },
                    "kind": { "type": "string", "enum": ["a", "b"], "nullable": true },
                    "child": { "$ref": "#/components/schemas/Child", "nullable": true },
                    "plain": { "type": "string", "nullable": false }
                }
            },
            "Child": { "type": "object", "required": ["id"], "properties": { "id": { "type": "integer" } } }
        }}});
        let api = OpenApi::from_document(document).unwrap();
        let thing = api.schema("Thing").unwrap();
        thing.validate(&json!({ "name": null, "size": 1, "kind": null, "child": null })).unwrap();
        thing.validate(&json!({ "name": "x", "size": 0.5, "kind": "a", "child": { "id": 1 } })).unwrap();
        let err =
            thing.validate(&json!({ "name": 3, "size": 0, "kind": "c", "child": {}, "plain": null })).unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.split(':').next().unwrap()).collect();
        assert_eq!(paths, ["at /child", "at /kind", "at /name", "at /plain", "at /size"], "{err}");
        assert!(api.schema("Nope").is_err());
    }

    #[tokio::test]
    async fn the_mock_chat_completion_matches_the_official_schema() {
        let mock = MockUpstream::start().await.unwrap();
        let client = reqwest::Client::new();
        let url = format!("{}/chat/completions", mock.base_url());
        let body: Value = client.post(&url).json(&chat_body(false)).send().await.unwrap().json().await.unwrap();
        validate("CreateChatCompletionResponse", &body).unwrap();

        let text = client.post(&url).json(&chat_body(true)).send().await.unwrap().text().await.unwrap();
        let chunks = OpenApi::shared().unwrap().schema("CreateChatCompletionStreamResponse").unwrap();
        let mut seen = 0;
        for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).filter(|d| *d != "[DONE]") {
            chunks.validate(&serde_json::from_str(data).unwrap()).unwrap();
            seen += 1;
        }
        assert!(seen >= 3, "{text}");

        let models: Value =
            client.get(format!("{}/models", mock.base_url())).send().await.unwrap().json().await.unwrap();
        validate("ListModelsResponse", &models).unwrap();
    }

    #[tokio::test]
    async fn a_broken_completion_fails_with_readable_problems() {
        let mock = MockUpstream::start().await.unwrap();
        let url = format!("{}/chat/completions", mock.base_url());
        let mut body: Value =
            reqwest::Client::new().post(&url).json(&chat_body(false)).send().await.unwrap().json().await.unwrap();
        body.as_object_mut().unwrap().remove("created");
        body["choices"][0]["finish_reason"] = json!("nope");
        body["usage"]["prompt_tokens"] = json!("11");
        let err = validate("CreateChatCompletionResponse", &body).unwrap_err();
        let mismatch = err.downcast_ref::<Mismatch>().unwrap();
        let text = mismatch.to_string();
        assert!(text.starts_with("value does not match schema CreateChatCompletionResponse:"), "{text}");
        assert!(mismatch.problems.iter().any(|p| p.starts_with("at /:") && p.contains("created")), "{text}");
        assert!(mismatch.problems.iter().any(|p| p.starts_with("at /choices/0/finish_reason:")), "{text}");
        assert!(mismatch.problems.iter().any(|p| p.starts_with("at /usage/prompt_tokens:")), "{text}");
    }

    /// The chat answers the translator produces (pinned by its golden files)
    /// have the official shape too.
    #[test]
    fn translated_chat_goldens_match_the_official_schemas() {
        let api = OpenApi::shared().unwrap();
        let completion = api.schema("CreateChatCompletionResponse").unwrap();
        let chunk = api.schema("CreateChatCompletionStreamResponse").unwrap();
        let read = |dir: &str| -> Vec<(String, Value)> {
            let dir = Path::new(GOLDEN).join(dir);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(".out.json"))
                .collect();
            files.sort();
            files
                .into_iter()
                .map(|p| {
                    let value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                    (p.file_name().unwrap().to_string_lossy().into_owned(), value)
                })
                .collect()
        };
        let responses = read("messages_to_chat_response");
        assert!(!responses.is_empty());
        for (name, golden) in responses {
            // Each golden pairs the answer with what its translation dropped.
            completion.validate(&golden["response"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let streams = read("messages_to_chat_stream");
        assert!(!streams.is_empty());
        for (name, stream) in streams {
            for event in stream["events"].as_array().unwrap().iter().filter(|e| e.is_object()) {
                if event.get("error").is_none() {
                    chunk.validate(event).unwrap_or_else(|e| panic!("{name}: {e}\n{event}"));
                }
            }
        }
    }
}
