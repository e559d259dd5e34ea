//! Claude Code (pinned in `tests/agents/package.json`) through the gateway
//! to Anthropic models bought on the clouds: a `bedrock` channel on the
//! SigV4-checking Bedrock mock (`invoke-with-response-stream`, AWS event
//! stream framing) and a `vertex` channel on the Google mock
//! (`streamRawPredict` with a service-account token). Claude Code speaks
//! the messages API to the gateway as it does to Anthropic; what it prints
//! and what it is billed are asserted.

use crate::support;

use std::{collections::HashMap, path::PathBuf, time::Duration};

use gw_proto::pb;
use gw_tests::{
    bedrock_mock::BedrockMock,
    cli::{self, Tap},
    harness::eventually,
    mock::upstream::{MockUpstream, Script},
};
use serde_json::json;
use support::Gateway;

/// The model Claude Code is told to use (as in `agents.rs`).
const CLAUDE_MODEL: &str = "claude-opus-5-5";
const START_BALANCE: i64 = 100_000_000;
/// Bedrock: the mock's region, a SigV4 key pair, the model's Bedrock id and
/// what the mock answers and bills (uncached input, cache reads, cache
/// writes, output).
const REGION: &str = "us-east-1";
const AKID: &str = "AKIDCLAUDECODE0001";
const SECRET: &str = "cLaUdEcOdE/SeCrEt+KeY0123456789abcdefAB";
const ON_BEDROCK: &str = "us.anthropic.claude-opus-5-5-v1:0";
const BEDROCK_REPLY: &str = "Hello from Bedrock";
const BEDROCK_USAGE: (i64, i64, i64, i64) = (11, 20, 30, 7);
/// Vertex: the project, location and the model's Vertex name.
const PROJECT: &str = "mock-project";
const LOCATION: &str = "us-east5";
const ON_VERTEX: &str = "claude-opus-5-5@20261101";
const VERTEX_REPLY: &str = "The heron counted 42 pebbles on Vertex";

/// The model priced per 1M tokens: $3 in, $0.30 cache reads, $3.75 cache
/// writes, $15 out.
fn model() -> pb::Model {
    pb::Model {
        id: CLAUDE_MODEL.into(),
        category: "chat".into(),
        input_price_micros: 3_000_000,
        cached_price_micros: 300_000,
        cache_write_5m_price_micros: 3_750_000,
        output_price_micros: 15_000_000,
        ..Default::default()
    }
}

/// The cost in micro-USD of one answer's usage at [`model`]'s prices
/// (`uncached`, cache reads, cache writes, output), rounded up.
fn cost((uncached, read, write, output): (i64, i64, i64, i64)) -> i64 {
    let micro_micros = uncached * 3_000_000 + read * 300_000 + write * 3_750_000 + output * 15_000_000;
    (micro_micros + 999_999) / 1_000_000
}

/// A channel serving [`CLAUDE_MODEL`] as `upstream_model`.
fn channel(
    kind: &str,
    base_url: String,
    key: String,
    upstream_model: &str,
    settings: &[(&str, String)],
) -> pb::Channel {
    pb::Channel {
        name: format!("claude-on-{kind}"),
        r#type: kind.into(),
        base_url,
        api_key: key,
        has_key: true,
        models: vec![CLAUDE_MODEL.into()],
        model_map: HashMap::from([(CLAUDE_MODEL.to_owned(), upstream_model.to_owned())]),
        groups: vec!["default".into(), "vip".into()],
        weight: 1,
        settings: settings.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
        ..Default::default()
    }
}

async fn gateway(channel: pb::Channel) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.admin().create_model(model()).await.expect("model create");
    gw.admin().create_channel(channel).await.expect("channel create");
    gw.synced().await;
    gw
}

/// `claude -p <prompt> --model CLAUDE_MODEL` against the tap, with a fresh
/// HOME and everything but the model requests turned off (as in
/// `agents.rs`).
async fn claude(tap: &Tap, key: &str, prompt: &str) -> cli::Run {
    let (home, work) = cli::home();
    let env = [
        ("HOME", home.path().display().to_string()),
        ("CLAUDE_CONFIG_DIR", home.path().join(".claude").display().to_string()),
        ("ANTHROPIC_BASE_URL", format!("http://{}", tap.addr())),
        ("ANTHROPIC_API_KEY", key.to_owned()),
        ("ANTHROPIC_SMALL_FAST_MODEL", CLAUDE_MODEL.to_owned()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", CLAUDE_MODEL.to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("DISABLE_BUG_COMMAND", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_TERMINAL_TITLE", "1".to_owned()),
        ("IS_SANDBOX", "1".to_owned()),
    ];
    let program = PathBuf::from(cli::AGENTS_BIN).join("claude");
    cli::run(&program, &["-p", prompt, "--model", CLAUDE_MODEL], &work, &env).await
}

