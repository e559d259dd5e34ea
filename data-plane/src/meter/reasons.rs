//! What an answer says of itself beyond its usage: the model that answered
//! and why each choice ended, read into the request's `Answer` for its
//! span. Read only while tracing; a streamed event is parsed only when it
//! names a reason.

use serde::Deserialize;

use super::event::TypedEvent;
use crate::telemetry::Answer;

/// Reads the model and finish reasons of a whole answer `body` (chat or
/// messages dialect) into `answer`, only while tracing.
pub fn read_answer(body: &[u8], answer: &mut Answer) {
    if gw_telemetry::tracing_enabled() {
        (answer.model, answer.finish_reasons) = answer_of(body);
    }
}

/// Adds the finish reasons one streamed event's `data` states to `answer`,
/// only while tracing: a chat chunk's non-null `choices[].finish_reason`, a
/// messages `message_delta`'s `stop_reason`, or the status of a responses
/// stream's last event (`completed`, `incomplete`, `failed`). Only an event
/// that names one of them with a string value is parsed; the others cost a
/// byte search.
pub fn read_stream_event(data: &[u8], answer: &mut Answer) {
    if !gw_telemetry::tracing_enabled() {
        return;
    }
    let names_reason = names_string(data, b"\"finish_reason\"") || names_string(data, b"\"stop_reason\"");
    if names_reason {
        let (_, reasons) = answer_of(data);
        answer.finish_reasons.extend(reasons);
        if let Ok(event) = serde_json::from_slice::<serde_json::Value>(data)
            && let Some(reason) = event.pointer("/delta/stop_reason").and_then(serde_json::Value::as_str)
        {
            answer.finish_reasons.push(reason.to_owned());
        }
    } else if TypedEvent::is_terminal(data)
        && let Ok(event) = serde_json::from_slice::<serde_json::Value>(data)
        && let Some(status) = event.pointer("/response/status").and_then(serde_json::Value::as_str)
    {
        answer.finish_reasons.push(status.to_owned());
    }
}

/// Whether `data` has the JSON key `key` (quoted) with a string value.
fn names_string(data: &[u8], key: &[u8]) -> bool {
    let mut rest = data;
    while let Some(at) = rest.windows(key.len()).position(|w| w == key) {
        rest = &rest[at + key.len()..];
        let value = rest.trim_ascii_start().strip_prefix(b":").map(<[u8]>::trim_ascii_start);
        if value.is_some_and(|v| v.first() == Some(&b'"')) {
            return true;
        }
    }
    false
}

/// The model and finish reasons (`choices[].finish_reason`, or the
/// messages dialect's `stop_reason`) an answer states; nothing when it is
/// not JSON.
fn answer_of(body: &[u8]) -> (Option<String>, Vec<String>) {
    #[derive(Deserialize)]
    struct Body {
        model: Option<String>,
        #[serde(default)]
        choices: Vec<Choice>,
        stop_reason: Option<String>,
    }
    #[derive(Deserialize)]
    struct Choice {
        finish_reason: Option<String>,
    }
    let Ok(parsed) = serde_json::from_slice::<Body>(body) else { return (None, Vec::new()) };
    let reasons = parsed.choices.into_iter().filter_map(|c| c.finish_reason).chain(parsed.stop_reason).collect();
    (parsed.model, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stream_events_naming_a_reason_are_read_for_it() {
        assert!(names_string(br#"{"choices":[{"finish_reason" : "stop"}]}"#, b"\"finish_reason\""));
        assert!(!names_string(br#"{"choices":[{"finish_reason":null}]}"#, b"\"finish_reason\""));
        assert!(!names_string(br#"{"text":"finish_reason"}"#, b"\"finish_reason\""));
        assert!(names_string(br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#, b"\"stop_reason\""));
    }

    #[test]
    fn answers_of_both_dialects_state_their_model_and_finish_reasons() {
        let chat = br#"{"model":"gpt-4o-2024","choices":[{"message":{"content":"hi"},"finish_reason":"stop"},{"finish_reason":"length"}]}"#;
        assert_eq!(answer_of(chat), (Some("gpt-4o-2024".into()), vec!["stop".into(), "length".into()]));
        let messages = br#"{"model":"claude-x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}"#;
        assert_eq!(answer_of(messages), (Some("claude-x".into()), vec!["end_turn".into()]));
        assert_eq!(answer_of(b"not json"), (None, vec![]));
    }
}
