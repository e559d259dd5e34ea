//! Reading a realtime session's usage: of the server's events only
//! `response.done` is parsed (a cheap substring test skips the audio
//! deltas), and its `response.usage` becomes one response's `Usage`, the
//! audio parts apart so they bill at the model's audio prices.

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
    usage: Option<RealtimeUsage>,
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

/// Whether server event `text` may be a `response.done` (the only event
/// worth parsing).
pub fn may_be_done(text: &str) -> bool {
    text.contains("\"response.done\"")
}

/// The usage of a `response.done` event `text`; `None` for any other event,
/// or a `response.done` that carries no usage (nothing to bill).
pub fn done_usage(text: &str) -> Option<Usage> {
    if !may_be_done(text) {
        return None;
    }
    let done: Done = serde_json::from_str(text).ok()?;
    if done.kind != "response.done" {
        return None;
    }
    let usage = done.response?.usage?;
    let input = usage.input_token_details;
    Some(Usage {
        prompt_tokens: usage.input_tokens,
        completion_tokens: usage.output_tokens,
        cached_tokens: input.cached_tokens,
        audio_prompt_tokens: input.audio_tokens,
        audio_cached_tokens: input.cached_tokens_details.audio_tokens,
        audio_completion_tokens: usage.output_token_details.audio_tokens,
        ..Usage::default()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

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
}
