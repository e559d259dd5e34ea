//! Real Gemini clients through the gateway's Gemini dialect: the official
//! google-genai Python SDK (`tests/sdk/genai_gemini.py`, pinned in
//! `tests/sdk/requirements.txt`) and Gemini CLI (pinned in
//! `tests/agents/package.json`), each with a gateway token as its API key,
//! on a `gemini` channel (passed through to the mock Gemini API) and on
//! `openai` and `anthropic` channels (translated through the internal
//! form). Asserts what the clients show and that each answer is billed
//! exactly, thoughts and cache reads included.

use crate::support;

use std::{path::PathBuf, time::Duration};

use gw_proto::pb;
use gw_tests::{
    cli::{self, Tap},
    harness::{self, eventually},
    mock::{
        google::auth::GEMINI_KEY,
        messages::ToolUse,
        upstream::{MockUpstream, Recorded, Script},
    },
};
use serde_json::{Value, json};
use support::{Gateway, UPSTREAM_KEY};

/// The model both clients ask for (Gemini CLI with `-m`).
const MODEL: &str = "gemini-2.5-flash";
/// What every upstream answers.
const REPLY: &str = "The heron counted 42 pebbles through Gemini";
/// The scripted usage: the whole prompt, its cached part, the completion
/// and its part spent thinking.
const PROMPT: i64 = 1000;
const CACHED: i64 = 400;
const COMPLETION: i64 = 200;
const THOUGHTS: i64 = 50;
/// One answer's cost at $0.30 per 1M prompt tokens, $0.075 cached and
/// $2.50 out (thoughts too): 600 × 0.3 + 400 × 0.075 + 200 × 2.5.
const COST_MICROS: i64 = 180 + 30 + 500;
const START_BALANCE: i64 = 100_000_000;
/// Where the upstream's chat-like calls go, by channel kind.
const GEMINI_STREAM: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
const GEMINI_GENERATE: &str = "/v1beta/models/gemini-2.5-flash:generateContent";

/// The channel kinds a Gemini client is tested on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gemini,
    OpenAi,
    Anthropic,
}

struct Fixture {
    gw: Gateway,
    upstream: MockUpstream,
    kind: Kind,
}

// === set-up ===

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Gemini => "gemini",
            Kind::OpenAi => "openai",
            Kind::Anthropic => "anthropic",
        }
    }

    /// The usage a Gemini client is shown for one answer: Gemini's own
    /// split, the chat dialect's reasoning count as thoughts, and the
    /// messages dialect's output (which does not count thinking apart) as
    /// candidates.
    fn usage(self) -> Value {
        let (candidates, thoughts) = match self {
            Kind::Gemini | Kind::OpenAi => (COMPLETION - THOUGHTS, json!(THOUGHTS)),
            Kind::Anthropic => (COMPLETION, Value::Null),
        };
        json!({ "prompt": PROMPT, "cached": CACHED, "candidates": candidates, "thoughts": thoughts,
                "total": PROMPT + COMPLETION })
    }

    /// The reasoning tokens a usage record holds.
    fn reasoning(self) -> i64 {
        if self == Kind::Anthropic { 0 } else { THOUGHTS }
    }

    /// Whether `r` is one of this kind's chat-like upstream calls.
    fn is_chat_call(self, r: &Recorded) -> bool {
        match self {
            Kind::Gemini => r.path == GEMINI_STREAM || r.path == GEMINI_GENERATE,
            Kind::OpenAi => r.path == "/v1/chat/completions",
            Kind::Anthropic => r.path == "/v1/messages",
        }
    }
}

fn script(tool_use: Option<ToolUse>) -> Script {
    Script {
        reply: REPLY.into(),
        prompt_tokens: PROMPT as u32,
        cached_tokens: CACHED as u32,
        completion_tokens: COMPLETION as u32,
        reasoning_tokens: THOUGHTS as u32,
        tool_use,
        ..Script::default()
    }
}

/// A gateway whose only [`MODEL`] channel is of `kind` on a mock upstream.
async fn fixture(kind: Kind) -> Fixture {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let model = pb::Model {
        id: MODEL.into(),
        category: "chat".into(),
        input_price_micros: 300_000,
        cached_price_micros: 75_000,
        output_price_micros: 2_500_000,
        ..Default::default()
    };
    gw.admin().create_model(model).await.expect("model create");
    let (base_url, key) = match kind {
        Kind::Gemini => (upstream.google().gemini_base_url(), GEMINI_KEY),
        Kind::OpenAi | Kind::Anthropic => (upstream.base_url(), UPSTREAM_KEY),
    };
    let channel = pb::Channel {
        name: format!("{}-upstream", kind.name()),
        r#type: kind.name().into(),
        base_url,
        api_key: key.into(),
        has_key: true,
        models: vec![MODEL.into()],
        groups: vec!["default".into(), "vip".into()],
        weight: 1,
        ..Default::default()
    };
    gw.admin().create_channel(channel).await.expect("channel create");
    upstream.set_script(script(None));
    gw.synced().await;
    Fixture { gw, upstream, kind }
}

