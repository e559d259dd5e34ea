//! Gemini streams: every upstream payload (an SSE `data:` or an element of
//! the JSON array) is a whole `GenerateContentResponse` chunk holding the
//! next parts; usage rides on the last chunks and `finishReason` on the
//! last. The decoder opens and closes internal blocks as the kind of part
//! changes (text, thought, function call) and ends the answer when the
//! body ends after a `finishReason` (a body cut before it never ends). The
//! encoder writes one chunk per delta, a call once its arguments are
//! whole, and the finish reason and usage in a last chunk; SSE framed as
//! Gemini frames it, or one JSON array for clients that did not ask for
//! `alt=sse`.

use serde_json::{Value, json};

use super::{finish_reason, parts::Reader, response::call_prefix, stop_of, usage};
use crate::{
    pricing::Usage,
    translate::{
        Answering, Dropped,
        ir::{Block, Decode, Delta, Encode, Event, Part, Stop},
    },
};

/// Decodes a Gemini stream into events.
#[derive(Debug, Default)]
pub struct Decoder {
    reader: Option<Reader>,
    /// The open block: its index and whether it is a thought.
    open: Option<(usize, Open)>,
    next: usize,
    usage: Option<Usage>,
    finish: Option<String>,
    called: bool,
    dropped: Dropped,
}

/// What kind of block is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    Other,
}

/// Encodes events as a Gemini stream for the client.
#[derive(Debug, Default)]
pub struct Encoder {
    model: String,
    json_array: bool,
    id: Option<String>,
    /// Chunks written so far (the JSON array's separators).
    written: usize,
    /// The call being streamed: id, name and its arguments so far.
    call: Option<(String, String, String)>,
    /// A thought's signature, for the part after the thought.
    signature: Option<String>,
    usage: Option<Usage>,
    stop: Stop,
    dropped: Dropped,
}

// === impl Decoder ===

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Closes the open block, if any.
    fn close(&mut self, events: &mut Vec<Event>) {
        if let Some((index, _)) = self.open.take() {
            events.push(Event::BlockStop { index });
        }
    }

    /// The index of an open block of kind `kind`, opening one (after
    /// closing another kind) when needed.
    fn block(&mut self, kind: Open, block: Block, events: &mut Vec<Event>) -> usize {
        if let Some((index, open)) = self.open
            && open == kind
            && kind != Open::Other
        {
            return index;
        }
        self.close(events);
        let index = self.next;
        self.next += 1;
        events.push(Event::BlockStart { index, block });
        self.open = Some((index, kind));
        index
    }
}

impl Decode for Decoder {
    fn push(&mut self, payload: &[u8]) -> Vec<Event> {
        let Ok(chunk) = serde_json::from_slice::<Value>(payload) else {
            return Vec::new();
        };
        if !chunk.is_object() {
            return Vec::new();
        }
        if let Some(error) = chunk.get("error") {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("upstream stream failed").to_owned();
            let kind = match error.get("status").and_then(Value::as_str) {
                Some("UNAVAILABLE" | "RESOURCE_EXHAUSTED") => Some("overloaded_error".to_owned()),
                _ => None,
            };
            return vec![Event::Error { kind, message }];
        }
        let mut events = Vec::new();
        if self.reader.is_none() {
            let id = chunk.get("responseId").and_then(Value::as_str);
            self.reader = Some(Reader::new(call_prefix(id)));
            let model = chunk.get("modelVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
            events.push(Event::Start { id: id.map(str::to_owned), model });
        }
        let candidate = chunk.get("candidates").and_then(|c| c.get(0));
        let parts = candidate.and_then(|c| c.get("content")).and_then(|c| c.get("parts"));
        let dropped = &mut self.dropped;
        let parts = self.reader.as_mut().map(|r| r.parts(parts, dropped)).unwrap_or_default();
        for part in parts {
            match part {
                Part::Thinking { text, signature } => {
                    let index = self.block(Open::Thinking, Block::Thinking, &mut events);
                    if !text.is_empty() {
                        events.push(Event::Delta { index, delta: Delta::Thinking(text) });
                    }
                    if let Some(signature) = signature {
                        events.push(Event::Delta { index, delta: Delta::Signature(signature) });
                    }
                }
                Part::Text { text, .. } if text.is_empty() => {}
                Part::Text { text, .. } => {
                    let index = self.block(Open::Text, Block::Text, &mut events);
                    events.push(Event::Delta { index, delta: Delta::Text(text) });
                }
                Part::ToolCall { id, name, arguments } => {
                    self.called = true;
                    let index = self.block(Open::Other, Block::ToolCall { id, name }, &mut events);
                    events.push(Event::Delta { index, delta: Delta::Arguments(arguments.to_string()) });
                    self.close(&mut events);
                }
                _ => {}
            }
        }
        if let Some(usage) = chunk.get("usageMetadata").and_then(usage::from_gemini)
            && self.usage != Some(usage)
        {
            self.usage = Some(usage);
            events.push(Event::Usage(usage));
        }
        if let Some(reason) = candidate.and_then(|c| c.get("finishReason")).and_then(Value::as_str) {
            self.finish = Some(reason.to_owned());
        } else if chunk.pointer("/promptFeedback/blockReason").is_some() {
            self.finish = Some("SAFETY".to_owned());
        }
        events
    }

    fn finish(&mut self) -> Vec<Event> {
        let Some(reason) = self.finish.take() else {
            return Vec::new();
        };
        let mut events = Vec::new();
        if self.reader.is_none() {
            events.push(Event::Start { id: None, model: String::new() });
        }
        self.close(&mut events);
        events.push(Event::Stop(stop_of(&reason, self.called)));
        events.push(Event::End);
        events
    }

    fn dropped(&self) -> Dropped {
        self.dropped.clone()
    }
}

// === impl Encoder ===

impl Encoder {
    /// An encoder answering `answering`'s model, as SSE or (with
    /// `json_array`) one JSON array.
    pub fn new(answering: &Answering) -> Encoder {
        Encoder { model: answering.model.clone(), json_array: answering.json_array, ..Encoder::default() }
    }

