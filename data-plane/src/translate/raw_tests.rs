//! Requests read from raw bodies and written straight to bytes are what
//! the `Value` reading and writing made of them, byte for byte: over
//! messages requests shaped as agents send them, with any field now and
//! then of another kind, extra fields and odd spacing.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{
    Dropped, TranslateError,
    codec::{self, Dialect},
    messages, reference,
};
use crate::json_body::BodyEdit;

/// `value`, or now and then any JSON in its place.
fn or_junk(value: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    prop_oneof![8 => value, 1 => crate::fuzz::json()]
}

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![Just(json!("")), "[a-z \\n\"\\\\é]{0,12}".prop_map(Value::from)]
}

fn cache_control() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(or_junk(prop_oneof![
        Just(json!({ "type": "ephemeral" })),
        Just(json!({ "type": "ephemeral", "ttl": "1h" })),
        Just(json!({ "type": "ephemeral", "ttl": 5 })),
    ]))
}

fn source() -> impl Strategy<Value = Value> {
    or_junk(prop_oneof![
        Just(json!({ "type": "base64", "media_type": "image/png", "data": "AAAA" })),
        Just(json!({ "type": "url", "url": "https://example.com/a.pdf" })),
        Just(json!({ "type": "text", "data": "plain" })),
        Just(json!({ "type": "file", "file_id": "f1" })),
    ])
}

/// A content block of any kind messages requests carry.
fn block(depth: u32) -> BoxedStrategy<Value> {
    let kind = prop_oneof![
        Just("text"),
        Just("image"),
        Just("document"),
        Just("tool_use"),
        Just("tool_result"),
        Just("thinking"),
        Just("redacted_thinking"),
        Just("server_tool_use"),
        Just("something_new"),
    ];
    let content = if depth == 0 {
        text().boxed()
    } else {
        prop_oneof![text(), prop::collection::vec(block(depth - 1), 0..3).prop_map(Value::Array)].boxed()
    };
    let fields = (
        or_junk(kind.prop_map(Value::from)),
        or_junk(text()),
        cache_control(),
        proptest::option::of(source()),
        proptest::option::of(or_junk(prop_oneof![Just(json!("t1")), Just(json!("t2"))])),
        proptest::option::of(or_junk(prop_oneof![Just(json!({ "city": "Paris", "n": 1 })), Just(json!({}))])),
        proptest::option::of(or_junk(content)),
        proptest::option::of(or_junk(prop_oneof![Just(json!(true)), Just(json!(false))])),
        proptest::option::of((prop_oneof![Just("citations"), Just("title"), Just("signature"), Just("x")], text())),
    );
    fields
        .prop_map(|(kind, text, cache, source, id, input, content, is_error, extra)| {
            let mut block = Map::new();
            block.insert("type".into(), kind.clone());
            let text_name = match kind.as_str() {
                Some("thinking") => "thinking",
                Some("redacted_thinking") => "data",
                _ => "text",
            };
            block.insert(text_name.into(), text);
            let mut put = |name: &str, value: Option<Value>| {
                if let Some(value) = value {
                    block.insert(name.into(), value);
                }
            };
            put("cache_control", cache);
            put("source", source);
            put(if kind == "tool_result" { "tool_use_id" } else { "id" }, id.clone());
            put("name", id.map(|_| json!("Read")));
            put("input", input);
            put("content", content);
            put("is_error", is_error);
            if let Some((name, value)) = extra {
                block.insert(name.into(), value);
            }
            Value::Object(block)
        })
        .boxed()
}

fn content() -> impl Strategy<Value = Value> {
    or_junk(prop_oneof![text(), prop::collection::vec(block(1), 0..4).prop_map(Value::Array)])
}

fn turn() -> impl Strategy<Value = Value> {
    let role = or_junk(prop_oneof![
        4 => Just(json!("user")),
        4 => Just(json!("assistant")),
        1 => Just(json!("system")),
        1 => Just(json!("developer")),
        1 => Just(json!("tool")),
    ]);
    or_junk((role, content(), proptest::option::of(Just(json!({ "type": "ephemeral" })))).prop_map(
        |(role, content, cache)| {
            let mut turn = json!({ "role": role, "content": content });
            if let Some(cache) = cache {
                turn["cache_control"] = cache;
            }
            turn
        },
    ))
}

fn tool() -> impl Strategy<Value = Value> {
    let schema = json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] });
    or_junk(
        (
            proptest::option::of(or_junk(prop_oneof![Just(json!("custom")), Just(json!("web_search_20250305"))])),
            or_junk(prop_oneof![Just(json!("Read")), Just(json!("Bash"))]),
            proptest::option::of(text()),
            proptest::option::of(or_junk(Just(schema))),
            cache_control(),
        )
            .prop_map(|(kind, name, description, schema, cache)| {
                let mut tool = Map::new();
                tool.insert("name".into(), name);
                for (key, value) in
                    [("type", kind), ("description", description), ("input_schema", schema), ("cache_control", cache)]
                {
                    if let Some(value) = value {
                        tool.insert(key.into(), value);
                    }
                }
                Value::Object(tool)
            }),
    )
}