// === the google-genai SDK ===

/// Runs `genai_gemini.py mode args` against the fixture's data plane with
/// `key`; `api_version` overrides the SDK's own.
async fn genai(f: &Fixture, key: &str, api_version: Option<&str>, args: &[&str]) -> Value {
    let base_url = format!("http://{}", f.gw.cluster.data_planes[0].addr);
    let mut env = vec![("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", key), ("GW_MODEL", MODEL)];
    if let Some(version) = api_version {
        env.push(("GW_GENAI_API_VERSION", version));
    }
    harness::sdk("genai_gemini.py", args, &env).await
}

/// Waits for `n` usage records of [`MODEL`], each exactly one scripted
/// answer of `kind`, and for the balance to drop by their cost.
async fn assert_billed(f: &Fixture, n: usize) {
    assert!(n > 0, "nothing to bill: {:#?}", f.upstream.requests());
    let records = f.gw.wait_for_usage(n).await;
    for record in &records {
        assert_eq!(record["model"], MODEL, "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        let counts =
            ["prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens"].map(|k| record[k].as_i64());
        assert_eq!(counts, [PROMPT, CACHED, COMPLETION, f.kind.reasoning()].map(Some), "{record}");
        assert_eq!(record["cost_micros"].as_i64(), Some(COST_MICROS), "{record}");
    }
    let spent = COST_MICROS * n as i64;
    eventually("the balance to drop by the usage billed", Duration::from_secs(15), || async {
        (f.gw.balance().await == START_BALANCE - spent).then_some(())
    })
    .await;
}

/// `basic`: one answer, one stream, a token count and the model list.
async fn genai_basic(kind: Kind, api_version: Option<&str>) {
    let f = fixture(kind).await;
    let result = genai(&f, &f.gw.key, api_version, &["basic"]).await;
    assert_eq!(result["text"], REPLY, "{result}");
    assert_eq!(result["usage"], kind.usage(), "{result}");
    assert_eq!(result["streamed"], REPLY, "{result}");
    assert!(result["chunks"].as_i64() > Some(1), "the answer came in pieces: {result}");
    assert_eq!(result["streamed_usage"], kind.usage(), "{result}");

    let sent: Vec<Recorded> = f.upstream.requests().into_iter().filter(|r| kind.is_chat_call(r)).collect();
    assert_eq!(sent.len(), 2, "{:#?}", f.upstream.requests());
    match kind {
        Kind::Gemini => {
            assert_eq!(result["thoughts"], gw_tests::mock::google::THOUGHT, "thoughts pass through: {result}");
            assert_eq!(result["counted"], PROMPT, "the Gemini API's own count: {result}");
            for r in &sent {
                assert_eq!(r.header("x-goog-api-key"), Some(GEMINI_KEY), "the channel's key, not the client's");
            }
            assert_eq!(sent[0].body["systemInstruction"]["parts"][0]["text"], "You are terse.", "{:?}", sent[0]);
            assert_eq!(sent[1].query.as_deref(), Some("alt=sse"), "{:?}", sent[1]);
        }
        Kind::OpenAi => {
            assert!(result["counted"].as_i64() > Some(0), "counted locally: {result}");
            assert_eq!(sent[0].body["model"], MODEL);
            assert_eq!(sent[0].body["messages"][0]["role"], "system", "{}", sent[0].body);
            assert_eq!(sent[1].body["stream"], true, "{}", sent[1].body);
        }
        Kind::Anthropic => {
            assert_eq!(result["counted"], PROMPT, "the messages API's own count: {result}");
            assert!(sent[0].body["system"].to_string().contains("You are terse."), "{}", sent[0].body);
            assert_eq!(sent[1].body["stream"], true, "{}", sent[1].body);
        }
    }
    assert_billed(&f, 2).await;
    let models: Vec<&str> = result["models"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(models.contains(&"models/gemini-2.5-flash"), "models.list: {result}");
}

#[tokio::test]
async fn google_genai_sdk_generates_streams_counts_and_lists_on_a_gemini_channel() {
    genai_basic(Kind::Gemini, None).await;
}

#[tokio::test]
async fn google_genai_sdk_on_v1beta_as_gemini_cli_calls_it_works_on_a_gemini_channel() {
    genai_basic(Kind::Gemini, Some("v1beta")).await;
}

#[tokio::test]
async fn google_genai_sdk_on_an_openai_channel_is_translated_and_billed_exactly() {
    genai_basic(Kind::OpenAi, None).await;
}

#[tokio::test]
async fn google_genai_sdk_on_an_anthropic_channel_is_translated_and_billed_exactly() {
    genai_basic(Kind::Anthropic, None).await;
}

/// A function-calling round: the model calls `get_weather`, the SDK sends
/// the result back and the model answers.
async fn genai_function_round(kind: Kind) {
    let f = fixture(kind).await;
    let tool = ToolUse { name: None, input: json!({ "location": "Paris" }) };
    f.upstream.set_script(script(Some(tool)));
    let called = genai(&f, &f.gw.key, None, &["call"]).await;
    assert_eq!(called["calls"], json!([{ "name": "get_weather", "args": { "location": "Paris" } }]), "{called}");
    // The messages mock calls its tool whenever tools are offered.
    f.upstream.set_script(script(None));
    let turn = called["turn"].to_string();
    let answered = genai(&f, &f.gw.key, None, &["answer", &turn]).await;
    assert_eq!(answered["text"], REPLY, "{answered}");

    let sent: Vec<Recorded> = f.upstream.requests().into_iter().filter(|r| kind.is_chat_call(r)).collect();
    assert_eq!(sent.len(), 2, "{:#?}", f.upstream.requests());
    let last = &sent[1].body;
    match kind {
        Kind::Gemini => {
            let part = &last["contents"][2]["parts"][0]["functionResponse"];
            assert_eq!(
                (&part["name"], &part["response"]["forecast"]),
                (&json!("get_weather"), &json!("Sunny, 21 degrees")),
                "{last}"
            );
        }
        Kind::OpenAi => {
            let result = last["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
            assert_eq!(result["role"], "tool", "{last}");
            assert!(result["content"].to_string().contains("Sunny, 21 degrees"), "{last}");
        }
        Kind::Anthropic => {
            let result = &last["messages"][2]["content"][0];
            assert_eq!(result["type"], "tool_result", "{last}");
            assert!(result["content"].to_string().contains("Sunny, 21 degrees"), "{last}");
            let blocks = last["messages"][1]["content"].as_array().cloned().unwrap_or_default();
            let call = blocks.iter().find(|b| b["type"] == "tool_use").cloned().unwrap_or_default();
            assert_eq!(call["name"], "get_weather", "the model's call went back before its result: {last}");
            assert_eq!(result["tool_use_id"], call["id"], "{last}");
        }
    }
    assert_billed(&f, 2).await;
}

#[tokio::test]
async fn google_genai_sdk_completes_a_function_calling_round_on_a_gemini_channel() {
    genai_function_round(Kind::Gemini).await;
}

#[tokio::test]
async fn google_genai_sdk_completes_a_function_calling_round_translated_to_an_anthropic_channel() {
    genai_function_round(Kind::Anthropic).await;
}

#[tokio::test]
async fn google_genai_sdk_with_an_unknown_key_is_refused_in_geminis_error_shape() {
    let f = fixture(Kind::Gemini).await;
    let refused = genai(&f, "sk-not-a-token-of-this-gateway", None, &["refused"]).await;
    assert_eq!(refused["refused"], true, "{refused}");
    assert_eq!(refused["code"], 401, "{refused}");
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("无效的令牌")), "{refused}");
    assert_eq!(f.upstream.request_count(), 0, "{:#?}", f.upstream.requests());
}

// === Gemini CLI ===

/// `gemini -p <prompt> -m MODEL` against the tap with a gateway token as
/// its Gemini API key, in a fresh HOME whose settings pick API-key auth
/// and turn off usage statistics, telemetry and update checks; the working
/// directory (holding `files`, name and text) is trusted by environment so
/// headless mode runs.
async fn gemini_cli(tap: &Tap, key: &str, prompt: &str, files: &[(&str, &str)]) -> cli::Run {
    let (home, work) = cli::home();
    for (name, text) in files {
        std::fs::write(work.join(name), text).expect("a file for the CLI");
    }
    let settings = json!({
        "security": { "auth": { "selectedType": "gemini-api-key" } },
        "privacy": { "usageStatisticsEnabled": false },
        "telemetry": { "enabled": false },
        "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false }
    });
    let dir = home.path().join(".gemini");
    std::fs::create_dir_all(&dir).expect("settings dir");
    std::fs::write(dir.join("settings.json"), settings.to_string()).expect("settings");
    let env = [
        ("HOME", home.path().display().to_string()),
        ("GOOGLE_GEMINI_BASE_URL", format!("http://{}", tap.addr())),
        ("GEMINI_API_KEY", key.to_owned()),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_owned()),
    ];
    let program = PathBuf::from(cli::AGENTS_BIN).join("gemini");
    cli::run(&program, &["-p", prompt, "-m", MODEL], &work, &env).await
}

