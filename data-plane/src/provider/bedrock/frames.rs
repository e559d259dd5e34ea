//! Bedrock's streamed answers in AWS's binary event-stream framing
//! (`application/vnd.amazon.eventstream`), read frame by frame as bytes
//! arrive; each frame's prelude and message CRCs are checked by
//! `aws-smithy-eventstream`. Each event's payload goes to an `EventRelay`
//! as one SSE event's data would: an `invoke-with-response-stream` `chunk`
//! as the messages event its base64 `bytes` hold, a `converse-stream` event
//! as `{"<event type>": <payload>}` (the JSON shape of Converse's stream
//! union). An exception frame goes to the relay in the messages error shape
//! (`{"type":"error","error":{"type","message"}}`, which the messages and
//! converse decoders both read as the internal form's `Error`), and ends
//! what is relayed; so does a frame that fails its checks. Either way the
//! answer is cut short and never complete.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use serde_json::Value;

use crate::meter::{
    Meter,
    pump::{EventRelay, Relay},
};

/// An AWS event stream split into events for the relay `R` (in practice
/// `dialect::through::Through` over the channel dialect's decoder).
pub struct Frames<R> {
    relay: R,
    decoder: MessageFrameDecoder,
    buf: BytesMut,
    /// An exception or a broken frame went by: nothing more is relayed.
    broken: bool,
}

/// What one frame holds for the relay.
#[derive(Debug, PartialEq)]
enum Frame {
    /// An event's payload in the shape the dialect's decoder reads.
    Event(Bytes),
    /// An event that carries nothing for the answer (`initial-response`).
    Skip,
    /// The upstream failed mid-stream.
    Exception { kind: String, message: String },
}

// === impl Frames ===

impl<R: EventRelay> Frames<R> {
    /// Reads an event stream for `relay`.
    pub fn new(relay: R) -> Frames<R> {
        Frames { relay, decoder: MessageFrameDecoder::new(), buf: BytesMut::new(), broken: false }
    }
}

impl<R: EventRelay> Relay for Frames<R> {
    fn push(&mut self, chunk: Bytes, mut meter: Option<&mut Meter>) -> Bytes {
        if self.broken {
            return Bytes::new();
        }
        self.buf.extend_from_slice(&chunk);
        let mut out = BytesMut::new();
        loop {
            let message = match self.decoder.decode_frame(&mut self.buf) {
                Ok(DecodedFrame::Complete(message)) => message,
                Ok(DecodedFrame::Incomplete) => break,
                Err(error) => {
                    tracing::warn!(%error, "bedrock event stream frame is broken");
                    self.broken = true;
                    break;
                }
            };
            match frame(&message) {
                Frame::Event(payload) => {
                    out.extend_from_slice(&self.relay.event(payload.clone(), &payload, meter.as_deref_mut()));
                }
                Frame::Skip => {}
                Frame::Exception { kind, message } => {
                    tracing::warn!(exception = %kind, %message, "bedrock stream failed upstream");
                    let error = serde_json::json!({
                        "type": "error",
                        "error": { "type": error_type(&kind), "message": message },
                    });
                    let error = Bytes::from(error.to_string());
                    out.extend_from_slice(&self.relay.event(error.clone(), &error, meter.as_deref_mut()));
                    self.broken = true;
                    break;
                }
            }
        }
        out.freeze()
    }

    fn finish(&mut self, meter: Option<&mut Meter>) -> Bytes {
        if self.broken {
            return Bytes::new();
        }
        if !self.buf.is_empty() {
            tracing::warn!(bytes = self.buf.len(), "bedrock event stream ended inside a frame");
        }
        self.relay.finish(meter)
    }

    fn complete(&self) -> bool {
        !self.broken && self.relay.complete()
    }

    fn started(&self) -> bool {
        self.relay.started()
    }
}

/// The messages API's error type for a Bedrock exception.
fn error_type(exception: &str) -> &'static str {
    match exception {
        "throttlingException" => "rate_limit_error",
        "serviceUnavailableException" => "overloaded_error",
        "validationException" => "invalid_request_error",
        "accessDeniedException" => "permission_error",
        "resourceNotFoundException" => "not_found_error",
        "modelTimeoutException" => "timeout_error",
        _ => "api_error",
    }
}

