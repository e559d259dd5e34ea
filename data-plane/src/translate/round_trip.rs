//! Tests of the chat and messages codecs together: each dialect's decoder
//! undoes its encoder for whatever the dialect can carry (requests, whole
//! answers, streams), and a body crossing from one dialect to the other
//! keeps what both carry and notes what it loses.

use serde_json::{Value, json};

use super::{
    ir::{
        Block, CacheAt, CacheMark, Collect, Decode, Effort, Encode, Event, Media, Message, Part, Reasoning, Request,
        Response, ResponseFormat, Role, Stop, Tool, ToolChoice,
    },
    *,
};
use crate::pricing::Usage;

fn text(text: &str) -> Part {
    Part::Text { text: text.into(), cache: None }
}

fn call(id: &str, name: &str, arguments: Value) -> Part {
    Part::ToolCall { id: id.into(), name: name.into(), arguments }
}

fn result(id: &str, name: &str, content: Vec<Part>, is_error: bool) -> Part {
    Part::ToolResult { id: id.into(), name: Some(name.into()), content, is_error }
}

fn tool(name: &str) -> Tool {
    Tool {
        name: name.into(),
        description: Some(format!("the {name} tool")),
        parameters: json!({ "type": "object", "properties": { "q": { "type": "string" } } }),
    }
}

fn user(parts: Vec<Part>) -> Message {
    Message { role: Role::User, parts }
}

fn assistant(parts: Vec<Part>) -> Message {
    Message { role: Role::Assistant, parts }
}

/// A request with everything chat can carry.
fn chat_request() -> Request {
    let mut extra = serde_json::Map::new();
    extra.insert("seed".into(), json!(7));
    extra.insert("x_vendor".into(), json!({ "on": true }));
    Request {
        model: "gpt-4o".into(),
        system: vec![text("Be brief.")],
        messages: vec![
            user(vec![
                text("What is in these?"),
                Part::Image(Media::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }),
                Part::Image(Media::Url { url: "https://example.com/a.jpg".into(), media_type: None }),
                Part::Document(Media::Base64 { media_type: "application/pdf".into(), data: "JVBERi0x".into() }),
            ]),
            assistant(vec![text("Looking."), call("c1", "lookup", json!({ "q": "png" }))]),
            user(vec![result("c1", "lookup", vec![text("An image format.")], false)]),
            assistant(vec![call("c2", "lookup", json!({}))]),
            user(vec![result("c2", "lookup", vec![], false)]),
            user(vec![text("Thanks.")]),
        ],
        tools: vec![tool("lookup")],
        tool_choice: Some(ToolChoice::Tool("lookup".into())),
        parallel_tool_calls: Some(false),
        max_tokens: Some(300),
        temperature: Some(0.5),
        top_p: Some(0.9),
        stop: vec!["END".into()],
        stream: true,
        reasoning: Some(Reasoning::Effort(Effort::Low)),
        response_format: Some(ResponseFormat::Schema {
            name: "answer".into(),
            schema: json!({ "type": "object" }),
            strict: true,
        }),
        user: Some("u1".into()),
        extra,
        document_names: vec![(0, 3, "report.pdf".into())],
        ..Request::default()
    }
}

