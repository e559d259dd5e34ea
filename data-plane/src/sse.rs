//! Streams an upstream's SSE answer to the client as it arrives, event by
//! event, reading usage on the way. Events are forwarded byte for byte; the
//! only one ever withheld is the usage-only chunk the proxy itself asked
//! for when the client did not. The idle deadline is enforced per chunk and
//! the meter records when the stream ends or is dropped.

use std::{io, pin::Pin, time::Duration};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt as _, stream};

use crate::{openai, pricing::Usage, usage::Meter};

/// Splits an SSE byte stream into events and decides what to forward.
#[derive(Debug)]
pub struct SseFilter {
    buf: BytesMut,
    /// Bytes of `buf` known to hold no event boundary.
    scanned: usize,
    /// Forward usage-only chunks (the client asked for them).
    keep_usage_chunk: bool,
    usage: Option<Usage>,
    content_events: i64,
    /// Usage comes in typed events (`response.completed`'s `response.usage`,
    /// a top-level `usage` with `input_tokens`…), never in a chunk to
    /// withhold: the responses API and others (see `endpoints`).
    typed_events: bool,
}

/// A byte stream from the upstream.
pub type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

// === impl SseFilter ===

impl SseFilter {
    /// A filter that drops the usage-only chunk unless `client_wants_usage`.
    pub fn new(client_wants_usage: bool) -> SseFilter {
        SseFilter {
            buf: BytesMut::new(),
            scanned: 0,
            keep_usage_chunk: client_wants_usage,
            usage: None,
            content_events: 0,
            typed_events: false,
        }
    }

    /// A filter for streams whose usage rides in typed events; it forwards
    /// every event.
    pub fn typed_events() -> SseFilter {
        SseFilter { typed_events: true, ..SseFilter::new(true) }
    }

    /// Takes upstream bytes; returns the complete events to forward now
    /// (possibly none). Incomplete trailing bytes wait for the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.buf.extend_from_slice(chunk);
        let mut out = BytesMut::new();
        while let Some(end) = find_event_end(&self.buf, self.scanned) {
            let event = self.buf.split_to(end);
            self.scanned = 0;
            if self.keep(&event) {
                out.extend_from_slice(&event);
            }
        }
        self.scanned = self.buf.len().saturating_sub(3);
        out.freeze()
    }

    /// Ends the stream: whatever is left (an event without its blank line).
    pub fn finish(&mut self) -> Bytes {
        let rest = self.buf.split();
        self.scanned = 0;
        if !rest.is_empty() && self.keep(&rest) { rest.freeze() } else { Bytes::new() }
    }

    /// The latest usage the stream reported.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Content events seen since the last call.
    pub fn take_content_events(&mut self) -> i64 {
        std::mem::take(&mut self.content_events)
    }

    /// Inspects one event; false to withhold it.
    fn keep(&mut self, event: &[u8]) -> bool {
        let has_usage = event.windows(5).any(|w| w == b"usage");
        if !has_usage {
            if !is_done(event) && event.iter().any(|b| !b.is_ascii_whitespace()) {
                self.content_events += 1;
            }
            return true;
        }
        let data = event_data(event);
        if self.typed_events {
            if let Some(usage) = crate::endpoints::event_usage(&data) {
                self.usage = Some(usage);
            }
            self.content_events += 1;
            return true;
        }
        match openai::chunk_usage(&data) {
            Some((usage, usage_only)) => {
                self.usage = Some(usage);
                if usage_only {
                    return self.keep_usage_chunk;
                }
                self.content_events += 1;
                true
            }
            None => {
                self.content_events += 1;
                true
            }
        }
    }
}

fn is_done(event: &[u8]) -> bool {
    event_data(event).trim_ascii() == b"[DONE]"
}

