//! The responses API's streamed answer written from internal events: the
//! typed SSE events OpenAI's SDKs read, each with its `event:` line and a
//! `sequence_number` counting from 0. `response.created` and
//! `response.in_progress` open the stream; each block is one output item
//! (`output_item.added`, its parts and deltas, `output_item.done`), numbered
//! by `output_index` in order; `response.completed` (or
//! `response.incomplete` when the answer was cut) closes it with the whole
//! answer and its usage.

use serde_json::{Value, json};

use super::response::{
    envelope, function_call_item, incomplete_details, item_id, message_item, reasoning_item, response_id, status,
    text_part, to_responses,
};
use crate::{
    pricing::Usage,
    translate::{
        Answering,
        ir::{Block, Delta, Encode, Event, Stop},
    },
};

/// Writes internal events as a responses SSE stream.
pub struct Encoder {
    answering: Answering,
    /// The response id, set by `Start`.
    id: String,
    started: bool,
    sequence: u64,
    /// Finished output items, for the closing event.
    output: Vec<Value>,
    open: Option<Open>,
    usage: Option<Usage>,
    stop: Stop,
}

/// The output item being streamed.
struct Open {
    kind: Kind,
    item_id: String,
    output_index: usize,
    /// Text, reasoning summary or arguments so far.
    text: String,
    /// The reasoning's signature, or a redacted block's data.
    encrypted: Option<String>,
}

enum Kind {
    Message,
    Reasoning { summary: bool },
    FunctionCall { call_id: String, name: String },
}

// === impl Encoder ===

impl Encoder {
    /// An encoder for a client that asked as `answering` says.
    pub fn new(answering: &Answering) -> Encoder {
        Encoder {
            answering: answering.clone(),
            id: response_id(None),
            started: false,
            sequence: 0,
            output: Vec::new(),
            open: None,
            usage: None,
            stop: Stop::EndTurn,
        }
    }

