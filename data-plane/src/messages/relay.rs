//! Streams an upstream's SSE answer to the client event by event through a
//! [`Relay`]: one that passes messages events through byte for byte, or one
//! of the two dialect translators. Usage and answer text go to the meter as
//! they pass; the idle deadline is enforced per chunk, and the meter records
//! when the stream ends or the client goes away (the `Meter`'s drop).

use std::{io, time::Duration};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt as _, stream};
use serde_json::Value;

use crate::{
    pricing::Usage,
    sse::{self, Upstream},
    translate::{ChatToMessagesStream, MessagesStreamUsage, MessagesToChatStream, SseEvent},
    usage::Meter,
};

/// What to send the client for each upstream event.
pub trait Relay: Send + 'static {
    /// Takes one complete upstream event (`raw`, blank line included) whose
    /// `data:` lines joined are `data`; returns the bytes to send now.
    fn event(&mut self, raw: &[u8], data: &[u8], meter: &mut Meter) -> Bytes;
    /// The upstream ended its stream; returns the closing bytes, if any.
    fn finish(&mut self) -> Bytes;
    /// The usage the upstream reported so far.
    fn usage(&self) -> Option<Usage>;
}

/// Messages events passed through untouched, usage read on the way.
#[derive(Default)]
pub struct PassMessages {
    usage: MessagesStreamUsage,
}

/// A chat-completions stream from the upstream, as messages events.
pub struct ChatAsMessages {
    translator: ChatToMessagesStream,
}

/// A messages stream from the upstream, as chat-completion chunks.
pub struct MessagesAsChat {
    translator: MessagesToChatStream,
}

/// The client-facing body for an SSE `upstream` sent through `relay`,
/// metered by `meter`, failing if no chunk arrives within `idle`.
pub fn relayed<R: Relay>(
    upstream: Upstream,
    relay: R,
    meter: Meter,
    idle: Duration,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    struct State<R> {
        upstream: Upstream,
        relay: R,
        buf: BytesMut,
        meter: Option<Meter>,
        idle: Duration,
    }

    impl<R: Relay> State<R> {
        /// Runs every complete event in `buf` (every byte when `all`).
        fn drain(&mut self, all: bool) -> Bytes {
            let mut out = BytesMut::new();
            let Some(meter) = self.meter.as_mut() else { return out.freeze() };
            while let Some(end) = sse::find_event_end(&self.buf, 0).or(if all && !self.buf.is_empty() {
                Some(self.buf.len())
            } else {
                None
            }) {
                let event = self.buf.split_to(end);
                let data = sse::event_data(&event);
                if data.is_empty() && !event.iter().any(|b| !b.is_ascii_whitespace()) {
                    continue;
                }
                out.extend_from_slice(&self.relay.event(&event, &data, meter));
                if !data.is_empty() {
                    meter.add_chunks(1);
                }
            }
            if let Some(usage) = self.relay.usage() {
                meter.observe(usage);
            }
            out.freeze()
        }

        fn end(&mut self, status: u16) {
            if let Some(mut meter) = self.meter.take() {
                if let Some(usage) = self.relay.usage() {
                    meter.observe(usage);
                }
                meter.finish(status);
            }
        }
    }

    let state = State { upstream, relay, buf: BytesMut::new(), meter: Some(meter), idle };
    stream::unfold(state, |mut st| async move {
        st.meter.as_ref()?;
        loop {
            match tokio::time::timeout(st.idle, st.upstream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    st.buf.extend_from_slice(&chunk);
                    let out = st.drain(false);
                    if !out.is_empty() {
                        return Some((Ok(out), st));
                    }
                }
                Ok(None) => {
                    let mut out = BytesMut::from(&st.drain(true)[..]);
                    out.extend_from_slice(&st.relay.finish());
                    st.end(200);
                    return (!out.is_empty()).then(|| (Ok(out.freeze()), st));
                }
                Ok(Some(Err(error))) => {
                    tracing::warn!(error = %error.without_url(), "upstream stream failed");
                    st.end(502);
                    // Lets hyper flush what went before the failure.
                    tokio::task::yield_now().await;
                    return Some((Err(io::Error::other("upstream stream failed")), st));
                }
                Err(_) => {
                    tracing::warn!(idle_ms = st.idle.as_millis(), "upstream stream idle too long");
                    st.end(504);
                    return Some((Err(io::Error::new(io::ErrorKind::TimedOut, "upstream idle timeout")), st));
                }
            }
        }
    })
}

/// The answer text in one messages event (`text_delta`, tool arguments).
fn messages_event_text(data: &[u8]) -> Option<String> {
    if !data.windows(19).any(|w| w == b"content_block_delta") {
        return None;
    }
    let event = serde_json::from_slice::<Value>(data).ok()?;
    let delta = event.get("delta")?;
    delta.get("text").or_else(|| delta.get("partial_json")).and_then(Value::as_str).map(str::to_owned)
}

/// Feeds the text of translated messages `events` to `meter`.
fn meter_messages_events(events: &[SseEvent], meter: &mut Meter) {
    for event in events.iter().filter(|e| e.event == Some("content_block_delta")) {
        if let Some(text) = messages_event_text(event.data.as_bytes()) {
            meter.add_text(&text);
        }
    }
}

// === impl PassMessages ===

impl Relay for PassMessages {
    fn event(&mut self, raw: &[u8], data: &[u8], meter: &mut Meter) -> Bytes {
        self.usage.observe_data(data);
        if let Some(text) = messages_event_text(data) {
            meter.add_text(&text);
        }
        Bytes::copy_from_slice(raw)
    }

    fn finish(&mut self) -> Bytes {
        Bytes::new()
    }

    fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }
}

// === impl ChatAsMessages ===

impl ChatAsMessages {
    /// A relay for one stream.
    pub fn new() -> ChatAsMessages {
        ChatAsMessages { translator: ChatToMessagesStream::new() }
    }
}

impl Relay for ChatAsMessages {
    fn event(&mut self, _raw: &[u8], data: &[u8], meter: &mut Meter) -> Bytes {
        let events = self.translator.push(data);
        meter_messages_events(&events, meter);
        SseEvent::encode(&events)
    }

    fn finish(&mut self) -> Bytes {
        SseEvent::encode(&self.translator.finish())
    }

    fn usage(&self) -> Option<Usage> {
        self.translator.usage()
    }
}

// === impl MessagesAsChat ===

impl MessagesAsChat {
    /// A relay whose chunks say they were `created` then; the usage chunk
    /// is sent only if the client asked (`include_usage`).
    pub fn new(include_usage: bool, created: i64) -> MessagesAsChat {
        MessagesAsChat { translator: MessagesToChatStream::new(include_usage, created) }
    }
}

impl Relay for MessagesAsChat {
    fn event(&mut self, _raw: &[u8], data: &[u8], meter: &mut Meter) -> Bytes {
        if let Some(text) = messages_event_text(data) {
            meter.add_text(&text);
        }
        SseEvent::encode(&self.translator.push(data))
    }

    fn finish(&mut self) -> Bytes {
        SseEvent::encode(&self.translator.finish())
    }

    fn usage(&self) -> Option<Usage> {
        self.translator.usage()
    }
}