/// A request with everything the messages API can carry.
fn messages_request() -> Request {
    let mut extra = serde_json::Map::new();
    extra.insert("container".into(), json!("c1"));
    Request {
        model: "claude-sonnet-4-5".into(),
        system: vec![
            Part::Text { text: "Long shared instructions.".into(), cache: Some(CacheMark::OneHour) },
            text("More."),
        ],
        messages: vec![
            user(vec![
                Part::Image(Media::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }),
                Part::Document(Media::Url { url: "https://example.com/a.pdf".into(), media_type: None }),
                Part::Text { text: "What is this?".into(), cache: Some(CacheMark::FiveMinutes) },
            ]),
            assistant(vec![
                Part::Thinking { text: "Hmm.".into(), signature: Some("sig".into()) },
                Part::RedactedThinking { data: "opaque".into() },
                text("Looking."),
                call("t1", "lookup", json!({ "q": "png" })),
                call("t2", "lookup", json!({ "q": "jpg" })),
            ]),
            user(vec![
                result("t1", "lookup", vec![text("An image format.")], false),
                result(
                    "t2",
                    "lookup",
                    vec![
                        text("Not found:"),
                        Part::Image(Media::Url { url: "https://e.com/x.png".into(), media_type: None }),
                    ],
                    true,
                ),
                text("Go on."),
            ]),
        ],
        tools: vec![tool("lookup"), tool("fetch")],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        max_tokens: Some(1024),
        temperature: Some(0.5),
        top_p: Some(0.9),
        top_k: Some(40),
        stop: vec!["END".into()],
        stream: true,
        user: Some("u1".into()),
        extra,
        cache_marks: vec![
            (CacheAt::Part { message: 0, part: 0 }, CacheMark::FiveMinutes),
            (CacheAt::Part { message: 1, part: 4 }, CacheMark::FiveMinutes),
            (CacheAt::Part { message: 2, part: 1 }, CacheMark::OneHour),
            (CacheAt::Tool(1), CacheMark::FiveMinutes),
        ],
        document_names: vec![(0, 1, "a.pdf".into())],
        ..Request::default()
    }
}

#[test]
fn a_chat_request_decodes_back_to_what_was_encoded() {
    let request = chat_request();
    let mut dropped = Dropped::new();
    let body = chat::request::encode(&request, &mut dropped);
    assert!(dropped.is_empty(), "{dropped}");
    let (back, dropped) = chat::request::decode(&body).unwrap();
    assert!(dropped.is_empty(), "{dropped}");
    assert_eq!(back, request, "{body:#}");
}

#[test]
fn a_messages_request_decodes_back_to_what_was_encoded() {
    let request = messages_request();
    let mut dropped = Dropped::new();
    let body = messages::request::encode(&request, &mut dropped);
    assert!(dropped.is_empty(), "{dropped}");
    let (mut back, dropped) = messages::request::decode(&body).unwrap();
    assert!(dropped.is_empty(), "{dropped}");
    // Marks are kept per place; the order they were found in may differ.
    back.cache_marks.sort_by_key(|(at, _)| format!("{at:?}"));
    let mut request = request;
    request.cache_marks.sort_by_key(|(at, _)| format!("{at:?}"));
    assert_eq!(back, request, "{body:#}");
}

/// A whole answer with everything `parts` holds.
fn answer(parts: Vec<Part>, stop: Stop, usage: Usage) -> Response {
    Response { id: Some("a1".into()), model: "m".into(), parts, stop, usage: Some(usage) }
}

fn chat_answer() -> Response {
    let parts = vec![
        Part::Thinking { text: "Hmm.".into(), signature: None },
        text("Hello."),
        call("c1", "lookup", json!({ "q": "png" })),
        call("c2", "fetch", json!({})),
    ];
    let usage =
        Usage { prompt_tokens: 30, completion_tokens: 12, cached_tokens: 10, reasoning_tokens: 4, ..Usage::default() };
    answer(parts, Stop::ToolUse, usage)
}

fn messages_answer() -> Response {
    let parts = vec![
        Part::Thinking { text: "Hmm.".into(), signature: Some("sig".into()) },
        Part::RedactedThinking { data: "opaque".into() },
        text("Hello."),
        call("t1", "lookup", json!({ "q": "png" })),
    ];
    let usage = Usage {
        prompt_tokens: 100,
        completion_tokens: 40,
        cached_tokens: 50,
        cache_write_5m_tokens: 10,
        cache_write_1h_tokens: 20,
        reasoning_tokens: 0,
        ..Usage::default()
    };
    answer(parts, Stop::MaxTokens, usage)
}