    /// Writes one SSE event of `kind` with `data`'s fields.
    fn send(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(data.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn start(&mut self, id: Option<&str>, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        self.id = response_id(id);
        let response = envelope(&self.id, &self.answering, "in_progress");
        self.send(out, "response.created", json!({ "response": response }));
        let response = envelope(&self.id, &self.answering, "in_progress");
        self.send(out, "response.in_progress", json!({ "response": response }));
    }

    fn block_start(&mut self, block: &Block, out: &mut Vec<u8>) {
        self.start(None, out);
        self.block_stop(out);
        let output_index = self.output.len();
        let (kind, item, prefix) = match block {
            Block::Text => {
                let id = item_id("msg", &self.id, output_index);
                let mut item = message_item(&id, "", "in_progress");
                item["content"] = json!([]);
                (Kind::Message, item, id)
            }
            Block::Thinking => {
                let id = item_id("rs", &self.id, output_index);
                (Kind::Reasoning { summary: false }, reasoning_item(&id, None, None), id)
            }
            Block::RedactedThinking { data } => {
                let id = item_id("rs", &self.id, output_index);
                (Kind::Reasoning { summary: false }, reasoning_item(&id, None, Some(data)), id)
            }
            Block::ToolCall { id: call_id, name } => {
                let id = item_id("fc", &self.id, output_index);
                let item = function_call_item(&id, call_id, name, "", "in_progress");
                (Kind::FunctionCall { call_id: call_id.clone(), name: name.clone() }, item, id)
            }
        };
        self.send(out, "response.output_item.added", json!({ "output_index": output_index, "item": item }));
        if matches!(kind, Kind::Message) {
            let data = json!({
                "item_id": prefix, "output_index": output_index, "content_index": 0, "part": text_part(""),
            });
            self.send(out, "response.content_part.added", data);
        }
        let encrypted = match block {
            Block::RedactedThinking { data } => Some(data.clone()),
            _ => None,
        };
        self.open = Some(Open { kind, item_id: prefix, output_index, text: String::new(), encrypted });
    }

    fn delta(&mut self, delta: &Delta, out: &mut Vec<u8>) {
        let Some(mut open) = self.open.take() else {
            return;
        };
        let (item_id, output_index) = (open.item_id.clone(), open.output_index);
        match (&mut open.kind, delta) {
            (Kind::Message, Delta::Text(text)) => {
                open.text.push_str(text);
                let data = json!({
                    "item_id": item_id, "output_index": output_index, "content_index": 0,
                    "delta": text, "logprobs": [],
                });
                self.send(out, "response.output_text.delta", data);
            }
            (Kind::Reasoning { summary }, Delta::Thinking(text)) => {
                if !*summary {
                    *summary = true;
                    let data = json!({
                        "item_id": item_id, "output_index": output_index, "summary_index": 0,
                        "part": { "type": "summary_text", "text": "" },
                    });
                    self.send(out, "response.reasoning_summary_part.added", data);
                }
                open.text.push_str(text);
                let data = json!({
                    "item_id": item_id, "output_index": output_index, "summary_index": 0, "delta": text,
                });
                self.send(out, "response.reasoning_summary_text.delta", data);
            }
            (Kind::Reasoning { .. }, Delta::Signature(signature)) => open.encrypted = Some(signature.clone()),
            (Kind::FunctionCall { .. }, Delta::Arguments(arguments)) => {
                open.text.push_str(arguments);
                let data = json!({ "item_id": item_id, "output_index": output_index, "delta": arguments });
                self.send(out, "response.function_call_arguments.delta", data);
            }
            _ => {}
        }
        self.open = Some(open);
    }

    fn block_stop(&mut self, out: &mut Vec<u8>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let (id, index, text) = (open.item_id.as_str(), open.output_index, open.text.as_str());
        let item = match &open.kind {
            Kind::Message => {
                let data = json!({
                    "item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": [],
                });
                self.send(out, "response.output_text.done", data);
                let data = json!({ "item_id": id, "output_index": index, "content_index": 0, "part": text_part(text) });
                self.send(out, "response.content_part.done", data);
                message_item(id, text, "completed")
            }
            Kind::Reasoning { summary } => {
                if *summary {
                    let data = json!({ "item_id": id, "output_index": index, "summary_index": 0, "text": text });
                    self.send(out, "response.reasoning_summary_text.done", data);
                    let part = json!({ "type": "summary_text", "text": text });
                    let data = json!({ "item_id": id, "output_index": index, "summary_index": 0, "part": part });
                    self.send(out, "response.reasoning_summary_part.done", data);
                }
                reasoning_item(id, summary.then_some(text), open.encrypted.as_deref())
            }
            Kind::FunctionCall { call_id, name } => {
                let data = json!({ "item_id": id, "output_index": index, "name": name, "arguments": text });
                self.send(out, "response.function_call_arguments.done", data);
                function_call_item(id, call_id, name, text, "completed")
            }
        };
        self.send(out, "response.output_item.done", json!({ "output_index": index, "item": item }));
        self.output.push(item);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        self.start(None, out);
        self.block_stop(out);
        let mut response = envelope(&self.id, &self.answering, status(self.stop));
        response["output"] = Value::Array(std::mem::take(&mut self.output));
        response["incomplete_details"] = incomplete_details(self.stop);
        response["usage"] = self.usage.as_ref().map_or(Value::Null, to_responses);
        let kind = if status(self.stop) == "completed" { "response.completed" } else { "response.incomplete" };
        self.send(out, kind, json!({ "response": response }));
    }

    /// The upstream failed mid-stream: `response.failed` with the error,
    /// after what was streamed so far.
    fn fail(&mut self, kind: Option<&str>, message: &str, out: &mut Vec<u8>) {
        self.start(None, out);
        self.block_stop(out);
        let mut response = envelope(&self.id, &self.answering, "failed");
        response["output"] = Value::Array(std::mem::take(&mut self.output));
        response["error"] = json!({ "code": kind.unwrap_or("server_error"), "message": message });
        response["usage"] = self.usage.as_ref().map_or(Value::Null, to_responses);
        self.send(out, "response.failed", json!({ "response": response }));
    }
}

impl Encode for Encoder {
    fn push(&mut self, event: &Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id, .. } => self.start(id.as_deref(), out),
            Event::BlockStart { block, .. } => self.block_start(block, out),
            Event::Delta { delta, .. } => self.delta(delta, out),
            Event::BlockStop { .. } => self.block_stop(out),
            Event::Usage(usage) => self.usage = Some(*usage),
            Event::Stop(stop) => self.stop = *stop,
            Event::End => self.end(out),
            Event::Error { kind, message } => self.fail(kind.as_deref(), message, out),
        }
    }

    // The closing event is `End`'s; responses streams send no `[DONE]`.
    fn finish(&mut self, _out: &mut Vec<u8>) {}
}
