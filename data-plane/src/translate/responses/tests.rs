#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use serde_json::{Value, json};

use super::*;
use crate::{
    pricing::Usage,
    translate::{
        Answering, Dropped,
        ir::{
            self, Collect, Decode, Effort, Encode, Event, Media, Part, Reasoning, ResponseFormat, Role, Stop,
            ToolChoice,
        },
    },
};

fn answering() -> Answering {
    Answering { model: "client-model".into(), created: 1_700_000_000, ..Answering::default() }
}

fn answer() -> ir::Response {
    ir::Response {
        id: Some("resp_abc".into()),
        model: "upstream".into(),
        parts: vec![
            Part::Thinking { text: "let me see".into(), signature: Some("sig-1".into()) },
            Part::Text { text: "Calling the tool.".into(), cache: None },
            Part::ToolCall { id: "call_1".into(), name: "weather".into(), arguments: json!({"city": "Paris"}) },
        ],
        stop: Stop::ToolUse,
        usage: Some(Usage {
            prompt_tokens: 1200,
            completion_tokens: 80,
            cached_tokens: 1000,
            cache_write_5m_tokens: 150,
            reasoning_tokens: 30,
            ..Usage::default()
        }),
    }
}

/// The SSE events of `bytes` as (event line, data).
fn sse(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let mut lines = frame.lines();
            let event = lines.next().unwrap().strip_prefix("event: ").unwrap().to_owned();
            let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
            (event, serde_json::from_str(data).unwrap())
        })
        .collect()
}

fn encode_stream(events: &[Event]) -> Vec<u8> {
    let mut encoder = Encoder::new(&answering());
    let mut out = Vec::new();
    for event in events {
        encoder.push(event, &mut out);
    }
    encoder.finish(&mut out);
    out
}

