//! SSE framing (event boundaries in every line-ending style, `data:` lines)
//! and the relay for OpenAI-style streams passed through event by event:
//! chat completions, completions, and the typed events of the responses API.
//! Events are forwarded byte for byte; the only one ever withheld is the
//! usage-only chunk the gateway itself asked for when the client did not,
//! and the only one ever added is a usage chunk carrying the gateway's
//! estimate when the client asked for usage and the upstream sent none.

use std::{borrow::Cow, ops::Range};

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

use super::{Meter, answer, event::TypedEvent, glance::Glance, pump::EventRelay, text::Carrier};

/// Passes an OpenAI-style stream through, reading usage and answer text.
#[derive(Debug)]
pub struct SseFilter {
    /// Forward usage-only chunks (the client asked for them).
    keep_usage_chunk: bool,
    /// Usage comes in typed events (`response.completed`'s `response.usage`,
    /// a top-level `usage` with `input_tokens`…), never in a chunk to
    /// withhold: the responses API and others (see `endpoints`).
    typed_events: bool,
    usage_seen: bool,
    /// `id`, `model`, `created` of the first chunk, for an added usage chunk.
    first: Option<ChunkHead>,
    /// An event past the answer's opening ones went by (see `opening`).
    started: bool,
    done: bool,
}

/// The identifying fields of a chat chunk.
#[derive(Debug, Clone, Deserialize)]
struct ChunkHead {
    #[serde(default)]
    id: serde_json::Value,
    #[serde(default)]
    model: serde_json::Value,
    #[serde(default)]
    created: serde_json::Value,
}

// === impl SseFilter ===

impl SseFilter {
    /// A filter that drops the usage-only chunk unless `client_wants_usage`.
    pub fn new(client_wants_usage: bool) -> SseFilter {
        SseFilter {
            keep_usage_chunk: client_wants_usage,
            typed_events: false,
            usage_seen: false,
            first: None,
            started: false,
            done: false,
        }
    }

    /// A filter for streams whose usage rides in typed events; it forwards
    /// every event.
    pub fn typed_events() -> SseFilter {
        SseFilter { typed_events: true, ..SseFilter::new(true) }
    }

    /// The usage chunk a client that asked for usage gets when the upstream
    /// sent none: the meter's estimate, in the upstream's chunk shape.
    fn estimated_usage_chunk(&self, meter: &Meter) -> Bytes {
        let usage = meter.estimate();
        let head = self.first.clone().unwrap_or(ChunkHead {
            id: serde_json::Value::Null,
            model: serde_json::Value::Null,
            created: serde_json::Value::Null,
        });
        let chunk = serde_json::json!({
            "id": head.id,
            "object": "chat.completion.chunk",
            "created": head.created,
            "model": head.model,
            "choices": [],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            },
        });
        Bytes::from(format!("data: {chunk}\n\n"))
    }
}

impl EventRelay for SseFilter {
    fn event(&mut self, raw: Bytes, data: &[u8], meter: Option<&mut Meter>) -> Bytes {
        if !self.started && !data.is_empty() {
            self.started = !opening(data, self.typed_events);
        }
        let Some(meter) = meter else { return raw };
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            if self.keep_usage_chunk && !self.usage_seen && !self.typed_events {
                let mut out = BytesMut::from(&self.estimated_usage_chunk(meter)[..]);
                out.extend_from_slice(&raw);
                return out.freeze();
            }
            return raw;
        }
        if data.is_empty() {
            return raw;
        }
        meter.read_event(data);
        if self.typed_events {
            // Parsed only when it may report usage; the text waits in the
            // meter until it is counted.
            let glance = Glance::typed(data);
            if glance.usage
                && let Some(usage) = TypedEvent::read(data).usage()
            {
                self.usage_seen = true;
                meter.observe(usage);
            }
            meter.add_event(data, Carrier::Typed);
            self.done |= glance.terminal;
            meter.add_chunks(1);
            return raw;
        }
        if self.first.is_none() {
            self.first = serde_json::from_slice::<ChunkHead>(data).ok();
        }
        // Only a chunk that names usage is parsed for it; the text of the
        // others is read only if the answer ends without usage.
        if mentions_usage(data)
            && let Some((usage, usage_only)) = answer::chunk_usage(data)
        {
            self.usage_seen = true;
            meter.observe(usage);
            if usage_only {
                return if self.keep_usage_chunk { raw } else { Bytes::new() };
            }
        }
        meter.add_event(data, Carrier::Chat);
        meter.add_chunks(1);
        raw
    }

    fn finish(&mut self, _meter: Option<&mut Meter>) -> Bytes {
        Bytes::new()
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn started(&self) -> bool {
        self.started
    }
}

