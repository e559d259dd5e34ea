//! Streamed answers translated event by event. Each translator is fed the
//! `data:` payload of one upstream SSE event at a time (the caller splits
//! the byte stream) and returns the events to send the client now, so the
//! first token reaches the client as soon as the upstream sends it.
//!
//! A stream the upstream ends cleanly is closed properly for the client. A
//! stream cut short (no finish reason and no end marker) is left cut, with
//! no closing events: the client sees the truncation instead of a made-up
//! ending.
//!
//! Reasoning crosses as it does in whole responses: chat
//! `delta.reasoning_content` becomes a `thinking` block (with an empty
//! signature and no `signature_delta`), `thinking_delta` becomes
//! `delta.reasoning_content`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{
    Dropped, answer_stop_reason, finish_reason,
    response::reasoning_text,
    str_field,
    text_chunk::{Lean, TextChunk},
    usage,
};
use crate::{json_body::push_json_string, meter::event::MessagesEvent, pricing::Usage};

/// One SSE event for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` line: the type of a messages event; `None` for chat
    /// streams, which carry only `data:`.
    pub event: Option<&'static str>,
    /// The `data:` payload: one line of JSON, or `[DONE]`.
    pub data: String,
}

/// Chat-completion chunks from an upstream as messages events for a client.
///
/// Emits `message_start` with the first chunk, a `thinking` block for
/// reasoning, a text block for content and a `tool_use` block per tool call
/// (arguments as `input_json_delta`), closes each block when the next begins
/// or the choice finishes, and sends `message_delta` (stop reason, usage)
/// and `message_stop` once `[DONE]` arrives, since the usage chunk follows
/// the finish chunk.
#[derive(Debug, Default)]
pub struct ChatToMessagesStream {
    started: bool,
    ended: bool,
    next_block: u64,
    /// The open block's index and kind.
    open: Option<(u64, Block)>,
    /// The chat tool-call index of each tool block, and the block's index.
    tools: Vec<(u64, u64)>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

/// Messages events from an upstream as chat-completion chunks for a client.
///
/// The first chunk carries the role, text deltas become `content`, thinking
/// deltas `reasoning_content`, each `tool_use` block one entry of
/// `tool_calls`, `message_delta` the finish chunk; after `message_stop` come
/// the usage chunk (if the client asked for
/// `stream_options.include_usage`) and `[DONE]`. Thinking signatures,
/// `redacted_thinking` and server-tool blocks and citations are dropped and
/// listed in [`MessagesToChatStream::dropped`].
#[derive(Debug)]
pub struct MessagesToChatStream {
    include_usage: bool,
    created: i64,
    id: Value,
    model: Value,
    started: bool,
    ended: bool,
    finished: bool,
    /// Per tool block: its messages block index, its chat tool-call index,
    /// and whether any arguments were sent.
    tools: Vec<(u64, u64, bool)>,
    usage: crate::meter::answer::MessagesStreamUsage,
    dropped: Dropped,
}

/// The kind of a block [`ChatToMessagesStream`] has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    Tool,
}

// === impl SseEvent ===

impl SseEvent {
    fn named(event: &'static str, data: &Value) -> SseEvent {
        SseEvent { event: Some(event), data: data.to_string() }
    }

    fn data(data: &Value) -> SseEvent {
        SseEvent { event: None, data: data.to_string() }
    }

    fn done() -> SseEvent {
        SseEvent { event: None, data: "[DONE]".to_owned() }
    }

    /// The event on the wire: `event: <name>\ndata: <data>\n\n`, or just the
    /// `data:` line for chat streams.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = String::with_capacity(self.data.len() + 32);
        if let Some(event) = self.event {
            out.push_str("event: ");
            out.push_str(event);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&self.data);
        out.push_str("\n\n");
        Bytes::from(out)
    }

    /// `events` on the wire, back to back.
    pub fn encode(events: &[SseEvent]) -> Bytes {
        let mut out = Vec::new();
        for event in events {
            out.extend_from_slice(&event.to_bytes());
        }
        Bytes::from(out)
    }
}

// === impl ChatToMessagesStream ===

impl ChatToMessagesStream {
    /// A translator for one stream.
    pub fn new() -> ChatToMessagesStream {
        ChatToMessagesStream::default()
    }

