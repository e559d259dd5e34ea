//! The one streaming pump: carries an upstream body to the client as it
//! arrives (chat and typed SSE, messages events, translated streams, speech
//! audio, video files), through a `Relay` that decides what to send. The
//! idle deadline is enforced per chunk (the transport's total deadline
//! bounds the whole body). The meter, if any, records exactly once: with
//! the upstream's status as soon as the answer reached its natural end
//! (its terminal event, or every declared byte), so a client that closes
//! right after the last byte is not a 499; with 502 or 504 when the
//! upstream breaks or stalls; and with 499 from the meter's drop when the
//! client goes away first. At the natural end the pump holds the final
//! bytes until the record is on the spool, so no client has a whole answer
//! whose usage a crash could lose (a body of unknown length ends with its
//! terminating chunk, which waits the same way).

use std::{io, pin::Pin, time::Duration};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt as _, stream};

use super::{
    Meter,
    sse::{event_data, find_event_end},
};

/// A byte stream from the upstream, failing with the transport's error `E`.
pub type Upstream<E> = Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>;

/// What to send the client for the upstream's bytes.
pub trait Relay: Send + 'static {
    /// Takes upstream bytes; returns the bytes to send now (maybe none).
    fn push(&mut self, chunk: Bytes, meter: Option<&mut Meter>) -> Bytes;
    /// The upstream ended its body; returns the closing bytes, if any.
    fn finish(&mut self, meter: Option<&mut Meter>) -> Bytes;
    /// Whether the answer reached its natural end.
    fn complete(&self) -> bool;
}

/// What to send the client for each complete SSE event.
pub trait EventRelay: Send + 'static {
    /// Takes one upstream event (`raw`, blank line included) whose `data:`
    /// lines joined are `data`; returns the bytes to send now.
    fn event(&mut self, raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes;
    /// The upstream ended its stream; returns the closing bytes, if any.
    fn finish(&mut self, meter: Option<&mut Meter>) -> Bytes;
    /// Whether the terminal event went by.
    fn complete(&self) -> bool;
}

/// An SSE stream split into events for an `EventRelay`.
pub struct Events<E> {
    relay: E,
    buf: BytesMut,
    /// Bytes of `buf` known to hold no event boundary.
    scanned: usize,
}

/// A body passed through byte for byte; complete once `expected` bytes
/// (the upstream's `content-length`) went by.
pub struct Raw {
    expected: Option<u64>,
    seen: u64,
}

/// The client-facing body for `upstream` through `relay`, metered by
/// `meter` (recorded with `status` at the natural end), failing if no chunk
/// arrives within `idle`. Log lines carry the span current when it is made.
pub fn pump<R: Relay, E: std::error::Error + Send + 'static>(
    upstream: Upstream<E>,
    relay: R,
    meter: Option<Meter>,
    idle: Duration,
    status: u16,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    struct State<R, E> {
        upstream: Upstream<E>,
        relay: R,
        meter: Option<Meter>,
        idle: Duration,
        status: u16,
        span: tracing::Span,
        done: bool,
    }

    impl<R: Relay, E> State<R, E> {
        /// Records with `status`; waits until the record is spooled when
        /// `wait` (the natural end), otherwise lets the writer take it.
        async fn end(&mut self, status: u16, wait: bool) {
            if let Some(meter) = self.meter.take() {
                let written = meter.finish(status);
                if wait {
                    written.wait().await;
                }
            }
        }
    }

    let span = tracing::Span::current();
    let state = State { upstream, relay, meter, idle, status, span, done: false };
    stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            match tokio::time::timeout(st.idle, st.upstream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let out = st.relay.push(chunk, st.meter.as_mut());
                    if st.relay.complete() {
                        st.end(st.status, true).await;
                    }
                    if !out.is_empty() {
                        return Some((Ok(out), st));
                    }
                }
                Ok(None) => {
                    let out = st.relay.finish(st.meter.as_mut());
                    st.end(st.status, true).await;
                    st.done = true;
                    return (!out.is_empty()).then_some((Ok(out), st));
                }
                Ok(Some(Err(error))) => {
                    st.span.in_scope(
                        || tracing::warn!(error = %crate::error::error_chain(&error), "upstream stream failed"),
                    );
                    st.end(502, false).await;
                    st.done = true;
                    // hyper drops bytes it has not flushed yet when a body
                    // fails; pending once lets it flush what went before.
                    tokio::task::yield_now().await;
                    return Some((Err(io::Error::other("upstream stream failed")), st));
                }
                Err(_) => {
                    let idle_ms = u64::try_from(st.idle.as_millis()).unwrap_or(u64::MAX);
                    st.span.in_scope(|| tracing::warn!(idle_ms, "upstream stream idle too long"));
                    st.end(504, false).await;
                    st.done = true;
                    return Some((Err(io::Error::new(io::ErrorKind::TimedOut, "upstream idle timeout")), st));
                }
            }
        }
    })
}

