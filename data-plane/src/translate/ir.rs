//! The internal form every dialect translates through: a request, a whole
//! answer and a stream of answer events, each in terms no one dialect owns.
//! Each dialect has one decoder into this form and one encoder out of it
//! (`chat`, `messages`, `gemini`, `converse`, …), so a pairing of client
//! dialect and channel kind is a decoder and an encoder, never a translator
//! of its own. Where the client's dialect is the channel's, nothing here is
//! used: bytes pass through.
//!
//! Invariants: message content is an ordered list of parts; tool results
//! are parts of a `User` message (chat's `tool` role decodes into one);
//! tool-call arguments are a JSON object; usage is the gateway's `Usage`
//! (`prompt_tokens` is the whole prompt, cache reads and writes are parts of
//! it; `completion_tokens` includes reasoning).

use serde_json::{Map, Value};

use super::Dropped;
use crate::pricing::Usage;

/// A chat request in no dialect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// The model as the client named it (the channel's mapping is applied
    /// by the caller to the encoded body).
    pub model: String,
    /// System instructions, in order (text and, rarely, images).
    pub system: Vec<Part>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools at once; `None`: the
    /// provider's default.
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub reasoning: Option<Reasoning>,
    /// A JSON schema the answer must follow, or `{}` for any JSON object.
    pub response_format: Option<ResponseFormat>,
    /// An end-user id for the provider's abuse tracking.
    pub user: Option<String>,
    /// Fields of the client's dialect that no other dialect knows, kept so
    /// an encoder for the same family (chat to Azure, messages to Bedrock)
    /// can pass them on. Other encoders drop them, noted by name.
    pub extra: Map<String, Value>,
    /// Prompt-cache breakpoints on places other than text parts (which
    /// carry their own): a tool, an image, a tool call or result. Added for
    /// chat clients that mark those (they reach messages upstreams).
    pub cache_marks: Vec<(CacheAt, CacheMark)>,
    /// System instructions that stood between messages in the client's
    /// request (`system` and `developer` turns inside the conversation, as
    /// coding agents send). Their parts are in `system` too, so encoders of
    /// dialects with one system prompt need not look here; chat's puts them
    /// back where they stood.
    pub system_turns: Vec<SystemTurn>,
    /// The names documents were given (chat's `filename`, messages'
    /// `title`): `(message, part, name)` for `messages[message].parts[part]`.
    pub document_names: Vec<(usize, usize, String)>,
}

/// A system turn that stood before `Request::messages[before]` (or after
/// the last message, when `before` is their count): the parts
/// `Request::system[parts]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemTurn {
    pub before: usize,
    pub parts: std::ops::Range<usize>,
    /// The client named the turn `developer`.
    pub developer: bool,
}

/// Where a prompt-cache breakpoint of `Request::cache_marks` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAt {
    /// After `Request::tools[_]`.
    Tool(usize),
    /// After part `part` of `Request::messages[message]`.
    Part { message: usize, part: usize },
}

/// Who speaks a message. System instructions are `Request::system`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

/// One piece of a message, of a system prompt or of an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text {
        text: String,
        /// A prompt-cache breakpoint after this part (messages'
        /// `cache_control`); `Some("1h")` for the long TTL.
        cache: Option<CacheMark>,
    },
    Image(Media),
    /// A PDF or other document, by data or reference.
    Document(Media),
    /// Reasoning the model showed; `signature` proves it to the provider
    /// that made it and is dropped elsewhere.
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// Reasoning the provider keeps encrypted.
    RedactedThinking {
        data: String,
    },
    ToolCall {
        id: String,
        name: String,
        /// Always a JSON object.
        arguments: Value,
    },
    ToolResult {
        /// The `ToolCall::id` this answers.
        id: String,
        /// The tool's name, where the source dialect gives it (Gemini needs
        /// it; decoders fill it from the matching call when they can).
        name: Option<String>,
        content: Vec<Part>,
        is_error: bool,
    },
}

