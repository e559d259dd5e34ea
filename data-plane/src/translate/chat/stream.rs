//! Chat-completion chunk streams and the internal form's events.
//!
//! The decoder takes one chunk's `data` at a time. Reasoning deltas open a
//! thinking block, content a text block, each tool call a tool block; the
//! open block is closed when another begins (chat interleaves nothing, but
//! a call's arguments may follow another call's start: they are given to
//! the call's own block, closed or not) or the choice finishes. The stop
//! and `End` come at `[DONE]`, after the usage chunk that follows the
//! finish chunk; a body ended without `[DONE]` ends the answer only if the
//! choice had finished, else it is left cut. An `error` object ends the
//! stream with `Event::Error`. Most chunks only add text: those are read
//! without building a value of them (`text_chunk`).
//!
//! The encoder writes `data:` lines: a role chunk first, a chunk per delta
//! (thinking as `reasoning_content`; signatures and redacted thinking are
//! dropped, noted), a tool call's id and name when its block starts (and
//! `{}` as the arguments of a call that had none, since clients parse
//! them), the finish chunk at the stop, the usage chunk when the client
//! asked for it (`include_usage`), and `[DONE]`.

use serde_json::{Value, json};

use super::{
    super::{
        Answering, Dropped,
        ir::{Block, Decode, Delta, Encode, Event},
        json_out, sse, str_field, usage,
    },
    response::{answer_model, answer_stop, finish_reason, reasoning_text},
    text_chunk::{Lean, TextChunk},
    text_scan::{self, Template},
};
use crate::pricing::Usage;

/// Chat chunks from an upstream as events.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    ended: bool,
    next_block: usize,
    /// The open block's index and kind.
    open: Option<(usize, Open)>,
    /// The chat tool-call index of each tool block, and the block's index.
    tools: Vec<(u64, usize)>,
    finish_reason: Option<String>,
    refused: bool,
    /// The bytes around the text of the stream's text chunks.
    template: Template,
    /// Read every chunk whole (tests compare the two readings).
    #[cfg(test)]
    parse_all: bool,
}

/// The kind of a block the decoder has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    Tool,
}

/// Events written as chat chunks for a client.
#[derive(Debug)]
pub struct Encoder {
    include_usage: bool,
    created: i64,
    /// The model the client named, written instead of the upstream's.
    client_model: String,
    id: Value,
    model: Value,
    /// `id` and `model` as JSON text, for the chunks written directly.
    id_json: String,
    model_json: String,
    /// Per tool block: its index, its chat call index, whether any
    /// arguments were sent.
    tools: Vec<(usize, u64, bool)>,
    usage: Option<Usage>,
    finished: bool,
    dropped: Dropped,
}

// === impl Decoder ===

impl Decoder {
    /// A decoder for one stream.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// A decoder that reads every chunk whole, as tests compare.
    #[cfg(test)]
    pub(crate) fn parsing_all() -> Decoder {
        Decoder { parse_all: true, ..Decoder::default() }
    }

    /// `push` for a chunk parsed whole.
    fn push_chunk(&mut self, chunk: &Value) -> Vec<Event> {
        let mut out = Vec::new();
        if let Some(error) = chunk.get("error") {
            self.ended = true;
            let message = str_field(error, "message").unwrap_or("the upstream stream failed").to_owned();
            out.push(Event::Error { kind: None, message });
            return out;
        }
        if !self.started {
            self.started = true;
            let id = str_field(chunk, "id").map(str::to_owned);
            out.push(Event::Start { id, model: str_field(chunk, "model").unwrap_or_default().to_owned() });
        }
        if let Some(usage) = chunk.get("usage").and_then(usage::from_chat) {
            out.push(Event::Usage(usage));
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return out;
        };
        let delta = choice.get("delta");
        if let Some(reasoning) = delta.and_then(reasoning_text) {
            let index = self.block(Open::Thinking, Block::Thinking, &mut out);
            out.push(Event::Delta { index, delta: Delta::Thinking(reasoning.to_owned()) });
        }
        if let Some(text) = delta.and_then(|d| str_field(d, "content")).filter(|t| !t.is_empty()) {
            self.push_text(text, &mut out);
        }
        if let Some(refusal) = delta.and_then(|d| str_field(d, "refusal")).filter(|t| !t.is_empty()) {
            self.refused = true;
            self.push_text(refusal, &mut out);
        }
        let calls = delta.and_then(|d| d.get("tool_calls")).and_then(Value::as_array);
        for (position, call) in calls.into_iter().flatten().enumerate() {
            let call_index = call.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
            let function = call.get("function");
            let index = match self.tools.iter().find(|(i, _)| *i == call_index) {
                Some(&(_, index)) => index,
                None => {
                    let block = Block::ToolCall {
                        id: str_field(call, "id").unwrap_or_default().to_owned(),
                        name: function.and_then(|f| str_field(f, "name")).unwrap_or_default().to_owned(),
                    };
                    let index = self.open_block(Open::Tool, block, &mut out);
                    self.tools.push((call_index, index));
                    index
                }
            };
            let arguments = function.and_then(|f| str_field(f, "arguments")).filter(|a| !a.is_empty());
            if let Some(arguments) = arguments {
                out.push(Event::Delta { index, delta: Delta::Arguments(arguments.to_owned()) });
            }
        }
        if let Some(reason) = str_field(choice, "finish_reason") {
            self.finish_reason = Some(reason.to_owned());
            self.close_block(&mut out);
        }
        out
    }

