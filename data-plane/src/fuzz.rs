//! Inputs for the property tests of everything that reads client or
//! upstream bytes (request bodies, multipart forms, SSE streams, dialect
//! translation): arbitrary bytes, and JSON shaped like a request but with
//! fields of every wrong type. The properties live beside each parser and
//! assert that it never panics and refuses only with a 4xx `ProxyError`.
//! Cases per property: `PROPTEST_CASES` (default 256).

use proptest::prelude::*;
use serde_json::{Map, Value};

use crate::error::ProxyError;

/// Field names the parsers and translators look at, so that generated
/// objects reach past the first "missing field" check.
const KEYS: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "max_tokens",
    "max_output_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "include_usage",
    "system",
    "tools",
    "tool_choice",
    "tool_calls",
    "tool_use_id",
    "id",
    "name",
    "input",
    "arguments",
    "function",
    "image_url",
    "url",
    "source",
    "data",
    "media_type",
    "thinking",
    "reasoning_content",
    "stop",
    "stop_sequences",
    "temperature",
    "n",
    "choices",
    "delta",
    "index",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "message",
    "content_block",
    "stop_reason",
    "error",
    "metadata",
];

/// Roles and types the parsers branch on.
const WORDS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "text",
    "image",
    "image_url",
    "tool_use",
    "tool_result",
    "thinking",
    "function",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "text_delta",
    "input_json_delta",
    "auto",
    "any",
    "none",
    "stop",
    "length",
    "tool_calls",
    "end_turn",
    "max_tokens",
    "[DONE]",
    "",
];

/// The property-test settings: `PROPTEST_CASES` cases (256 unless set),
/// no failure files outside the crate's `proptest-regressions`.
pub fn config() -> ProptestConfig {
    ProptestConfig { failure_persistence: None, ..ProptestConfig::default() }
}

/// Any JSON value, nested a few levels, with request-like keys and words.
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(WORDS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8).prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(KEYS).prop_map(str::to_owned), 1 => ".{0,8}"]
}

/// A JSON object shaped like a chat or messages request (or a response, or
/// a stream event) whose fields may hold anything.
pub fn request_json() -> impl Strategy<Value = Value> {
    let message = prop::collection::vec((key(), json()), 0..5).prop_map(|fields| {
        let mut object: Map<String, Value> = fields.into_iter().collect();
        object.entry("role").or_insert_with(|| Value::from("user"));
        Value::Object(object)
    });
    (prop::collection::vec((key(), json()), 0..8), prop::collection::vec(message, 0..4), any::<u8>()).prop_map(
        |(fields, messages, keep)| {
            let mut object: Map<String, Value> = fields.into_iter().collect();
            if keep & 1 == 0 {
                object.entry("model").or_insert_with(|| Value::from("gpt-4o"));
            }
            if keep & 2 == 0 {
                object.entry("messages").or_insert_with(|| Value::Array(messages));
            }
            if keep & 4 == 0 {
                object.entry("max_tokens").or_insert_with(|| Value::from(16));
            }
            Value::Object(object)
        },
    )
}

/// A request body: arbitrary bytes, a request-like object, or one cut
/// short or with a byte changed.
pub fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        request_json().prop_map(|v| v.to_string().into_bytes()),
        json().prop_map(|v| v.to_string().into_bytes()),
        (request_json(), any::<prop::sample::Index>(), any::<u8>(), any::<bool>()).prop_map(
            |(value, at, byte, cut)| {
                let mut bytes = value.to_string().into_bytes();
                let at = at.index(bytes.len());
                match cut {
                    true => bytes.truncate(at),
                    false => bytes[at] = byte,
                }
                bytes
            }
        ),
    ]
}

/// An SSE stream as the upstream might send it, split into chunks at
/// arbitrary points: events of request-like JSON, `[DONE]`, comments,
/// event names, stray bytes and every line ending.
pub fn sse_chunks() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let line = prop_oneof![
        request_json().prop_map(|v| format!("data: {v}")),
        json().prop_map(|v| format!("data: {v}")),
        prop::sample::select(WORDS).prop_map(|w| format!("event: {w}")),
        Just("data: [DONE]".to_owned()),
        Just(": keep-alive".to_owned()),
        ".{0,16}",
    ];
    let ending = prop::sample::select(&["\n", "\r\n", "\r", "\n\n", "\r\n\r\n", ""][..]);
    let stream = prop::collection::vec((line, ending), 0..12).prop_map(|lines| {
        lines.into_iter().flat_map(|(line, end)| [line, end.to_owned()]).collect::<String>().into_bytes()
    });
    (stream, prop::collection::vec(any::<prop::sample::Index>(), 0..6)).prop_map(|(bytes, cuts)| {
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut chunks = Vec::new();
        let mut from = 0;
        for cut in cuts.into_iter().chain([bytes.len()]) {
            chunks.push(bytes[from..cut.max(from)].to_vec());
            from = cut.max(from);
        }
        chunks
    })
}

/// Fails unless `error` is a refusal of the client's request: a 4xx.
pub fn assert_client_error(error: &ProxyError) -> Result<(), TestCaseError> {
    let status = error.status().as_u16();
    prop_assert!((400..500).contains(&status), "{error:?} is a {status}, not a 4xx");
    Ok(())
}

/// Runs `future` to completion on a fresh single-threaded runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(future),
        Err(error) => panic!("no runtime: {error}"),
    }
}

/// A multipart form with the boundary `BOUNDARY`: text fields and files
/// with request-like names and any content, then maybe cut short, changed
/// in one byte, or replaced by arbitrary bytes.
pub fn form() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        prop::sample::select(&["model", "prompt", "seconds", "size", "n", "stream", "file", "input_reference"][..])
            .prop_map(str::to_owned),
        ".{0,8}",
    ];
    let part = (name, prop::option::of("[a-z.]{0,8}"), prop::collection::vec(any::<u8>(), 0..64), any::<bool>());
    let whole = prop::collection::vec(part, 0..6).prop_map(|parts| {
        let mut body = Vec::new();
        for (name, filename, content, typed) in parts {
            body.extend_from_slice(
                format!("--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"{name}\"").as_bytes(),
            );
            if let Some(filename) = filename {
                body.extend_from_slice(format!("; filename=\"{filename}\"").as_bytes());
            }
            if typed {
                body.extend_from_slice(b"\r\ncontent-type: application/octet-stream");
            }
            body.extend_from_slice(b"\r\n\r\n");
            body.extend_from_slice(&content);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        body
    });
    prop_oneof![
        3 => whole.clone(),
        2 => (whole, any::<prop::sample::Index>(), any::<u8>(), any::<bool>()).prop_map(|(mut body, at, byte, cut)| {
            let at = at.index(body.len());
            match cut {
                true => body.truncate(at),
                false => body[at] = byte,
            }
            body
        }),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

/// The boundary of every `form()`.
pub const BOUNDARY: &str = "fuzzboundary";
