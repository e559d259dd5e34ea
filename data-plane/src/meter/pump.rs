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
//! terminating chunk, which waits the same way). `primed` holds a
//! stream's opening events back until its first token, so an upstream that
//! answers its headers at once and then stays silent can still be failed
//! over before the client saw any of it.

use std::{borrow::Cow, io, ops::Range, pin::Pin, time::Duration};

use bytes::{Buf as _, Bytes, BytesMut};
use futures_util::{Stream, StreamExt as _, stream};
use tokio::time::Instant;

use super::{
    Meter,
    sse::{DataAt, event_data, find_event_end, next_event},
};
use crate::error::ProxyError;

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
    /// Whether the answer's first token (or its end) went by: what came
    /// before (an answer's opening events) may be held back while the
    /// attempt can still fail over (`primed`). Bodies without tokens have
    /// begun with their first byte.
    fn started(&self) -> bool {
        true
    }
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
    /// Whether the answer's first token (or its end) went by; see
    /// `Relay::started`.
    fn started(&self) -> bool {
        true
    }
}

/// An SSE stream split into events for an `EventRelay`.
pub struct Events<E> {
    relay: E,
    buf: BytesMut,
    /// Bytes of `buf` known to hold no event boundary.
    scanned: usize,
}

/// What `Events` sends for one upstream chunk.
struct Out {
    /// The chunk the events were read from (in place).
    chunk: Bytes,
    /// The part of `chunk` sent so far, while each event went out as it
    /// came and back to back.
    passed: Range<usize>,
    /// Everything to send, once an event went out changed, held back or
    /// from elsewhere.
    copied: Option<BytesMut>,
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
    Pump::new(upstream, relay, meter, idle, status).into_stream(Bytes::new())
}

/// `pump`, once the answer has begun: reads the upstream until the relay
/// says its first token went by (`Relay::started`), holding what the relay
/// makes of the events before it (`message_start`, `response.created`, a
/// role-only chunk), and returns the body with those held bytes first.
/// Fails, with nothing sent and nothing metered (the meter is cancelled),
/// when no token came by `first_token` (`None`: no bound but `idle`
/// between chunks) or the upstream broke, stalled or ended first: the
/// attempt can fall over to another channel.
pub async fn primed<R: Relay, E: std::error::Error + Send + 'static>(
    upstream: Upstream<E>,
    relay: R,
    meter: Option<Meter>,
    idle: Duration,
    status: u16,
    first_token: Option<Instant>,
) -> Result<impl Stream<Item = io::Result<Bytes>> + Send + 'static, ProxyError> {
    let mut pump = Pump::new(upstream, relay, meter, idle, status);
    let mut held = BytesMut::new();
    while !pump.relay.started() {
        let wait = first_token.map_or(idle, |at| idle.min(at.saturating_duration_since(Instant::now())));
        let failed = match tokio::time::timeout(wait, pump.upstream.next()).await {
            Ok(Some(Ok(chunk))) => {
                held.extend_from_slice(&pump.relay.push(chunk, pump.meter.as_mut()));
                if pump.relay.complete() {
                    pump.end(pump.status, true).await;
                }
                continue;
            }
            Ok(None) => ProxyError::UpstreamStatus {
                status: axum::http::StatusCode::BAD_GATEWAY,
                message: "upstream stream ended before its first token".into(),
            },
            Ok(Some(Err(error))) => {
                tracing::warn!(error = %crate::error::error_chain(&error), "upstream stream failed before its first token");
                ProxyError::UpstreamConnect
            }
            Err(_) => {
                let waited_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(waited_ms, "upstream sent no first token in time");
                ProxyError::UpstreamTimeout
            }
        };
        if let Some(meter) = pump.meter.take() {
            meter.cancel();
        }
        return Err(failed);
    }
    // The held bytes go out first: a crash from here on bills them, as the
    // pump does for every later chunk.
    if let Some(meter) = pump.meter.as_mut().filter(|_| !held.is_empty()) {
        meter.progress();
    }
    Ok(pump.into_stream(held.freeze()))
}

/// The state of one pumped body.
struct Pump<R, E> {
    upstream: Upstream<E>,
    relay: R,
    meter: Option<Meter>,
    idle: Duration,
    status: u16,
    span: tracing::Span,
    done: bool,
}

// === impl Pump ===

