//! Reading a realtime session's usage: of the server's events only a
//! response's `response.created` and `response.done` are parsed (a cheap
//! substring test skips the audio deltas), and a `response.done`'s
//! `response.usage` becomes that response's `Usage`, the audio parts apart
//! so they bill at the model's audio prices.

use serde::Deserialize;

use crate::pricing::Usage;

#[derive(Deserialize)]
struct Done {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    usage: Option<RealtimeUsage>,
}

/// A server event that opens or closes a response.
#[derive(Debug, PartialEq)]
pub enum Lifecycle {
    /// `response.created`: response `id` started (asked for by the client,
    /// or by the server's own turn detection).
    Created { id: Option<String> },
    /// `response.done`: response `id` ended (completed, cancelled, failed
    /// or cut short), having used `usage` when it says.
    Done { id: Option<String>, usage: Option<Usage> },
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RealtimeUsage {
    input_tokens: i64,
    output_tokens: i64,
    input_token_details: InputDetails,
    output_token_details: Parts,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct InputDetails {
    audio_tokens: i64,
    cached_tokens: i64,
    cached_tokens_details: Parts,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Parts {
    audio_tokens: i64,
}

/// Whether server event `text` may open or close a response (the only
/// events worth parsing).
fn may_be_lifecycle(text: &str) -> bool {
    text.contains("\"response.done\"") || text.contains("\"response.created\"")
}

/// What server event `text` says of a response's life; `None` for any
/// other event.
pub fn lifecycle(text: &str) -> Option<Lifecycle> {
    if !may_be_lifecycle(text) {
        return None;
    }
    let event: Done = serde_json::from_str(text).ok()?;
    let response = event.response;
    match event.kind.as_str() {
        "response.created" => Some(Lifecycle::Created { id: response.and_then(|r| r.id) }),
        "response.done" => {
            let (id, usage) = response.map(|r| (r.id, r.usage.map(to_usage))).unwrap_or_default();
            Some(Lifecycle::Done { id, usage })
        }
        _ => None,
    }
}

/// A response's reported usage as billed.
fn to_usage(usage: RealtimeUsage) -> Usage {
    let input = usage.input_token_details;
    Usage {
        prompt_tokens: usage.input_tokens,
        completion_tokens: usage.output_tokens,
        cached_tokens: input.cached_tokens,
        audio_prompt_tokens: input.audio_tokens,
        audio_cached_tokens: input.cached_tokens_details.audio_tokens,
        audio_completion_tokens: usage.output_token_details.audio_tokens,
        ..Usage::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    /// The usage of a `response.done` event `text`, if it is one with usage.
    fn done_usage(text: &str) -> Option<Usage> {
        match lifecycle(text)? {
            Lifecycle::Done { usage, .. } => usage,
            Lifecycle::Created { .. } => None,
        }
    }

    #[test]
    fn response_done_usage_keeps_its_audio_parts() {
        let done = r#"{"type":"response.done","event_id":"e1","response":{"id":"r1","status":"completed",
            "usage":{"total_tokens":330,"input_tokens":200,"output_tokens":130,
            "input_token_details":{"text_tokens":80,"audio_tokens":120,"cached_tokens":64,
              "cached_tokens_details":{"text_tokens":32,"audio_tokens":32}},
            "output_token_details":{"text_tokens":30,"audio_tokens":100}}}}"#;
        let usage = done_usage(done).unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens), (200, 130, 64));
        assert_eq!(
            (usage.audio_prompt_tokens, usage.audio_cached_tokens, usage.audio_completion_tokens),
            (120, 32, 100)
        );
    }

    #[test]
    fn other_events_and_usage_free_responses_bill_nothing() {
        assert_eq!(done_usage(r#"{"type":"response.audio.delta","delta":"AAAA"}"#), None);
        assert_eq!(done_usage(r#"{"type":"response.created","response":{"status":"in_progress"}}"#), None);
        assert_eq!(done_usage(r#"{"type":"response.done","response":{"status":"cancelled","usage":null}}"#), None);
        assert_eq!(done_usage(r#"{"type":"response.text.delta","delta":"\"response.done\""}"#), None);
        assert_eq!(done_usage("not json \"response.done\""), None);
        let text_only =
            done_usage(r#"{"type":"response.done","response":{"usage":{"input_tokens":5,"output_tokens":2}}}"#);
        assert_eq!(text_only, Some(Usage { prompt_tokens: 5, completion_tokens: 2, ..Usage::default() }));
    }

    #[test]
    fn responses_open_and_close_by_id() {
        let created = r#"{"type":"response.created","response":{"id":"r7","status":"in_progress"}}"#;
        assert_eq!(lifecycle(created), Some(Lifecycle::Created { id: Some("r7".into()) }));
        let cancelled = r#"{"type":"response.done","response":{"id":"r7","status":"cancelled",
            "usage":{"input_tokens":5,"output_tokens":1}}}"#;
        let usage = Usage { prompt_tokens: 5, completion_tokens: 1, ..Usage::default() };
        assert_eq!(lifecycle(cancelled), Some(Lifecycle::Done { id: Some("r7".into()), usage: Some(usage) }));
        let bare = r#"{"type":"response.done","response":{"id":"r8","status":"failed"}}"#;
        assert_eq!(lifecycle(bare), Some(Lifecycle::Done { id: Some("r8".into()), usage: None }));
        assert_eq!(lifecycle(r#"{"type":"response.output_audio.delta","response_id":"r7"}"#), None);
        assert_eq!(lifecycle(r#"{"type":"response.text.delta","delta":"\"response.created\""}"#), None);
    }
}