    /// Takes the data of one upstream event (a chunk's JSON or `[DONE]`);
    /// returns the events to send now. Data that is not JSON is skipped; an
    /// upstream `error` object becomes a messages `error` event and ends the
    /// stream.
    pub fn push(&mut self, data: &[u8]) -> Vec<SseEvent> {
        if self.ended {
            return Vec::new();
        }
        if data.trim_ascii() == b"[DONE]" {
            return self.complete(true);
        }
        let mut out = Vec::new();
        // Most chunks only add text: those are translated without being
        // parsed into a value.
        match TextChunk::read(data).filter(|_| self.started) {
            Some(Lean::Text(text)) => {
                self.push_text(&text, &mut out);
                return out;
            }
            // Arguments of a call whose block is open already; a new call
            // is read whole, for its id and name.
            Some(Lean::Arguments { call, arguments }) => {
                if let Some(&(_, index)) = self.tools.iter().find(|(i, _)| *i == call) {
                    out.push(content_delta(index, Content::Arguments, &arguments));
                    return out;
                }
            }
            None => {}
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            return out;
        };
        self.push_chunk(&chunk, out)
    }

    /// `push` for a chunk parsed whole.
    fn push_chunk(&mut self, chunk: &Value, mut out: Vec<SseEvent>) -> Vec<SseEvent> {
        if let Some(error) = chunk.get("error") {
            self.ended = true;
            let message = str_field(error, "message").unwrap_or("the upstream stream failed");
            let event = json!({ "type": "error", "error": { "type": "api_error", "message": message } });
            out.push(SseEvent::named("error", &event));
            return out;
        }
        if let Some(usage) = chunk.get("usage").and_then(usage::from_chat) {
            self.usage = Some(usage);
        }
        if !self.started {
            self.started = true;
            // Only some upstreams know the prompt size this early.
            let usage = Usage { completion_tokens: 0, ..self.usage.unwrap_or_default() };
            let start = json!({
                "type": "message_start",
                "message": {
                    "id": chunk.get("id").cloned().unwrap_or(Value::Null),
                    "type": "message",
                    "role": "assistant",
                    "model": chunk.get("model").cloned().unwrap_or(Value::Null),
                    "content": [],
                    "stop_reason": Value::Null,
                    "stop_sequence": Value::Null,
                    "usage": usage::to_messages(&usage),
                },
            });
            out.push(SseEvent::named("message_start", &start));
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return out;
        };
        let delta = choice.get("delta");
        if let Some(reasoning) = delta.and_then(reasoning_text) {
            let index = match self.open {
                Some((index, Block::Thinking)) => index,
                _ => {
                    let block = json!({ "type": "thinking", "thinking": "", "signature": "" });
                    self.open_block(block, Block::Thinking, &mut out)
                }
            };
            out.push(block_delta(index, json!({ "type": "thinking_delta", "thinking": reasoning })));
        }
        if let Some(text) = delta.and_then(|d| str_field(d, "content")).filter(|t| !t.is_empty()) {
            self.push_text(text, &mut out);
        }
        let calls = delta.and_then(|d| d.get("tool_calls")).and_then(Value::as_array);
        for (position, call) in calls.into_iter().flatten().enumerate() {
            let call_index = call.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
            let function = call.get("function");
            let index = match self.tools.iter().find(|(i, _)| *i == call_index) {
                Some(&(_, index)) => index,
                None => {
                    let block = json!({
                        "type": "tool_use",
                        "id": call.get("id").cloned().unwrap_or_else(|| "".into()),
                        "name": function.and_then(|f| f.get("name")).cloned().unwrap_or_else(|| "".into()),
                        "input": {},
                    });
                    let index = self.open_block(block, Block::Tool, &mut out);
                    self.tools.push((call_index, index));
                    index
                }
            };
            let arguments = function.and_then(|f| str_field(f, "arguments")).filter(|a| !a.is_empty());
            if let Some(arguments) = arguments {
                out.push(content_delta(index, Content::Arguments, arguments));
            }
        }
        if let Some(reason) = str_field(choice, "finish_reason") {
            self.finish_reason = Some(reason.to_owned());
            self.close_block(&mut out);
        }
        out
    }