/// A prompt-cache breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMark {
    FiveMinutes,
    OneHour,
}

/// Where an image or document is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Media {
    Base64 { media_type: String, data: String },
    Url { url: String, media_type: Option<String> },
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the arguments (an object schema).
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool, the model picks which.
    Required,
    Tool(String),
}

/// How much the model should reason before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    /// Reasoning turned off where the provider allows it.
    Off,
    /// A budget in tokens (messages' `budget_tokens`, Gemini's
    /// `thinkingBudget`).
    Budget(i64),
    /// A level (chat's `reasoning_effort`).
    Effort(Effort),
}

/// Reasoning effort levels; budgets and levels convert through
/// `Reasoning::budget` and `Reasoning::effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

/// What shape the answer must have.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    Json,
    /// JSON following `schema`, named `name` where the dialect names it.
    Schema { name: String, schema: Value, strict: bool },
}

/// Why an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stop {
    #[default]
    EndTurn,
    MaxTokens,
    /// One of the request's stop sequences was generated.
    Sequence,
    ToolUse,
    /// Filtered by the provider's safety system.
    Refusal,
}

/// A whole (not streamed) answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    /// The provider's id, when it gave one.
    pub id: Option<String>,
    pub model: String,
    pub parts: Vec<Part>,
    pub stop: Stop,
    pub usage: Option<Usage>,
}

/// One step of a streamed answer. Content comes in blocks numbered from 0
/// in order; a block is started, gets deltas and is stopped before the next
/// starts (decoders of dialects that interleave, such as chat's parallel
/// tool calls, keep this order by closing the open block first).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The answer began (always first).
    Start {
        id: Option<String>,
        model: String,
    },
    BlockStart {
        index: usize,
        block: Block,
    },
    Delta {
        index: usize,
        delta: Delta,
    },
    BlockStop {
        index: usize,
    },
    /// The usage known so far, whole (not an increment); may come more than
    /// once, the last is the answer's.
    Usage(Usage),
    /// Why the answer ended; comes once, after the last block.
    Stop(Stop),
    /// The stream ended naturally (always last when it does). A stream cut
    /// short never gets it.
    End,
    /// The upstream reported an error mid-stream; nothing follows. `kind`
    /// is the messages API's error type when the upstream gave one in that
    /// vocabulary (`overloaded_error`, …).
    Error {
        kind: Option<String>,
        message: String,
    },
}

/// What a streamed block holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    Text,
    Thinking,
    RedactedThinking { data: String },
    ToolCall { id: String, name: String },
}

/// Content added to the open block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    Text(String),
    Thinking(String),
    /// The thinking block's signature (sent whole, once).
    Signature(String),
    /// A fragment of a tool call's JSON arguments.
    Arguments(String),
}

/// Turns one dialect's streamed answer into events. The caller splits the
/// upstream's framing (SSE, AWS event stream, JSON array) and passes each
/// frame's payload.
pub trait Decode: Send + 'static {
    /// The events for one upstream frame `payload` (maybe none; a payload
    /// that is not what the dialect sends is skipped).
    fn push(&mut self, payload: &[u8]) -> Vec<Event>;
    /// The upstream ended its body; the closing events it implies, if the
    /// dialect closes implicitly (chat's `[DONE]`).
    fn finish(&mut self) -> Vec<Event>;
    /// What the decoder left out (blocks the form cannot hold), for the
    /// caller to log with the encoder's.
    fn dropped(&self) -> Dropped {
        Dropped::new()
    }
}

/// Writes events as one dialect's streamed answer for the client, framing
/// included (SSE events, or a JSON array's pieces).
pub trait Encode: Send + 'static {
    /// The bytes to send the client for `event` (maybe none).
    fn push(&mut self, event: &Event, out: &mut Vec<u8>);
    /// What the dialect sends after the last event (chat's `[DONE]`, the
    /// array's `]`); called once, only when the stream ended with `End`.
    fn finish(&mut self, out: &mut Vec<u8>);
    /// What was dropped on the way, for the caller to log.
    fn dropped(&self) -> Dropped {
        Dropped::new()
    }
}