/// Whether the event `data` only opens the answer, before its first token:
/// a typed event that creates or adds something (`response.created`,
/// `response.in_progress`, `response.output_item.added`…), or a chunk whose
/// choices carry nothing but their index and role (empty content, no
/// finish reason, no completion `text`) and no usage or error. Read only
/// until the first token.
fn opening(data: &[u8], typed_events: bool) -> bool {
    use serde_json::Value;
    let Ok(Value::Object(event)) = serde_json::from_slice::<Value>(data) else {
        return false;
    };
    if typed_events {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default();
        return [".created", ".in_progress", ".added"].iter().any(|end| kind.ends_with(end));
    }
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    if !event.get("usage").is_none_or(empty) || event.contains_key("error") {
        return false;
    }
    let choices = event.get("choices").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    choices.iter().all(|choice| {
        choice.as_object().is_none_or(|choice| {
            choice.iter().all(|(key, value)| match key.as_str() {
                "index" | "logprobs" => true,
                "delta" => value.as_object().is_none_or(|d| d.iter().all(|(k, v)| k == "role" || empty(v))),
                _ => empty(value),
            })
        })
    })
}

/// Whether `data` mentions a `"usage"` key at all (a byte search, far
/// cheaper than parsing every chunk).
fn mentions_usage(data: &[u8]) -> bool {
    memchr::memmem::find(data, b"\"usage\"").is_some()
}

/// The event's `data:` lines joined with `\n` (SSE's own rule): borrowed
/// from `event` when it has at most one such line, as nearly every event
/// has.
pub(crate) fn event_data(event: &[u8]) -> Cow<'_, [u8]> {
    let mut lines = lines(event).filter_map(|line| {
        let value = line.strip_prefix(b"data:")?;
        Some(value.strip_prefix(b" ").unwrap_or(value))
    });
    let Some(first) = lines.next() else { return Cow::Borrowed(&[]) };
    let Some(second) = lines.next() else { return Cow::Borrowed(first) };
    let mut data = Vec::with_capacity(first.len() + second.len() + 1);
    data.extend_from_slice(first);
    for line in std::iter::once(second).chain(lines) {
        data.push(b'\n');
        data.extend_from_slice(line);
    }
    Cow::Owned(data)
}

/// Where an event's data lies, as found while its end was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DataAt {
    /// No `data:` line: the data is empty.
    None,
    /// One `data:` line, whose value is this part of the buffer.
    One(Range<usize>),
    /// Several, to be joined (`event_data`).
    Many,
}

/// The first event in `buf` from `start` (where an event begins): its end,
/// as `find_event_end(buf, start)` finds it, and where its data lies, as
/// `event_data` reads it; one pass, line by line.
pub(crate) fn next_event(buf: &[u8], start: usize) -> Option<(usize, DataAt)> {
    let mut data = DataAt::None;
    let mut line = start;
    loop {
        let eol = line + memchr::memchr2(b'\n', b'\r', buf.get(line..)?)?;
        if let Some(value) = buf[line..eol].strip_prefix(b"data:") {
            let from = eol - value.len() + usize::from(value.first() == Some(&b' '));
            data = match data {
                DataAt::None => DataAt::One(from..eol),
                _ => DataAt::Many,
            };
        }
        let next = match (buf[eol], buf.get(eol + 1)) {
            (b'\r', None) => return None,
            (b'\r', Some(b'\n')) => eol + 2,
            _ => eol + 1,
        };
        // A blank line ends the event.
        match (buf.get(next)?, buf.get(next + 1)) {
            (b'\n', _) => return Some((next + 1, data)),
            (b'\r', Some(b'\n')) => return Some((next + 2, data)),
            (b'\r', Some(_)) => return Some((next + 1, data)),
            (b'\r', None) => return None,
            _ => line = next,
        }
    }
}