/// The event's `data:` lines joined with `\n` (SSE's own rule).
pub(crate) fn event_data(event: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    let mut first = true;
    for line in event.split(|&b| b == b'\n' || b == b'\r') {
        let Some(value) = line.strip_prefix(b"data:") else {
            continue;
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if !first {
            data.push(b'\n');
        }
        first = false;
        data.extend_from_slice(value);
    }
    data
}

/// End (exclusive) of the first event in `buf`, i.e. just past the first
/// blank line, searching from `from`. A lone `\r` at the very end waits:
/// it may be the first half of `\r\n`.
pub(crate) fn find_event_end(buf: &[u8], from: usize) -> Option<usize> {
    let terminator = |i: usize| -> Option<Option<usize>> {
        // Some(Some(end)) = a line ends at i; Some(None) = undecidable yet.
        match buf.get(i)? {
            b'\n' => Some(Some(i + 1)),
            b'\r' => match buf.get(i + 1) {
                Some(b'\n') => Some(Some(i + 2)),
                Some(_) => Some(Some(i + 1)),
                None => Some(None),
            },
            _ => None,
        }
    };
    let mut i = from;
    while i < buf.len() {
        match terminator(i) {
            None => i += 1,
            Some(None) => return None,
            Some(Some(line_end)) => match terminator(line_end) {
                Some(Some(end)) => return Some(end),
                Some(None) => return None,
                None if line_end >= buf.len() => return None,
                None => i = line_end,
            },
        }
    }
    None
}

/// The client-facing body for an SSE `upstream`: filtered by `filter`,
/// metered by `meter`, failing if no chunk arrives within `idle`.
pub fn metered(
    upstream: Upstream,
    filter: SseFilter,
    meter: Meter,
    idle: Duration,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    struct State {
        upstream: Upstream,
        filter: SseFilter,
        meter: Option<Meter>,
        idle: Duration,
    }

    impl State {
        fn sync_meter(&mut self) {
            if let Some(meter) = &mut self.meter {
                if let Some(usage) = self.filter.usage() {
                    meter.observe(usage);
                }
                meter.add_chunks(self.filter.take_content_events());
            }
        }

        fn end(&mut self, status: u16) {
            self.sync_meter();
            if let Some(meter) = self.meter.take() {
                meter.finish(status);
            }
        }
    }

    let state = State { upstream, filter, meter: Some(meter), idle };
    stream::unfold(state, |mut st| async move {
        st.meter.as_ref()?;
        loop {
            match tokio::time::timeout(st.idle, st.upstream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let out = st.filter.push(&chunk);
                    st.sync_meter();
                    if !out.is_empty() {
                        return Some((Ok(out), st));
                    }
                }
                Ok(None) => {
                    let out = st.filter.finish();
                    st.end(200);
                    return (!out.is_empty()).then_some((Ok(out), st));
                }
                Ok(Some(Err(error))) => {
                    tracing::warn!(error = %error.without_url(), "upstream stream failed");
                    st.end(502);
                    // hyper drops bytes it has not flushed yet when a body
                    // fails; pending once lets it flush what went before.
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    const CONTENT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n";
    const USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    fn run(filter: &mut SseFilter, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&filter.push(c));
        }
        out.extend_from_slice(&filter.finish());
        out
    }

    #[test]
    fn usage_chunk_is_dropped_unless_the_client_asked() {
        let stream = format!("{CONTENT}{CONTENT}{USAGE}{DONE}");
        let mut f = SseFilter::new(false);
        let out = run(&mut f, &[stream.as_bytes()]);
        assert_eq!(out, format!("{CONTENT}{CONTENT}{DONE}").as_bytes());
        assert_eq!(f.usage(), Some(Usage { prompt_tokens: 7, completion_tokens: 3, cached_tokens: 0 }));
        assert_eq!(f.take_content_events(), 2);

        let mut f = SseFilter::new(true);
        assert_eq!(run(&mut f, &[stream.as_bytes()]), stream.as_bytes());
        assert!(f.usage().is_some());
    }

    #[test]
    fn events_split_anywhere_are_reassembled_exactly() {
        let stream = format!("{CONTENT}{USAGE}{DONE}").replace("\n", "\r\n");
        let bytes = stream.as_bytes();
        for cut in 1..bytes.len() {
            let mut f = SseFilter::new(false);
            let out = run(&mut f, &[&bytes[..cut], &bytes[cut..]]);
            let want = format!("{CONTENT}{DONE}").replace("\n", "\r\n");
            assert_eq!(String::from_utf8_lossy(&out), want, "cut at {cut}");
            assert_eq!(f.usage().map(|u| u.prompt_tokens), Some(7), "cut at {cut}");
        }
    }

    #[test]
    fn one_byte_at_a_time_and_comments_pass_through() {
        let stream = format!(": keep-alive\n\n{CONTENT}event: x\ndata: {{\"a\":\n data: 1}}\n\n{DONE}partial");
        let mut f = SseFilter::new(false);
        let chunks: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        assert_eq!(run(&mut f, &chunks), stream.as_bytes());
    }

    #[test]
    fn boundaries_in_every_line_ending_style() {
        assert_eq!(find_event_end(b"data: a\n\nrest", 0), Some(9));
        assert_eq!(find_event_end(b"data: a\r\n\r\nrest", 0), Some(11));
        assert_eq!(find_event_end(b"data: a\r\rrest", 0), Some(9));
        assert_eq!(find_event_end(b"data: a\r\n\nrest", 0), Some(10));
        assert_eq!(find_event_end(b"data: a\n", 0), None);
        assert_eq!(find_event_end(b"data: a\r\n\r", 0), None);
        assert_eq!(find_event_end(b"data: a\ndata: b\n", 0), None);
    }

    #[test]
    fn multi_line_data_joins_with_newlines() {
        assert_eq!(event_data(b"event: e\ndata: {\"a\":\ndata:1}\n\n"), b"{\"a\":\n1}");
    }
}
