//! Golden tests. Each case under `tests/golden/translate/<direction>/` is a
//! pair of files, `<case>.in.json` and `<case>.out.json`; the translation of
//! the first must equal the second exactly (as JSON values). Translations
//! that report what they dropped are written as `{"request"|"response":
//! <body>, "dropped": [<names>]}`; a translation error as
//! `{"error": "<message>"}`. Every pairing is the source dialect's decoder
//! and the target's encoder. Streams are fed one event's data at a time and
//! then ended; their output lists the events written for the client, the
//! last usage the decoder reported (what the meter reads) and, from
//! messages, what decoder and encoder dropped.
//!
//! `UPDATE_GOLDEN=1 cargo test -p gw-data-plane golden` rewrites the
//! `.out.json` files from the current output: review the diff.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{
    ir::{Decode, Encode, Event},
    *,
};
use crate::pricing::Usage;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/translate");
/// `created` of every translated chat completion.
const CREATED: i64 = 1_700_000_000;

/// Runs every case of `direction` through `translate`; reports all
/// mismatches at once.
fn run(direction: &str, translate: impl Fn(&Value) -> Value) {
    let dir = Path::new(DIR).join(direction);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".in.json"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for input_path in cases {
        let name = input_path.file_name().unwrap().to_string_lossy().trim_end_matches(".in.json").to_owned();
        let input: Value = serde_json::from_str(&std::fs::read_to_string(&input_path).unwrap())
            .unwrap_or_else(|e| panic!("{direction}/{name}.in.json: {e}"));
        let actual = translate(&input);
        let output_path = input_path.with_file_name(format!("{name}.out.json"));
        if update {
            std::fs::write(&output_path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
            continue;
        }
        let expected: Value = match std::fs::read_to_string(&output_path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| panic!("{direction}/{name}.out.json: {e}")),
            Err(e) => panic!("{direction}/{name}.out.json: {e}"),
        };
        if actual != expected {
            failures.push(format!(
                "{direction}/{name}:\n--- expected\n{}\n--- actual\n{}",
                serde_json::to_string_pretty(&expected).unwrap(),
                serde_json::to_string_pretty(&actual).unwrap()
            ));
        }
    }
    assert!(failures.is_empty(), "{} golden case(s) differ:\n{}", failures.len(), failures.join("\n\n"));
}

fn request_or_error(result: Result<(Value, Dropped), TranslateError>) -> Value {
    match result {
        Ok((request, dropped)) => json!({ "request": request, "dropped": dropped.names() }),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

fn usage_json(usage: Option<Usage>) -> Value {
    usage.map_or(Value::Null, |u| {
        json!({ "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "cached_tokens": u.cached_tokens })
    })
}

/// The data to push for one input event: a string as is (`[DONE]`, or
/// deliberately broken data), anything else as compact JSON.
fn data_of(event: &Value) -> Vec<u8> {
    match event {
        Value::String(raw) => raw.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

/// The events an encoder wrote, as JSON; checks the framing on the way.
fn events_json(wire: &[u8]) -> Vec<Value> {
    let wire = String::from_utf8(wire.to_vec()).unwrap();
    assert!(wire.is_empty() || wire.ends_with("\n\n"), "{wire:?}");
    let mut events = Vec::new();
    for event in wire.split_terminator("\n\n") {
        let (name, data) = match event.strip_prefix("event: ") {
            Some(rest) => {
                let (name, data) = rest.split_once('\n').unwrap();
                (Some(name), data)
            }
            None => (None, event),
        };
        let data = data.strip_prefix("data: ").unwrap_or_else(|| panic!("{event:?}"));
        assert!(!data.contains('\n'), "{event:?}");
        let data = if data == "[DONE]" { json!("[DONE]") } else { serde_json::from_str(data).unwrap() };
        events.push(match name {
            Some(name) => {
                assert_eq!(data["type"], name, "a messages event's type names its event");
                json!({ "event": name, "data": data })
            }
            None => data,
        });
    }
    events
}

/// Runs a stream's input through `decoder` and `encoder` as the relay
/// does: the events written, the last usage, what both dropped.
fn stream(mut decoder: impl Decode, mut encoder: impl Encode, input: &[Value]) -> (Vec<Value>, Value, Dropped) {
    let mut decoded = Vec::new();
    for data in input {
        decoded.extend(decoder.push(&data_of(data)));
    }
    decoded.extend(decoder.finish());
    let mut wire = Vec::new();
    let mut usage = None;
    for event in &decoded {
        if let Event::Usage(u) = event {
            usage = Some(*u);
        }
        encoder.push(event, &mut wire);
        if *event == Event::End {
            encoder.finish(&mut wire);
        }
    }
    let mut dropped = decoder.dropped();
    dropped.extend(&encoder.dropped());
    (events_json(&wire), usage_json(usage), dropped)
}

#[test]
fn messages_requests_translate_to_chat_requests() {
    run("messages_to_chat_request", |input| request_or_error(messages_to_chat_request_noted(input)));
}

#[test]
fn chat_requests_translate_to_messages_requests() {
    run("chat_to_messages_request", |input| request_or_error(chat_to_messages_request_noted(input)));
}

#[test]
fn chat_responses_translate_to_messages_responses() {
    run("chat_to_messages_response", chat_to_messages_response);
}

#[test]
fn messages_responses_translate_to_chat_responses() {
    run("messages_to_chat_response", |input| {
        let (response, dropped) = messages_to_chat_response_noted(input, CREATED);
        json!({ "response": response, "dropped": dropped.names() })
    });
}

#[test]
fn chat_streams_translate_to_messages_streams() {
    run("chat_to_messages_stream", |input| {
        let (decoder, encoder) = chat_to_messages_stream();
        let (events, usage, _) = stream(decoder, encoder, input["chunks"].as_array().unwrap());
        json!({ "events": events, "usage": usage })
    });
}

#[test]
fn messages_streams_translate_to_chat_streams() {
    run("messages_to_chat_stream", |input| {
        let include_usage = input["include_usage"].as_bool().unwrap();
        let (decoder, encoder) = messages_to_chat_stream(include_usage, CREATED);
        let (events, usage, dropped) = stream(decoder, encoder, input["events"].as_array().unwrap());
        json!({ "events": events, "usage": usage, "dropped": dropped.names() })
    });
}
