//! Tests of the chat and messages stream codecs on their own: the lean
//! reading of the chunks and events most of a stream is made of decodes as
//! the parsed reading does, the hand-written chunks and deltas are what
//! their values serialise to, and streams cut, closed or failed end as
//! they should.

use serde_json::{Value, json};

use super::{
    Answering, chat,
    ir::{Decode, Delta, Encode, Event, Stop},
    messages,
};

/// A JSON object written out by hand (names may repeat, in any order).
fn object(
    names: &'static [&'static str],
    value: impl proptest::strategy::Strategy<Value = String>,
) -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop::collection::vec((prop::sample::select(names), value), 0..5).prop_map(|fields| {
        let fields: Vec<String> =
            fields.iter().map(|(name, value)| format!("{}:{value}", Value::from(*name))).collect();
        format!("{{{}}}", fields.join(","))
    })
}

/// A chat stream as upstreams send it, with every kind of chunk the
/// translator acts on: text (most of them), reasoning, tool calls,
/// finish reasons, usage, errors, fields given twice, and anything.
pub(super) fn chat_stream() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
    use proptest::prelude::*;
    let anything = || crate::fuzz::json().prop_map(|value| value.to_string());
    let text = || ".{0,6}".prop_map(|text| Value::from(text).to_string());
    let plain = text().prop_map(|text| {
        format!(
            r#"{{"id":"c","model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"finish_reason":null}}]}}"#
        )
    });
    let calls = r#"[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]"#;
    let scalars = || prop::sample::select(vec!["null", "\"\"", "\"stop\"", "0", "[]"]).prop_map(str::to_owned);
    let delta = object(
        &["content", "reasoning_content", "reasoning", "tool_calls", "role"],
        prop_oneof![text(), scalars(), Just(calls.to_owned()), anything()],
    );
    let choice = object(&["index", "delta", "finish_reason", "logprobs"], prop_oneof![delta, scalars(), anything()]);
    let choices = prop::collection::vec(choice, 0..3).prop_map(|choices| format!("[{}]", choices.join(",")));
    let usage = Just(r#"{"prompt_tokens":3,"completion_tokens":2}"#.to_owned());
    let chunk =
        object(&["id", "model", "choices", "usage", "error"], prop_oneof![choices, usage, scalars(), anything()]);
    // A text chunk with one more field, at one of its three levels:
    // each is one thing that takes a chunk off the lean path, or not.
    let extra = |fields: &'static [&'static str]| {
        prop::option::of(prop::sample::select(fields))
            .prop_map(|field| field.map_or(String::new(), |f| format!(",{f}")))
    };
    let in_delta = extra(&[
        r#""reasoning_content":"r""#,
        r#""reasoning_content":null"#,
        r#""reasoning":"""#,
        r#""reasoning":"r""#,
        r#""tool_calls":[{"index":0,"function":{"arguments":"{}"}}]"#,
        r#""tool_calls":null"#,
        r#""content":"again""#,
        r#""role":"assistant""#,
    ]);
    let in_choice_extra = || {
        extra(&[
            r#""finish_reason":"stop""#,
            r#""finish_reason":null"#,
            r#""finish_reason":"tool_calls""#,
            r#""delta":{"content":"again"}"#,
            r#""logprobs":null"#,
        ])
    };
    let in_choice = in_choice_extra();
    let at_top = extra(&[
        r#""usage":{"prompt_tokens":3,"completion_tokens":2}"#,
        r#""usage":null"#,
        r#""error":null"#,
        r#""error":{"message":"m"}"#,
        r#""choices":[{"delta":{"content":"again"}}]"#,
        r#""choices":[]"#,
    ]);
    let near = (text(), in_delta, in_choice, at_top).prop_map(|(text, delta, choice, top)| {
        format!(r#"{{"id":"c","choices":[{{"index":0,"delta":{{"content":{text}{delta}}}{choice}}}]{top}}}"#)
    });
    // Tool calls: a call's first chunk (its id and name) and chunks of
    // its arguments, numbered in every way a chunk numbers them, with
    // another call or other fields beside them now and then.
    let number = || prop::sample::select(vec!["0", "1", "\"x\"", "null"]);
    let call_start = (number(), text()).prop_map(|(n, arguments)| {
        format!(
            r#"{{"id":"c","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{n},"id":"call_{n}","type":"function","function":{{"name":"f","arguments":{arguments}}}}}]}}}}]}}"#
        )
    });
    let beside_call = extra(&[r#"{"index":1,"function":{"arguments":"y"}}"#, r#"{"function":{"name":"g"}}"#]);
    let beside_calls = extra(&[r#""content":"a""#, r#""content":"""#, r#""reasoning_content":"r""#]);
    let call_arguments = (number(), text(), beside_call, beside_calls, in_choice_extra()).prop_map(
        |(n, arguments, call, delta, choice)| {
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{n},"function":{{"arguments":{arguments}}}}}{call}]{delta}}}{choice}}}]}}"#
            )
        },
    );
    let any_body = crate::fuzz::body().prop_map(|body| String::from_utf8_lossy(&body).into_owned());
    let event = prop_oneof![
        3 => plain,
        3 => near,
        3 => chunk,
        2 => call_start,
        3 => call_arguments,
        1 => Just("[DONE]".to_owned()),
        1 => any_body,
    ];
    prop::collection::vec(event, 1..12)
}