impl<R: Relay, E: std::error::Error + Send + 'static> Pump<R, E> {
    fn new(upstream: Upstream<E>, relay: R, meter: Option<Meter>, idle: Duration, status: u16) -> Pump<R, E> {
        let span = tracing::Span::current();
        Pump { upstream, relay, meter, idle, status, span, done: false }
    }

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

    /// The body: `first` (when not empty), then what the relay makes of the
    /// rest of the upstream.
    fn into_stream(self, first: Bytes) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
        let first = (!first.is_empty()).then_some(Ok(first));
        stream::iter(first).chain(stream::unfold(self, |mut st| async move {
            if st.done {
                return None;
            }
            st.next().await.map(|item| (item, st))
        }))
    }

    /// The next bytes for the client; `None` once the body ended.
    async fn next(&mut self) -> Option<io::Result<Bytes>> {
        loop {
            match tokio::time::timeout(self.idle, self.upstream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let out = self.relay.push(chunk, self.meter.as_mut());
                    if self.relay.complete() {
                        self.end(self.status, true).await;
                    }
                    if !out.is_empty() {
                        // A crash from here on bills what the client got.
                        if let Some(meter) = self.meter.as_mut() {
                            meter.progress();
                        }
                        return Some(Ok(out));
                    }
                }
                Ok(None) => {
                    let out = self.relay.finish(self.meter.as_mut());
                    self.end(self.status, true).await;
                    self.done = true;
                    return (!out.is_empty()).then_some(Ok(out));
                }
                Ok(Some(Err(error))) => {
                    self.span.in_scope(
                        || tracing::warn!(error = %crate::error::error_chain(&error), "upstream stream failed"),
                    );
                    self.end(502, false).await;
                    self.done = true;
                    // hyper drops bytes it has not flushed yet when a body
                    // fails; pending once lets it flush what went before.
                    tokio::task::yield_now().await;
                    return Some(Err(io::Error::other("upstream stream failed")));
                }
                Err(_) => {
                    let idle_ms = u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX);
                    self.span.in_scope(|| tracing::warn!(idle_ms, "upstream stream idle too long"));
                    self.end(504, false).await;
                    self.done = true;
                    return Some(Err(io::Error::new(io::ErrorKind::TimedOut, "upstream idle timeout")));
                }
            }
        }
    }
}

// === impl Events ===

impl<E: EventRelay> Events<E> {
    /// Splits the stream into events for `relay`.
    pub fn new(relay: E) -> Events<E> {
        Events { relay, buf: BytesMut::new(), scanned: 0 }
    }
}

impl<E: EventRelay> Events<E> {
    /// Hands `event` to the relay and adds what it makes of it to `out`.
    fn event(&mut self, event: Bytes, out: &mut Out, meter: Option<&mut Meter>) {
        let data = event_data(&event);
        out.add(self.relay.event(event.clone(), &data, meter));
    }
}

impl<E: EventRelay> Relay for Events<E> {
    fn push(&mut self, chunk: Bytes, mut meter: Option<&mut Meter>) -> Bytes {
        let mut rest = chunk;
        let mut out = Out::new(&rest);
        if !self.buf.is_empty() {
            // The event begun in an earlier chunk: joined with its end from
            // this one (copied), the rest of the chunk is read in place.
            let before = self.buf.len();
            let upto = find_event_end(&rest, 0).unwrap_or(rest.len());
            self.buf.extend_from_slice(&rest[..upto]);
            match find_event_end(&self.buf, self.scanned) {
                Some(end) if end >= before => {
                    self.buf.truncate(end);
                    let event = self.buf.split().freeze();
                    rest.advance(end - before);
                    out = Out::new(&rest);
                    self.event(event, &mut out, meter.as_deref_mut());
                }
                _ => {
                    self.buf.extend_from_slice(&rest[upto..]);
                    rest = Bytes::new();
                    while let Some(end) = find_event_end(&self.buf, self.scanned) {
                        let event = self.buf.split_to(end).freeze();
                        self.scanned = 0;
                        self.event(event, &mut out, meter.as_deref_mut());
                    }
                }
            }
            self.scanned = 0;
        }
        let mut at = 0;
        while let Some((end, data)) = next_event(&rest, at) {
            let data = match data {
                DataAt::None => Cow::Borrowed(&[][..]),
                DataAt::One(value) => Cow::Borrowed(&rest[value]),
                DataAt::Many => event_data(&rest[at..end]),
            };
            out.add(self.relay.event(rest.slice(at..end), &data, meter.as_deref_mut()));
            at = end;
        }
        self.buf.extend_from_slice(&rest[at..]);
        self.scanned = self.buf.len().saturating_sub(3);
        out.into_bytes()
    }

    fn finish(&mut self, mut meter: Option<&mut Meter>) -> Bytes {
        let rest = self.buf.split().freeze();
        let mut out = Out::new(&rest);
        self.scanned = 0;
        if !rest.is_empty() {
            self.event(rest.clone(), &mut out, meter.as_deref_mut());
        }
        let closing = self.relay.finish(meter);
        out.add(closing);
        out.into_bytes()
    }

    fn complete(&self) -> bool {
        self.relay.complete()
    }

    fn started(&self) -> bool {
        self.relay.started()
    }
}