    /// Writes one chunk with `parts` (and, for the last, its finish reason
    /// and usage).
    fn chunk(&mut self, mut parts: Vec<Value>, last: bool, out: &mut Vec<u8>) {
        if let Some(first) = parts.iter_mut().find(|p| p.get("thought").is_none())
            && let Some(signature) = self.signature.take()
        {
            first["thoughtSignature"] = json!(signature);
        }
        let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
        let mut chunk = json!({ "candidates": [], "modelVersion": self.model });
        if last {
            candidate["finishReason"] = json!(finish_reason(self.stop));
            if let Some(usage) = &self.usage {
                chunk["usageMetadata"] = usage::to_gemini(usage);
            }
        }
        chunk["candidates"] = json!([candidate]);
        if let Some(id) = &self.id {
            chunk["responseId"] = json!(id);
        }
        if self.json_array {
            out.extend_from_slice(if self.written == 0 { b"[" } else { b"\n," });
            out.extend_from_slice(chunk.to_string().as_bytes());
        } else {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(chunk.to_string().as_bytes());
            out.extend_from_slice(b"\r\n\r\n");
        }
        self.written += 1;
    }
}

impl Encode for Encoder {
    fn push(&mut self, event: &Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id, .. } => self.id = id.clone(),
            Event::BlockStart { block: Block::ToolCall { id, name }, .. } => {
                self.call = Some((id.clone(), name.clone(), String::new()));
            }
            Event::BlockStart { block: Block::RedactedThinking { .. }, .. } => self.dropped.note("redacted_thinking"),
            Event::BlockStart { .. } => {}
            Event::Delta { delta, .. } => match delta {
                Delta::Text(text) => self.chunk(vec![json!({ "text": text })], false, out),
                Delta::Thinking(text) => self.chunk(vec![json!({ "text": text, "thought": true })], false, out),
                Delta::Signature(signature) => self.signature = Some(signature.clone()),
                Delta::Arguments(more) => {
                    if let Some((_, _, arguments)) = &mut self.call {
                        arguments.push_str(more);
                    }
                }
            },
            Event::BlockStop { .. } => {
                if let Some((id, name, arguments)) = self.call.take() {
                    let args = crate::translate::arguments_to_input(Some(&Value::String(arguments)));
                    let call = json!({ "functionCall": { "id": id, "name": name, "args": args } });
                    self.chunk(vec![call], false, out);
                }
            }
            Event::Usage(usage) => self.usage = Some(*usage),
            Event::Stop(stop) => self.stop = *stop,
            Event::End => self.chunk(vec![json!({ "text": "" })], true, out),
            Event::Error { kind, message } => {
                // Gemini's own mid-stream error: the error object as a chunk.
                let (code, status) = match kind.as_deref() {
                    Some("overloaded_error") => (503, "UNAVAILABLE"),
                    Some("rate_limit_error") => (429, "RESOURCE_EXHAUSTED"),
                    _ => (500, "INTERNAL"),
                };
                let error = json!({ "error": { "code": code, "message": message, "status": status } });
                if self.json_array {
                    out.extend_from_slice(if self.written == 0 { b"[" } else { b"\n," });
                    out.extend_from_slice(error.to_string().as_bytes());
                } else {
                    out.extend_from_slice(format!("data: {error}\r\n\r\n").as_bytes());
                }
                self.written += 1;
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.json_array {
            out.extend_from_slice(if self.written == 0 { b"[]" } else { b"\n]" });
        }
    }