// === impl Part ===

impl Part {
    /// The part's block type as the messages API names it: what a dialect
    /// with no place for the part notes as dropped.
    pub fn block_type(&self) -> &'static str {
        match self {
            Part::Text { .. } => "text",
            Part::Image(_) => "image",
            Part::Document(_) => "document",
            Part::Thinking { .. } => "thinking",
            Part::RedactedThinking { .. } => "redacted_thinking",
            Part::ToolCall { .. } => "tool_use",
            Part::ToolResult { .. } => "tool_result",
        }
    }
}

// === impl Reasoning ===

impl Reasoning {
    /// A budget in tokens for providers that take one: levels map to 1k,
    /// 2k, 8k and 24k tokens (`Off` is `None`).
    pub fn budget(self) -> Option<i64> {
        match self {
            Reasoning::Off => None,
            Reasoning::Budget(tokens) => Some(tokens),
            Reasoning::Effort(Effort::Minimal) => Some(1024),
            Reasoning::Effort(Effort::Low) => Some(2048),
            Reasoning::Effort(Effort::Medium) => Some(8192),
            Reasoning::Effort(Effort::High) => Some(24_576),
        }
    }

    /// A level for providers that take one; budgets map to the nearest
    /// level at or above them.
    pub fn effort(self) -> Option<Effort> {
        match self {
            Reasoning::Off => None,
            Reasoning::Effort(effort) => Some(effort),
            Reasoning::Budget(tokens) if tokens <= 1024 => Some(Effort::Minimal),
            Reasoning::Budget(tokens) if tokens <= 2048 => Some(Effort::Low),
            Reasoning::Budget(tokens) if tokens <= 8192 => Some(Effort::Medium),
            Reasoning::Budget(_) => Some(Effort::High),
        }
    }
}

// === impl Effort ===

impl Effort {
    /// The level named `word` (`minimal`, `low`, `medium`, `high`).
    pub fn parse(word: &str) -> Option<Effort> {
        match word {
            "minimal" | "none" => Some(Effort::Minimal),
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" | "xhigh" => Some(Effort::High),
            _ => None,
        }
    }

    /// The level's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

// === impl Response ===

impl Response {
    /// The answer's text parts joined, for metering an answer that carries
    /// no usage.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Text { text: t, .. } | Part::Thinking { text: t, .. } => text.push_str(t),
                Part::ToolCall { name, arguments, .. } => {
                    text.push_str(name);
                    text.push_str(&arguments.to_string());
                }
                _ => {}
            }
        }
        text
    }

    /// The whole answer as the events a stream of it would carry, so an
    /// encoder of streams can serve a client that asked for a stream from a
    /// channel that answered whole.
    pub fn events(&self) -> Vec<Event> {
        let mut events = vec![Event::Start { id: self.id.clone(), model: self.model.clone() }];
        for (index, part) in self.parts.iter().enumerate() {
            let (block, delta) = match part {
                Part::Text { text, .. } => (Block::Text, Some(Delta::Text(text.clone()))),
                Part::Thinking { text, signature } => {
                    events.push(Event::BlockStart { index, block: Block::Thinking });
                    events.push(Event::Delta { index, delta: Delta::Thinking(text.clone()) });
                    if let Some(signature) = signature {
                        events.push(Event::Delta { index, delta: Delta::Signature(signature.clone()) });
                    }
                    events.push(Event::BlockStop { index });
                    continue;
                }
                Part::RedactedThinking { data } => (Block::RedactedThinking { data: data.clone() }, None),
                Part::ToolCall { id, name, arguments } => (
                    Block::ToolCall { id: id.clone(), name: name.clone() },
                    Some(Delta::Arguments(arguments.to_string())),
                ),
                _ => continue,
            };
            events.push(Event::BlockStart { index, block });
            if let Some(delta) = delta {
                events.push(Event::Delta { index, delta });
            }
            events.push(Event::BlockStop { index });
        }
        if let Some(usage) = self.usage {
            events.push(Event::Usage(usage));
        }
        events.push(Event::Stop(self.stop));
        events.push(Event::End);
        events
    }
}