/// Waits until each successful `/v1/messages` call the CLI made is one
/// usage record of the scripted counts at exactly `cost` micro-USD, and
/// the balance dropped by their sum.
async fn assert_billed(gw: &Gateway, tap: &Tap, usage: (i64, i64, i64, i64)) {
    let path = |e: &cli::Exchange| e.target.split('?').next().unwrap_or_default().to_owned();
    let billable = tap.exchanges().iter().filter(|e| e.status == 200 && path(e) == "/v1/messages").count();
    assert!(billable > 0, "no successful model request:{}", tap.report());
    let records = gw.wait_for_usage(billable).await;
    let (uncached, read, write, output) = usage;
    for record in &records {
        assert_eq!(record["model"], CLAUDE_MODEL, "{record}");
        assert_eq!(record["endpoint"], "/v1/messages", "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        let counts = ["prompt_tokens", "cached_tokens", "cache_write_5m_tokens", "completion_tokens"]
            .map(|k| record[k].as_i64());
        assert_eq!(counts, [uncached + read + write, read, write, output].map(Some), "{record}");
        assert_eq!(record["cost_micros"].as_i64(), Some(cost(usage)), "{record}");
    }
    let spent = cost(usage) * billable as i64;
    eventually("the balance to drop by the usage billed", Duration::from_secs(15), || async {
        (gw.balance().await == START_BALANCE - spent).then_some(())
    })
    .await;
}

#[tokio::test]
async fn claude_code_answers_through_a_bedrock_channel_signed_with_sigv4_and_is_billed() {
    let config = json!({ "region": REGION, "credentials": { AKID: { "secret": SECRET, "token": null } } });
    let mock = BedrockMock::start(&config).await.expect("bedrock mock");
    let settings = [("region", REGION.to_owned()), ("auth", "sigv4".to_owned())];
    let gw = gateway(channel("bedrock", mock.base_url(), format!("{AKID}:{SECRET}"), ON_BEDROCK, &settings)).await;
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await.expect("tap");

    let run = claude(&tap, &gw.key, "Count the pebbles.").await;
    cli::assert_answered(&run, BEDROCK_REPLY, &tap);
    let received = mock.requests().await;
    assert!(!received.is_empty(), "nothing reached Bedrock:{}", tap.report());
    for r in &received {
        assert_eq!(r["refused"], false, "every request was signed right: {r}");
        assert_eq!(r["model"], ON_BEDROCK, "{r}");
        let operation = r["operation"].as_str().unwrap_or_default();
        assert!(["invoke", "invoke-with-response-stream"].contains(&operation), "{r}");
        assert_eq!(r["body"]["anthropic_version"], "bedrock-2023-05-31", "{r}");
        assert!(r["body"].get("model").is_none(), "{r}");
    }
    assert!(received.iter().any(|r| r["operation"] == "invoke-with-response-stream"), "{received:?}");
    assert_billed(&gw, &tap, BEDROCK_USAGE).await;
}

#[tokio::test]
async fn claude_code_answers_through_a_vertex_channel_with_a_service_account_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let google = upstream.google();
    let settings =
        [("project", PROJECT.to_owned()), ("location", LOCATION.to_owned()), ("token_url", google.token_url())];
    let key = google.service_account("claude-code");
    let gw = gateway(channel("vertex", google.vertex_base_url(PROJECT, LOCATION), key, ON_VERTEX, &settings)).await;
    // 11 prompt tokens of which 4 read from the cache and 3 written to it.
    let script = Script { reply: VERTEX_REPLY.into(), cached_tokens: 4, cache_write_5m_tokens: 3, ..Script::default() };
    upstream.set_script(script);
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await.expect("tap");

    let run = claude(&tap, &gw.key, "Count the pebbles.").await;
    cli::assert_answered(&run, VERTEX_REPLY, &tap);
    let prefix = format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/anthropic/models/{ON_VERTEX}:");
    let sent: Vec<_> = upstream.requests().into_iter().filter(|r| r.path.starts_with(&prefix)).collect();
    assert!(!sent.is_empty(), "nothing reached Vertex: {:#?}", upstream.requests());
    for r in &sent {
        assert!(r.path.ends_with(":streamRawPredict") || r.path.ends_with(":rawPredict"), "{r:?}");
        assert_eq!(r.body["anthropic_version"], "vertex-2023-10-16", "{}", r.body);
        assert!(r.body.get("model").is_none(), "{}", r.body);
        assert!(r.header("authorization").is_some_and(|a| a.starts_with("Bearer ")), "{r:?}");
    }
    assert_eq!(google.tokens_granted(), 1, "one token for the whole run, not one per request");
    let usage: (i64, i64, i64, i64) = (11 - 4 - 3, 4, 3, 7);
    assert_billed(&gw, &tap, usage).await;
}