    fn dropped(&self) -> Dropped {
        self.dropped.clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::translate::ir::{Collect, Response};

    fn decode(chunks: &[Value]) -> Vec<Event> {
        let mut decoder = Decoder::new();
        let mut events: Vec<Event> =
            chunks.iter().flat_map(|chunk| decoder.push(chunk.to_string().as_bytes())).collect();
        events.extend(decoder.finish());
        events
    }

    fn gemini_stream() -> Vec<Value> {
        vec![
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me", "thought": true}]}}], "responseId": "r9", "modelVersion": "gemini-2.5-pro"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": " think", "thought": true}]}}], "responseId": "r9"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello"}]}}], "responseId": "r9"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": " world"}]}}], "responseId": "r9"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "sg"}]}, "finishReason": "STOP"}],
                   "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 4, "thoughtsTokenCount": 2, "totalTokenCount": 14}, "responseId": "r9"}),
        ]
    }

    #[test]
    fn chunks_become_blocks_that_open_and_close_as_the_kind_of_part_changes() {
        let events = decode(&gemini_stream());
        let mut collect = Collect::new();
        for event in events.clone() {
            collect.push(event);
        }
        assert!(collect.ended());
        let answer = collect.finish();
        assert_eq!(answer.id.as_deref(), Some("r9"));
        assert_eq!(
            answer.parts,
            [
                Part::Thinking { text: "Let me think".into(), signature: None },
                Part::Text { text: "Hello world".into(), cache: None },
                Part::Thinking { text: String::new(), signature: Some("sg".into()) },
                Part::ToolCall { id: "call_r9_0".into(), name: "f".into(), arguments: json!({"a": 1}) },
            ]
        );
        assert_eq!(answer.stop, Stop::ToolUse);
        assert_eq!(answer.usage.unwrap().completion_tokens, 6);
        let starts = events.iter().filter(|e| matches!(e, Event::BlockStart { .. })).count();
        let stops = events.iter().filter(|e| matches!(e, Event::BlockStop { .. })).count();
        assert_eq!((starts, stops), (4, 4));
    }

    #[test]
    fn a_stream_cut_before_its_finish_reason_never_ends() {
        let events = decode(&gemini_stream()[..3]);
        assert!(!events.contains(&Event::End));
    }

    fn encode(answer: &Response, json_array: bool) -> String {
        let answering = Answering { model: "client-model".into(), json_array, ..Answering::default() };
        let mut encoder = Encoder::new(&answering);
        let mut out = Vec::new();
        for event in answer.events() {
            encoder.push(&event, &mut out);
        }
        encoder.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn answer() -> Response {
        Response {
            id: Some("r1".into()),
            model: "upstream".into(),
            parts: vec![
                Part::Thinking { text: "hm".into(), signature: Some("sig".into()) },
                Part::Text { text: "hi".into(), cache: None },
                Part::ToolCall { id: "t1".into(), name: "f".into(), arguments: json!({"x": 1}) },
            ],
            stop: Stop::ToolUse,
            usage: Some(Usage { prompt_tokens: 5, completion_tokens: 3, reasoning_tokens: 1, ..Usage::default() }),
        }
    }

    #[test]
    fn sse_chunks_are_whole_answers_that_decode_back_to_the_same_answer() {
        let sse = encode(&answer(), false);
        let payloads: Vec<&str> =
            sse.split("\r\n\r\n").filter(|s| !s.is_empty()).map(|s| s.strip_prefix("data: ").unwrap()).collect();
        assert_eq!(payloads.len(), 4);
        let last: Value = serde_json::from_str(payloads[3]).unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(last["usageMetadata"]["thoughtsTokenCount"], 1);
        assert_eq!(last["modelVersion"], "client-model");
        let text: Value = serde_json::from_str(payloads[1]).unwrap();
        assert_eq!(text["candidates"][0]["content"]["parts"][0], json!({"text": "hi", "thoughtSignature": "sig"}));
        let events = decode(&payloads.iter().map(|p| serde_json::from_str(p).unwrap()).collect::<Vec<Value>>());
        let mut collect = Collect::new();
        events.into_iter().for_each(|e| collect.push(e));
        let back = collect.finish();
        assert_eq!(back.stop, Stop::ToolUse);
        assert_eq!(back.usage, answer().usage);
        // The signature rode on the text after the thought and is the
        // thought's again.
        assert_eq!(back.parts[0], Part::Thinking { text: "hm".into(), signature: Some("sig".into()) });
        assert_eq!(back.parts[2], Part::ToolCall { id: "t1".into(), name: "f".into(), arguments: json!({"x": 1}) });
    }

    #[test]
    fn the_json_array_form_is_one_array_of_chunks() {
        let array = encode(&answer(), true);
        assert!(array.starts_with("[{") && array.ends_with("}\n]"), "{array}");
        assert_eq!(array.matches("\n,{").count(), 3, "{array}");
        let chunks: Vec<Value> = serde_json::from_str(&array).unwrap();
        assert_eq!(chunks.len(), 4);
        assert_eq!(chunks[3]["usageMetadata"]["promptTokenCount"], 5);
    }
}
