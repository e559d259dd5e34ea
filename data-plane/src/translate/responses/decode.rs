//! A responses API stream read into internal events, so a responses
//! upstream can answer clients of other dialects. Message content parts,
//! reasoning items and function calls each become one block, numbered in
//! the order they open; `response.completed` and `response.incomplete`
//! carry the usage and end the stream; `response.failed` and `error` are
//! the internal `Error`.

use serde_json::Value;

use super::response::decode as decode_response;
use crate::translate::{
    ir::{Block, Decode, Delta, Event, Stop},
    str_field,
};

/// Reads responses stream events (one SSE `data` payload at a time).
#[derive(Default)]
pub struct Decoder {
    /// The next block's index.
    next: usize,
    /// The index of the open block, when one is.
    open: Option<usize>,
    /// Whether the open reasoning block got summary text yet.
    summarized: bool,
    started: bool,
    called: bool,
    ended: bool,
}

// === impl Decoder ===

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    fn open(&mut self, block: Block, events: &mut Vec<Event>) {
        self.close(events);
        let index = self.next;
        self.next += 1;
        self.open = Some(index);
        self.summarized = false;
        events.push(Event::BlockStart { index, block });
    }

    fn close(&mut self, events: &mut Vec<Event>) {
        if let Some(index) = self.open.take() {
            events.push(Event::BlockStop { index });
        }
    }

    fn delta(&self, delta: Delta, events: &mut Vec<Event>) {
        if let Some(index) = self.open {
            events.push(Event::Delta { index, delta });
        }
    }
}

impl Decode for Decoder {
    fn push(&mut self, payload: &[u8]) -> Vec<Event> {
        let Ok(event) = serde_json::from_slice::<Value>(payload) else {
            return Vec::new();
        };
        let mut events = Vec::new();
        let delta = || str_field(&event, "delta").unwrap_or_default().to_owned();
        match str_field(&event, "type").unwrap_or_default() {
            "response.created" if !self.started => {
                self.started = true;
                let response = event.get("response");
                events.push(Event::Start {
                    id: response.and_then(|r| str_field(r, "id")).map(str::to_owned),
                    model: response.and_then(|r| str_field(r, "model")).unwrap_or_default().to_owned(),
                });
            }
            "response.output_item.added" => {
                let item = event.get("item").cloned().unwrap_or_default();
                match str_field(&item, "type") {
                    Some("function_call") => {
                        self.called = true;
                        let id = str_field(&item, "call_id").unwrap_or_default().to_owned();
                        let name = str_field(&item, "name").unwrap_or_default().to_owned();
                        self.open(Block::ToolCall { id, name }, &mut events);
                    }
                    Some("reasoning") => self.open(Block::Thinking, &mut events),
                    _ => {}
                }
            }
            "response.content_part.added" => self.open(Block::Text, &mut events),
            "response.output_text.delta" | "response.refusal.delta" => self.delta(Delta::Text(delta()), &mut events),
            "response.reasoning_summary_part.added" if self.summarized => {
                self.delta(Delta::Thinking("\n\n".into()), &mut events);
            }
            "response.reasoning_summary_text.delta" => {
                self.summarized = true;
                self.delta(Delta::Thinking(delta()), &mut events);
            }
            "response.function_call_arguments.delta" => self.delta(Delta::Arguments(delta()), &mut events),
            "response.content_part.done" => self.close(&mut events),
            "response.output_item.done" => {
                let item = event.get("item");
                if let Some(encrypted) = item.and_then(|i| str_field(i, "encrypted_content")) {
                    self.delta(Delta::Signature(encrypted.to_owned()), &mut events);
                }
                self.close(&mut events);
            }
            "response.completed" | "response.incomplete" if !self.ended => {
                self.close(&mut events);
                self.ended = true;
                let whole = decode_response(event.get("response").unwrap_or(&Value::Null));
                if let Some(usage) = whole.usage {
                    events.push(Event::Usage(usage));
                }
                let stop = match whole.stop {
                    Stop::EndTurn if self.called => Stop::ToolUse,
                    stop => stop,
                };
                events.push(Event::Stop(stop));
                events.push(Event::End);
            }
            "response.failed" | "error" if !self.ended => {
                self.close(&mut events);
                self.ended = true;
                let error = event.get("response").and_then(|r| r.get("error")).unwrap_or(&event);
                let error = error.get("error").unwrap_or(error);
                let message = str_field(error, "message").unwrap_or("upstream failed mid-stream").to_owned();
                events.push(Event::Error { kind: None, message });
            }
            _ => {}
        }
        events
    }

    fn finish(&mut self) -> Vec<Event> {
        Vec::new()
    }
}