/// A messages stream as upstreams send it: text and thinking deltas
/// (most of them), each sometimes with one thing more or different,
/// every other event the translator acts on, and anything.
fn messages_stream() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
    use proptest::prelude::*;
    let text = || ".{0,6}".prop_map(|text| Value::from(text).to_string());
    let delta = (prop::sample::select(vec!["text_delta", "thinking_delta"]), text()).prop_map(|(kind, text)| {
        let key = if kind == "text_delta" { "text" } else { "thinking" };
        format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"{kind}","{key}":{text}}}}}"#)
    });
    let extra = |fields: &'static [&'static str]| {
        prop::option::of(prop::sample::select(fields))
            .prop_map(|field| field.map_or(String::new(), |f| format!(",{f}")))
    };
    let in_delta = extra(&[
        r#""type":"input_json_delta""#,
        r#""type":"signature_delta""#,
        r#""type":"thinking_delta""#,
        r#""type":null"#,
        r#""text":"again""#,
        r#""text":1"#,
        r#""thinking":"t""#,
        r#""partial_json":"{}""#,
    ]);
    let at_top = extra(&[
        r#""type":"ping""#,
        r#""type":"message_delta""#,
        r#""delta":{"type":"text_delta","text":"again"}"#,
        r#""delta":null"#,
        r#""usage":{"output_tokens":3}"#,
        r#""index":2"#,
    ]);
    let near = (text(), in_delta.clone(), in_delta, at_top).prop_map(|(text, first, second, top)| {
        format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{text}{first}{second}}}{top}}}"#)
    });
    let others = prop::sample::select(vec![
        r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":5}}}"#,
        r#"{"type":"message_start","message":{"id":7,"model":null}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":"hm"}}"#,
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"f"}}"#,
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#,
        r#"{"type":"content_block_stop","index":2}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
        r#"{"type":"message_stop"}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ])
    .prop_map(str::to_owned);
    // Tool arguments for blocks that are tools, are not, or are not
    // named, with arguments of every kind.
    let block = prop::sample::select(vec![r#""index":2,"#, r#""index":0,"#, r#""index":"x","#, ""]);
    let partial = prop_oneof![text(), Just("null".to_owned()), Just("1".to_owned())];
    let arguments = (block, partial, extra(&[r#""text":"t""#, r#""type":"text_delta""#])).prop_map(|(block, partial, more)| {
        format!(r#"{{"type":"content_block_delta",{block}"delta":{{"type":"input_json_delta","partial_json":{partial}{more}}}}}"#)
    });
    let any_body = crate::fuzz::body().prop_map(|body| String::from_utf8_lossy(&body).into_owned());
    prop::collection::vec(prop_oneof![3 => delta, 3 => near, 3 => others, 3 => arguments, 1 => any_body], 1..12)
}

/// Whether any of `data` is refused by a parsed reading but taken by a
/// lenient one (a lone surrogate in a skipped field): those may be read by
/// their text now; everything else must come out the same.
fn any_refused(data: &[String]) -> bool {
    data.iter().any(|d| {
        d != "[DONE]"
            && serde_json::from_slice::<Value>(d.as_bytes()).is_err()
            && serde_json::from_slice::<serde::de::IgnoredAny>(d.as_bytes()).is_ok()
    })
}

/// The wire bytes `encoder` writes for `events`.
fn written(encoder: &mut impl Encode, events: &[Event]) -> String {
    let mut out = Vec::new();
    for event in events {
        encoder.push(event, &mut out);
    }
    String::from_utf8(out).unwrap()
}

proptest::proptest! {
    #![proptest_config(crate::fuzz::config())]

    #[test]
    fn text_chunks_read_lean_decode_as_parsed_ones_do(chunks in chat_stream()) {
        if !any_refused(&chunks) {
            let (mut lean, mut parsed) = (chat::Decoder::new(), chat::Decoder::parsing_all());
            for chunk in &chunks {
                proptest::prop_assert_eq!(lean.push(chunk.as_bytes()), parsed.push(chunk.as_bytes()));
            }
            proptest::prop_assert_eq!(lean.finish(), parsed.finish());
        }
    }

    #[test]
    fn messages_deltas_read_lean_decode_as_parsed_ones_do(events in messages_stream()) {
        if !any_refused(&events) {
            let (mut lean, mut parsed) = (messages::Decoder::new(), messages::Decoder::parsing_all());
            for event in &events {
                proptest::prop_assert_eq!(lean.push(event.as_bytes()), parsed.push(event.as_bytes()));
            }
            proptest::prop_assert_eq!(lean.finish(), parsed.finish());
            proptest::prop_assert_eq!(lean.dropped(), parsed.dropped());
        }
    }

    #[test]
    fn a_text_chunk_is_written_as_its_value_serialises(
        id in proptest::option::of(".{0,4}"),
        model in ".{0,4}",
        created in proptest::num::i64::ANY,
        thinking in proptest::bool::ANY,
        text in "(?s).{1,12}|[\\x00-\\x1f\"\\\\]{1,4}",
    ) {
        let mut encoder = chat::Encoder::new(&Answering { created, ..Answering::default() });
        written(&mut encoder, &[Event::Start { id: id.clone(), model: model.clone() }]);
        let delta = if thinking { Delta::Thinking(text.clone()) } else { Delta::Text(text.clone()) };
        let key = if thinking { "reasoning_content" } else { "content" };
        let envelope = |delta: Value| json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{ "index": 0, "delta": delta, "logprobs": Value::Null, "finish_reason": Value::Null }],
        });
        let expected = format!("data: {}\n\n", envelope(json!({ key: text })));
        proptest::prop_assert_eq!(written(&mut encoder, &[Event::Delta { index: 0, delta }]), expected);
        let start = Event::BlockStart { index: 1, block: super::ir::Block::ToolCall { id: "t".into(), name: "f".into() } };
        written(&mut encoder, &[start]);
        let arguments = Event::Delta { index: 1, delta: Delta::Arguments(text.clone()) };
        let call = json!({ "index": 0, "function": { "arguments": text } });
        let expected = format!("data: {}\n\n", envelope(json!({ "tool_calls": [call] })));
        proptest::prop_assert_eq!(written(&mut encoder, &[arguments]), expected);
    }

    #[test]
    fn a_content_delta_is_written_as_its_value_serialises(
        index in 0..usize::MAX,
        arguments in proptest::bool::ANY,
        text in "(?s).{0,12}|[\\x00-\\x1f\"\\\\]{1,4}",
    ) {
        let mut encoder = messages::Encoder::new(&Answering::default());
        let (delta, value) = match arguments {
            false => (Delta::Text(text.clone()), json!({ "type": "text_delta", "text": text })),
            true => (Delta::Arguments(text.clone()), json!({ "type": "input_json_delta", "partial_json": text })),
        };
        let expected = json!({ "type": "content_block_delta", "index": index, "delta": value });
        let expected = format!("event: content_block_delta\ndata: {expected}\n\n");
        proptest::prop_assert_eq!(written(&mut encoder, &[Event::Delta { index, delta }]), expected);
    }
}