async fn gemini_cli_round(kind: Kind) {
    let f = fixture(kind).await;
    let tap = Tap::start(f.gw.cluster.data_planes[0].addr).await.expect("tap");
    let run = gemini_cli(&tap, &f.gw.key, "Count the pebbles.", &[]).await;
    cli::assert_answered(&run, REPLY, &tap);
    let sent: Vec<Recorded> = f.upstream.requests().into_iter().filter(|r| kind.is_chat_call(r)).collect();
    assert!(!sent.is_empty(), "{:#?}", f.upstream.requests());
    for r in &sent {
        match kind {
            Kind::Gemini => {
                assert_eq!((r.path.as_str(), r.query.as_deref()), (GEMINI_STREAM, Some("alt=sse")), "{r:?}");
                assert_eq!(r.header("x-goog-api-key"), Some(GEMINI_KEY), "the channel's key, not the client's");
                assert!(r.body["tools"][0]["functionDeclarations"].as_array().is_some_and(|t| !t.is_empty()), "{r:?}");
            }
            Kind::OpenAi => {
                assert_eq!(r.body["model"], MODEL, "{}", r.body);
                assert!(r.body["tools"].as_array().is_some_and(|t| !t.is_empty()), "the CLI's tools: {}", r.body);
            }
            Kind::Anthropic => {
                assert_eq!(r.body["model"], MODEL, "{}", r.body);
                assert_eq!(r.header("x-api-key"), Some(UPSTREAM_KEY));
                assert!(r.body["tools"].as_array().is_some_and(|t| !t.is_empty()), "the CLI's tools: {}", r.body);
            }
        }
    }
    let billable = tap.exchanges().iter().filter(|e| e.status == 200 && e.target.contains("enerateContent")).count();
    assert_eq!(billable, sent.len(), "each model call the CLI made reached the upstream once:{}", tap.report());
    assert_billed(&f, billable).await;
}

