//! Messages event streams and the internal form's events.
//!
//! The decoder takes one event's `data` at a time; usage is accumulated
//! over the stream (`message_start` has the prompt's counts, each
//! `message_delta` the output's) and sent whole each time it changes.
//! Server-tool blocks and `citations` are dropped (noted) and the blocks
//! after them renumbered; text and thinking deltas go to the open block (a
//! messages stream has one open at a time) when it holds that kind. A
//! stream with a stop (`message_delta`) but no
//! `message_stop` is ended at its close; one cut before is left cut. An
//! `error` event ends the stream with `Event::Error`. Text, thinking and
//! argument deltas are read without building a value of them.
//!
//! The encoder holds `message_start` back until the next event, so usage
//! that arrives with the start (chat upstreams that report it in every
//! chunk) is in it; a thinking block without a signature is started with an
//! empty one, as the shape requires.

use serde_json::{Value, json};

use super::{
    super::{
        Answering, Dropped,
        chat::response::answer_model,
        ir::{Block, Decode, Delta, Encode, Event, Stop},
        json_out, sse, str_field, usage,
    },
    response::{stop, stop_reason},
};
use crate::{
    meter::{answer::MessagesStreamUsage, event::MessagesEvent},
    pricing::Usage,
};

/// Messages events from an upstream as events.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    ended: bool,
    stopped: bool,
    next_block: usize,
    /// Upstream block index to the form's, for blocks kept.
    blocks: Vec<(u64, usize, Kind)>,
    /// The upstream index of the open block.
    open: Option<u64>,
    usage: MessagesStreamUsage,
    dropped: Dropped,
    /// Read every event whole (tests compare the two readings).
    #[cfg(test)]
    parse_all: bool,
}

/// What a kept block holds, for the lean reading of its deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Other,
}

/// Events written as messages events for a client.
#[derive(Debug, Default)]
pub struct Encoder {
    /// The model the client named, written instead of the upstream's.
    client_model: String,
    /// `message_start`, held back until the next event.
    pending: Option<(Option<String>, String)>,
    usage: Option<Usage>,
}

// === impl Decoder ===

impl Decoder {
    /// A decoder for one stream.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// A decoder that reads every event whole, as tests compare.
    #[cfg(test)]
    pub(crate) fn parsing_all() -> Decoder {
        Decoder { parse_all: true, ..Decoder::default() }
    }

    /// Whether deltas may be read lean.
    fn lean(&self) -> bool {
        #[cfg(test)]
        if self.parse_all {
            return false;
        }
        true
    }

    /// The form's index and kind of upstream block `index`.
    fn block(&self, index: u64) -> Option<(usize, Kind)> {
        self.blocks.iter().find(|(upstream, _, _)| *upstream == index).map(|&(_, at, kind)| (at, kind))
    }