#[test]
fn a_chat_stream_cut_before_its_finish_is_left_cut() {
    let mut decoder = chat::Decoder::new();
    let first = decoder.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#);
    assert_eq!(first.len(), 3, "start, block start, delta: {first:?}");
    assert_eq!(decoder.finish(), []);
    assert_eq!(decoder.push(b"[DONE]"), []);
}

#[test]
fn a_chat_stream_that_finished_but_lost_its_done_is_closed() {
    let mut decoder = chat::Decoder::new();
    decoder.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#);
    let finish = decoder.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
    assert_eq!(finish, [Event::BlockStop { index: 0 }]);
    assert_eq!(decoder.finish(), [Event::Stop(Stop::EndTurn), Event::End]);
}

#[test]
fn a_streamed_refusal_is_text_that_stops_as_a_refusal() {
    let mut decoder = chat::Decoder::new();
    decoder.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"refusal":"No."}}]}"#);
    decoder.push(br#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
    assert_eq!(decoder.push(b"[DONE]"), [Event::Stop(Stop::Refusal), Event::End]);
}

#[test]
fn parallel_tool_calls_close_the_open_block() {
    let mut decoder = chat::Decoder::new();
    let mut events = decoder.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Both."}}]}"#);
    events.extend(decoder.push(
        br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":""}},{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
    ));
    events.extend(decoder.push(
        br#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}}]}"#,
    ));
    let stops: Vec<_> =
        events.iter().filter(|e| matches!(e, Event::BlockStop { .. } | Event::BlockStart { .. })).collect();
    assert_eq!(stops.len(), 5, "text, call a, call b: each started after the last stopped: {events:?}");
    assert_eq!(
        events.last(),
        Some(&Event::Delta { index: 1, delta: Delta::Arguments("{\"x\":1}".into()) }),
        "late arguments go to their call"
    );
}