/// A messages request as agents send them, with odd fields now and then.
fn request() -> impl Strategy<Value = Value> {
    let choice = or_junk(prop_oneof![
        Just(json!({ "type": "auto" })),
        Just(json!({ "type": "any", "disable_parallel_tool_use": true })),
        Just(json!({ "type": "tool", "name": "Read" })),
        Just(json!({ "type": "none" })),
    ]);
    let thinking = or_junk(prop_oneof![
        Just(json!({ "type": "enabled", "budget_tokens": 2048 })),
        Just(json!({ "type": "disabled" })),
        Just(json!(null)),
    ]);
    let metadata = or_junk(prop_oneof![Just(json!({ "user_id": "u1" })), Just(json!({ "user_id": "u1", "x": 1 }))]);
    let numbers = prop_oneof![Just(json!(1)), Just(json!(0.5)), Just(json!(-3)), Just(json!(1e300)), Just(json!("7"))];
    (
        proptest::option::of(or_junk(prop_oneof![Just(json!("claude")), Just(json!(""))])),
        proptest::option::of(content()),
        or_junk(prop::collection::vec(turn(), 0..6).prop_map(Value::Array)),
        proptest::option::of(or_junk(prop::collection::vec(tool(), 0..3).prop_map(Value::Array))),
        (proptest::option::of(choice), proptest::option::of(thinking), proptest::option::of(metadata)),
        prop::collection::vec(
            (prop_oneof![Just("max_tokens"), Just("temperature"), Just("top_p"), Just("top_k")], numbers),
            0..4,
        ),
        (proptest::option::of(or_junk(Just(json!(["END", 1])))), proptest::option::of(or_junk(Just(json!(true))))),
        prop::collection::vec(
            (prop_oneof![Just("service_tier"), Just("x_vendor"), Just("seed")], crate::fuzz::json()),
            0..3,
        ),
    )
        .prop_map(
            |(model, system, messages, tools, (choice, thinking, metadata), numbers, (stop, stream), extra)| {
                let mut body = Map::new();
                body.insert("messages".into(), messages);
                for (key, value) in [
                    ("model", model),
                    ("system", system),
                    ("tools", tools),
                    ("tool_choice", choice),
                    ("thinking", thinking),
                    ("metadata", metadata),
                    ("stop_sequences", stop),
                    ("stream", stream),
                ] {
                    if let Some(value) = value {
                        body.insert(key.into(), value);
                    }
                }
                for (key, value) in numbers {
                    body.insert(key.into(), value);
                }
                for (key, value) in extra {
                    body.insert(key.into(), value);
                }
                Value::Object(body)
            },
        )
}

/// The translation as the `Value` reading and writing made it.
fn by_value(body: &Value, model: &str, stream: bool, edit: &BodyEdit) -> Result<(Vec<u8>, Dropped), TranslateError> {
    let (mut request, mut dropped) = reference::messages_decode(body)?;
    model.clone_into(&mut request.model);
    request.stream = stream;
    let mut encoded = reference::chat_encode(&request, &mut dropped);
    edit.apply(&mut encoded);
    Ok((encoded.to_string().into_bytes(), dropped))
}

/// `raw` parsed, as the `Value` reading had it (a float written out and
/// read back may differ in its last digit from the one generated).
fn parsed(raw: &[u8]) -> Value {
    serde_json::from_slice(raw).unwrap()
}

fn translated(raw: &[u8], model: &str, stream: bool, edit: &BodyEdit) -> Result<(Vec<u8>, Dropped), TranslateError> {
    match codec::translate_request(Dialect::Messages, Dialect::Chat, raw, model, stream, edit) {
        Ok(done) => Ok(done),
        Err(codec::Untranslated::Translate(error)) => Err(error),
        Err(codec::Untranslated::Json(error)) => panic!("{error}"),
    }
}

#[test]
fn a_body_naming_a_block_field_twice_is_read_as_its_value_is() {
    let raw = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}"#;
    assert!(messages::request::decode_raw(raw).is_none(), "left to the parsed reading");
    let body: Value = serde_json::from_slice(raw).unwrap();
    let (bytes, _) = translated(raw, "m", false, &BodyEdit::default()).unwrap();
    assert_eq!(bytes, by_value(&body, "m", false, &BodyEdit::default()).unwrap().0);
    assert!(String::from_utf8(bytes).unwrap().contains(r#""content":"b""#));
}

#[test]
fn a_body_that_is_not_json_is_refused_as_json() {
    let result = codec::translate_request(Dialect::Messages, Dialect::Chat, b"{", "m", false, &BodyEdit::default());
    assert!(matches!(result, Err(codec::Untranslated::Json(_))));
}

proptest! {
    #![proptest_config(crate::fuzz::config())]

    #[test]
    fn raw_and_parsed_readings_decode_alike(body in request(), pretty: bool) {
        let raw = if pretty { serde_json::to_vec_pretty(&body).unwrap() } else { serde_json::to_vec(&body).unwrap() };
        let body = parsed(&raw);
        let expected = reference::messages_decode(&body);
        prop_assert_eq!(messages::request::decode(&body), expected.clone());
        prop_assert_eq!(messages::request::decode_raw(&raw).unwrap(), expected);
    }

    #[test]
    fn any_json_reads_alike_raw_and_parsed(body in crate::fuzz::request_json()) {
        let raw = serde_json::to_vec(&body).unwrap();
        let body = parsed(&raw);
        let expected = reference::messages_decode(&body);
        prop_assert_eq!(messages::request::decode(&body), expected.clone());
        prop_assert_eq!(messages::request::decode_raw(&raw).unwrap(), expected);
    }

    #[test]
    fn chat_bodies_are_written_as_their_values_were(body in request(), stream: bool, edit: bool) {
        let mut set = BodyEdit::default();
        if edit {
            set.set_str("model", "gpt-5 \"mini\"");
            set.drop.push("stream_options");
        }
        let raw = serde_json::to_vec(&body).unwrap();
        let expected = by_value(&parsed(&raw), "upstream", stream, &set);
        prop_assert_eq!(translated(&raw, "upstream", stream, &set), expected);
    }
}
