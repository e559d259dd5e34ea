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
mod tests;