    fn push_text(&mut self, text: &str, out: &mut Vec<Event>) {
        let index = self.block(Open::Text, Block::Text, out);
        out.push(Event::Delta { index, delta: Delta::Text(text.to_owned()) });
    }

    /// The open block if it is of `kind`, else a new one.
    fn block(&mut self, kind: Open, block: Block, out: &mut Vec<Event>) -> usize {
        match self.open {
            Some((index, open)) if open == kind => index,
            _ => self.open_block(kind, block, out),
        }
    }

    /// Closes the open block and opens `block`; returns its index.
    fn open_block(&mut self, kind: Open, block: Block, out: &mut Vec<Event>) -> usize {
        self.close_block(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, kind));
        out.push(Event::BlockStart { index, block });
        index
    }

    fn close_block(&mut self, out: &mut Vec<Event>) {
        if let Some((index, _)) = self.open.take() {
            out.push(Event::BlockStop { index });
        }
    }

    fn complete(&mut self, clean: bool) -> Vec<Event> {
        if self.ended || !self.started || (!clean && self.finish_reason.is_none()) {
            self.ended = true;
            return Vec::new();
        }
        self.ended = true;
        let mut out = Vec::new();
        self.close_block(&mut out);
        out.push(Event::Stop(answer_stop(self.finish_reason.as_deref(), !self.tools.is_empty(), self.refused)));
        out.push(Event::End);
        out
    }

    fn lean(&self) -> bool {
        #[cfg(test)]
        if self.parse_all {
            return false;
        }
        self.started
    }
}

impl Decode for Decoder {
    /// Data that is not JSON is skipped.
    fn push(&mut self, data: &[u8]) -> Vec<Event> {
        if self.ended {
            return Vec::new();
        }
        if data.trim_ascii() == b"[DONE]" {
            return self.complete(true);
        }
        let mut out = Vec::new();
        if self.lean() {
            if let Some(text) = self.template.read(data) {
                self.push_text(text, &mut out);
                return out;
            }
            if let Some((text, at)) = text_scan::text_at(data) {
                if let Some(at) = at {
                    self.template.learn(data, at);
                }
                self.push_text(&text, &mut out);
                return out;
            }
        }
        match TextChunk::read(data).filter(|_| self.lean()) {
            Some(Lean::Text(text)) => {
                self.push_text(&text, &mut out);
                return out;
            }
            // Arguments of a call whose block exists; a new call is read
            // whole, for its id and name.
            Some(Lean::Arguments { call, arguments }) => {
                if let Some(&(_, index)) = self.tools.iter().find(|(i, _)| *i == call) {
                    out.push(Event::Delta { index, delta: Delta::Arguments(arguments.into_owned()) });
                    return out;
                }
            }
            None => {}
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(chunk) => self.push_chunk(&chunk),
            Err(_) => out,
        }
    }

    fn finish(&mut self) -> Vec<Event> {
        self.complete(false)
    }
}

// === impl Encoder ===

impl Encoder {
    /// An encoder for one stream answering the request `answering`
    /// describes (its model, `created`, whether it wants the usage chunk).
    pub fn new(answering: &Answering) -> Encoder {
        Encoder {
            include_usage: answering.include_usage,
            created: answering.created,
            client_model: answering.model.clone(),
            id: Value::Null,
            model: Value::Null,
            id_json: "null".to_owned(),
            model_json: "null".to_owned(),
            tools: Vec::new(),
            usage: None,
            finished: false,
            dropped: Dropped::new(),
        }
    }