#[test]
fn whole_answers_decode_back_to_what_was_encoded() {
    let answering = Answering { created: 7, ..Answering::default() };
    let chat = chat_answer();
    let (body, dropped) = chat::response::encode(&chat, &answering);
    assert!(dropped.is_empty(), "{dropped}");
    assert_eq!(chat::response::decode(&body), chat, "{body:#}");

    let messages = messages_answer();
    let (body, dropped) = messages::response::encode(&messages, &answering);
    assert!(dropped.is_empty(), "{dropped}");
    let (back, dropped) = messages::response::decode(&body);
    assert!(dropped.is_empty(), "{dropped}");
    assert_eq!(back, messages, "{body:#}");
}

#[test]
fn an_answer_names_the_clients_model_when_the_caller_gives_it() {
    let answering = Answering { model: "my-alias".into(), ..Answering::default() };
    assert_eq!(chat::response::encode(&chat_answer(), &answering).0["model"], "my-alias");
    assert_eq!(messages::response::encode(&chat_answer(), &answering).0["model"], "my-alias");
    assert_eq!(chat::response::encode(&chat_answer(), &Answering::default()).0["model"], "m");
}

/// The `data` of each SSE event in `wire`.
fn payloads(wire: &[u8]) -> Vec<Vec<u8>> {
    let wire = String::from_utf8(wire.to_vec()).unwrap();
    wire.split_terminator("\n\n")
        .map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")).unwrap().as_bytes().to_vec())
        .collect()
}

/// `response` streamed by `encoder` and read back by `decoder`.
fn stream_back(response: &Response, mut encoder: impl Encode, mut decoder: impl Decode) -> (Response, bool) {
    let mut wire = Vec::new();
    for event in response.events() {
        encoder.push(&event, &mut wire);
        if event == Event::End {
            encoder.finish(&mut wire);
        }
    }
    let mut collect = Collect::new();
    for data in payloads(&wire) {
        decoder.push(&data).into_iter().for_each(|e| collect.push(e));
    }
    decoder.finish().into_iter().for_each(|e| collect.push(e));
    let ended = collect.ended();
    (collect.finish(), ended)
}

#[test]
fn streamed_answers_decode_back_to_what_was_encoded() {
    let answering = Answering { include_usage: true, created: 7, ..Answering::default() };
    let chat = chat_answer();
    let (back, ended) = stream_back(&chat, chat::Encoder::new(&answering), chat::Decoder::new());
    assert!(ended);
    assert_eq!(back, chat);

    let messages = messages_answer();
    let (back, ended) = stream_back(&messages, messages::Encoder::new(&answering), messages::Decoder::new());
    assert!(ended);
    assert_eq!(back, messages);
}

#[test]
fn a_chat_stream_without_the_usage_chunk_ends_without_usage() {
    let chat = chat_answer();
    let (back, ended) = stream_back(&chat, chat::Encoder::new(&Answering::default()), chat::Decoder::new());
    assert!(ended);
    assert_eq!(back, Response { usage: None, ..chat });
}

#[test]
fn a_messages_answer_crosses_to_chat_and_loses_only_what_chat_cannot_carry() {
    let (body, dropped) = chat::response::encode(&messages_answer(), &Answering::default());
    assert_eq!(dropped.names(), ["redacted_thinking", "signature"]);
    let back = chat::response::decode(&body);
    let expected = vec![
        Part::Thinking { text: "Hmm.".into(), signature: None },
        text("Hello."),
        call("t1", "lookup", json!({ "q": "png" })),
    ];
    assert_eq!(back.parts, expected);
    assert_eq!(back.stop, Stop::MaxTokens);
    // The whole prompt, with cache reads and writes as parts of it.
    let usage = back.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.cached_tokens, usage.cache_write_5m_tokens), (100, 50, 30));
}