/// The pieces of `event` between its line-ending bytes (each `\n` or `\r`
/// ends one, so a `\r\n` leaves an empty piece, which no field reads).
fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(event);
    std::iter::from_fn(move || {
        let text = rest?;
        match memchr::memchr2(b'\n', b'\r', text) {
            Some(at) => {
                rest = text.get(at + 1..);
                Some(&text[..at])
            }
            None => rest.take(),
        }
    })
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
        // Straight to the next line ending: the bytes between cannot end one.
        i += memchr::memchr2(b'\n', b'\r', &buf[i..])?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    use tokio::sync::mpsc;

    use crate::{
        meter::{
            Charge, UsageSink,
            pump::{Events, Relay as _},
        },
        pricing::Usage,
    };

    const CONTENT: &str = "data: {\"id\":\"c1\",\"model\":\"m\",\"created\":5,\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n";
    const USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    #[test]
    fn only_the_first_token_starts_a_stream_not_its_opening_events() {
        let opening_chat = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#,
            r#"{"choices":[],"prompt_filter_results":[{"prompt_index":0}]}"#,
            r#"{"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant"},"content_filter_results":{}}]}"#,
        ];
        for data in opening_chat {
            assert!(opening(data.as_bytes(), false), "{data}");
        }
        let first_chat = [
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"text":"hi","index":0,"finish_reason":null}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"error":{"message":"overloaded"}}"#,
            "[DONE]",
        ];
        for data in first_chat {
            assert!(!opening(data.as_bytes(), false), "{data}");
        }
        for kind in ["response.created", "response.in_progress", "response.output_item.added"] {
            assert!(opening(format!(r#"{{"type":"{kind}"}}"#).as_bytes(), true), "{kind}");
        }
        for kind in ["response.output_text.delta", "response.completed", "response.failed", "error"] {
            assert!(!opening(format!(r#"{{"type":"{kind}"}}"#).as_bytes(), true), "{kind}");
        }
    }

    fn meter() -> (Meter, mpsc::UnboundedReceiver<crate::spool::Entry>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = UsageSink::new(tx, "node");
        (Meter::new(Charge::test("r1"), sink, 40), rx)
    }

    fn run(filter: SseFilter, chunks: &[&[u8]], meter: &mut Meter) -> (Vec<u8>, bool) {
        let mut events = Events::new(filter);
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&events.push(Bytes::copy_from_slice(c), Some(meter)));
        }
        out.extend_from_slice(&events.finish(Some(meter)));
        (out, events.complete())
    }

    #[test]
    fn usage_chunk_is_dropped_unless_the_client_asked() {
        let stream = format!("{CONTENT}{CONTENT}{USAGE}{DONE}");
        let (mut m, _rx) = meter();
        let (out, complete) = run(SseFilter::new(false), &[stream.as_bytes()], &mut m);
        assert_eq!(out, format!("{CONTENT}{CONTENT}{DONE}").as_bytes());
        assert!(complete);
        assert_eq!(
            m.seen(),
            Some(Usage { prompt_tokens: 7, completion_tokens: 3, cached_tokens: 0, ..Usage::default() })
        );

        let (mut m, _rx) = meter();
        assert_eq!(run(SseFilter::new(true), &[stream.as_bytes()], &mut m).0, stream.as_bytes());
        assert!(m.seen().is_some());
    }

    #[test]
    fn a_client_that_asked_for_usage_gets_an_estimate_when_the_upstream_sends_none() {
        let stream = format!("{CONTENT}{DONE}");
        let (mut m, _rx) = meter();
        let (out, _) = run(SseFilter::new(true), &[stream.as_bytes()], &mut m);
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with(CONTENT) && out.ends_with(DONE), "{out}");
        let added = out[CONTENT.len()..out.len() - DONE.len()].strip_prefix("data: ").unwrap();
        let chunk: serde_json::Value = serde_json::from_str(added.trim()).unwrap();
        assert_eq!((chunk["id"].as_str(), chunk["created"].as_i64()), (Some("c1"), Some(5)));
        assert_eq!(chunk["choices"], serde_json::json!([]));
        assert!(chunk["usage"]["prompt_tokens"].as_i64().unwrap() > 0);
        assert_eq!(chunk["usage"]["completion_tokens"], 1, "\"hi\" is one token");
        let (mut m, _rx) = meter();
        assert_eq!(run(SseFilter::new(false), &[stream.as_bytes()], &mut m).0, stream.as_bytes());
    }

    #[test]
    fn events_split_anywhere_are_reassembled_exactly() {
        let stream = format!("{CONTENT}{USAGE}{DONE}").replace("\n", "\r\n");
        let bytes = stream.as_bytes();
        for cut in 1..bytes.len() {
            let (mut m, _rx) = meter();
            let (out, _) = run(SseFilter::new(false), &[&bytes[..cut], &bytes[cut..]], &mut m);
            let want = format!("{CONTENT}{DONE}").replace("\n", "\r\n");
            assert_eq!(String::from_utf8_lossy(&out), want, "cut at {cut}");
            assert_eq!(m.seen().map(|u| u.prompt_tokens), Some(7), "cut at {cut}");
        }
    }

    #[test]
    fn one_byte_at_a_time_and_comments_pass_through() {
        let stream = format!(": keep-alive\n\n{CONTENT}event: x\ndata: {{\"a\":\n data: 1}}\n\n{DONE}partial");
        let chunks: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        let (mut m, _rx) = meter();
        assert_eq!(run(SseFilter::new(false), &chunks, &mut m).0, stream.as_bytes());
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
        assert_eq!(&*event_data(b"event: e\ndata: {\"a\":\ndata:1}\n\n"), b"{\"a\":\n1}");
        assert_eq!(&*event_data(b"event: e\r\ndata:x\r\n\r\n"), b"x");
        assert_eq!(&*event_data(b"data: a\rdata: b\r\rdata:"), b"a\nb\n");
        assert_eq!(&*event_data(b": comment\n\n"), b"");
    }

    /// The event's data as read line by line, byte by byte: what
    /// `event_data` must give.
    fn data_read_bytewise(event: &[u8]) -> Vec<u8> {
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

    /// The first event's end found byte by byte: what `find_event_end`
    /// must give.
    fn end_found_bytewise(buf: &[u8], from: usize) -> Option<usize> {
        let line_end = |i: usize| -> Option<Option<usize>> {
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
            match line_end(i) {
                None => i += 1,
                Some(None) => return None,
                Some(Some(end)) => match line_end(end) {
                    Some(Some(after)) => return Some(after),
                    Some(None) => return None,
                    None if end >= buf.len() => return None,
                    None => i = end,
                },
            }
        }
        None
    }

    /// A typed event read as it was before glances: parsed whole, its text
    /// added as it passes.
    fn typed_event_parsed(filter: &mut SseFilter, raw: Bytes, data: &[u8], meter: &mut Meter) -> Bytes {
        if !filter.started && !data.is_empty() {
            filter.started = !opening(data, true);
        }
        if data.trim_ascii() == b"[DONE]" {
            filter.done = true;
            return raw;
        }
        if data.is_empty() {
            return raw;
        }
        let event = TypedEvent::read(data);
        if let Some(usage) = event.usage() {
            filter.usage_seen = true;
            meter.observe(usage);
        }
        if let Some(text) = event.text(data) {
            meter.add_text(&text);
        }
        if TypedEvent::is_terminal(data) {
            filter.done = true;
        }
        meter.add_chunks(1);
        raw
    }

    /// `stream` split into its events (the rest, if any, last).
    fn split(stream: &[u8]) -> Vec<Vec<u8>> {
        let mut events = Vec::new();
        let mut from = 0;
        while let Some(end) = find_event_end(stream, from) {
            events.push(stream[from..end].to_vec());
            from = end;
        }
        if from < stream.len() {
            events.push(stream[from..].to_vec());
        }
        events
    }

    #[test]
    fn a_chunk_of_whole_events_passed_as_they_came_is_sent_without_a_copy() {
        let (mut m, _rx) = meter();
        let mut events = Events::new(SseFilter::typed_events());
        let chunk = Bytes::from(format!("{CONTENT}{CONTENT}{CONTENT}data: {{\"a\""));
        let sent = events.push(chunk.clone(), Some(&mut m));
        assert_eq!(sent, chunk[..3 * CONTENT.len()]);
        assert_eq!(sent.as_ptr(), chunk.as_ptr(), "the chunk's own bytes");
        // The event begun there ends in the next chunk: joined, then sent
        // with what follows it.
        let sent = events.push(Bytes::from(format!("}}\n\n{CONTENT}")), Some(&mut m));
        assert_eq!(sent, format!("data: {{\"a\"}}\n\n{CONTENT}").as_bytes());
        // A withheld usage chunk between two passed ones: the rest copied.
        let mut events = Events::new(SseFilter::new(false));
        let sent = events.push(Bytes::from(format!("{CONTENT}{USAGE}{CONTENT}")), Some(&mut m));
        assert_eq!(sent, format!("{CONTENT}{CONTENT}").as_bytes());
        m.cancel();
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn events_are_framed_and_read_as_byte_by_byte(chunks in crate::fuzz::sse_chunks(), from in 0usize..8) {
            let stream = chunks.concat();
            for at in 0..=stream.len() {
                let buf = &stream[at..];
                proptest::prop_assert_eq!(find_event_end(buf, from), end_found_bytewise(buf, from));
            }
            for at in 0..=stream.len() {
                let found = next_event(&stream, at).map(|(end, data)| {
                    let data = match data {
                        DataAt::None => Vec::new(),
                        DataAt::One(value) => stream[value].to_vec(),
                        DataAt::Many => event_data(&stream[at..end]).into_owned(),
                    };
                    (end, data)
                });
                let bytewise = end_found_bytewise(&stream, at).map(|end| (end, data_read_bytewise(&stream[at..end])));
                proptest::prop_assert_eq!(found, bytewise);
            }
            for chunk in &chunks {
                proptest::prop_assert_eq!(&*event_data(chunk), data_read_bytewise(chunk));
            }
            proptest::prop_assert_eq!(&*event_data(&stream), data_read_bytewise(&stream));
        }

        #[test]
        fn typed_events_glanced_at_meter_as_when_each_is_parsed(
            chunks in proptest::prop_oneof![crate::meter::event::tests::event_stream(), crate::fuzz::sse_chunks()],
        ) {
            let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let outcome = |filter: &mut dyn FnMut(Bytes, &[u8], &mut Meter) -> Bytes| {
                let (mut meter, _rx) = meter();
                let mut out = Vec::new();
                for event in split(&chunks.concat()) {
                    let data = event_data(&event);
                    out.extend_from_slice(&filter(Bytes::copy_from_slice(&event), &data, &mut meter));
                }
                let seen = (out, meter.seen(), meter.estimate());
                meter.cancel();
                seen
            };
            let mut glancing = SseFilter::typed_events();
            let mut parsed = SseFilter::typed_events();
            let ours = outcome(&mut |raw, data, meter| glancing.event(raw, data, Some(meter)));
            let theirs = outcome(&mut |raw, data, meter| typed_event_parsed(&mut parsed, raw, data, meter));
            proptest::prop_assert_eq!(ours, theirs);
            proptest::prop_assert_eq!((glancing.done, glancing.usage_seen), (parsed.done, parsed.usage_seen));
        }

        #[test]
        fn any_upstream_stream_is_relayed_without_a_panic(
            chunks in crate::fuzz::sse_chunks(),
            wants_usage in proptest::bool::ANY,
            typed in proptest::bool::ANY,
        ) {
            let (mut meter, _rx) = meter();
            let filter = if typed { SseFilter::typed_events() } else { SseFilter::new(wants_usage) };
            let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let (out, _) = run(filter, &chunks, &mut meter);
            if typed {
                // Typed events are forwarded byte for byte.
                proptest::prop_assert_eq!(out, chunks.concat());
            }
        }
    }
}