#[test]
fn a_streamed_answer_has_the_events_the_sdks_expect_in_order_and_numbered() {
    let events = sse(&encode_stream(&answer().events()));
    let types: Vec<&str> = events.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(
        types,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (n, (event, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], event.as_str());
        assert_eq!(data["sequence_number"], n, "{event}");
    }
    let output_indexes: Vec<i64> = events
        .iter()
        .filter(|(event, _)| event == "response.output_item.added")
        .map(|(_, data)| data["output_index"].as_i64().unwrap())
        .collect();
    assert_eq!(output_indexes, [0, 1, 2]);
    let (_, completed) = events.last().unwrap();
    let response = &completed["response"];
    assert_eq!(response["status"], "completed");
    assert_eq!(response["model"], "client-model");
    assert_eq!(response["output"][1]["content"][0]["text"], "Calling the tool.");
    assert_eq!(response["output"][2]["arguments"], r#"{"city":"Paris"}"#);
    assert_eq!(response["output"][0]["encrypted_content"], "sig-1");
    assert_eq!(response["usage"]["input_tokens"], 1200);
}

#[test]
fn a_stream_cut_by_the_token_limit_closes_with_response_incomplete() {
    let mut cut = answer();
    cut.stop = Stop::MaxTokens;
    let events = sse(&encode_stream(&cut.events()));
    let (event, data) = events.last().unwrap();
    assert_eq!(event, "response.incomplete");
    assert_eq!(data["response"]["status"], "incomplete");
    assert_eq!(data["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

#[test]
fn an_upstream_error_mid_stream_is_response_failed_after_what_was_sent() {
    let events = [
        Event::Start { id: None, model: "m".into() },
        Event::BlockStart { index: 0, block: ir::Block::Text },
        Event::Delta { index: 0, delta: ir::Delta::Text("par".into()) },
        Event::Error { kind: Some("overloaded_error".into()), message: "busy".into() },
    ];
    let events = sse(&encode_stream(&events));
    let (event, data) = events.last().unwrap();
    assert_eq!(event, "response.failed");
    assert_eq!(data["response"]["error"], json!({"code": "overloaded_error", "message": "busy"}));
    assert_eq!(data["response"]["output"][0]["content"][0]["text"], "par");
}

#[test]
fn usage_maps_to_the_responses_fields_in_whole_tokens() {
    let body = encode_response(&answer(), &answering());
    assert_eq!(
        body["usage"],
        json!({
            "input_tokens": 1200,
            "input_tokens_details": {"cached_tokens": 1000},
            "output_tokens": 80,
            "output_tokens_details": {"reasoning_tokens": 30},
            "total_tokens": 1280,
        })
    );
    // And back: what the meter reads of it is the same usage but for the
    // cache writes, which responses has no field for.
    let back = crate::meter::answer::usage_of(&body["usage"]).unwrap();
    assert_eq!(back, Usage { cache_write_5m_tokens: 0, ..answer().usage.unwrap() });
}

#[test]
fn a_whole_answer_is_a_response_object_with_one_item_per_part() {
    let body = encode_response(&answer(), &answering());
    assert_eq!(body["object"], "response");
    assert_eq!(body["id"], "resp_abc");
    assert_eq!(body["created_at"], 1_700_000_000);
    assert_eq!(body["status"], "completed");
    assert_eq!(body["incomplete_details"], Value::Null);
    let kinds: Vec<&str> = body["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "message", "function_call"]);
    assert_eq!(body["output"][2]["call_id"], "call_1");
    assert_eq!(body["output"][0]["summary"][0]["text"], "let me see");
    let mut cut = answer();
    cut.stop = Stop::MaxTokens;
    let body = encode_response(&cut, &answering());
    assert_eq!(
        (body["status"].as_str(), body["incomplete_details"]["reason"].as_str()),
        (Some("incomplete"), Some("max_output_tokens"))
    );
}

#[test]
fn a_whole_answer_survives_encoding_and_decoding() {
    let mut decoded = decode_response(&encode_response(&answer(), &answering()));
    decoded.model = "upstream".into();
    assert_eq!(
        decoded,
        ir::Response { usage: Some(Usage { cache_write_5m_tokens: 0, ..answer().usage.unwrap() }), ..answer() }
    );
}

#[test]
fn a_stream_survives_encoding_and_decoding() {
    let bytes = encode_stream(&answer().events());
    let mut decoder = Decoder::new();
    let mut collect = Collect::new();
    for (_, data) in sse(&bytes) {
        for event in decoder.push(data.to_string().as_bytes()) {
            collect.push(event);
        }
    }
    assert!(collect.ended());
    let mut decoded = collect.finish();
    decoded.model = "upstream".into();
    assert_eq!(
        decoded,
        ir::Response { usage: Some(Usage { cache_write_5m_tokens: 0, ..answer().usage.unwrap() }), ..answer() }
    );
}

#[test]
fn a_request_with_every_kind_of_item_decodes_into_turns() {
    let body = json!({
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"role": "developer", "content": "answer in French"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "weather?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                {"type": "input_file", "filename": "a.pdf", "file_data": "JVBE"},
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "sig"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "checking"}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "item_reference", "id": "x"},
        ],
        "tools": [
            {"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}},
            {"type": "web_search"},
        ],
        "tool_choice": {"type": "function", "name": "weather"},
        "max_output_tokens": 100,
        "temperature": 0.5,
        "reasoning": {"effort": "high", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
        "parallel_tool_calls": false,
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "stream": true,
    });
    let (request, dropped) = decode_request(&body).unwrap();
    assert_eq!(dropped.names(), ["hosted_tool", "include", "item_reference"]);
    let text = |t: &str| Part::Text { text: t.into(), cache: None };
    assert_eq!(request.system, [text("be brief"), text("answer in French")]);
    assert_eq!(request.messages.len(), 3);
    assert_eq!(request.messages[0].role, Role::User);
    assert_eq!(
        request.messages[0].parts[1..],
        [
            Part::Image(Media::Base64 { media_type: "image/png".into(), data: "AAAA".into() }),
            Part::Document(Media::Base64 { media_type: "application/pdf".into(), data: "JVBE".into() }),
        ]
    );
    assert_eq!(request.messages[1].role, Role::Assistant);
    assert_eq!(
        request.messages[1].parts,
        [
            Part::Thinking { text: "think".into(), signature: Some("sig".into()) },
            text("checking"),
            Part::ToolCall { id: "c1".into(), name: "weather".into(), arguments: json!({"city": "Paris"}) },
        ]
    );
    assert_eq!(
        request.messages[2].parts,
        [Part::ToolResult {
            id: "c1".into(),
            name: Some("weather".into()),
            content: vec![text("sunny")],
            is_error: false
        }]
    );
    assert_eq!(request.tools.len(), 1);
    assert_eq!(request.tool_choice, Some(ToolChoice::Tool("weather".into())));
    assert_eq!((request.max_tokens, request.temperature, request.stream), (Some(100), Some(0.5), true));
    assert_eq!(request.reasoning, Some(Reasoning::Effort(Effort::High)));
    assert_eq!(request.parallel_tool_calls, Some(false));
    assert!(matches!(request.response_format, Some(ResponseFormat::Schema { strict: true, .. })));
}

#[test]
fn a_string_input_is_one_user_message() {
    let (request, dropped) = decode_request(&json!({"model": "m", "input": "hi"})).unwrap();
    assert!(dropped.is_empty());
    assert_eq!(
        request.messages,
        [ir::Message { role: Role::User, parts: vec![Part::Text { text: "hi".into(), cache: None }] }]
    );
}

#[test]
fn state_kept_by_openai_is_refused_with_a_clear_reason() {
    let error = decode_request(&json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"})).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("previous_response_id") && text.contains("whole conversation"), "{text}");
    assert!(decode_request(&json!({"model": "m", "input": 3})).is_err());
    assert!(decode_request(&json!([1])).is_err());
}

#[test]
fn a_request_survives_encoding_and_decoding() {
    let body = json!({
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
        "max_output_tokens": 100,
    });
    let (request, _) = decode_request(&body).unwrap();
    let mut dropped = Dropped::new();
    let encoded = encode_request(&request, &mut dropped);
    assert_eq!(encoded["store"], false);
    let (again, _) = decode_request(&encoded).unwrap();
    assert_eq!(again, request);
}
