//! The Gemini `generateContent` dialect (Gemini API, Vertex Gemini models,
//! Gemini CLI and the google-genai SDK): its request, whole answer and
//! streamed answer decoded into the internal form (`ir`) and encoded from
//! it. Streams are SSE whose every `data:` payload is a whole
//! `GenerateContentResponse` chunk, or, for clients that do not ask for
//! `alt=sse`, one JSON array of those chunks.
//!
//! Invariants: Gemini function calls carry no ids, so decoders give each a
//! stable one (the call's own `id` when it has one, else one derived from
//! its position) and answer each `functionResponse` with the oldest
//! unanswered call of its name; encoders name a tool result's function
//! from the call with its id. Thought signatures ride on the part after
//! the thought in Gemini and on thinking parts in the internal form.

mod parts;
mod request;
mod response;
mod stream;
pub mod usage;

pub use self::{
    request::{decode_request, encode_request},
    response::{decode_response, encode_response},
    stream::{Decoder, Encoder},
};

use super::ir::Stop;

/// A Gemini `finishReason` as the internal stop; `called_tools` makes a
/// natural end a tool-use stop (Gemini says `STOP` for both).
fn stop_of(finish_reason: &str, called_tools: bool) -> Stop {
    match finish_reason {
        "MAX_TOKENS" => Stop::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION"
        | "LANGUAGE" => Stop::Refusal,
        _ if called_tools => Stop::ToolUse,
        _ => Stop::EndTurn,
    }
}

/// The internal stop as a Gemini `finishReason`.
fn finish_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn | Stop::Sequence | Stop::ToolUse => "STOP",
        Stop::MaxTokens => "MAX_TOKENS",
        Stop::Refusal => "SAFETY",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_round_trip_where_gemini_has_a_word() {
        for reason in ["STOP", "MAX_TOKENS", "SAFETY"] {
            assert_eq!(finish_reason(stop_of(reason, false)), reason);
        }
        assert_eq!(stop_of("STOP", true), Stop::ToolUse);
        assert_eq!(stop_of("RECITATION", true), Stop::Refusal);
        assert_eq!(stop_of("FINISH_REASON_UNSPECIFIED", false), Stop::EndTurn);
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_body_is_decoded_or_refused_and_encoded_back_without_a_panic(body in crate::fuzz::request_json()) {
            if let Ok((request, mut dropped)) = decode_request(&body) {
                let _ = encode_request(&request, &mut dropped);
            }
            let answer = decode_response(&body);
            let _ = encode_response(&answer, &crate::translate::Answering::default());
        }

        #[test]
        fn any_stream_of_payloads_is_decoded_and_encoded_without_a_panic(
            payloads in proptest::collection::vec(crate::fuzz::body(), 0..12),
            json_array: bool,
        ) {
            use crate::translate::ir::{Decode as _, Encode as _};
            let answering = crate::translate::Answering { json_array, ..Default::default() };
            let (mut decoder, mut encoder, mut out) = (Decoder::new(), Encoder::new(&answering), Vec::new());
            for payload in &payloads {
                for event in decoder.push(payload) {
                    encoder.push(&event, &mut out);
                }
            }
            for event in decoder.finish() {
                encoder.push(&event, &mut out);
            }
            encoder.finish(&mut out);
        }
    }
}
