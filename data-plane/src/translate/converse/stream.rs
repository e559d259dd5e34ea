//! Converse's streamed answer (`converse-stream`) decoded into the internal
//! form's events. The frame reader hands each event as `{"<event type>":
//! <payload>}`: `messageStart`, `contentBlockStart` (tool calls only; text
//! and reasoning blocks open with their first delta), `contentBlockDelta`,
//! `contentBlockStop`, `messageStop` (the stop reason) and `metadata` (the
//! usage, after the stop). The stop is held until the usage arrives, so
//! encoders see usage before the stop, as the form's other streams give
//! it; an upstream exception arrives in the messages error shape.

use serde_json::Value;

use super::{from_converse, stop_of};
use crate::translate::ir::{Block, Decode, Delta, Event, Stop};

/// A decoder of one `converse-stream` answer.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    /// The open block: Converse's index, the form's index, what it holds.
    open: Option<(i64, usize, Kind)>,
    /// The next block's index in the form.
    next: usize,
    /// `messageStop` went by with this stop; `End` follows the usage.
    stop: Option<Stop>,
    ended: bool,
}

/// What an open block holds, to tell a delta of another kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Redacted,
    Tool,
}

// === impl Decoder ===

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    fn start(&mut self, events: &mut Vec<Event>) {
        if !self.started {
            self.started = true;
            events.push(Event::Start { id: None, model: String::new() });
        }
    }

    fn close(&mut self, events: &mut Vec<Event>) {
        if let Some((_, index, _)) = self.open.take() {
            events.push(Event::BlockStop { index });
        }
    }

    /// The form's index of Converse block `at` holding `kind`, opening it
    /// (as `block`) when it is not the open one.
    fn open(&mut self, at: i64, kind: Kind, block: Block, events: &mut Vec<Event>) -> usize {
        if let Some((open_at, index, open_kind)) = self.open
            && open_at == at
            && open_kind == kind
        {
            return index;
        }
        self.close(events);
        let index = self.next;
        self.next += 1;
        self.open = Some((at, index, kind));
        events.push(Event::BlockStart { index, block });
        index
    }

    fn delta(&mut self, payload: &Value, events: &mut Vec<Event>) {
        let at = payload.get("contentBlockIndex").and_then(Value::as_i64).unwrap_or(0);
        let Some(delta) = payload.get("delta") else { return };
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        if let Some(more) = text(delta, "text") {
            let index = self.open(at, Kind::Text, Block::Text, events);
            events.push(Event::Delta { index, delta: Delta::Text(more) });
        } else if let Some(call) = delta.get("toolUse") {
            let index = match self.open {
                Some((open_at, index, Kind::Tool)) if open_at == at => index,
                // A tool delta without its start: the call has no id or name.
                _ => self.open(at, Kind::Tool, Block::ToolCall { id: String::new(), name: String::new() }, events),
            };
            if let Some(more) = text(call, "input") {
                events.push(Event::Delta { index, delta: Delta::Arguments(more) });
            }
        } else if let Some(reasoning) = delta.get("reasoningContent") {
            if let Some(data) = text(reasoning, "redactedContent") {
                self.open(at, Kind::Redacted, Block::RedactedThinking { data }, events);
                return;
            }
            let index = self.open(at, Kind::Thinking, Block::Thinking, events);
            if let Some(more) = text(reasoning, "text") {
                events.push(Event::Delta { index, delta: Delta::Thinking(more) });
            }
            if let Some(signature) = text(reasoning, "signature") {
                events.push(Event::Delta { index, delta: Delta::Signature(signature) });
            }
        }
    }

    fn end(&mut self, events: &mut Vec<Event>) {
        if let Some(stop) = self.stop.take() {
            events.push(Event::Stop(stop));
            events.push(Event::End);
            self.ended = true;
        }
    }
}