/// What `message` holds, by its `:message-type` and `:event-type` headers.
fn frame(message: &Message) -> Frame {
    let header = |name: &str| {
        message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| h.value().as_string().ok())
            .map(|v| v.as_str().to_owned())
    };
    let payload = message.payload();
    match header(":message-type").as_deref() {
        Some("event") | None => {}
        Some(_) => {
            let kind = header(":exception-type").or_else(|| header(":error-code")).unwrap_or_else(|| "error".into());
            let text = serde_json::from_slice::<Value>(payload)
                .ok()
                .and_then(|v| v.get("message").or_else(|| v.get("Message")).and_then(Value::as_str).map(str::to_owned));
            let message = text.or_else(|| header(":error-message")).unwrap_or_default();
            return Frame::Exception { kind, message };
        }
    }
    match header(":event-type").as_deref() {
        Some("chunk") => {
            let bytes = serde_json::from_slice::<Value>(payload)
                .ok()
                .and_then(|v| v.get("bytes").and_then(Value::as_str).map(str::to_owned))
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
            match bytes {
                Some(bytes) => Frame::Event(Bytes::from(bytes)),
                None => {
                    tracing::warn!("bedrock chunk event without base64 bytes");
                    Frame::Skip
                }
            }
        }
        Some("initial-response") | None => Frame::Skip,
        Some(kind) => {
            let mut event = Vec::with_capacity(payload.len() + kind.len() + 6);
            event.extend_from_slice(b"{");
            event.extend_from_slice(Value::String(kind.to_owned()).to_string().as_bytes());
            event.extend_from_slice(b":");
            event.extend_from_slice(if payload.is_empty() { b"{}" } else { payload });
            event.extend_from_slice(b"}");
            Frame::Event(Bytes::from(event))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue};

    use super::*;

    /// Records each event's data and finishes complete.
    #[derive(Default)]
    struct Record {
        events: Vec<String>,
        finished: bool,
    }

    impl EventRelay for Record {
        fn event(&mut self, _raw: Bytes, data: &[u8], _meter: Option<&mut Meter>) -> Bytes {
            self.events.push(String::from_utf8(data.to_vec()).unwrap());
            Bytes::from(format!("<{}>", self.events.len()))
        }
        fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
            self.finished = true;
            Bytes::from_static(b"<end>")
        }
        fn complete(&self) -> bool {
            self.finished
        }
    }

    fn encode(headers: &[(&'static str, &'static str)], payload: &[u8]) -> Vec<u8> {
        let headers =
            headers.iter().map(|(name, value)| Header::new(*name, HeaderValue::String((*value).into()))).collect();
        let mut out = Vec::new();
        write_message_to(&Message::new_from_parts(headers, Bytes::copy_from_slice(payload)), &mut out).unwrap();
        out
    }

    fn event(kind: &'static str, payload: &str) -> Vec<u8> {
        encode(
            &[(":message-type", "event"), (":event-type", kind), (":content-type", "application/json")],
            payload.as_bytes(),
        )
    }

    #[test]
    fn frames_split_across_chunks_reach_the_relay_whole() {
        let chunk = base64::engine::general_purpose::STANDARD.encode(br#"{"type":"message_stop"}"#);
        let mut stream = event("chunk", &format!(r#"{{"bytes":"{chunk}"}}"#));
        stream.extend(event("messageStop", r#"{"stopReason":"end_turn"}"#));
        let mut frames = Frames::new(Record::default());
        let mut out = Vec::new();
        for byte in stream {
            out.extend_from_slice(&frames.push(Bytes::copy_from_slice(&[byte]), None));
        }
        out.extend_from_slice(&frames.finish(None));
        assert_eq!(out, b"<1><2><end>");
        assert_eq!(frames.relay.events, [r#"{"type":"message_stop"}"#, r#"{"messageStop":{"stopReason":"end_turn"}}"#]);
        assert!(frames.complete());
    }

    #[test]
    fn an_exception_frame_ends_the_relay_short() {
        let mut stream = event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#);
        stream.extend(encode(
            &[(":message-type", "exception"), (":exception-type", "throttlingException")],
            br#"{"message":"slow down"}"#,
        ));
        stream.extend(event("messageStop", r#"{"stopReason":"end_turn"}"#));
        let mut frames = Frames::new(Record::default());
        assert_eq!(frames.push(Bytes::from(stream), None), "<1><2>");
        assert!(frames.finish(None).is_empty());
        assert!(!frames.complete());
        assert_eq!(frames.relay.events.len(), 2);
        let error: Value = serde_json::from_str(&frames.relay.events[1]).unwrap();
        assert_eq!(
            error,
            serde_json::json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})
        );
    }

    #[test]
    fn a_frame_with_a_wrong_crc_is_refused() {
        let mut stream = event("messageStop", r#"{"stopReason":"end_turn"}"#);
        let last = stream.len() - 1;
        stream[last] ^= 0xff;
        let mut frames = Frames::new(Record::default());
        assert!(frames.push(Bytes::from(stream), None).is_empty());
        assert!(frames.relay.events.is_empty());
        assert!(!frames.complete());
    }
}
