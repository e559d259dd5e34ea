//! Translation between the two chat dialects the gateway speaks: OpenAI chat
//! completions and the messages API. Pure functions over JSON values plus two
//! stateful stream translators; nothing here does I/O or reads a clock.
//!
//! Each direction maps every field the target has a place for. Fields of the
//! source dialect with no place in the target are dropped on purpose: each
//! translator's doc lists them, and the `…_noted` variants and
//! [`MessagesToChatStream::dropped`] report the ones a given body had as a
//! [`Dropped`] for the caller to log. Fields neither dialect defines pass
//! through untouched, so vendor extensions reach the upstream.

use serde_json::{Map, Value};

pub mod codec;
mod converse;
mod dropped;
pub mod ir;
mod request;
mod response;
pub mod responses;
mod stream;
mod text_chunk;
mod usage;

pub use codec::{Answering, Dialect};
pub use dropped::Dropped;
// Public API for the handlers, which are being reworked to log what was
// dropped and to serve count_tokens; not every entry point is called yet.
pub use request::{chat_to_messages_request_noted, messages_to_chat_request_noted};
pub use response::{chat_to_messages_response, messages_to_chat_response_noted};
pub use stream::{ChatToMessagesStream, MessagesToChatStream, SseEvent};

/// Why a request could not be translated; the client's fault (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    #[error("request body must be a JSON object")]
    NotAnObject,
    #[error("invalid {field}: {reason}")]
    Invalid { field: String, reason: &'static str },
    #[error("{0:?} requests cannot be translated yet")]
    Unsupported(codec::Dialect),
}

// === stop reasons ===

/// A chat `finish_reason` as a messages `stop_reason`. `content_filter`
/// becomes `refusal`, the messages API's word for a filtered answer; a
/// reason this gateway does not know becomes `end_turn`.
fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// A messages `stop_reason` as a chat `finish_reason`: both natural ends
/// (`end_turn`, `stop_sequence`) and `pause_turn` are `stop`; context and
/// token limits are `length`.
fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// The `stop_reason` of a chat answer: a cut answer stays `max_tokens`;
/// otherwise an answer that called tools stops with `tool_use` and a refusal
/// with `refusal`, whatever `finish_reason` the upstream gave (some give
/// `stop` for both).
fn answer_stop_reason(finish_reason: Option<&str>, called_tools: bool, refused: bool) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        _ if called_tools => "tool_use",
        _ if refused => "refusal",
        Some(reason) => stop_reason(reason),
        None => "end_turn",
    }
}

// === shared helpers ===

/// The `(media type, base64 data)` of a `data:<type>;base64,<data>` URL.
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// A tool call's JSON-encoded `arguments` as a messages `input` object. The
/// messages API insists on an object, so anything else (an empty string, or
/// arguments the model garbled) becomes `{}`.
fn arguments_to_input(arguments: Option<&Value>) -> Value {
    match arguments {
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(input @ Value::Object(_)) => input,
            _ => Value::Object(Map::new()),
        },
        Some(input @ Value::Object(_)) => input.clone(),
        _ => Value::Object(Map::new()),
    }
}

/// Copies the fields of `from` that `handled` does not name into `to`.
fn pass_through(from: &Map<String, Value>, handled: &[&str], to: &mut Map<String, Value>) {
    for (key, value) in from {
        if !handled.contains(&key.as_str()) {
            to.insert(key.clone(), value.clone());
        }
    }
}

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod golden;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_round_trip_where_both_dialects_have_a_word() {
        for finish in ["stop", "length", "tool_calls", "content_filter"] {
            assert_eq!(finish_reason(stop_reason(finish)), finish);
        }
        assert_eq!(stop_reason("something_new"), "end_turn");
        assert_eq!(finish_reason("stop_sequence"), "stop");
        assert_eq!(finish_reason("pause_turn"), "stop");
    }

    #[test]
    fn only_base64_data_urls_are_split() {
        assert_eq!(parse_data_url("data:image/png;base64,AAAA"), Some(("image/png", "AAAA")));
        assert_eq!(parse_data_url("data:text/plain,hello"), None);
        assert_eq!(parse_data_url("https://example.com/a.png"), None);
    }

    #[test]
    fn garbled_arguments_become_an_empty_input() {
        let args = |s: &str| arguments_to_input(Some(&Value::String(s.into())));
        assert_eq!(args(r#"{"city":"Paris"}"#), serde_json::json!({"city": "Paris"}));
        assert_eq!(args(""), serde_json::json!({}));
        assert_eq!(args("{\"city\":"), serde_json::json!({}));
        assert_eq!(args("[1]"), serde_json::json!({}));
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_request_is_translated_or_refused_with_a_4xx(request in crate::fuzz::request_json()) {
            for translated in [
                messages_to_chat_request_noted(&request).map(|(v, _)| v),
                chat_to_messages_request_noted(&request).map(|(v, _)| v),
            ] {
                if let Err(error) = translated {
                    let error = crate::error::ProxyError::Untranslatable(error.to_string());
                    crate::fuzz::assert_client_error(&error)?;
                }
            }
        }

        #[test]
        fn any_response_is_translated_without_a_panic(response in crate::fuzz::request_json(), created: i64) {
            let _ = chat_to_messages_response(&response);
            let _ = messages_to_chat_response_noted(&response, created);
        }

        #[test]
        fn any_stream_of_events_is_translated_without_a_panic(
            events in proptest::collection::vec(crate::fuzz::body(), 0..12),
            include_usage: bool,
        ) {
            let mut to_messages = ChatToMessagesStream::new();
            let mut to_chat = MessagesToChatStream::new(include_usage, 0);
            for event in &events {
                let _ = (to_messages.push(event), to_chat.push(event));
            }
            let _ = (to_messages.finish(), to_chat.finish(), to_messages.usage(), to_chat.usage());
        }
    }
}