    /// The upstream's stream ended without `[DONE]`: closes the message if
    /// the upstream had finished its answer, else sends nothing.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        self.complete(false)
    }

    /// The usage the upstream reported (prompt tokens include cached ones);
    /// `None` if it reported none.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Answer text: a text delta, in a text block opened for it unless one
    /// is open.
    fn push_text(&mut self, text: &str, out: &mut Vec<SseEvent>) {
        let index = match self.open {
            Some((index, Block::Text)) => index,
            _ => self.open_block(json!({ "type": "text", "text": "" }), Block::Text, out),
        };
        out.push(content_delta(index, Content::Text, text));
    }

    /// Closes the open block and opens `block`; returns its index.
    fn open_block(&mut self, block: Value, kind: Block, out: &mut Vec<SseEvent>) -> u64 {
        self.close_block(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, kind));
        let start = json!({ "type": "content_block_start", "index": index, "content_block": block });
        out.push(SseEvent::named("content_block_start", &start));
        index
    }

    fn close_block(&mut self, out: &mut Vec<SseEvent>) {
        if let Some((index, _)) = self.open.take() {
            out.push(SseEvent::named("content_block_stop", &json!({ "type": "content_block_stop", "index": index })));
        }
    }

    fn complete(&mut self, clean: bool) -> Vec<SseEvent> {
        if self.ended || !self.started || (!clean && self.finish_reason.is_none()) {
            self.ended = true;
            return Vec::new();
        }
        self.ended = true;
        let mut out = Vec::new();
        self.close_block(&mut out);
        let stop = answer_stop_reason(self.finish_reason.as_deref(), !self.tools.is_empty(), false);
        let usage = match &self.usage {
            Some(usage) => usage::to_messages(usage),
            None => json!({ "output_tokens": 0 }),
        };
        let delta = json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop, "stop_sequence": Value::Null },
            "usage": usage,
        });
        out.push(SseEvent::named("message_delta", &delta));
        out.push(SseEvent::named("message_stop", &json!({ "type": "message_stop" })));
        out
    }
}

/// What a content delta carries: answer text or tool arguments.
#[derive(Debug, Clone, Copy)]
enum Content {
    Text,
    Arguments,
}