    /// A chunk of tool call `call`'s arguments, written out as
    /// `text_chunk` is.
    fn arguments_chunk(&self, call: u64, arguments: &str, out: &mut Vec<u8>) {
        self.written_chunk(out, arguments.len(), |data| {
            data.extend_from_slice(br#"{"tool_calls":[{"function":{"arguments":"#);
            json_out::string(data, arguments);
            data.extend_from_slice(br#"},"index":"#);
            data.extend_from_slice(itoa::Buffer::new().format(call).as_bytes());
            data.extend_from_slice(b"}]}");
        });
    }

    /// A chunk adding `text` to the answer (`content`) or, when `thinking`,
    /// to its reasoning (`reasoning_content`).
    fn text_chunk(&self, thinking: bool, text: &str, out: &mut Vec<u8>) {
        self.written_chunk(out, text.len(), |data| {
            data.extend_from_slice(if thinking { br#"{"reasoning_content":"# } else { br#"{"content":"# });
            json_out::string(data, text);
            data.push(b'}');
        });
    }

    /// What `chunk` serialises for a delta `delta` writes (about `len`
    /// bytes) and no finish reason (names in the order `serde_json` writes
    /// them), written out directly: most chunks of a translated stream are
    /// these.
    fn written_chunk(&self, out: &mut Vec<u8>, len: usize, delta: impl FnOnce(&mut Vec<u8>)) {
        out.reserve(len + self.id_json.len() + self.model_json.len() + 160);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(br#"{"choices":[{"delta":"#);
        delta(out);
        out.extend_from_slice(br#","finish_reason":null,"index":0,"logprobs":null}],"created":"#);
        out.extend_from_slice(itoa::Buffer::new().format(self.created).as_bytes());
        out.extend_from_slice(br#","id":"#);
        out.extend_from_slice(self.id_json.as_bytes());
        out.extend_from_slice(br#","model":"#);
        out.extend_from_slice(self.model_json.as_bytes());
        out.extend_from_slice(br#","object":"chat.completion.chunk"}"#);
        out.extend_from_slice(b"\n\n");
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>, out: &mut Vec<u8>) {
        let choice = json!({ "index": 0, "delta": delta, "logprobs": Value::Null, "finish_reason": finish_reason });
        sse::data(out, &self.envelope(json!([choice])).to_string());
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

    fn tool(&mut self, index: usize) -> Option<&mut (usize, u64, bool)> {
        self.tools.iter_mut().find(|(block, _, _)| *block == index)
    }
}

impl Encode for Encoder {
    fn push(&mut self, event: &Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id, model } => {
                self.id = id.clone().map_or(Value::Null, Value::String);
                self.model = answer_model(model, &Answering { model: self.client_model.clone(), ..Default::default() })
                    .to_owned()
                    .into();
                self.id_json = self.id.to_string();
                self.model_json = self.model.to_string();
                self.chunk(json!({ "role": "assistant", "content": "" }), None, out);
            }
            Event::BlockStart { index, block } => match block {
                Block::ToolCall { id, name } => {
                    let call = self.tools.len() as u64;
                    self.tools.push((*index, call, false));
                    let call = json!({
                        "index": call,
                        "id": id,
                        "type": "function",
                        "function": { "name": name, "arguments": "" },
                    });
                    self.chunk(json!({ "tool_calls": [call] }), None, out);
                }
                Block::RedactedThinking { .. } => self.dropped.note("redacted_thinking"),
                Block::Text | Block::Thinking => {}
            },
            Event::Delta { index, delta } => match delta {
                Delta::Text(text) if !text.is_empty() => self.text_chunk(false, text, out),
                Delta::Thinking(text) if !text.is_empty() => self.text_chunk(true, text, out),
                Delta::Signature(_) => self.dropped.note("signature"),
                Delta::Arguments(arguments) if !arguments.is_empty() => {
                    if let Some(tool) = self.tool(*index) {
                        tool.2 = true;
                        let call = tool.1;
                        self.arguments_chunk(call, arguments, out);
                    }
                }
                _ => {}
            },
            Event::BlockStop { index } => {
                // A tool called without arguments sends no delta; chat
                // clients parse `arguments`, so they get an empty object.
                if let Some(tool) = self.tool(*index).filter(|tool| !tool.2) {
                    tool.2 = true;
                    let call = tool.1;
                    self.arguments_chunk(call, "{}", out);
                }
            }
            Event::Usage(usage) => self.usage = Some(*usage),
            Event::Stop(stop) => {
                self.finished = true;
                self.chunk(json!({}), Some(finish_reason(*stop)), out);
            }
            Event::End => {
                if !self.finished {
                    self.finished = true;
                    self.chunk(json!({}), Some("stop"), out);
                }
                if let Some(usage) = self.usage.filter(|_| self.include_usage) {
                    let mut chunk = self.envelope(json!([]));
                    chunk["usage"] = usage::to_chat(&usage);
                    sse::data(out, &chunk.to_string());
                }
            }
            Event::Error { kind, message } => {
                let body = json!({
                    "error": {
                        "message": message,
                        "type": kind.as_deref().unwrap_or("api_error"),
                        "param": Value::Null,
                        "code": Value::Null,
                    },
                });
                sse::data(out, &body.to_string());
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        sse::data(out, "[DONE]");
    }

    fn dropped(&self) -> Dropped {
        self.dropped.clone()
    }
}