#[test]
fn a_messages_stream_crosses_to_chat_with_its_signature_noted() {
    let (decoder, mut encoder) = messages_to_chat_stream(true, 7);
    let mut decoder = decoder;
    let mut wire = Vec::new();
    let mut events = Vec::new();
    for event in [
        json!({ "type": "message_start", "message": { "id": "msg", "model": "claude", "usage": { "input_tokens": 5, "cache_read_input_tokens": 20 } } }),
        json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "thinking", "thinking": "" } }),
        json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "thinking_delta", "thinking": "Hmm." } }),
        json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "signature_delta", "signature": "sig" } }),
        json!({ "type": "content_block_stop", "index": 0 }),
        json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "web_search_tool_result" } }),
        json!({ "type": "content_block_stop", "index": 1 }),
        json!({ "type": "content_block_start", "index": 2, "content_block": { "type": "text", "text": "" } }),
        json!({ "type": "content_block_delta", "index": 2, "delta": { "type": "text_delta", "text": "Hi" } }),
        json!({ "type": "content_block_stop", "index": 2 }),
        json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 9 } }),
        json!({ "type": "message_stop" }),
    ] {
        events.extend(decoder.push(event.to_string().as_bytes()));
    }
    assert!(
        events.contains(&Event::BlockStart { index: 1, block: Block::Text }),
        "blocks after a dropped one are renumbered: {events:?}"
    );
    for event in &events {
        encoder.push(event, &mut wire);
    }
    encoder.finish(&mut wire);
    let mut dropped = decoder.dropped();
    dropped.extend(&encoder.dropped());
    assert_eq!(dropped.names(), ["signature", "web_search_tool_result"]);
    let chunks = payloads(&wire);
    let usage: Value = serde_json::from_slice(&chunks[chunks.len() - 2]).unwrap();
    assert_eq!(usage["usage"]["prompt_tokens"], 25, "the whole prompt: {usage}");
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 20);
    assert_eq!(chunks.last().unwrap(), b"[DONE]");
}

