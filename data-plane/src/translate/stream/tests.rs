use super::*;

#[test]
fn events_are_framed_for_the_wire() {
    let named = SseEvent::named("message_stop", &json!({ "type": "message_stop" }));
    assert_eq!(named.to_bytes(), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    let chat = [SseEvent::data(&json!({ "a": 1 })), SseEvent::done()];
    assert_eq!(SseEvent::encode(&chat), "data: {\"a\":1}\n\ndata: [DONE]\n\n");
}

/// `push` as it was: every chunk parsed into a value.
fn push_parsed(stream: &mut ChatToMessagesStream, data: &[u8]) -> Vec<SseEvent> {
    if stream.ended {
        return Vec::new();
    }
    if data.trim_ascii() == b"[DONE]" {
        return stream.complete(true);
    }
    match serde_json::from_slice::<Value>(data) {
        Ok(chunk) => stream.push_chunk(&chunk, Vec::new()),
        Err(_) => Vec::new(),
    }
}

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
fn chat_stream() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
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

proptest::proptest! {
    #![proptest_config(crate::fuzz::config())]

    #[test]
    fn a_content_delta_is_written_as_its_value_serialises(
        index in proptest::num::u64::ANY,
        arguments in proptest::bool::ANY,
        text in "(?s).{0,12}|[\\x00-\\x1f\"\\\\]{1,4}",
    ) {
        let (content, delta) = match arguments {
            false => (Content::Text, json!({ "type": "text_delta", "text": text })),
            true => (Content::Arguments, json!({ "type": "input_json_delta", "partial_json": text })),
        };
        proptest::prop_assert_eq!(content_delta(index, content, &text), block_delta(index, delta));
    }

    #[test]
    fn a_text_chunk_is_written_as_its_value_serialises(
        id in crate::fuzz::json(),
        model in crate::fuzz::json(),
        created in proptest::num::i64::ANY,
        thinking in proptest::bool::ANY,
        text in "(?s).{0,12}|[\\x00-\\x1f\"\\\\]{1,4}",
    ) {
        let stream = MessagesToChatStream { id, model, created, ..MessagesToChatStream::new(false, 0) };
        let key = if thinking { "reasoning_content" } else { "content" };
        let parsed = stream.chunk(json!({ key: text }), None);
        proptest::prop_assert_eq!(stream.text_chunk(thinking, &text), parsed);
        let call = json!({ "index": created.unsigned_abs(), "function": { "arguments": text } });
        let parsed = stream.chunk(json!({ "tool_calls": [call] }), None);
        proptest::prop_assert_eq!(stream.arguments_chunk(created.unsigned_abs(), &text), parsed);
    }

    #[test]
    fn messages_deltas_read_lean_translate_as_parsed_ones_do(events in messages_stream()) {
        let refused = |e: &String| {
            serde_json::from_slice::<Value>(e.as_bytes()).is_err()
                && serde_json::from_slice::<serde::de::IgnoredAny>(e.as_bytes()).is_ok()
        };
        if !events.iter().any(refused) {
            let (mut lean, mut parsed) = (MessagesToChatStream::new(true, 1), MessagesToChatStream::new(true, 1));
            for event in &events {
                proptest::prop_assert_eq!(lean.push(event.as_bytes()), push_event_parsed(&mut parsed, event.as_bytes()));
            }
            proptest::prop_assert_eq!(lean.finish(), parsed.finish());
            proptest::prop_assert_eq!(lean.usage(), parsed.usage());
        }
    }

    #[test]
    fn text_chunks_read_lean_translate_as_parsed_ones_do(chunks in chat_stream()) {
        // Chunks a parsed value refuses but a lenient reading takes (a
        // lone surrogate in a skipped field) are translated by their
        // text now; everything else must come out the same.
        let refused = |c: &String| {
            c != "[DONE]"
                && serde_json::from_slice::<Value>(c.as_bytes()).is_err()
                && serde_json::from_slice::<serde::de::IgnoredAny>(c.as_bytes()).is_ok()
        };
        if !chunks.iter().any(refused) {
            let (mut lean, mut parsed) = (ChatToMessagesStream::new(), ChatToMessagesStream::new());
            for chunk in &chunks {
                proptest::prop_assert_eq!(lean.push(chunk.as_bytes()), push_parsed(&mut parsed, chunk.as_bytes()));
            }
            proptest::prop_assert_eq!(lean.finish(), parsed.finish());
            proptest::prop_assert_eq!(lean.usage(), parsed.usage());
        }
    }
}

/// `MessagesToChatStream::push` as it was: every event parsed.
fn push_event_parsed(stream: &mut MessagesToChatStream, data: &[u8]) -> Vec<SseEvent> {
    if stream.ended {
        return Vec::new();
    }
    match serde_json::from_slice::<Value>(data) {
        Ok(event) => stream.push_event(&event),
        Err(_) => Vec::new(),
    }
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

#[test]
fn a_chat_stream_cut_before_its_finish_is_left_cut() {
    let mut stream = ChatToMessagesStream::new();
    let first = stream.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#);
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(stream.finish(), Vec::new());
    assert_eq!(stream.push(b"[DONE]"), Vec::new());
}

#[test]
fn a_chat_stream_that_finished_but_lost_its_done_is_closed() {
    let mut stream = ChatToMessagesStream::new();
    stream.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#);
    stream.push(br#"{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
    let names: Vec<_> = stream.finish().into_iter().filter_map(|e| e.event).collect();
    assert_eq!(names, ["message_delta", "message_stop"]);
}

#[test]
fn a_messages_stream_cut_before_its_delta_is_left_cut() {
    let mut stream = MessagesToChatStream::new(true, 1);
    stream.push(br#"{"type":"message_start","message":{"id":"msg","model":"m","usage":{"input_tokens":3}}}"#);
    assert_eq!(stream.finish(), Vec::new());
    assert_eq!(stream.usage().map(|u| u.prompt_tokens), Some(3));
}

#[test]
fn nothing_follows_an_error() {
    let mut stream = MessagesToChatStream::new(false, 1);
    stream.push(br#"{"type":"message_start","message":{"id":"msg","model":"m"}}"#);
    let out = stream.push(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
    assert_eq!(out.len(), 1);
    assert!(out[0].data.contains("overloaded_error"), "{out:?}");
    assert_eq!(stream.push(br#"{"type":"message_stop"}"#), Vec::new());
    assert_eq!(stream.finish(), Vec::new());
}