    /// `push` for an event parsed whole.
    fn push_event(&mut self, event: &Value) -> Vec<Event> {
        let mut out = Vec::new();
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        let kind = str_field(event, "type").unwrap_or_default();
        // The form's stream begins with its start.
        if !self.started && !matches!(kind, "message_start" | "error") {
            return out;
        }
        match kind {
            "message_start" => {
                let message = event.get("message");
                self.started = true;
                out.push(Event::Start {
                    id: message.and_then(|m| str_field(m, "id")).map(str::to_owned),
                    model: message.and_then(|m| str_field(m, "model")).unwrap_or_default().to_owned(),
                });
            }
            "content_block_start" => {
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let block_kind = str_field(block, "type");
                let (decoded, kind, first) = match block_kind {
                    Some("text") => {
                        let text = str_field(block, "text").filter(|t| !t.is_empty());
                        (Block::Text, Kind::Text, text.map(|t| Delta::Text(t.to_owned())))
                    }
                    Some("thinking") => {
                        let text = str_field(block, "thinking").filter(|t| !t.is_empty());
                        (Block::Thinking, Kind::Thinking, text.map(|t| Delta::Thinking(t.to_owned())))
                    }
                    Some("redacted_thinking") => {
                        let data = str_field(block, "data").unwrap_or_default().to_owned();
                        (Block::RedactedThinking { data }, Kind::Other, None)
                    }
                    Some("tool_use") => {
                        let id = str_field(block, "id").unwrap_or_default().to_owned();
                        let name = str_field(block, "name").unwrap_or_default().to_owned();
                        let input = block.get("input").filter(|i| i.as_object().is_some_and(|i| !i.is_empty()));
                        (Block::ToolCall { id, name }, Kind::Other, input.map(|i| Delta::Arguments(i.to_string())))
                    }
                    _ => {
                        self.dropped.note_block(block_kind);
                        return out;
                    }
                };
                let at = self.next_block;
                self.next_block += 1;
                self.blocks.push((index, at, kind));
                self.open = Some(index);
                out.push(Event::BlockStart { index: at, block: decoded });
                if let Some(delta) = first {
                    out.push(Event::Delta { index: at, delta });
                }
                if let Some(signature) = block.get("signature").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    out.push(Event::Delta { index: at, delta: Delta::Signature(signature.to_owned()) });
                }
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let text = |key: &str| str_field(delta, key).filter(|t| !t.is_empty());
                let decoded = match str_field(delta, "type") {
                    // Text goes to the open block, as the lean reading has it.
                    Some("text_delta") => {
                        out.extend(text("text").and_then(|text| self.lean_text(false, text)));
                        return out;
                    }
                    Some("thinking_delta") => {
                        out.extend(text("thinking").and_then(|text| self.lean_text(true, text)));
                        return out;
                    }
                    Some("signature_delta") => text("signature").map(|s| Delta::Signature(s.to_owned())),
                    Some("input_json_delta") => text("partial_json").map(|a| Delta::Arguments(a.to_owned())),
                    Some("citations_delta") => {
                        self.dropped.note("citations");
                        None
                    }
                    // Deltas of blocks already noted as dropped.
                    _ => None,
                };
                if let (Some(delta), Some((at, _))) = (decoded, self.block(index)) {
                    out.push(Event::Delta { index: at, delta });
                }
            }
            "content_block_stop" => {
                if let Some((at, _)) = self.block(index) {
                    out.push(Event::BlockStop { index: at });
                }
                self.open = None;
            }
            "message_delta" => {
                self.stopped = true;
            }
            "message_stop" => {
                self.ended = true;
                if !self.started {
                    return out;
                }
                if !self.stopped {
                    out.push(Event::Stop(Stop::EndTurn));
                }
                out.push(Event::End);
                return out;
            }
            "error" => {
                self.ended = true;
                let error = event.get("error");
                out.push(Event::Error {
                    kind: error.and_then(|e| str_field(e, "type")).map(str::to_owned),
                    message: error
                        .and_then(|e| str_field(e, "message"))
                        .unwrap_or("the upstream stream failed")
                        .to_owned(),
                });
                return out;
            }
            _ => return out,
        }
        if matches!(kind, "message_start" | "message_delta") {
            self.usage.observe(event);
            if let Some(usage) = self.usage.usage() {
                out.push(Event::Usage(usage));
            }
        }
        if kind == "message_delta" {
            let reason = event.pointer("/delta/stop_reason").and_then(Value::as_str);
            out.push(Event::Stop(reason.map_or(Stop::EndTurn, stop)));
        }
        out
    }

    /// A text or thinking delta read lean, for the open block if it holds
    /// that kind.
    fn lean_text(&self, thinking: bool, text: &str) -> Option<Event> {
        let (at, kind) = self.block(self.open?)?;
        let delta = match (kind, thinking) {
            (Kind::Text, false) => Delta::Text(text.to_owned()),
            (Kind::Thinking, true) => Delta::Thinking(text.to_owned()),
            _ => return None,
        };
        Some(Event::Delta { index: at, delta })
    }
}

impl Decode for Decoder {
    /// Data that is not JSON, `ping` and unknown events are skipped.
    fn push(&mut self, data: &[u8]) -> Vec<Event> {
        if self.ended {
            return Vec::new();
        }
        // Most events are text, thinking or argument deltas: those are read
        // lean, without parsing them into a value.
        let lean = if self.lean() { MessagesEvent::read(data) } else { MessagesEvent::default() };
        if let Some(event) = lean.text_delta().and_then(|(thinking, text)| self.lean_text(thinking, text)) {
            return vec![event];
        }
        if let Some((block, arguments)) = lean.arguments_delta()
            && let Some((at, _)) = self.block(block)
        {
            return vec![Event::Delta { index: at, delta: Delta::Arguments(arguments.to_owned()) }];
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(event) => self.push_event(&event),
            Err(_) => Vec::new(),
        }
    }

    /// A stream that stopped but was not closed is ended; any other is left
    /// as it is.
    fn finish(&mut self) -> Vec<Event> {
        let end = !self.ended && self.started && self.stopped;
        self.ended = true;
        if end { vec![Event::End] } else { Vec::new() }
    }

    fn dropped(&self) -> Dropped {
        self.dropped.clone()
    }
}

// === impl Encoder ===