#[tokio::test]
async fn gemini_cli_answers_through_a_gemini_channel_and_is_billed() {
    gemini_cli_round(Kind::Gemini).await;
}

#[tokio::test]
async fn gemini_cli_answers_through_an_openai_channel_and_is_billed() {
    gemini_cli_round(Kind::OpenAi).await;
}

#[tokio::test]
async fn gemini_cli_answers_through_an_anthropic_channel_and_is_billed() {
    gemini_cli_round(Kind::Anthropic).await;
}

#[tokio::test]
async fn gemini_cli_runs_a_tool_the_model_calls_and_sends_its_result_back_through_a_gemini_channel() {
    let f = fixture(Kind::Gemini).await;
    let tool = ToolUse { name: Some("read_file".into()), input: json!({ "file_path": "pebbles.txt" }) };
    f.upstream.set_script(script(Some(tool)));
    let tap = Tap::start(f.gw.cluster.data_planes[0].addr).await.expect("tap");
    let run =
        gemini_cli(&tap, &f.gw.key, "How many pebbles are in pebbles.txt?", &[("pebbles.txt", "42 pebbles\n")]).await;
    cli::assert_answered(&run, REPLY, &tap);
    let sent: Vec<Recorded> = f.upstream.requests().into_iter().filter(|r| f.kind.is_chat_call(r)).collect();
    assert_eq!(sent.len(), 2, "the call, then its result:{}", tap.report());
    let turns = sent[1].body["contents"].as_array().cloned().unwrap_or_default();
    let parts = |turn: Option<&Value>| turn.and_then(|t| t["parts"].as_array().cloned()).unwrap_or_default();
    let call = parts(turns.iter().rev().nth(1)).into_iter().find(|p| p.get("functionCall").is_some());
    assert_eq!(call.map(|p| p["functionCall"]["name"].clone()), Some(json!("read_file")), "{}", sent[1].body);
    let result = parts(turns.last()).into_iter().find(|p| p.get("functionResponse").is_some()).unwrap_or_default();
    assert_eq!(result["functionResponse"]["name"], "read_file", "{}", sent[1].body);
    assert!(
        result["functionResponse"].to_string().contains("42 pebbles"),
        "the file's text went back: {}",
        sent[1].body
    );
    assert_billed(&f, 2).await;
}