// === impl Events ===

impl<E: EventRelay> Events<E> {
    /// Splits the stream into events for `relay`.
    pub fn new(relay: E) -> Events<E> {
        Events { relay, buf: BytesMut::new(), scanned: 0 }
    }
}

impl<E: EventRelay> Relay for Events<E> {
    fn push(&mut self, chunk: Bytes, mut meter: Option<&mut Meter>) -> Bytes {
        self.buf.extend_from_slice(&chunk);
        let mut out = BytesMut::new();
        while let Some(end) = find_event_end(&self.buf, self.scanned) {
            let event = self.buf.split_to(end).freeze();
            self.scanned = 0;
            let data = event_data(&event);
            out.extend_from_slice(&self.relay.event(event, &data, meter.as_deref_mut()));
        }
        self.scanned = self.buf.len().saturating_sub(3);
        out.freeze()
    }

    fn finish(&mut self, mut meter: Option<&mut Meter>) -> Bytes {
        let mut out = BytesMut::new();
        let rest = self.buf.split().freeze();
        self.scanned = 0;
        if !rest.is_empty() {
            let data = event_data(&rest);
            out.extend_from_slice(&self.relay.event(rest, &data, meter.as_deref_mut()));
        }
        out.extend_from_slice(&self.relay.finish(meter));
        out.freeze()
    }

    fn complete(&self) -> bool {
        self.relay.complete()
    }
}

// === impl Raw ===

impl Raw {
    /// A passthrough of a body of `expected` bytes, if known.
    pub fn new(expected: Option<u64>) -> Raw {
        Raw { expected, seen: 0 }
    }
}

impl Relay for Raw {
    fn push(&mut self, chunk: Bytes, _meter: Option<&mut Meter>) -> Bytes {
        self.seen += chunk.len() as u64;
        chunk
    }

    fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
        Bytes::new()
    }

    fn complete(&self) -> bool {
        self.expected.is_some_and(|n| self.seen >= n)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::{
        meter::{Charge, sse::SseFilter, tests::recording_sink},
        provider::client::ClientError,
    };

    fn upstream(chunks: &[&'static str]) -> Upstream<ClientError> {
        let chunks: Vec<Result<Bytes, ClientError>> =
            chunks.iter().map(|c| Ok(Bytes::from_static(c.as_bytes()))).collect();
        Box::pin(futures_util::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_stream_that_reached_its_end_keeps_its_status_when_the_client_leaves_at_once() {
        let (sink, mut rx) = recording_sink();
        let meter = Meter::new(Charge::test("r1"), sink, 40);
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
        let chunks = upstream(&[body, "data: [DONE]\n\n"]);
        let mut stream =
            Box::pin(pump(chunks, Events::new(SseFilter::new(false)), Some(meter), Duration::from_secs(5), 200));
        assert_eq!(stream.next().await.unwrap().unwrap(), body.as_bytes());
        assert_eq!(stream.next().await.unwrap().unwrap(), "data: [DONE]\n\n".as_bytes());
        // The client closes right after the last byte, before the upstream's end.
        drop(stream);
        let record = rx.try_recv().unwrap();
        assert_eq!(record.status, 200);
        assert!(rx.try_recv().is_err(), "recorded once");
    }

    #[tokio::test]
    async fn a_client_leaving_mid_stream_is_a_499_and_a_declared_length_completes_raw_bodies() {
        let (sink, mut rx) = recording_sink();
        let chunks = upstream(&["data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", "data: [DONE]\n\n"]);
        let meter = Meter::new(Charge::test("r1"), sink.clone(), 40);
        let mut stream =
            Box::pin(pump(chunks, Events::new(SseFilter::new(false)), Some(meter), Duration::from_secs(5), 200));
        stream.next().await.unwrap().unwrap();
        drop(stream);
        assert_eq!(rx.recv().await.unwrap().status, 499);

        let meter = Meter::new(Charge::test("r2"), sink, 40);
        let mut stream =
            Box::pin(pump(upstream(&["abc", "de"]), Raw::new(Some(5)), Some(meter), Duration::from_secs(5), 200));
        stream.next().await.unwrap().unwrap();
        stream.next().await.unwrap().unwrap();
        drop(stream);
        assert_eq!(rx.recv().await.unwrap().status, 200);
    }
}