impl Encoder {
    /// An encoder for one stream answering the request `answering`
    /// describes (its model).
    pub fn new(answering: &Answering) -> Encoder {
        Encoder { client_model: answering.model.clone(), ..Encoder::default() }
    }

    fn flush_start(&mut self, out: &mut Vec<u8>) {
        let Some((id, model)) = self.pending.take() else {
            return;
        };
        // Only some upstreams know the prompt's size this early.
        let usage = Usage { completion_tokens: 0, ..self.usage.unwrap_or_default() };
        let answering = Answering { model: self.client_model.clone(), ..Answering::default() };
        let start = json!({
            "type": "message_start",
            "message": {
                "id": id,
                "type": "message",
                "role": "assistant",
                "model": answer_model(&model, &answering),
                "content": [],
                "stop_reason": Value::Null,
                "stop_sequence": Value::Null,
                "usage": usage::to_messages(&usage),
            },
        });
        named(out, "message_start", &start);
    }
}

fn named(out: &mut Vec<u8>, name: &str, data: &Value) {
    sse::event(out, name, |out| json_out::value(out, data));
}

/// A text or arguments delta, as `json!` would serialise it (names in the
/// order `serde_json` writes them), written out directly: most events of a
/// translated stream are these.
fn content_delta(out: &mut Vec<u8>, index: usize, arguments: bool, text: &str) {
    // The event `sse::event` would frame, written as constant pieces
    // around the text and the index.
    let (head, middle): (&[u8], &[u8]) = if arguments {
        (
            b"event: content_block_delta\ndata: {\"delta\":{\"partial_json\":",
            b",\"type\":\"input_json_delta\"},\"index\":",
        )
    } else {
        (b"event: content_block_delta\ndata: {\"delta\":{\"text\":", b",\"type\":\"text_delta\"},\"index\":")
    };
    out.reserve(text.len() + 140);
    out.extend_from_slice(head);
    json_out::string(out, text);
    out.extend_from_slice(middle);
    out.extend_from_slice(itoa::Buffer::new().format(index).as_bytes());
    out.extend_from_slice(b",\"type\":\"content_block_delta\"}\n\n");
}

impl Encode for Encoder {
    fn push(&mut self, event: &Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id, model } => {
                self.pending = Some((id.clone(), model.clone()));
                return;
            }
            Event::Usage(usage) => {
                self.usage = Some(*usage);
                return;
            }
            _ => self.flush_start(out),
        }
        match event {
            Event::BlockStart { index, block } => {
                let block = match block {
                    Block::Text => json!({ "type": "text", "text": "" }),
                    Block::Thinking => json!({ "type": "thinking", "thinking": "", "signature": "" }),
                    Block::RedactedThinking { data } => json!({ "type": "redacted_thinking", "data": data }),
                    Block::ToolCall { id, name } => json!({ "type": "tool_use", "id": id, "name": name, "input": {} }),
                };
                let start = json!({ "type": "content_block_start", "index": index, "content_block": block });
                named(out, "content_block_start", &start);
            }
            Event::Delta { index, delta } => match delta {
                Delta::Text(text) => content_delta(out, *index, false, text),
                Delta::Arguments(arguments) => content_delta(out, *index, true, arguments),
                Delta::Thinking(thinking) => {
                    let delta = json!({ "type": "thinking_delta", "thinking": thinking });
                    let event = json!({ "type": "content_block_delta", "index": index, "delta": delta });
                    named(out, "content_block_delta", &event);
                }
                Delta::Signature(signature) => {
                    let delta = json!({ "type": "signature_delta", "signature": signature });
                    let event = json!({ "type": "content_block_delta", "index": index, "delta": delta });
                    named(out, "content_block_delta", &event);
                }
            },
            Event::BlockStop { index } => {
                named(out, "content_block_stop", &json!({ "type": "content_block_stop", "index": index }));
            }
            Event::Stop(stop) => {
                let usage = match &self.usage {
                    Some(usage) => usage::to_messages(usage),
                    None => json!({ "output_tokens": 0 }),
                };
                let delta = json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": stop_reason(*stop), "stop_sequence": Value::Null },
                    "usage": usage,
                });
                named(out, "message_delta", &delta);
            }
            Event::End => named(out, "message_stop", &json!({ "type": "message_stop" })),
            Event::Error { kind, message } => {
                let error = json!({
                    "type": "error",
                    "error": { "type": kind.as_deref().unwrap_or("api_error"), "message": message },
                });
                named(out, "error", &error);
            }
            Event::Start { .. } | Event::Usage(_) => {}
        }
    }

    fn finish(&mut self, _out: &mut Vec<u8>) {}
}
