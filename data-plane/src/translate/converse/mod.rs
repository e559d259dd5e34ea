//! Bedrock's Converse dialect (`converse`, `converse-stream`), spoken only
//! to upstreams: requests are encoded from the internal form, answers and
//! streamed events decoded into it (and whole answers encoded back, for
//! completeness of the codec table). Converse is never a client dialect,
//! so requests are not decoded.
//!
//! Invariants: messages alternate roles (consecutive turns of one role are
//! merged); Converse's `inputTokens` excludes cache reads and writes, so
//! the gateway's prompt is `inputTokens + cacheReadInputTokens +
//! cacheWriteInputTokens`; `outputTokens` already holds any reasoning.

mod request;
mod response;
mod stream;
mod usage;

pub use self::{
    request::encode_request,
    response::{decode_response, encode_response},
    stream::Decoder,
    usage::{from_converse, to_converse},
};

use super::ir::Stop;

/// A Converse `stopReason` as the internal stop.
fn stop_of(reason: &str) -> Stop {
    match reason {
        "tool_use" => Stop::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => Stop::MaxTokens,
        "stop_sequence" => Stop::Sequence,
        "guardrail_intervened" | "content_filtered" => Stop::Refusal,
        _ => Stop::EndTurn,
    }
}

/// The internal stop as a Converse `stopReason`.
fn stop_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::ToolUse => "tool_use",
        Stop::MaxTokens => "max_tokens",
        Stop::Sequence => "stop_sequence",
        Stop::Refusal => "content_filtered",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_round_trip_and_filters_are_refusals() {
        for reason in ["end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filtered"] {
            assert_eq!(stop_reason(stop_of(reason)), reason);
        }
        assert_eq!(stop_of("guardrail_intervened"), Stop::Refusal);
        assert_eq!(stop_of("something_new"), Stop::EndTurn);
    }
}