#[cfg(test)]
/// Collects a stream's events into the whole answer, so a client that
/// asked for one answer can be served from a streamed upstream (Gemini CLI
/// and Bedrock's converse-stream both stream).
#[derive(Debug, Default)]
pub struct Collect {
    response: Response,
    /// The arguments text of each tool-call block, by part index.
    arguments: Vec<(usize, String)>,
    ended: bool,
}

// === impl Collect ===

#[cfg(test)]
impl Collect {
    pub fn new() -> Collect {
        Collect::default()
    }

    /// Takes one event.
    pub fn push(&mut self, event: Event) {
        let parts = &mut self.response.parts;
        match event {
            Event::Start { id, model } => {
                self.response.id = id;
                self.response.model = model;
            }
            Event::BlockStart { block, .. } => {
                let part = match block {
                    Block::Text => Part::Text { text: String::new(), cache: None },
                    Block::Thinking => Part::Thinking { text: String::new(), signature: None },
                    Block::RedactedThinking { data } => Part::RedactedThinking { data },
                    Block::ToolCall { id, name } => {
                        self.arguments.push((parts.len(), String::new()));
                        Part::ToolCall { id, name, arguments: Value::Object(Map::new()) }
                    }
                };
                parts.push(part);
            }
            Event::Delta { delta, .. } => match (parts.last_mut(), delta) {
                (Some(Part::Text { text, .. }), Delta::Text(more)) => text.push_str(&more),
                (Some(Part::Thinking { text, .. }), Delta::Thinking(more)) => text.push_str(&more),
                (Some(Part::Thinking { signature, .. }), Delta::Signature(sig)) => *signature = Some(sig),
                (Some(Part::ToolCall { .. }), Delta::Arguments(more)) => {
                    if let Some((_, text)) = self.arguments.last_mut() {
                        text.push_str(&more);
                    }
                }
                _ => {}
            },
            Event::BlockStop { .. } => {}
            Event::Usage(usage) => self.response.usage = Some(usage),
            Event::Stop(stop) => self.response.stop = stop,
            Event::End => self.ended = true,
            Event::Error { .. } => {}
        }
    }

    /// Whether the stream ended naturally.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The answer; tool-call arguments that are not a JSON object become
    /// `{}`.
    pub fn finish(mut self) -> Response {
        for (index, text) in self.arguments {
            if let Some(Part::ToolCall { arguments, .. }) = self.response.parts.get_mut(index) {
                *arguments = super::arguments_to_input(Some(&Value::String(text)));
            }
        }
        self.response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_survives_its_own_events() {
        let answer = Response {
            id: Some("a1".into()),
            model: "m".into(),
            parts: vec![
                Part::Thinking { text: "hm".into(), signature: Some("sig".into()) },
                Part::Text { text: "hello".into(), cache: None },
                Part::ToolCall { id: "t1".into(), name: "f".into(), arguments: serde_json::json!({"x": 1}) },
            ],
            stop: Stop::ToolUse,
            usage: Some(Usage { prompt_tokens: 3, completion_tokens: 4, ..Usage::default() }),
        };
        let mut collect = Collect::new();
        for event in answer.events() {
            collect.push(event);
        }
        assert!(collect.ended());
        assert_eq!(collect.finish(), answer);
    }

    #[test]
    fn budgets_and_levels_convert_both_ways() {
        for effort in [Effort::Minimal, Effort::Low, Effort::Medium, Effort::High] {
            let budget = Reasoning::Effort(effort).budget();
            assert_eq!(budget.map(Reasoning::Budget).and_then(Reasoning::effort), Some(effort));
            assert_eq!(Effort::parse(effort.as_str()), Some(effort));
        }
        assert_eq!(Reasoning::Off.budget(), None);
    }
}