#[test]
fn an_upstream_error_mid_stream_reaches_either_client_in_its_dialect() {
    let error = Event::Error { kind: Some("overloaded_error".into()), message: "Overloaded".into() };
    let start = Event::Start { id: None, model: "m".into() };
    let mut wire = Vec::new();
    let mut encoder = messages::Encoder::new(&Answering::default());
    encoder.push(&start, &mut wire);
    encoder.push(&error, &mut wire);
    let wire = String::from_utf8(wire).unwrap();
    assert!(wire.ends_with("event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n"), "{wire}");

    let mut decoder = chat::Decoder::new();
    let events = decoder.push(br#"{"error":{"message":"boom","type":"server_error"}}"#);
    assert_eq!(events, [Event::Error { kind: None, message: "boom".into() }]);
    let mut wire = Vec::new();
    chat::Encoder::new(&Answering::default()).push(&events[0], &mut wire);
    let body: Value = serde_json::from_slice(&payloads(&wire)[0]).unwrap();
    assert_eq!(body["error"]["type"], "api_error", "chat's error types are not the messages API's");
    assert_eq!(decoder.push(b"[DONE]"), [], "nothing follows an error");
}

// === requests across the dialects ===

#[test]
fn structural_errors_name_the_field() {
    let to_chat = |body: Value| messages_to_chat_request_noted(&body).map(|(body, _)| body);
    let to_messages = |body: Value| chat_to_messages_request_noted(&body).map(|(body, _)| body);
    assert_eq!(to_chat(json!([])), Err(TranslateError::NotAnObject));
    let err = to_chat(json!({ "model": "m" })).unwrap_err();
    assert_eq!(err.to_string(), "invalid messages: must be an array");
    let err = to_chat(json!({ "messages": [{ "role": "tool", "content": "x" }] })).unwrap_err();
    let reason = "must be \"user\", \"assistant\", \"system\" or \"developer\"";
    assert_eq!(err.to_string(), format!("invalid messages[0].role: {reason}"));
    let err = to_chat(json!({ "messages": [{ "role": "user", "content": 3 }] })).unwrap_err();
    assert!(err.to_string().starts_with("invalid messages[0].content"), "{err}");

    let err = to_messages(json!({ "messages": [{ "role": "robot" }] })).unwrap_err();
    assert!(err.to_string().starts_with("invalid messages[0].role"), "{err}");
    let err = to_messages(json!({ "messages": [], "n": 2 })).unwrap_err();
    assert_eq!(err, invalid("n", "only 1 choice can be generated by this model"));
    assert!(to_messages(json!({ "messages": [], "n": 1 })).is_ok());
}

#[test]
fn a_chat_request_without_a_limit_gets_the_default_max_tokens() {
    let out = |body: Value| chat_to_messages_request_noted(&body).unwrap().0["max_tokens"].clone();
    assert_eq!(out(json!({ "model": "m", "messages": [] })), messages::request::DEFAULT_MAX_TOKENS);
    assert_eq!(out(json!({ "messages": [], "max_tokens": 10 })), 10);
    assert_eq!(out(json!({ "messages": [], "max_tokens": 10, "max_completion_tokens": 20 })), 20);
}

#[test]
fn system_and_developer_turns_stay_where_they_are_for_chat_and_join_the_prompt_elsewhere() {
    let request = json!({ "system": "z", "messages": [
        { "role": "user", "content": "a" },
        { "role": "system", "content": [{ "type": "text", "text": "b" }, { "type": "text", "text": "c" }] },
        { "role": "developer", "content": "d" },
        { "role": "system", "content": "" },
    ] });
    let (out, dropped) = messages_to_chat_request_noted(&request).unwrap();
    let expected = json!([
        { "role": "system", "content": "z" },
        { "role": "user", "content": "a" },
        { "role": "system", "content": "b\n\nc" },
        { "role": "developer", "content": "d" },
    ]);
    assert_eq!(out["messages"], expected, "an empty system turn is left out");
    assert!(dropped.is_empty(), "{dropped}");
    let (form, _) = chat::request::decode(&out).unwrap();
    assert_eq!(form.system.len(), 3, "chat's turn is one text");
    assert_eq!(form.system_turns.len(), 2);
    let mut dropped = Dropped::new();
    assert_eq!(chat::request::encode(&form, &mut dropped)["messages"], expected, "chat keeps turns in place");
    let mut dropped = Dropped::new();
    let messages = messages::request::encode(&form, &mut dropped);
    let system = json!([
        { "type": "text", "text": "z" },
        { "type": "text", "text": "b\n\nc" },
        { "type": "text", "text": "d" },
    ]);
    assert_eq!(messages["system"], system, "one system prompt elsewhere");
}

#[test]
fn thinking_and_cache_markers_are_noted_when_dropped_for_chat() {
    let request = json!({ "messages": [
        { "role": "user", "content": [{ "type": "text", "text": "q", "cache_control": { "type": "ephemeral" } }] },
        { "role": "assistant", "content": [
            { "type": "thinking", "thinking": "hmm", "signature": "s" },
            { "type": "text", "text": "a" },
        ] },
    ] });
    let (out, dropped) = messages_to_chat_request_noted(&request).unwrap();
    assert_eq!(dropped.names(), ["cache_control", "thinking"]);
    assert_eq!(out["messages"][1], json!({ "role": "assistant", "content": "a" }));
    assert!(!out.to_string().contains("cache_control"), "{out}");
}

#[test]
fn a_message_cache_marker_lands_on_its_last_block_unless_that_has_one() {
    let marker = json!({ "type": "ephemeral" });
    let request = json!({ "messages": [
        { "role": "user", "content": "a", "cache_control": marker },
        { "role": "assistant", "content": "b", "tool_calls": [
            { "id": "c1", "type": "function", "function": { "name": "f", "arguments": "{}" } },
        ], "cache_control": marker },
        { "role": "user", "cache_control": { "type": "ephemeral", "ttl": "1h" }, "content": [
            { "type": "text", "text": "c", "cache_control": marker },
        ] },
    ] });
    let (out, dropped) = chat_to_messages_request_noted(&request).unwrap();
    assert!(dropped.is_empty(), "{dropped}");
    assert_eq!(out["messages"][0]["content"], json!([{ "type": "text", "text": "a", "cache_control": marker }]));
    assert_eq!(out["messages"][1]["content"][0].get("cache_control"), None);
    assert_eq!(out["messages"][1]["content"][1]["cache_control"], marker, "the tool_use block");
    assert_eq!(out["messages"][2]["content"][0]["cache_control"], marker, "the part's own marker wins");
}

#[test]
fn unset_chat_fields_are_not_noted_but_set_ones_are() {
    let request = json!({ "messages": [], "seed": null, "logprobs": false, "stream_options": {} });
    assert!(chat_to_messages_request_noted(&request).unwrap().1.is_empty());
    let request = json!({ "messages": [], "seed": 7, "top_logprobs": 2 });
    assert_eq!(chat_to_messages_request_noted(&request).unwrap().1.names(), ["seed", "top_logprobs"]);
}

#[test]
fn tool_choice_without_tools_is_not_sent() {
    let (out, dropped) = chat_to_messages_request_noted(&json!({ "messages": [], "tool_choice": "required" })).unwrap();
    assert!(out.get("tool_choice").is_none(), "{out}");
    assert_eq!(dropped.names(), ["tool_choice"]);
    let (out, _) =
        messages_to_chat_request_noted(&json!({ "messages": [], "tool_choice": { "type": "any" } })).unwrap();
    assert!(out.get("tool_choice").is_none(), "{out}");
}

#[test]
fn reasoning_reaches_the_dialect_that_takes_its_kind_and_is_noted_elsewhere() {
    let (out, dropped) =
        chat_to_messages_request_noted(&json!({ "messages": [], "reasoning_effort": "high" })).unwrap();
    assert!(out.get("thinking").is_none(), "{out}");
    assert_eq!(dropped.names(), ["reasoning_effort"]);
    let thinking = json!({ "messages": [], "thinking": { "type": "enabled", "budget_tokens": 2048 } });
    let (out, dropped) = messages_to_chat_request_noted(&thinking).unwrap();
    assert!(out.get("reasoning_effort").is_none(), "{out}");
    assert_eq!(dropped.names(), ["thinking_config"]);
    let disabled = json!({ "messages": [], "thinking": { "type": "disabled" } });
    assert!(messages_to_chat_request_noted(&disabled).unwrap().1.is_empty());
}

#[test]
fn fields_of_the_other_dialect_are_noted_and_vendor_fields_pass() {
    let request = json!({ "messages": [], "frequency_penalty": 0.5, "x_vendor": 1 });
    let (out, dropped) = chat_to_messages_request_noted(&request).unwrap();
    assert_eq!(dropped.names(), ["frequency_penalty"]);
    assert_eq!(out["x_vendor"], 1);
    let request = json!({ "messages": [], "container": "c1", "top_k": 5, "x_vendor": 1 });
    let (out, dropped) = messages_to_chat_request_noted(&request).unwrap();
    assert_eq!(dropped.names(), ["container", "top_k"]);
    assert_eq!(out["x_vendor"], 1);
}

#[test]
fn a_tool_result_is_named_after_the_call_it_answers() {
    let body = json!({ "messages": [
        { "role": "assistant", "content": null, "tool_calls": [{ "id": "c1", "type": "function", "function": { "name": "f", "arguments": "{\"a\":" } }] },
        { "role": "tool", "tool_call_id": "c1", "content": "ok" },
        { "role": "tool", "tool_call_id": "c9", "content": "?" },
    ] });
    let (request, _) = chat::request::decode(&body).unwrap();
    assert_eq!(request.messages[0].parts, [call("c1", "f", json!({}))], "garbled arguments are an empty object");
    assert_eq!(request.messages[1].parts, [result("c1", "f", vec![text("ok")], false)]);
    let Part::ToolResult { name, .. } = &request.messages[2].parts[0] else { panic!() };
    assert_eq!(*name, None);
}