impl Decode for Decoder {
    fn push(&mut self, payload: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        if self.ended {
            return events;
        }
        let Ok(Value::Object(event)) = serde_json::from_slice::<Value>(payload) else {
            return events;
        };
        if event.get("type").and_then(Value::as_str) == Some("error") {
            let error = event.get("error");
            let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str).map(str::to_owned);
            let message = error.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or_default().to_owned();
            self.ended = true;
            events.push(Event::Error { kind, message });
            return events;
        }
        let Some((name, payload)) = event.iter().next() else {
            return events;
        };
        match name.as_str() {
            "messageStart" => self.start(&mut events),
            "contentBlockStart" => {
                self.start(&mut events);
                let at = payload.get("contentBlockIndex").and_then(Value::as_i64).unwrap_or(0);
                if let Some(call) = payload.pointer("/start/toolUse") {
                    let text = |key: &str| call.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                    let block = Block::ToolCall { id: text("toolUseId"), name: text("name") };
                    self.close(&mut events);
                    self.open(at, Kind::Tool, block, &mut events);
                }
            }
            "contentBlockDelta" => {
                self.start(&mut events);
                self.delta(payload, &mut events);
            }
            "contentBlockStop" => {
                let at = payload.get("contentBlockIndex").and_then(Value::as_i64).unwrap_or(0);
                if self.open.is_some_and(|(open_at, _, _)| open_at == at) {
                    self.close(&mut events);
                }
            }
            "messageStop" => {
                self.start(&mut events);
                self.close(&mut events);
                let reason = payload.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                self.stop = Some(stop_of(reason));
            }
            "metadata" => {
                if let Some(usage) = payload.get("usage").and_then(from_converse) {
                    events.push(Event::Usage(usage));
                }
                self.end(&mut events);
            }
            _ => {}
        }
        events
    }

    fn finish(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        // A stream that stopped but sent no metadata still ended naturally.
        self.end(&mut events);
        events
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::{
        pricing::Usage,
        translate::ir::{Collect, Part},
    };

    fn decode(events: &[&str]) -> Vec<Event> {
        let mut decoder = Decoder::new();
        let mut out: Vec<Event> = events.iter().flat_map(|e| decoder.push(e.as_bytes())).collect();
        out.extend(decoder.finish());
        out
    }

    #[test]
    fn a_streamed_tool_call_with_reasoning_collects_into_the_whole_answer() {
        let events = decode(&[
            r#"{"messageStart":{"role":"assistant"}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hmm"}}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"sig"}}}}"#,
            r#"{"contentBlockStop":{"contentBlockIndex":0}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"text":"Let me "}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"text":"check."}}}"#,
            r#"{"contentBlockStop":{"contentBlockIndex":1}}"#,
            r#"{"contentBlockStart":{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"t1","name":"weather"}}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"city\":"}}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":2,"delta":{"toolUse":{"input":"\"Paris\"}"}}}}"#,
            r#"{"contentBlockStop":{"contentBlockIndex":2}}"#,
            r#"{"messageStop":{"stopReason":"tool_use"}}"#,
            r#"{"metadata":{"usage":{"inputTokens":5,"outputTokens":9,"totalTokens":24,"cacheWriteInputTokens":10},"metrics":{"latencyMs":80}}}"#,
        ]);
        let n = events.len();
        assert_eq!(
            events[n - 3..],
            [
                Event::Usage(Usage {
                    prompt_tokens: 15,
                    completion_tokens: 9,
                    cache_write_5m_tokens: 10,
                    ..Usage::default()
                }),
                Event::Stop(Stop::ToolUse),
                Event::End,
            ]
        );
        let mut collect = Collect::new();
        events.into_iter().for_each(|e| collect.push(e));
        assert!(collect.ended());
        let answer = collect.finish();
        assert_eq!(
            answer.parts,
            [
                Part::Thinking { text: "hmm".into(), signature: Some("sig".into()) },
                Part::Text { text: "Let me check.".into(), cache: None },
                Part::ToolCall {
                    id: "t1".into(),
                    name: "weather".into(),
                    arguments: serde_json::json!({"city": "Paris"})
                },
            ]
        );
    }

    #[test]
    fn blocks_are_opened_and_closed_in_order_without_explicit_starts() {
        let events = decode(&[
            r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"text":"a"}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"text":"b"}}}"#,
            r#"{"messageStop":{"stopReason":"max_tokens"}}"#,
        ]);
        assert_eq!(
            events,
            [
                Event::Start { id: None, model: String::new() },
                Event::BlockStart { index: 0, block: Block::Text },
                Event::Delta { index: 0, delta: Delta::Text("a".into()) },
                Event::BlockStop { index: 0 },
                Event::BlockStart { index: 1, block: Block::Text },
                Event::Delta { index: 1, delta: Delta::Text("b".into()) },
                Event::BlockStop { index: 1 },
                Event::Stop(Stop::MaxTokens),
                Event::End,
            ]
        );
    }

    #[test]
    fn an_upstream_exception_is_an_error_and_ends_nothing() {
        let events = decode(&[
            r#"{"messageStart":{"role":"assistant"}}"#,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
            r#"{"messageStop":{"stopReason":"end_turn"}}"#,
        ]);
        assert_eq!(events[1..], [Event::Error { kind: Some("rate_limit_error".into()), message: "slow down".into() }]);
    }
}