/// A text or arguments delta, as `block_delta` serialises it (names in the
/// order `serde_json` writes them), written out directly: most events of a
/// translated stream are these.
fn content_delta(index: u64, content: Content, text: &str) -> SseEvent {
    let (name, kind) = match content {
        Content::Text => ("text", "text_delta"),
        Content::Arguments => ("partial_json", "input_json_delta"),
    };
    let mut data = String::with_capacity(text.len() + 90);
    data.push_str(r#"{"delta":{""#);
    data.push_str(name);
    data.push_str(r#"":"#);
    push_json_string(&mut data, text);
    data.push_str(r#","type":""#);
    data.push_str(kind);
    data.push_str(r#""},"index":"#);
    data.push_str(itoa::Buffer::new().format(index));
    data.push_str(r#","type":"content_block_delta"}"#);
    SseEvent { event: Some("content_block_delta"), data }
}

fn block_delta(index: u64, delta: Value) -> SseEvent {
    SseEvent::named("content_block_delta", &json!({ "type": "content_block_delta", "index": index, "delta": delta }))
}

// === impl MessagesToChatStream ===

impl MessagesToChatStream {
    /// A translator for one stream whose chunks say they were `created` at
    /// that Unix time. `include_usage`: the client asked for the usage chunk.
    pub fn new(include_usage: bool, created: i64) -> MessagesToChatStream {
        MessagesToChatStream {
            include_usage,
            created,
            id: Value::Null,
            model: Value::Null,
            started: false,
            ended: false,
            finished: false,
            tools: Vec::new(),
            usage: crate::meter::answer::MessagesStreamUsage::default(),
            dropped: Dropped::new(),
        }
    }

    /// Takes the data of one upstream event; returns the chunks to send now.
    /// Data that is not JSON, `ping` and unknown events are skipped; an
    /// `error` event becomes a chat error object and ends the stream.
    pub fn push(&mut self, data: &[u8]) -> Vec<SseEvent> {
        self.push_read(&MessagesEvent::read(data), data)
    }

    /// `push`, given the lean reading of the event's `data` already made
    /// (the relay's, for the meter).
    pub fn push_read(&mut self, lean: &MessagesEvent<'_>, data: &[u8]) -> Vec<SseEvent> {
        if self.ended {
            return Vec::new();
        }
        // Most events are text, thinking or tool-argument deltas: those are
        // translated from the lean reading, without parsing them into a value.
        if let Some((thinking, text)) = lean.text_delta() {
            return vec![self.text_chunk(thinking, text)];
        }
        if let Some((block, arguments)) = lean.arguments_delta() {
            return self.tool_arguments(block).map(|call| self.arguments_chunk(call, arguments)).into_iter().collect();
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return Vec::new();
        };
        self.push_event(&event)
    }

    /// `push` for an event parsed whole.
    fn push_event(&mut self, event: &Value) -> Vec<SseEvent> {
        self.usage.observe(event);
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut out = Vec::new();
        match str_field(event, "type").unwrap_or_default() {
            "message_start" => {
                let message = event.get("message");
                self.id = message.and_then(|m| m.get("id")).cloned().unwrap_or(Value::Null);
                self.model = message.and_then(|m| m.get("model")).cloned().unwrap_or(Value::Null);
                self.started = true;
                out.push(self.chunk(json!({ "role": "assistant", "content": "" }), None));
            }
            "content_block_start" => {
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let kind = str_field(block, "type");
                match kind {
                    Some("text") => {
                        if let Some(text) = str_field(block, "text").filter(|t| !t.is_empty()) {
                            out.push(self.text_chunk(false, text));
                        }
                    }
                    Some("thinking") => {
                        if let Some(thinking) = str_field(block, "thinking").filter(|t| !t.is_empty()) {
                            out.push(self.text_chunk(true, thinking));
                        }
                    }
                    Some("tool_use") => {
                        let call_index = self.tools.len() as u64;
                        self.tools.push((index, call_index, false));
                        let call = json!({
                            "index": call_index,
                            "id": block.get("id").cloned().unwrap_or(Value::Null),
                            "type": "function",
                            "function": { "name": block.get("name").cloned().unwrap_or(Value::Null), "arguments": "" },
                        });
                        out.push(self.chunk(json!({ "tool_calls": [call] }), None));
                    }
                    _ => self.dropped.note_block(kind),
                }
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                match str_field(delta, "type") {
                    Some("text_delta") => {
                        if let Some(text) = str_field(delta, "text").filter(|t| !t.is_empty()) {
                            out.push(self.text_chunk(false, text));
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(thinking) = str_field(delta, "thinking").filter(|t| !t.is_empty()) {
                            out.push(self.text_chunk(true, thinking));
                        }
                    }
                    Some("input_json_delta") => {
                        let partial = str_field(delta, "partial_json").filter(|p| !p.is_empty());
                        if let (Some(partial), Some(call_index)) = (partial, self.tool_arguments(index)) {
                            out.push(self.arguments_chunk(call_index, partial));
                        }
                    }
                    Some("signature_delta") => self.dropped.note("signature"),
                    Some("citations_delta") => self.dropped.note("citations"),
                    // Deltas of blocks already noted as dropped.
                    _ => {}
                }
            }
            "content_block_stop" => {
                // A tool called without arguments sends no delta; chat
                // clients parse `arguments`, so they get an empty object.
                let silent = self.tools.iter().any(|(block, _, sent)| *block == index && !sent);
                if let Some(call_index) = self.tool_arguments(index).filter(|_| silent) {
                    out.push(self.arguments_chunk(call_index, "{}"));
                }
            }
            "message_delta" => {
                let stop = event.pointer("/delta/stop_reason").and_then(Value::as_str).map_or("stop", finish_reason);
                self.finished = true;
                out.push(self.chunk(json!({}), Some(stop)));
            }
            "message_stop" => return self.complete(true),
            "error" => {
                self.ended = true;
                let error = event.get("error");
                let body = json!({
                    "error": {
                        "message": error.and_then(|e| str_field(e, "message")).unwrap_or("the upstream stream failed"),
                        "type": error.and_then(|e| str_field(e, "type")).unwrap_or("api_error"),
                        "param": Value::Null,
                        "code": Value::Null,
                    },
                });
                out.push(SseEvent::data(&body));
            }
            _ => {}
        }
        out
    }

    /// The upstream's stream ended without `message_stop`: closes the
    /// stream if the upstream had finished its answer, else sends nothing.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        self.complete(false)
    }

    /// The usage the upstream reported, prompt tokens including cache reads
    /// and writes; `None` if it reported none.
    pub fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }

    /// What the translation has dropped so far (thinking signatures,
    /// blocks with no chat equivalent, citations), for the caller to log
    /// when the stream ends.
    pub fn dropped(&self) -> &Dropped {
        &self.dropped
    }

    /// Marks the tool block at `block` as having arguments; its call index.
    fn tool_arguments(&mut self, block: u64) -> Option<u64> {
        let tool = self.tools.iter_mut().find(|(b, _, _)| *b == block)?;
        tool.2 = true;
        Some(tool.1)
    }

    /// A chunk of tool call `call_index`'s arguments, written out as
    /// `text_chunk` is.
    fn arguments_chunk(&self, call_index: u64, arguments: &str) -> SseEvent {
        self.written_chunk(|data| {
            data.push_str(r#"{"tool_calls":[{"function":{"arguments":"#);
            push_json_string(data, arguments);
            data.push_str(r#"},"index":"#);
            data.push_str(itoa::Buffer::new().format(call_index));
            data.push_str("}]}");
        })
    }

    /// A chunk adding `text` to the answer (`content`) or, when `thinking`,
    /// to its reasoning (`reasoning_content`), written out as `chunk`
    /// serialises it.
    fn text_chunk(&self, thinking: bool, text: &str) -> SseEvent {
        self.written_chunk(|data| {
            data.push_str(if thinking { r#"{"reasoning_content":"# } else { r#"{"content":"# });
            push_json_string(data, text);
            data.push('}');
        })
    }

    /// What `chunk` serialises for a delta `delta` writes and no finish
    /// reason (names in the order `serde_json` writes them), written out
    /// directly: most chunks of a translated stream are these.
    fn written_chunk(&self, delta: impl FnOnce(&mut String)) -> SseEvent {
        let mut data = String::with_capacity(256);
        data.push_str(r#"{"choices":[{"delta":"#);
        delta(&mut data);
        data.push_str(r#","finish_reason":null,"index":0,"logprobs":null}],"created":"#);
        data.push_str(itoa::Buffer::new().format(self.created));
        data.push_str(r#","id":"#);
        data.push_str(&self.id.to_string());
        data.push_str(r#","model":"#);
        data.push_str(&self.model.to_string());
        data.push_str(r#","object":"chat.completion.chunk"}"#);
        SseEvent { event: None, data }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> SseEvent {
        let choice = json!({ "index": 0, "delta": delta, "logprobs": Value::Null, "finish_reason": finish_reason });
        SseEvent::data(&self.envelope(json!([choice])))
    }

    fn envelope(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    fn complete(&mut self, clean: bool) -> Vec<SseEvent> {
        if self.ended || !self.started || (!clean && !self.finished) {
            self.ended = true;
            return Vec::new();
        }
        self.ended = true;
        let mut out = Vec::new();
        if !self.finished {
            out.push(self.chunk(json!({}), Some("stop")));
        }
        if let Some(usage) = self.usage.usage().filter(|_| self.include_usage) {
            let mut chunk = self.envelope(json!([]));
            chunk["usage"] = usage::to_chat(&usage);
            out.push(SseEvent::data(&chunk));
        }
        out.push(SseEvent::done());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed_for_the_wire() {
        let named = SseEvent::named("message_stop", &json!({ "type": "message_stop" }));
        assert_eq!(named.to_bytes(), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        let chat = [SseEvent::data(&json!({ "a": 1 })), SseEvent::done()];
        assert_eq!(SseEvent::encode(&chat), "data: {\"a\":1}\n\ndata: [DONE]\n\n");
    }

    /// `push` as it was: every chunk parsed into a value.
    fn push_parsed(stream: &mut ChatToMessagesStream, data: &[u8]) -> Vec<SseEvent> {
        if stream.ended {
            return Vec::new();
        }
        if data.trim_ascii() == b"[DONE]" {
            return stream.complete(true);
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(chunk) => stream.push_chunk(&chunk, Vec::new()),
            Err(_) => Vec::new(),
        }
    }

    /// A JSON object written out by hand (names may repeat, in any order).
    fn object(
        names: &'static [&'static str],
        value: impl proptest::strategy::Strategy<Value = String>,
    ) -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop::collection::vec((prop::sample::select(names), value), 0..5).prop_map(|fields| {
            let fields: Vec<String> =
                fields.iter().map(|(name, value)| format!("{}:{value}", Value::from(*name))).collect();
            format!("{{{}}}", fields.join(","))
        })
    }

    /// A chat stream as upstreams send it, with every kind of chunk the
    /// translator acts on: text (most of them), reasoning, tool calls,
    /// finish reasons, usage, errors, fields given twice, and anything.
    fn chat_stream() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
        use proptest::prelude::*;
        let anything = || crate::fuzz::json().prop_map(|value| value.to_string());
        let text = || ".{0,6}".prop_map(|text| Value::from(text).to_string());
        let plain = text().prop_map(|text| {
            format!(r#"{{"id":"c","model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"finish_reason":null}}]}}"#)
        });
        let calls = r#"[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]"#;
        let scalars = || prop::sample::select(vec!["null", "\"\"", "\"stop\"", "0", "[]"]).prop_map(str::to_owned);
        let delta = object(
            &["content", "reasoning_content", "reasoning", "tool_calls", "role"],
            prop_oneof![text(), scalars(), Just(calls.to_owned()), anything()],
        );
        let choice =
            object(&["index", "delta", "finish_reason", "logprobs"], prop_oneof![delta, scalars(), anything()]);
        let choices = prop::collection::vec(choice, 0..3).prop_map(|choices| format!("[{}]", choices.join(",")));
        let usage = Just(r#"{"prompt_tokens":3,"completion_tokens":2}"#.to_owned());
        let chunk =
            object(&["id", "model", "choices", "usage", "error"], prop_oneof![choices, usage, scalars(), anything()]);
        // A text chunk with one more field, at one of its three levels:
        // each is one thing that takes a chunk off the lean path, or not.
        let extra = |fields: &'static [&'static str]| {
            prop::option::of(prop::sample::select(fields))
                .prop_map(|field| field.map_or(String::new(), |f| format!(",{f}")))
        };
        let in_delta = extra(&[
            r#""reasoning_content":"r""#,
            r#""reasoning_content":null"#,
            r#""reasoning":"""#,
            r#""reasoning":"r""#,
            r#""tool_calls":[{"index":0,"function":{"arguments":"{}"}}]"#,
            r#""tool_calls":null"#,
            r#""content":"again""#,
            r#""role":"assistant""#,
        ]);
        let in_choice_extra = || {
            extra(&[
                r#""finish_reason":"stop""#,
                r#""finish_reason":null"#,
                r#""finish_reason":"tool_calls""#,
                r#""delta":{"content":"again"}"#,
                r#""logprobs":null"#,
            ])
        };
        let in_choice = in_choice_extra();
        let at_top = extra(&[
            r#""usage":{"prompt_tokens":3,"completion_tokens":2}"#,
            r#""usage":null"#,
            r#""error":null"#,
            r#""error":{"message":"m"}"#,
            r#""choices":[{"delta":{"content":"again"}}]"#,
            r#""choices":[]"#,
        ]);
        let near = (text(), in_delta, in_choice, at_top).prop_map(|(text, delta, choice, top)| {
            format!(r#"{{"id":"c","choices":[{{"index":0,"delta":{{"content":{text}{delta}}}{choice}}}]{top}}}"#)
        });
        // Tool calls: a call's first chunk (its id and name) and chunks of
        // its arguments, numbered in every way a chunk numbers them, with
        // another call or other fields beside them now and then.
        let number = || prop::sample::select(vec!["0", "1", "\"x\"", "null"]);
        let call_start = (number(), text()).prop_map(|(n, arguments)| {
            format!(
                r#"{{"id":"c","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{n},"id":"call_{n}","type":"function","function":{{"name":"f","arguments":{arguments}}}}}]}}}}]}}"#
            )
        });
        let beside_call = extra(&[r#"{"index":1,"function":{"arguments":"y"}}"#, r#"{"function":{"name":"g"}}"#]);
        let beside_calls = extra(&[r#""content":"a""#, r#""content":"""#, r#""reasoning_content":"r""#]);
        let call_arguments = (number(), text(), beside_call, beside_calls, in_choice_extra()).prop_map(
            |(n, arguments, call, delta, choice)| {
                format!(
                    r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{n},"function":{{"arguments":{arguments}}}}}{call}]{delta}}}{choice}}}]}}"#
                )
            },
        );
        let any_body = crate::fuzz::body().prop_map(|body| String::from_utf8_lossy(&body).into_owned());
        let event = prop_oneof![
            3 => plain,
            3 => near,
            3 => chunk,
            2 => call_start,
            3 => call_arguments,
            1 => Just("[DONE]".to_owned()),
            1 => any_body,
        ];
        prop::collection::vec(event, 1..12)
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn a_content_delta_is_written_as_its_value_serialises(
            index in proptest::num::u64::ANY,
            arguments in proptest::bool::ANY,
            text in "(?s).{0,12}|[\\x00-\\x1f\"\\\\]{1,4}",
        ) {
            let (content, delta) = match arguments {
                false => (Content::Text, json!({ "type": "text_delta", "text": text })),
                true => (Content::Arguments, json!({ "type": "input_json_delta", "partial_json": text })),
            };
            proptest::prop_assert_eq!(content_delta(index, content, &text), block_delta(index, delta));
        }

        #[test]
        fn a_text_chunk_is_written_as_its_value_serialises(
            id in crate::fuzz::json(),
            model in crate::fuzz::json(),
            created in proptest::num::i64::ANY,
            thinking in proptest::bool::ANY,
            text in "(?s).{0,12}|[\\x00-\\x1f\"\\\\]{1,4}",
        ) {
            let stream = MessagesToChatStream { id, model, created, ..MessagesToChatStream::new(false, 0) };
            let key = if thinking { "reasoning_content" } else { "content" };
            let parsed = stream.chunk(json!({ key: text }), None);
            proptest::prop_assert_eq!(stream.text_chunk(thinking, &text), parsed);
            let call = json!({ "index": created.unsigned_abs(), "function": { "arguments": text } });
            let parsed = stream.chunk(json!({ "tool_calls": [call] }), None);
            proptest::prop_assert_eq!(stream.arguments_chunk(created.unsigned_abs(), &text), parsed);
        }

        #[test]
        fn messages_deltas_read_lean_translate_as_parsed_ones_do(events in messages_stream()) {
            let refused = |e: &String| {
                serde_json::from_slice::<Value>(e.as_bytes()).is_err()
                    && serde_json::from_slice::<serde::de::IgnoredAny>(e.as_bytes()).is_ok()
            };
            if !events.iter().any(refused) {
                let (mut lean, mut parsed) = (MessagesToChatStream::new(true, 1), MessagesToChatStream::new(true, 1));
                for event in &events {
                    proptest::prop_assert_eq!(lean.push(event.as_bytes()), push_event_parsed(&mut parsed, event.as_bytes()));
                }
                proptest::prop_assert_eq!(lean.finish(), parsed.finish());
                proptest::prop_assert_eq!(lean.usage(), parsed.usage());
            }
        }

        #[test]
        fn text_chunks_read_lean_translate_as_parsed_ones_do(chunks in chat_stream()) {
            // Chunks a parsed value refuses but a lenient reading takes (a
            // lone surrogate in a skipped field) are translated by their
            // text now; everything else must come out the same.
            let refused = |c: &String| {
                c != "[DONE]"
                    && serde_json::from_slice::<Value>(c.as_bytes()).is_err()
                    && serde_json::from_slice::<serde::de::IgnoredAny>(c.as_bytes()).is_ok()
            };
            if !chunks.iter().any(refused) {
                let (mut lean, mut parsed) = (ChatToMessagesStream::new(), ChatToMessagesStream::new());
                for chunk in &chunks {
                    proptest::prop_assert_eq!(lean.push(chunk.as_bytes()), push_parsed(&mut parsed, chunk.as_bytes()));
                }
                proptest::prop_assert_eq!(lean.finish(), parsed.finish());
                proptest::prop_assert_eq!(lean.usage(), parsed.usage());
            }
        }
    }

    /// `MessagesToChatStream::push` as it was: every event parsed.
    fn push_event_parsed(stream: &mut MessagesToChatStream, data: &[u8]) -> Vec<SseEvent> {
        if stream.ended {
            return Vec::new();
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(event) => stream.push_event(&event),
            Err(_) => Vec::new(),
        }
    }

    /// A messages stream as upstreams send it: text and thinking deltas
    /// (most of them), each sometimes with one thing more or different,
    /// every other event the translator acts on, and anything.
    fn messages_stream() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
        use proptest::prelude::*;
        let text = || ".{0,6}".prop_map(|text| Value::from(text).to_string());
        let delta = (prop::sample::select(vec!["text_delta", "thinking_delta"]), text()).prop_map(|(kind, text)| {
            let key = if kind == "text_delta" { "text" } else { "thinking" };
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"{kind}","{key}":{text}}}}}"#)
        });
        let extra = |fields: &'static [&'static str]| {
            prop::option::of(prop::sample::select(fields))
                .prop_map(|field| field.map_or(String::new(), |f| format!(",{f}")))
        };
        let in_delta = extra(&[
            r#""type":"input_json_delta""#,
            r#""type":"signature_delta""#,
            r#""type":"thinking_delta""#,
            r#""type":null"#,
            r#""text":"again""#,
            r#""text":1"#,
            r#""thinking":"t""#,
            r#""partial_json":"{}""#,
        ]);
        let at_top = extra(&[
            r#""type":"ping""#,
            r#""type":"message_delta""#,
            r#""delta":{"type":"text_delta","text":"again"}"#,
            r#""delta":null"#,
            r#""usage":{"output_tokens":3}"#,
            r#""index":2"#,
        ]);
        let near = (text(), in_delta.clone(), in_delta, at_top).prop_map(|(text, first, second, top)| {
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{text}{first}{second}}}{top}}}"#)
        });
        let others = prop::sample::select(vec![
            r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":5}}}"#,
            r#"{"type":"message_start","message":{"id":7,"model":null}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":"hm"}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"f"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ])
        .prop_map(str::to_owned);
        // Tool arguments for blocks that are tools, are not, or are not
        // named, with arguments of every kind.
        let block = prop::sample::select(vec![r#""index":2,"#, r#""index":0,"#, r#""index":"x","#, ""]);
        let partial = prop_oneof![text(), Just("null".to_owned()), Just("1".to_owned())];
        let arguments = (block, partial, extra(&[r#""text":"t""#, r#""type":"text_delta""#])).prop_map(|(block, partial, more)| {
            format!(r#"{{"type":"content_block_delta",{block}"delta":{{"type":"input_json_delta","partial_json":{partial}{more}}}}}"#)
        });
        let any_body = crate::fuzz::body().prop_map(|body| String::from_utf8_lossy(&body).into_owned());
        prop::collection::vec(prop_oneof![3 => delta, 3 => near, 3 => others, 3 => arguments, 1 => any_body], 1..12)
    }

    #[test]
    fn a_chat_stream_cut_before_its_finish_is_left_cut() {
        let mut stream = ChatToMessagesStream::new();
        let first = stream.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#);
        assert_eq!(first.len(), 3, "{first:?}");
        assert_eq!(stream.finish(), Vec::new());
        assert_eq!(stream.push(b"[DONE]"), Vec::new());
    }

    #[test]
    fn a_chat_stream_that_finished_but_lost_its_done_is_closed() {
        let mut stream = ChatToMessagesStream::new();
        stream.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#);
        stream.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
        let names: Vec<_> = stream.finish().into_iter().filter_map(|e| e.event).collect();
        assert_eq!(names, ["message_delta", "message_stop"]);
    }

    #[test]
    fn a_messages_stream_cut_before_its_delta_is_left_cut() {
        let mut stream = MessagesToChatStream::new(true, 1);
        stream.push(br#"{"type":"message_start","message":{"id":"msg","model":"m","usage":{"input_tokens":3}}}"#);
        assert_eq!(stream.finish(), Vec::new());
        assert_eq!(stream.usage().map(|u| u.prompt_tokens), Some(3));
    }

    #[test]
    fn nothing_follows_an_error() {
        let mut stream = MessagesToChatStream::new(false, 1);
        stream.push(br#"{"type":"message_start","message":{"id":"msg","model":"m"}}"#);
        let out = stream.push(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert_eq!(out.len(), 1);
        assert!(out[0].data.contains("overloaded_error"), "{out:?}");
        assert_eq!(stream.push(br#"{"type":"message_stop"}"#), Vec::new());
        assert_eq!(stream.finish(), Vec::new());
    }
}