#[test]
fn a_messages_stream_cut_before_its_delta_is_left_cut() {
    let mut decoder = messages::Decoder::new();
    let events =
        decoder.push(br#"{"type":"message_start","message":{"id":"msg","model":"m","usage":{"input_tokens":3}}}"#);
    assert!(matches!(events.last(), Some(Event::Usage(u)) if u.prompt_tokens == 3), "{events:?}");
    assert_eq!(decoder.finish(), []);
}

#[test]
fn a_messages_stream_that_stopped_but_lost_its_stop_event_is_ended() {
    let mut decoder = messages::Decoder::new();
    decoder.push(br#"{"type":"message_start","message":{"id":"msg","model":"m"}}"#);
    let events =
        decoder.push(br#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":2}}"#);
    assert_eq!(events.last(), Some(&Event::Stop(Stop::ToolUse)));
    assert_eq!(decoder.finish(), [Event::End]);
}

#[test]
fn nothing_follows_an_error() {
    let mut decoder = messages::Decoder::new();
    decoder.push(br#"{"type":"message_start","message":{"id":"msg","model":"m"}}"#);
    let events = decoder.push(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
    assert_eq!(events, [Event::Error { kind: Some("overloaded_error".into()), message: "Overloaded".into() }]);
    assert_eq!(decoder.push(br#"{"type":"message_stop"}"#), []);
    assert_eq!(decoder.finish(), []);
}

#[test]
fn a_messages_start_carries_the_usage_that_came_with_it() {
    let mut encoder = messages::Encoder::new(&Answering::default());
    let usage =
        crate::pricing::Usage { prompt_tokens: 30, cached_tokens: 10, completion_tokens: 1, ..Default::default() };
    let wire = written(
        &mut encoder,
        &[
            Event::Start { id: Some("c".into()), model: "m".into() },
            Event::Usage(usage),
            Event::BlockStart { index: 0, block: super::ir::Block::Text },
        ],
    );
    let start = wire.split("\n\n").next().unwrap();
    assert!(start.contains(r#""input_tokens":20"#) && start.contains(r#""output_tokens":0"#), "{start}");
    assert!(start.contains(r#""cache_read_input_tokens":10"#), "{start}");
}
