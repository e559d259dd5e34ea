//! Translation between the wire dialects the gateway speaks, through one
//! internal form (`ir`): each dialect has a decoder into it and an encoder
//! out of it (`chat`, `messages`, `responses`, `gemini`, `converse`), and
//! `codec` says which serves each dialect. Pure functions over JSON values
//! plus stateful stream decoders and encoders; nothing here does I/O or
//! reads a clock.
//!
//! Each encoder maps every field of the form the target has a place for.
//! What has no place is dropped on purpose and noted in a [`Dropped`] for
//! the caller to log. Fields of the client's dialect the form does not know
//! ride in `ir::Request::extra`: an encoder drops (and notes) those it
//! knows belong to another dialect and passes the rest, so vendor
//! extensions reach the upstream.

use serde_json::{Map, Value, json};

mod chat;
pub mod codec;
mod converse;
mod dropped;
mod gemini;
pub mod ir;
mod json_out;
mod lenient;
mod messages;
pub mod responses;
mod sse;
mod usage;

pub use codec::{Answering, Dialect};
pub use dropped::Dropped;

/// Why a request could not be translated; the client's fault (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    #[error("request body must be a JSON object")]
    NotAnObject,
    #[error("invalid {field}: {reason}")]
    Invalid { field: String, reason: &'static str },
    #[error("{0:?} is spoken to channels, never by clients")]
    NotClientFacing(codec::Dialect),
}

// === pairings the golden tests compose ===
//
// Every pairing in service goes through `codec`'s table; these name the
// chat/messages ones for the golden files and fuzz tests.

/// A messages request as a chat-completions request, and what it dropped:
/// the messages decoder and the chat encoder.
#[cfg(test)]
pub fn messages_to_chat_request_noted(request: &Value) -> Result<(Value, Dropped), TranslateError> {
    let (form, mut dropped) = messages::request::decode(request)?;
    let body = chat::request::encode(&form, &mut dropped);
    Ok((body, dropped))
}

/// A chat-completions request as a messages request, and what it dropped:
/// the chat decoder and the messages encoder.
#[cfg(test)]
pub fn chat_to_messages_request_noted(request: &Value) -> Result<(Value, Dropped), TranslateError> {
    let (form, mut dropped) = chat::request::decode(request)?;
    let body = messages::request::encode(&form, &mut dropped);
    Ok((body, dropped))
}

/// A chat completion as a messages response (the upstream's `id` and
/// `model` kept).
#[cfg(test)]
pub fn chat_to_messages_response(completion: &Value) -> Value {
    messages::response::encode(&chat::response::decode(completion), &Answering::default()).0
}

/// A messages response as a chat completion created at `created` (Unix
/// seconds), and what it dropped.
#[cfg(test)]
pub fn messages_to_chat_response_noted(response: &Value, created: i64) -> (Value, Dropped) {
    let (form, mut dropped) = messages::response::decode(response);
    let answering = Answering { created, ..Answering::default() };
    let (body, more) = chat::response::encode(&form, &answering);
    dropped.extend(&more);
    (body, dropped)
}

/// The stream decoder and encoder of a chat upstream for a messages client.
#[cfg(test)]
pub fn chat_to_messages_stream() -> (chat::Decoder, messages::Encoder) {
    (chat::Decoder::new(), messages::Encoder::new(&Answering::default()))
}

/// The stream decoder and encoder of a messages upstream for a chat client
/// whose chunks say they were `created` then; the usage chunk is sent when
/// the client asked (`include_usage`).
#[cfg(test)]
pub fn messages_to_chat_stream(include_usage: bool, created: i64) -> (messages::Decoder, chat::Encoder) {
    let answering = Answering { include_usage, created, ..Answering::default() };
    (messages::Decoder::new(), chat::Encoder::new(&answering))
}

// === shared helpers ===

/// The `(media type, base64 data)` of a `data:<type>;base64,<data>` URL.
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// Media as a URL: a data URL for inline data.
fn media_url(media: &ir::Media) -> String {
    match media {
        ir::Media::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ir::Media::Url { url, .. } => url.clone(),
    }
}

/// A tool call's JSON-encoded `arguments` as an object. Every dialect but
/// chat insists on an object, so anything else (an empty string, or
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

/// A `cache_control` marker as a cache mark: an object, with `ttl: "1h"`
/// for the long one.
fn cache_mark(marker: Option<&Value>) -> Option<ir::CacheMark> {
    let marker = marker.filter(|m| m.is_object())?;
    Some(match str_field(marker, "ttl") {
        Some("1h") => ir::CacheMark::OneHour,
        _ => ir::CacheMark::FiveMinutes,
    })
}

/// A cache mark as a `cache_control` marker.
fn encode_cache_mark(mark: ir::CacheMark) -> Value {
    match mark {
        ir::CacheMark::FiveMinutes => json!({ "type": "ephemeral" }),
        ir::CacheMark::OneHour => json!({ "type": "ephemeral", "ttl": "1h" }),
    }
}

/// False for the values a client sends to mean "not set" (`null`, `false`,
/// an empty string or array), whose loss is not worth a note.
fn meaningful(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

fn invalid(field: impl Into<String>, reason: &'static str) -> TranslateError {
    TranslateError::Invalid { field: field.into(), reason }
}

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod raw_tests;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod round_trip;
#[cfg(test)]
mod stream_tests;

#[cfg(test)]
mod tests {
    use super::{
        ir::{Decode, Encode, Stop},
        *,
    };

    #[test]
    fn stops_round_trip_where_each_dialect_has_a_word() {
        for stop in [Stop::EndTurn, Stop::MaxTokens, Stop::Sequence, Stop::ToolUse, Stop::Refusal] {
            assert_eq!(messages::response::stop(messages::response::stop_reason(stop)), stop);
            let finish = chat::response::finish_reason(stop);
            let back = chat::response::answer_stop(Some(finish), false, false);
            assert_eq!(back, if stop == Stop::Sequence { Stop::EndTurn } else { stop });
        }
        assert_eq!(messages::response::stop("something_new"), Stop::EndTurn);
        assert_eq!(messages::response::stop("pause_turn"), Stop::EndTurn);
        assert_eq!(messages::response::stop("model_context_window_exceeded"), Stop::MaxTokens);
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

    /// Pushes `events` through `decoder` and `encoder` as the relay does.
    fn relay(mut decoder: impl Decode, mut encoder: impl Encode, events: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut decoded: Vec<_> = events.iter().flat_map(|event| decoder.push(event)).collect();
        decoded.extend(decoder.finish());
        for event in &decoded {
            encoder.push(event, &mut out);
            if *event == ir::Event::End {
                encoder.finish(&mut out);
            }
        }
        out
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
            let (decoder, encoder) = chat_to_messages_stream();
            let _ = relay(decoder, encoder, &events);
            let (decoder, encoder) = messages_to_chat_stream(include_usage, 0);
            let _ = relay(decoder, encoder, &events);
        }
    }
}