// === impl Out ===

impl Out {
    /// Bytes to send, read from `chunk`: while every event goes out as it
    /// came, they are `chunk`'s own, not a copy.
    fn new(chunk: &Bytes) -> Out {
        Out { chunk: chunk.clone(), passed: 0..0, copied: None }
    }

    /// Adds `sent`: taken in place when it is the part of the chunk that
    /// follows what was sent so far (an event passed as it came), copied
    /// otherwise and from then on.
    fn add(&mut self, sent: Bytes) {
        if sent.is_empty() {
            return;
        }
        if let Some(copied) = &mut self.copied {
            copied.extend_from_slice(&sent);
            return;
        }
        // Where `sent` lies in the chunk, if it lies there at all.
        let at = sent.as_ptr().addr().wrapping_sub(self.chunk.as_ptr().addr());
        let follows = if self.passed.is_empty() { at <= self.chunk.len() } else { at == self.passed.end };
        if follows && self.chunk.len() - at >= sent.len() {
            self.passed = if self.passed.is_empty() { at..at } else { self.passed.clone() };
            self.passed.end += sent.len();
            return;
        }
        // Room for the rest of the chunk too, which usually follows.
        let mut copied = BytesMut::with_capacity(self.chunk.len() + sent.len());
        copied.extend_from_slice(&self.chunk[self.passed.clone()]);
        copied.extend_from_slice(&sent);
        self.copied = Some(copied);
    }

    fn into_bytes(self) -> Bytes {
        match self.copied {
            Some(copied) => copied.freeze(),
            None => self.chunk.slice(self.passed),
        }
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

    /// `events`, each after its delay, then silence until dropped.
    fn paced(events: &[(u64, &'static str)]) -> Upstream<ClientError> {
        let events: Vec<(u64, &'static str)> = events.to_vec();
        let paced = futures_util::stream::iter(events).then(|(ms, event)| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(Bytes::from_static(event.as_bytes()))
        });
        Box::pin(paced.chain(futures_util::stream::pending()))
    }

    const CREATED: &str = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
    const TOKEN: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";

    #[tokio::test(start_paused = true)]
    async fn a_stream_is_held_until_its_first_token_and_then_sent_whole() {
        let (sink, mut rx) = recording_sink();
        let meter = Meter::new(Charge::test("r1"), sink, 40);
        let upstream = paced(&[(0, CREATED), (90_000, TOKEN), (10, "data: [DONE]\n\n")]);
        let first_token = Some(Instant::now() + Duration::from_secs(120));
        let idle = Duration::from_secs(300);
        let relay = Events::new(SseFilter::new(false));
        let started = Instant::now();
        let mut stream = Box::pin(primed(upstream, relay, Some(meter), idle, 200, first_token).await.unwrap());
        assert_eq!(started.elapsed(), Duration::from_secs(90), "returned with the first token, not before");
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first, format!("{CREATED}{TOKEN}").as_bytes(), "the opening event is held, not lost");
        assert_eq!(stream.next().await.unwrap().unwrap(), "data: [DONE]\n\n".as_bytes());
        assert_eq!(rx.recv().await.unwrap().status, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn no_first_token_by_the_deadline_fails_the_attempt_and_bills_nothing() {
        let (sink, mut rx) = recording_sink();
        let meter = Meter::new(Charge::test("r1"), sink.clone(), 40);
        let first_token = Some(Instant::now() + Duration::from_secs(30));
        let relay = Events::new(SseFilter::new(false));
        let started = Instant::now();
        let failed = primed(paced(&[(0, CREATED)]), relay, Some(meter), Duration::from_secs(300), 200, first_token);
        assert_eq!(failed.await.err(), Some(ProxyError::UpstreamTimeout));
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        // Without a deadline of its own, the idle timeout bounds the wait.
        let meter = Meter::new(Charge::test("r2"), sink, 40);
        let relay = Events::new(SseFilter::new(false));
        let failed = primed(paced(&[(0, CREATED)]), relay, Some(meter), Duration::from_secs(300), 200, None);
        assert_eq!(failed.await.err(), Some(ProxyError::UpstreamTimeout));
        assert_eq!(started.elapsed(), Duration::from_secs(330));
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "a failed attempt records nothing");
    }

    #[tokio::test]
    async fn a_stream_that_ends_or_breaks_before_its_first_token_fails_the_attempt() {
        let (sink, mut rx) = recording_sink();
        let meter = Meter::new(Charge::test("r1"), sink, 40);
        let relay = Events::new(SseFilter::new(false));
        let failed = primed(upstream(&[CREATED]), relay, Some(meter), Duration::from_secs(5), 200, None).await;
        assert!(failed.err().is_some_and(|e| e.is_retryable()));
        assert!(rx.try_recv().is_err(), "a failed attempt records nothing");
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
